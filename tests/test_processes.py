"""`stepwise.processes.pid_alive`, which the run layer's lock and the lab both ask."""

from __future__ import annotations

import os
import subprocess
import sys
import time

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
