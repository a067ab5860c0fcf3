"""The labs of this machine: where they live, the slot (index) each holds, and its processes.

A lab's addresses (127.<100+index>.0.0/16) and ports derive from its slot, so two labs never
share one; a slot is a file in the registry naming the lab directory and the process that
claimed it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from stepwise.errors import Problem, StepwiseError
from stepwise.lab.nodes import MAX_LABS, Lab, pid_belongs_to
from stepwise.processes import pid_alive


def labs_home() -> Path:
    """Where `lab up` puts a lab when no directory is given (one per deployment name)."""
    return Path(
        os.environ.get("STEPWISE_LAB_HOME")
        or Path.home() / ".local" / "state" / "stepwise" / "labs"
    )


#: where the slot files live: one place for every process of the user on this machine, never
#: $TMPDIR or `tempfile.tempdir` (a process that moved its temporary directory claimed slot 0
#: in a registry of its own while another lab held it: two labs on one set of addresses and
#: ports, whose Galera members and keystones answered each other, failed CI's lab scenarios)
REGISTRY_BASE = Path("/tmp")


def registry() -> Path:
    """The directory of slot files, shared by every lab of this user on this machine."""
    d = Path(
        os.environ.get("STEPWISE_LAB_REGISTRY") or REGISTRY_BASE / f"stepwise-labs-{os.getuid()}"
    )
    d.mkdir(parents=True, exist_ok=True)
    return d


def _slot_owner(entry: Path) -> tuple[Path, int]:
    """The lab directory a slot belongs to and the process that claimed it (0: unknown)."""
    lines = entry.read_text().splitlines()
    pid = int(lines[1]) if len(lines) > 1 and lines[1].strip().isdigit() else 0
    return Path(lines[0].strip() if lines else ""), pid


def claim_index(lab_dir: Path) -> int:
    """The lowest lab index nobody holds; a lab's addresses and ports derive from it."""
    reg = registry()
    for i in range(MAX_LABS):
        entry = reg / f"{i}.lab"
        try:
            owner, claimer = _slot_owner(entry)
            if owner == lab_dir:
                return i
            # Stale only when nothing of that lab runs any more (not merely a slow supervisor)
            # and the process that claimed it is gone: a lab still coming up in another
            # process has no lab.json or supervisor yet, and two labs on one index collide.
            if not (claimer and pid_alive(claimer)) and (
                not (owner / "lab.json").exists()
                or not (Lab(owner).supervisor_alive() or lab_pids(Lab(owner)))
            ):
                entry.unlink(missing_ok=True)
        except FileNotFoundError:
            pass
        try:
            fd = os.open(entry, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.write(fd, f"{lab_dir}\n{os.getpid()}\n".encode())
        os.close(fd)
        return i
    raise StepwiseError(
        Problem(
            f"all {MAX_LABS} lab slots are in use", hint="take a lab down with 'stepwise lab down'"
        )
    )


def release_index(lab_dir: Path) -> None:
    """Give back every slot the lab holds."""
    for entry in registry().glob("*.lab"):
        try:
            if _slot_owner(entry)[0] == lab_dir:
                entry.unlink()
        except FileNotFoundError:
            pass


def lab_pids(lab: Lab) -> list[int]:
    """Every process of the lab: recorded PIDs, then any process whose environment names it."""
    pids: set[int] = set()
    for f in (lab.pids_file,):
        try:
            pids.update(int(p) for p in json.loads(f.read_text()))
        except (FileNotFoundError, ValueError):
            pass
    try:
        pids.add(int(lab.supervisor_pid_file.read_text()))
    except (FileNotFoundError, ValueError):
        pass
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            pids.add(int(entry.name))
    return sorted(p for p in pids if p != os.getpid() and pid_belongs_to(p, lab.dir))


def listeners(prefix: str, ports: set[int]) -> list[str]:
    """The TCP sockets that listen on an address starting with `prefix` (a slot's
    127.<100+index>.) or on 127.0.0.1 at one of `ports`: what a lab of that slot must find
    free before it starts (a process left by a lab whose supervisor was killed holds them)."""
    import socket
    import struct

    found = []
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return []  # no /proc: the services say it themselves when they cannot bind
    for line in lines:
        fields = line.split()
        if len(fields) < 4 or fields[3] != "0A":  # 0A: LISTEN
            continue
        hex_ip, _, hex_port = fields[1].partition(":")
        try:
            ip = socket.inet_ntoa(struct.pack("<I", int(hex_ip, 16)))
            port = int(hex_port, 16)
        except (ValueError, struct.error):
            continue
        if ip.startswith(prefix) or (ip == "127.0.0.1" and port in ports):
            found.append(f"{ip}:{port}")
    return sorted(set(found))
