"""The import graph of stepwise/ (issue #35): no circles, and no layer importing upward.

Every import counts wherever it is written: at module level, inside a function (a function-level
import moves a circle to run time, it does not remove it) and under `if TYPE_CHECKING:` (the
checker sees the circle even when Python does not). Imports are read with `ast`, nothing is
imported.

How a package's `__init__.py` counts: importing `stepwise.model.catalog` runs
`stepwise/model/__init__.py` first, but that implicit run is *not* an edge here. Python finishes
or pauses the package's `__init__` before the submodule's body runs, so the submodule never reads
the package's namespace unless it names it. What is an edge is naming the package: `import
stepwise.model` or `from stepwise.model import X` where `X` is a name the `__init__` re-exports
(not a submodule) is an edge to the package `stepwise.model`, and if that `__init__` imports the
submodule (directly or through others), the two form a circle. So a submodule imports the module
that defines a name, never its package's re-export; `from stepwise.model import catalog`
(a submodule) is an edge to `stepwise.model.catalog` only.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "stepwise"

#: Each layer and what it may not import: data flows model -> plan -> verify -> run -> observe,
#: the lab plugs in beside run from below and the CLI sits on top (docs/architecture.md).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "model": ("plan", "verify", "run", "observe", "cli", "lab"),
    "plan": ("verify", "run", "observe", "cli", "lab"),
    "verify": ("run", "observe", "cli", "lab"),
    "run": ("observe", "cli", "lab"),
    "lab": ("cli",),
}
LAYERS = ("model", "plan", "verify", "run", "observe", "lab", "cli")


def module_name(path: Path) -> str:
    """`stepwise/model/catalog.py` -> `stepwise.model.catalog`; a package's `__init__.py` is
    the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of stepwise/ by its full name."""
    return {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _base(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names, relative levels resolved."""
    if not node.level:
        return node.module or ""
    # a package's own name is its base for `from . import`; a module's is its package
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imported(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """The stepwise modules `name` imports anywhere in its file, with the line of each."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _base(name, path, node)
            for alias in node.names:
                # `from package import submodule` imports the submodule; any other name is
                # read from the package's namespace (its `__init__`)
                sub = f"{base}.{alias.name}"
                if sub in known:
                    yield sub, node.lineno
                elif base in known:
                    yield base, node.lineno


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {stepwise module it imports -> first line}, self-imports left out."""
    found = modules()
    known = set(found)
    graph: dict[str, dict[str, int]] = {}
    for name, path in found.items():
        edges: dict[str, int] = {}
        for target, line in imported(name, path, known):
            if target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The components of more than one module, less the lab's own while it is allowed."""
    out = []
    for component in strongly_connected(graph):
        if len(component) < 2:
            continue
        out.append(component)
    return out


def _describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    """A circle's modules and the imports inside it, file and line, to start untying from."""
    members = set(component)
    lines = [f"  circle of {len(component)}: {', '.join(component)}"]
    for module in component:
        for target, line in sorted(graph[module].items()):
            if target in members:
                lines.append(f"    {module}:{line} imports {target}")
    return "\n".join(lines)


def test_no_module_is_part_of_an_import_circle():
    graph = import_graph()
    found = circles(graph)
    assert not found, (
        "import circles (import the defining module, or move the shared value to a leaf module "
        "both import):\n" + "\n".join(_describe(c, graph) for c in found)
    )


def _layer(module: str) -> str:
    """`stepwise.plan.units` -> `plan`; a shared module of the top (`stepwise.errors`,
    `stepwise.paths`, the package itself) is its own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_layer_imports_a_layer_above_it():
    """The layers' order, and the shared top-level modules (errors, paths, processes,
    secrets) below every layer: all of them may import those, they import no layer."""
    offenders = []
    for module, edges in import_graph().items():
        layer = _layer(module)
        forbidden = FORBIDDEN.get(layer, ()) if layer in LAYERS else LAYERS
        for target, line in sorted(edges.items()):
            if _layer(target) in forbidden:
                offenders.append(f"{module}:{line} imports {target}")
    assert not offenders, "imports against the layers:\n" + "\n".join(offenders)


def test_the_graph_reads_every_kind_of_import(tmp_path: Path):
    """The reader itself: absolute, relative, submodule, function-level and type-checking
    imports are edges; a name re-exported by a package is an edge to the package, a submodule
    imported from its package an edge to the submodule only."""
    graph = import_graph()
    assert set(graph) == set(modules())
    assert "stepwise.model.catalog" in graph["stepwise.model"]
    known = {"p", "p.a", "p.b", "p.c", "p.d", "p.e", "p.q", "p.q.x"}
    source = tmp_path / "x.py"
    source.write_text(
        "import p.a\n"
        "from typing import TYPE_CHECKING\n"
        "from .. import b\n"
        "from . import NAME\n"
        "if TYPE_CHECKING:\n"
        "    from p.c import C\n"
        "def f():\n"
        "    from p import d, NAME2\n"
        "    import p.e as e\n"
    )
    edges = {t for t, _ in imported("p.q.x", source, known)}
    # `from . import NAME` is the package p.q, `from p import NAME2` the package p
    assert edges == {"p.a", "p.b", "p.q", "p.c", "p.d", "p", "p.e"}
    init = tmp_path / "__init__.py"
    init.write_text("from . import a\nfrom .b import B\nfrom .q import NAME\n")
    assert {t for t, _ in imported("p", init, known)} == {"p.a", "p.b", "p.q"}
    components = strongly_connected({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}})
    assert sorted(components) == [["a", "b", "c"], ["d"]]
