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
    """One host of a group: its inventory name, `ansible_host` if given, where it was read,
    and its variables (as given on that line; `effective_hosts` merges the groups' in)."""

    name: str
    address: str | None
    line: int | None
    vars: dict[str, Any] = field(default_factory=dict)


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
    # JSON (`ansible-inventory --list`, OpenStack-Ansible's openstack_inventory.json) is YAML;
    # its first line, a lone '{', would read as an INI host
    if not text.lstrip().startswith("{") and _looks_like_ini(text):
        return _parse_ini(text, fname)
    return _parse_yaml(parse_yaml(text, fname), fname)


def _looks_like_ini(text: str) -> bool:
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(("#", ";", "---")):
            continue
        return s.startswith("[") or (":" not in s.split()[0] if s.split() else False)
    return False


@dataclass(frozen=True)
class _At:
    """Where in the inventory file a fault is: what problems are reported against."""

    file: str
    line: int | None

    def problem(
        self, message: str, *, field: str | None = None, hint: str | None = None
    ) -> Problem:
        """A problem at this place."""
        return Problem(message, file=self.file, line=self.line, field=field, hint=hint)


def _parse_ini(text: str, fname: str) -> Inventory:
    groups: dict[str, Group] = {"ungrouped": Group("ungrouped", None)}
    problems: list[Problem] = []
    section, kind = "ungrouped", "hosts"
    total = 0  # hosts read so far, every group together
    for ln, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s or s.startswith(("#", ";")):
            continue
        at = _At(fname, ln)
        if s.startswith("["):
            section, kind = _ini_header(s, at, groups, problems)
        elif kind == "vars":
            _ini_group_var(s, section, groups[section], at, problems)
        elif kind == "children":
            groups[section].children.append(s.split()[0])
        elif kind == "hosts":
            total += _ini_hosts(s, groups[section], limits.MAX_NODES - total, at, problems)
    if problems:
        raise InputError(problems)
    return Inventory(fname, groups)


def _ini_header(
    s: str, at: _At, groups: dict[str, Group], problems: list[Problem]
) -> tuple[str, str]:
    """The section and kind (hosts, vars, children) a header line opens; a bad header is a
    problem, and the lines under it are skipped (kind "skip")."""
    m = re.fullmatch(r"\[([^\]:]+)(?::(vars|children))?\]", s)
    if not m or not _GROUP_NAME.fullmatch(m.group(1)):
        problems.append(
            at.problem(
                f"'{s}' is not a group header",
                hint="write [group], [group:vars] or [group:children]",
            )
        )
        return "", "skip"
    section = m.group(1)
    groups.setdefault(section, Group(section, at.line))
    return section, m.group(2) or "hosts"


def _ini_group_var(s: str, section: str, group: Group, at: _At, problems: list[Problem]) -> None:
    """One `key=value` line of a `[group:vars]` section."""
    key, sep, value = s.partition("=")
    if not sep or not key.strip():
        problems.append(at.problem(f"'{s}' is not key=value", field=f"{section}:vars"))
        return
    group.vars[key.strip()] = value.strip().strip("'\"")


def _ini_hosts(s: str, group: Group, budget: int, at: _At, problems: list[Problem]) -> int:
    """One host line (`name key=value ...`, the name maybe a range) added to its group; returns
    how many hosts it added. More than `budget` hosts is fatal at once."""
    name, *pairs = s.split()
    hvars: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            problems.append(at.problem(f"'{pair}' is not key=value", field=name))
            continue
        hvars[key] = value.strip("'\"")
    try:
        names = _expand_range(name, budget)
    except ValueError as exc:
        problems.append(at.problem(str(exc), field=name))
        return 0
    except _TooMany:
        # the whole inventory is bounded, not only each range: forty ranges of 99,999
        # hosts in 400 bytes built millions of hosts before any node limit was checked
        raise _too_many(at.file, at.line) from None
    for n in names:
        group.hosts.append(Host(n, hvars.get("ansible_host"), at.line, dict(hvars)))
    return len(names)


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
    reader = _YamlGroups(doc, fname)
    for name, body in doc.items():
        if name == "_meta":
            continue  # the --list shape's host variables: applied below
        reader.read_group(name, body, [name])
    _apply_meta(doc.get("_meta"), reader)
    if reader.problems:
        raise InputError(reader.problems)
    return Inventory(fname, reader.groups)


