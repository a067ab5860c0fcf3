"""The prestage stage: first, N nodes at once, nothing after it before it, and without it the
plan as before."""

from __future__ import annotations

import json

import pytest

from stepwise.errors import InputError
from stepwise.model.vocab import Stage, Step, Workflow
from stepwise.plan import make_plan, selection_for
from stepwise.plan.commands import Command
from stepwise.plan.options import command_selection
from stepwise.plan.units import prestage_seconds
from stepwise.verify import verify_plan
from stepwise.verify.bounds import lower_bound, prestage_bound
from tests.plan.cloud import classic, facts

DISRUPTIVE = (Step.LEAVE, Step.STOP, Step.REBOOT)


@pytest.fixture(scope="module")
def dep():
    return classic()


def _plan(dep, workflow=Workflow.UPDATE, n=4, fx=None, **kw):
    sel = selection_for(workflow, prestage=n, **kw)
    return make_plan(workflow, dep, *(() if fx is None else (fx,)), selection=sel)


def _ancestors(plan) -> dict[str, set[str]]:
    """unit -> every unit it waits for, directly or not."""
    out: dict[str, set[str]] = {}
    for u in plan.units:
        out[u.id] = set(u.after).union(*(out[a] for a in u.after))
    return out


def _prestages(plan):
    return [u for u in plan.units if u.step is Step.PRESTAGE]


@pytest.mark.parametrize("workflow", [Workflow.UPDATE, Workflow.UPGRADE])
def test_prestage_is_first_and_everything_after_waits_for_every_prestage(dep, workflow):
    plan = _plan(dep, workflow)
    pre = _prestages(plan)
    assert {u.nodes[0] for u in pre} == {n.name for n in dep.nodes}  # one per changing node
    assert all(len(u.nodes) == 1 and u.stage is Stage.PRESTAGE for u in pre)
    ids = {u.id for u in pre}
    anc = _ancestors(plan)
    last = max(plan.units.index(u) for u in pre)
    later = plan.units[last + 1 :]
    assert later and all(u.stage is not Stage.PRESTAGE for u in later[1:])
    # a failed prestage anywhere fails the run before any later unit may start
    assert all(ids <= anc[u.id] for u in later[1:])
    for u in pre:  # fetching takes nothing down
        assert not u.stops and not u.starts
    # the first units are prestage (or the repository switch they fetch from)
    assert {u.step for u in plan.units[: last + 1]} <= {Step.PRESTAGE, Step.REPOS}


@pytest.mark.parametrize("n", [1, 2, 3, 4, 20])
def test_at_most_n_nodes_fetch_at_once_whatever_the_durations(dep, n):
    """The bound is in the DAG: the prestage units form at most N chains, so no schedule of
    the plan (the engine's, or any stretched one) runs more than N at once."""
    plan = _plan(dep, n=n)
    pre = _prestages(plan)
    ids = {u.id for u in pre}
    heads = [u for u in pre if not ids & set(u.after)]
    assert len(heads) == min(n, len(pre))
    waited = [a for u in pre for a in u.after if a in ids]
    assert len(waited) == len(set(waited))  # each waited for by one at most: disjoint chains
    assert all(len(ids & set(u.after)) <= 1 for u in pre)
    # and on the estimate's schedule
    for u in pre:
        running = [v for v in pre if v.start_s < u.end_s and u.start_s < v.end_s]
        assert len(running) <= n
    assert plan.params["prestage"] == n


def test_no_prestage_is_the_plan_as_before(dep):
    before = make_plan(Workflow.UPDATE, dep)
    off = _plan(dep, n=0)
    assert json.dumps(off.to_json()) == json.dumps(before.to_json())
    assert not _prestages(off) and "prestage" not in off.params
    on = _plan(dep, n=4)
    # the same visits after the prestage stage: only the stage and its gate were added
    kept = [u for u in on.units if u.stage is not Stage.PRESTAGE]
    assert [(u.step, u.nodes, u.services) for u in kept] == [
        (u.step, u.nodes, u.services) for u in before.units
    ]


