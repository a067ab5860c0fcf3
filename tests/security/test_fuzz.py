"""Mutation fuzzing of the examples through the real CLI (issue #10's "done when").

Hypothesis mutates the examples' deployment, a catalog file, the facts and the command-line
arguments (structure, types, sizes, unicode, rich markup, Jinja, shell metacharacters, YAML
anchors) and runs `stepwise` in-process through its real entry point (`stepwise.cli.main.run`,
the same guard as the installed command). Every run must end with exit 0, 2 or 3, print no
traceback and no "internal error", stay in bounded memory, never create the canary a payload
asks for, and write nothing (an export writes only its own new directory). How long the
inflated forms take is measured by benchmarks/hostile_inputs.py, not asserted here.
"""

from __future__ import annotations

import contextlib
import copy
import os
import resource
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.helpers import EXAMPLES, cli, no_traceback

CATALOG = EXAMPLES / "catalog"
DEPLOYMENT = yaml.safe_load((EXAMPLES / "classic.yaml").read_text())
FACTS = yaml.safe_load((EXAMPLES / "facts" / "minor-update.yaml").read_text())
SERVICE = yaml.safe_load((CATALOG / "nova_compute.yaml").read_text())
CANARY = "CANARY_FILE"
FUZZ = settings(
    max_examples=int(os.environ.get("STEPWISE_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize="CI" in os.environ,
)

SPECIAL: list[Any] = [
    "[/]",
    "[bold red]x[/]",
    "x[/]y",
    "pip install stepwise[postgres]",
    "{{ lookup('pipe', 'touch CANARY_FILE') }}",
    "{% for x in range(99999999) %}{% endfor %}",
    "{{ 7*7 }}",
    "; touch CANARY_FILE",
    "$(touch CANARY_FILE)",
    "`touch CANARY_FILE`",
    "a|b&c>d",
    "ctl-0,cmp-0",
    "all",
    "*",
    "../../../etc/passwd",
    "\x00",
    "\x1b[31mred",
    "é中文🙂",
    "\u202eevil",
    "a" * 70_000,
    "",
    " ",
    "-",
    "-1",
    "c{index}{index:,}",
    "{index}",
    "{0}",
    "%s%n",
    "\\",
    "'",
    '"',
    "\n- x\n",
    ".inf",
    ".nan",
    "1e309",
    "null",
    0,
    -1,
    1,
    2**63,
    10**30,
    1e308,
    float("inf"),
    float("nan"),
    True,
    None,
    [],
    {},
    [[[[[]]]]],
    {"a": {"b": {}}},
]
# a copy of each special value: a mutation that walks into a drawn `[]` or `{}` must not change
# SPECIAL itself, or later examples draw from another list (hypothesis: FlakyStrategyDefinition)
payloads = st.one_of(
    st.sampled_from(SPECIAL).map(copy.deepcopy),
    st.text(max_size=40),
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.sampled_from(SPECIAL[:30]), max_size=3),
    st.dictionaries(st.sampled_from(SPECIAL[:30]), st.sampled_from(SPECIAL[:30]), max_size=2),
)


@st.composite
def mutated(draw: Any, doc: Any, max_ops: int = 3) -> Any:
    """`doc` with 1..max_ops mutations: a value replaced, a key dropped, renamed or added, a
    container wrapped or emptied; each at a random place reached by walking the tree."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, max_ops))):
        parent, key = None, None
        node = doc
        while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)):
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            key = draw(st.sampled_from(keys))
            parent, node = node, node[key]
        op = draw(st.sampled_from(["replace", "drop", "rename", "add", "wrap"]))
        if parent is None:
            if isinstance(doc, dict) and op in ("add", "rename"):
                doc[draw(st.sampled_from(SPECIAL[:30] + ["roles", "name", "catalog"]))] = draw(
                    payloads
                )
            continue
        if op == "replace":
            parent[key] = draw(payloads)
        elif op == "drop":
            del parent[key]
        elif op == "rename" and isinstance(parent, dict):
            parent[str(draw(st.sampled_from(SPECIAL[:30])))] = parent.pop(key)
        elif op == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(SPECIAL[:30] + list(parent)))] = draw(payloads)
        elif op == "add" and isinstance(parent, list):
            parent.append(draw(payloads))
        else:
            parent[key] = [node] if draw(st.booleans()) else {"x": node}
    return doc


@st.composite
def yaml_text(draw: Any, doc: Any) -> str:
    """The mutated document as YAML, sometimes damaged or inflated at the text level."""
    try:
        text = yaml.safe_dump(draw(mutated(doc)), allow_unicode=True, sort_keys=False)
    except (yaml.YAMLError, ValueError):
        text = "{}"
    how = draw(st.sampled_from(["as is"] * 6 + ["truncate", "insert", "bomb", "deep", "anchor"]))
    if how == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif how == "insert":
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at]
            + draw(
                st.sampled_from(
                    [
                        "\t",
                        ": :",
                        "- [",
                        "&a",
                        "*a",
                        "!!python/object:os.system",
                        "%",
                        "\x00",
                        "{{",
                        "? [x]\n: y\n",
                        "'",
                    ]
                )
            )
            + text[at:]
        )
    elif how == "bomb":
        text = (
            "a: &a [x,x,x,x,x,x,x,x,x]\n"
            + "".join(
                f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            )
            + text
        )
    elif how == "deep":
        text = "x: " + "[" * draw(st.integers(60, 20_000)) + "\n" + text
    elif how == "anchor":
        text = "shared: &s {count: 99999999999, name: 'c{index}'}\n" + text
    return text


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _check(
    args: list[str], root: Path, allowed: Path | None = None, also: Path | None = None
) -> None:
    before = _tree(root)
    r = cli(*args)
    assert r.code in (0, 2, 3), (args, r.code, r.text[-3000:])
    assert no_traceback(r.text), (args, r.text[-3000:])
    assert not list(root.rglob(CANARY)) and not Path(CANARY).exists(), args
    added = {
        p
        for p in _tree(root) - before
        if (allowed is None or not (root / p).is_relative_to(allowed))
        and (also is None or root / p != also)
    }
    assert not added, (args, sorted(added)[:5])
    # memory: the whole test process stays bounded (a bomb would take gigabytes)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 3 * 1024 * 1024, (
        "peak RSS over 3 GiB"
    )


def _cloud(
    root: Path, deployment: str | None = None, service: str | None = None, facts: str | None = None
) -> Path:
    cat = root / "cat"
    shutil.copytree(CATALOG, cat)
    if service is not None:
        (cat / "nova_compute.yaml").write_text(service)
    dep = root / "d.yaml"
    dep.write_text(
        deployment
        if deployment is not None
        else yaml.safe_dump({**DEPLOYMENT, "catalog": "cat"}, sort_keys=False)
    )
    if facts is not None:
        (root / "facts.yaml").write_text(facts)
    return dep


COMMANDS = [
    ["validate"],
    ["plan", "update"],
    ["plan", "upgrade"],
    ["plan", "system-upgrade", "--limit", "compute-0"],
    ["plan", "undercloud-upgrade"],
    ["status"],
    ["history"],
]


@FUZZ
@given(text=yaml_text({**DEPLOYMENT, "catalog": "cat"}), command=st.sampled_from(COMMANDS))
def test_fuzz_deployment(text: str, command: list[str]):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        dep = _cloud(root, deployment=text)
        _check(command + ["-d", str(dep)], root)


@FUZZ
@given(
    service=yaml_text(SERVICE),
    facts=yaml_text(FACTS),
    command=st.sampled_from(COMMANDS[:4]),
    with_facts=st.booleans(),
)
def test_fuzz_catalog_and_facts(service: str, facts: str, command: list[str], with_facts: bool):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        dep = _cloud(root, service=service, facts=facts)
        extra = ["--facts", str(root / "facts.yaml")] if with_facts and command[0] == "plan" else []
        _check(command + ["-d", str(dep)] + extra, root)


option_values = st.one_of(
    st.sampled_from(SPECIAL[:40]).map(str),
    st.text(max_size=30),
    st.sampled_from(
        [
            "compute-0",
            "Compute",
            "controller-*",
            "!ceph-0",
            "packages",
            "run",
            "control",
            "data",
            "prepare",
            "1",
            "sqlite:///s.sqlite",
        ]
    ),
)
OPTIONS = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(
                [
                    "--limit",
                    "--tags",
                    "--skip-tags",
                    "--stage",
                    "--plane",
                    "--store",
                    "--facts",
                    "--run",
                    "--forks",
                    "--rerun",
                ]
            ),
            option_values,
        ),
        st.tuples(
            st.just("-e"),
            st.one_of(
                option_values,
                option_values.map(lambda v: f"k={v}"),
                option_values.map(lambda v: f"target_release={v}"),
                st.sampled_from(
                    [
                        '{"a": Infinity}',
                        '{"a": [',
                        "@",
                        "@/dev/zero",
                        "@/",
                        "db_password=S3cret",
                        '{"x": {"token": 1}}',
                    ]
                ),
            ),
        ),
        st.tuples(st.just("--secret"), option_values.map(lambda v: f"k={v}")),
        st.tuples(
            st.sampled_from(["--json", "--verbose", "--yes", "--fresh", "--force"]), st.none()
        ),
    ),
    max_size=3,
)
#: the options each command takes (others would only exercise click's "no such option")
TAKES = {
    "plan": {
        "--limit",
        "--tags",
        "--skip-tags",
        "--stage",
        "--plane",
        "--store",
        "--facts",
        "-e",
        "--json",
        "--verbose",
    },
    "export": {
        "--limit",
        "--tags",
        "--skip-tags",
        "--stage",
        "--plane",
        "--store",
        "--facts",
        "--force",
    },
    "status": {"--store", "--json"},
    "history": {"--store", "--json", "--run"},
    "validate": {"--json"},
    "discover": {"--limit", "--store", "-e", "--json"},
    "forget": {"--store", "--yes"},
}
RUN_COMMANDS = [
    "validate",
    "plan update",
    "plan upgrade",
    "plan system-upgrade",
    "plan undercloud-upgrade",
    "plan [/]",
    "status",
    "history",
    "export update",
    "export upgrade",
    "update run",
    "upgrade prepare",
    "upgrade run",
    "external-upgrade run",
    "management-upgrade run",
    "discover",
    "forget [/]",
]


@FUZZ
@given(command=st.sampled_from(RUN_COMMANDS), options=OPTIONS)
def test_fuzz_cli_arguments(command: str, options: list[tuple[str, str | None]]):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        dep = _cloud(root)
        args = command.split() + ["-d", str(dep)]
        takes = TAKES.get(command.split()[0])
        for opt, value in options:
            if takes is None or opt in takes:
                args += [opt] if value is None else [opt, value]
        out = root / "export-out"
        if command.startswith("export"):
            args += ["-o", str(out)]
        if command.split()[0] in (
            "update",
            "upgrade",
            "external-upgrade",
            "management-upgrade",
            "discover",
        ):
            # nothing may run: a lab that is not there is refused after every other check
            args += ["--lab", str(root / "no-lab")]
        _check(args, root, allowed=out)


# ------------------------------------------------------------------ issue #19: stores, names, paths
STORE_COLUMNS = (
    [
        ("runs", c)
        for c in (
            "plan",
            "params",
            "facts",
            "started_at",
            "ended_at",
            "status",
            "attempts",
            "command",
            "workflow",
        )
    ]
    + [
        ("units", c)
        for c in (
            "step",
            "state",
            "nodes",
            "services",
            "started_at",
            "ended_at",
            "attempts",
            "batch",
            "message",
        )
    ]
    + [("probe_samples", c) for c in ("t", "requests", "failed", "max_ms", "target")]
    + [("task_results", c) for c in ("status", "at", "host", "message")]
    + [("node_packages", c) for c in ("installed", "available", "package", "node")]
    + [("node_os", c) for c in ("major", "target")]
    + [("node_services", c) for c in ("version", "state")]
)
#: values SQLite will hold in any column: text, numbers, blobs, NULL, JSON of every shape
STORE_VALUES = st.one_of(
    st.sampled_from(
        [
            None,
            "",
            "x",
            "yesterday",
            "2024-13-45 99:99:99",
            "not json {",
            "[]",
            "{}",
            "[1, 2]",
            '"ctl-0"',
            '{"workflow": "update", "units": "x"}',
            "9e999",
            "-1",
            "1e308",
            "NaN",
            b"\x00\xff",
            "[/]",
            ":skull:",
            "{{ 7*7 }}",
            "a" * 5000,
        ]
    ),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=8),
)
READERS = [
    ["history"],
    ["history", "--json"],
    ["history", "--run", "1"],
    ["status"],
    ["status", "--json"],
    ["report", "-o", "REPORT"],
    ["plan", "update"],
    ["plan", "update", "--json"],
]
_TEMPLATE: list[Path] = []


def _store_template() -> Path:
    """A cloud whose store holds one recorded run with units, a failed task, probe samples,
    services and facts (made once per session)."""
    if not _TEMPLATE:
        from tests.security.test_stored_input import template

        _TEMPLATE.append(template.__wrapped__(_Factory()))  # type: ignore[attr-defined]
    return _TEMPLATE[0]


class _Factory:
    def mktemp(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"stepwise-fuzz-{name}-"))


@FUZZ
@given(
    changes=st.lists(
        st.tuples(st.sampled_from(STORE_COLUMNS), STORE_VALUES), min_size=1, max_size=3
    ),
    reader=st.sampled_from(READERS),
)
def test_fuzz_stored_runs(changes: list, reader: list[str]):
    import sqlite3

    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "c"
        template = _store_template()
        shutil.copytree(template, root, symlinks=True)
        (root / "deployment.yaml").write_text(
            (root / "deployment.yaml").read_text().replace(str(template), str(root))
        )
        db = sqlite3.connect(root / ".stepwise" / "testcloud.sqlite")
        for (table, column), value in changes:
            try:
                db.execute(f"UPDATE {table} SET {column} = ?", (value,))
            except (sqlite3.IntegrityError, OverflowError):
                pass  # NOT NULL, an integer over 64 bits: SQLite itself keeps that out
        db.commit()
        db.close()
        args = [str(root / "r.html") if a == "REPORT" else a for a in reader]
        _check(
            args + ["-d", str(root / "deployment.yaml")],
            root,
            allowed=root / ".stepwise",
            also=root / "r.html",
        )


#: names a path may be given: long, with NUL or newlines, special files, links, markup
PATHS = st.one_of(
    st.sampled_from(
        [
            "x" * 256,
            "x/" * 3000,
            "a\x00b",
            "a\nb: c",
            "/dev/zero",
            "/dev/null",
            "/proc/self",
            "FIFO",
            "LINK",
            "DIR",
            "",
            "-",
            "[/]",
            ":skull:",
            "{{ 7*7 }}",
            "missing/x.yaml",
            "/",
            ".",
        ]
    ),
    st.text(alphabet=st.characters(blacklist_characters="\x00/"), min_size=1, max_size=300),
)
PATH_OPTIONS = [
    ["validate", "-d", "P"],
    ["plan", "update", "-d", "DEP", "--facts", "P"],
    ["plan", "update", "-d", "DEP", "-e", "@P"],
    ["plan", "update", "-d", "DEP", "--store", "sqlite:///P"],
    ["plan", "update", "-d", "DEP", "--html", "P"],
    ["status", "-d", "DEP", "--store", "sqlite:///P"],
    ["export", "update", "-d", "DEP", "-o", "P"],
    ["export", "update", "-d", "DEP", "-o", "OUT", "-i", "P"],
    ["export", "update", "-d", "DEP", "-o", "OUT", "--lab", "P"],
    ["catalog", "list", "-c", "P"],
    ["import", "tripleo", "-r", "P", "-o", "-"],
    ["import", "inventory", "P", "-o", "-"],
    ["import", "tripleo", "-r", "ROLES", "-o", "P"],
    ["update", "run", "-d", "DEP", "--secret", "k=@P", "--lab", "NOLAB"],
]


@FUZZ
@given(name=PATHS, option=st.sampled_from(PATH_OPTIONS))
def test_fuzz_paths_and_special_files(name: str, option: list[str]):
    from tests.security.test_generated import ROLES

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        dep = _cloud(root)
        os.mkfifo(root / "FIFO")
        (root / "LINK").symlink_to(root / "d.yaml")
        (root / "DIR").mkdir()
        victim = root / "victim"
        victim.write_text("keep")
        (root / "OUTLINK").symlink_to(victim)
        path = name if name.startswith("/") or name in ("", "-") else str(root / name)
        subs = {
            "P": path,
            "DEP": str(dep),
            "OUT": str(root / "out"),
            "ROLES": str(ROLES),
            "NOLAB": str(root / "no"),
        }
        args = [
            a.replace("P", path) if a in ("@P", "k=@P", "sqlite:///P") else subs.get(a, a)
            for a in option
        ]
        writes = "-o" in option and option[option.index("-o") + 1] == "P" or "--html" in option
        # an output may be written where it was asked, with the directories leading to it
        # ('-o DIR/[/]' makes '[' and its ']'), and nowhere else
        inside = Path(path).is_relative_to(root) and Path(path) != root
        top = root / Path(path).relative_to(root).parts[0] if inside else None
        if path == "-":
            top = root / "-"  # a file named '-' in the working directory (the CLI runs in root)
        # in root: a relative output lands there, never in the checkout the tests run from
        with contextlib.chdir(root):
            _check(args, root, allowed=top if writes and top is not None else root / "out")
        assert victim.read_text() == "keep"
        assert stat.S_ISFIFO(os.lstat(root / "FIFO").st_mode)


@FUZZ
@given(
    name=st.text(
        # no lone surrogates: a file name is bytes the OS can encode (they fail in the test's
        # own write, before stepwise sees the name)
        alphabet=st.characters(blacklist_characters="\x00/", blacklist_categories=("Cs",)),
        min_size=1,
        max_size=120,
    ).filter(lambda n: n not in (".", ".."))
)
def test_fuzz_file_names_in_generated_yaml(name: str):
    from tests.security.test_generated import ROLES

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        roles = root / name
        try:
            roles.write_bytes(ROLES.read_bytes())
        except OSError:
            return  # a name the file system refuses (too long in bytes)
        out = root / "out.yaml"
        r = cli("import", "tripleo", "-r", str(roles), "-o", str(out))
        assert r.code in (0, 2) and no_traceback(r.text), r.text
        if r.code == 0:
            doc = yaml.safe_load(out.read_text())
            assert set(doc) == {"name", "description", "roles"}, sorted(doc)