def _apply_meta(meta: Any, reader: _YamlGroups) -> None:
    """`_meta.hostvars` of `ansible-inventory --list`'s shape: each host's variables, as if
    given where the host is listed."""
    if meta is None:
        return
    hostvars = meta.get("hostvars") if isinstance(meta, dict) else None
    if not isinstance(hostvars, dict):
        reader.problems.append(
            reader.problem_at(["_meta"], "_meta must be a mapping with hostvars: {HOST: {...}}")
        )
        return
    for group in reader.groups.values():
        for h in group.hosts:
            hv = hostvars.get(h.name)
            if isinstance(hv, dict):
                h.vars = {**hv, **h.vars}
                if h.address is None and hv.get("ansible_host") is not None:
                    h.address = str(hv["ansible_host"])


class _YamlGroups:
    """The groups of a YAML inventory, read depth first (children where they are named), with
    every problem at its line."""

    def __init__(self, doc: Any, fname: str) -> None:
        self.doc = doc
        self.fname = fname
        self.groups: dict[str, Group] = {}
        self.problems: list[Problem] = []
        self.count = 0  # hosts read, every group together (children repeat them: each counts)

    def _at(self, trail: list[Any]) -> _At:
        return _At(self.fname, line_of(self.doc, trail))

    def problem_at(self, trail: list[Any], message: str) -> Problem:
        """A problem at the line `trail` leads to."""
        return self._at(trail).problem(message)

    def read_group(self, name: Any, body: Any, trail: list[Any]) -> None:
        """Group `name` with its `body` (hosts:, vars:, children:) at `trail`, then its children."""
        at = self._at(trail)
        if not isinstance(name, str) or not _GROUP_NAME.fullmatch(name):
            self.problems.append(at.problem(f"'{name}' is not a group name"))
            return
        group = self.groups.setdefault(name, Group(name, at.line))
        if body is None:
            return
        if not isinstance(body, dict):
            self.problems.append(
                at.problem("a group must be a mapping (hosts:, vars:, children:)", field=name)
            )
            return
        self._unknown_keys(name, body, trail)
        self._read_hosts(group, body.get("hosts") or {}, trail + ["hosts"])
        self._read_vars(group, body.get("vars") or {}, trail + ["vars"])
        self._read_children(group, body.get("children") or {}, trail + ["children"])

    def _unknown_keys(self, name: str, body: dict[Any, Any], trail: list[Any]) -> None:
        for key in body:
            if key not in ("hosts", "vars", "children"):
                self.problems.append(
                    self._at(trail + [key]).problem(
                        f"unknown key '{key}' in group {name}",
                        field=name,
                        hint="a group has hosts:, vars: and children:",
                    )
                )

    def _read_hosts(self, group: Group, hosts: Any, trail: list[Any]) -> None:
        if isinstance(hosts, list):  # older tripleo-ansible-inventory: hosts as a list of names
            hosts = _names_as_keys(hosts)
        if not isinstance(hosts, dict):
            self.problems.append(
                self._at(trail).problem(
                    "hosts: must be a mapping of host names", field=f"{group.name}.hosts"
                )
            )
            return
        for host, hvars in hosts.items():
            hline = line_of(self.doc, trail + [host])
            self.count += 1
            if self.count > limits.MAX_NODES:
                raise _too_many(self.fname, hline)
            if hvars is not None and not isinstance(hvars, dict):
                self.problems.append(
                    Problem(f"vars of host '{host}' must be a mapping", file=self.fname, line=hline)
                )
                continue
            address = (hvars or {}).get("ansible_host")
            group.hosts.append(
                Host(str(host), None if address is None else str(address), hline, dict(hvars or {}))
            )

    def _read_vars(self, group: Group, gvars: Any, trail: list[Any]) -> None:
        if isinstance(gvars, dict):
            group.vars.update(gvars)
        else:
            self.problems.append(self._at(trail).problem("vars: must be a mapping"))

    def _read_children(self, group: Group, children: Any, trail: list[Any]) -> None:
        if isinstance(children, list):
            children = _names_as_keys(children)
        if not isinstance(children, dict):
            self.problems.append(self._at(trail).problem("children: must be a mapping of groups"))
            return
        for child, cbody in children.items():
            group.children.append(str(child))
            self.read_group(child, cbody, trail + [child])


