"""The lab: a real cloud on one machine that breaks the way real clouds break.

`up`/`down`/`status` live in `stepwise.lab.control`; the node commands in `nodecmd`; Ansible
reaches nodes through the `stepwise_lab` connection plugin (`ansible_plugin_dir()`), with the
connector `connector(lab_dir)` gives the run layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

    lab = Lab(lab_dir)
    roles: dict[str, dict[str, Any]] = {}
    for name, node in lab.spec["nodes"].items():
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
        roles.setdefault(node["role"], {})[name] = {
            "ansible_connection": "stepwise_lab",
            "stepwise_lab_dir": str(lab.dir),
            "stepwise_lab_node": name,
            "ansible_host": node["address"],
            "ansible_python_interpreter": "/usr/bin/python3",
            # module files must land where the node's commands see them: inside the lab
            "ansible_remote_tmp": str(root / "tmp" / ".ansible"),
            **access.host_vars(),
        }
    hosts = {name: hv for nodes in roles.values() for name, hv in nodes.items()}
    return Connector("lab", hosts, (ansible_plugin_dir(),))


def up(*args: Any, **kwargs: Any):
    """See stepwise.lab.control.up."""
    from stepwise.lab.control import up as _up

    return _up(*args, **kwargs)


def down(*args: Any, **kwargs: Any) -> int:
    """See stepwise.lab.control.down."""
    from stepwise.lab.control import down as _down

    return _down(*args, **kwargs)
