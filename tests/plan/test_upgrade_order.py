"""The major upgrade's three commands are held in order by the milestones its units record
(`plan/upgrade_milestones.py`): `upgrade run` needs `upgrade prepare` done, the data plane the
control plane done on every control-plane node, `upgrade converge` the new code on every node
that changes. A command out of order is refused (exit 2) with the command to run first;
`stepwise plan` previews it with the banner; facts that show old code refuse the unpin and the
contract (exit 3) whatever the milestones say."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepwise.errors import InputError, UnsafePlanError
from stepwise.model import NO_FACTS, load_deployment, load_facts
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import make_plan, progress, selection_for
from stepwise.plan.progress import implicit_clears
from stepwise.verify import plan_verified

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "examples" / "classic.yaml"
OLD_FACTS = ROOT / "examples" / "facts" / "major-upgrade.yaml"
CONTROLLERS = [f"controller-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def dep():
    return load_deployment(CLASSIC)


def _all(dep, milestone) -> set[str]:
    return {milestone(n.name) for n in dep.nodes}


def _plan(dep, facts=NO_FACTS, progress=frozenset(), **kw):
    sel = selection_for(Workflow.UPGRADE, **kw)
    return make_plan(Workflow.UPGRADE, dep, facts.with_progress(progress), selection=sel)


def test_the_units_record_and_need_the_milestones(dep):
    plan = make_plan(Workflow.UPGRADE, dep)
    gate = next(u for u in plan.units if u.is_barrier and u.stage == "prepare")
    assert set(gate.marks) == _all(dep, progress.upgrade_prepared)
    marked = {m for u in plan.units for m in u.marks}
    assert _all(dep, progress.new_code) <= marked
    assert {progress.control_plane_done(n) for n in CONTROLLERS} <= marked
    unpin = next(u for u in plan.units if u.step is Step.UNPIN_RPC)
    assert set(unpin.requires) == _all(dep, progress.new_code)
    # a repository switch starts the next upgrade: the last one's milestones say nothing more
    repos = next(u for u in plan.units if u.step is Step.REPOS)
    assert progress.UPGRADE in implicit_clears(repos)


def test_converge_with_every_node_on_the_old_release_is_refused(dep):
    """The issue's command: every node at 1.0.0, nothing recorded: refused, not planned."""
    with pytest.raises(InputError) as exc:
        _plan(dep, load_facts(OLD_FACTS, dep), stage="converge")
    said = str(exc.value)
    assert "unpin_rpc" in said and "needs 'new code' of" in said
    assert "stepwise upgrade prepare -d" in said  # the earliest command still to run


def test_converge_is_unsafe_while_the_facts_show_old_code(dep):
    """Milestones recorded, yet the facts show every node at 1.0.0: exit 3, whatever the
    stage (the verifier's NoOldCodeInFactsAtConverge)."""
    done = _all(dep, progress.upgrade_prepared) | _all(dep, progress.new_code)
    facts = load_facts(OLD_FACTS, dep).with_progress(done)
    with pytest.raises(UnsafePlanError) as exc:
        plan_verified(
            Workflow.UPGRADE, dep, facts, selection_for(Workflow.UPGRADE, stage="converge")
        )
    assert "lifts the RPC pin" in str(exc.value) and "the facts show old" in str(exc.value)
    # the whole upgrade brings them to the new code first: safe
    whole = selection_for(Workflow.UPGRADE)
    plan_verified(Workflow.UPGRADE, dep, load_facts(OLD_FACTS, dep), whole, runnable=False)


def test_converge_after_the_run_on_every_node(dep):
    done = _all(dep, progress.upgrade_prepared) | _all(dep, progress.new_code)
    plan = _plan(dep, progress=done, stage="converge")
    assert Step.UNPIN_RPC in {u.step for u in plan.units}
    missing = done - {progress.new_code("compute-1")}
    with pytest.raises(InputError, match="needs 'new code' of compute-1 first"):
        _plan(dep, progress=missing, stage="converge")


def test_run_needs_prepare(dep):
    with pytest.raises(InputError) as exc:
        _plan(dep, stage="run")
    assert "needs 'prepared' of" in str(exc.value)
    assert "run first: stepwise upgrade prepare -d" in str(exc.value)
    assert _plan(dep, progress=_all(dep, progress.upgrade_prepared), stage="run").units
    # --limit: the nodes asked for prepared are enough for the control plane's nodes
    one = {progress.upgrade_prepared("controller-1")}
    assert _plan(dep, progress=one, stage="run", plane="control", limit="controller-1").units


def test_the_data_plane_needs_the_control_plane_on_every_node(dep):
    prepared = _all(dep, progress.upgrade_prepared)
    with pytest.raises(InputError) as exc:
        _plan(dep, progress=prepared, stage="run", plane="data")
    assert "needs 'control plane done' of controller-0 (and 2 more) first" in str(exc.value)
    assert "run first: stepwise upgrade run -d" in str(exc.value) and "--plane control" in str(
        exc.value
    )
    two = prepared | {progress.control_plane_done(n) for n in CONTROLLERS[:2]}
    with pytest.raises(InputError, match="'control plane done' of controller-2") as exc:
        _plan(dep, progress=two, stage="run", plane="data", limit="compute-0")
    # controller-2 is outside --limit: the command that reaches it is named all the same
    assert "run first: stepwise upgrade run -d" in str(exc.value)
    done = two | {progress.control_plane_done("controller-2")}
    assert _plan(dep, progress=done, stage="run", plane="data", limit="compute-0").units


def _cli(*words: str, tmp_path: Path):
    from stepwise.cli.main import _register, app

    _register()
    return CliRunner().invoke(
        app, [*words, "-d", str(CLASSIC), "--store", f"sqlite:///{tmp_path / 's.sqlite'}"]
    )


def test_a_command_out_of_order_exits_2_and_plan_previews_it(tmp_path: Path):
    r = _cli("upgrade", "converge", "--yes", tmp_path=tmp_path)
    assert r.exit_code == 2, r.output
    assert "run first: stepwise upgrade prepare" in " ".join(r.output.split())
    r = _cli("upgrade", "run", "--plane", "data", "--yes", tmp_path=tmp_path)
    assert r.exit_code == 2, r.output
    for stage in (("--stage", "converge"), ("--stage", "run", "--plane", "data")):
        r = _cli("plan", "upgrade", *stage, tmp_path=tmp_path)
        assert r.exit_code == 0, r.output
        assert "preview" in r.output and "done by earlier commands" in r.output
