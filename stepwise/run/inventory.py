"""The Ansible inventory of a deployment, the variables every play sees, and the connector
through which the nodes are reached.

A connector plugs in from below, the way pyinfra's connectors do: it brings host variables
(how to reach each node, and the `NodeAccess` contract's values) and, when it needs one, a
connection plugin directory. SSH needs neither beyond an inventory; the lab provides its own
(`stepwise.lab.connector`). The run layer never knows which one it talks to. `Connector` and
the contract live in `stepwise.model.connection` (the lab builds them without importing run);
they are re-exported here for existing imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stepwise.model import Deployment
from stepwise.model.connection import Connector, NodeAccess
from stepwise.model.deployment import HYPERVISOR_SERVICE
from stepwise.plan.units import Plan
from stepwise.run.ansible_files import unsafe

__all__ = ["Connector", "NodeAccess", "inventory", "plan_vars"]


def inventory(
    deployment: Deployment,
    connector: Connector | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One group per role, node vars, stepwise vars; the connector's host vars on top.
    Every value that comes from the deployment is marked unsafe: it is data, never a template."""
    over = connector.host_vars if connector else {}
    children: dict[str, Any] = {}
    for role in deployment.roles:
        hosts: dict[str, Any] = {}
        for n in role.nodes:
            hv: dict[str, Any] = {
                "stepwise_node_address": n.address or n.name,
                "stepwise_role": role.name,
                # what runs beside a service on its node (haproxy leaves through pacemaker
                # only where pacemaker holds the VIPs)
                "stepwise_services": list(deployment.services_on(n)),
            }
            if n.address:
                hv["ansible_host"] = n.address
            hv.update(n.vars)
            hv = unsafe(hv)
            # the connector's variables are the operator's own Ansible configuration (an
            # --inventory file, the lab's connection): they stay as Ansible would read them
            o = dict(over.get(n.name, {}))
            hv.update(o)
            if "ansible_host" in o and "stepwise_node_address" not in o:
                # where the node is really reached (a lab maps nodes to its own addresses)
                hv["stepwise_node_address"] = o["ansible_host"]
            hosts[n.name] = hv
        group: dict[str, Any] = {"hosts": hosts}
        if role.vars:
            group["vars"] = unsafe(dict(role.vars))
        children[role.name] = group
    all_vars = unsafe({**dict(deployment.vars), **dict(extra or {})})
    return {"all": {"vars": all_vars, "children": children}}


def plan_vars(plan: Plan, deployment: Deployment) -> dict[str, Any]:
    """Variables every task may use besides the host's own (docs/catalog.md)."""
    boot = {
        s: (deployment.bootstrap_node(s).name if deployment.bootstrap_node(s) else None)
        for s in deployment.instances
    }
    out: dict[str, Any] = {
        "stepwise_bootstrap_node": boot,
        "stepwise_workflow": str(plan.workflow),
        "stepwise_cloud": deployment.name,
    }
    if plan.params.get("target_release") is not None:
        out["target_release"] = plan.params["target_release"]
    if deployment.instances.get(HYPERVISOR_SERVICE):
        # the compute's leave reads it (catalog nova_compute): data, so unsafe like the rest
        out["stepwise_drain_policy"] = str(deployment.drain_policy_now())
    return unsafe(out)
