"""Units -> Ansible plays, from the services' own tasks and stepwise's node work. Used by the
engine and by `export`.

One play per unit, named by the unit id (events are mapped back to units by play name). On
each node a unit runs, per service of `unit.services_on(node)`, that service's tasks for the
unit's step (`service_tasks.py`), then the step's own node work (`node_work.py`: switch
repositories, packages no service owns, OS upgrade, reboot, database restore, cleanup), a
once-only unit inside its flag-file guard (`once_only.py`).
A unit with work always renders tasks; only a barrier renders no play.

What comes from data (package and node names, addresses, the plan's variables, health URLs)
reaches Ansible as `!unsafe` variables, never spliced into task text.
"""

from __future__ import annotations

import copy
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model import Deployment
from stepwise.model.choices import DeployStyle, UpgradeMode
from stepwise.model.vocab import Step
from stepwise.plan.units import Plan, Unit
from stepwise.run.ansible_files import unsafe
from stepwise.run.lb_tasks import FRONTENDS_VAR

# where the parts of a play come from; re-exported for the modules that import them from here
from stepwise.run.node_work import (
    DEFAULT_FLAG_DIR,
    FLAG_DIR,
    FLAG_VAR,
    NODE_ROOT,
    OS_RELEASE,
    PERSIST_FILE,
    PREPARED_FLAG,
    PRESTAGE_VAR,
    RECORD_TASK,
    node_downgrades,
    node_packages,
    node_work_tasks,
    transfer_assert,
    transfer_check,
    with_record,
)
from stepwise.run.once_only import flag_hosts, flag_name, guard_tasks, marker_keys
from stepwise.run.package_batch import UPDATE_VAR, UpdateBatches, canonical_update
from stepwise.run.service_tasks import (
    SHELL_SYNTAX,
    health_tasks,
    service_task_name,
    service_tasks,
    task_label,
)

__all__ = [
    "DEFAULT_FLAG_DIR",
    "FLAG_DIR",
    "FLAG_VAR",
    "NODE_ROOT",
    "OS_RELEASE",
    "PERSIST_FILE",
    "PREPARED_FLAG",
    "RECORD_TASK",
    "SHELL_SYNTAX",
    "flag_hosts",
    "flag_name",
    "health_tasks",
    "marker_keys",
    "node_packages",
    "node_work_tasks",
    "render_unit",
    "service_task_name",
    "service_tasks",
    "unit_hosts",
    "unit_work",
]


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


def render_unit(
    plan: Plan,
    unit: Unit,
    deployment: Deployment,
    *,
    run_id: int | str = "export",
    max_fail_percentage: int = 0,
    for_export: bool = False,
    record: bool = True,
) -> dict[str, Any] | None:
    """The play of one unit, or None for a barrier (it has nothing to run). `record=False`
    leaves out what a packages unit reports afterwards (only the overhead benchmark wants
    the plays without it)."""
    if unit.is_barrier:
        return None
    work = unit_work(unit, deployment)
    on = _nodes_of_services(work)
    hosts = unit_hosts(unit, deployment)
    tasks, health, updates = _services_blocks(plan, unit, deployment, on, hosts)
    images = plan.params.get("images") or {}
    node_work = unit.step.info.node_work
    if unit.step is Step.PRESTAGE and not prestage_packages(unit, deployment, work):
        node_work = None  # container nodes only fetch their images: no dnf transaction
    if node_work is not None:
        mode = UpgradeMode(plan.params.get("system_upgrade_mode") or UpgradeMode.IN_PLACE)
        tasks.extend(node_work_tasks(unit, node_work, bool(tasks), mode))
    if unit.step is Step.SYSTEM_UPGRADE_TRANSFER_DATA and unit.vars.get("stepwise_role_nodes"):
        tasks = [transfer_check(), transfer_assert()] + tasks
    if not tasks:
        raise _nothing_to_run(unit, hosts)
    # also in an export: an operator running the plays sees what each node runs afterwards
    if unit.step is Step.PACKAGES and record:
        tasks = with_record(tasks)
    if not unit.idempotent:
        pre, post = guard_tasks(unit, run_id)
        tasks = pre + tasks + post
    tasks = [_cmd_form(t) for t in tasks]
    if max_fail_percentage > 0 and not for_export:
        tasks.insert(0, _skip_failed_hosts())
    pvars = _play_vars(unit, deployment, work, on, hosts, health, images)
    if updates:
        pvars[UPDATE_VAR] = updates
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
        play["tags"] = _export_tags(unit)
    return play


