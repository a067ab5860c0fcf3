"""The lab: a real cloud on one machine that breaks the way real clouds break.

`up`/`down`/`status` live in `stepwise.lab.control`; the node commands in `nodecmd`; Ansible
reaches nodes through the `stepwise_lab` connection plugin (`ansible_plugin_dir()`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def ansible_plugin_dir() -> str:
    """The directory of the shipped Ansible connection plugins (for ANSIBLE_CONNECTION_PLUGINS)."""
    return str(Path(__file__).resolve().parent / "ansible_plugins" / "connection")


def inventory(lab_dir: str | Path) -> dict[str, Any]:
    """An Ansible inventory of a lab: one group per role, every node on the lab connection."""
    from stepwise.lab.nodes import Lab

    lab = Lab(lab_dir)
    groups: dict[str, Any] = {}
    for name, node in lab.spec["nodes"].items():
        groups.setdefault(node["role"], {"hosts": {}})["hosts"][name] = {
            "ansible_connection": "stepwise_lab",
            "stepwise_lab_dir": str(lab.dir),
            "stepwise_lab_node": name,
            "ansible_host": node["address"],
            "ansible_python_interpreter": "/usr/bin/python3",
            # Module files must land where the node's commands see them: inside the lab.
            "ansible_remote_tmp": str(lab.node_root(name) / "tmp" / ".ansible"),
            # Lab nodes share one filesystem: their flag files and os-release live in the
            # node's root, and `reboot` is the lab's node command.
            "stepwise_flag_dir": str(lab.node_root(name) / "var" / "lib" / "stepwise" / "flags"),
            "stepwise_os_release": str(lab.node_root(name) / "etc" / "os-release"),
            "stepwise_reboot_command": "reboot",
            "stepwise_reprovision_command": "reprovision",
            # stepwise's own shell commands (archives of the node's data) run in the node's root
            "stepwise_node_root": str(lab.node_root(name)),
        }
    return {"all": {"children": groups}}


def up(*args: Any, **kwargs: Any):
    """See stepwise.lab.control.up."""
    from stepwise.lab.control import up as _up

    return _up(*args, **kwargs)


def down(*args: Any, **kwargs: Any) -> int:
    """See stepwise.lab.control.down."""
    from stepwise.lab.control import down as _down

    return _down(*args, **kwargs)
