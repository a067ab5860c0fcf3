"""The vocabulary is typed to the end: outside `stepwise/model` no string literal of a step,
stage, workflow, section or state is compared with or stored as a vocabulary value; code uses
the enum members of `stepwise.model.vocab`.

An AST walk over `stepwise/` flags a string constant equal to a vocabulary value where it is
used as one: in a comparison (`==`, `in (...)`), as a default argument or a `.get` default,
as a `state=` / `status=` / `step=` ... keyword or attribute, as an argument of a store call,
or as an argument whose parameter is annotated with a vocabulary type. Text meant for humans
that happens to hold such a word (messages, help, JSON field names) is none of these.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path

import pytest

from stepwise.model import vocab

ROOT = Path(vocab.__file__).resolve().parent.parent

#: every vocabulary type and the words it has
TYPES: dict[str, type[StrEnum]] = {
    name: obj
    for name, obj in vars(vocab).items()
    if isinstance(obj, type) and issubclass(obj, StrEnum) and obj.__module__ == vocab.__name__
}
#: names of the unions of vocabulary types (`TaskKey`, `CatalogKey`)
ALIASES = {"TaskKey", "CatalogKey"}
WORDS: frozenset[str] = frozenset(m.value for t in TYPES.values() for m in t if m.value)

#: keyword arguments and attributes that hold a vocabulary value
HOLDERS = frozenset(
    {"status", "state", "step", "stage", "workflow", "section", "phase", "scope", "plane"}
)

#: mappings keyed by vocabulary members: a literal key looked up in one is a vocabulary value
KEYED = frozenset(
    {"system_upgrade", "durations", "tasks", "steps", "STEPS", "DEFAULT_STEP_SECONDS"}
    | {"SEVERITY", "COLOURS"}
)

#: where a vocabulary word means something else (path under stepwise/, word): why
ALLOWED: dict[tuple[str, str], str] = {}
#: not checked: the model defines the vocabulary; the lab implements the node commands
#: (`systemctl start|stop`, `*-manage db contract`, a VM's `running`), whose words are theirs
SKIPPED_DIRS = ("model", "lab")


def _strings(node: ast.AST | None) -> Iterator[ast.Constant]:
    """String constants of `node`, looking into tuple, list and set literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for e in node.elts:
            yield from _strings(e)


def _is_vocabulary_type(annotation: ast.AST | None) -> bool:
    if annotation is None:
        return False
    names = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}
    names |= {
        n.value for n in ast.walk(annotation) if isinstance(n, ast.Constant)
    }  # quoted annotations
    return bool(names & (set(TYPES) | ALIASES))


class _Signatures:
    """Which parameters of stepwise's functions take a vocabulary type, by function name: a
    position or keyword counts only when every function of that name agrees."""

    def __init__(self, trees: list[ast.Module]):
        self.positional: dict[str, list[set[int]]] = {}
        self.keywords: dict[str, list[set[str]]] = {}
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    for f in node.body:
                        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            static = any(
                                isinstance(d, ast.Name) and d.id == "staticmethod"
                                for d in f.decorator_list
                            )
                            self._add(f, skip_first=not static)
                elif isinstance(node, ast.Module):
                    for f in node.body:
                        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            self._add(f, skip_first=False)
            for node in ast.walk(tree):  # nested functions (closures such as `secs`)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for f in node.body:
                        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            self._add(f, skip_first=False)

    def _add(self, f: ast.FunctionDef | ast.AsyncFunctionDef, skip_first: bool) -> None:
        params = [*f.args.posonlyargs, *f.args.args]
        if skip_first and params:
            params = params[1:]
        self.positional.setdefault(f.name, []).append(
            {i for i, p in enumerate(params) if _is_vocabulary_type(p.annotation)}
        )
        self.keywords.setdefault(f.name, []).append(
            {p.arg for p in [*params, *f.args.kwonlyargs] if _is_vocabulary_type(p.annotation)}
        )

    def typed_args(self, call: ast.Call) -> Iterator[ast.AST]:
        f = call.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        if name not in self.positional:
            return
        positions = set.intersection(*self.positional[name])
        keywords = set.intersection(*self.keywords[name])
        for i, a in enumerate(call.args):
            if i in positions:
                yield a
        for k in call.keywords:
            if k.arg in keywords:
                yield k.value


def _used_as_vocabulary(tree: ast.AST, sigs: _Signatures) -> Iterator[ast.Constant]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                yield from _strings(side)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for d in (*node.args.defaults, *node.args.kw_defaults):
                yield from _strings(d)
        elif isinstance(node, ast.keyword) and node.arg in HOLDERS:
            yield from _strings(node.value)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (
                    zip(target.elts, node.value.elts, strict=False)
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else [(target, node.value)]
                )
                for t, v in pairs:
                    if isinstance(t, ast.Attribute) and t.attr in HOLDERS:
                        yield from _strings(v)
        elif isinstance(node, ast.Call):
            yield from _call(node, sigs)
        elif isinstance(node, ast.Subscript) and _name(node.value) in KEYED:
            yield from _strings(node.slice)


