"""SIGKILL stepwise at several moments of a run, run again: same end state, and the once-only
unit ran exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import trace_lines, write_cloud

from stepwise.run.store import open_store

HERE = Path(__file__).parent
EXPECTED = {
    "ctl-0": ["api stop", "api packages", "api config", "api migrate", "api start", "api verify"],
    "cmp-0": [
        "worker system_upgrade_transfer_data",
        "worker stop",
        "worker packages",
        "worker config",
        "worker migrate",
        "worker start",
        "worker verify",
    ],
    "cmp-1": ["worker stop", "worker packages", "worker config", "worker start", "worker verify"],
}


def _start(dep: Path, url: str, sleep: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(HERE / "killable_run.py"), str(dep), url, sleep],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=str(HERE),
    )


def _dedup(lines: list[str]) -> list[str]:
    """A unit re-run after a kill repeats its lines: collapse repeats of the same step."""
    out: list[str] = []
    for line in lines:
        key = " ".join(line.split()[:2])
        if not out or out[-1] != key:
            out.append(key)
    return out


def _wait(pred, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the kill point")


@pytest.mark.parametrize("kill_at", ["units:2", "once-only", "units:15"])
def test_sigkill_then_run_again_reaches_the_same_end_state(tmp_path: Path, kill_at: str):
    dep = write_cloud(tmp_path)
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    st = open_store(url)
    p = _start(dep, url, "0.2")

    def done_units() -> int:
        runs = st.runs("testcloud", 1)
        return sum(1 for s in st.unit_states(runs[0].id).values() if s == "done") if runs else 0

    if kill_at == "once-only":
        # in the middle of the data transfer: its flag is set, its work is sleeping
        flag = tmp_path / "flags" / "cmp-0" / "stepwise-system_upgrade_transfer_data.flag"
        _wait(lambda: flag.exists() or p.poll() is not None)
        time.sleep(0.1)
    else:
        # mid-unit: once enough units are done and the next one has started
        _wait(lambda: done_units() >= int(kill_at.split(":")[1]) or p.poll() is not None)
        time.sleep(0.3)
    assert p.poll() is None, "the run ended before the kill point"
    if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
    p.wait()
    time.sleep(0.5)  # let a dying ansible-playbook finish dying
    q = _start(dep, url, "0")
    out, _ = q.communicate(timeout=300)
    assert q.returncode == 0, out
    for host, expected in EXPECTED.items():
        lines = trace_lines(tmp_path, host)
        assert _dedup(lines) == expected, (host, lines)
    assert sum("transfer_data" in l for l in trace_lines(tmp_path, "cmp-0")) == 1
    runs = st.runs("testcloud")
    assert len(runs) == 1 and runs[0].status == "done" and runs[0].attempts == 2


def test_sigint_records_interrupted_units_and_the_same_command_finishes(tmp_path: Path):
    dep = write_cloud(tmp_path)
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    st = open_store(url)
    p = _start(dep, url, "0.5")

    def states() -> dict[str, str]:
        runs = st.runs("testcloud", 1)
        return st.unit_states(runs[0].id) if runs else {}

    _wait(lambda: sum(1 for s in states().values() if s == "done") >= 10 or p.poll() is not None)
    time.sleep(0.3)
    assert p.poll() is None, "the run ended before the interrupt"
    done_before = {u for u, s in states().items() if s == "done"}
    # a first Ctrl-C aborts at the next safe point (test_abort.py); the second interrupts
    os.kill(p.pid, signal.SIGINT)
    _wait(lambda: st.runs("testcloud", 1)[0].status == "aborting" or p.poll() is not None)
    os.kill(p.pid, signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    assert p.returncode != 0 and "interrupted" in out, out
    after = states()
    # nothing left "running"; a unit cut by the interrupt is "interrupted", never "done"
    assert set(after.values()) <= {"done", "pending", "interrupted"}, (after, out)
    assert done_before <= {u for u, s in after.items() if s == "done"}
    runs = st.runs("testcloud")
    assert runs[0].status == "interrupted"
    q = _start(dep, url, "0")
    out, _ = q.communicate(timeout=300)
    assert q.returncode == 0, out
    for host, expected in EXPECTED.items():
        assert _dedup(trace_lines(tmp_path, host)) == expected, host
    assert sum("transfer_data" in l for l in trace_lines(tmp_path, "cmp-0")) == 1
    runs = st.runs("testcloud")
    assert len(runs) == 1 and runs[0].status == "done" and runs[0].attempts == 2
    # every unit ran to its end exactly as an uninterrupted run (the trace check above): no
    # unit was recorded done that had not finished
    assert set(st.unit_states(runs[0].id).values()) == {"done"}
