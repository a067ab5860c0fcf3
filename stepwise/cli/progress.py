"""Live progress of a run on a terminal (batches, units, hosts, elapsed, remaining), and a
plain line log when the output is not a terminal."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from stepwise.plan.units import Unit
from stepwise.run.events import Estimator, RunResult


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class LiveProgress:
    """A rich Live panel redrawn as events arrive."""

    def __init__(self, console: Console, title: str):
        self.console, self.title = console, title
        self.live: Live | None = None
        self.total = 0
        self.done = 0
        self.failed = 0
        self.current: Unit | None = None
        self.hosts: dict[str, str] = {}
        self.tasks = {"ok": 0, "changed": 0, "failed": 0, "skipped": 0, "unreachable": 0, "ignored": 0}
        self.last_task = ""
        self.estimator: Estimator | None = None
        self.batches: list[str] = []
        self.run_id = 0
        self.resumed = False
        self.reused = 0

    def run_started(self, run_id: int, units: list[Unit], todo: list[Unit], resumed: bool) -> None:
        self.run_id, self.resumed = run_id, resumed
        self.total, self.reused = len(units), len(units) - len(todo)
        self.done = self.reused
        self.estimator = Estimator(todo)
        self.batches = list(dict.fromkeys(u.batch for u in units if u.batch))
        self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def unit_started(self, unit: Unit) -> None:
        self.current = unit
        self.hosts = {n: "running" for n in unit.nodes}
        self._update()

    def unit_finished(self, unit: Unit, state: str, message: str) -> None:
        if state == "done":
            self.done += 1
        else:
            self.failed += 1
        if self.estimator:
            self.estimator.finished(unit.id)
        self._update()

    def task_result(self, unit_id: str, host: str, task: str, status: str) -> None:
        self.tasks[status] = self.tasks.get(status, 0) + 1
        if status in ("failed", "unreachable"):
            self.hosts[host] = "failed"
        elif self.hosts.get(host) != "failed":
            self.hosts[host] = "ok"
        self.last_task = f"{host}: {task} [{status}]"
        self._update()

    def run_finished(self, result: RunResult) -> None:
        if self.live:
            self.live.update(self._render())
            self.live.stop()

    def _update(self) -> None:
        if self.live:
            self.live.update(self._render())

    def _render(self) -> Any:
        u = self.current
        batch = u.batch if u and u.batch else "-"
        bidx = f" ({self.batches.index(batch) + 1}/{len(self.batches)})" if batch in self.batches else ""
        elapsed = self.estimator.elapsed_s() if self.estimator else 0.0
        remaining = self.estimator.remaining_s() if self.estimator else None
        t = Table.grid(padding=(0, 1))
        t.add_row(Text(f"{self.title} run {self.run_id}" + (" (resumed)" if self.resumed else ""), style="bold"),
                  Text(f"elapsed {_fmt(elapsed)}  remaining ~{_fmt(remaining)}"))
        t.add_row("progress", ProgressBar(total=max(self.total, 1), completed=self.done, width=50))
        t.add_row("units", Text(f"{self.done}/{self.total} done" + (f", {self.reused} from before" if self.reused else "")
                                + (f", {self.failed} failed" if self.failed else "")))
        t.add_row("batch", batch + bidx)
        t.add_row("unit", (f"{u.id} ({u.step})" if u else "-"))
        hosts = " ".join(f"[{'red' if s == 'failed' else 'green' if s == 'ok' else 'yellow'}]{h}[/]"
                         for h, s in list(self.hosts.items())[:12])
        if len(self.hosts) > 12:
            hosts += f" +{len(self.hosts) - 12}"
        t.add_row("hosts", Text.from_markup(hosts or "-"))
        t.add_row("tasks", " ".join(f"{k} {v}" for k, v in self.tasks.items() if v) or "-")
        t.add_row("last", Text(self.last_task[-100:]))
        return t


class LineProgress:
    """One line per unit on stderr, for logs and pipes."""

    def __init__(self, console: Console, title: str):
        self.console, self.title = console, title
        self.started = time.monotonic()
        self.total = 0
        self.done = 0

    def run_started(self, run_id: int, units: list[Unit], todo: list[Unit], resumed: bool) -> None:
        self.total, self.done = len(units), len(units) - len(todo)
        self.console.print(f"{self.title}: run {run_id}{' resumed' if resumed else ''}: "
                           f"{len(todo)} of {len(units)} units to run")

    def unit_started(self, unit: Unit) -> None:
        pass

    def unit_finished(self, unit: Unit, state: str, message: str) -> None:
        self.done += state == "done"
        t = _fmt(time.monotonic() - self.started)
        self.console.print(f"[{t}] {self.done}/{self.total} {state}: {unit.id}" + (f": {message}" if message and state != "done" else ""),
                           markup=False, highlight=False)

    def task_result(self, unit_id: str, host: str, task: str, status: str) -> None:
        pass

    def run_finished(self, result: RunResult) -> None:
        pass
