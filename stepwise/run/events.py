"""What a run reports while it goes: an observer interface (the CLI draws live progress from
it, tests record it) and the run's result."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from stepwise.model.vocab import RunState, TaskStatus, UnitState
from stepwise.plan.units import Unit


@dataclass
class Failure:
    """One failed task on one host: what failed where."""

    unit: str
    host: str
    task: str
    message: str

    def __str__(self) -> str:
        return f"{self.host}: task '{self.task}' of unit {self.unit}: {self.message}"


@dataclass
class RunResult:
    """The outcome of one `run` (or resume) of a plan."""

    run_id: int
    status: RunState
    message: str = ""
    resumed: bool = False
    units_total: int = 0
    units_done: int = 0
    units_failed: list[str] = field(default_factory=list)
    units_pending: list[str] = field(default_factory=list)
    units_reused: int = 0  # done in an earlier attempt of this run, not run again
    failures: list[Failure] = field(default_factory=list)
    elapsed_s: float = 0.0
    continue_command: str = ""
    stale_lock: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status.ok

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "message": self.message,
            "resumed": self.resumed,
            "units": {
                "total": self.units_total,
                "done": self.units_done,
                "reused": self.units_reused,
                "failed": self.units_failed,
                "pending": len(self.units_pending),
            },
            "failures": [f.__dict__ for f in self.failures],
            "elapsed_s": round(self.elapsed_s, 3),
            "continue_command": self.continue_command or None,
        }


class Observer:
    """Progress hooks of a run (as resolvelib's BaseReporter): every method does nothing here;
    the CLI's live view and the tests override what they need. Calls come from several
    threads, one at a time (the engine holds its lock)."""

    def run_started(self, run_id: int, units: list[Unit], todo: list[Unit], resumed: bool) -> None:
        """The run (or its resume) starts; `todo` is what will run."""

    def unit_started(self, unit: Unit) -> None:
        """A unit's play starts on its hosts."""

    def unit_finished(self, unit: Unit, state: UnitState, message: str) -> None:
        """A unit ended: done, failed or interrupted (barriers pass as done)."""

    def task_result(self, unit_id: str, host: str, task: str, status: TaskStatus) -> None:
        """One task ended on one host."""

    def run_aborting(self, reason: str, running: int, to_finish: int) -> None:
        """An abort was asked: `running` units finish, and `to_finish` more complete the
        batches begun; nothing else starts."""

    def run_finished(self, result: RunResult) -> None:
        """The run ended (or had nothing to do)."""


class Estimator:
    """Remaining time: the critical path of what is left, by the plan's estimates, scaled by
    how long the finished units really took against their estimates (so a lab run, a hundred
    times faster than real hardware, shows lab-sized numbers)."""

    def __init__(self, todo: list[Unit]):
        self.units = {u.id: u for u in todo}
        self.done: set[str] = set()
        self.begun: dict[str, float] = {}
        self.measured = 0.0
        self.planned = 0.0
        self.started = time.monotonic()
        self._left: float | None = None

    def unit_started(self, unit_id: str) -> None:
        self.begun.setdefault(unit_id, time.monotonic())

    def finished(self, unit_id: str) -> None:
        u = self.units.get(unit_id)
        if u is None or unit_id in self.done:
            return
        self.done.add(unit_id)
        if unit_id in self.begun:
            self.measured += time.monotonic() - self.begun[unit_id]
            self.planned += u.duration_s
        self._left = None

    def remaining_s(self) -> float | None:
        if self.planned <= 0:
            return None
        if self._left is None:
            end: dict[str, float] = {}
            for u in self.units.values():  # topological order
                if u.id in self.done:
                    end[u.id] = 0.0
                    continue
                end[u.id] = max((end.get(a, 0.0) for a in u.after), default=0.0) + u.duration_s
            self._left = max(end.values(), default=0.0)
        return self._left * (self.measured / self.planned)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started
