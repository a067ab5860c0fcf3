"""The lab: a real cloud on one machine that breaks the way real clouds break.

`up`/`down`/`status` live in `stepwise.lab.control`; the node commands in `nodecmd`; Ansible
reaches nodes through the `stepwise_lab` connection plugin (`ansible_plugin_dir()`), with the
connector `connector(lab_dir)` gives the run layer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab
    from stepwise.model.connection import Connector


def ansible_plugin_dir() -> str:
    """The directory of the shipped Ansible connection plugins (for ANSIBLE_CONNECTION_PLUGINS)."""
    return str(Path(__file__).resolve().parent / "ansible_plugins" / "connection")


def connector(lab_dir: str | Path) -> Connector:
    """How Ansible reaches a lab's nodes: the `stepwise_lab` connection plugin, each node on
    its own loopback address, and the connection contract (`NodeAccess`) of a node whose root
    is a directory of this machine. The only place the lab's connection is built."""
    # imported here: every lab process (node commands, the supervisor) imports this package
    # and needs none of the model
    from stepwise.lab.nodes import Lab
    from stepwise.model.connection import Connector, NodeAccess
    from stepwise.model.values import Unsafe

    lab = Lab(lab_dir)
    roles: dict[str, dict[str, Any]] = {}
    for name, node in _checked_nodes(lab).items():
        root = lab.node_root(name)
        # lab nodes share one filesystem: their flag files and os-release live in the node's
        # root, `reboot` and `reprovision` are the lab's node commands, and stepwise's own
        # shell commands (archives of the node's data) run in the node's root
        access = NodeAccess(
            flag_dir=str(root / "var" / "lib" / "stepwise" / "flags"),
            os_release=str(root / "etc" / "os-release"),
            reboot_command="reboot",
            reprovision_command="reprovision",
            node_root=str(root),
        )
        hv = {
            "ansible_connection": "stepwise_lab",
            "stepwise_lab_dir": str(lab.dir),
            "stepwise_lab_node": name,
            "ansible_host": node.address,
            "ansible_python_interpreter": "/usr/bin/python3",
            # module files must land where the node's commands see them: inside the lab
            "ansible_remote_tmp": str(root / "tmp" / ".ansible"),
            **access.host_vars(),
        }
        # a lab directory's path and lab.json are data, not the operator's Ansible
        # configuration: Ansible must never render them (a directory named `{{ ... }}`)
        roles.setdefault(node.role, {})[name] = {k: Unsafe(v) for k, v in hv.items()}
    hosts = {name: hv for nodes in roles.values() for name, hv in nodes.items()}
    return Connector("lab", hosts, (ansible_plugin_dir(),))


def _checked_nodes(lab: Lab) -> dict[str, Any]:
    """The nodes of a lab's lab.json, each name and address checked as a deployment checks
    its own (a name, an IP address or host name): lab.json is a file in a directory given on
    the command line, and what it holds reaches the inventory. Refuses anything else with the
    file, the node and the field."""
    from stepwise.errors import InputError, Problem
    from stepwise.model.specs import NAME_RE
    from stepwise.model.values import check_address

    hint = "bring the lab up again with `stepwise lab up -d DEPLOYMENT`, or give its directory"
    nodes = lab.spec.nodes
    for name, node in nodes.items():
        where = f"nodes.{name}" if re.fullmatch(NAME_RE, name) else "nodes"
        problem = None
        if not re.fullmatch(NAME_RE, name) or len(name) > 100:
            problem = f"'{name[:100]}' is not a node name (letters, digits, '_', '.', '-')"
        elif not re.fullmatch(NAME_RE, node.role):
            problem, where = "no role name", f"{where}.role"
        else:
            try:
                check_address(node.address)
            except ValueError as exc:
                problem, where = str(exc), f"{where}.address"
        if problem:
            raise InputError(Problem(problem, file=str(lab.spec_file), field=where, hint=hint))
    return nodes


def up(*args: Any, **kwargs: Any):
    """See stepwise.lab.control.up."""
    from stepwise.lab.control import up as _up

    return _up(*args, **kwargs)


def down(*args: Any, **kwargs: Any) -> int:
    """See stepwise.lab.control.down."""
    from stepwise.lab.control import down as _down

    return _down(*args, **kwargs)
