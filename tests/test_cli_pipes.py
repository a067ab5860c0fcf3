"""A reader that stops reading (`stepwise plan ... | head -1`) is no failure of stepwise: no
traceback, no message, exit 0 for commands that only show something."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _piped_to_head(*args: str) -> tuple[int, str]:
    """Run stepwise with stdout into a pipe whose reader takes one line and closes it."""
    read, write = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from stepwise.cli.main import main; main()", *args],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write)
    with os.fdopen(read) as reader:
        reader.readline()
    _out, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_a_plan_piped_to_head_exits_0_quietly():
    code, err = _piped_to_head("plan", "upgrade", "-d", str(EXAMPLES / "classic.yaml"))
    assert code == 0, err
    assert "Traceback" not in err and "error" not in err.lower(), err


def test_help_piped_to_head_exits_0():
    code, err = _piped_to_head("update", "run", "--help")
    assert code == 0 and not err.strip(), err


def test_bad_input_keeps_its_exit_code_when_piped():
    code, err = _piped_to_head("plan", "upgrade", "-d", str(EXAMPLES / "no-such.yaml"))
    assert code == 2 and "file not found" in err


def test_output_into_a_pipe_is_not_wrapped():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from stepwise.cli.main import main; main()",
            "plan",
            "update",
            "-d",
            str(EXAMPLES / "classic.yaml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    # at rich's default 80 columns this heading would be cut over three lines
    assert any(
        "controlplane: one visit per node" in line and "before the next part starts" in line
        for line in r.stdout.splitlines()
    )
    wrapped = subprocess.run(
        [
            sys.executable,
            "-c",
            "from stepwise.cli.main import main; main()",
            "plan",
            "update",
            "-d",
            str(EXAMPLES / "classic.yaml"),
        ],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "80"},
        timeout=120,
    )
    assert max(len(line) for line in wrapped.stdout.splitlines()) <= 80  # $COLUMNS still decides
