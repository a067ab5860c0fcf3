"""A catalog entry as it runs in a container style (`Service.styled`): the tasks stepwise
derives from the style where the entry gives none (docs/catalog.md "Deployment styles").

In a container style the image is the package: the `packages` step has nothing to do, `stop`
and `start` are the style's systemd unit (`tripleo_<service>`, `kolla-<service>-container`),
`config` writes the container's startup config with the target image by digest and recreates
the container from it, and the prestage step pulls the image and checks its digest. The
service's own work (leave and rejoin its load balancers and clusters, migrate its schema,
its health checks) is kept, with a systemd task on its packaged unit moved to the style's.

The image's reference and digests reach the tasks as the variable `stepwise_images`
(node -> service -> {ref, target}), which the run layer marks unsafe: no reference or digest
is ever template code.

`catalog.Service.styled` calls this module, so it never imports the catalog back: it says what
it reads of a service (`StyledEntry`) and returns the same kind of value it is given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from stepwise.model.choices import DeployStyle
from stepwise.model.connection import NodeAccess
from stepwise.model.containers import StyleTasks, container_name, startup_config, unit_name
from stepwise.model.vocab import (
    WORKFLOW_SECTIONS,
    Section,
    Step,
    SystemUpgradeKey,
    TaskKey,
    UpgradeKey,
)

Tasks = tuple[dict[str, Any], ...]


class StyledEntry(Protocol):
    """What styling reads of a catalog entry (`catalog.Service`, a frozen dataclass that
    `dataclasses.replace` copies with the style's tasks)."""

    @property
    def name(self) -> str: ...
    @property
    def unit(self) -> str: ...
    @property
    def has_runtime(self) -> bool: ...
    @property
    def health(self) -> Mapping[str, str]: ...
    @property
    def style_tasks(self) -> Mapping[DeployStyle, StyleTasks]: ...
    @property
    def system_upgrade(self) -> Mapping[SystemUpgradeKey, Tasks]: ...
    def steps(self, section: Section) -> Mapping[TaskKey, Tasks]: ...


#: the entry's own type: a styled `catalog.Service` is a `catalog.Service`
Entry = TypeVar("Entry", bound=StyledEntry)
#: a loopback or lab registry without TLS sets the host variable to false
_TLS_VERIFY = "--tls-verify={{ stepwise_registry_tls_verify | default(true) | bool | lower }}"
_SYSTEMD = ("ansible.builtin.systemd_service", "ansible.builtin.systemd", "systemd_service")


def images_var(service: str) -> str:
    """The Jinja expression of one service's image facts on the current node."""
    return f"stepwise_images[inventory_hostname][{service!r}]"


@lru_cache(maxsize=4096)
def styled_service(svc: Entry, style: DeployStyle) -> Entry:
    """`svc` on a node of container style `style` (cached per service and style)."""
    own = svc.style_tasks.get(style)
    unit = (own.unit if own is not None else None) or unit_name(svc.name, style)
    tasks = {}
    for section in WORKFLOW_SECTIONS:
        steps: dict[TaskKey, Tasks] = {
            k: _moved(v, svc.unit, unit) for k, v in svc.steps(section).items()
        }
        if svc.has_runtime:
            steps.update(_derived(svc.name, style, unit))
            steps.pop(Step.PACKAGES, None)
        if UpgradeKey.PIN in steps:
            steps[UpgradeKey.PIN] = _container_pins(svc.name, steps[UpgradeKey.PIN])
        if own is not None:
            steps.update(own.tasks.get(section, {}))
        tasks[section] = MappingProxyType({k: v for k, v in steps.items() if v})
    health = own.health if own is not None and own.health is not None else None
    return replace(
        svc,
        unit=unit,
        packages=(),
        tasks=MappingProxyType(tasks),
        health=health if health is not None else _health(svc.health, svc.unit, unit),
        system_upgrade=MappingProxyType(
            {k: _moved(v, svc.unit, unit) for k, v in svc.system_upgrade.items()}
        ),
        style=style,
        prestage=prestage_tasks(svc.name) if svc.has_runtime else (),
    )


def _moved(tasks: Tasks, old: str, new: str) -> Tasks:
    """The tasks with a systemd task on the packaged unit `old` acting on `new` instead."""
    out = []
    for task in tasks:
        for key in _SYSTEMD:
            args = task.get(key)
            if isinstance(args, dict) and args.get("name") == old:
                task = {**task, key: {**args, "name": new}}
        out.append(task)
    return tuple(out)


def _health(health: Any, old: str, new: str) -> Any:
    """The health checks, a `systemctl` command on the packaged unit asking the style's."""
    command = health.get("command")
    if not command or not command.startswith("systemctl "):
        return health
    moved = re.sub(rf"(?<![\w.@-]){re.escape(old)}(?![\w.@-])", new, command)
    return MappingProxyType({**health, "command": moved})


def _derived(service: str, style: DeployStyle, unit: str) -> dict[TaskKey, Tasks]:
    """The steps a container style gives every service: stop and start its unit, and the
    switch to the target image (config)."""
    return {
        Step.STOP: (
            {
                "name": f"Stop the {service} container ({unit})",
                "ansible.builtin.systemd_service": {"name": unit, "state": "stopped"},
            },
        ),
        Step.CONFIG: (fetch_if_missing(service), *switch_tasks(service, style)),
        Step.START: (
            {
                "name": f"Start the {service} container ({unit})",
                "ansible.builtin.systemd_service": {"name": unit, "state": "started"},
            },
        ),
    }


def _image_vars(service: str) -> dict[str, str]:
    """Task variables naming the service's target image: short lines in the tasks (and no
    reference or digest ever in their text)."""
    img = images_var(service)
    return {
        "stepwise_image_ref": f"{{{{ {img}.ref }}}}",
        "stepwise_image_digest": f"{{{{ {img}.target }}}}",
    }


def switch_tasks(service: str, style: DeployStyle) -> Tasks:
    """Write the container startup config with the target image by digest, then recreate the
    container from that image (as tripleo_container_manage does)."""
    root = NodeAccess.var("node_root")
    default = NodeAccess.real_default("node_root")
    pinned = "stepwise_image_ref + '@' + stepwise_image_digest"
    return (
        {
            "name": f"Write the {service} container's startup config: its target image by digest",
            "ansible.builtin.copy": {
                "dest": f"{{{{ {root} | default({default!r}) }}}}{startup_config(service, style)}",
                "content": f"{{{{ {{'image': {pinned}}} | to_json }}}}",
                "mode": "0644",
            },
            "vars": _image_vars(service),
        },
        {
            "name": f"Remove the {service} container (it is recreated from the target image)",
            "ansible.builtin.command": {"argv": ["podman", "rm", "-f", container_name(service)]},
            "changed_when": True,
        },
        {
            "name": f"Create the {service} container from its target image",
            "ansible.builtin.command": {
                "argv": [
                    "podman",
                    "create",
                    "--name",
                    container_name(service),
                    f"{{{{ {pinned} }}}}",
                ]
            },
            "vars": _image_vars(service),
            "changed_when": True,
        },
        {
            # the configuration is generated for the release the new image holds (TripleO
            # renders it with the new image before the container starts)
            "name": f"Render the configuration of {service} for its new image (os-apply-config)",
            "ansible.builtin.command": "os-apply-config",
            "changed_when": True,
        },
    )


#: the built-in catalog's pins read the release installed now from the host's package; a
#: container's release is its image's `version` label (the container runs it, not the host)
_PACKAGE_MAJOR = re.compile(r"^major=\$\(dnf list installed .*\)$", re.M)


def container_major(service: str) -> str:
    """A shell line setting `major` to the release major of the image `service`'s container
    runs (its `version` label, as TripleO's and Kolla's images carry it)."""
    read = (
        "import json, sys; "
        'print(json.load(sys.stdin)[0]["Config"]["Labels"]["version"].split(".")[0])'
    )
    return f"major=$(podman inspect {container_name(service)} | python3 -c '{read}')"


def _container_pins(service: str, tasks: Tasks) -> Tasks:
    """The entry's pin tasks with the release read from the running container's image."""
    out = []
    for t in tasks:
        args = t.get("ansible.builtin.shell")
        if isinstance(args, dict) and _PACKAGE_MAJOR.search(str(args.get("cmd", ""))):
            cmd = _PACKAGE_MAJOR.sub(lambda _m: container_major(service), args["cmd"])
            t = {**t, "ansible.builtin.shell": {**args, "cmd": cmd}}
        out.append(t)
    return tuple(out)


def fetch_if_missing(service: str) -> dict[str, Any]:
    """The switch's first task: pull the target image unless the node holds it by digest
    already (the prestage pulled it; with --no-prestage the pull happens here, while the
    service is stopped, as an upgrade without a prestage does). The `podman create` by digest
    after it refuses any other image."""
    return {
        "name": f"Pull the target image of {service} unless the node holds it already",
        "ansible.builtin.shell": {
            "cmd": 'podman image exists "$REF@$DIGEST" || podman pull "$TLS" "$REF"',
        },
        # the reference reaches the shell as data (environment), never as script text
        "environment": {
            "REF": "{{ stepwise_image_ref }}",
            "DIGEST": "{{ stepwise_image_digest }}",
            "TLS": _TLS_VERIFY,
        },
        "vars": _image_vars(service),
        "changed_when": True,
    }


def prestage_tasks(service: str) -> Tasks:
    """Fetch the service's target image while it keeps serving, and check that what arrived is
    the digest the facts name (a tag moved since discover is refused, not run)."""
    return (
        {
            "name": f"Pull the target image of {service}",
            "ansible.builtin.command": {
                "argv": ["podman", "pull", _TLS_VERIFY, "{{ stepwise_image_ref }}"]
            },
            "vars": _image_vars(service),
            "changed_when": True,
        },
        {
            "name": f"Inspect the pulled image of {service}",
            "ansible.builtin.command": {
                "argv": ["podman", "image", "inspect", "{{ stepwise_image_ref }}"]
            },
            "vars": _image_vars(service),
            "register": "_stepwise_image",
            "changed_when": False,
        },
        {
            "name": f"Check that the pulled image of {service} has the target digest",
            "ansible.builtin.assert": {
                "that": ["(_stepwise_image.stdout | from_json)[0].Digest == stepwise_image_digest"],
                "fail_msg": f"the image pulled for {service} is not the target digest of the "
                "facts: run `stepwise discover` again",
            },
            "vars": _image_vars(service),
        },
    )
