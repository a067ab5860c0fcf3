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
    try:
        return stat[stat.rindex(")") + 2] != "Z"
    except (ValueError, IndexError):
        return True
