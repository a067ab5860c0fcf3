"""stepwise's own work on a node, after the services' tasks of a step: switch repositories,
packages no service owns, reboot, OS prepare/upgrade/reprovision, cleanup.

These tasks find their way on the node through the connection contract
(`stepwise.model.connection.NodeAccess`): each value is read from its host variable with the
real-node default, so a connector that provides nothing (SSH) gets a real node's paths and
commands, and the lab gets its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stepwise.model.choices import UpgradeMode
from stepwise.model.connection import NodeAccess
from stepwise.model.vocab import NodeWork
from stepwise.plan.rollback import DOWNGRADE
from stepwise.plan.units import Unit
from stepwise.run.package_batch import update_argv, update_expression


def access_value(name: str, host: str = "") -> str:
    """A template of a contract field on the node (or on `host`, an expression such as
    `hostvars[item]`: a delegated task is templated with the other host's variables), with
    its real-node default."""
    ref = f"{host}.{NodeAccess.var(name)}" if host else NodeAccess.var(name)
    return "{{ " + ref + " | default('" + str(NodeAccess.real_default(name)) + "') }}"


DEFAULT_FLAG_DIR = NodeAccess.real_default("flag_dir")
FLAG_VAR = NodeAccess.var("flag_dir")
FLAG_DIR = access_value("flag_dir")
OS_RELEASE = access_value("os_release")
#: the node's root as stepwise's own shell commands see it ('' on a real host, the node's
#: directory in the lab, whose commands run with the root as their working directory)
NODE_ROOT = access_value("node_root")
REBOOT_COMMAND = NodeAccess.var("reboot_command")
REPROVISION_COMMAND = NodeAccess.var("reprovision_command")
#: what a successful OS-upgrade prepare leaves on the node: the OS major it was prepared on
PREPARED_FLAG = FLAG_DIR + "/system_upgrade_prepared"
#: a shell snippet printing the node's OS major version
#: (one awk, no pipe: nothing to hide a failed read behind, and no `sed` where a module exists)
_OS_MAJOR_AWK = '$1 == "VERSION_ID" {gsub(/"/, "", $2); split($2, v, "."); print v[1]}'
_OS_MAJOR = f"awk -F= '{_OS_MAJOR_AWK}' \"{OS_RELEASE}\""

#: the task after each packages unit that records what the node runs (benchmarks tell it apart)
RECORD_TASK = "Stepwise: record what the node runs now"
PERSIST_FILE = "stepwise-node-data.tgz"
#: what a reprovisioned node gets back: its configuration (RPC pins live there) and stepwise's state
OS_OWN_FILES = "--exclude=etc/os-release --exclude=etc/redhat-release --exclude=etc/system-release"
#: and the data directories the node alone holds (the plan's `stepwise_node_data`: a lone
#: node of its role has no other member to copy them from)
PERSIST_PATHS = (
    "{{ (stepwise_persist_paths | default(['etc', 'var/lib/stepwise'])"
    " + (stepwise_node_data | default({})).get(inventory_hostname, [])) | join(' ') }}"
)


def node_packages(unit: Unit) -> dict[str, list[str]]:
    """node -> packages no service owns that the unit updates there (kernel, openvswitch,
    the management tool); `["*"]` means every package of the node."""
    out = {n: list(ps) for n, ps in (unit.vars.get("extra_packages") or {}).items() if ps}
    for n in unit.vars.get("all_packages") or ():
        out[n] = ["*"]
    return out


def record_facts(packages: bool) -> dict[str, Any]:
    """What really is on the node now, for `status` and the next plan (facts may be stale)."""
    return {
        "name": RECORD_TASK,
        "stepwise_facts": {
            "packages": "{{ stepwise_record_packages[inventory_hostname] | default([]) }}"
            if packages
            else [],
            "command": "{{ stepwise_discover_command | default(omit) }}",
            "os_release": OS_RELEASE,
            "required": False,
        },
        "changed_when": False,
    }


def with_record(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A packages unit's tasks, then the record of what each node runs afterwards. When the
    unit ends with a package update stepwise wrote, that one module run does both (the record
    costs no task of its own, and what the update just brought to the newest version needs no
    repository lookup); otherwise the record is a task of its own."""
    last = tasks[-1] if tasks else {}
    command = last.get("ansible.builtin.command")
    argv = command.get("argv") if isinstance(command, dict) and len(command) == 1 else None
    expression = update_expression(argv)
    if expression is None:
        return [*tasks, record_facts(packages=True)]
    record = record_facts(packages=True)
    when = last.get("when")
    # every node reports, also one the update leaves alone (a `when` would skip its record)
    update = "{{ (" + expression + ") if (" + when + ") else [] }}" if when else argv
    folded = {
        "name": _recorded(last["name"]),
        "stepwise_facts": {"update": update, **record["stepwise_facts"]},
    }
    if "register" in last:
        folded["register"] = last["register"]
    return [*tasks[:-1], folded]


def _recorded(name: str) -> str:
    """The name of an update that also records: a few words more (lines stay under 160)."""
    return f"{name[:-1]}, recorded)" if name.endswith(")") else f"{name} (recorded)"


def _reboot(name: str) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "ansible.builtin.command": "{{ " + REBOOT_COMMAND + " }}",
            "when": REBOOT_COMMAND + " is defined",
        },
        {
            "name": name,
            "ansible.builtin.reboot": {"reboot_timeout": 1800},
            "when": REBOOT_COMMAND + " is not defined",
        },
    ]


