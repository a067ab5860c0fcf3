"""The durable state store: runs, units, per-host task results, node versions, markers.

SQLite by default (one file per cloud), PostgreSQL for teams; any SQLAlchemy URL works. The
schema is migrated with Alembic when the store is opened, so an old store file just works.
`Store` is made of its records by idea (`runs.py`, `units.py`, `cloud.py`, over `base.py`);
this module opens it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from stepwise.errors import InputError, Problem, StepwiseError
from stepwise.run.store import schema
from stepwise.run.store.base import now, redact
from stepwise.run.store.cloud import PROGRESS, CloudRecords
from stepwise.run.store.location import ENV_VAR, default_store_url, existing_store_url  # noqa: F401 - re-exported
from stepwise.run.store.runs import RunInfo, RunOrigin, RunRecords
from stepwise.run.store.units import UnitRecords

__all__ = [
    "ALEMBIC_DIR",
    "PROGRESS",
    "RunInfo",
    "RunOrigin",
    "Store",
    "existing_store",
    "migrate",
    "now",
    "open_store",
    "redact",
]

ALEMBIC_DIR = schema.ALEMBIC_DIR
migrate = schema.migrate


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL + NORMAL survives a SIGKILL of stepwise (only an OS crash could lose the last commit),
    # and lets `status` read while a run writes.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


class Store(RunRecords, UnitRecords, CloudRecords):
    """Access to one store: its runs, units and what it knows of the cloud. Every method
    commits before returning: what it says happened is durable."""


def open_store(url: str, *, create: bool = True) -> Store | None:
    """Open the store at a SQLAlchemy URL, creating (when `create`) and migrating it as needed.
    With `create=False` a store that does not exist or is empty gives None: nothing is made.
    A database that is not a stepwise store, or one from a newer stepwise, is refused untouched."""
    url, path = _checked_url(url)
    if (
        path is not None
        and str(path) != ":memory:"
        and not schema.prepare_sqlite_file(path, create)
    ):
        return None
    engine = None
    try:
        engine = create_engine(url, future=True, pool_pre_ping=True)
        if not _migrated(engine, url, path, create):
            return None
    except (ArgumentError, ModuleNotFoundError) as exc:
        _dispose(engine)
        raise InputError(
            Problem(
                f"cannot use state store URL: {exc}",
                field="--store",
                hint="use sqlite:///path/file.sqlite or postgresql+psycopg://user:pw@host/db "
                "(PostgreSQL needs `pip install 'stepwise[postgres]'`)",
            )
        ) from None
    except (SQLAlchemyError, OSError, ValueError) as exc:
        _dispose(engine)
        raise StepwiseError(
            Problem(
                f"cannot open the state store {redact(url)}: {getattr(exc, 'orig', None) or exc}",
                hint="check the URL, that the server runs and the credentials",
            )
        ) from None
    except StepwiseError:
        _dispose(engine)
        raise
    return Store(engine, url)


def _checked_url(url: str) -> tuple[str, Path | None]:
    """The URL with its driver spelled out, and for SQLite the database file; a URL that
    cannot be used is an InputError."""
    try:
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url[len("postgresql://") :]
        parsed = make_url(url)
        parsed.port  # noqa: B018 - a port that is not a number raises here, not deep in a driver
    except (ArgumentError, ValueError, TypeError) as exc:
        raise InputError(
            Problem(
                f"cannot use state store URL: {exc}",
                field="--store",
                hint="use sqlite:///path/file.sqlite or postgresql+psycopg://user:pw@host/db",
            )
        ) from None
    path = (
        Path(parsed.database) if parsed.get_backend_name() == "sqlite" and parsed.database else None
    )
    return url, path


def _migrated(engine: Engine, url: str, path: Path | None, create: bool) -> bool:
    """Check that the database is empty or stepwise's, then bring its schema to this
    stepwise's revision; False (nothing touched) when there is no store and `create` is
    off."""
    with _exclusive(path):
        # checked before the SQLite pragmas: even switching a foreign file to WAL changes it
        revision = schema.stored_revision(engine, redact(url))
        engine.dispose()
        if revision is None and not create:
            return False
        if path is not None and create and str(path) != ":memory:":
            schema.make_private(path)  # ours, and about to be written: private from now on
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas)
        schema.migrate(engine)
    return True


def _dispose(engine: Engine | None) -> None:
    if engine is not None:
        engine.dispose()


@contextmanager
def _exclusive(path: Path | None) -> Iterator[None]:
    """For a SQLite file: hold an flock on its *directory* while its schema is checked and
    migrated, so two commands creating the same new store do it one after the other. Never
    on the database file itself: closing any descriptor of that file drops every POSIX lock
    SQLite holds on it in this process, and another process's writes can then be lost."""
    if path is None or not path.parent.is_dir():
        yield
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def existing_store(deployment: Any, explicit: str | None = None) -> Store | None:
    """The cloud's store if it exists already (a SQLite file that is there, or a server URL);
    None when nothing was ever recorded. Read commands and the checks before a run use it, so
    they never create a store as a side effect."""
    url = default_store_url(deployment.path, deployment.name, explicit, existing=True)
    return open_store(url, create=False)
