"""Processes on this machine, as the layers that start or wait for them see them.

Below every layer (like `errors` and `paths`): the run layer's lock asks whether the process
that holds it or an Ansible it started is still there, and the lab asks the same of its
supervisor and services, and neither may import the other.
"""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """True while process `pid` exists and is not a zombie: a zombie nobody reaps (containers
    without an init) is dead for every purpose of ours, though the kernel still lists it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, but it exists
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        # gone since the signal; without /proc at all, the signal's answer stands
        return not Path("/proc/self").exists()
    except OSError:
        return True
    if _state(stat) != "Z":
        return True
    # A killed multi-threaded process (mariadbd, uwsgi) shows its leader as a zombie while its
    # other threads still exit, holding its files and listening sockets: alive until they end.
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        try:
            if _state((task / "stat").read_text()) not in ("Z", "X"):
                return True
        except OSError:
            continue
    return False


def _state(stat: str) -> str:
    """The state letter of a /proc stat line (after the command name, which may hold spaces)."""
    try:
        return stat[stat.rindex(")") + 2]
    except (ValueError, IndexError):
        return "?"
