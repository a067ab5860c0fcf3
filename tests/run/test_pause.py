"""`--pause`: the run stops before each batch and asks the operator, at a terminal, to continue
or abort there (local hosts, no lab; a pseudo-terminal plays the operator)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import pexpect
from conftest import trace_lines, write_cloud
from typer.testing import CliRunner

from stepwise.cli.main import _register

_register()
from stepwise.cli.main import app  # noqa: E402
from stepwise.run.store import open_store  # noqa: E402

STEPWISE = str(Path(sys.executable).parent / "stepwise")
PROMPT = re.compile(r"paused before batch (\S+): ([^\r\n]*)")
ASK = "continue or abort? [c/a]"
EXIT_ABORTED = 5


def _spawn(dep: Path, *extra: str) -> pexpect.spawn:
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    cmd = ["update", "run", "-d", str(dep), "--yes", "--no-prestage", *extra]
    return pexpect.spawn(STEPWISE, cmd, cwd=str(dep.parent), env=env, encoding="utf-8", timeout=120)


def _wait_prompt(child: pexpect.spawn) -> tuple[str, list[str]]:
    child.expect(PROMPT)
    batch, nodes = child.match.group(1), child.match.group(2).strip().split(", ")
    child.expect_exact(ASK)
    return batch, nodes


def _ended(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


def _runs(root: Path) -> list:
    return open_store(f"sqlite:///{root / '.stepwise' / 'testcloud.sqlite'}").runs("testcloud")


def test_pause_without_a_terminal_is_refused_before_anything_runs(tmp_path: Path):
    dep = write_cloud(tmp_path, computes=1)
    r = CliRunner().invoke(app, ["update", "run", "-d", str(dep), "--yes", "--pause"])
    assert r.exit_code == 2, r.output
    assert "--pause asks before each batch at a terminal" in r.output.replace("\n", " ")
    assert not any((tmp_path / "trace").iterdir())
    assert not (tmp_path / ".stepwise" / "testcloud.sqlite").exists()


def test_continue_runs_the_batch_abort_stops_before_the_next_and_the_command_continues(
    tmp_path: Path,
):
    dep = write_cloud(tmp_path, computes=2)
    child = _spawn(dep, "--pause")
    asked: list[tuple[str, list[str]]] = []
    # the first batch: an answer that is neither is asked again, then continue
    asked.append(_wait_prompt(child))
    assert not any(trace_lines(tmp_path, n) for n in asked[0][1]), "ran before the answer"
    child.sendline("maybe")
    child.expect_exact("answer c (continue) or a (abort), not 'maybe'")
    child.sendline("c")
    # every later batch is asked before it starts; continue until the last, abort that one
    while True:
        batch, nodes = _wait_prompt(child)
        asked.append((batch, nodes))
        if "cmp-1" in nodes:
            break
        child.sendline("continue")
    last = nodes
    assert not any(trace_lines(tmp_path, n) for n in last)
    child.sendline("a")
    assert _ended(child) == EXIT_ABORTED
    batches = [b for b, _ in asked]
    assert len(batches) == len(set(batches)) >= 2, asked  # each batch asked once
    run = _runs(tmp_path)[0]
    assert run.status == "aborted" and "before batch" in run.message, run
    # every node of a batch let go was updated; the aborted batch's node was not touched
    for _, nodes in asked[:-1]:
        for n in nodes:
            assert any(line.split()[1] == "verify" for line in trace_lines(tmp_path, n)), n
    assert not any(trace_lines(tmp_path, n) for n in last)

    # the same command continues the run without asking again for the batches done
    child = _spawn(dep, "--pause")
    batch, nodes = _wait_prompt(child)
    assert nodes == last, (batch, nodes)
    child.sendline("c")
    assert _ended(child) == 0
    for n in last:
        assert any(line.split()[1] == "verify" for line in trace_lines(tmp_path, n)), n
    assert _runs(tmp_path)[0].status == "done"


def test_ctrl_c_while_paused_aborts_there(tmp_path: Path):
    dep = write_cloud(tmp_path, computes=1)
    child = _spawn(dep, "--pause", "--json")
    _wait_prompt(child)
    child.kill(signal.SIGINT)
    assert _ended(child) == EXIT_ABORTED
    out = json.loads(child.before[child.before.index("{") :]) if "{" in child.before else {}
    assert _runs(tmp_path)[0].status == "aborted", out
    assert not any(trace_lines(tmp_path, n) for n in ("ctl-0", "cmp-0"))
