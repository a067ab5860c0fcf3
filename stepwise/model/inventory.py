"""Read an Ansible inventory (INI or YAML) as groups of hosts, with the line of everything.

An input adapter of the model layer: `stepwise import inventory` and `stepwise import tripleo
--inventory` turn what an operator already has into a deployment file. Only what stepwise needs
is read (groups, their hosts, `ansible_host`, group vars, children); the parser is small and
strict rather than Ansible's own, so every fault is reported with file and line, and no plugin,
script or template of an inventory is ever run (a dynamic inventory script is refused).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model import limits
from stepwise.model.yamlsrc import line_of, parse_yaml
from stepwise.paths import read_input

#: groups every Ansible inventory has implicitly; never a role
IMPLICIT_GROUPS = frozenset({"all", "ungrouped"})
_RANGE = re.compile(r"\[(\d+):(\d+)\]")
_GROUP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


@dataclass
class Host:
    """One host of a group: its inventory name, `ansible_host` if given, where it was read."""

    name: str
    address: str | None
    line: int | None


@dataclass
class Group:
    """A group of the inventory: its own hosts (not its children's), vars and children."""

    name: str
    line: int | None
    hosts: list[Host] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)


@dataclass
class Inventory:
    """Groups by name, in the order the file declares them."""

    path: str
    groups: dict[str, Group]


def load_inventory(path: Path | str) -> Inventory:
    """Load an INI or YAML inventory; YAML when it parses as a mapping, INI otherwise."""
    path = Path(path)
    fname = str(path)
    raw = read_input(path, field="--inventory", limit=limits.MAX_FILE_BYTES, what="inventory file")
    if raw.startswith(b"#!"):
        # a dynamic inventory script: stepwise never runs it
        raise InputError(
            Problem(
                "a dynamic inventory script is not read",
                file=fname,
                line=1,
                hint="run it once (`ansible-inventory -i SCRIPT --list -y > inv.yaml`) "
                "and import the YAML",
            )
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            Problem(f"not UTF-8 text (byte {exc.start})", file=fname, hint="save the file as UTF-8")
        ) from None
    if _looks_like_ini(text):
        return _parse_ini(text, fname)
    return _parse_yaml(parse_yaml(text, fname), fname)


def _looks_like_ini(text: str) -> bool:
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(("#", ";", "---")):
            continue
        return s.startswith("[") or (":" not in s.split()[0] if s.split() else False)
    return False


def _parse_ini(text: str, fname: str) -> Inventory:
    groups: dict[str, Group] = {}
    problems: list[Problem] = []
    section, kind = "ungrouped", "hosts"
    groups["ungrouped"] = Group("ungrouped", None)
    total = 0  # hosts read so far, every group together
    for ln, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s or s.startswith(("#", ";")):
            continue
        if s.startswith("["):
            m = re.fullmatch(r"\[([^\]:]+)(?::(vars|children))?\]", s)
            if not m or not _GROUP_NAME.fullmatch(m.group(1)):
                problems.append(
                    Problem(
                        f"'{s}' is not a group header",
                        file=fname,
                        line=ln,
                        hint="write [group], [group:vars] or [group:children]",
                    )
                )
                section, kind = "", "skip"
                continue
            section, kind = m.group(1), m.group(2) or "hosts"
            groups.setdefault(section, Group(section, ln))
            continue
        if kind == "skip":
            continue
        group = groups[section]
        if kind == "vars":
            key, sep, value = s.partition("=")
            if not sep or not key.strip():
                problems.append(
                    Problem(f"'{s}' is not key=value", file=fname, line=ln, field=f"{section}:vars")
                )
                continue
            group.vars[key.strip()] = value.strip().strip("'\"")
        elif kind == "children":
            group.children.append(s.split()[0])
        else:
            name, *pairs = s.split()
            hvars: dict[str, str] = {}
            for pair in pairs:
                key, sep, value = pair.partition("=")
                if not sep:
                    problems.append(
                        Problem(f"'{pair}' is not key=value", file=fname, line=ln, field=name)
                    )
                    continue
                hvars[key] = value.strip("'\"")
            try:
                names = _expand_range(name, limits.MAX_NODES - total)
            except ValueError as exc:
                problems.append(Problem(str(exc), file=fname, line=ln, field=name))
                continue
            except _TooMany:
                # the whole inventory is bounded, not only each range: forty ranges of 99,999
                # hosts in 400 bytes built millions of hosts before any node limit was checked
                raise _too_many(fname, ln) from None
            total += len(names)
            for n in names:
                group.hosts.append(Host(n, hvars.get("ansible_host"), ln))
    if problems:
        raise InputError(problems)
    return Inventory(fname, groups)


class _TooMany(Exception):
    """More hosts than the inventory may hold in all."""


