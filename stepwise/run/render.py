"""Units -> Ansible plays, from the services' own tasks and stepwise's node work. Used by the
engine and by `export`.

One play per unit, named by the unit id (events are mapped back to units by play name). On
each node a unit runs, per service of `unit.services_on(node)`, that service's tasks for the
unit's step (where they come from is `Step.info`), then the step's own node work (switch
repositories, packages no service owns, OS upgrade, reboot, database restore, cleanup).
A unit with work always renders tasks; only a barrier renders no play.

What comes from data (package and node names, addresses, the plan's variables, health URLs)
reaches Ansible as `!unsafe` variables, never spliced into task text.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Mapping
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model import Deployment
from stepwise.model.vocab import NodeWork, Section, Step, UpgradeMode, Workflow, task_source
from stepwise.plan.units import Plan, Unit
from stepwise.run.ansible_files import unsafe

DEFAULT_FLAG_DIR = "/var/lib/stepwise/flags"
FLAG_VAR = "stepwise_flag_dir"
FLAG_DIR = "{{ " + FLAG_VAR + " | default('" + DEFAULT_FLAG_DIR + "') }}"
OS_RELEASE = "{{ stepwise_os_release | default('/etc/os-release') }}"
#: what a successful OS-upgrade prepare leaves on the node: the OS major it was prepared on
PREPARED_FLAG = FLAG_DIR + "/system_upgrade_prepared"
#: a shell snippet printing the node's OS major version
_OS_MAJOR = "sed -n 's/^VERSION_ID=//p' \"" + OS_RELEASE + "\" | tr -d '\"' | cut -d. -f1"

_MODULE_SKIP = {
    "name",
    "when",
    "tags",
    "register",
    "become",
    "become_user",
    "vars",
    "loop",
    "with_items",
    "ignore_errors",
    "changed_when",
    "failed_when",
    "retries",
    "delay",
    "until",
    "notify",
    "delegate_to",
    "run_once",
    "environment",
    "no_log",
    "args",
    "block",
    "rescue",
    "always",
}


def service_tasks(
    deployment: Deployment, workflow: Workflow, service: str, step: Step
) -> list[dict[str, Any]]:
    """The tasks a service contributes to a step (with the documented defaults)."""
    try:
        svc = deployment.catalog[service]
    except KeyError:
        raise InputError(
            Problem(
                f"the plan names service '{service}' which the catalog does not define",
                file=deployment.catalog.path,
                hint="re-plan against this deployment",
            )
        ) from None
    src = task_source(step, workflow)
    tasks: list[dict[str, Any]] = []
    if src is not None:
        section, key = src
        if section is Section.CONVERGE:
            tasks = [dict(t) for t in svc.converge]
        elif section is Section.CONTRACT:
            tasks = [dict(t) for t in svc.contract]
        elif section is Section.SYSTEM_UPGRADE:
            tasks = [dict(t) for t in svc.system_upgrade.get(key, ())]
        else:
            tasks = [dict(t) for t in svc.steps(section).get(key, ())]
    if step is Step.PACKAGES and not tasks and svc.packages:
        tasks = [
            {
                "name": f"Update the packages of {service}",
                "ansible.builtin.command": {
                    "argv": f"{{{{ ['dnf', '-y', 'update'] + stepwise_packages[{service!r}] }}}}"
                },
            }
        ]
    if step is Step.VERIFY:
        tasks.extend(health_tasks(service, svc.health))
    return tasks


#: what only a shell understands in a command line
SHELL_SYNTAX = re.compile(r"[|&;<>()$`*?~\\\n\"']|\[")


def health_tasks(service: str, health: Mapping[str, str]) -> list[dict[str, Any]]:
    """Health checks (they gate the next batch): retried for a while, then fail the unit. The
    catalog's URL/command is a variable; `{address}` and `{node}` are filled in by Jinja's
    `replace`, so nothing of it is ever rendered as a template."""
    out: list[dict[str, Any]] = []
    retry = {
        "retries": "{{ stepwise_health_retries | default(30) }}",
        "delay": "{{ stepwise_health_delay | default(1) }}",
    }

    def filled(kind: str) -> str:
        # only the placeholders the check uses: a shorter line an Ansible user can read
        text = f"stepwise_health[{service!r}].{kind}"
        if "{address}" in health[kind]:
            text += " | replace('{address}', stepwise_node_address)"
        if "{node}" in health[kind]:
            text += " | replace('{node}', inventory_hostname)"
        return f"({text})" if "|" in text else text

    if health.get("http"):
        out.append(
            {
                "name": f"Check that {service} answers its HTTP health check",
                "ansible.builtin.uri": {
                    "url": "{{ " + filled("http") + " }}",
                    "status_code": 200,
                    "timeout": 5,
                },
                "register": "_stepwise_health",
                "until": "_stepwise_health is succeeded",
                **retry,
            }
        )
    if health.get("tcp"):
        out.append(
            {
                "name": f"Check that {service} accepts connections",
                "ansible.builtin.wait_for": {
                    "host": "{{ "
                    + filled("tcp")
                    + ".rpartition(':')[0] or stepwise_node_address }}",
                    "port": "{{ " + filled("tcp") + ".rpartition(':')[2] }}",
                    "timeout": 30,
                },
            }
        )
    if health.get("command"):
        # a plain command line runs without a shell (what a shell would add, it does not need)
        module = (
            "ansible.builtin.shell"
            if SHELL_SYNTAX.search(health["command"])
            else "ansible.builtin.command"
        )
        out.append(
            {
                "name": f"Check that {service} is healthy",
                module: {"cmd": "{{ " + filled("command") + " }}"},
                "register": "_stepwise_health",
                "until": "_stepwise_health.rc == 0",
                "changed_when": False,
                **retry,
            }
        )
    return out


def service_task_name(service: str, label: str) -> str:
    """A service task's name as Ansible shows it: a sentence starting with a capital letter
    that names the service (appended when the catalog's name does not say it)."""
    label = label[:1].upper() + label[1:]
    return label if service in label else f"{label} ({service})"


def _task_label(task: Mapping[str, Any]) -> str:
    if task.get("name"):
        return str(task["name"])
    for k in task:
        if k not in _MODULE_SKIP:
            return k.rsplit(".", 1)[-1]
    return "task"


def _cmd_form(task: dict[str, Any]) -> dict[str, Any]:
    """stepwise's own shell tasks pass their script as the module's `cmd` parameter: a
    free-form string would go through Ansible's argument splitting, which trips on the
    quoting of longer scripts. (Services' tasks, in blocks, are left as their authors wrote
    them.)"""
    shell = task.get("ansible.builtin.shell")
    if isinstance(shell, str) and "block" not in task:
        task = {**task, "ansible.builtin.shell": {"cmd": shell}}
    if (
        "ansible.builtin.shell" in task or "ansible.builtin.command" in task
    ) and "changed_when" not in task:
        # stepwise's own commands change the node unless they say otherwise (checks do)
        task = {**task, "changed_when": True}
    return task


def unit_hosts(unit: Unit, deployment: Deployment) -> list[str]:
    """The hosts a unit's play runs on: its nodes, or (deployment-wide units without nodes)
    each of its services' bootstrap node."""
    if unit.nodes:
        return list(unit.nodes)
    hosts: list[str] = []
    for s in unit.services:
        node = deployment.bootstrap_node(s)
        if node is not None and node.name not in hosts:
            hosts.append(node.name)
    return hosts


def unit_work(unit: Unit, deployment: Deployment) -> dict[str, tuple[str, ...]]:
    """node -> the services whose tasks of the unit's step run there."""
    if unit.nodes:
        return {n: unit.services_on(n) for n in unit.nodes}
    work: dict[str, list[str]] = {}
    for s in unit.services:
        node = deployment.bootstrap_node(s)
        if node is not None:
            work.setdefault(node.name, []).append(s)
    return {k: tuple(v) for k, v in work.items()}


def node_packages(unit: Unit) -> dict[str, list[str]]:
    """node -> packages no service owns that the unit updates there (kernel, openvswitch,
    the management tool); `["*"]` means every package of the node."""
    out = {n: list(ps) for n, ps in (unit.vars.get("extra_packages") or {}).items() if ps}
    for n in unit.vars.get("all_packages") or ():
        out[n] = ["*"]
    return out


# --- once-only units ---------------------------------------------------------------------
def flag_hosts(unit: Unit) -> list[str]:
    """Where a once-only unit keeps its flag file: its nodes (the transfer's target)."""
    return list(unit.nodes)


def flag_name(unit: Unit) -> str:
    return "stepwise-" + re.sub(r"[^A-Za-z0-9_.-]", "_", str(unit.step)) + ".flag"


def marker_keys(unit: Unit) -> list[str]:
    """Store marker keys of a once-only unit (one per flag host)."""
    return [f"{unit.step}@{h}" for h in flag_hosts(unit)]


def _guard_tasks(
    unit: Unit, run_id: int | str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A once-only unit refuses to run where its flag file says it completed (the seed's
    data-transfer flag, removed only by hand). The flag marks success, not an attempt: it is
    written after the work; a failed attempt leaves only an attempt record, and a retry runs.
    When the flag names this very run and unit (stepwise was killed before recording it),
    the unit is passed as done."""
    name = flag_name(unit)
    token = f"run={run_id} unit={unit.id}"
    path = f"{FLAG_DIR}/{name}"
    check = (
        f'f="{path}"\n'
        f'if [ -e "$f" ] && grep -qxF {shlex.quote(token)} "$f"; '
        "then echo STEPWISE_ALREADY_DONE; exit 0; fi\n"
        'if [ -e "$f" ]; then echo "refusing: $f exists on {{ inventory_hostname }}: '
        f'{unit.step} already completed here ($(cat "$f")); it must never run twice. '
        'Remove the flag file by hand only if you are sure." >&2; exit 3; fi\n'
        'mkdir -p "$(dirname "$f")"\n'
        'if [ -e "$f.attempt" ]; then echo "a previous attempt ($(cat "$f.attempt")) '
        'did not complete: running again"; fi\n'
        f'echo {shlex.quote(token)} > "$f.attempt"\n'
    )
    pre = [
        {
            "name": f"Stepwise: {unit.step} runs at most once (flag file)",
            "ansible.builtin.shell": check,
            "register": "_stepwise_flag",
            "changed_when": "'STEPWISE_ALREADY_DONE' not in _stepwise_flag.stdout",
        },
        {
            "name": "Stepwise: already done by this run",
            "ansible.builtin.meta": "end_host",
            "when": "'STEPWISE_ALREADY_DONE' in _stepwise_flag.stdout",
        },
    ]
    post = [
        {
            "name": f"Stepwise: mark {unit.step} completed (flag file)",
            "ansible.builtin.shell": f'echo {shlex.quote(token)} > "{path}" '
            f'&& rm -f "{path}.attempt"',
        }
    ]
    return pre, post


# --- stepwise's own work on a node -------------------------------------------------------
#: the task after each packages unit that records what the node runs (benchmarks tell it apart)
RECORD_TASK = "Stepwise: record what the node runs now"


def _record_facts(packages: bool) -> dict[str, Any]:
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


def _reboot(name: str) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "ansible.builtin.command": "{{ stepwise_reboot_command }}",
            "when": "stepwise_reboot_command is defined",
        },
        {
            "name": name,
            "ansible.builtin.reboot": {"reboot_timeout": 1800},
            "when": "stepwise_reboot_command is not defined",
        },
    ]


#: the node's root as stepwise's own shell commands see it ('' on a real host, the node's
#: directory in the lab, whose commands run with the root as their working directory)
NODE_ROOT = "{{ stepwise_node_root | default('') }}"
PERSIST_FILE = "stepwise-node-data.tgz"
#: what a reprovisioned node gets back: its configuration (RPC pins live there) and stepwise's state
OS_OWN_FILES = "--exclude=etc/os-release --exclude=etc/redhat-release --exclude=etc/system-release"
PERSIST_PATHS = "{{ stepwise_persist_paths | default(['etc', 'var/lib/stepwise']) | join(' ') }}"


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


def _transfer_check() -> dict[str, Any]:
    """The seed's step 5, right before the data moves: at least one old-OS node and exactly
    one new-OS node in the role, read from the nodes themselves."""
    # delegated tasks are templated with this host's variables: name the other node's own
    os_release = "{{ hostvars[item].stepwise_os_release | default('/etc/os-release') }}"
    return {
        "name": "Stepwise: one new-OS node and at least one old-OS node in the role",
        "ansible.builtin.shell": _OS_MAJOR.replace(OS_RELEASE, os_release),
        "delegate_to": "{{ item }}",
        "loop": "{{ stepwise_role_nodes }}",
        "register": "_stepwise_os",
        "changed_when": False,
    }


def _transfer_assert() -> dict[str, Any]:
    return {
        "name": "Stepwise: refuse unless exactly one node runs the new OS",
        "ansible.builtin.assert": {
            "that": [
                "(_stepwise_os.results | map(attribute='stdout') | map('int') | max) > "
                "(_stepwise_os.results | map(attribute='stdout') | map('int') | min)",
                "(_stepwise_os.results | map(attribute='stdout') | map('int') | select('equalto', "
                "_stepwise_os.results | map(attribute='stdout') | map('int') | max) "
                "| list | length) == 1",
            ],
            "fail_msg": "refusing the data transfer: the role needs at least one old-OS node "
            "and exactly one new-OS node "
            "(found OS majors {{ _stepwise_os.results | map(attribute='stdout') | list }})",
        },
    }


def node_work_tasks(
    unit: Unit, work: NodeWork, services_had_tasks: bool, mode: UpgradeMode = UpgradeMode.IN_PLACE
) -> list[dict[str, Any]]:
    """stepwise's own tasks of a step on each node of the unit (after the services' tasks)."""
    if work is NodeWork.ANSWERS:
        # a node whose services bring their own checks needs no extra round trip
        return [] if services_had_tasks else [{"name": "Node: answers", "ansible.builtin.ping": {}}]
    if work is NodeWork.SWITCH_REPOS:
        return [
            {
                "name": "Node: switch repositories to the target release",
                "ansible.builtin.command": {
                    "argv": "{{ [stepwise_repos_command | default('tripleo-repos'), "
                    "target_release] }}"
                },
                "changed_when": True,
            }
        ]
    if work is NodeWork.UNOWNED_PACKAGES:
        if not node_packages(unit):
            return []
        return [
            {
                "name": "Node: update packages no service owns",
                "ansible.builtin.command": {
                    "argv": "{{ ['dnf', '-y', 'update'] + "
                    "(stepwise_node_packages[inventory_hostname] "
                    "| reject('equalto', '*') | list) }}"
                },
                "when": "inventory_hostname in stepwise_node_packages",
            }
        ]
    if work is NodeWork.REBOOT:
        # services that bring their own reboot tasks do not get a second reboot
        return [] if services_had_tasks else _reboot("Node: reboot for the new kernel")
    if work is NodeWork.PREPARE_OS:
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
                "name": "Stepwise: record that the OS upgrade is prepared",
                "ansible.builtin.shell": f'mkdir -p "{FLAG_DIR}" '
                f'&& echo "$({_OS_MAJOR}) {mode}" > "{PREPARED_FLAG}"',
            }
        ]
    if work is NodeWork.UPGRADE_OS:
        check = (
            f'f="{PREPARED_FLAG}"\n'
            'if [ ! -s "$f" ]; then echo "refusing: the OS upgrade was not prepared successfully '
            'on {{ inventory_hostname }} (run system_upgrade_prepare first)" >&2; exit 3; fi\n'
            f'now=$({_OS_MAJOR}); set -- $(cat "$f"); was=$1; how=${{2:-{UpgradeMode.IN_PLACE}}}\n'
            'if [ "$now" != "$was" ]; then '
            'echo "refusing: {{ inventory_hostname }} already runs OS $now '
            '(prepared on OS $was): it was upgraded already" >&2; exit 3; fi\n'
            f'if [ "$how" != "{mode}" ]; then echo "refusing: '
            "{{ inventory_hostname }} was prepared for "
            f'$how, not {mode} (-e system_upgrade_mode)" >&2; exit 3; fi\n'
        )
        first = [
            {
                "name": "Stepwise: the OS upgrade is prepared and not yet done here",
                "ansible.builtin.shell": check,
                "changed_when": False,
            }
        ]
        if mode is UpgradeMode.REPROVISION:
            body = [
                {
                    "name": "Node: reprovision with the new OS image",
                    "ansible.builtin.command": "{{ stepwise_reprovision_command }}",
                }
            ] + _restore_tasks()
        else:
            body = _reboot("Node: reboot into the new OS")
        return (
            first
            + body
            + [
                {
                    "name": "Stepwise: the OS upgrade is done",
                    "ansible.builtin.shell": f'rm -f "{PREPARED_FLAG}"',
                },
                _record_facts(packages=False),
            ]
        )
    if work is NodeWork.CLEANUP_OS:
        return [
            {
                "name": "Node: remove what the OS upgrade left on the node",
                "ansible.builtin.shell": f'rm -rf "{FLAG_DIR}/system_upgrade_prepared" '
                f'"{FLAG_DIR}"/*.attempt "{NODE_ROOT}/tmp/{PERSIST_FILE}"',
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
    raise ValueError(work)  # pragma: no cover - every NodeWork is handled above


def render_unit(
    plan: Plan,
    unit: Unit,
    deployment: Deployment,
    *,
    run_id: int | str = "export",
    max_fail_percentage: int = 0,
    for_export: bool = False,
) -> dict[str, Any] | None:
    """The play of one unit, or None for a barrier (it has nothing to run)."""
    if unit.is_barrier:
        return None
    work = unit_work(unit, deployment)
    on: dict[str, list[str]] = {}
    for node, services in work.items():
        for s in services:
            on.setdefault(s, []).append(node)
    hosts = unit_hosts(unit, deployment)
    tasks: list[dict[str, Any]] = []
    health: dict[str, Any] = {}
    for service, nodes in on.items():
        body = []
        for t in service_tasks(deployment, plan.workflow, service, unit.step):
            t = copy.deepcopy(t)
            t["name"] = service_task_name(service, _task_label(t))
            body.append(t)
        if not body:
            continue
        if unit.step is Step.VERIFY and deployment.catalog[service].health:
            health[service] = dict(deployment.catalog[service].health)
        block: dict[str, Any] = {"name": f"Tasks of {service}"}
        if sorted(nodes) != sorted(hosts):
            block["when"] = f"inventory_hostname in stepwise_on[{service!r}]"
        block["block"] = body  # last: Ansible's (and ansible-lint's) order name, when, block
        tasks.append(block)
    node_work = unit.step.info.node_work
    if node_work is not None:
        mode = UpgradeMode(plan.params.get("system_upgrade_mode") or UpgradeMode.IN_PLACE)
        tasks.extend(node_work_tasks(unit, node_work, bool(tasks), mode))
    if unit.step is Step.SYSTEM_UPGRADE_TRANSFER_DATA and unit.vars.get("stepwise_role_nodes"):
        tasks = [_transfer_check(), _transfer_assert()] + tasks
    if not tasks:
        raise InputError(
            Problem(
                f"unit {unit.id} ({unit.step} on {', '.join(hosts) or 'no node'}) "
                "has nothing to run",
                hint="this is a planner bug: a unit with no work must be a barrier",
            )
        )
    record: dict[str, list[str]] = {}
    # also in an export: an operator running the plays sees what each node runs afterwards
    if unit.step is Step.PACKAGES:
        record = {
            n: sorted(
                {p for s in ss if s in deployment.catalog for p in deployment.catalog[s].packages}
                | {p for p in node_packages(unit).get(n, ()) if p != "*"}
            )
            for n, ss in work.items()
        }
        tasks.append(_record_facts(packages=True))
    if not unit.idempotent:
        pre, post = _guard_tasks(unit, run_id)
        tasks = pre + tasks + post
    tasks = [_cmd_form(t) for t in tasks]
    if max_fail_percentage > 0 and not for_export:
        # a host that failed earlier in this run takes no further part (as in one playbook)
        tasks.insert(
            0,
            {
                "name": "Stepwise: skip hosts that failed earlier in this run",
                "ansible.builtin.meta": "end_host",
                "when": "inventory_hostname in "
                "(lookup('ansible.builtin.file', stepwise_failed_hosts_file, "
                "errors='ignore') | default('', true) | split)",
            },
        )
    pvars: dict[str, Any] = {
        "stepwise_unit": unit.id,
        "stepwise_step": str(unit.step),
        **dict(unit.vars),
    }
    if len(on) > 1 or any(sorted(ns) != sorted(hosts) for ns in on.values()):
        pvars["stepwise_on"] = on
    packages = {
        s: list(deployment.catalog[s].packages) for s in on if deployment.catalog[s].packages
    }
    if packages and unit.step is Step.PACKAGES:
        pvars["stepwise_packages"] = packages
    if node_packages(unit):
        pvars["stepwise_node_packages"] = node_packages(unit)
    if health:
        pvars["stepwise_health"] = health
    if record:
        pvars["stepwise_record_packages"] = record
    play: dict[str, Any] = {
        "name": unit.id,
        "hosts": ",".join(hosts),
        "gather_facts": False,
        "vars": unsafe(pvars),
        "tasks": tasks,
    }
    if max_fail_percentage <= 0:
        play["any_errors_fatal"] = True
    else:
        play["max_fail_percentage"] = max_fail_percentage
    if for_export:
        tags = sorted({*unit.tags, str(unit.step)})
        if unit.step.info.by_name_only:
            tags.append("never")  # the seed: these only run when asked for by name
        play["tags"] = tags
    return play