def test_a_nodes_disruptive_units_wait_for_its_prestage(dep):
    fx = facts(dep, {"compute-1": ["pkg-nova_compute"], "controller-0": ["pkg-keystone"]})
    plan = _plan(dep, fx=fx, n=2)
    pre = {u.nodes[0]: u.id for u in _prestages(plan)}
    assert set(pre) == {"compute-1", "controller-0"}  # only nodes that change fetch
    anc = _ancestors(plan)
    disruptive = [u for u in plan.units if u.step in DISRUPTIVE]
    assert disruptive
    for u in disruptive:
        for node in u.nodes:
            assert pre[node] in anc[u.id], (u.id, node)


def test_a_node_that_only_restarts_fetches_nothing(tmp_path):
    from stepwise.model import load_deployment
    from stepwise.model.facts import load_facts
    from tests.plan.test_config_change import EXAMPLES, _facts_file

    ex = load_deployment(EXAMPLES / "classic.yaml")
    config = {"controller-1": {"keystone": True}}
    fx = load_facts(_facts_file(tmp_path, ex, config, {"compute-0": ["kernel"]}), ex)
    plan = _plan(ex, fx=fx)
    # controller-1 only restarts keystone (a new configuration): nothing to fetch there
    assert [u.nodes for u in _prestages(plan)] == [("compute-0",)]
    assert any(u.step is Step.STOP and "controller-1" in u.nodes for u in plan.units)


def test_upgrade_switches_repositories_in_the_prestage_and_prepare_runs_it(dep):
    plan = _plan(dep, Workflow.UPGRADE)
    repos = [u for u in plan.units if u.step is Step.REPOS]
    assert len(repos) == 1 and repos[0].stage is Stage.PRESTAGE
    anc = _ancestors(plan)
    assert all(repos[0].id in anc[u.id] for u in _prestages(plan))  # fetch the new release
    heads = [u for u in _prestages(plan) if repos[0].id in u.after]
    assert len(heads) == 4  # the N lanes start after the switch
    wf, prepare = command_selection(Command.UPGRADE_PREPARE, prestage=3)
    got = make_plan(wf, dep, selection=prepare)
    assert _prestages(got) and any(u.step is Step.REPOS for u in got.units)
    assert got.params["prestage"] == 3
    wf, run = command_selection(Command.UPGRADE_RUN, prestage=3)
    assert run.prestage == 0  # run and converge plan as before
    ran = make_plan(wf, dep, selection=run, preview=True)  # as `plan` shows it before prepare
    assert not _prestages(ran) and not any(u.step is Step.REPOS for u in ran.units)
    off = make_plan(wf, dep, selection=selection_for(Workflow.UPGRADE, prestage=0))
    assert [u for u in off.units if u.step is Step.REPOS][0].stage is Stage.PREPARE


def test_workflows_without_a_prestage_and_a_negative_bound(dep):
    sel = selection_for(Workflow.SYSTEM_UPGRADE, prestage=4)
    assert sel.prestage == 0 and "prestage" not in sel.params()
    with pytest.raises(InputError) as info:
        selection_for(Workflow.UPDATE, prestage=-1)
    assert info.value.problems[0].field == "--prestage-parallel"


def test_estimate_and_lower_bound_count_the_prestage_apart(dep):
    off = verify_plan(_plan(dep, n=0), dep)
    on = verify_plan(_plan(dep, n=2), dep)
    fetch = prestage_seconds(on)
    assert fetch == pytest.approx(30.0 * 5)  # 10 nodes, 2 at once, 30 s each
    assert on.duration_s == pytest.approx(off.duration_s + fetch)
    # the disruptive part's bound is the one without prestage; the prestage's is added apart
    assert prestage_bound(on, dep) == pytest.approx(fetch)
    assert on.prestage_bound_s == pytest.approx(fetch)
    assert lower_bound(on, dep) == pytest.approx(lower_bound(off, dep) + prestage_bound(on, dep))
    assert on.lower_bound_s <= on.duration_s
    assert off.prestage_bound_s == 0.0
    assert prestage_seconds(off) == 0.0


