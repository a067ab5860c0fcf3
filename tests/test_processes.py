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


def test_a_zombie_leader_whose_threads_still_run_is_alive() -> None:
    # The main thread ends (the kernel shows the leader as a zombie) while another thread runs
    # on: as after SIGKILL of a multi-threaded server, its files stay open until that ends.
    code = (
        "import ctypes, threading, time\n"
        "threading.Thread(target=time.sleep, args=(1.5,)).start()\n"
        "print('ready', flush=True)\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            leader = Path(f"/proc/{child.pid}/stat").read_text()
            if leader[leader.rindex(")") + 2] == "Z":
                break
            time.sleep(0.01)
        assert leader[leader.rindex(")") + 2] == "Z"
        assert pid_alive(child.pid)
        child.wait(timeout=10)
        assert not pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