def _persist_tasks() -> list[dict[str, Any]]:
    """Before a node is wiped: its data, archived on the node and kept on the machine that runs
    stepwise in a directory only the upgrade user reads (the seed: persisted on the undercloud).
    Files that describe the OS itself stay out: restored, they would make the new OS claim to
    be the old one."""
    return [
        {
            "name": "Node: archive the data the node must keep",
            "ansible.builtin.shell": f'mkdir -p "{NODE_ROOT}/tmp" && cd "{NODE_ROOT}/" '
            f"&& tar --ignore-failed-read {OS_OWN_FILES} -czf "
            f'"{NODE_ROOT}/tmp/{PERSIST_FILE}" {PERSIST_PATHS}',
        },
        {
            "name": "Stepwise: keep it where only the upgrade user can read it",
            "ansible.builtin.fetch": {
                "src": f"{NODE_ROOT}/tmp/{PERSIST_FILE}",
                "dest": "{{ stepwise_persist_dir }}/{{ inventory_hostname }}/",
                "flat": True,
                "fail_on_missing": True,
            },
        },
    ]


def _restore_tasks() -> list[dict[str, Any]]:
    """After the new image: the node's data back in place (the prepared flag with it)."""
    return [
        {
            "name": "Stepwise: bring the node's data back",
            "ansible.builtin.copy": {
                "src": "{{ stepwise_persist_dir }}/{{ inventory_hostname }}/" + PERSIST_FILE,
                "dest": f"{NODE_ROOT}/tmp/{PERSIST_FILE}",
                "mode": "0600",
            },
        },
        {
            "name": "Node: restore the data the node kept",
            "ansible.builtin.shell": f'cd "{NODE_ROOT}/" '
            f'&& tar -xzf "{NODE_ROOT}/tmp/{PERSIST_FILE}" '
            f'&& rm -f "{NODE_ROOT}/tmp/{PERSIST_FILE}"',
        },
    ]


def transfer_check() -> dict[str, Any]:
    """The seed's step 5, right before the data moves: at least one old-OS node and exactly
    one new-OS node in the role, read from the nodes themselves."""
    # delegated tasks are templated with this host's variables: name the other node's own
    os_release = access_value("os_release", host="hostvars[item]")
    return {
        "name": "Stepwise: one new-OS node and at least one old-OS node in the role",
        # argv: the other node's templated path makes the one-line form too long to read
        "ansible.builtin.command": {"argv": ["awk", "-F=", _OS_MAJOR_AWK, os_release]},
        "delegate_to": "{{ item }}",
        "loop": "{{ stepwise_role_nodes }}",
        "register": "_stepwise_os",
        "changed_when": False,
    }


def transfer_assert() -> dict[str, Any]:
    """Refuse the data transfer unless the role has exactly one new-OS node (and an old one)."""
    majors = "_stepwise_os.results | map(attribute='stdout') | map('int') | list"
    return {
        "name": "Stepwise: refuse unless exactly one node runs the new OS",
        "ansible.builtin.assert": {
            "that": [
                "(_stepwise_majors | max) > (_stepwise_majors | min)",
                "(_stepwise_majors | select('equalto', _stepwise_majors | max) | list | length)"
                " == 1",
            ],
            "fail_msg": "refusing the data transfer: the role needs at least one old-OS node "
            "and exactly one new-OS node (found OS majors {{ _stepwise_majors }})",
        },
        "vars": {"_stepwise_majors": "{{ " + majors + " }}"},
    }


