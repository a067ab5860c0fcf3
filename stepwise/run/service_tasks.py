"""The tasks a service brings to a unit's play: its catalog tasks for the unit's step (where
they come from is `Step.info`), with the documented defaults (a packages step updates the
service's packages, a verify step runs its health checks), and how they are named."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model import Deployment
from stepwise.model.choices import DeployStyle
from stepwise.model.vocab import Section, Step, Workflow, task_source
from stepwise.plan.table import entry
from stepwise.run.lb_tasks import leave_tasks, rejoin_tasks

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
    deployment: Deployment,
    workflow: Workflow,
    service: str,
    step: Step,
    style: DeployStyle = DeployStyle.PACKAGES,
) -> list[dict[str, Any]]:
    """The tasks a service contributes to a step on nodes of `style` (with the documented
    defaults); the model's `Service.styled` says what the style's tasks are."""
    try:
        svc = deployment.catalog[service].styled(style)
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
    if step is Step.PRESTAGE:
        # a container style pulls and checks its image; the packages style has none: the
        # node work downloads the node's packages in one transaction (`--downloadonly`)
        return [dict(t) for t in svc.prestage]
    if step is Step.PACKAGES and entry(workflow).downgrades:
        # the services' packages tasks update: stepwise's own node work goes back instead
        return []
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
    if svc.frontend and step is Step.LEAVE:
        # out of the load balancer first: whatever else the service does to leave, no
        # client request reaches it meanwhile
        tasks = leave_tasks(service) + tasks
    if svc.frontend and step is Step.REJOIN:
        tasks += rejoin_tasks(service, health_tasks(service, svc.health))
    return tasks


#: what only a shell understands in a command line
SHELL_SYNTAX = re.compile(r"[|&;<>()$`*?~\\\n\"']|\[")


def health_tasks(service: str, health: Mapping[str, str]) -> list[dict[str, Any]]:
    """Health checks (they gate the next batch): retried for a while, then fail the unit. The
    catalog's URL/command is a variable; `{address}` and `{node}` are filled in by Jinja's
    `replace`, so nothing of it is ever rendered as a template."""
    return [
        check(service, health)
        for kind, check in (("http", _http_check), ("tcp", _tcp_check), ("command", _command_check))
        if health.get(kind)
    ]


def _retried() -> dict[str, str]:
    return {
        "retries": "{{ stepwise_health_retries | default(30) }}",
        "delay": "{{ stepwise_health_delay | default(1) }}",
    }


def _filled(service: str, health: Mapping[str, str], kind: str) -> str:
    """The check's text with its placeholders filled in by Jinja (only those the check uses:
    a shorter line an Ansible user can read)."""
    text = f"stepwise_health[{service!r}].{kind}"
    if "{address}" in health[kind]:
        text += " | replace('{address}', stepwise_node_address)"
    if "{node}" in health[kind]:
        text += " | replace('{node}', inventory_hostname)"
    return f"({text})" if "|" in text else text


def _http_check(service: str, health: Mapping[str, str]) -> dict[str, Any]:
    return {
        "name": f"Check that {service} answers its HTTP health check",
        "ansible.builtin.uri": {
            "url": "{{ " + _filled(service, health, "http") + " }}",
            "status_code": 200,
            "timeout": 5,
        },
        "register": "_stepwise_health",
        "until": "_stepwise_health is succeeded",
        **_retried(),
    }


def _tcp_check(service: str, health: Mapping[str, str]) -> dict[str, Any]:
    tcp = _filled(service, health, "tcp")
    return {
        "name": f"Check that {service} accepts connections",
        "ansible.builtin.wait_for": {
            "host": "{{ " + tcp + ".rpartition(':')[0] or stepwise_node_address }}",
            "port": "{{ " + tcp + ".rpartition(':')[2] }}",
            "timeout": 30,
        },
    }


def _command_check(service: str, health: Mapping[str, str]) -> dict[str, Any]:
    # a plain command line runs without a shell (what a shell would add, it does not need)
    module = (
        "ansible.builtin.shell"
        if SHELL_SYNTAX.search(health["command"])
        else "ansible.builtin.command"
    )
    return {
        "name": f"Check that {service} is healthy",
        module: {"cmd": "{{ " + _filled(service, health, "command") + " }}"},
        "register": "_stepwise_health",
        "until": "_stepwise_health.rc == 0",
        "changed_when": False,
        **_retried(),
    }


def service_task_name(service: str, label: str) -> str:
    """A service task's name as Ansible shows it: a sentence starting with a capital letter
    that names the service (appended when the catalog's name does not say it)."""
    label = label[:1].upper() + label[1:]
    return label if service in label else f"{label} ({service})"


def task_label(task: Mapping[str, Any]) -> str:
    if task.get("name"):
        return str(task["name"])
    for k in task:
        if k not in _MODULE_SKIP:
            return k.rsplit(".", 1)[-1]
    return "task"
