"""How the engine cuts a plan into ansible-playbook processes (chains) and when it starts
them: a path is one process, branches are several, and the processes never wait for each
other forever, whatever the DAG and the bound on parallel units."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from stepwise.model.vocab import Step, UnitState
from stepwise.plan.units import Unit
from stepwise.run.chains import make_chains
from stepwise.run.scheduler import Scheduler


def _u(uid: str, *after: str, once: bool = False, step: Step = Step.STOP) -> Unit:
    return Unit(uid, step, ("n",), ("s",), after=after, idempotent=not once)


def _ids(chains) -> list[list[str]]:
    return [[u.id for u in c.units] for c in chains]


def test_a_path_through_barriers_is_one_process():
    units = [
        _u("u1"),
        _u("b1", "u1", step=Step.GATE),
        _u("u2", "b1"),
        _u("u3", "u2"),
        _u("b2", "u2", "u3", step=Step.GATE),
        _u("u4", "b2"),
    ]
    has_play = {u.id: not u.id.startswith("b") for u in units}
    assert _ids(make_chains(units, has_play)) == [["u1", "u2", "u3", "u4"]]


def test_independent_branches_are_separate_processes_and_a_join_continues_one_of_them():
    units = [_u("a1"), _u("b1"), _u("a2", "a1"), _u("b2", "b1"), _u("j", "a2", "b2")]
    chains = make_chains(units, {u.id: True for u in units})
    assert sorted(_ids(chains)) == [["a1", "a2"], ["b1", "b2", "j"]]


def test_a_once_only_unit_runs_alone_and_detached():
    units = [_u("u1"), _u("x", "u1", once=True), _u("u2", "x"), _u("u3", "u2")]
    chains = make_chains(units, {u.id: True for u in units})
    assert _ids(chains) == [["u1"], ["x"], ["u2", "u3"]]
    assert [c.detached for c in chains] == [False, True, False]


@st.composite
def dags(draw) -> tuple[list[Unit], dict[str, bool], int, int]:
    n = draw(st.integers(1, 30))
    units: list[Unit] = []
    has_play: dict[str, bool] = {}
    for i in range(n):
        after = (
            draw(st.lists(st.sampled_from([u.id for u in units]), max_size=3, unique=True))
            if units
            else []
        )
        barrier = draw(st.booleans()) and draw(st.booleans())
        once = not barrier and draw(st.integers(0, 9)) == 0
        uid = f"u{i}"
        units.append(_u(uid, *after, once=once, step=Step.GATE if barrier else Step.STOP))
        has_play[uid] = not barrier
    return units, has_play, draw(st.integers(1, 3)), draw(st.integers(0, 2**16))


@settings(max_examples=300, deadline=None)
@given(dags())
def test_the_processes_finish_every_dag_in_order_within_the_bounds(case):
    """Simulates the engine: a started process runs its chain's units one after another, each
    when the scheduler lets it through its gate, each taking a random time."""
    units, has_play, max_parallel, seed = case
    rnd = random.Random(seed)
    sched = Scheduler(units, (), max_parallel=max_parallel, has_play=has_play)
    chains = make_chains(units, has_play)
    # every unit with a play is in exactly one chain, in an order the DAG allows
    assert sorted(u.id for c in chains for u in c.units) == sorted(
        u for u, p in has_play.items() if p
    )
    pos = {u.id: i for i, u in enumerate(units)}
    for c in chains:
        assert [pos[u.id] for u in c.units] == sorted(pos[u.id] for u in c.units)
        assert not c.detached or len(c.units) == 1
    done_at: dict[str, int] = {}
    started_at: dict[str, int] = {}
    left: dict[str, int] = {}  # running unit -> time left
    alive: dict[str, object] = {}
    launched: set[str] = set()
    for b in sched.pass_barriers():
        done_at[b] = -1
    for t in range(10_000):
        progress = False
        for c in chains:
            if c.id not in launched and sched.should_launch(c, list(alive.values())):
                if len(alive) >= max_parallel + 2:
                    assert sched.stalled(list(alive.values()))
                launched.add(c.id)
                alive[c.id] = c
                progress = True
                if c.detached:
                    sched.mark_running(c.first.id)
                    started_at[c.first.id] = t
                    left[c.first.id] = rnd.randint(1, 4)
        for cid, c in list(alive.items()):
            if any(u.id in left for u in c.units):
                continue
            nxt = sched.next_unit(c)
            if nxt is None:
                del alive[cid]  # the process ends after its last play
                progress = True
            elif sched.may_start(nxt):  # the gate lets it through
                sched.mark_running(nxt)
                started_at[nxt] = t
                left[nxt] = rnd.randint(1, 4)
                progress = True
        assert len(sched.running()) <= max_parallel
        for uid in list(left):
            left[uid] -= 1
            if left[uid] == 0:
                del left[uid]
                for b in [uid] + sched.mark(uid, UnitState.DONE):
                    done_at[b] = t
                progress = True
        if sched.finished() and not alive:
            break
        assert progress or left, (
            f"the processes wait for each other forever at t={t}: {sched.state}"
        )
    assert all(s is UnitState.DONE for s in sched.state.values())
    for u in units:
        for a in u.after:
            if u.id in started_at:
                assert done_at[a] < started_at[u.id], f"{u.id} started before {a} was done"
