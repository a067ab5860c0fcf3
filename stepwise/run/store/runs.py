"""The store's run records: one per command run (or resumed), with its plan, parameters,
facts, state and who ran it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update

from stepwise.model.vocab import RunState, UnitState
from stepwise.run.store.base import StoreBase, now, redact
from stepwise.run.store.checked import one
from stepwise.run.store.models import (
    ProbeSampleRow,
    RunRow,
    TaskResultRow,
    UnitRow,
)


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


@dataclass(frozen=True)
class RunOrigin:
    """Who started a run, how and from where: the command as typed (secrets masked), the user,
    the host and the process."""

    command: str
    user: str = ""
    host: str = ""
    pid: int = 0


class RunRecords(StoreBase):
    """Runs: created, reopened on resume, finished, found again by their command."""

    # -- runs -----------------------------------------------------------------------------
    def create_run(
        self,
        cloud: str,
        workflow: str,
        key: str,
        origin: RunOrigin,
        params: Mapping[str, Any],
        plan: Mapping[str, Any],
        units: Iterable[Mapping[str, Any]],
        facts: Mapping[str, Any] | None = None,
    ) -> int:
        """Record a new run and all its units as pending."""
        with self.session() as s:
            row = RunRow(
                cloud=cloud,
                workflow=workflow,
                key=key,
                command=origin.command,
                params=dict(params),
                plan=dict(plan),
                status=RunState.RUNNING,
                message="",
                user=origin.user,
                host=origin.host,
                pid=origin.pid,
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
        run = self.latest_run(cloud, key)
        return None if run is None or run.status is RunState.DONE else run

    def request_abort(self, run_id: int, reason: str) -> bool:
        """Ask a running run to stop at its next safe point (its engine polls the status);
        False when the run is not running (any more)."""
        with self.session() as s:
            res = s.execute(
                update(RunRow)
                .where(RunRow.id == run_id, RunRow.status == RunState.RUNNING)
                .values(status=RunState.ABORTING, message=reason)
            )
            return bool(res.rowcount)

    def abort_requested(self, run_id: int) -> str | None:
        """Why the run was asked to abort, if it was (None otherwise)."""
        with self.reading() as s:
            row = s.execute(
                select(RunRow.status, RunRow.message).where(RunRow.id == run_id)
            ).first()
        if row is None or row[0] != RunState.ABORTING:
            return None
        return str(row[1] or "aborted")

    def mark_interrupted(self, cloud: str, keep_pid: int | None = None) -> int:
        """Runs still 'running' (or 'aborting') whose process is gone (no lock holds them)
        become 'interrupted'."""
        with self.session() as s:
            q = update(RunRow).where(
                RunRow.cloud == cloud,
                RunRow.status.in_([RunState.RUNNING, RunState.ABORTING]),
            )
            if keep_pid is not None:
                q = q.where(RunRow.pid != keep_pid)
            res = s.execute(
                q.values(
                    status=RunState.INTERRUPTED,
                    message="the stepwise process stopped (killed or crashed)",
                )
            )
            return res.rowcount or 0