def _too_many(fname: str, line: int | None) -> InputError:
    return InputError(
        Problem(
            f"the inventory names more than {limits.MAX_NODES:,} hosts in all",
            file=fname,
            line=line,
            hint="import the cloud in parts, or check the host ranges",
        )
    )


def _expand_range(name: str, budget: int = limits.MAX_NODES) -> list[str]:
    """Ansible's `node[0:2]` host range (numeric, one range, zero padding kept); raises
    _TooMany, before building any name, when it holds more than `budget` hosts."""
    ranges = _RANGE.findall(name)
    if not ranges and "[" not in name:
        if budget < 1:
            raise _TooMany()
        return [name]
    if len(ranges) != 1 or name.count("[") != 1:
        raise ValueError(f"host pattern '{name}': only one numeric range like node-[0:2] is read")
    lo, hi = ranges[0]
    if int(hi) < int(lo) or int(hi) - int(lo) >= limits.MAX_NODES:
        raise ValueError(f"host range [{lo}:{hi}] is empty or too large")
    if int(hi) - int(lo) + 1 > budget:
        raise _TooMany()
    width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
    return [_RANGE.sub(str(i).zfill(width), name, count=1) for i in range(int(lo), int(hi) + 1)]


def _parse_yaml(doc: Any, fname: str) -> Inventory:
    if not isinstance(doc, dict):
        raise InputError(
            Problem(
                "an inventory must be a mapping of groups (all:, Controller:, ...)",
                file=fname,
                line=getattr(doc, "line", None) or 1,
            )
        )
    groups: dict[str, Group] = {}
    problems: list[Problem] = []
    count = [0]  # hosts read, every group together (children repeat them: each counts)

    def walk(name: str, body: Any, trail: list[Any]) -> None:
        line = line_of(doc, trail)
        if not isinstance(name, str) or not _GROUP_NAME.fullmatch(name):
            problems.append(Problem(f"'{name}' is not a group name", file=fname, line=line))
            return
        group = groups.setdefault(name, Group(name, line))
        if body is None:
            return
        if not isinstance(body, dict):
            problems.append(
                Problem(
                    "a group must be a mapping (hosts:, vars:, children:)",
                    file=fname,
                    line=line,
                    field=name,
                )
            )
            return
        for key in body:
            if key not in ("hosts", "vars", "children"):
                problems.append(
                    Problem(
                        f"unknown key '{key}' in group {name}",
                        file=fname,
                        line=line_of(doc, trail + [key]),
                        field=name,
                        hint="a group has hosts:, vars: and children:",
                    )
                )
        hosts = body.get("hosts") or {}
        if isinstance(hosts, list):  # older tripleo-ansible-inventory: hosts as a list of names
            hosts = {h: None for h in hosts}
        if not isinstance(hosts, dict):
            problems.append(
                Problem(
                    "hosts: must be a mapping of host names",
                    file=fname,
                    line=line_of(doc, trail + ["hosts"]),
                    field=f"{name}.hosts",
                )
            )
            hosts = {}
        for host, hvars in hosts.items():
            hline = line_of(doc, trail + ["hosts", host])
            count[0] += 1
            if count[0] > limits.MAX_NODES:
                raise _too_many(fname, hline)
            if hvars is not None and not isinstance(hvars, dict):
                problems.append(
                    Problem(f"vars of host '{host}' must be a mapping", file=fname, line=hline)
                )
                continue
            address = (hvars or {}).get("ansible_host")
            group.hosts.append(Host(str(host), None if address is None else str(address), hline))
        gvars = body.get("vars") or {}
        if isinstance(gvars, dict):
            group.vars.update(gvars)
        else:
            problems.append(
                Problem("vars: must be a mapping", file=fname, line=line_of(doc, trail + ["vars"]))
            )
        children = body.get("children") or {}
        if isinstance(children, list):
            children = {c: None for c in children}
        if not isinstance(children, dict):
            problems.append(
                Problem(
                    "children: must be a mapping of groups",
                    file=fname,
                    line=line_of(doc, trail + ["children"]),
                )
            )
            return
        for child, cbody in children.items():
            group.children.append(str(child))
            walk(child, cbody, trail + ["children", child])

    for name, body in doc.items():
        walk(name, body, [name])
    if problems:
        raise InputError(problems)
    return Inventory(fname, groups)


def hosts_by_group(inv: Inventory) -> dict[str, list[Host]]:
    """Groups that hold hosts themselves (the roles), implicit groups left out; a host listed
    in the same group twice (YAML children repeat groups) counts once."""
    out: dict[str, list[Host]] = {}
    for name, group in inv.groups.items():
        if name in IMPLICIT_GROUPS or not group.hosts:
            continue
        seen: dict[str, Host] = {}
        for h in group.hosts:
            seen.setdefault(h.name, h)
        out[name] = list(seen.values())
    return out


__all__ = ["Host", "Group", "Inventory", "load_inventory", "hosts_by_group"]
