"""Progress of a run an operator can read: on a terminal a live view of the running units
(batch, nodes, step, services), the counts and the remaining time; otherwise one line per
unit that starts or ends. Everything from data is printed as text, never as markup."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from stepwise.model.vocab import TaskStatus, UnitState
from stepwise.plan.units import Unit
from stepwise.run.events import Estimator, Observer, RunResult


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def describe(unit: Unit, most: int = 3) -> str:
    """`Compute#2 packages on compute-0, compute-1 [nova_compute, openvswitch]`."""
    nodes = ", ".join(unit.nodes[:most]) + (
        f" (+{len(unit.nodes) - most})" if len(unit.nodes) > most else ""
    )
    services = ", ".join(unit.services[:4]) + (", ..." if len(unit.services) > 4 else "")
    return (
        f"{unit.batch + ' ' if unit.batch else ''}{unit.step}"
        + (f" on {nodes}" if nodes else "")
        + (f" [{services}]" if services else "")
    )


class _Counts(Observer):
    def __init__(self) -> None:
        self.total = self.done = self.failed = self.reused = 0
        self.estimator: Estimator | None = None
        self.run_id = 0
        self.resumed = False
        self.running: dict[str, Unit] = {}

    def run_started(self, run_id: int, units: list[Unit], todo: list[Unit], resumed: bool) -> None:
        self.run_id, self.resumed = run_id, resumed
        self.total, self.reused = len(units), len(units) - len(todo)
        self.done = self.reused
        self.estimator = Estimator(todo)

    def unit_started(self, unit: Unit) -> None:
        self.running[unit.id] = unit
        if self.estimator:
            self.estimator.unit_started(unit.id)

    def unit_finished(self, unit: Unit, state: UnitState, message: str) -> None:
        self.running.pop(unit.id, None)
        if state is UnitState.DONE:
            self.done += 1
            if self.estimator:
                self.estimator.finished(unit.id)
        elif state is UnitState.FAILED:
            self.failed += 1

    def eta(self) -> str:
        return fmt_duration(self.estimator.remaining_s() if self.estimator else None)


def aborting_line(reason: str, running: int, to_finish: int) -> str:
    """What the run's terminal says when an abort was asked."""
    return (
        f"aborting at the next safe point: {running} unit(s) running"
        + (f", {to_finish} more finish the batches begun" if to_finish else "")
        + f"; press Ctrl-C again to interrupt ({reason})"
    )


class LiveProgress(_Counts):
    """A rich Live view redrawn as events arrive."""

    def __init__(self, console: Console, title: str):
        super().__init__()
        self.console, self.title = console, title
        self.live: Live | None = None
        self.tasks: dict[str, int] = {}
        self.last = ""

    def run_started(self, run_id: int, units: list[Unit], todo: list[Unit], resumed: bool) -> None:
        super().run_started(run_id, units, todo, resumed)
        self.live = Live(
            self._render(), console=self.console, refresh_per_second=4, transient=False
        )
        self.live.start()

    def unit_started(self, unit: Unit) -> None:
        super().unit_started(unit)
        self._update()

    def unit_finished(self, unit: Unit, state: UnitState, message: str) -> None:
        super().unit_finished(unit, state, message)
        if state is not UnitState.DONE:
            self.last = f"{unit.id} {state}: {message}"
        self._update()

    def task_result(self, unit_id: str, host: str, task: str, status: TaskStatus) -> None:
        self.tasks[status] = self.tasks.get(status, 0) + 1
        if status.failed:
            self.last = f"{unit_id} {host}: {task} [{status}]"
        self._update()

    def run_aborting(self, reason: str, running: int, to_finish: int) -> None:
        # printed above the live view, which goes on until the safe point
        self.console.print(
            Text(aborting_line(reason, running, to_finish), style="yellow"), soft_wrap=True
        )

    def run_finished(self, result: RunResult) -> None:
        if self.live:
            self.live.update(self._render())
            self.live.stop()

    def _update(self) -> None:
        if self.live:
            self.live.update(self._render())

    def _render(self) -> Any:
        elapsed = self.estimator.elapsed_s() if self.estimator else 0.0
        head = Table.grid(padding=(0, 1))
        head.add_row(
            Text(
                f"{self.title} run {self.run_id}" + (" (resumed)" if self.resumed else ""),
                style="bold",
            ),
            Text(f"elapsed {fmt_duration(elapsed)}  remaining ~{self.eta()}"),
        )
        head.add_row(
            "progress", ProgressBar(total=max(self.total, 1), completed=self.done, width=50)
        )
        head.add_row(
            "units",
            Text(
                f"{self.done}/{self.total} done"
                + (f", {self.reused} from before" if self.reused else "")
                + (f", {self.failed} failed" if self.failed else "")
                + f", {len(self.running)} running"
            ),
        )
        head.add_row("tasks", Text(" ".join(f"{k} {v}" for k, v in self.tasks.items() if v) or "-"))
        running = Table("unit", "batch", "step", "nodes", "services", box=None, header_style="dim")
        for u in list(self.running.values())[:12]:
            running.add_row(
                Text(u.id),
                Text(u.batch or "-"),
                Text(str(u.step)),
                Text(
                    ", ".join(u.nodes[:4]) + (f" +{len(u.nodes) - 4}" if len(u.nodes) > 4 else "")
                ),
                Text(", ".join(u.services[:4]) + (" ..." if len(u.services) > 4 else "")),
            )
        parts: list[Any] = [head, running]
        if self.last:
            parts.append(Text(self.last[-200:], style="red"))
        return Group(*parts)


class LineProgress(_Counts):
    """One line per unit that starts or ends, on stderr, for logs and pipes."""

    def __init__(self, console: Console, title: str):
        super().__init__()
        self.console, self.title = console, title
        self.started = time.monotonic()

    def _line(self, text: str) -> None:
        t = fmt_duration(time.monotonic() - self.started)
        self.console.print(Text(f"[{t}] {text}"), highlight=False, soft_wrap=True)

    def run_started(self, run_id: int, units: list[Unit], todo: list[Unit], resumed: bool) -> None:
        super().run_started(run_id, units, todo, resumed)
        self._line(
            f"{self.title}: run {run_id}{' resumed' if resumed else ''}: "
            f"{len(todo)} of {len(units)} units to run"
        )

    def run_aborting(self, reason: str, running: int, to_finish: int) -> None:
        self._line(aborting_line(reason, running, to_finish))

    def unit_started(self, unit: Unit) -> None:
        super().unit_started(unit)
        if not unit.is_barrier:
            self._line(f"{self.done}/{self.total} start {unit.id} {describe(unit)}")

    def unit_finished(self, unit: Unit, state: UnitState, message: str) -> None:
        super().unit_finished(unit, state, message)
        if unit.is_barrier and state is UnitState.DONE:
            return
        self._line(
            f"{self.done}/{self.total} {state} {unit.id} {describe(unit)}, ETA {self.eta()}"
            + (f": {message}" if message and state is not UnitState.DONE else "")
        )
