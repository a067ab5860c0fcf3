"""`stepwise.processes.pid_alive`, which the run layer's lock and the lab both ask."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from stepwise.processes import pid_alive


def test_a_running_process_is_alive_and_a_reaped_one_is_not() -> None:
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)


def test_a_zombie_is_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        # not reaped yet: the kernel keeps it as a zombie until wait()
        while pid_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not pid_alive(child.pid)
    finally:
        child.wait()


def _leader_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def test_a_zombie_leader_whose_threads_still_run_is_alive() -> None:
    # The main thread ends (the kernel shows the leader as a zombie) while another thread runs
    # on: as after SIGKILL of a multi-threaded server, its files stay open until that ends.
    # The other thread ends when the test closes its stdin, never on a clock (CI is loaded).
    code = (
        "import ctypes, sys, threading\n"
        "threading.Thread(target=sys.stdin.read).start()\n"
        "print('ready', flush=True)\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 10
        while _leader_state(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _leader_state(child.pid) == "Z"
        assert pid_alive(child.pid)
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)
        assert not pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
