"""The rollback of a minor update run: planned from what the run recorded in the store, it
touches exactly the nodes the run changed, takes them to their versions before it, keeps the
update's availability rules and verifies; runs that cannot be taken back are refused."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import pytest

from stepwise.errors import InputError
from stepwise.model.catalog import allowance
from stepwise.model.facts import Facts, NodeFacts, PackageFact, facts_to_dict
from stepwise.model.vocab import RunState, Step, UnitState, Workflow
from stepwise.plan import selection_for
from stepwise.plan.rollback import DOWNGRADE
from stepwise.run.render import render_unit
from stepwise.run.resume import run_key
from stepwise.run.rollback import rollback_facts
from stepwise.run.store.store import RunOrigin, open_store
from stepwise.verify import plan_verified
from tests.plan.cloud import classic, cycles, max_down

OLD, NEW = "1.0.0", "1.1.0"
LIMIT = "controller-0,compute-0"
CHANGED = {"controller-0", "compute-0"}


@pytest.fixture(scope="module")
def dep():
    return classic()


def _facts(dep, installed: dict[str, str], extra: tuple[str, ...] = ()) -> Facts:
    """Every package of every node has NEW available; `installed`: node -> its version (OLD
    where not named). Each node has the unowned kernel too, and the `extra` packages at OLD."""
    nodes = {}
    for n in dep.nodes:
        have = installed.get(n.name, OLD)
        names = {p for s in dep.role_of(n).services for p in dep.catalog[s].packages}
        pk = {p: PackageFact(have, NEW) for p in sorted(names | {"kernel"})}
        pk.update({p: PackageFact(OLD, NEW) for p in extra})
        nodes[n.name] = NodeFacts(MappingProxyType(pk), 8, 9)
    return Facts(MappingProxyType(nodes), True, "<test>")


def _record(store, dep, workflow, selection, facts, state=RunState.DONE, done=True) -> int:
    """A run of `workflow` recorded as the engine records it, its units done (or pending)."""
    plan = plan_verified(workflow, dep, facts, selection, preview=True)  # earlier stages as done
    rid = store.create_run(
        dep.name,
        str(workflow),
        run_key(workflow, selection),
        RunOrigin(f"stepwise {workflow} run"),
        dict(plan.params),
        plan.to_json(),
        [u.to_json() for u in plan.units],
        facts=facts_to_dict(facts),
    )
    if done:
        store.set_units(rid, [u.id for u in plan.units], UnitState.DONE)
    store.finish_run(rid, state)
    return rid


@pytest.fixture
def updated(dep, tmp_path: Path):
    """A store with discover's facts, then an update run of controller-0 and compute-0 that
    finished; the nodes reported their new versions after it."""
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    before = _facts(dep, {})
    store.save_facts(dep.name, facts_to_dict(before))
    rid = _record(store, dep, Workflow.UPDATE, selection_for(Workflow.UPDATE, LIMIT), before)
    store.save_facts(dep.name, facts_to_dict(_facts(dep, dict.fromkeys(CHANGED, NEW))))
    return store, rid


def _rollback(dep, store, rid):
    fx = rollback_facts(dep, store, rid)
    return plan_verified(Workflow.ROLLBACK, dep, fx, selection_for(Workflow.ROLLBACK, of_run=rid))


def test_rollback_touches_exactly_the_nodes_the_run_changed_and_targets_their_old_versions(
    dep, updated
):
    store, rid = updated
    plan = _rollback(dep, store, rid)
    touched = {n for u in plan.units if u.stops or u.starts for n in u.nodes}
    assert touched == CHANGED
    packages = [u for u in plan.units if u.step is Step.PACKAGES]
    back = {n: v for u in packages for n, v in u.vars[DOWNGRADE].items()}
    assert set(back) == CHANGED
    for node, versions in back.items():
        owned = {
            p for s in dep.services_on(dep.node_by_name[node]) for p in dep.catalog[s].packages
        }
        # every package the run updated there, the unowned kernel too, back to the old version
        assert set(versions) == owned | {"kernel"}, node
        assert set(versions.values()) == {OLD}, node
    # each instance on those nodes cycled once, nothing else
    assert set(cycles(plan).values()) == {(1, 1)}
    assert {n for _, n in cycles(plan)} == CHANGED
    assert plan.params["rollback_of"] == rid and plan.params["of_run"] == rid


def test_rollback_keeps_the_updates_availability_rules(dep, tmp_path: Path):
    # a run that changed every node: the rollback rolls them all in the update's batches
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    before = _facts(dep, {})
    rid = _record(store, dep, Workflow.UPDATE, selection_for(Workflow.UPDATE), before)
    store.save_facts(dep.name, facts_to_dict(_facts(dep, {n.name: NEW for n in dep.nodes})))
    plan = _rollback(dep, store, rid)
    update = plan_verified(Workflow.UPDATE, dep, before, selection_for(Workflow.UPDATE))
    worst = max_down(plan)
    assert worst == max_down(update)
    for s, n in worst.items():
        a = allowance(dep.catalog[s], len(dep.instances[s]))
        assert a is None or n <= a, (s, n, a)
    assert plan.windows == ()
    assert [(u.step, u.nodes, u.batch) for u in plan.units] == [
        (u.step, u.nodes, u.batch) for u in update.units
    ]


def test_rollback_downgrades_instead_of_updating(dep, updated):
    store, rid = updated
    plan = _rollback(dep, store, rid)
    unit = next(u for u in plan.units if u.step is Step.PACKAGES and "compute-0" in u.nodes)
    play = render_unit(plan, unit, dep)
    text = str(play["tasks"])
    assert "'dnf', '-y', 'downgrade'" in text and "'update'" not in text
    assert play["vars"][DOWNGRADE]["compute-0"] == {"kernel": OLD, "pkg-nova_compute": OLD}
    # what the node reports afterwards includes what went back
    assert set(play["vars"]["stepwise_record_packages"]["compute-0"]) == {
        "kernel",
        "pkg-nova_compute",
    }


def test_rollback_of_what_is_already_back_plans_nothing(dep, updated):
    store, rid = updated
    store.save_facts(dep.name, facts_to_dict(_facts(dep, {})))  # the nodes run OLD again
    assert _rollback(dep, store, rid).units == ()


@pytest.mark.parametrize(
    "case, said",
    [
        ("unknown", "has no run 99"),
        ("failed", "it is failed, not finished"),
        ("upgrade", "it ran upgrade, not a minor update"),
        ("no_facts", "recorded no package versions"),
        ("rolled_back", "rolled it back already"),
        ("later", "changed packages on compute-0 after it"),
    ],
)
def test_a_run_that_cannot_be_taken_back_is_refused_with_the_reason(
    dep, tmp_path: Path, case: str, said: str
):
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    before = _facts(dep, {})
    sel = selection_for(Workflow.UPDATE, LIMIT)
    rid = 99
    if case == "failed":
        rid = _record(store, dep, Workflow.UPDATE, sel, before, RunState.FAILED, done=False)
    elif case == "upgrade":
        up = selection_for(Workflow.UPGRADE, stage="converge")
        rid = _record(store, dep, Workflow.UPGRADE, up, before.without_packages())
    elif case == "no_facts":
        rid = _record(store, dep, Workflow.UPDATE, sel, before.without_packages())
    elif case in ("rolled_back", "later"):
        rid = _record(store, dep, Workflow.UPDATE, sel, before)
        after = _facts(dep, dict.fromkeys(CHANGED, NEW))
        store.save_facts(dep.name, facts_to_dict(after))
        if case == "rolled_back":
            rb = rollback_facts(dep, store, rid)
            _record(store, dep, Workflow.ROLLBACK, selection_for(Workflow.ROLLBACK, of_run=rid), rb)
        else:
            later = _facts(dep, dict.fromkeys(CHANGED, NEW), extra=("openvswitch",))
            _record(store, dep, Workflow.UPDATE, selection_for(Workflow.UPDATE, "compute-0"), later)
    with pytest.raises(InputError) as e:
        rollback_facts(dep, store, rid)
    assert said in str(e.value) and e.value.problems[0].field == "--run", str(e.value)


def test_a_run_that_switched_containers_is_refused_not_half_taken_back(tmp_path: Path):
    """A rollback takes back packages: of an update that switched containers to new images it
    would say done with the containers still on them, so it is refused, naming the nodes."""
    from tests.plan.test_styles import image_facts, tripleo_cloud

    dep = tripleo_cloud()
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    rid = _record(
        store, dep, Workflow.UPDATE, selection_for(Workflow.UPDATE), image_facts(dep, {"api"})
    )
    with pytest.raises(InputError) as e:
        rollback_facts(dep, store, rid)
    said = str(e.value)
    assert "switched containers to new images on ctl-0, ctl-1, ctl-2" in said, said
    assert e.value.problems[0].field == "--run"
    # a run that switched no container (no digest moved) is no such run
    idle = _record(
        store,
        dep,
        Workflow.UPDATE,
        selection_for(Workflow.UPDATE, "ctl-0"),
        image_facts(dep, set()),
    )
    back = rollback_facts(dep, store, idle)
    assert all(not nf.packages and not nf.images for nf in back.nodes.values())


def test_rollback_needs_the_run_and_only_a_rollback_takes_one():
    with pytest.raises(InputError, match="needs the update run"):
        selection_for(Workflow.ROLLBACK)
    with pytest.raises(InputError, match="--run applies to a rollback"):
        selection_for(Workflow.UPDATE, of_run=3)


def test_the_cli_shows_the_rollback_and_refuses_what_it_cannot_take_back(tmp_path: Path):
    from typer.testing import CliRunner

    from stepwise.cli.main import _register, app
    from stepwise.model import load_deployment

    _register()
    root = Path(__file__).resolve().parents[2]
    path = tmp_path / "classic.yaml"
    path.write_text((root / "examples" / "classic.yaml").read_text())
    dep = load_deployment(path)
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    store = open_store(url)
    before = _facts(dep, {})
    rid = _record(store, dep, Workflow.UPDATE, selection_for(Workflow.UPDATE, LIMIT), before)
    store.save_facts(dep.name, facts_to_dict(_facts(dep, dict.fromkeys(CHANGED, NEW))))
    sel = selection_for(Workflow.UPDATE)
    failed = _record(store, dep, Workflow.UPDATE, sel, before, RunState.FAILED, done=False)

    def cli(*args: str):
        return CliRunner().invoke(app, [*args, "-d", str(path), "--store", url])

    shown = cli("plan", "rollback", "--run", str(rid), "--json", "--html", str(tmp_path / "r.html"))
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["workflow"] == "rollback"
    assert {n for u in doc["units"] if u["step"] == "packages" for n in u["nodes"]} == CHANGED
    assert (tmp_path / "r.html").stat().st_size > 0
    tree = cli("plan", "rollback", "--run", str(rid))
    assert tree.exit_code == 0 and "controller-0" in tree.output, tree.output
    for args, said in [
        (("plan", "rollback"), "needs the update run"),
        (("plan", "update", "--run", str(rid)), "--run applies to a rollback"),
        (("rollback", "run", "--run", str(failed), "--yes"), f"cannot roll back run {failed}"),
    ]:
        r = cli(*args)
        assert r.exit_code == 2 and said in r.output, (args, r.output)


def test_a_recorded_version_that_is_no_version_is_refused(dep):
    bad = _facts(dep, {})
    nodes = dict(bad.nodes)
    nodes["compute-0"] = NodeFacts(
        MappingProxyType({"pkg-nova_compute": PackageFact(NEW, "{{ lookup('pipe', 'id') }}")}), 8, 9
    )
    fx = Facts(MappingProxyType(nodes), True, "run 7")
    with pytest.raises(InputError, match="not a package version") as e:
        plan_verified(Workflow.ROLLBACK, dep, fx, selection_for(Workflow.ROLLBACK, of_run=7))
    assert e.value.problems[0].field == "nodes.compute-0.packages.pkg-nova_compute"
