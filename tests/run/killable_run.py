"""Run a plan in a child process so a test can SIGKILL it (see test_kill.py)."""

import sys
from dataclasses import replace

from stepwise.model import load_deployment
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import make_plan
from stepwise.plan.units import Unit
from stepwise.run.resume import RunRequest, run_plan
from stepwise.run.run_options import EngineOptions
from stepwise.run.store import open_store


def plan_with_transfer(dep, _facts=None):
    """The update plan with a once-only data transfer to cmp-0 after the control plane."""
    plan = make_plan("update", dep)
    units = list(plan.units)
    i = next(k for k, u in enumerate(units) if u.nodes == ("cmp-0",))
    xfer = Unit(
        "xfer",
        Step.SYSTEM_UPGRADE_TRANSFER_DATA,
        ("cmp-0",),
        ("worker",),
        after=units[i].after,
        idempotent=False,
        vars={"system_upgrade_source": "cmp-1"},
    )
    units[i] = replace(units[i], after=("xfer",))
    units.insert(i, xfer)
    return plan.with_units(units)


if __name__ == "__main__":
    deployment, store_url, sleep = sys.argv[1], sys.argv[2], sys.argv[3]
    dep = load_deployment(deployment)
    res = run_plan(
        RunRequest(
            open_store(store_url),
            dep,
            Workflow.UPDATE,
            planner=plan_with_transfer,
            options=EngineOptions(extra_vars={"step_sleep": sleep}),
        )
    )
    print(res.status, res.message)
    sys.exit(0 if res.ok else 1)
