"""`--pause` at the engine's gate: the operator's go-ahead before each batch's first unit.

The question is a function the caller gives (`EngineOptions.before_batch`: the CLI reads the
terminal); this module decides when to ask and what an answer does. Asked before the batch's
first unit, an abort stops exactly at a safe point: no batch begun is left half done.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from stepwise.plan.units import Unit
from stepwise.run.abort import AbortWatch
from stepwise.run.scheduler import Scheduler

#: the question: the batch, its nodes, and whether the run is stopping meanwhile; True goes on
Ask = Callable[[str, list[str], Callable[[], bool]], bool]


class BatchPause:
    """Which batches the operator let go, and the one being asked about now."""

    def __init__(self, ask: Ask | None, sched: Scheduler, aborts: AbortWatch, begun: Iterable[str]):
        self.ask, self.sched, self.aborts = ask, sched, aborts
        #: a batch begun before this execution (a run continued) is not asked about again
        self.confirmed: set[str] = set(begun)
        self.asking: str | None = None

    def let_go(self, u: Unit) -> bool:
        """Whether the unit's batch may start (called with the scheduler's lock held). The
        first time, asks with the lock released (the units running finish, an abort or Ctrl-C
        is taken) and says False, so the gate looks again at whether the unit may start."""
        if (
            self.ask is None
            or not u.batch
            or u.batch in self.confirmed
            or self.sched.batch_begun(u.batch)
        ):
            return True
        if self.asking is not None:
            return False  # another chain's unit is being asked about: its answer comes first
        self.asking = u.batch
        nodes = sorted({n for x in self.sched.units if x.batch == u.batch for n in x.nodes})
        lock = self.sched.lock
        lock.release()
        try:
            go = self.ask(u.batch, nodes, lambda: self.sched.stop is not None)
        finally:
            lock.acquire()
            self.asking = None
            lock.notify_all()
        if go:
            self.confirmed.add(u.batch)
        elif self.sched.stop is None and self.sched.abort_asked is None:
            # the same path as a first Ctrl-C: recorded, shown, and the same command continues
            self.sched.abort_asked = f"aborted by the operator before batch {u.batch}"
            self.aborts.poll()
        return False