def _nothing_to_run(unit: Unit, hosts: list[str]) -> InputError:
    return InputError(
        Problem(
            f"unit {unit.id} ({unit.step} on {', '.join(hosts) or 'no node'}) has nothing to run",
            hint="this is a planner bug: a unit with no work must be a barrier",
        )
    )


def _nodes_of_services(work: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """service -> the nodes where its tasks run in the unit."""
    on: dict[str, list[str]] = {}
    for node, services in work.items():
        for s in services:
            on.setdefault(s, []).append(node)
    return on


def _services_blocks(
    plan: Plan,
    unit: Unit,
    deployment: Deployment,
    on: dict[str, list[str]],
    hosts: list[str],
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, list[str]]]]:
    """One block per service with tasks for the step (limited to its nodes when the play has
    others), the health checks of the services checked in it, and the packages of the
    batched updates (`package_batch.py`)."""
    tasks: list[dict[str, Any]] = []
    health: dict[str, Any] = {}
    last = _Last()
    batches = UpdateBatches()
    for service, nodes in on.items():
        by_style = _by_style(deployment, nodes)
        for style, styled_nodes in by_style.items():
            svc = deployment.catalog[service].styled(style)
            steps = service_tasks(deployment, plan.workflow, service, unit.step, style)
            updates = [canonical_update(t) for t in steps] if unit.step is Step.PACKAGES else []
            if updates and all(updates):
                for packages in updates:
                    first = batches.add(service, styled_nodes, packages or ())
                    if first is not None:
                        tasks.append(first)
                last = _Last()  # a task after the update is no repeat of one before it
                continue
            body = _service_body(service, steps, styled_nodes, last)
            if not body:
                continue
            batches.close()
            if svc.health and (
                unit.step is Step.VERIFY or (unit.step is Step.REJOIN and svc.frontend)
            ):
                # a unit's nodes of two styles would need two checks of one service: the
                # planner makes a batch of one role, so one style per service and unit
                health[service] = dict(svc.health)
            block: dict[str, Any] = {"name": f"Tasks of {service}"}
            if len(by_style) > 1:
                block["name"] = f"Tasks of {service} ({style} style)"
                # node names are data: a variable the condition reads, never its text
                block["when"] = "inventory_hostname in _stepwise_style_nodes"
                block["vars"] = {"_stepwise_style_nodes": sorted(styled_nodes)}
            elif sorted(nodes) != sorted(hosts):
                block["when"] = f"inventory_hostname in stepwise_on[{service!r}]"
            block["block"] = body  # last: Ansible's (and ansible-lint's) order name, when, block
            tasks.append(block)
    return tasks, health, batches.batches


def _service_body(
    service: str, steps: list[dict[str, Any]], nodes: list[str], last: _Last
) -> list[dict[str, Any]]:
    """A service's tasks for the step as its block runs them: named after the service, a
    task that repeats the one just before it on the same nodes left out."""
    body = []
    for t in steps:
        if last.repeats(t, nodes):
            continue
        t = copy.deepcopy(t)
        t["name"] = service_task_name(service, task_label(t))
        body.append(t)
    return body


class _Last:
    """The task a unit ran last and where: a service's task that is the same (its name aside)
    on the same nodes or fewer runs once. Node-wide work declared by every service of a node
    (os-apply-config renders the whole node's configuration) would otherwise run once per
    service, 18 times on a controller, each an Ansible module run; only a task right after its
    twin is dropped, so nothing another task changed in between is skipped."""

    def __init__(self) -> None:
        self.task: dict[str, Any] | None = None
        self.nodes: frozenset[str] = frozenset()

    def repeats(self, task: dict[str, Any], nodes: list[str]) -> bool:
        """Whether `task` on `nodes` repeats the last one (else it becomes the last one)."""
        bare = {k: v for k, v in task.items() if k != "name"}
        if bare == self.task and self.nodes >= set(nodes):
            return True
        self.task, self.nodes = bare, frozenset(nodes)
        return False


def _by_style(deployment: Deployment, nodes: list[str]) -> dict[DeployStyle, list[str]]:
    """The nodes by the style of their role (one group on any cloud of one style)."""
    out: dict[DeployStyle, list[str]] = {}
    for n in nodes:
        style = deployment.role_of(n).style if n in deployment.node_by_name else None
        out.setdefault(style or DeployStyle.PACKAGES, []).append(n)
    return out


