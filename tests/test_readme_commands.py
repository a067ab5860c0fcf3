"""README's commands work as README shows them.

Every `stepwise` command in README.md's code blocks that needs no lab, no real hosts and no
earlier run (validate, plan, catalog, export, a plan's report) runs here from the project's
root and exits 0; a block written as a terminal session (`$ stepwise ...` followed by what it
prints) must print those lines and fail as shown. The others (lab, runs, status, import of
files the reader brings) are counted, so a new kind of command cannot slip through unseen.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: commands that run on their own (the first word after `stepwise`)
SELF_CONTAINED = {"validate", "plan", "catalog", "export"}
#: what needs a lab, real hosts, a run in the store or the reader's own files
NEEDS_MORE = {
    "lab",
    "demo",
    "discover",
    "update",
    "upgrade",
    "external-upgrade",
    "management-upgrade",
    "rollback",
    "status",
    "history",
    "abort",
    "import",
}


def _blocks(text: str) -> list[list[str]]:
    blocks, cur, inside = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            if inside:
                blocks.append(cur)
            cur, inside = [], not inside
            continue
        if inside:
            cur.append(line)
    return blocks


def _commands() -> tuple[list[list[str]], list[tuple[list[str], list[str]]], list[list[str]]]:
    """(plain commands, terminal sessions with their printed lines, commands left out)."""
    plain, sessions, skipped = [], [], []
    for block in _blocks(README.read_text()):
        joined: list[str] = []
        for line in block:
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1] + " " + line.strip()
            else:
                joined.append(line)
        i = 0
        while i < len(joined):
            line = joined[i]
            session = line.startswith("$ stepwise ")
            if not (session or line.startswith("stepwise ")):
                i += 1
                continue
            # optional parts of a synopsis (`[--json]`) are left out
            words = shlex.split(re.sub(r"\[[^]]*\]", "", line.removeprefix("$ ")), comments=True)[
                1:
            ]
            if session:
                shown = []
                while (
                    i + 1 < len(joined)
                    and joined[i + 1].strip()
                    and not joined[i + 1].startswith(("$", "stepwise "))
                ):
                    i += 1
                    shown.append(joined[i].strip())
                sessions.append((words, shown))
            elif any(
                w.endswith((".yaml", ".yml", ".ini")) and not (ROOT / w).exists() for w in words
            ):
                skipped.append(words)  # the reader's own files (what an import wrote)
            elif (
                words
                and words[0] in SELF_CONTAINED
                or words[:1] == ["report"]
                and "--plan" in words
            ):
                plain.append(words)
            else:
                skipped.append(words)
            i += 1
    return plain, sessions, skipped


PLAIN, SESSIONS, SKIPPED = _commands()


def _run(words: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from stepwise.cli.main import _register

    _register()
    from stepwise.cli.main import app

    monkeypatch.chdir(tmp_path)  # files the command writes land here
    (tmp_path / "examples").exists() or (tmp_path / "examples").symlink_to(ROOT / "examples")
    # a store an earlier run left beside the examples must not change what the plans say
    monkeypatch.setenv("STEPWISE_STORE", f"sqlite:///{tmp_path / 'no-runs.sqlite'}")
    return CliRunner().invoke(app, words)


def test_readme_has_the_commands_this_test_runs():
    assert len(PLAIN) >= 10, PLAIN
    assert SESSIONS, "README shows no terminal session"
    # everything left out is a kind of command that needs more than the project's files
    yours = [
        w
        for w in SKIPPED
        if any(x.endswith((".yaml", ".yml", ".ini")) and not (ROOT / x).exists() for x in w)
    ]
    assert all(w[0] in NEEDS_MORE | {"report"} for w in SKIPPED if w not in yours), SKIPPED


@pytest.mark.parametrize("words", PLAIN, ids=[" ".join(w)[:70] for w in PLAIN])
def test_readme_command_runs(words: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    r = _run(words, tmp_path, monkeypatch)
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    assert r.exit_code == 0, r.output
    assert r.output.strip() or any(w in words for w in ("-o", "--html")), "printed nothing"
    for flag in ("-o", "--html"):
        if flag in words:
            out = tmp_path / words[words.index(flag) + 1]
            assert out.exists() and (out.is_dir() or out.stat().st_size > 0), out


@pytest.mark.parametrize("words,shown", SESSIONS, ids=[" ".join(w)[:70] for w, _ in SESSIONS])
def test_readme_session_prints_what_readme_shows(
    words: list[str], shown: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    r = _run(words, tmp_path, monkeypatch)
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    printed = [" ".join(line.split()) for line in r.output.splitlines() if line.strip()]
    for line in shown:
        assert " ".join(line.split()) in printed, (line, r.output)
    refused = any(line.startswith("refused") for line in shown)
    assert (r.exit_code != 0) == refused, (r.exit_code, r.output)
    if refused:
        assert re.search(r"^refused", r.output, re.M)


#: README's table of the seed's OS upgrade: `| N | seed | stepwise |`
_SEED_ROW = re.compile(r"^\| (\d+) \| (.*?) \| (.*) \|$")
_SEED_VERB = re.compile(r"`((?:external-)?upgrade (?:prepare|run|converge))(?: --tags (\w+))?")


def _seed_table() -> dict[int, tuple[str, str]]:
    rows = {}
    for line in README.read_text().splitlines():
        m = _SEED_ROW.match(line)
        if m:
            rows[int(m.group(1))] = (m.group(2), m.group(3))
    return rows


def test_the_seeds_whole_table_previews_on_a_fresh_cloud(tmp_path: Path, monkeypatch):
    """Every command of README's seed table, as `seed_commands` types it for the composed
    example, previews with `stepwise plan` on a fresh cloud (exit 0, what earlier commands
    do said as assumed); each command the table names is one of those commands."""
    from stepwise.model import load_deployment
    from stepwise.plan.commands import seed_commands, seed_preview

    rows = _seed_table()
    assert sorted(rows) == list(range(1, 13)), rows
    dep = load_deployment(ROOT / "examples" / "composed.yaml")
    commands = seed_commands(dep, "R2")
    typed = {(" ".join(c[:2]), c[c.index("--tags") + 1] if "--tags" in c else "") for c in commands}
    for n, (seed, ours) in rows.items():
        named = {(v, t or "") for v, t in _SEED_VERB.findall(seed + " " + ours)}
        assert n in (3, 8, 9) or named, (n, seed)  # 3 is not stepwise's; 8, 9 repeat 2-7
        assert named <= typed, (n, named - typed)
    role = {n.name: dep.role_of(n).name for n in dep.nodes}
    seen: set[tuple[str, ...]] = set()
    for c in commands:
        # one command per form and role of its nodes: the others differ only by name
        form = tuple(
            ",".join(sorted({role.get(x, x) for x in w.split("=")[-1].split(",")})) for w in c
        )
        if form in seen:
            continue
        seen.add(form)
        words = [*seed_preview(c), "-d", "examples/composed.yaml"]
        r = _run(words, tmp_path, monkeypatch)
        if r.exception and not isinstance(r.exception, SystemExit):
            raise r.exception
        assert r.exit_code == 0, (c, r.output)
        # a node with nothing of the release to change (a ceph node's step 6) says so
        said = ("done by earlier commands", "Nothing to do")
        assert c == commands[0] or any(x in r.output for x in said), (c, r.output)
