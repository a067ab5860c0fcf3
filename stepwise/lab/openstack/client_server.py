"""The lab's `openstack` CLI server: the real python-openstackclient, imported once.

Every `openstack` command a catalog task runs on a lab node (a drain makes ten) is the real
CLI of the lab's client venv, and each spent ~0.9 s of CPU importing openstackclient before
its first request: on 2 cores, beside the cloud it talks to, that is most of a drain's CPU.
This starts `nodecmd_server` in `openstack` mode under the client venv's Python (the CLI
imported once, a child forked per call, running the CLI's own `main` on the caller's
streams, environment and directory) and hands it the calls; a call it cannot take (not up
yet, STEPWISE_LAB_NODECMD_SERVER=0) runs the CLI in a process of its own as before.

The server is started by the first call that finds none (under a lock: one per lab) and
holds the lab in its environment, so `lab down` ends it with the lab's other processes.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import TYPE_CHECKING

from stepwise.lab.ansible_plugins.nodecmd_client import stepwise_nodecmd_client as nc_client
from stepwise.lab.spawn import package_dir, spawn
from stepwise.processes import pid_alive

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab

PID_FILE = "openstack-client-server.pid"


def socket_name(lab: Lab) -> str:
    """The abstract socket of the lab's `openstack` CLI server."""
    return f"{lab.socket_name}-openstack"


def _alive(pid_file: Path) -> bool:
    try:
        return pid_alive(int(pid_file.read_text()))
    except (OSError, ValueError):
        return False


def ensure_started(lab: Lab, venv: Path) -> None:
    """Start the lab's `openstack` CLI server unless it runs (one starter at a time; the
    calls made while it imports run the CLI themselves)."""
    from stepwise.lab.nodes import ENV_LAB

    run_dir = Path(lab.run_dir)
    pid_file = run_dir / PID_FILE
    if _alive(pid_file):
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / (PID_FILE + ".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # another call starts it now
        if _alive(pid_file):
            return
        # the server runs stepwise's fork server under the client venv's Python
        path_dir = package_dir(lab, "openstack-client-path")
        env = dict(os.environ, PYTHONPATH=str(path_dir), **{ENV_LAB: str(lab.dir)})
        env.pop("PYTHONHOME", None)
        name = socket_name(lab).lstrip("\0")
        argv = ["stepwise.lab.nodecmd_server", str(lab.dir), name, "openstack"]
        proc = spawn(lab, env, "openstack-client-server.log", argv, str(venv / "bin" / "python"))
        pid_file.write_text(str(proc.pid))


def call(lab: Lab, venv: Path, argv: list[str], env: dict[str, str], timeout: float) -> int | None:
    """Run the `openstack` CLI with `argv` (its program first) in the lab's server; its exit
    status, or None when the server did not take the call (nothing ran)."""
    if os.environ.get("STEPWISE_LAB_NODECMD_SERVER") == "0":
        return None
    code = nc_client.run(socket_name(lab), argv, env, os.getcwd(), timeout)
    if code is None:
        ensure_started(lab, venv)
    return code
