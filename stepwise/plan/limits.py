"""`--limit` as an Ansible user expects: hosts, groups (roles), globs, `all`, `!` and `&`."""

from __future__ import annotations

import difflib
import fnmatch
import re

from stepwise.errors import InputError, Problem
from stepwise.model.deployment import Deployment


def resolve_limit(deployment: Deployment, limit: str | None) -> list[str] | None:
    """Node names selected by an Ansible-style limit, in deployment order (None: no limit).

    Patterns are separated by ',' or ':'; a pattern is a node name, a role name, `all`/`*`,
    a glob, or `~regex`; `!pattern` removes, `&pattern` intersects. A pattern that matches
    nothing is an error (a typo must not silently shrink or empty the run).
    """
    if limit is None:
        return None
    text = limit.strip()
    if not text:
        raise InputError(
            Problem(
                "--limit is empty",
                field="--limit",
                hint="give node or role names, e.g. --limit controller-0,Compute",
            )
        )
    parts = [p.strip() for p in re.split(r"[,:]", text) if p.strip()]
    include: set[str] = set()
    excludes: list[set[str]] = []
    intersects: list[set[str]] = []
    problems: list[Problem] = []
    for part in parts:
        op = ""
        if part[0] in "!&":
            op, part = part[0], part[1:].strip()
        matched = _match(deployment, part)
        if not matched:
            problems.append(_matches_nothing(deployment, part))
            continue
        if op == "!":
            excludes.append(matched)
        elif op == "&":
            intersects.append(matched)
        else:
            include |= matched
    if problems:
        raise InputError(problems)
    selected = include if include or not (excludes or intersects) else set(deployment.node_by_name)
    for s in intersects:
        selected &= s
    for s in excludes:
        selected -= s
    if not selected:
        raise InputError(Problem(f"--limit '{limit}' leaves no node to work on", field="--limit"))
    return [n.name for n in deployment.nodes if n.name in selected]


def _matches_nothing(deployment: Deployment, pattern: str) -> Problem:
    """A pattern that names no node or role: most likely a typo, so suggest close names."""
    names = list(deployment.node_by_name) + list(deployment.role_by_name)
    close = difflib.get_close_matches(pattern, names, n=3)
    hint = (
        f"did you mean {', '.join(close)}?"
        if close
        else f"roles are: {', '.join(deployment.role_by_name)}"
    )
    return Problem(
        f"limit pattern '{pattern}' matches no node or role of {deployment.name}",
        field="--limit",
        hint=hint,
    )


def _match(deployment: Deployment, pattern: str) -> set[str]:
    if pattern in ("all", "*"):
        return set(deployment.node_by_name)
    if pattern in deployment.role_by_name:
        return {n.name for n in deployment.role_by_name[pattern].nodes}
    if pattern in deployment.node_by_name:
        return {pattern}
    if pattern.startswith("~"):
        try:
            rx = re.compile(pattern[1:])
        except re.error as exc:
            raise InputError(
                Problem(f"bad regular expression in --limit: {exc}", field="--limit")
            ) from None
        return {n for n in deployment.node_by_name if rx.search(n)} | {
            n.name for r in deployment.roles if rx.search(r.name) for n in r.nodes
        }
    if any(c in pattern for c in "*?["):
        nodes = {n for n in deployment.node_by_name if fnmatch.fnmatchcase(n, pattern)}
        for r in deployment.roles:
            if fnmatch.fnmatchcase(r.name, pattern):
                nodes |= {n.name for n in r.nodes}
        return nodes
    return set()
