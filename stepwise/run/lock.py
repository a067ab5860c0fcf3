"""One run per cloud at a time.

The lock is a file (`.stepwise/<cloud>.lock` next to the deployment) held with `flock`: the
kernel drops it when the holder dies, even by SIGKILL, so a lock left by a dead process is
never mistaken for a live one. The file also says who holds it (user, host, pid, command)
for the refusal message, and which Ansible process the holder started, so a successor can
stop an orphaned ansible-playbook before touching the same nodes again.

A pid alone names no process for long: the kernel reuses it, and anyone's Ansible has
"ansible" in its command line. So every process is recorded with what proves it is the same
one later (`processes.identity`: its start time in /proc/PID/stat, the boot, its process
group), and a successor signals only a process that matches its record; a live process it
cannot prove is the killed run's is reported, never signalled. The file is read as input:
anything but the shape stepwise writes is refused (exit 2) naming the file.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import signal
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepwise.errors import InputError, Problem, StepwiseError
from stepwise.processes import identity, pid_alive, same_process
from stepwise.run.ansible_files import private_dir


class LockedError(StepwiseError):
    """Another stepwise run holds this cloud's lock."""

    exit_code = 4


def _session_members(sid: int) -> list[int]:
    """Processes of a session (ansible-playbook and its forks run in their own session)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) == sid:
                out.append(int(d.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _is_ansible(pid: int) -> bool:
    try:
        return b"ansible" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@dataclass
class RunLock:
    """A held lock on one cloud. Use as a context manager or call release()."""

    path: Path
    info: dict[str, Any]
    stale: dict[str, Any] | None = None
    _fd: int | None = field(default=None, repr=False)

    @staticmethod
    def acquire(path: Path | str, cloud: str, command: str = "") -> RunLock:
        """Take the lock or raise LockedError saying who holds it."""
        path = Path(path)
        private_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = _read(fd, path, held=True)
            finally:
                os.close(fd)
            who = describe(holder)
            raise LockedError(
                Problem(
                    f"cloud '{cloud}' is being changed by another stepwise run ({who})",
                    file=str(path),
                    hint="wait for it to finish, or watch it with `stepwise status`; "
                    "a lock of a dead process is released automatically",
                )
            ) from None
        stale = None
        try:
            previous = _read(fd, path, held=False)
            if previous.get("pid"):
                # We got the flock, so whoever wrote this record is gone (or no longer runs).
                stale = previous
                _stop_orphans(previous, path)
        except BaseException:
            os.close(fd)  # the record stays as it was: refused, interrupted or bad input
            raise
        info = {
            "cloud": cloud,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "user": _user(),
            "command": command,
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **(identity(os.getpid()) or {}),
        }
        lock = RunLock(path, info, stale, fd)
        lock._write()
        return lock

    def add_ansible(self, pid: int, detached: bool = False) -> None:
        """Record an ansible-playbook process this run started; `detached`: it runs a
        once-only unit and must be waited for by a successor, never killed."""
        procs = [p for p in self.info.get("ansible", []) if p["pid"] != pid]
        # what proves, to a successor, that a live process with this pid is this one
        procs.append({"pid": pid, "detached": detached, **(identity(pid) or {})})
        self.info["ansible"] = procs
        self._write()

    def remove_ansible(self, pid: int) -> None:
        """Forget an ansible-playbook process that has ended."""
        self.info["ansible"] = [p for p in self.info.get("ansible", []) if p["pid"] != pid]
        self._write()

    def _write(self) -> None:
        assert self._fd is not None
        data = json.dumps(self.info).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return str(os.getuid())


#: the lock record's fields and their types (others are ignored); `pid` is required
_HOLDER_FIELDS: dict[str, type] = {
    "cloud": str,
    "pid": int,
    "host": str,
    "user": str,
    "command": str,
    "since": str,
    "start": int,
    "boot": str,
    "pgid": int,
    "sid": int,
    "ansible": list,
}
#: an Ansible process's record in it; `pid` is required
_ANSIBLE_FIELDS: dict[str, type] = {
    "pid": int,
    "detached": bool,
    "start": int,
    "boot": str,
    "pgid": int,
    "sid": int,
}

#: the fields that hold a process id: a pid is positive; a process group or session is 0 when
#: its leader is outside this PID namespace (a container's processes, CI's), as proc(5) shows
_PID_FIELDS = {"pid": 1, "pgid": 0, "sid": 0}


def _read(fd: int, path: Path, held: bool) -> dict[str, Any]:
    """The record in the lock file ({} when empty), its shape checked: anything but what
    stepwise writes is refused as bad input naming the file. `held`: another process holds
    the lock, and may be writing: a record that does not parse yet is an unknown holder."""
    try:
        raw = os.pread(fd, 65536, 0)
    except OSError:
        return {}
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        if held:
            return {}
        _bad(path, held, "it is not JSON")
    if data == {}:
        return {}
    _check_record(data, _HOLDER_FIELDS, path, held, "")
    procs = data.get("ansible", [])
    for i, proc in enumerate(procs):
        _check_record(proc, _ANSIBLE_FIELDS, path, held, f"ansible[{i}]")
    return data


def _check_record(data: Any, fields: dict[str, type], path: Path, held: bool, where: str) -> None:
    if not isinstance(data, dict):
        _bad(path, held, f"a JSON {_json_type(data)} where an object belongs", where or None)
    if data.get("pid") is None:
        _bad(path, held, "no pid", f"{where}.pid" if where else "pid")
    for key, kind in fields.items():
        value = data.get(key)
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if key in data and not ok:
            field = f"{where}.{key}" if where else key
            _bad(path, held, f"a JSON {_json_type(value)} where a {kind.__name__} belongs", field)
        if key in _PID_FIELDS and key in data and value < _PID_FIELDS[key]:
            _bad(path, held, f"{value} is not a process id", f"{where}.{key}" if where else key)


def _json_type(value: Any) -> str:
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "list"}
    return "null" if value is None else names.get(type(value), "object")


def _bad(path: Path, held: bool, what: str, field: str | None = None) -> None:
    hint = (
        "a process holds it: find it with `fuser` on the file and let it end, then remove the file"
        if held
        else "no run holds it now: remove the file and run the command again"
    )
    raise InputError(
        Problem(f"not a lock file stepwise wrote: {what}", file=str(path), field=field, hint=hint)
    )


def describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "holder unknown"
    parts = [f"{holder.get('user', '?')}@{holder.get('host', '?')} pid {holder.get('pid', '?')}"]
    if holder.get("since"):
        parts.append(f"since {holder['since']}")
    if holder.get("command"):
        parts.append(f"running `{holder['command']}`")
    return ", ".join(parts)


def read_holder(path: Path | str) -> dict[str, Any] | None:
    """Who holds the lock now (None when free): for `status`."""
    path = Path(path)
    try:
        # non-blocking and not through a link: a FIFO planted there must not hang `status`
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(fd, path, held=True) or {"pid": None}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


#: how long a successor waits for a once-only unit a killed run left running before it gives
#: up and says so (the unit goes on; the same command, run again later, waits again)
DETACHED_WAIT_S = 30 * 60


def _stop_orphans(previous: dict[str, Any], path: Path, wait_s: float = DETACHED_WAIT_S) -> None:
    """A killed stepwise may leave its ansible-playbook processes running (they survive their
    parent in their own sessions); stop them so two Ansible runs never touch the same nodes.
    A once-only unit's playbook is waited for instead: cutting it in half is what must never
    happen. Only a process that matches its record (`same_process`) is signalled or waited
    for; a live Ansible the record cannot prove the killed run's is refused (LockedError)."""
    for proc in previous.get("ansible", []):
        pid = proc["pid"]
        if not pid_alive(pid):
            continue
        if proc.get("start") is None or proc.get("boot") is None:
            # a record without proof (an older stepwise's, or written by hand)
            if _is_ansible(pid):
                raise LockedError(_unproven(previous, proc, path))
            continue  # the pid was reused by a process that is no Ansible
        if not same_process(pid, proc):
            continue  # the recorded process has ended: the pid is another process's now
        if proc.get("detached"):
            _wait_detached(pid, proc, path, wait_s)
        else:
            _stop_session(pid)


