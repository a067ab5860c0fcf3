"""What TripleO's files say, read and checked: a roles file and environment files.

The THT half of `stepwise import tripleo` (`importing.import_tripleo` turns what is read here
into a deployment): `roles_data.yaml` is a list of roles with `name`, `CountDefault`,
`HostnameFormatDefault`, `tags`, `update_serial` and `ServicesDefault` of
`OS::TripleO::Services::*`; an environment file's `resource_registry` maps services it does
not deploy to `OS::Heat::None`. Every fault names the file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.specs import NAME_RE
from stepwise.model.yamlsrc import line_of, load_yaml

#: THT role tags that make a role part of the control plane (updated before the data plane)
CONTROL_TAGS = frozenset({"primary", "controller"})
#: THT role names of the management node (upgraded by `undercloud-upgrade`, on its own)
MANAGEMENT_ROLES = frozenset({"Undercloud", "UndercloudMinion"})


@dataclass(frozen=True)
class ThtRole:
    """One role of a roles file, its fields as THT gives them (types checked)."""

    index: int
    name: str
    tags: list[Any]
    update_serial: int
    count: int
    services: list[Any]
    hostname_format: str


@dataclass(frozen=True)
class RolesFile:
    """A loaded roles file, for the stack whose nodes it names (THT's `%stackname%`)."""

    fname: str
    doc: Any
    stack: str

    def line(self, *trail: Any) -> int | None:
        """The line of what `trail` leads to in the roles file."""
        return line_of(self.doc, list(trail))

    def role(self, index: int, problems: list[Problem]) -> ThtRole | None:
        """Role `index` with its fields checked; None (and problems) when its name or a field's
        type is wrong."""
        role = self.doc[index]
        if not isinstance(role, dict) or not isinstance(role.get("name"), str):
            problems.append(
                Problem(
                    "a role must be a mapping with a 'name'", file=self.fname, line=self.line(index)
                )
            )
            return None
        name = role["name"]
        if not re.fullmatch(NAME_RE, name):
            problems.append(
                Problem(
                    f"role name '{name}' is not a valid name",
                    file=self.fname,
                    line=self.line(index, "name"),
                )
            )
            return None
        tags = role.get("tags") or []
        serial = role.get("update_serial", 1)
        count = role.get("CountDefault", 0)
        services = role.get("ServicesDefault") or []
        wrong = [
            Problem(
                f"{key} must be a {'list' if kind is list else 'number'}",
                file=self.fname,
                line=self.line(index, key),
                field=f"{name}.{key}",
            )
            for key, value, kind in (
                ("tags", tags, list),
                ("ServicesDefault", services, list),
                ("update_serial", serial, int),
                ("CountDefault", count, int),
            )
            if not isinstance(value, kind) or isinstance(value, bool)
        ]
        if wrong:
            problems.extend(wrong)
            return None
        fmt = role.get("HostnameFormatDefault") or f"%stackname%-{name.lower()}-%index%"
        return ThtRole(index, name, tags, serial, count, services, str(fmt))

    def node_names(self, role: ThtRole, problems: list[Problem]) -> str:
        """The role's HostnameFormatDefault as a stepwise counted name (`{index}`); a problem
        when the names it gives are not node names."""
        template = (
            role.hostname_format.replace("{", "{{")
            .replace("}", "}}")
            .replace("%stackname%", self.stack)
            .replace("%index%", "{index}")
        )
        if not re.fullmatch(NAME_RE, template.format(index=0)):
            problems.append(
                Problem(
                    "HostnameFormatDefault gives node names like "
                    f"'{template.format(index=0)}', not a valid node name",
                    file=self.fname,
                    line=self.line(role.index, "HostnameFormatDefault"),
                    field=f"{role.name}.HostnameFormatDefault",
                )
            )
        return template


def load_roles_file(path: Path | str, stack: str) -> RolesFile:
    """The roles file at `path` for stack `stack`; refuses a stack name that is not a name and
    a file that is not a list of roles."""
    fname = str(path)
    doc = load_yaml(Path(path))
    if not re.fullmatch(NAME_RE, stack):
        raise InputError(Problem(f"stack name '{stack}' is not a valid name", field="--stack"))
    if not isinstance(doc, list) or not doc:
        raise InputError(
            Problem(
                "a roles file is a list of roles (- name: Controller ...)",
                file=fname,
                line=getattr(doc, "line", None) or 1,
                hint="give tripleo-heat-templates' roles_data.yaml (or one generated by "
                "`openstack overcloud roles generate`)",
            )
        )
    return RolesFile(fname, doc, stack)


def disabled_services(environments: list[Path | str]) -> dict[str, str]:
    """THT service names the environment files map to `OS::Heat::None` (not deployed), with
    the file that says so; a later file overrides an earlier one, as `openstack overcloud
    deploy -e` does."""
    registry: dict[str, tuple[Any, str]] = {}
    for env in environments:
        doc = load_yaml(Path(env))
        reg = doc.get("resource_registry") if isinstance(doc, dict) else None
        if reg is None:
            continue
        if not isinstance(reg, dict):
            raise InputError(
                Problem(
                    "resource_registry must be a mapping",
                    file=str(env),
                    line=line_of(doc, ["resource_registry"]),
                )
            )
        for key, value in reg.items():
            registry[str(key)] = (value, str(env))
    return {k: src for k, (v, src) in registry.items() if v == "OS::Heat::None"}


__all__ = [
    "CONTROL_TAGS",
    "MANAGEMENT_ROLES",
    "RolesFile",
    "ThtRole",
    "disabled_services",
    "load_roles_file",
]
