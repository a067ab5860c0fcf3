"""Shell completion is installable (`--install-completion` / `--show-completion SHELL`) and
completes commands."""

from __future__ import annotations

import os
import subprocess
import sys

MAIN = [sys.executable, "-c", "from stepwise.cli.main import main; main()"]


def test_completion_script_and_command_completion():
    # typer detects the user's shell from the process tree, which a test runner's worker may
    # not show ("Shell  not supported"): with detection off the shell is the option's value
    no_detection = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    r = subprocess.run(
        [*MAIN, "--show-completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
        env=no_detection,
    )
    assert r.returncode == 0 and "_stepwise_completion()" in r.stdout and "complete " in r.stdout
    env = {
        **os.environ,
        "_STEPWISE_COMPLETE": "complete_bash",
        "COMP_WORDS": "stepwise pl",
        "COMP_CWORD": "1",
    }
    r = subprocess.run(MAIN, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["plan"], (r.stdout, r.stderr)