def test_the_management_upgrade_switches_then_fetches_before_it_stops_anything():
    from stepwise.model import load_deployment
    from tests.plan.test_config_change import EXAMPLES

    uc = load_deployment(EXAMPLES / "undercloud.yaml")
    variables = {"target_release": "R2"}
    wf = Workflow.UNDERCLOUD_UPGRADE

    def plan(n, **more):
        sel = selection_for(wf, prestage=n)
        return make_plan(wf, uc, selection=sel, variables={**variables, **more})

    before, on = plan(0), plan(2)
    assert [u.step for u in on.units[:3]] == [Step.REPOS, Step.PRESTAGE, Step.GATE]
    assert all(u.stage is Stage.PRESTAGE for u in on.units[:3])
    assert not on.units[1].stops
    # after the stage, the upgrade as before without its own repository switch
    rest = [(u.step, u.nodes) for u in on.units[3:]]
    assert rest == [(u.step, u.nodes) for u in before.units if u.step is not Step.REPOS]
    assert verify_plan(on, uc).windows
    # the OS upgrade's leapp prepare fetches the new OS itself: no prestage there
    assert not _prestages(plan(2, system_upgrade_mode="in-place"))


def test_the_cli_plans_the_prestage_by_default_and_shows_it_apart(tmp_path):
    from typer.testing import CliRunner

    from stepwise.cli.main import _register, app
    from tests.plan.test_config_change import EXAMPLES

    _register()
    example = str(EXAMPLES / "classic.yaml")
    store = ("--store", f"sqlite:///{tmp_path / 'none.sqlite'}")

    def plan(*args):
        r = CliRunner().invoke(app, ["plan", "update", "-d", example, *store, *args])
        assert r.exit_code == 0, r.output
        return r.stdout

    doc = json.loads(plan("--json", "--prestage-parallel", "3"))
    assert doc["params"]["prestage"] == 3
    assert doc["units"][0]["step"] == "prestage" and doc["units"][0]["stage"] == "prestage"
    assert [p["name"] for p in doc["parts"]][0] == "prestage"
    assert "prestage" not in {
        u["stage"] for u in json.loads(plan("--json", "--no-prestage"))["units"]
    }
    shown = " ".join(plan("--prestage-parallel", "4").split())  # a narrow terminal wraps it
    # the disruptive part's estimate and bound, then the prestage apart: 8 nodes, 4 at once
    assert "estimated 0:57:05 for the disruptive part, 1.00x the lower bound 0:57:05" in shown
    assert "after a prestage of ~0:01:00 (nothing stops; 1.00x its bound 0:01:00)" in shown


@pytest.mark.parametrize(
    ("workflow", "plane"), [(Workflow.UPDATE, "data"), (Workflow.UPGRADE, "control")]
)
def test_a_plane_keeps_the_prestage_before_its_disruption(dep, workflow, plane):
    """--plane drops the rollout's barriers, through which the visits waited for the
    prestage's gate: they wait for it directly, and the verifier accepts the plan."""
    sel = selection_for(workflow, prestage=4, plane=plane)
    plan = make_plan(workflow, dep, selection=sel, preview=True)  # converge comes later
    anc = _ancestors(plan)
    pre = {u.nodes[0]: u.id for u in _prestages(plan)}
    disruptive = [u for u in plan.units if u.step in DISRUPTIVE]
    assert disruptive and all(pre[n] in anc[u.id] for u in disruptive for n in u.nodes)
    verify_plan(plan, dep)
    off = make_plan(workflow, dep, selection=selection_for(workflow, plane=plane), preview=True)
    assert not _prestages(off)


def test_a_container_nodes_prestage_pulls_and_checks_its_image_and_runs_no_dnf():
    """The style's prestage tasks come through the same lookup as every step's (`styled`):
    the planner and the renderer know nothing of containers."""
    from stepwise.run.render import render_unit
    from tests.plan.test_styles import NEW, image_facts, tripleo_cloud

    dep = tripleo_cloud()
    fx = image_facts(dep, {"api", "agent"})
    plan = verify_plan(
        make_plan(Workflow.UPDATE, dep, fx, selection=selection_for(Workflow.UPDATE, prestage=2)),
        dep,
    )
    pre = _prestages(plan)
    assert {u.nodes[0] for u in pre} == {n.name for n in dep.nodes}
    play = render_unit(plan, next(u for u in pre if u.nodes == ("cmp-0",)), dep)
    assert play is not None
    text = json.dumps(play)
    assert "dnf" not in text and "podman" in text and "pull" in text
    assert play["vars"]["stepwise_images"]["cmp-0"]["agent"]["target"] == NEW
    modules = {k for b in play["tasks"] for t in b["block"] for k in t if "." in k}
    assert "ansible.builtin.assert" in modules  # the digest check
