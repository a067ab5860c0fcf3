"""The connection contract: what a connector tells stepwise about reaching each node.

A connector plugs in from below, the way pyinfra's connectors do: it brings host variables
(Ansible's own, such as `ansible_connection` and `ansible_host`, for reaching each node), the
connection plugin directories Ansible needs for them, and per node the `NodeAccess` values by
which stepwise's own node work finds its way on that node. Over SSH on a real node none of
these is needed: every field has a real-node default, which is what the rendered plays use
when the host variable is absent. The lab provides all of them (`stepwise.lab.connector`).

This sits in the model layer so that the run layer (which reads the values, in the plays it
renders) and the lab (which provides them) both import it while neither imports the other.
The host-variable names are known here only: the run layer builds its templates from
`NodeAccess.var` and `NodeAccess.real_default`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


def _access(var: str, real_default: str | None, meaning: str) -> Any:
    return field(default=None, metadata={"var": var, "default": real_default, "meaning": meaning})


@dataclass(frozen=True)
class NodeAccess:
    """How stepwise's own node work finds its way on one node. None: not provided, the play
    uses the real-node default (`real_default`), or for a field without one, what the field
    says."""

    flag_dir: str | None = _access(
        "stepwise_flag_dir",
        "/var/lib/stepwise/flags",
        "where once-only units and the OS upgrade keep their flag files",
    )
    os_release: str | None = _access(
        "stepwise_os_release",
        "/etc/os-release",
        "the file whose VERSION_ID gives the node's OS major",
    )
    reboot_command: str | None = _access(
        "stepwise_reboot_command",
        None,
        "the command that reboots the node; absent: Ansible's reboot module",
    )
    reprovision_command: str | None = _access(
        "stepwise_reprovision_command",
        None,
        "the command that puts the new OS image on the node; absent: an OS upgrade by "
        "reprovisioning fails on the node (there is no real-node default)",
    )

    node_root: str | None = _access(
        "stepwise_node_root",
        "",
        "the node's root directory as stepwise's own shell commands see it ('' is /)",
    )

    @staticmethod
    def names() -> tuple[str, ...]:
        """The fields of the contract, in the order they are documented."""
        return tuple(f.name for f in fields(NodeAccess))

    @staticmethod
    def var(name: str) -> str:
        """The host variable that carries field `name`."""
        return _field(name).metadata["var"]

    @staticmethod
    def real_default(name: str) -> str | None:
        """What a real node uses when field `name` is not provided (None: no default)."""
        return _field(name).metadata["default"]

    @staticmethod
    def meaning(name: str) -> str:
        """What field `name` is for, in the operator's words."""
        return _field(name).metadata["meaning"]

    def host_vars(self) -> dict[str, str]:
        """The provided fields as host variables (absent ones are left out: the plays'
        defaults apply)."""
        return {
            NodeAccess.var(f.name): getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) is not None
        }

    @staticmethod
    def from_host_vars(host_vars: Mapping[str, Any]) -> NodeAccess:
        """The contract's values among a node's host variables (others are ignored)."""
        return NodeAccess(
            **{
                f.name: str(host_vars[f.metadata["var"]])
                for f in fields(NodeAccess)
                if f.metadata["var"] in host_vars
            }
        )


def _field(name: str) -> Any:
    for f in fields(NodeAccess):
        if f.name == name:
            return f
    raise KeyError(name)


@dataclass(frozen=True)
class Connector:
    """How nodes are reached: host variables merged over the deployment's (Ansible's
    connection variables and the `NodeAccess` ones), and connection plugin directories for
    Ansible."""

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

    def access(self, node: str) -> NodeAccess:
        """What this connector provides of the contract for `node`."""
        return NodeAccess.from_host_vars(self.host_vars.get(node, {}))


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