def _unproven(previous: dict[str, Any], proc: dict[str, Any], path: Path) -> Problem:
    pid = proc["pid"]
    return Problem(
        f"the lock was left by a stepwise run that is gone ({describe(previous)}); it names "
        f"ansible-playbook pid {pid}, and an Ansible process with that pid runs now, which "
        "the lock cannot prove that run started (another user's Ansible, or a pid reused): "
        "it was not signalled",
        file=str(path),
        hint=f"check it (`ps -o pid,lstart,user,args -p {pid}`): if it is that run's, stop it "
        f"(`kill -TERM -- -{pid}`) or let it finish; if it is not, remove {path} (no run "
        "holds it); then run the command again",
    )


def _wait_detached(pid: int, proc: dict[str, Any], path: Path, wait_s: float) -> None:
    """Wait, at most `wait_s` seconds, for the once-only unit a killed run left running (a
    Ctrl-C stops the waiting, never the unit)."""
    import sys

    print(
        "stepwise: waiting for the once-only unit left running by the killed run "
        f"(pid {pid}; Ctrl-C stops waiting, the unit goes on)",
        file=sys.stderr,
        flush=True,
    )
    deadline = time.monotonic() + wait_s
    while same_process(pid, proc):
        if time.monotonic() >= deadline:
            raise LockedError(
                Problem(
                    f"the once-only unit left running by a killed run (pid {pid}) still runs "
                    f"after {wait_s / 60:.0f} min of waiting",
                    file=str(path),
                    hint="it is never cut in half: run the command again once it has ended "
                    f"(`ps -p {pid}` shows whether it still runs)",
                )
            )
        time.sleep(0.2)


