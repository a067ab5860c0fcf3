"""What every part of the store shares: the session that commits or reports, the reading
session that treats stored values as input, and the store's clock."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from stepwise.errors import InputError, Problem, StepwiseError
from stepwise.run.store.checked import checked


def now() -> datetime:
    """Naive UTC: portable across SQLite and PostgreSQL `timestamp without time zone`."""
    return datetime.now(UTC).replace(tzinfo=None)


def epoch(t: datetime) -> float:
    """Seconds since the epoch of a time the store holds (naive UTC, see `now`): what the
    probe's records and the planned windows are compared in."""
    return t.replace(tzinfo=UTC).timestamp()


def redact(url: str) -> str:
    """A store URL without its password, for messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


class StoreBase:
    """Access to one store. Every method commits before returning: what it says happened is
    durable."""

    def __init__(self, engine: Engine, url: str):
        self.engine = engine
        self.url = url

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s:
            try:
                yield s
                s.commit()
            except SQLAlchemyError as exc:
                # a damaged file, a server gone, a value too long for a column: reported,
                # not a crash
                s.rollback()
                raise StepwiseError(
                    Problem(
                        f"state store error: {getattr(exc, 'orig', None) or exc}",
                        file=redact(self.url),
                    )
                ) from None
            except BaseException:
                s.rollback()
                raise

    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A session for reading rows back: what the store holds is input like a file (anyone
        who can write the file can put anything in it). A value the driver cannot even decode
        (a timestamp that is not one, JSON that is not JSON) is an InputError, as is a row that
        `checked` refuses."""
        try:
            with self.session() as s:
                yield s
        except (ValueError, TypeError, OverflowError, KeyError) as exc:
            raise InputError(
                Problem(
                    f"the state store is damaged: a value cannot be read ({type(exc).__name__}: "
                    f"{str(exc)[:200]})",
                    file=redact(self.url),
                    field="--store",
                    hint="the store was changed outside stepwise: restore it from a backup, "
                    "or give a new one with --store",
                )
            ) from None

    def _checked(self, rows: Iterable[Any]) -> list[Any]:
        return checked(rows, redact(self.url))

    def close(self) -> None:
        self.engine.dispose()
