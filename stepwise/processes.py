"""Processes on this machine, as the layers that start or wait for them see them.

Below every layer (like `errors` and `paths`): the run layer's lock asks whether the process
that holds it or an Ansible it started is still there (and, before it signals one, whether it
is the very process it recorded: `identity`, `same_process`), and the lab asks the same of its
supervisor and services, and neither may import the other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


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


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and ')'),
    so that fields()[0] is the state (field 3 of proc(5)); None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2 :].split()
    except (OSError, ValueError):
        return None


def boot_id() -> str | None:
    """This boot of the machine: a pid and start time name one process only within a boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def identity(pid: int) -> dict[str, int | str] | None:
    """What proves a process is the one seen before, beyond its pid (which the kernel reuses):
    its start time in clock ticks since boot (proc(5) field 22), the boot, its process group
    and session. None when there is no such process (or no /proc)."""
    fields = _stat_fields(pid)
    boot = boot_id()
    if fields is None or boot is None or len(fields) < 20:
        return None
    try:
        return {
            "start": int(fields[19]),
            "boot": boot,
            "pgid": int(fields[2]),
            "sid": int(fields[3]),
        }
    except ValueError:
        return None


def same_process(pid: int, recorded: Mapping[str, Any]) -> bool:
    """Whether process `pid` is the one `recorded` (an `identity` taken earlier) describes:
    same boot, same start time, same process group; False when any of it is missing."""
    now = identity(pid)
    if now is None or not pid_alive(pid):
        return False
    return all(
        recorded.get(k) is not None and recorded.get(k) == now[k] for k in ("start", "boot", "pgid")
    )