def _names_as_keys(names: list[Any]) -> dict[Any, None] | None:
    """A list of names as the mapping it stands for; None (not a mapping: the caller says so)
    when an item is not a name (a mapping or a list in a list of hosts or groups)."""
    if not all(isinstance(n, (str, int)) for n in names):
        return None
    return dict.fromkeys(names)


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


def _depths(inv: Inventory) -> dict[str, int]:
    """Each group's depth as Ansible orders group variables: `all` 0, a group no other group
    names as a child 1, else one more than its deepest parent (a cycle is cut where met)."""
    parents: dict[str, list[str]] = {name: [] for name in inv.groups}
    for name, group in inv.groups.items():
        for child in group.children:
            parents.setdefault(child, []).append(name)
    depth: dict[str, int] = {"all": 0}

    def of(name: str, seen: frozenset[str]) -> int:
        if name not in depth:
            ups = [p for p in parents.get(name, []) if p not in seen and p != "all"]
            depth[name] = 1 + max((of(p, seen | {name}) for p in ups), default=0)
        return depth[name]

    for name in parents:
        of(name, frozenset())
    return depth


def group_members(
    inv: Inventory, name: str, effective: dict[str, Host] | None = None
) -> list[Host]:
    """The hosts of group `name` as Ansible sees them: its own and its children's, children of
    children included (a multi-stack inventory's `Compute: children: [cell1_Compute]`), each
    once, in the order met, with their effective variables (`effective`: `effective_hosts`'s
    answer, computed when not given)."""
    effective = effective if effective is not None else effective_hosts(inv)
    out: dict[str, Host] = {}
    stack, seen = [name], set()
    while stack:
        g = inv.groups.get(stack.pop(0))
        if g is None or g.name in seen:
            continue
        seen.add(g.name)
        for h in g.hosts:
            out.setdefault(h.name, effective[h.name])
        stack.extend(g.children)
    return list(out.values())


def effective_hosts(inv: Inventory) -> dict[str, Host]:
    """Every host with its variables as Ansible merges them: `all`'s vars, then each group's
    that holds it (directly or through a child) from the shallowest to the deepest (by name
    among equals), then its own host variables; its address is the `ansible_host` that wins."""
    depth = _depths(inv)
    member_of: dict[str, set[str]] = {}
    first: dict[str, Host] = {}
    own: dict[str, dict[str, Any]] = {}

    def walk(group: str, via: tuple[str, ...]) -> None:
        g = inv.groups.get(group)
        if g is None or group in via:
            return
        chain = (*via, group)
        for h in g.hosts:
            first.setdefault(h.name, h)
            own.setdefault(h.name, {}).update(h.vars)
            member_of.setdefault(h.name, set()).update(chain)
        for child in g.children:
            walk(child, chain)

    children = {c for g in inv.groups.values() for c in g.children}
    # from the roots only: a group's subtree is walked once per path to it, not once per group
    for name in [n for n in inv.groups if n not in children] or list(inv.groups):
        walk(name, ())
    out: dict[str, Host] = {}
    for host, h in first.items():
        merged: dict[str, Any] = {}
        for g in sorted(member_of[host] | {"all"}, key=lambda n: (depth.get(n, 1), n)):
            if g in inv.groups:
                merged.update(inv.groups[g].vars)
        merged.update(own[host])
        address = merged.get("ansible_host")
        out[host] = Host(host, None if address is None else str(address), h.line, merged)
    return out


__all__ = [
    "Host",
    "Group",
    "Inventory",
    "effective_hosts",
    "group_members",
    "load_inventory",
    "hosts_by_group",
]
