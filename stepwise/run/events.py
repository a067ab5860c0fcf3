"""What a run reports while it goes: an observer interface (the CLI draws live progress from
it, tests record it) and the run's result."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

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
    status: str  # done | failed | interrupted | nothing
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
        return self.status in ("done", "nothing")

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "status": self.status, "message": self.message, "resumed": self.resumed,
            "units": {"total": self.units_total, "done": self.units_done, "reused": self.units_reused,
                      "failed": self.units_failed, "pending": len(self.units_pending)},
            "failures": [f.__dict__ for f in self.failures], "elapsed_s": round(self.elapsed_s, 3),
            "continue_command": self.continue_command or None,
        }


class Observer(Protocol):
    def run_started(self, run_id: int, units: list[Unit], todo: list[Unit], resumed: bool) -> None: ...
    def unit_started(self, unit: Unit) -> None: ...
    def unit_finished(self, unit: Unit, state: str, message: str) -> None: ...
    def task_result(self, unit_id: str, host: str, task: str, status: str) -> None: ...
    def run_finished(self, result: RunResult) -> None: ...


class NullObserver:
    """Reports nothing."""

    def run_started(self, run_id: int, units: list[Unit], todo: list[Unit], resumed: bool) -> None:
        pass

    def unit_started(self, unit: Unit) -> None:
        pass

    def unit_finished(self, unit: Unit, state: str, message: str) -> None:
        pass

    def task_result(self, unit_id: str, host: str, task: str, status: str) -> None:
        pass

    def run_finished(self, result: RunResult) -> None:
        pass


class Estimator:
    """Remaining time: the plan's estimate of what is left, scaled by how the finished units
    compared with their estimates (so a lab run at 100x speed shows lab-sized numbers)."""

    def __init__(self, todo: list[Unit]):
        self.left = {u.id: max(u.duration_s, 0.0) for u in todo}
        self.planned_done = 0.0
        self.started = time.monotonic()

    def finished(self, unit_id: str) -> None:
        self.planned_done += self.left.pop(unit_id, 0.0)

    def remaining_s(self) -> float | None:
        elapsed = time.monotonic() - self.started
        planned_left = sum(self.left.values())
        if self.planned_done <= 0 or elapsed <= 0:
            return None
        return planned_left * (elapsed / self.planned_done)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started
