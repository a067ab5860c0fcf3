"""The lock never signals a process stepwise did not start, and a lock file of the wrong shape
is bad input (exit 2, the file named), never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from stepwise.errors import StepwiseError
from stepwise.processes import pid_alive
from stepwise.run.lock import RunLock, read_holder
from tests.security.helpers import cli, no_traceback, write_cloud


@pytest.fixture
def foreign_ansible():
    """A live process that is not stepwise's but whose command line says 'ansible' (another
    user's Ansible, or a pid reused after a crash), in a session of its own."""
    proc = subprocess.Popen(
        ["bash", "-c", "exec -a ansible-playbook sleep 60"], start_new_session=True
    )
    for _ in range(200):  # until the exec has happened
        try:
            if b"ansible" in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
                break
        except OSError:
            pass
        time.sleep(0.01)
    yield proc
    proc.kill()
    proc.wait()


def _stale_lock(path: Path, ansible: list[dict]) -> None:
    """A lock file as a killed stepwise leaves it (no one holds the flock)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"cloud": "c", "pid": 1 << 22, "host": os.uname().nodename, "user": "someone"}
    path.write_text(json.dumps({**record, "command": "killed run", "ansible": ansible}))


@pytest.mark.parametrize("detached", [False, True])
def test_a_stale_lock_never_signals_a_process_it_cannot_prove_its_own(
    tmp_path: Path, foreign_ansible: subprocess.Popen, detached: bool
):
    path = tmp_path / "c.lock"
    # a record as older stepwise wrote it: a pid and nothing that proves whose it is
    _stale_lock(path, [{"pid": foreign_ansible.pid, "detached": detached}])
    with pytest.raises(StepwiseError) as exc:
        RunLock.acquire(path, "c")
    text = str(exc.value)
    assert str(path) in text and str(foreign_ansible.pid) in text
    assert exc.value.exit_code == 4
    assert foreign_ansible.poll() is None and pid_alive(foreign_ansible.pid)
    assert json.loads(path.read_text())["command"] == "killed run"  # nothing changed


def test_a_process_with_a_reused_pid_is_left_alone(tmp_path: Path, foreign_ansible):
    # the record proves whose process it was (its start time), and the live one is another
    path = tmp_path / "c.lock"
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    _stale_lock(path, [{"pid": foreign_ansible.pid, "detached": False, "start": 1, "boot": boot}])
    lock = RunLock.acquire(path, "c")
    lock.release()
    assert foreign_ansible.poll() is None


def test_a_stale_lock_stops_the_ansible_its_run_started(tmp_path: Path):
    # the orphan-stopping still works for a process the record proves its own
    path = tmp_path / "c.lock"
    with RunLock.acquire(path, "c", "killed run") as lock:
        proc = subprocess.Popen(
            ["bash", "-c", "exec -a ansible-playbook sleep 60"], start_new_session=True
        )
        lock.add_ansible(proc.pid)
        raw = path.read_text()
    path.write_text(raw)  # as a SIGKILLed holder leaves it: the record stays
    try:
        RunLock.acquire(path, "c").release()
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    "content",
    [
        "[]",
        '"x"',
        '{"pid": "12"}',
        '{"pid": 0}',
        '{"pid": 5, "sid": -1}',
        '{"pid": 5, "ansible": {}}',
        '{"pid": 5, "ansible": [{}]}',
    ],
)
def test_a_lock_file_of_the_wrong_shape_is_bad_input(tmp_path: Path, content: str):
    path = tmp_path / "c.lock"
    path.write_text(content)
    with pytest.raises(StepwiseError) as exc:
        RunLock.acquire(path, "c")
    assert exc.value.exit_code == 2 and str(path) in str(exc.value)
    assert path.read_text() == content  # nothing changed


def test_a_holder_whose_session_leader_is_outside_its_pid_namespace_is_named(tmp_path: Path):
    """In a container (CI's) /proc shows process group and session 0 for a process whose
    leader is outside the namespace: the record is a holder's like any other."""
    import fcntl

    path = tmp_path / "c.lock"
    path.write_text('{"pid": 4242, "pgid": 0, "sid": 0, "command": "stepwise update run"}')
    with open(path) as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        assert read_holder(path)["sid"] == 0
        with pytest.raises(StepwiseError, match="update run") as exc:
            RunLock.acquire(path, "c")
        assert exc.value.exit_code != 2


def test_a_held_lock_file_of_the_wrong_shape_is_bad_input_for_its_readers(tmp_path: Path):
    import fcntl

    path = tmp_path / "c.lock"
    path.write_text("[]")
    with open(path) as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # some process holds it
        with pytest.raises(StepwiseError) as exc:
            read_holder(path)
        assert exc.value.exit_code == 2 and str(path) in str(exc.value)
        with pytest.raises(StepwiseError) as exc:
            RunLock.acquire(path, "c")
        assert exc.value.exit_code == 2


@pytest.mark.parametrize(
    ("command", "held"),
    [(["abort"], True), (["update", "run", "--yes"], True), (["update", "run", "--yes"], False)],
)
def test_the_commands_say_which_lock_file_is_wrong(tmp_path: Path, command: list[str], held: bool):
    import fcntl

    from stepwise.model import load_deployment
    from stepwise.run.resume import lock_path_for

    dep = write_cloud(tmp_path, computes=1)
    d = load_deployment(dep)
    lock = lock_path_for(d, d.name)
    lock.parent.mkdir(exist_ok=True)
    lock.write_text('["stepwise"]')
    with open(lock) as fh:
        if held:
            fcntl.flock(fh, fcntl.LOCK_EX)  # as by a run being planned
        r = cli(*command, "-d", dep)
    assert r.code == 2, r.text
    assert no_traceback(r.text) and str(lock) in r.text
    assert lock.read_text() == '["stepwise"]'
