"""The benchmarks' role-ordered baseline still plans (it builds visits with the planner's own
functions, so a planner change can break it without any other test noticing)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.role_ordered import role_ordered_duration
from stepwise.model import load_deployment
from stepwise.model.vocab import Workflow
from stepwise.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]


def test_the_role_ordered_baseline_is_longer_than_the_plan_on_the_classic_cloud():
    dep = load_deployment(ROOT / "examples" / "classic.yaml")
    baseline = role_ordered_duration(dep, "update")
    plan = make_plan(Workflow.UPDATE, dep)
    assert baseline > plan.duration_s > 0
