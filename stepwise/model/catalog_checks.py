"""Whole-catalog checks (references to unknown services, dependency cycles, what an RPC
follower follows) and the "did you mean" of a mistyped name.

The catalog runs these checks when it loads, so they never import it back: they take the
catalog as an argument and say what they read of it (`CatalogEntries`, `CatalogEntry`), which
`catalog.Catalog` and `catalog.Service` are."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from stepwise.errors import Problem
from stepwise.model.choices import RpcMixing
from stepwise.model.yamlsrc import line_of

if TYPE_CHECKING:
    from stepwise.model.specs import ServiceSpec


class CatalogEntry(Protocol):
    """What the checks read of one service (`catalog.Service`)."""

    @property
    def name(self) -> str: ...
    @property
    def plane(self) -> str: ...
    @property
    def has_runtime(self) -> bool: ...
    @property
    def depends_on(self) -> tuple[str, ...]: ...
    @property
    def rpc(self) -> str | None: ...
    @property
    def rpc_mixing(self) -> RpcMixing: ...
    @property
    def source(self) -> str: ...
    @property
    def line(self) -> int | None: ...
    @property
    def lines(self) -> Mapping[str, int]: ...


class CatalogEntries(Protocol):
    """What the checks read of the catalog (`catalog.Catalog`): its services by name."""

    @property
    def services(self) -> Mapping[str, CatalogEntry]: ...
    def __contains__(self, name: object) -> bool: ...
    def __getitem__(self, name: str) -> CatalogEntry: ...
    def __iter__(self) -> Iterator[CatalogEntry]: ...


def check_catalog(catalog: CatalogEntries) -> list[Problem]:
    """Whole-catalog checks: references to unknown services, dependency cycles, and that an
    RPC follower depends on a peer of its group that negotiates."""
    problems = [
        p
        for svc in catalog
        for i, dep in enumerate(svc.depends_on)
        if (p := _dependency_problem(catalog, svc, i, dep)) is not None
    ]
    if problems:
        return problems
    problems = [p for svc in catalog if (p := _follower_problem(catalog, svc)) is not None]
    cycle = find_cycle({s.name: s.depends_on for s in catalog})
    if cycle:
        problems.append(_cycle_problem(catalog, cycle))
    return problems


def duplicate_preflights(spec: ServiceSpec, doc: Any, fname: str) -> list[Problem]:
    """A service's preflight checks with a name an earlier check has, each with both lines:
    `stepwise preflight` reports and records its checks by name, so the second would hide
    the first's verdict."""
    first: dict[str, int] = {}
    problems: list[Problem] = []
    for j, check in enumerate(spec.preflight):
        if check.name not in first:
            first[check.name] = j
            continue
        at = line_of(doc, ["preflight", first[check.name], "name"])
        problems.append(
            Problem(
                f"preflight check '{check.name}' is defined twice (also preflight"
                f"[{first[check.name]}]{f', line {at}' if at else ''})",
                file=fname,
                line=line_of(doc, ["preflight", j, "name"]),
                field=f"preflight[{j}].name",
                hint="give each check its own name: preflight reports and records by name",
            )
        )
    return problems


def _follower_problem(catalog: CatalogEntries, svc: CatalogEntry) -> Problem | None:
    """An `rpc_mixing: follows` service speaks its own RPC version: it is safe only upgraded
    after the peers that negotiate (neutron's agents after every neutron-server), which its
    depends_on makes the planner do."""
    if svc.rpc_mixing is not RpcMixing.FOLLOWS:
        return None
    if any(
        catalog[d].rpc == svc.rpc and catalog[d].rpc_mixing is RpcMixing.NEGOTIATED
        for d in svc.depends_on
    ):
        return None
    return Problem(
        f"'rpc_mixing: follows' speaks its own RPC version, yet '{svc.name}' depends on no "
        f"service of RPC group '{svc.rpc}' that negotiates",
        file=svc.source,
        line=svc.lines.get("rpc_mixing", svc.line),
        field="rpc_mixing",
        hint=f"add the group's negotiating server to depends_on (neutron's agents: "
        f"neutron_server), or say how '{svc.name}' keeps talking to old peers",
    )


def _dependency_problem(
    catalog: CatalogEntries, svc: CatalogEntry, i: int, dep: str
) -> Problem | None:
    """What is wrong with the service's i-th depends_on entry, if anything."""
    where = f"depends_on[{i}]"
    line = svc.lines.get(where, svc.lines.get("depends_on", svc.line))
    if dep not in catalog:
        return Problem(
            f"depends_on names unknown service '{dep}'",
            file=svc.source,
            line=line,
            field=where,
            hint=_did_you_mean(dep, catalog.services),
        )
    if dep == svc.name:
        return Problem(
            "a service cannot depend on itself",
            file=svc.source,
            line=line,
            field=where,
            hint=f"remove '{dep}' from depends_on",
        )
    if not catalog[dep].has_runtime:
        return Problem(
            f"depends_on names '{dep}', which has 'runtime: none' (nothing to wait for)",
            file=svc.source,
            line=line,
            field=where,
            hint=f"remove '{dep}' from depends_on",
        )
    if catalog[dep].plane == "data" and svc.plane != "data":
        return Problem(
            f"{svc.plane}-plane service '{svc.name}' depends_on data-plane service "
            f"'{dep}', but the control plane is upgraded first",
            file=svc.source,
            line=line,
            field=where,
            hint=f"remove '{dep}' from depends_on, or make '{svc.name}' a data-plane service",
        )
    return None


def _cycle_problem(catalog: CatalogEntries, cycle: list[str]) -> Problem:
    first = catalog[cycle[0]]
    i = first.depends_on.index(cycle[1])
    where = f"depends_on[{i}]"
    return Problem(
        "dependency cycle: " + " -> ".join(cycle),
        file=first.source,
        line=first.lines.get(where, first.lines.get("depends_on", first.line)),
        field=where,
        hint="remove one of these depends_on entries; upgrade order must be a chain, not a loop",
    )


def find_cycle(graph: Mapping[str, tuple[str, ...] | list[str]]) -> list[str] | None:
    """Return one cycle as [a, b, ..., a] if the dependency graph has one (deterministic)."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = {n: WHITE for n in graph}
    for root in sorted(graph):
        if color[root] != WHITE:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[str] = [root]
        color[root] = GREY
        while stack:
            node, i = stack[-1]
            deps = sorted(graph.get(node, ()))
            if i < len(deps):
                stack[-1] = (node, i + 1)
                nxt = deps[i]
                if nxt not in color:
                    continue
                if color[nxt] == GREY:
                    return path[path.index(nxt) :] + [nxt]
                if color[nxt] == WHITE:
                    color[nxt] = GREY
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                color[node] = BLACK
                stack.pop()
                path.pop()
    return None


def _did_you_mean(name: str, known: Mapping[str, Any] | list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(known), n=3)
    if close:
        return f"did you mean {', '.join(close)}?"
    return "add a service file for it to the catalog, or fix the name"
