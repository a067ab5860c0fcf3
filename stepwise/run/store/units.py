"""The store's unit records: each unit's state and attempts in a run, every task result per
host, and the probe's samples during the run."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import func, select, update

from stepwise.model.vocab import UnitState
from stepwise.run.store.base import StoreBase, now
from stepwise.run.store.models import (
    ProbeSampleRow,
    TaskResultRow,
    UnitRow,
)


class UnitRecords(StoreBase):
    """Units of a run, their task results and the availability probe's samples."""

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