def _stop_session(pid: int) -> None:
    """SIGTERM, then SIGKILL, the Ansible processes of the session whose leader `pid` is (proven
    the killed run's): each member's identity is taken once and checked before every signal, so
    a member that ended meanwhile is never mistaken for a process that took its pid."""
    members = {
        p: ident
        for p in _session_members(pid)
        if (_is_ansible(p) or p == pid) and (ident := identity(p)) is not None
    }
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p, ident in members.items():
            if same_process(p, ident):
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(same_process(p, i) for p, i in members.items()):
            time.sleep(0.05)
        members = {p: i for p, i in members.items() if same_process(p, i)}
        if not members:
            return


class DbLock:
    """With a PostgreSQL store, teams run stepwise from several machines: the lock file is not
    shared, so the database holds the lock too (a session advisory lock, released by the
    server when the holder's connection dies)."""

    def __init__(self, engine: Any, cloud: str):
        self.engine, self.cloud, self.conn = engine, cloud, None

    def acquire(self, who: Callable[[], str]) -> DbLock:
        if self.engine.dialect.name != "postgresql":
            return self
        from sqlalchemy import text

        conn = self.engine.connect()
        got = conn.execute(
            text("SELECT pg_try_advisory_lock(hashtext(:k))"), {"k": "stepwise:" + self.cloud}
        ).scalar()
        if not got:
            conn.close()
            raise LockedError(
                Problem(
                    f"cloud '{self.cloud}' is being changed by another stepwise run ({who()})",
                    hint="wait for it to finish, or watch it with `stepwise status`",
                )
            )
        conn.commit()
        self.conn = conn
        return self

    @staticmethod
    def held(engine: Any, cloud: str) -> bool:
        """Whether a run (of any machine) holds the cloud's lock in a PostgreSQL store; False
        for other stores, whose lock is the file."""
        if engine.dialect.name != "postgresql":
            return False
        from sqlalchemy import text

        key = {"k": "stepwise:" + cloud}
        with engine.connect() as conn:
            if not conn.execute(text("SELECT pg_try_advisory_lock(hashtext(:k))"), key).scalar():
                return True
            conn.execute(text("SELECT pg_advisory_unlock(hashtext(:k))"), key)
            conn.commit()
            return False

    def release(self) -> None:
        if self.conn is not None:
            from sqlalchemy import text

            # the pool keeps the session open: unlock explicitly (a dead holder's session
            # ends with it, which releases the lock on the server)
            try:
                self.conn.execute(
                    text("SELECT pg_advisory_unlock(hashtext(:k))"), {"k": "stepwise:" + self.cloud}
                )
                self.conn.commit()
            finally:
                self.conn.close()
                self.conn = None
