"""Shared by the security tests: the run tests' local cloud, and the real `stepwise` entry
point run in-process (stepwise.cli.main.run: the same guard as the installed command)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from stepwise.cli.main import run as stepwise_run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
STEPWISE = Path(sys.executable).parent / "stepwise"

_spec = importlib.util.spec_from_file_location(
    "_run_fixtures", ROOT / "tests" / "run" / "conftest.py"
)
_run_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_run_fixtures)
write_cloud = _run_fixtures.write_cloud


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    """`stepwise ARGS` in this process, through the real entry point; stdout/stderr captured."""
    runner = CliRunner()
    with runner.isolation(env=env) as (out, err, _):
        code = stepwise_run([str(a) for a in args])
        sys.stdout.flush()
        sys.stderr.flush()
        return Result(
            code,
            out.getvalue().decode("utf-8", "replace"),
            err.getvalue().decode("utf-8", "replace"),
        )


def cli_process(
    *args: str, timeout: float = 60, memory_mb: int | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`stepwise ARGS` as its own process, optionally with an address-space limit."""

    def limit() -> None:
        if memory_mb:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))

    return subprocess.run(
        [str(STEPWISE), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        env={**os.environ, **(env or {})},
    )


def no_traceback(text: str) -> bool:
    return "Traceback" not in text and "internal error" not in text
