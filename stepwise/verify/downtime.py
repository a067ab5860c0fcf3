"""Downtime a run must be told to accept: the windows of services whose availability rule
cannot hold with their instances (one controller: every API of it is down while it is
updated). A verified plan announces them; a run takes them only with `--accept-downtime`.

The windows a workflow announces by design (the management node's whole outage, the offline
migrations of a major upgrade, the OS upgrade's transfer) need no flag: they are what the
workflow is.
"""

from __future__ import annotations

from stepwise.errors import InputError, Problem
from stepwise.model.deployment import Deployment
from stepwise.plan.table import entry
from stepwise.plan.units import Plan, Window
from stepwise.verify.prepared import exempt_services

#: the option of the run commands that accepts the windows below
ACCEPT_DOWNTIME = "--accept-downtime"


def downtime_to_accept(plan: Plan, deployment: Deployment) -> list[Window]:
    """The plan's windows that its instance counts force (not the workflow's own)."""
    forced = deployment.forced_downtime
    if not forced or not plan.windows:
        return []
    exempt = exempt_services(plan, deployment)
    return [w for w in plan.windows if w.service in forced and w.service not in exempt]


def refuse_unaccepted_downtime(plan: Plan, deployment: Deployment, accepted: bool) -> None:
    """Refuse (exit 2, naming the flag) a run of a plan with forced downtime not accepted."""
    windows = downtime_to_accept(plan, deployment)
    if accepted or not windows:
        return
    services = sorted({w.service for w in windows})
    shown = ", ".join(services[:8]) + (f" (+{len(services) - 8} more)" if len(services) > 8 else "")
    raise InputError(
        Problem(
            f"this run takes {shown} down: with the instances this cloud has, their "
            f"availability rules cannot hold (e.g. {services[0]}: "
            f"{deployment.forced_downtime[services[0]]}), so the plan announces "
            f"{len(windows)} downtime window(s)",
            field=ACCEPT_DOWNTIME,
            hint=f"see the windows with `stepwise plan {entry(plan.workflow).name}`; to run it, "
            f"accept them with {ACCEPT_DOWNTIME} (or place the services on more nodes)",
        )
    )
