"""One run per cloud at a time.

The lock is a file (`.stepwise/<cloud>.lock` next to the deployment) held with `flock`: the
kernel drops it when the holder dies, even by SIGKILL, so a lock left by a dead process is
never mistaken for a live one. The file also says who holds it (user, host, pid, command)
for the refusal message, and which Ansible process the holder started, so a successor can
stop an orphaned ansible-playbook before touching the same nodes again.
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

from stepwise.errors import Problem, StepwiseError
from stepwise.processes import pid_alive
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
            holder = _read(fd)
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
        previous = _read(fd)
        stale = None
        if previous.get("pid"):
            # We got the flock, so whoever wrote this record is gone (or no longer runs).
            stale = previous
            _stop_orphans(previous)
        info = {
            "cloud": cloud,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "user": _user(),
            "command": command,
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        lock = RunLock(path, info, stale, fd)
        lock._write()
        return lock

    def add_ansible(self, pid: int, detached: bool = False) -> None:
        """Record an ansible-playbook process this run started; `detached`: it runs a
        once-only unit and must be waited for by a successor, never killed."""
        procs = [p for p in self.info.get("ansible", []) if p["pid"] != pid]
        procs.append({"pid": pid, "detached": detached})
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


def _read(fd: int) -> dict[str, Any]:
    try:
        raw = os.pread(fd, 65536, 0)
        return json.loads(raw) if raw.strip() else {}
    except (OSError, ValueError):
        return {}


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
            return _read(fd) or {"pid": None}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _stop_orphans(previous: dict[str, Any], wait_s: float = 6 * 3600) -> None:
    """A killed stepwise may leave its ansible-playbook processes running (they survive their
    parent in their own sessions); stop them so two Ansible runs never touch the same nodes.
    A once-only unit's playbook is waited for instead: cutting it in half is what must never
    happen."""
    for proc in previous.get("ansible", []):
        pid = proc.get("pid")
        if not pid or not pid_alive(pid) or not _is_ansible(pid):
            continue
        if proc.get("detached"):
            import sys

            print(
                "stepwise: waiting for the once-only unit left running by the killed run "
                f"(pid {pid})",
                file=sys.stderr,
                flush=True,
            )
            deadline = time.monotonic() + wait_s
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            continue
        _stop_session(pid)


def _stop_session(pid: int) -> None:
    members = [p for p in _session_members(pid) if _is_ansible(p) or p == pid]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in members:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(pid_alive(p) for p in members):
            time.sleep(0.05)
        members = [p for p in members if pid_alive(p)]
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
