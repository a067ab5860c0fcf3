"""When may a unit start: the DAG executor's decisions, kept apart from Ansible.

A unit starts when every unit it waits for is done, fewer than `max_parallel` units run, and
the run is not stopping. A chain's process starts when its first unit could start soon (what
it waits for has started), so Ansible's start-up overlaps the work before it; at most
`max_parallel + 2` processes live at once, unless every live one waits at its gate for a
unit of a chain not started yet (then one more starts, or the run would wait forever).

The run stops at the first failure the failure threshold does not allow (no new unit starts;
running units finish) and at an interrupt (running units are cut and recorded
`interrupted`). An abort (`stepwise abort`, a first Ctrl-C) stops at the next safe point: every
rolling batch that has begun finishes (a node that left its clusters rejoins them), with what
those units wait for, and nothing else starts. Barriers pass as soon as what they wait for is
done.

All methods are called with `lock` held by the engine (one lock for the scheduler, the
tracker and the store writes), so the state is consistent at every moment.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
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
    #: an abort: only the units of the batches begun (`finishing`) may still start
    aborted: bool = False
    finishing: frozenset[str] = frozenset()


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
        #: set by the first SIGINT (a signal handler may not take the lock): the engine's loop
        #: turns it into an abort
        self.abort_asked: str | None = None
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

    def batch_begun(self, batch: str) -> bool:
        """A unit of the batch among this execution's is done or running (a batch begun in
        an earlier execution of the run is the caller's to know: its units are not here)."""
        return any(
            u.batch == batch and (self.is_done(u.id) or self.state[u.id] is UnitState.RUNNING)
            for u in self.units
        )

    def running(self) -> list[str]:
        return [u for u, s in self.state.items() if s is UnitState.RUNNING]

    def allowed(self, uid: str) -> bool:
        """Whether the unit may still start as far as a stop is concerned: always while the run
        is not stopping, during an abort only to finish a batch begun."""
        return self.stop is None or uid in self.stop.finishing

    def may_start(self, uid: str) -> bool:
        return self.allowed(uid) and self.ready(uid) and len(self.running()) < self.max_parallel

    def finished(self) -> bool:
        """Nothing runs and nothing more can start."""
        if self.running():
            return False
        if self.stop is not None:
            return all(self.state[u] is not UnitState.PENDING for u in self.stop.finishing)
        return all(s is not UnitState.PENDING for s in self.state.values())

    def unfinished_business(self, pending: Iterable[str]) -> bool:
        """Whether units a stopping run must still start are among `pending` (a process that
        ends before them leaves a batch half done)."""
        return self.stop is not None and bool(self.stop.finishing.intersection(pending))

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
        if not self.allowed(first) or self.state[first] is not UnitState.PENDING:
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
                    and self.allowed(u.id)
                ):
                    self.state[u.id] = UnitState.DONE
                    passed.append(u.id)
                    changed = True
        return passed

    def request_stop(self, reason: str, interrupted: bool = False) -> None:
        """The first reason wins; an interrupt upgrades a failure stop (running units are cut),
        a failure an abort (the batches begun no longer finish)."""
        current = self.stop
        if (
            current is None
            or (interrupted and not current.interrupted)
            or (current.aborted and not interrupted)
        ):
            self.stop = Stop(reason, interrupted)
        self.lock.notify_all()

    def request_abort(self, reason: str) -> bool:
        """Stop at the next safe point: the batches begun finish, nothing else starts. False
        when the run is stopping already (a failure or an interrupt decides how it ends)."""
        if self.stop is not None:
            return False
        self.stop = Stop(reason, aborted=True, finishing=self._to_finish())
        self.lock.notify_all()
        return True

    def _to_finish(self) -> frozenset[str]:
        """The pending units that bring the run to a safe point: those of every batch with a
        unit started (done before included), and everything they wait for, whose batches
        then must finish too."""
        begun = {
            u.batch
            for u in self.units
            if u.batch and (self.is_done(u.id) or self.state[u.id] is UnitState.RUNNING)
        }
        finishing: set[str] = set()
        todo = [u.id for u in self.units if u.batch in begun]
        while todo:
            uid = todo.pop()
            if uid in finishing or self.state[uid] is not UnitState.PENDING:
                continue
            finishing.add(uid)
            todo.extend(self.preds[uid])
            batch = self.by_id[uid].batch
            if batch and batch not in begun:
                begun.add(batch)
                todo.extend(u.id for u in self.units if u.batch == batch)
        return frozenset(finishing)


def _interrupt(current: Stop | None, reason: str) -> Stop:
    if current is not None and current.interrupted:
        return current
    return Stop(reason, interrupted=True)


def catch_interrupts(sched: Scheduler, held: Sequence[str] = ()) -> Callable[[], None]:
    """While a run runs in the main thread, a first SIGINT (Ctrl-C) asks for an abort at the
    next safe point; a second one, or SIGTERM, stops the run and cuts the running units.
    `held`: the names of signals that came before (`interrupts_held`), acted on first, in
    order. Returns what puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        # no lock here: a handler may interrupt the main thread while it holds it
        if signum == signal.SIGINT and sched.stop is None and sched.abort_asked is None:
            sched.abort_asked = "aborted by Ctrl-C"
            return
        sched.stop = _interrupt(sched.stop, f"interrupted ({name})")

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    for name in list(held):
        on_signal(signal.Signals[name], None)

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h)

    return restore


@contextmanager
def interrupts_held() -> Iterator[list[str]]:
    """Ctrl-C or SIGTERM while the run is being prepared (the preflight asks the nodes for a
    few seconds), or while it is recorded before and after the engine, is held until that
    step ends, then reported or handed to the engine (`catch_interrupts`): a
    KeyboardInterrupt unwinding half-built state could be hit again by a second Ctrl-C.
    Yields the names of the signals that came."""
    held: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def hold(signum: int, _frame: Any) -> None:
        held.append(signal.Signals(signum).name)

    old = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield held
    finally:
        for s, h in old.items():
            signal.signal(s, h)
