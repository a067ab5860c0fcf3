"""A resumed run continues only the plan it started: the same units, planned with the same -e
variables its workflow's plans read (the workflow table's trait, not a list in the run
layer)."""

from __future__ import annotations

import json
from pathlib import Path

from stepwise.model import load_deployment
from stepwise.model.vocab import Workflow
from stepwise.plan import make_plan
from stepwise.plan.table import WORKFLOW_TABLE
from stepwise.run.plan_match import plan_difference, same_units

ROOT = Path(__file__).resolve().parents[2]


def _stored(plan) -> dict:
    """The plan as the store keeps it (JSON, read back)."""
    return json.loads(json.dumps(plan.to_json(), default=str))


def test_a_variable_the_workflow_reads_must_match_one_it_does_not_read_need_not():
    dep = load_deployment(ROOT / "examples" / "tripleo-containers.yaml")
    plan = make_plan(Workflow.UPGRADE, dep, variables={"target_release": "R2"})
    stored = _stored(plan)
    assert plan_difference(plan, stored) == "" and same_units(plan, stored)
    # target_namespace is one of the upgrade's variables: a stored plan made with another
    # namespace is not this plan, even where its units would read the same
    assert "target_namespace" in WORKFLOW_TABLE[Workflow.UPGRADE].variables
    other = {**stored, "params": {**stored["params"], "target_namespace": "elsewhere"}}
    assert plan_difference(plan, other).startswith("target_namespace is elsewhere in the store")
    # the update reads no variable: a different target_release does not make it another plan
    update = make_plan(Workflow.UPDATE, dep)
    kept = _stored(update)
    kept["params"] = {**kept["params"], "target_release": "R9"}
    assert "target_release" not in WORKFLOW_TABLE[Workflow.UPDATE].variables
    assert plan_difference(update, kept) == ""


def test_the_first_unit_that_differs_is_named():
    dep = load_deployment(ROOT / "examples" / "classic.yaml")
    plan = make_plan(Workflow.UPDATE, dep)
    stored = _stored(plan)
    stored["units"][2] = {**stored["units"][2], "nodes": ["elsewhere"]}
    said = plan_difference(plan, stored)
    assert said.startswith(f"unit {plan.units[2].id} ") and "nodes" in said
    assert not same_units(plan, stored)
