"""Units -> Ansible plays, from the services' own tasks. Used by the engine and by `export`.

One play per unit, named by the unit id (events are mapped back to units by play name). On
each node a unit runs, per service of `unit.services_on(node)`, that service's tasks of the
unit's step; a service's tasks are a block restricted to the nodes it runs on for that unit.
"""

from __future__ import annotations

import copy
import re
import shlex
from typing import Any, Iterable, Mapping

from stepwise.errors import InputError, Problem
from stepwise.model import Deployment
from stepwise.plan.units import Plan, Unit

#: deployment-wide step -> (where its tasks come from, key)
DEPLOYMENT_STEPS: dict[str, tuple[str, str]] = {
    "pin_rpc": ("upgrade", "pin"),
    "unpin_rpc": ("upgrade", "unpin"),
    "backup": ("upgrade", "backup"),
    "converge": ("converge", ""),
    "system_upgrade_prepare": ("system_upgrade", "prepare"),
    "system_upgrade_run": ("system_upgrade", "run"),
    "system_upgrade_transfer_data": ("system_upgrade", "transfer_data"),
    "system_upgrade_cleanup": ("system_upgrade", "cleanup"),
    "external_system_upgrade_run": ("system_upgrade", "run"),
}

#: after the OS upgrade a node has no services running: bring them up with the upgrade's
#: config and start tasks (the seed: "setting up a fresh cloud on pre-existing data")
COMPOSITE_STEPS: dict[str, tuple[str, ...]] = {"upgrade": ("config", "migrate", "start")}

#: node-wide work a step does besides the services' tasks (once per node, after them).
#: Commands are variables so a lab or an unusual OS can swap them (per host).
NODE_TASKS: dict[str, list[dict[str, Any]]] = {
    "repos": [{"name": "node | switch repositories to {{ target_release }}",
               "ansible.builtin.command": "{{ stepwise_repos_command | default('tripleo-repos') }} {{ target_release }}"}],
    "system_upgrade_prepare": [{"name": "node | prepare the OS upgrade",
                                "ansible.builtin.command": "{{ stepwise_os_upgrade_command | default('leapp upgrade') }}"}],
    "system_upgrade_run": "reboot",  # type: ignore[dict-item]
    "reboot": "reboot",  # type: ignore[dict-item]
}

_REBOOT = [
    {"name": "node | reboot", "ansible.builtin.command": "{{ stepwise_reboot_command }}",
     "when": "stepwise_reboot_command is defined"},
    {"name": "node | reboot", "ansible.builtin.reboot": {"reboot_timeout": 1800},
     "when": "stepwise_reboot_command is not defined"},
]

DEFAULT_FLAG_DIR = "/var/lib/stepwise/flags"
FLAG_VAR = "stepwise_flag_dir"

_MODULE_SKIP = {"name", "when", "tags", "register", "become", "become_user", "vars", "loop", "with_items",
                "ignore_errors", "changed_when", "failed_when", "retries", "delay", "until", "notify",
                "delegate_to", "run_once", "environment", "no_log", "args", "block", "rescue", "always"}


def task_workflow(plan: Plan) -> str:
    """Which `tasks[...]` section of the services a plan's node steps use."""
    return "upgrade" if plan.workflow in ("upgrade", "system-upgrade", "undercloud-upgrade") else "update"


