"""A real OpenStack process's start lasts until it says READY=1 on its NOTIFY_SOCKET, as
`systemctl start` of a `Type=notify` unit does (stepwise/lab/openstack/process.py); one that
exits first failed its start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from stepwise.lab.openstack import process

# what oslo.service's systemd.notify_once does, after a while
NOTIFY = """
import os, socket, sys, time
time.sleep(float(sys.argv[1]))
name = os.environ["NOTIFY_SOCKET"]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.connect("\\0" + name[1:] if name.startswith("@") else name)
s.sendall(b"STATUS=starting\\n" if sys.argv[2] == "status" else b"READY=1")
time.sleep(30)
"""


def _start(code: str, *args: str, env_socket: str) -> subprocess.Popen:
    import os

    return subprocess.Popen(
        [sys.executable, "-c", code, *args], env={**os.environ, "NOTIFY_SOCKET": env_socket}
    )


def test_the_start_returns_once_the_service_says_it_is_ready(tmp_path: Path):
    with process._notify_socket() as (ready, address):
        assert address.startswith("@")  # the abstract namespace, as oslo.service reads it
        unit = SimpleNamespace(name="nova_conductor", child=None)
        unit.child = _start(NOTIFY, "0.3", "ready", env_socket=address)
        try:
            process._wait_ready(unit, ready, tmp_path / "log")
            assert unit.child.poll() is None  # ready, and running
        finally:
            unit.child.kill()
            unit.child.wait()


def test_a_service_that_exits_before_it_is_ready_failed_its_start(tmp_path: Path, capsys):
    with process._notify_socket() as (ready, address):
        unit = SimpleNamespace(name="nova_conductor", child=None)
        # a status line is no readiness: the wait goes on until the process exits
        unit.child = _start(
            NOTIFY.replace("time.sleep(30)", "sys.exit(3)"), "0.1", "status", env_socket=address
        )
        with pytest.raises(SystemExit) as exc:
            process._wait_ready(unit, ready, tmp_path / "log")
    assert exc.value.code == 1
    said = capsys.readouterr().out
    assert "nova-conductor exited (3)" in said and str(tmp_path / "log") in said