def _skip_failed_hosts() -> dict[str, Any]:
    """A host that failed earlier in this run takes no further part (as in one playbook)."""
    return {
        "name": "Stepwise: skip hosts that failed earlier in this run",
        "ansible.builtin.meta": "end_host",
        "when": "inventory_hostname in "
        "(lookup('ansible.builtin.file', stepwise_failed_hosts_file, "
        "errors='ignore') | default('', true) | split)",
    }


def _packages_to_record(
    unit: Unit, deployment: Deployment, work: dict[str, tuple[str, ...]]
) -> dict[str, list[str]]:
    """node -> the packages a packages unit updated there, which the node reports after it."""
    if unit.step is not Step.PACKAGES:
        return {}
    return {
        n: sorted(
            {p for s in ss if s in deployment.catalog for p in deployment.catalog[s].packages}
            | {p for p in node_packages(unit).get(n, ()) if p != "*"}
            | set(node_downgrades(unit).get(n, ()))
        )
        for n, ss in work.items()
    }


def prestage_packages(
    unit: Unit, deployment: Deployment, work: dict[str, tuple[str, ...]]
) -> dict[str, list[str]]:
    """node -> the packages a prestage unit fetches there: those of its changing services in
    the node's style (a container style's image is its package: none) and those no service
    owns (the node's one `dnf --downloadonly` transaction)."""
    catalog = deployment.catalog
    extra = node_packages(unit)
    fetch: dict[str, list[str]] = {}
    for style, nodes in _by_style(deployment, list(work)).items():
        for n in nodes:
            owned = {p for s in work[n] if s in catalog for p in catalog[s].styled(style).packages}
            if owned or extra.get(n):
                fetch[n] = sorted(owned | set(extra.get(n, ())))
    return fetch


def _play_vars(
    unit: Unit,
    deployment: Deployment,
    work: dict[str, tuple[str, ...]],
    on: dict[str, list[str]],
    hosts: list[str],
    health: dict[str, Any],
    images: dict[str, Any],
) -> dict[str, Any]:
    """The play's variables: the unit, where each service's tasks run (when not everywhere),
    the packages it updates, the health checks, the container nodes' images (node -> service
    -> {ref, target}) and what the nodes report afterwards."""
    pvars: dict[str, Any] = {
        "stepwise_unit": unit.id,
        "stepwise_step": str(unit.step),
        **dict(unit.vars),
    }
    if len(on) > 1 or any(sorted(ns) != sorted(hosts) for ns in on.values()):
        pvars["stepwise_on"] = on
    # only the images of the services the unit works on there (a node runs dozens)
    on_hosts = {
        n: {s: images[n][s] for s in work.get(n, ()) if s in images[n]}
        for n in hosts
        if n in images and any(s in images[n] for s in work.get(n, ()))
    }
    if on_hosts:
        pvars["stepwise_images"] = on_hosts
    packages = {
        s: list(deployment.catalog[s].packages) for s in on if deployment.catalog[s].packages
    }
    if packages and unit.step is Step.PACKAGES:
        pvars["stepwise_packages"] = packages
    if node_packages(unit):
        # the names dnf updates on each node: none for a node whose every package updates
        pvars["stepwise_node_packages"] = {
            n: [p for p in ps if p != "*"] for n, ps in node_packages(unit).items()
        }
    if health:
        pvars["stepwise_health"] = health
    frontends = {s: deployment.catalog[s].frontend for s in on if deployment.catalog[s].frontend}
    if frontends and unit.step in (Step.LEAVE, Step.REJOIN):
        pvars[FRONTENDS_VAR] = frontends
    if unit.step is Step.PRESTAGE and (fetch := prestage_packages(unit, deployment, work)):
        pvars[PRESTAGE_VAR] = fetch
    record = _packages_to_record(unit, deployment, work)
    if record:
        pvars["stepwise_record_packages"] = record
    return pvars


def _export_tags(unit: Unit) -> list[str]:
    """An exported play's tags: the unit's and its step's; a by-name step also `never`."""
    tags = sorted({*unit.tags, str(unit.step)})
    if unit.step.info.by_name_only:
        tags.append("never")  # the seed: these only run when asked for by name
    return tags