def service_tasks(deployment: Deployment, workflow: str, service: str, step: str) -> list[dict[str, Any]]:
    """The tasks a service contributes to a step (with the documented defaults)."""
    try:
        svc = deployment.catalog[service]
    except KeyError:
        raise InputError(Problem(f"the plan names service '{service}' which the catalog does not define",
                                 file=deployment.catalog.path, hint="re-plan against this deployment")) from None
    if step in DEPLOYMENT_STEPS:
        source, key = DEPLOYMENT_STEPS[step]
        if source == "converge":
            return [dict(t) for t in svc.converge]
        if source == "system_upgrade":
            return [dict(t) for t in svc.system_upgrade.get(key, ())]
        return [dict(t) for t in svc.steps(source).get(key, ())]
    if step in COMPOSITE_STEPS:
        out: list[dict[str, Any]] = []
        for sub in COMPOSITE_STEPS[step]:
            out.extend(service_tasks(deployment, workflow, service, sub))
        return out
    tasks = [dict(t) for t in svc.steps(workflow).get(step, ())]
    if step == "packages" and not tasks and svc.packages:
        tasks = [{"name": "update packages", "ansible.builtin.command": "dnf -y update " +
                  " ".join(shlex.quote(p) for p in svc.packages)}]
    if step == "verify":
        tasks.extend(health_tasks(svc.health))
    return tasks


def health_tasks(health: Mapping[str, str]) -> list[dict[str, Any]]:
    """Health checks (they gate the next batch): retried for a while, then fail the unit."""
    out: list[dict[str, Any]] = []
    retry = {"retries": "{{ stepwise_health_retries | default(30) }}",
             "delay": "{{ stepwise_health_delay | default(1) }}"}
    if health.get("http"):
        out.append({"name": "health http", "ansible.builtin.uri": {"url": _placeholders(health["http"]),
                    "status_code": 200, "timeout": 5}, "register": "_stepwise_health",
                    "until": "_stepwise_health is succeeded", **retry})
    if health.get("tcp"):
        hostport = _placeholders(health["tcp"])
        host, _, port = hostport.rpartition(":")
        out.append({"name": "health tcp", "ansible.builtin.wait_for": {"host": host or "{{ stepwise_node_address }}",
                    "port": port, "timeout": 30}})
    if health.get("command"):
        out.append({"name": "health command", "ansible.builtin.shell": _placeholders(health["command"]),
                    "register": "_stepwise_health", "until": "_stepwise_health.rc == 0",
                    "changed_when": False, **retry})
    return out


def _placeholders(text: str) -> str:
    return (text.replace("{address}", "{{ stepwise_node_address }}")
                .replace("{node}", "{{ inventory_hostname }}"))


def _task_label(task: Mapping[str, Any]) -> str:
    if task.get("name"):
        return str(task["name"])
    for k in task:
        if k not in _MODULE_SKIP:
            return k.rsplit(".", 1)[-1]
    return "task"


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


def _work(unit: Unit, deployment: Deployment) -> dict[str, tuple[str, ...]]:
    if unit.nodes:
        return {n: unit.services_on(n) for n in unit.nodes}
    work: dict[str, list[str]] = {}
    for s in unit.services:
        node = deployment.bootstrap_node(s)
        if node is not None:
            work.setdefault(node.name, []).append(s)
    return {k: tuple(v) for k, v in work.items()}


def flag_hosts(unit: Unit) -> list[str]:
    """Where a once-only unit keeps its flag file: the transfer's target, else all its nodes."""
    for key in ("target", "transfer_target", "system_upgrade_target"):
        value = unit.vars.get(key)
        if isinstance(value, str) and value:
            return [value]
        if isinstance(value, (list, tuple)) and value:
            return [str(v) for v in value]
    return list(unit.nodes)


def flag_name(unit: Unit) -> str:
    return "stepwise-" + re.sub(r"[^A-Za-z0-9_.-]", "_", unit.step) + ".flag"


def marker_keys(unit: Unit) -> list[str]:
    """Store marker keys of a once-only unit (one per flag host)."""
    return [f"{unit.step}@{h}" for h in flag_hosts(unit)]


