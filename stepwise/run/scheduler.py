"""When may a unit start: the DAG executor's decisions, kept apart from Ansible.

A unit starts when every unit it waits for is done, fewer than `max_parallel` units run, and
the run is not stopping. A chain's process starts when its first unit could start soon (what
it waits for has started), so Ansible's start-up overlaps the work before it; at most
`max_parallel + 2` processes live at once, unless every live one waits at its gate for a
unit of a chain not started yet (then one more starts, or the run would wait forever).

The run stops at the first failure the failure threshold does not allow (no new unit starts;
running units finish) and at an interrupt (running units are cut and recorded
`interrupted`). Barriers pass as soon as what they wait for is done.

All methods are called with `lock` held by the engine (one lock for the scheduler, the
tracker and the store writes), so the state is consistent at every moment.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from stepwise.model.vocab import UnitState
from stepwise.plan.units import Unit
from stepwise.run.chains import Chain


@dataclass(frozen=True)
class Stop:
    """Why the run stops."""

    reason: str
    interrupted: bool = False


class Scheduler:
    """Unit states of one execution and the rules that move them."""

    def __init__(
        self,
        units: Sequence[Unit],
        done_before: Iterable[str],
        *,
        max_parallel: int,
        has_play: dict[str, bool],
    ):
        self.units = list(units)
        self.by_id = {u.id: u for u in self.units}
        ids = set(self.by_id)
        self.preds = {u.id: [a for a in u.after if a in ids] for u in self.units}
        self.state: dict[str, UnitState] = {u.id: UnitState.PENDING for u in self.units}
        self.done_before = set(done_before)
        self.max_parallel = max(1, max_parallel)
        self.has_play = has_play
        self.stop: Stop | None = None
        self.lock = threading.Condition()

    # -- questions ----------------------------------------------------------------------
    def is_done(self, uid: str) -> bool:
        return uid in self.done_before or self.state.get(uid) is UnitState.DONE

    def ready(self, uid: str) -> bool:
        return all(self.is_done(p) for p in self.preds[uid])

    def started(self, uid: str) -> bool:
        """Done or running, or a barrier whose predecessors have all started: a chain that
        waits for it may already start its process (it waits at its gate)."""
        st = self.state.get(uid)
        if self.is_done(uid) or st is UnitState.RUNNING:
            return True
        if st is UnitState.PENDING and not self.has_play.get(uid):
            return all(self.started(p) for p in self.preds[uid])
        return False

    def running(self) -> list[str]:
        return [u for u, s in self.state.items() if s is UnitState.RUNNING]

    def may_start(self, uid: str) -> bool:
        return self.stop is None and self.ready(uid) and len(self.running()) < self.max_parallel

    def finished(self) -> bool:
        """Nothing runs and nothing more can start."""
        if self.running():
            return False
        if self.stop is not None:
            return True
        return all(s is not UnitState.PENDING for s in self.state.values())

    def _can_become_ready(self, uid: str) -> bool:
        return all(
            self.is_done(p) or self.state.get(p) in (UnitState.PENDING, UnitState.RUNNING)
            for p in self.preds[uid]
        )

    def next_unit(self, chain: Chain) -> str | None:
        """The chain's first unit not started yet."""
        return next((u.id for u in chain.units if self.state[u.id] is UnitState.PENDING), None)

    def stalled(self, alive: Sequence[Chain]) -> bool:
        """No unit runs and no live process can start its next unit."""
        if self.running():
            return False
        return not any((n := self.next_unit(c)) is not None and self.ready(n) for c in alive)

    def should_launch(self, chain: Chain, alive: Sequence[Chain]) -> bool:
        """Whether to start the process of `chain` (not started yet) now."""
        first = chain.first.id
        if self.stop is not None or self.state[first] is not UnitState.PENDING:
            return False
        if len(alive) >= self.max_parallel + 2 and not (self.ready(first) and self.stalled(alive)):
            return False
        if chain.detached:
            # a once-only unit has no gate: its process starts it at once
            return self.may_start(first)
        return all(self.started(p) for p in self.preds[first])

    # -- changes ------------------------------------------------------------------------
    def mark_running(self, uid: str) -> None:
        self.state[uid] = UnitState.RUNNING

    def mark(self, uid: str, state: UnitState) -> list[str]:
        """Record a unit's end; returns the barriers that pass because of it."""
        self.state[uid] = state
        return self.pass_barriers() if state is UnitState.DONE else []

    def pass_barriers(self) -> list[str]:
        passed: list[str] = []
        changed = True
        while changed:
            changed = False
            for u in self.units:
                if (
                    self.state[u.id] is UnitState.PENDING
                    and not self.has_play.get(u.id)
                    and self.ready(u.id)
                    and self.stop is None
                ):
                    self.state[u.id] = UnitState.DONE
                    passed.append(u.id)
                    changed = True
        return passed

    def request_stop(self, reason: str, interrupted: bool = False) -> None:
        """The first reason wins; an interrupt upgrades a failure stop (running units are cut)."""
        if self.stop is None or (interrupted and not self.stop.interrupted):
            self.stop = Stop(reason, interrupted)
        self.lock.notify_all()


def _interrupt(current: Stop | None, reason: str) -> Stop:
    if current is not None and current.interrupted:
        return current
    return Stop(reason, interrupted=True)


def catch_interrupts(sched: Scheduler) -> Callable[[], None]:
    """While a run runs in the main thread, SIGINT and SIGTERM stop it and cut the running
    units; returns what puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        # no lock here: a handler may interrupt the main thread while it holds it
        sched.stop = _interrupt(sched.stop, f"interrupted ({name})")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h)

    return restore
