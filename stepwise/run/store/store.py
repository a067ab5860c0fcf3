"""The durable state store: runs, units, per-host task results, node versions, markers.

SQLite by default (one file per cloud), PostgreSQL for teams; any SQLAlchemy URL works. The
schema is migrated with Alembic when the store is opened, so an old store file just works.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, delete, event, func, select, update
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session

from stepwise.errors import InputError, Problem, StepwiseError
from stepwise.model.vocab import MarkerState, RunState, ServiceState, UnitState
from stepwise.run.store import schema
from stepwise.run.store.checked import checked, one
from stepwise.run.store.location import ENV_VAR, default_store_url, existing_store_url  # noqa: F401 - re-exported
from stepwise.run.store.models import (
    MarkerRow,
    NodeOsRow,
    NodePackageRow,
    NodeServiceRow,
    ProbeSampleRow,
    RunRow,
    TaskResultRow,
    UnitRow,
)

ALEMBIC_DIR = schema.ALEMBIC_DIR
migrate = schema.migrate
#: marker keys of progress milestones (the other markers guard once-only units)
PROGRESS = "progress:"


def now() -> datetime:
    """Naive UTC: portable across SQLite and PostgreSQL `timestamp without time zone`."""
    return datetime.now(UTC).replace(tzinfo=None)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL + NORMAL survives a SIGKILL of stepwise (only an OS crash could lose the last commit),
    # and lets `status` read while a run writes.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


@dataclass
class RunInfo:
    id: int
    cloud: str
    workflow: str
    key: str
    command: str
    params: dict
    plan: dict
    status: RunState
    message: str
    user: str
    host: str
    pid: int
    attempts: int
    started_at: datetime
    ended_at: datetime | None
    facts: dict | None = None

    @staticmethod
    def of(r: RunRow) -> RunInfo:
        return RunInfo(
            r.id,
            r.cloud,
            r.workflow,
            r.key,
            r.command,
            dict(r.params or {}),
            dict(r.plan or {}),
            RunState(r.status),
            r.message,
            r.user,
            r.host,
            r.pid,
            r.attempts,
            r.started_at,
            r.ended_at,
            dict(r.facts) if r.facts else None,
        )


class Store:
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

    # -- runs -----------------------------------------------------------------------------
    def create_run(
        self,
        cloud: str,
        workflow: str,
        key: str,
        command: str,
        params: Mapping[str, Any],
        plan: Mapping[str, Any],
        units: Iterable[Mapping[str, Any]],
        user: str = "",
        host: str = "",
        pid: int = 0,
        facts: Mapping[str, Any] | None = None,
    ) -> int:
        """Record a new run and all its units as pending."""
        with self.session() as s:
            row = RunRow(
                cloud=cloud,
                workflow=workflow,
                key=key,
                command=command,
                params=dict(params),
                plan=dict(plan),
                status=RunState.RUNNING,
                message="",
                user=user,
                host=host,
                pid=pid,
                attempts=1,
                started_at=now(),
                facts=dict(facts) if facts else None,
            )
            s.add(row)
            s.flush()
            for seq, u in enumerate(units):
                s.add(
                    UnitRow(
                        run_id=row.id,
                        unit_id=u["id"],
                        seq=seq,
                        step=u["step"],
                        stage=u.get("stage", ""),
                        batch=u.get("batch"),
                        nodes=list(u.get("nodes", [])),
                        services=list(u.get("services", [])),
                        idempotent=bool(u.get("idempotent", True)),
                        state=u.get("state", UnitState.PENDING),
                        attempts=0,
                        message=u.get("message", ""),
                    )
                )
            return row.id

    def reopen_run(
        self, run_id: int, pid: int, user: str = "", host: str = "", command: str = ""
    ) -> None:
        with self.session() as s:
            row = s.get(RunRow, run_id)
            assert row is not None
            row.status, row.pid, row.attempts = RunState.RUNNING, pid, row.attempts + 1
            row.user, row.host, row.ended_at, row.message = (
                user or row.user,
                host or row.host,
                None,
                "",
            )
            if command:
                row.command = command

    def discard_run(self, run_id: int) -> None:
        """Forget a run that was refused before any of its units started (its units and
        results with it): a refusal records nothing, and leaves nothing to resume."""
        with self.session() as s:
            s.execute(delete(TaskResultRow).where(TaskResultRow.run_id == run_id))
            s.execute(delete(ProbeSampleRow).where(ProbeSampleRow.run_id == run_id))
            s.execute(delete(UnitRow).where(UnitRow.run_id == run_id))
            s.execute(delete(RunRow).where(RunRow.id == run_id))

    def finish_run(self, run_id: int, status: RunState, message: str = "") -> None:
        with self.session() as s:
            row = s.get(RunRow, run_id)
            assert row is not None
            row.status, row.message, row.ended_at = status, message, now()

    def run(self, run_id: int) -> RunInfo | None:
        with self.reading() as s:
            row = one(s.get(RunRow, run_id), redact(self.url))
            return RunInfo.of(row) if row else None

    def runs(self, cloud: str, limit: int = 50) -> list[RunInfo]:
        """Most recent first."""
        with self.reading() as s:
            rows = s.scalars(
                select(RunRow).where(RunRow.cloud == cloud).order_by(RunRow.id.desc()).limit(limit)
            )
            return [RunInfo.of(r) for r in self._checked(rows)]

    def latest_run(self, cloud: str, key: str) -> RunInfo | None:
        """The latest run of the same command, whatever its status."""
        with self.reading() as s:
            row = one(
                s.scalars(
                    select(RunRow)
                    .where(RunRow.cloud == cloud, RunRow.key == key)
                    .order_by(RunRow.id.desc())
                    .limit(1)
                ).first(),
                redact(self.url),
            )
            return RunInfo.of(row) if row else None

    def resumable(self, cloud: str, key: str) -> RunInfo | None:
        """The latest unfinished run of the same command, if the latest such run is unfinished."""
        with self.reading() as s:
            row = one(
                s.scalars(
                    select(RunRow)
                    .where(RunRow.cloud == cloud, RunRow.key == key)
                    .order_by(RunRow.id.desc())
                    .limit(1)
                ).first(),
                redact(self.url),
            )
            if row is None or row.status == RunState.DONE:
                return None
            return RunInfo.of(row)

    def mark_interrupted(self, cloud: str, keep_pid: int | None = None) -> int:
        """Runs still 'running' whose process is gone (no lock holds them) become 'interrupted'."""
        with self.session() as s:
            q = update(RunRow).where(RunRow.cloud == cloud, RunRow.status == RunState.RUNNING)
            if keep_pid is not None:
                q = q.where(RunRow.pid != keep_pid)
            res = s.execute(
                q.values(
                    status=RunState.INTERRUPTED,
                    message="the stepwise process stopped (killed or crashed)",
                )
            )
            return res.rowcount or 0

    # -- units ----------------------------------------------------------------------------
    def units(self, run_id: int) -> list[UnitRow]:
        with self.reading() as s:
            return self._checked(
                s.scalars(select(UnitRow).where(UnitRow.run_id == run_id).order_by(UnitRow.seq))
            )

    def unit_states(self, run_id: int) -> dict[str, UnitState]:
        return {u.unit_id: u.state for u in self.units(run_id)}

    def set_unit(
        self,
        run_id: int,
        unit_id: str,
        state: UnitState,
        message: str | None = None,
        started: bool = False,
        ended: bool = False,
        count_attempt: bool = False,
    ) -> None:
        with self.session() as s:
            row = s.get(UnitRow, (run_id, unit_id))
            if row is None:
                return
            row.state = state
            if message is not None:
                row.message = message
            if started:
                row.started_at, row.ended_at = now(), None
            if ended:
                row.ended_at = now()
            if count_attempt:
                row.attempts += 1

    def set_units(
        self, run_id: int, unit_ids: Iterable[str], state: UnitState, message: str = ""
    ) -> None:
        ids = list(unit_ids)
        if not ids:
            return
        with self.session() as s:
            s.execute(
                update(UnitRow)
                .where(UnitRow.run_id == run_id, UnitRow.unit_id.in_(ids))
                .values(state=state, message=message)
            )

    def add_task_results(self, rows: Iterable[Mapping[str, Any]]) -> None:
        rows = list(rows)
        if not rows:
            return
        with self.session() as s:
            s.add_all(TaskResultRow(**r) for r in rows)

    def task_results(self, run_id: int, unit_id: str | None = None) -> list[TaskResultRow]:
        with self.reading() as s:
            q = select(TaskResultRow).where(TaskResultRow.run_id == run_id)
            if unit_id is not None:
                q = q.where(TaskResultRow.unit_id == unit_id)
            return self._checked(s.scalars(q.order_by(TaskResultRow.id)))

    def task_counts(self, run_id: int) -> dict[str, int]:
        with self.reading() as s:
            counts = dict(
                s.execute(
                    select(TaskResultRow.status, func.count())
                    .where(TaskResultRow.run_id == run_id)
                    .group_by(TaskResultRow.status)
                ).all()
            )
        # the statuses are keys of a JSON document: a tampered one (a number, bytes) is refused
        return {str(k)[:20]: int(v) for k, v in counts.items()}

    # -- probe samples (what an availability probe measured during a run) -----------------
    def add_probe_samples(self, run_id: int, samples: Iterable[Mapping[str, Any]]) -> int:
        """Keep per-second probe samples ({target, t, requests, failed, max_ms}) with a run."""
        rows = [
            ProbeSampleRow(
                run_id=run_id,
                target=str(x["target"]),
                t=float(x["t"]),
                requests=int(x["requests"]),
                failed=int(x["failed"]),
                max_ms=float(x.get("max_ms") or 0.0),
            )
            for x in samples
        ]
        if rows:
            with self.session() as s:
                s.add_all(rows)
        return len(rows)

    def probe_samples(self, run_id: int) -> list[dict[str, Any]]:
        with self.reading() as s:
            q = (
                select(ProbeSampleRow)
                .where(ProbeSampleRow.run_id == run_id)
                .order_by(ProbeSampleRow.t, ProbeSampleRow.target)
            )
            return [
                {
                    "target": r.target,
                    "t": float(r.t),
                    "requests": r.requests,
                    "failed": r.failed,
                    "max_ms": float(r.max_ms),
                }
                for r in self._checked(s.scalars(q))
            ]

    # -- markers (once-only operations) ---------------------------------------------------
    def marker(self, cloud: str, key: str) -> MarkerRow | None:
        with self.reading() as s:
            return one(s.get(MarkerRow, (cloud, key)), redact(self.url))

    def set_marker(
        self, cloud: str, key: str, run_id: int, unit_id: str, state: MarkerState
    ) -> None:
        with self.session() as s:
            row = s.get(MarkerRow, (cloud, key))
            if row is None:
                s.add(
                    MarkerRow(
                        cloud=cloud, key=key, run_id=run_id, unit_id=unit_id, state=state, at=now()
                    )
                )
            else:
                row.run_id, row.unit_id, row.state, row.at = run_id, unit_id, state, now()

    def progress(self, cloud: str) -> frozenset[str]:
        """The milestones reached on this cloud (stepwise.plan.progress)."""
        with self.reading() as s:
            rows = self._checked(
                s.scalars(
                    select(MarkerRow).where(
                        MarkerRow.cloud == cloud, MarkerRow.key.like(PROGRESS + "%")
                    )
                )
            )
            return frozenset(r.key[len(PROGRESS) :] for r in rows)

    def record_progress(
        self,
        cloud: str,
        run_id: int,
        unit_id: str,
        marks: Iterable[str],
        clears: Iterable[str] = (),
    ) -> None:
        """Add milestones a unit reached and forget those it ended (by prefix), at once."""
        with self.session() as s:
            for prefix in clears:
                s.execute(
                    delete(MarkerRow).where(
                        MarkerRow.cloud == cloud, MarkerRow.key.like(PROGRESS + prefix + "%")
                    )
                )
            for m in marks:
                key = PROGRESS + m
                row = s.get(MarkerRow, (cloud, key))
                if row is None:
                    s.add(
                        MarkerRow(
                            cloud=cloud,
                            key=key,
                            run_id=run_id,
                            unit_id=unit_id,
                            state=MarkerState.DONE,
                            at=now(),
                        )
                    )

    def clear_marker(self, cloud: str, key: str) -> None:
        with self.session() as s:
            s.execute(delete(MarkerRow).where(MarkerRow.cloud == cloud, MarkerRow.key == key))

    # -- what runs where ------------------------------------------------------------------
    def set_services(
        self,
        cloud: str,
        pairs: Iterable[tuple[str, str]],
        version: str | None = None,
        state: ServiceState | None = None,
        run_id: int | None = None,
        versions: Mapping[tuple[str, str], str | None] | None = None,
    ) -> None:
        """Update version and/or state of (node, service) pairs; `versions` gives per-pair
        versions."""
        with self.session() as s:
            for node, service in pairs:
                row = s.get(NodeServiceRow, (cloud, node, service))
                if row is None:
                    row = NodeServiceRow(
                        cloud=cloud,
                        node=node,
                        service=service,
                        version=None,
                        state=ServiceState.UNKNOWN,
                        updated_at=now(),
                    )
                    s.add(row)
                v = versions.get((node, service), version) if versions is not None else version
                if v is not None:
                    row.version = v
                if state is not None:
                    row.state = state
                if run_id is not None:
                    row.run_id = run_id
                row.updated_at = now()

    def node_services(self, cloud: str) -> list[NodeServiceRow]:
        with self.reading() as s:
            return self._checked(
                s.scalars(
                    select(NodeServiceRow)
                    .where(NodeServiceRow.cloud == cloud)
                    .order_by(NodeServiceRow.node, NodeServiceRow.service)
                )
            )

    # -- facts (discover) -----------------------------------------------------------------
    def save_facts(self, cloud: str, facts: Mapping[str, Any]) -> None:
        """Store facts in the FactsSpec shape ({nodes: {node: {os, packages}}}), replacing what
        was known about the nodes it names."""
        with self.session() as s:
            for node, nf in (facts.get("nodes") or {}).items():
                s.execute(
                    delete(NodePackageRow).where(
                        NodePackageRow.cloud == cloud, NodePackageRow.node == node
                    )
                )
                for pkg, pf in (nf.get("packages") or {}).items():
                    s.add(
                        NodePackageRow(
                            cloud=cloud,
                            node=node,
                            package=pkg,
                            installed=pf.get("installed"),
                            available=pf.get("available"),
                            updated_at=now(),
                        )
                    )
                os_ = nf.get("os") or {}
                row = s.get(NodeOsRow, (cloud, node))
                if row is None:
                    s.add(
                        NodeOsRow(
                            cloud=cloud,
                            node=node,
                            major=os_.get("major"),
                            target=os_.get("target"),
                            updated_at=now(),
                        )
                    )
                else:
                    row.major, row.target, row.updated_at = (
                        os_.get("major"),
                        os_.get("target"),
                        now(),
                    )

    def facts(self, cloud: str) -> dict[str, Any] | None:
        """The stored facts in the FactsSpec shape, or None when `discover` never ran."""
        with self.reading() as s:
            pkgs = self._checked(
                s.scalars(select(NodePackageRow).where(NodePackageRow.cloud == cloud))
            )
            oses = self._checked(s.scalars(select(NodeOsRow).where(NodeOsRow.cloud == cloud)))
        if not pkgs and not oses:
            return None
        nodes: dict[str, dict[str, Any]] = {}
        for o in oses:
            entry = nodes.setdefault(o.node, {"packages": {}})
            os_ = {k: v for k, v in (("major", o.major), ("target", o.target)) if v is not None}
            if os_:
                entry["os"] = os_
        for p in pkgs:
            entry = nodes.setdefault(p.node, {"packages": {}})
            entry["packages"][p.package] = {
                k: v
                for k, v in (("installed", p.installed), ("available", p.available))
                if v is not None
            }
        return {"nodes": dict(sorted(nodes.items()))}

    def update_node_facts(self, cloud: str, node: str, facts: Mapping[str, Any]) -> None:
        """Merge one node's facts (FactsSpec node shape) into what is known: the packages it
        names and its OS major; the rest stays."""
        with self.session() as s:
            for pkg, pf in (facts.get("packages") or {}).items():
                if not pf or (pf.get("installed") is None and pf.get("available") is None):
                    continue  # the node does not know this package: that is no fact
                row = s.get(NodePackageRow, (cloud, node, pkg))
                if row is None:
                    s.add(
                        NodePackageRow(
                            cloud=cloud,
                            node=node,
                            package=pkg,
                            installed=pf.get("installed"),
                            available=pf.get("available"),
                            updated_at=now(),
                        )
                    )
                else:
                    row.installed, row.available, row.updated_at = (
                        pf.get("installed"),
                        pf.get("available"),
                        now(),
                    )
            major = (facts.get("os") or {}).get("major")
            if major is not None:
                row = s.get(NodeOsRow, (cloud, node))
                if row is None:
                    s.add(
                        NodeOsRow(
                            cloud=cloud, node=node, major=major, target=None, updated_at=now()
                        )
                    )
                else:
                    row.major, row.updated_at = major, now()

    def mark_installed(self, cloud: str, node: str, packages: Iterable[str]) -> None:
        """After a successful packages step: what was available is now installed."""
        with self.session() as s:
            for pkg in packages:
                row = s.get(NodePackageRow, (cloud, node, pkg))
                if row is not None and row.available:
                    row.installed, row.updated_at = row.available, now()

    def installed_version(self, cloud: str, node: str, package: str) -> str | None:
        with self.reading() as s:
            row = one(s.get(NodePackageRow, (cloud, node, package)), redact(self.url))
            return row.installed if row else None

    def close(self) -> None:
        self.engine.dispose()


def redact(url: str) -> str:
    """A store URL without its password, for messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def open_store(url: str, *, create: bool = True) -> Store | None:
    """Open the store at a SQLAlchemy URL, creating (when `create`) and migrating it as needed.
    With `create=False` a store that does not exist or is empty gives None: nothing is made.
    A database that is not a stepwise store, or one from a newer stepwise, is refused untouched."""
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
    if (
        path is not None
        and str(path) != ":memory:"
        and not schema.prepare_sqlite_file(path, create)
    ):
        return None
    engine = None
    try:
        engine = create_engine(url, future=True, pool_pre_ping=True)
        with _exclusive(path):
            # checked before the SQLite pragmas: even switching a foreign file to WAL changes it
            revision = schema.stored_revision(engine, redact(url))
            engine.dispose()
            if revision is None and not create:
                return None
            if path is not None and create and str(path) != ":memory:":
                schema.make_private(path)  # ours, and about to be written: private from now on
            if engine.dialect.name == "sqlite":
                event.listen(engine, "connect", _sqlite_pragmas)
            schema.migrate(engine)
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
    return open_store(default_store_url(deployment.path, deployment.name, explicit), create=False)