def _name(node: ast.AST) -> str | None:
    """The last name of `x.y.name`, `name` or `x.name(...)`."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _call(node: ast.Call, sigs: _Signatures) -> Iterator[ast.Constant]:
    f = node.func
    args = [*node.args, *(k.value for k in node.keywords)]
    if isinstance(f, ast.Attribute) and "store" in ast.unparse(f.value).lower():
        # what is handed to the store is stored: states as members, never as literals
        for a in args:
            yield from _strings(a)
            for d in ast.walk(a):  # the rows handed over: dicts, in lists or not
                if isinstance(d, ast.Dict):
                    for x in (*d.keys, *d.values):
                        yield from _strings(x)
    if isinstance(f, ast.Attribute) and f.attr == "get":
        if len(node.args) == 2:
            yield from _strings(node.args[1])
        if node.args and _name(f.value) in KEYED:
            yield from _strings(node.args[0])
    for a in sigs.typed_args(node):
        yield from _strings(a)


def offenders(sources: dict[str, str], everything: list[ast.Module] | None = None) -> list[str]:
    """`path:line: 'word'` for each vocabulary literal used as a value in `sources`."""
    trees = {path: ast.parse(text, path) for path, text in sources.items()}
    sigs = _Signatures(everything if everything is not None else list(trees.values()))
    found = set()
    for path, tree in trees.items():
        for c in _used_as_vocabulary(tree, sigs):
            if c.value in WORDS and (path, c.value) not in ALLOWED:
                found.add((path, c.lineno, c.value))
    return [f"stepwise/{p}:{line}: {word!r}" for p, line, word in sorted(found)]


@functools.cache
def _stepwise_sources() -> tuple[dict[str, str], list[ast.Module]]:
    checked: dict[str, str] = {}
    every: list[ast.Module] = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        every.append(ast.parse(text, rel))
        if rel.split("/", 1)[0] not in SKIPPED_DIRS:
            checked[rel] = text
    return checked, every


def test_no_vocabulary_literal_outside_the_model():
    sources, every = _stepwise_sources()
    assert len(sources) > 50  # the walk sees the code
    bad = offenders(sources, every)
    assert not bad, (
        "string literals used as vocabulary values (use the members of "
        "stepwise.model.vocab):\n" + "\n".join(bad)
    )


def test_the_allowed_exceptions_are_still_needed():
    # an exception nobody needs any more would hide the next literal of that word
    sources, every = _stepwise_sources()
    sigs = _Signatures(every)
    used = {
        (path, c.value)
        for path, text in sources.items()
        for c in _used_as_vocabulary(ast.parse(text), sigs)
    }
    assert set(ALLOWED) <= used


SNIPPETS = {
    "compare": 'if result.status == "interrupted":\n    pass\n',
    "in tuple": 'ok = t.status in ("failed", "unreachable")\n',
    "default": 'def f(state="pending"):\n    return state\n',
    "get default": 'x = states.get(uid, "pending")\n',
    "keyword": 'r = RunResult(1, status="done")\n',
    "attribute": 'res.status = "failed"\n',
    "tuple attribute": 'row.status, row.pid = "running", 1\n',
    "store call": 'self.store.set_marker(cloud, key, run_id, uid, "done")\n',
    "store dict": 'store.create_run(units=[{"state": "pending"}])\n',
    "keyed mapping": 'x = catalog[s].system_upgrade.get("prepare")\n',
    "keyed subscript": 'x = svc.steps(Section.UPGRADE)["migrate"]\n',
    "typed parameter": "def has_step(section: Section, step: TaskKey) -> bool: ...\n"
    'has_step(wf, "pin")\n',
}


@pytest.mark.parametrize("case", sorted(SNIPPETS))
def test_a_literal_put_back_is_found(case: str):
    assert offenders({"run/x.py": SNIPPETS[case]}), case


def test_text_for_humans_is_not_flagged():
    text = (
        'console.print(f"{n} units done, {m} failed")\n'
        'doc = {"done": 3, "failed": []}\n'
        'raise InputError(Problem("the run failed", hint="run it again"))\n'
        'if sec.kind == "plan":\n    pass\n'
    )
    assert offenders({"cli/x.py": text}) == []


def test_the_catalog_loader_gives_the_vocabulary_members():
    """The YAML keeps its spelling; what the model hands on is typed (section, step, the
    `system_upgrade:` keys, the durations)."""
    from stepwise.model.catalog import load_catalog

    steps = set()
    for svc in load_catalog():
        for section, by_step in svc.tasks.items():
            assert type(section) is vocab.Section
            steps |= {type(k) for k in by_step}
        assert all(type(k) is vocab.SystemUpgradeKey for k in svc.system_upgrade)
        for k in svc.durations:
            (default,) = (d for d in vocab.DEFAULT_STEP_SECONDS if d == k)
            assert type(k) is type(default)
    assert steps == {vocab.Step, vocab.UpgradeKey}
    assert vocab.catalog_key("pin") is vocab.UpgradeKey.PIN
    assert vocab.catalog_key("backup") is vocab.Step.BACKUP
    assert vocab.catalog_key("prepare") is vocab.SystemUpgradeKey.PREPARE
    with pytest.raises(ValueError):
        vocab.catalog_key("pre")
