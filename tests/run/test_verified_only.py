"""What the engine is handed is exactly what the verifier checked, for any selection; a
stored plan is never what runs, so editing it in the store is refused on resume."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from conftest import write_cloud
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import update

import stepwise.run.resume as resume
import stepwise.verify as verify_layer
from stepwise.errors import InputError, UnsafePlanError
from stepwise.model import load_deployment
from stepwise.model.vocab import RunState
from stepwise.plan.limits import resolve_limit
from stepwise.plan.selection import Selection
from stepwise.run.events import RunResult
from stepwise.run.resume import RunRequest, run_plan
from stepwise.run.store import open_store
from stepwise.run.store.models import RunRow
from tests.plan.test_properties import clouds
from tests.shares import assert_share


class Captured:
    def __init__(self) -> None:
        self.verified: list = []
        self.executed: list = []


@pytest.fixture
def captured(monkeypatch) -> Captured:
    """The verifier and the engine as the run layer calls them, recording their arguments; the
    engine does nothing (no Ansible) and reports the run failed, so it stays resumable."""
    cap = Captured()
    real_verify = resume.verify_plan

    def verify(plan, dep, **kw):
        cap.verified.append(plan)
        return real_verify(plan, dep, **kw)

    def execute(store, dep, plan, run_id, todo, **kw):
        cap.executed.append((plan, list(todo)))
        return RunResult(
            run_id, RunState.FAILED, "stopped by the test", units_total=len(plan.units)
        )

    monkeypatch.setattr(resume, "verify_plan", verify)
    # the one path to a verified plan (stepwise.verify.plan_verified) calls it from there
    monkeypatch.setattr(verify_layer, "verify_plan", verify)
    monkeypatch.setattr(resume, "execute", execute)
    return cap


def _signature(plan) -> list[tuple]:
    return [
        (
            u.id,
            tuple(u.nodes),
            tuple(u.after),
            tuple(sorted((k, tuple(v)) for k, v in u.stops.items())),
            tuple(sorted((k, tuple(v)) for k, v in u.starts.items())),
            tuple(sorted((u.work or {}).items())),
        )
        for u in plan.units
    ]


@st.composite
def selections(draw, dep):
    names = [n.name for n in dep.nodes] + [r.name for r in dep.roles]
    picked = draw(st.lists(st.sampled_from(names), min_size=0, max_size=3, unique=True))
    limit = ",".join(picked) if picked else None
    tags = draw(st.sampled_from([(), ("controlplane",), ("dataplane",)]))
    skip = draw(st.sampled_from([(), ("converge",), ("controlplane",)]))
    return Selection(limit=limit, tags=tags, skip_tags=skip)


#: the least share of examples (refused ones included) that must run a plan: a test where
#: every selection is refused or selects nothing checks no handed plan. Four random runs gave
#: 29-67% (21-38 runs); the draws are not derandomized, so the bar is well below them.
MIN_RAN = 0.15


def test_the_engine_gets_exactly_the_plan_the_verifier_checked(tmp_path_factory, captured):
    outcomes: Counter[str] = Counter()

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(data=st.data(), workflow=st.sampled_from(["update", "upgrade"]))
    def handed_as_checked(data, workflow):
        outcome = _handed_as_checked(tmp_path_factory, captured, data, workflow)
        outcomes[outcome] += 1
        event(outcome)
        assume(outcome != "refused")

    handed_as_checked()
    assert_share(outcomes, "ran", MIN_RAN)


def _handed_as_checked(tmp_path_factory, captured: Captured, data, workflow) -> str:
    """Run a random selection of a random cloud with the engine faked: "refused" (nothing
    ran), "nothing" (nothing selected, nothing ran) or "ran" (what ran is what was checked)."""
    dep = data.draw(clouds())
    sel = data.draw(selections(dep))
    root = tmp_path_factory.mktemp("run")
    store = open_store(f"sqlite:///{root / 'store.sqlite'}")
    captured.verified.clear()
    captured.executed.clear()
    try:
        res = run_plan(RunRequest(store, dep, workflow, selection=sel, lock_path=root / "lock"))
    except (InputError, UnsafePlanError):
        assert not captured.executed, "a refused selection must run nothing"
        return "refused"
    if res.status == "nothing":
        assert not captured.executed
        return "nothing"
    ((handed, todo),) = captured.executed
    checked = captured.verified[-1]
    assert _signature(handed) == _signature(checked)
    assert [u.id for u in todo] == [u.id for u in handed.units]
    # and the selection holds in what runs: only selected nodes, stops/starts within them,
    # no edge to a unit that is not there
    ids = {u.id for u in handed.units}
    for u in handed.units:
        assert set(u.after) <= ids
        for nodes in list(u.stops.values()) + list(u.starts.values()):
            assert set(nodes) <= set(u.nodes)
        assert set(u.work or {}) <= set(u.nodes)
    if sel.limit:
        allowed = set(resolve_limit(dep, sel.limit) or ())
        assert {n for u in handed.units for n in u.nodes} <= allowed
    return "ran"


def test_a_plan_edited_in_the_store_is_refused_on_resume(tmp_path: Path, captured):
    dep = load_deployment(write_cloud(tmp_path, computes=2, controllers=1))
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    req = RunRequest(store, dep, "update", lock_path=tmp_path / "lock")
    first = run_plan(req)
    assert first.status == "failed" and len(captured.executed) == 1
    stored = store.latest_run(dep.name, resume.run_key("update", Selection()))
    plan = dict(stored.plan)
    units = [dict(u) for u in plan["units"]]
    victim = next(u for u in units if u.get("nodes"))
    victim["vars"] = {
        **dict(victim.get("vars", {})),
        "evil": "{{ lookup('pipe', 'touch /tmp/pwned') }}",
    }
    plan["units"] = units
    with store.session() as s:
        s.execute(update(RunRow).where(RunRow.id == stored.id).values(plan=plan))
    with pytest.raises(InputError, match=f"unit {victim['id']} .*vars"):
        run_plan(req)
    assert len(captured.executed) == 1, "nothing ran from the edited plan"
    # the unedited plan resumes
    with store.session() as s:
        s.execute(update(RunRow).where(RunRow.id == stored.id).values(plan=stored.plan))
    assert run_plan(req).resumed
    assert len(captured.executed) == 2
