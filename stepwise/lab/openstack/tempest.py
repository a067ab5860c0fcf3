"""tempest as the acceptance test of a cloud the lab runs (what it is told and which tests:
`tempest_conf`).

tempest runs from its own venv (`locks/tempest.txt`: tempest 45.0.0 with keystone- and
glance-tempest-plugin, the 2025.2 releases). `run` runs a list of tests in the workspace
`tempest_conf.write_config` made and reads the outcome from stestr's subunit stream, never
from tempest's coloured text.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stepwise.lab.openstack.tempest_conf import DEFAULT_TESTS, EXCLUDED, api_of
from stepwise.lab.openstack.venvs import BuildProgress, ensure_venv

_PARSE = r"""
import json, sys
import subunit, testtools
from testtools import StreamToDict
out = []
def on_test(t):
    reason = ""
    for name in ("reason", "traceback"):
        d = t["details"].get(name)
        if d is not None:
            text = b"".join(bytes(x) for x in d.iter_bytes()).decode("utf-8", "replace")
            lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
            reason = lines[-1] if lines else ""
            break
    out.append({"id": t["id"], "status": t["status"], "reason": reason[:300]})
stream = subunit.ByteStreamToStreamResult(sys.stdin.buffer, non_subunit_name="stdout")
result = StreamToDict(on_test)
result.startTestRun()
try:
    stream.run(result)
finally:
    result.stopTestRun()
json.dump(out, sys.stdout)
"""


@dataclass(frozen=True)
class TempestResult:
    """What a tempest run found. `failures` holds (test id, short reason) of every failed test
    (a class whose setUpClass failed counts as one failed test: its tests never ran); a run
    that did not finish properly, or in which no test passed, adds ("tempest run", why) to
    them and 1 to `failed`. `skipped` counts the tests tempest skipped for a feature the cloud
    does not have (the report says how many): they are neither passed nor failed."""

    run: int
    passed: int
    failed: int
    skipped: int
    failures: tuple[tuple[str, str], ...]
    seconds: float
    error: str | None = None  # tempest itself could not run (then failed >= 1)
    #: passed tests per API (`identity`, `image`, `compute`, `network`: a test id's part
    #: after `tempest.api.`), so a caller can tell that a service's tests ran at all
    passed_by_api: tuple[tuple[str, int], ...] = ()

    @property
    def ok(self) -> bool:
        """Accepted: at least one test passed and none failed. A run whose every test was
        skipped checked nothing, so it is no acceptance (it also has an `error`)."""
        return self.passed > 0 and self.failed == 0 and self.error is None


def _result_of(python: Path, subunit: bytes, seconds: float, error: str | None) -> TempestResult:
    r = subprocess.run([str(python), "-c", _PARSE], input=subunit, capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"could not read tempest's subunit stream: {r.stderr.decode()[-300:]}")
    return judge(json.loads(r.stdout or b"[]"), seconds, error)


def judge(tests: list[dict[str, str]], seconds: float, error: str | None = None) -> TempestResult:
    """The result of the tests a subunit stream reported (`{"id", "status", "reason"}` each):
    `error` (tempest did not finish as it should) or a run in which tests ran and none passed
    (every one skipped) is a failure, whatever the tests' own outcomes."""
    good = [t for t in tests if t["status"] in ("success", "xfail")]
    passed = len(good)
    by_api = Counter(api_of(t["id"]) for t in good)
    skipped = sum(1 for t in tests if t["status"] == "skip")
    bad = [t for t in tests if t["status"] in ("fail", "uxsuccess")]
    failures = tuple((t["id"], t["reason"] or t["status"]) for t in bad)
    failed = len(bad)
    ran = passed + skipped + failed
    if error is None and ran and skipped == ran:
        error = f"no test passed: all {ran} that ran were skipped, nothing was checked"
    if error:  # a run that did not finish as it should is a failure, even if its tests passed
        failed, failures = failed + 1, failures + (("tempest run", error),)
    return TempestResult(
        run=ran,
        passed=passed,
        failed=failed,
        skipped=skipped,
        failures=failures,
        seconds=seconds,
        error=error,
        passed_by_api=tuple(sorted(by_api.items())),
    )