def _guard_tasks(unit: Unit, run_id: int | str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A once-only unit refuses to run where its flag file exists (the seed's data-transfer
    flag, removed only by hand); when the flag says this very run finished it (stepwise was
    killed before recording that), the unit is skipped instead."""
    hosts = flag_hosts(unit)
    name = flag_name(unit)
    token = f"run={run_id} unit={unit.id}"
    path = "{{ %s | default('%s') }}/%s" % (FLAG_VAR, DEFAULT_FLAG_DIR, name)
    check = (
        f'f="{path}"\n'
        f'if [ -e "$f.done" ] && grep -qxF {shlex.quote(token)} "$f.done"; then echo STEPWISE_ALREADY_DONE; exit 0; fi\n'
        'if [ -e "$f" ]; then echo "refusing: $f exists on {{ inventory_hostname }}: '
        f'{unit.step} already ran here ($(cat "$f")); it must never run twice. '
        'Remove the flag file by hand only if you are sure." >&2; exit 3; fi\n'
        'mkdir -p "$(dirname "$f")"\n'
        f'echo {shlex.quote(token)} > "$f"\n'
    )
    when = "inventory_hostname in %r" % (hosts,)
    pre = [
        {"name": f"stepwise | {unit.step} runs at most once (flag file)", "ansible.builtin.shell": check,
         "register": "_stepwise_flag", "changed_when": "'STEPWISE_ALREADY_DONE' not in _stepwise_flag.stdout",
         "when": when},
        {"name": "stepwise | already done by this run", "ansible.builtin.meta": "end_host",
         "when": f"{when} and 'STEPWISE_ALREADY_DONE' in _stepwise_flag.stdout"},
    ]
    post = [{"name": f"stepwise | mark {unit.step} done (flag file)",
             "ansible.builtin.shell": f'echo {shlex.quote(token)} > "{path}.done"', "when": when}]
    return pre, post


def node_tasks(step: str, services_had_tasks: bool) -> list[dict[str, Any]]:
    """Built-in node-wide tasks of a step. A `reboot` step whose services bring their own
    reboot tasks does not reboot twice."""
    spec = NODE_TASKS.get(step)
    if spec is None:
        return []
    if spec == "reboot":
        return [] if (step == "reboot" and services_had_tasks) else copy.deepcopy(_REBOOT)
    return copy.deepcopy(spec)  # type: ignore[arg-type]


def render_unit(plan: Plan, unit: Unit, deployment: Deployment, *, run_id: int | str = "export",
                max_fail_percentage: int = 0, for_export: bool = False) -> dict[str, Any] | None:
    """The play of one unit, or None when it has nothing to run (a gate, or no service has
    tasks for its step)."""
    workflow = task_workflow(plan)
    work = _work(unit, deployment)
    by_service: dict[str, list[str]] = {}
    for node, services in work.items():
        for s in services:
            by_service.setdefault(s, []).append(node)
    hosts = unit_hosts(unit, deployment)
    tasks: list[dict[str, Any]] = []
    for service, nodes in by_service.items():
        body = []
        for t in service_tasks(deployment, workflow, service, unit.step):
            t = copy.deepcopy(t)
            t["name"] = f"{service} | {_task_label(t)}"
            body.append(t)
        if not body:
            continue
        block: dict[str, Any] = {"name": service, "block": body}
        if sorted(nodes) != sorted(hosts):
            block["when"] = "inventory_hostname in %r" % (sorted(nodes),)
        tasks.append(block)
    tasks.extend(node_tasks(unit.step, bool(tasks)))
    if not tasks:
        return None
    record = {}
    if unit.step == "packages" and not for_export:
        # what really got installed, for `status` (a plan's facts may be stale or absent)
        record = {n: sorted({p for s in ss if s in deployment.catalog for p in deployment.catalog[s].packages})
                  for n, ss in work.items()}
        tasks.append({"name": "stepwise | record installed versions", "stepwise_facts": {
            "packages": "{{ stepwise_record_packages[inventory_hostname] | default([]) }}",
            "command": "{{ stepwise_discover_command | default(omit) }}",
            "os_release": "{{ stepwise_os_release | default('/etc/os-release') }}", "required": False},
            "changed_when": False})
    if not unit.idempotent:
        pre, post = _guard_tasks(unit, run_id)
        tasks = pre + tasks + post
    play: dict[str, Any] = {
        "name": unit.id,
        "hosts": ",".join(hosts),
        "gather_facts": False,
        "vars": {"stepwise_unit": unit.id, "stepwise_step": unit.step, **_plain(unit.vars),
                 **({"stepwise_record_packages": record} if record else {})},
        "tasks": tasks,
    }
    if max_fail_percentage <= 0:
        play["any_errors_fatal"] = True
    else:
        play["max_fail_percentage"] = max_fail_percentage
    if for_export:
        tags = sorted({*unit.tags, unit.step})
        if unit.step.startswith("system_upgrade_"):
            tags.append("never")  # the seed: these only run when asked for by name
        play["tags"] = tags
    return play


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def render_plays(plan: Plan, units: Iterable[Unit], deployment: Deployment, **kw: Any) -> list[tuple[Unit, dict | None]]:
    """(unit, play or None) for each unit, in the given order."""
    return [(u, render_unit(plan, u, deployment, **kw)) for u in units]


def inventory(deployment: Deployment, extra: Mapping[str, Any] | None = None,
              overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Ansible inventory of a deployment: one group per role, node vars, stepwise vars.

    `overrides` is another inventory (e.g. the lab's) whose host vars are merged on top.
    """
    over_hosts: dict[str, dict[str, Any]] = {}
    if overrides:
        _collect_hosts(overrides.get("all", overrides), over_hosts)
    children: dict[str, Any] = {}
    for role in deployment.roles:
        hosts: dict[str, Any] = {}
        for n in role.nodes:
            hv: dict[str, Any] = {"stepwise_node_address": n.address or n.name, "stepwise_role": role.name}
            if n.address:
                hv["ansible_host"] = n.address
            hv.update(_plain(n.vars))
            over = over_hosts.get(n.name, {})
            hv.update(over)
            if "ansible_host" in over and "stepwise_node_address" not in over:
                # where the node is really reached (a lab maps nodes to its own addresses)
                hv["stepwise_node_address"] = over["ansible_host"]
            _lab_defaults(hv)
            hosts[n.name] = hv
        group: dict[str, Any] = {"hosts": hosts}
        if role.vars:
            group["vars"] = _plain(role.vars)
        children[role.name] = group
    all_vars = {**_plain(deployment.vars), **dict(extra or {})}
    return {"all": {"vars": all_vars, "children": children}}


def _lab_defaults(hv: dict[str, Any]) -> None:
    """Lab nodes share one filesystem: their flag files and os-release live in the node's root."""
    if "stepwise_lab_dir" not in hv or "stepwise_lab_node" not in hv:
        return
    try:
        from stepwise.lab.nodes import Lab
        root = Lab(hv["stepwise_lab_dir"]).node_root(hv["stepwise_lab_node"])
    except Exception:
        return
    hv.setdefault(FLAG_VAR, str(root / "var" / "lib" / "stepwise" / "flags"))
    hv.setdefault("stepwise_os_release", str(root / "etc" / "os-release"))
    hv.setdefault("stepwise_reboot_command", "reboot")


def _collect_hosts(group: Mapping[str, Any], out: dict[str, dict[str, Any]], inherited: Mapping[str, Any] | None = None) -> None:
    gvars = {**dict(inherited or {}), **dict(group.get("vars") or {})}
    for h, hv in (group.get("hosts") or {}).items():
        out.setdefault(h, {}).update({**gvars, **dict(hv or {})})
    for child in (group.get("children") or {}).values():
        _collect_hosts(child or {}, out, gvars)


def plan_vars(plan: Plan, deployment: Deployment) -> dict[str, Any]:
    """Variables every task may use besides the host's own."""
    boot = {s: (deployment.bootstrap_node(s).name if deployment.bootstrap_node(s) else None)
            for s in deployment.instances}
    out: dict[str, Any] = {"stepwise_bootstrap_node": boot, "stepwise_workflow": plan.workflow,
                           "stepwise_cloud": deployment.name}
    for k in ("target_release", "system_upgrade_source"):
        if plan.params.get(k) is not None:
            out[k] = plan.params[k]
    return out
