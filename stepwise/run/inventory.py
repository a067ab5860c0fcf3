"""The Ansible inventory of a deployment, the variables every play sees, and the connector
through which the nodes are reached.

A connector plugs in from below, the way pyinfra's connectors do: it brings host variables
(how to reach each node) and, when it needs one, a connection plugin directory. SSH needs
neither beyond an inventory; the lab provides its own (`stepwise.lab.connector`). The run
layer never knows which one it talks to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stepwise.model import Deployment
from stepwise.plan.units import Plan
from stepwise.run.ansible_files import unsafe


@dataclass(frozen=True)
class Connector:
    """How nodes are reached: host variables merged over the deployment's, and connection
    plugin directories for Ansible."""

    name: str = "ssh"
    host_vars: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    plugin_dirs: tuple[str, ...] = ()

    @staticmethod
    def from_inventory(
        data: Mapping[str, Any] | None, name: str = "inventory", plugin_dirs: tuple[str, ...] = ()
    ) -> Connector:
        """A connector from an Ansible inventory mapping (YAML/JSON shape): its host vars,
        with group vars inherited."""
        hosts: dict[str, dict[str, Any]] = {}
        if data:
            _collect_hosts(data.get("all", data), hosts)
        return Connector(name, hosts, plugin_dirs)

    def merged(self, other: Connector | None) -> Connector:
        """`other`'s host vars on top of these (e.g. an operator's --inventory over the lab's)."""
        if other is None:
            return self
        hosts = {h: dict(v) for h, v in self.host_vars.items()}
        for h, v in other.host_vars.items():
            hosts.setdefault(h, {}).update(v)
        return Connector(
            f"{self.name}+{other.name}",
            hosts,
            tuple(dict.fromkeys(self.plugin_dirs + other.plugin_dirs)),
        )


def _collect_hosts(
    group: Mapping[str, Any],
    out: dict[str, dict[str, Any]],
    inherited: Mapping[str, Any] | None = None,
) -> None:
    gvars = {**dict(inherited or {}), **dict(group.get("vars") or {})}
    for h, hv in (group.get("hosts") or {}).items():
        out.setdefault(str(h), {}).update({**gvars, **dict(hv or {})})
    for child in (group.get("children") or {}).values():
        _collect_hosts(child or {}, out, gvars)


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
    return unsafe(out)