def run(
    workdir: Path,
    tests: Sequence[str] = DEFAULT_TESTS,
    timeout: float = 600.0,
    concurrency: int = 2,
    exclude: Sequence[str] = EXCLUDED,
    progress: BuildProgress | None = None,
) -> TempestResult:
    """Run the tests matching the regexes `tests` (tempest's `--include-list`) in the workspace
    `write_config` made, at most `timeout` seconds, and count the outcome from the subunit
    stream. A run that could not start or timed out is a failure (`error` says why)."""
    workdir = Path(workdir).resolve()
    venv = ensure_venv("tempest", progress)
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    cmd = _command(venv, workdir, tests, exclude, concurrency)
    # tempest and stestr's workers read OS_* too: only the workspace's configuration counts
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    # a fresh stestr repository: `stestr last` must never read an earlier run's results
    shutil.rmtree(workdir / ".stestr", ignore_errors=True)
    start = time.monotonic()
    rc, error = _run_tempest(cmd, workdir, env, timeout)
    seconds = time.monotonic() - start
    subunit = _last_run(venv, workdir, env)
    if error is None and (rc != 0 and not subunit):
        tail = (
            (workdir / "logs" / "tempest-run.out")
            .read_text(errors="replace")
            .strip()
            .splitlines()[-3:]
        )
        error = f"tempest run exited {rc}: " + " | ".join(tail)[-300:]
    return _outcome(venv / "bin" / "python", subunit, rc, seconds, error)


def _command(
    venv: Path, workdir: Path, tests: Sequence[str], exclude: Sequence[str], concurrency: int
) -> list[str]:
    """`tempest run` on the workspace's configuration, with its include (and exclude) list
    written into the workspace; concurrency 1 to 4."""
    include = workdir / "include-list.txt"
    include.write_text("".join(t + "\n" for t in tests))
    cmd = [
        str(venv / "bin" / "tempest"),
        "run",
        "--config-file",
        str(workdir / "etc" / "tempest.conf"),
        "--include-list",
        str(include),
        "--concurrency",
        str(max(1, min(concurrency, 4))),
    ]
    if exclude:
        (workdir / "exclude-list.txt").write_text("".join(t + "\n" for t in exclude))
        cmd += ["--exclude-list", str(workdir / "exclude-list.txt")]
    return cmd


def _run_tempest(
    cmd: list[str], workdir: Path, env: dict[str, str], timeout: float
) -> tuple[int | None, str | None]:
    """Run tempest, its output in `logs/tempest-run.out`: its exit code, or None and why when
    it ran out of time (then it and its workers are killed)."""
    with open(workdir / "logs" / "tempest-run.out", "w") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            return proc.wait(timeout), None
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # tempest's stestr workers are its children
            proc.wait(30)
            return None, f"timed out after {timeout:.0f}s"


def _last_run(venv: Path, workdir: Path, env: dict[str, str]) -> bytes:
    """The subunit stream of the run (`stestr last`), kept in `logs/last.subunit`."""
    last = subprocess.run(
        [str(venv / "bin" / "stestr"), "last", "--subunit"],
        cwd=workdir,
        env=env,
        capture_output=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    (workdir / "logs" / "last.subunit").write_bytes(
        last.stdout
    )  # the whole outcome, for a closer look
    return last.stdout


def _outcome(
    python: Path, subunit: bytes, rc: int | None, seconds: float, error: str | None
) -> TempestResult:
    """The result the subunit stream says, a failure too when nothing ran or tempest failed
    with every reported test passing."""
    result = _result_of(python, subunit if rc is not None else b"", seconds, error)
    if result.error is None and result.run == 0:
        result = _result_of(python, b"", seconds, "no test matched the list")
    elif result.error is None and rc != 0 and result.failed == 0:
        # every test it reported passed, yet tempest failed: a worker died, a class never ran
        result = _result_of(
            python, subunit, seconds, f"tempest run exited {rc} with no failed test"
        )
    return result
