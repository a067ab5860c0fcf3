"""The prestage and the OS (issue #36 item 7): a node that goes to a new OS in the procedure
fetches nothing of the new release on the old OS; the others prestage as before."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from stepwise.model.deployment import load_deployment
from stepwise.model.facts import facts_from_dict, facts_to_dict, load_facts
from stepwise.model.vocab import Stage, Step, Workflow
from stepwise.plan import make_plan, selection_for

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "examples" / "classic.yaml"
MAJOR = ROOT / "examples" / "facts" / "major-upgrade.yaml"


def _prepare(dep, fx):
    sel = selection_for(Workflow.UPGRADE, prestage=4, stage=Stage.PREPARE)
    return make_plan(Workflow.UPGRADE, dep, fx, selection=sel)


def _facts(tmp_path: Path, dep, os_of: dict[str, dict[str, int]], default_os: dict[str, int]):
    """The example's major-upgrade facts with `defaults.os` and some nodes' `os` replaced."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe")
    doc = yaml.load(MAJOR.read_text())
    doc["defaults"]["os"] = default_os
    doc["nodes"] = {n: {"os": o} for n, o in os_of.items()}
    path = tmp_path / "facts.yaml"
    with path.open("w") as f:
        yaml.dump(doc, f)
    return load_facts(str(path), dep)


def test_a_declared_new_os_keeps_every_node_out_of_the_prestage():
    dep = load_deployment(str(CLASSIC))
    plan = _prepare(dep, load_facts(str(MAJOR), dep))  # every node 8 -> 9
    assert not [u for u in plan.units if u.step is Step.PRESTAGE]
    assert not [u for u in plan.units if u.stage is Stage.PRESTAGE]
    # the repositories still switch: in prepare, as without a prestage
    repos = [u for u in plan.units if u.step is Step.REPOS]
    assert len(repos) == 1 and repos[0].stage is Stage.PREPARE
    assert plan.params["fetch_after_os"] == {n.name: [8, 9] for n in dep.nodes}


def test_only_the_nodes_that_change_os_are_left_out(tmp_path):
    dep = load_deployment(str(CLASSIC))
    # the first wave already runs OS 9 (the seed's step 3 done): they prestage; the rest wait
    on_new = {"controller-0": {"major": 9, "target": 9}, "compute-0": {"major": 9, "target": 9}}
    plan = _prepare(dep, _facts(tmp_path, dep, on_new, {"major": 8, "target": 9}))
    fetched = {n for u in plan.units if u.step is Step.PRESTAGE for n in u.nodes}
    assert fetched == set(on_new)
    assert set(plan.params["fetch_after_os"]) == {n.name for n in dep.nodes} - set(on_new)
    switch = [u for u in plan.units if u.step is Step.REPOS]
    assert [u.stage for u in switch] == [Stage.PRESTAGE]


def test_an_undeclared_target_is_no_os_change(tmp_path):
    """Discover records the OS major only: the next major is the OS upgrade's default
    target, not a statement that this major upgrade changes the OS."""
    dep = load_deployment(str(CLASSIC))
    fx = _facts(tmp_path, dep, {}, {"major": 8})
    assert fx.os_known and fx.of("compute-0").os_target == 9
    assert not any(fx.changes_os(n.name) for n in dep.nodes)
    plan = _prepare(dep, fx)
    assert {n for u in plan.units if u.step is Step.PRESTAGE for n in u.nodes} == {
        n.name for n in dep.nodes
    }
    assert "fetch_after_os" not in plan.params
    # recorded and read back (the store's facts), it stays undeclared; a declared one stays
    again = facts_from_dict(facts_to_dict(fx), dep)
    assert not any(again.changes_os(n.name) for n in dep.nodes)
    declared = load_facts(str(MAJOR), dep)
    assert all(facts_from_dict(facts_to_dict(declared), dep).changes_os(n.name) for n in dep.nodes)


def test_the_cli_says_which_nodes_fetch_after_their_os_upgrade(tmp_path):
    from stepwise.cli.main import _register, app

    _register()
    args = ["plan", "upgrade", "-d", str(CLASSIC), "--stage", "prepare", "--facts", str(MAJOR)]
    args += ["--store", f"sqlite:///{tmp_path / 'none.sqlite'}"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    shown = " ".join(r.stdout.split())
    assert (
        "not prestaged: ceph-0, ceph-1, ceph-2, compute-0, compute-1, controller-0 and 2 more"
        in shown
    )
    assert "go to a new OS (8 -> 9)" in shown and "after its OS upgrade" in shown
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert doc["params"]["fetch_after_os"]["controller-2"] == [8, 9]
    assert "prestage" not in {u["stage"] for u in doc["units"]}
