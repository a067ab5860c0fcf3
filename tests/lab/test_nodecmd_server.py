"""The lab's node-command server (`stepwise.lab.nodecmd_server`): a node command answers the
same through it as in a process of its own, runs in a child of the server, ends when its
caller is killed, and still runs when the server is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from stepwise.processes import pid_alive

pytestmark = pytest.mark.lab

COMMANDS = [
    "systemctl is-active keystone",
    "systemctl is-active no-such-unit",
    "df -Pk /",
    "dnf list installed ceph-mon",
    "printf '[a]\\nb = 1\\n' > t.ini; crudini --get t.ini a b; crudini --get t.ini a c",
    "crudini --set t.ini a c 2 && cat t.ini",
    "echo from-stdin | mariadb --version >/dev/null; pwd",
    "pcs status >/dev/null 2>&1; echo $?",
]


def _server_pid(lab) -> int:
    return int((lab.run_dir / "nodecmd-server.pid").read_text())


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _run(lab, node: str, cmd: str, server: bool) -> tuple[int, str, str]:
    env = lab.node_env(node)
    env["STEPWISE_LAB_NODECMD_SERVER"] = "1" if server else "0"
    r = subprocess.run(
        cmd,
        shell=True,
        env=env,
        cwd=lab.node_root(node),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return r.returncode, r.stdout, r.stderr


def _wait(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    from stepwise.lab import control

    lab = control.up(
        Path(__file__).parent / "fixtures" / "mini.yaml", tmp_path_factory.mktemp("nc") / "lab"
    )
    yield lab
    control.down(lab.dir)


def test_a_command_answers_the_same_through_the_server_as_alone(mini):
    assert pid_alive(_server_pid(mini))
    for cmd in COMMANDS:
        assert _run(mini, "ctrl-0", cmd, server=True) == _run(mini, "ctrl-0", cmd, server=False), (
            cmd
        )
    # the node is the caller's (its environment), not the server's or the last caller's
    on_compute = _run(mini, "cmp-1", "dnf list installed", server=True)
    assert on_compute == _run(mini, "cmp-1", "dnf list installed", server=False)
    assert on_compute[0] == 0 and on_compute != _run(mini, "ctrl-0", "dnf list installed", True)


def test_the_call_runs_in_a_child_of_the_server_and_ends_with_its_caller(mini):
    server = _server_pid(mini)
    mini.write_state("ctrl-1", "faults.json", {"slow": {"df": 30}})
    try:
        env = mini.node_env("ctrl-1")
        caller = subprocess.Popen(["df", "-Pk"], env=env, cwd=mini.node_root("ctrl-1"))
        assert _wait(lambda: _children(server), 10), "the call did not reach the server"
        (child,) = _children(server)
        caller.send_signal(signal.SIGKILL)
        caller.wait()
        # the caller's death ends the command, as a kill of its process group would
        assert _wait(lambda: not pid_alive(child), 10)
        assert not _children(server)
    finally:
        mini.write_state("ctrl-1", "faults.json", {})


def test_without_the_server_each_command_runs_alone(mini):
    server = _server_pid(mini)
    expected = _run(mini, "ctrl-2", "systemctl is-active keystone", server=True)
    os.kill(server, signal.SIGTERM)
    assert _wait(lambda: not pid_alive(server), 10)
    assert _run(mini, "ctrl-2", "systemctl is-active keystone", server=True) == expected
