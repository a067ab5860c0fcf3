"""Ctrl-C while the `stepwise` process shuts down: the command has ended, the press is ignored
(the lab kill test's second press, 0.7 s after an abort or an interrupt that ended the run,
used to end the process by the signal: exit -2 and its outcome lost to the caller)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the `stepwise` entry point, with an object that the interpreter's shutdown finalizes slowly
# (as it tears down a run's modules and objects); it says when that has begun
CHILD = """
import os, sys, time
from stepwise.cli.main import main

class SlowToFinalize:
    def __del__(self, write=os.write, sleep=time.sleep):
        write(1, b"shutting down\\n")
        sleep(3)

slow = SlowToFinalize()
sys.argv = ["stepwise", "--help"]
main()
"""


def test_ctrl_c_during_shutdown_keeps_the_commands_exit_code() -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None
    try:
        for line in p.stdout:
            if line == b"shutting down\n":
                break
        else:
            raise AssertionError(f"no shutdown seen: rc={p.wait()} {p.stderr.read()!r}")
        p.send_signal(signal.SIGINT)  # as the terminal sends it: to this process
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, p.returncode
