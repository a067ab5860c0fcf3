"""Abort: stop a run at the next safe point on purpose.

Two ways to ask, one effect. `stepwise abort` records the request in the store (the run's status
becomes `aborting`), so it reaches a run started on another machine that shares a PostgreSQL
store; the engine polls its run's status four times a second (one small query). A first
Ctrl-C in the run's terminal asks the same in-process (the signal handler only sets a flag,
the engine's loop turns it into the abort and records it). The scheduler then lets every
batch begun finish, and nothing else start (`Scheduler.request_abort`); the run is recorded
`aborted`, and the same command continues it.
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from pathlib import Path

from stepwise.errors import InputError, Problem, StepwiseError
from stepwise.run.events import Observer
from stepwise.run.lock import DbLock, describe, read_holder
from stepwise.run.scheduler import Scheduler
from stepwise.run.store.store import RunInfo, Store

#: how often the engine reads its run's status for an abort request
POLL_S = 0.25


class AbortWatch:
    """Turns an abort request (the store's, or the scheduler's flag from a Ctrl-C) into the
    scheduler's abort. Called by the engine's loop with its lock held."""

    def __init__(self, store: Store, run_id: int, sched: Scheduler, observer: Observer):
        self.store, self.run_id, self.sched, self.observer = store, run_id, sched, observer
        self.last = 0.0  # the first loop asks at once: a request may predate the engine

    def poll(self) -> None:
        if self.sched.stop is not None:
            return
        reason = self.sched.abort_asked
        if reason is not None:
            # recorded, so `status` says the run is aborting and why
            self._record(reason)
        else:
            if time.monotonic() - self.last < POLL_S:
                return
            self.last = time.monotonic()
            try:
                reason = self.store.abort_requested(self.run_id)
            except StepwiseError:
                return  # a store that does not answer now is asked again at the next poll
            if reason is None:
                return
        if self.sched.request_abort(reason):
            stop = self.sched.stop
            assert stop is not None
            running = set(self.sched.running())
            self.observer.run_aborting(reason, len(running), len(stop.finishing - running))

    def _record(self, reason: str) -> None:
        try:
            self.store.request_abort(self.run_id, reason)
        except StepwiseError:
            pass  # the run aborts anyway; only `status` will not say so before it ends


def run_alive(store: Store, cloud: str, run: RunInfo, lock_path: Path) -> bool:
    """Whether the process of a run recorded running is still there: it holds the cloud's lock
    file (same machine) or, with a PostgreSQL store, the cloud's lock in the database (a run on
    another machine)."""
    holder = read_holder(lock_path)
    if holder and holder.get("pid") == run.pid and holder.get("host", run.host) == run.host:
        return True
    return DbLock.held(store.engine, cloud)


def running_run(store: Store | None, cloud: str, lock_path: Path) -> RunInfo:
    """The cloud's run that is running now; refuses (InputError, exit 2) when none is."""
    runs = [r for r in store.runs(cloud, 5) if r.status.live] if store is not None else []
    run = runs[0] if runs else None
    if store is not None and run is not None and run_alive(store, cloud, run, lock_path):
        return run
    holder = read_holder(lock_path)
    if holder is not None and run is None:
        raise InputError(
            Problem(
                f"no run of cloud '{cloud}' has started yet: a stepwise command holds its lock "
                f"({describe(holder)}) and is still planning or asking for confirmation",
                file=str(lock_path),
                hint="answer or stop that command where it runs, or try again in a moment",
            )
        )
    if run is not None:
        raise InputError(
            Problem(
                f"no run of cloud '{cloud}' is running: run {run.id} is recorded {run.status} "
                "but its process is gone (killed or crashed); nothing to abort",
                hint=f"the same command continues it: {run.command}",
            )
        )
    raise InputError(
        Problem(
            f"no run of cloud '{cloud}' is running: nothing to abort",
            hint="`stepwise history` shows the runs recorded",
        )
    )


def request_abort(store: Store, run: RunInfo) -> bool:
    """Ask the run to stop at its next safe point; False when it was asked already."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name (a container's uid): the uid says who
        user = str(os.getuid())
    who = f"{user}@{socket.gethostname()}"
    return store.request_abort(run.id, f"aborted by `stepwise abort` ({who})")


def wait_for_end(
    store: Store, cloud: str, run_id: int, lock_path: Path, poll_s: float = 0.5
) -> RunInfo:
    """Wait until the run has ended (recorded anything but running or aborting), or its process
    is gone; the run as recorded then."""
    while True:
        run = store.run(run_id)
        assert run is not None
        if not run.status.live or not run_alive(store, cloud, run, lock_path):
            return store.run(run_id) or run
        time.sleep(poll_s)