# --- one function per kind of node work: (unit, services_had_tasks, mode) -> tasks ---------
def _answers(_unit: Unit, services_had_tasks: bool, _mode: UpgradeMode) -> list[dict[str, Any]]:
    # a node whose services bring their own checks needs no extra round trip
    return [] if services_had_tasks else [{"name": "Node: answers", "ansible.builtin.ping": {}}]


#: the play variable of a prestage unit: node -> the packages it fetches (`render.py`)
PRESTAGE_VAR = "stepwise_prestage_packages"


def _download(_unit: Unit, _had: bool, _mode: UpgradeMode) -> list[dict[str, Any]]:
    """The packages style's prestage: one dnf transaction per node that only downloads
    (`--downloadonly`: into dnf's cache, nothing installed, no service touched), so the
    packages step later installs from the cache."""
    return [
        {
            "name": "Node: fetch the packages it will install (download only)",
            "ansible.builtin.command": {
                "argv": "{{ ['dnf', '-y', 'update', '--downloadonly'] + "
                + PRESTAGE_VAR
                + "[inventory_hostname] }}"
            },
            "when": f"{PRESTAGE_VAR} is defined and inventory_hostname in {PRESTAGE_VAR}",
        }
    ]


def _switch_repos(_unit: Unit, _had: bool, _mode: UpgradeMode) -> list[dict[str, Any]]:
    return [
        {
            "name": "Node: switch repositories to the target release",
            "ansible.builtin.command": {
                "argv": "{{ [stepwise_repos_command | default('tripleo-repos'), target_release] }}"
            },
            "changed_when": True,
        }
    ]


def node_downgrades(unit: Unit) -> dict[str, dict[str, str]]:
    """node -> package -> the version a rollback's packages unit takes it back to."""
    return {n: dict(v) for n, v in (unit.vars.get(DOWNGRADE) or {}).items() if v}


def _downgrade() -> dict[str, Any]:
    """One transaction per node, as dnf takes it: `dnf -y downgrade NAME-VERSION ...` (the
    versions the run replaced; dnf refuses one its enabled repositories do not have)."""
    return {
        "name": "Node: take the packages back to their versions before the run",
        "ansible.builtin.command": {
            "argv": "{{ ['dnf', '-y', 'downgrade'] + "
            "(" + DOWNGRADE + "[inventory_hostname] | dictsort | map('join', '-') | list) }}"
        },
        "when": "inventory_hostname in " + DOWNGRADE,
    }


def _unowned_packages(unit: Unit, _had: bool, _mode: UpgradeMode) -> list[dict[str, Any]]:
    if node_downgrades(unit):
        return [_downgrade()]  # a rollback: every package of the unit, unowned ones included
    if not node_packages(unit):
        return []
    return [
        {
            "name": "Node: update packages no service owns",
            "ansible.builtin.command": {
                # no names (a node whose every package updates): `dnf -y update` alone
                "argv": update_argv("stepwise_node_packages[inventory_hostname]")
            },
            "when": "inventory_hostname in stepwise_node_packages",
        }
    ]


def _reboot_for_kernel(
    _unit: Unit, services_had_tasks: bool, _mode: UpgradeMode
) -> list[dict[str, Any]]:
    # services that bring their own reboot tasks do not get a second reboot
    return [] if services_had_tasks else _reboot("Node: reboot for the new kernel")


def _prepare_os(_unit: Unit, _had: bool, mode: UpgradeMode) -> list[dict[str, Any]]:
    if mode is UpgradeMode.REPROVISION:
        tasks = _persist_tasks()
    else:
        tasks = [
            {
                "name": "Node: prepare the OS upgrade",
                "ansible.builtin.command": "{{ stepwise_os_upgrade_command "
                "| default('leapp upgrade') }}",
            }
        ]
    return tasks + [
        {
            "name": "Stepwise: make the directory of stepwise's flags",
            "ansible.builtin.file": {"path": FLAG_DIR, "state": "directory", "mode": "0755"},
        },
        {
            "name": "Stepwise: record that the OS upgrade is prepared",
            "ansible.builtin.shell": f"major=$({_OS_MAJOR})\n"
            f'echo "$major {mode}" > "{PREPARED_FLAG}"\n',
            "changed_when": True,
        },
    ]


