"""The OS upgrade's units carry the seed's step they belong to (issue 35 item 4): the tree,
the report and `plan --json` name the parts from that field, not from the units' prose; and
every command of the seed previews on a fresh cloud (issue 36 item 8)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepwise.errors import InputError
from stepwise.model import NO_FACTS, load_deployment
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import make_plan, selection_for
from stepwise.plan.units import Plan, Unit, parts

ROOT = Path(__file__).resolve().parents[2]
COMPOSED = ROOT / "examples" / "composed.yaml"


def _cli(*words: str, tmp_path: Path):
    from stepwise.cli.main import _register, app

    _register()
    store = f"sqlite:///{tmp_path / 'fresh.sqlite'}"
    return CliRunner().invoke(app, [*words, "-d", str(COMPOSED), "--store", store])


def test_every_unit_carries_its_seed_step_and_the_parts_are_named_from_it():
    dep = load_deployment(COMPOSED)
    plan = make_plan(Workflow.SYSTEM_UPGRADE, dep, NO_FACTS)
    assert all(u.seed_step in range(1, 13) for u in plan.units)
    assert {u.seed_step for u in plan.units} == set(range(1, 13)) - {3}  # 3 is not stepwise's
    later = [u for u in plan.units if u.seed_step == 8 and u.step is Step.PACKAGES]
    assert later and all(u.nodes[0] != "controller-openstack-0" for u in later)
    # the field round-trips through the JSON a run stores
    assert Plan.from_json(plan.to_json()).units == plan.units
    shown = parts(plan)
    assert [p.name for p in shown] == ["steps 1-8", "step 9", "steps 10-12"]
    assert shown[0].heading.startswith("steps 1-7, then step 8: the other nodes")
    # named from the field, not from the prose: whys without a step number change nothing
    plain = plan.with_units(tuple(replace(u, why="x") for u in plan.units))
    assert [p.name for p in parts(plain)] == ["steps 1-8", "step 9", "steps 10-12"]
    assert parts(plain)[0].heading == "steps 1-7, then x"


def test_a_stored_unit_without_a_whole_seed_step_has_none():
    d = {"id": "u1", "step": "validate", "seed_step": "8"}
    assert Unit.from_json(d).seed_step is None
    assert Unit.from_json({**d, "seed_step": True}).seed_step is None
    assert Unit.from_json({**d, "seed_step": 8}).seed_step == 8
    # a stored plan is input: a step the seed does not have is refused with its field
    doc = make_plan(Workflow.SYSTEM_UPGRADE, load_deployment(COMPOSED), NO_FACTS).to_json()
    doc["units"][0]["seed_step"] = 13
    with pytest.raises(InputError, match="seed_step"):
        Plan.from_json(doc)


def test_plan_takes_system_upgrade_nodes_as_the_run_commands_do(tmp_path: Path):
    words = ("plan", "system-upgrade", "--tags", "system_upgrade_run", "--json")
    r = _cli(*words, "-e", "system_upgrade_nodes=controller-openstack-1", tmp_path=tmp_path)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {n for u in doc["units"] for n in u["nodes"]} == {"controller-openstack-1"}
    assert doc["params"]["assumed"]  # a preview: earlier steps assumed, and said


def test_step_6_and_step_8_preview_on_a_fresh_cloud(tmp_path: Path):
    """The seed's `upgrade run --limit` of the first nodes (step 6) and of a later node (step
    8) were refused ("needs 'stopped old' of Database first"): a preview assumes the earlier
    steps done and plans from the cloud they leave (RPC pinned, old nodes stopped)."""
    # on a fresh cloud a node named alone is its role's first (the operator picks it by the
    # limit of step 2): database-1's `upgrade run` is then its step 6 too
    for nodes, step in (("controller-openstack-0,database-0,messaging-0", 6), ("database-1", 6)):
        r = _cli("plan", "system-upgrade", "--tags", "upgrade", "--limit", nodes, tmp_path=tmp_path)
        assert r.exit_code == 0, r.output
        assert r.stdout.startswith("preview: assumes"), r.output
        doc = json.loads(
            _cli(
                "plan", "system-upgrade", "--tags", "upgrade", "--limit", nodes, "--json",
                tmp_path=tmp_path,
            ).stdout
        )  # fmt: skip
        assert {u["seed_step"] for u in doc["units"]} == {step}
        assert {n for u in doc["units"] for n in u["nodes"]} == set(nodes.split(","))


def test_a_run_of_step_6_on_a_fresh_cloud_is_still_refused():
    dep = load_deployment(COMPOSED)
    sel = selection_for(Workflow.SYSTEM_UPGRADE, "database-1", tags=("upgrade",))
    try:
        make_plan(Workflow.SYSTEM_UPGRADE, dep, NO_FACTS, selection=sel)
    except Exception as e:  # noqa: BLE001 - the refusal's type is checked below
        assert type(e).__name__ == "InputError" and "run first" in str(e)
    else:
        raise AssertionError("a run of step 8 before step 1 was planned")
