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


#: THT service names of earlier releases -> the name a later release gives the same service
#: (Queens -> Train -> Wallaby): a roles file of the fast-forward starting point resolves
#: through the catalog's entry of the current name
RENAMED: dict[str, str] = {
    f"OS::TripleO::Services::{old}": f"OS::TripleO::Services::{new}"
    for old, new in {
        "NovaPlacement": "PlacementApi",  # Stein: placement split out of nova
        "RabbitMQ": "OsloMessagingRpc",  # Queens: one broker for RPC and notifications
        "Ntp": "Timesync",  # Rocky: chrony behind one timesync service
        "BlockStorageCinderVolume": "CinderVolume",  # the BlockStorage role's cinder-volume
        "CinderBackendDellPs": "CinderBackendDellSc",  # Dell EqualLogic: one backend entry
        "UndercloudHAProxy": "HAproxy",
        "UndercloudKeepalived": "Keepalived",
        "UndercloudRedis": "Redis",
        "UndercloudCinderApi": "CinderApi",
        "UndercloudCinderScheduler": "CinderScheduler",
        "UndercloudCinderVolume": "CinderVolume",
    }.items()
}


@dataclass(frozen=True)
class Setting:
    """A value an environment file gives, with where: its file, its line, and the loaded
    document with the trail to it (for the lines of a list's items)."""

    value: Any
    file: str
    line: int | None
    doc: Any
    trail: tuple[Any, ...]


@dataclass
class Environment:
    """What the environment files say, merged as `openstack overcloud deploy -e` merges them
    (a later file overrides an earlier one): the resource registry, the parameter defaults,
    and notes (a key given twice in one file)."""

    registry: dict[str, Setting]
    parameters: dict[str, Setting]
    notes: list[str]

    def disabled(self) -> dict[str, str]:
        """THT service names mapped to `OS::Heat::None` (not deployed), with the file."""
        return {k: s.file for k, s in self.registry.items() if s.value == "OS::Heat::None"}


def read_environments(environments: list[Path | str]) -> Environment:
    """The environment files, read as Heat reads them: a key given twice in one mapping is
    the last one (with a note naming both lines), not a refusal."""
    env = Environment({}, {}, [])
    for path in environments:
        fname = str(path)
        twice: list[tuple[Any, int, int]] = []
        doc = load_yaml(Path(path), duplicates=twice)
        env.notes.extend(
            f"{fname}: '{key}' is given on line {first} and again on line {last}: the one on "
            f"line {last} is used, as Heat does"
            for key, first, last in twice
        )
        if not isinstance(doc, dict):
            continue
        for section, into in (
            ("resource_registry", env.registry),
            ("parameter_defaults", env.parameters),
        ):
            body = doc.get(section)
            if body is None:
                continue
            if not isinstance(body, dict):
                raise InputError(
                    Problem(
                        f"{section} must be a mapping",
                        file=fname,
                        line=line_of(doc, [section]),
                        field=section,
                    )
                )
            for key, value in body.items():
                into[str(key)] = Setting(
                    value, fname, line_of(doc, [section, key]), doc, (section, key)
                )
    return env


__all__ = [
    "CONTROL_TAGS",
    "MANAGEMENT_ROLES",
    "RolesFile",
    "ThtRole",
    "RENAMED",
    "Environment",
    "Setting",
    "load_roles_file",
    "read_environments",
]