def _prepared_here_check(mode: UpgradeMode) -> dict[str, Any]:
    """Refuse an OS upgrade not prepared on this node, already done, or prepared another way."""
    check = (
        f'f="{PREPARED_FLAG}"\n'
        'msg="refusing: the OS upgrade was not prepared successfully on {{ inventory_hostname }}"\n'
        'if [ ! -s "$f" ]; then echo "$msg (run system_upgrade_prepare first)" >&2; exit 3; fi\n'
        f"now=$({_OS_MAJOR})\n"
        f'set -- $(cat "$f"); was=$1; how=${{2:-{UpgradeMode.IN_PLACE}}}\n'
        'msg="refusing: {{ inventory_hostname }} already runs OS $now (prepared on OS $was)"\n'
        'if [ "$now" != "$was" ]; then echo "$msg: it was upgraded already" >&2; exit 3; fi\n'
        'msg="refusing: {{ inventory_hostname }} was prepared for $how"\n'
        f'if [ "$how" != "{mode}" ]; then echo "$msg, not {mode} (-e system_upgrade_mode)" >&2; '
        "exit 3; fi\n"
    )
    return {
        "name": "Stepwise: the OS upgrade is prepared and not yet done here",
        "ansible.builtin.shell": check,
        "changed_when": False,
    }


def _upgrade_os(_unit: Unit, _had: bool, mode: UpgradeMode) -> list[dict[str, Any]]:
    if mode is UpgradeMode.REPROVISION:
        body = [
            {
                "name": "Node: reprovision with the new OS image",
                "ansible.builtin.command": "{{ " + REPROVISION_COMMAND + " }}",
            }
        ] + _restore_tasks()
    else:
        body = _reboot("Node: reboot into the new OS")
    return (
        [_prepared_here_check(mode)]
        + body
        + [
            {
                "name": "Stepwise: the OS upgrade is done",
                "ansible.builtin.file": {"path": PREPARED_FLAG, "state": "absent"},
            },
            record_facts(packages=False),
        ]
    )


def _cleanup_os(_unit: Unit, _had: bool, _mode: UpgradeMode) -> list[dict[str, Any]]:
    return [
        {
            "name": "Node: remove what the OS upgrade left on the node",
            # one line per path: the templated paths make one line too long to review
            "ansible.builtin.shell": {
                "cmd": f'rm -rf "{PREPARED_FLAG}" \\\n'
                f'  "{FLAG_DIR}"/*.attempt \\\n'
                f'  "{NODE_ROOT}/tmp/{PERSIST_FILE}"\n'
            },
        },
        {
            "name": "Stepwise: remove what the OS upgrade persisted for this node "
            "(it may hold secrets)",
            "ansible.builtin.file": {
                "path": "{{ stepwise_persist_dir }}/{{ inventory_hostname }}",
                "state": "absent",
            },
            "delegate_to": "localhost",
            "when": "stepwise_persist_dir is defined",
        },
    ]


_NODE_WORK: dict[NodeWork, Callable[[Unit, bool, UpgradeMode], list[dict[str, Any]]]] = {
    NodeWork.ANSWERS: _answers,
    NodeWork.DOWNLOAD: _download,
    NodeWork.SWITCH_REPOS: _switch_repos,
    NodeWork.UNOWNED_PACKAGES: _unowned_packages,
    NodeWork.REBOOT: _reboot_for_kernel,
    NodeWork.PREPARE_OS: _prepare_os,
    NodeWork.UPGRADE_OS: _upgrade_os,
    NodeWork.CLEANUP_OS: _cleanup_os,
}


def node_work_tasks(
    unit: Unit, work: NodeWork, services_had_tasks: bool, mode: UpgradeMode = UpgradeMode.IN_PLACE
) -> list[dict[str, Any]]:
    """stepwise's own tasks of a step on each node of the unit (after the services' tasks)."""
    return _NODE_WORK[work](unit, services_had_tasks, mode)
