"""Ansible module runs on lab nodes forked from the lab's warm interpreter
(stepwise/lab/module_server.py) give what a fresh `python3` gives: the same results, the
module from its own payload (stepwise's own module included), the task's environment and
node, a failure as a failure; a server of another ansible-core is never used."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from stepwise.lab import module_server

pytestmark = pytest.mark.lab

LIBRARY = Path(__file__).resolve().parents[2] / "stepwise" / "run" / "ansible" / "library"
# the grandparent of a shell task's shell: the process that ran the module's parent
WHO_RAN = (
    "ppid=$(awk '{print $4}' /proc/$PPID/stat); "
    "tr '\\0' ' ' < /proc/$ppid/cmdline; echo; echo \"$FOO|$STEPWISE_LAB_NODE|$PWD\""
)
TASKS = [
    {"name": "true", "ansible.builtin.command": "true", "changed_when": False},
    {"name": "who", "ansible.builtin.shell": WHO_RAN, "environment": {"FOO": "a b'c$HOME"}},
    {"name": "a node command", "ansible.builtin.command": "crudini --set /etc/m.conf s k v"},
    {"name": "fails", "ansible.builtin.command": "false", "ignore_errors": True},
    {"name": "missing", "ansible.builtin.command": "no-such-binary", "ignore_errors": True},
    # each play makes its own directory: both find it missing
    {"name": "file", "ansible.builtin.file": {"path": "/etc/{{ run }}.d", "state": "directory"}},
    {"name": "facts", "stepwise_facts": {"packages": ["kernel"], "required": False}},
]


def _play(lab, tmp_path: Path, name: str, server: bool) -> dict[str, dict]:
    """Each task's result on ctl-0 (ansible-runner's events), with or without the server."""
    import ansible_runner

    from stepwise.lab import connector

    conn = connector(lab.dir)
    (tmp_path / name).mkdir()
    r = ansible_runner.run(
        private_data_dir=str(tmp_path / name),
        playbook=[{"hosts": "all", "gather_facts": False, "vars": {"run": name}, "tasks": TASKS}],
        inventory={"all": {"hosts": {"ctl-0": dict(conn.host_vars["ctl-0"])}}},
        envvars={
            "ANSIBLE_CONNECTION_PLUGINS": os.pathsep.join(conn.plugin_dirs),
            "ANSIBLE_LIBRARY": str(LIBRARY),
            "ANSIBLE_PIPELINING": "True",
            "STEPWISE_LAB_NODECMD_SERVER": "1" if server else "0",
        },
        quiet=True,
    )
    assert r.status == "successful", r.stdout.read()
    return {
        e["event_data"]["task"]: {
            **e["event_data"]["res"],
            "failed": e["event"] == "runner_on_failed",
        }
        for e in r.events
        if e["event"] in ("runner_on_ok", "runner_on_failed")
    }


def _same(a: dict, b: dict) -> dict:
    keys = ("rc", "changed", "failed", "msg", "stderr", "state")
    return {k: (a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)}


@pytest.fixture(autouse=True)
def _ansible_on_path(monkeypatch):
    # ansible-runner looks ansible-playbook up on PATH: the one next to this interpreter
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])


def test_module_runs_through_the_server_give_what_a_fresh_interpreter_gives(make_lab, tmp_path):
    lab = make_lab("tiny.yaml", workloads_per_compute=0)
    info = json.loads((lab.run_dir / module_server.INFO_FILE).read_text())
    assert info["python"] == module_server.NODE_PYTHON_BIN
    warm = _play(lab, tmp_path, "warm", server=True)
    cold = _play(lab, tmp_path, "cold", server=False)
    for task in ("true", "a node command", "fails", "missing", "file"):
        assert _same(warm[task], cold[task]) == {}, task
    assert warm["fails"]["rc"] == 1 and warm["fails"]["failed"]
    assert warm["missing"]["failed"] and warm["missing"]["msg"] == cold["missing"]["msg"]
    # stepwise's own module comes from its payload (it is in no installed ansible-core)
    facts = warm["facts"]
    assert not facts.get("failed"), facts
    assert facts["stepwise_facts"] == cold["facts"]["stepwise_facts"]
    assert facts["stepwise_facts"]["packages"]["kernel"], facts
    # who ran the module: the lab's server, forked; the task's environment and node
    ran_by, seen = warm["who"]["stdout"].splitlines()
    assert "stepwise.lab.nodecmd_server" in ran_by and " module " in ran_by, ran_by
    cold_ran_by, cold_seen = cold["who"]["stdout"].splitlines()
    assert "nodecmd_server" not in cold_ran_by, cold_ran_by
    assert seen == cold_seen == f"a b'c$HOME|ctl-0|{lab.node_root('ctl-0')}"


def test_a_server_of_another_ansible_core_is_never_used(make_lab, tmp_path):
    lab = make_lab("tiny.yaml", workloads_per_compute=0)
    info_file = lab.run_dir / module_server.INFO_FILE
    info = json.loads(info_file.read_text())
    info_file.write_text(json.dumps({**info, "ansible": "0.0.1"}))
    ran_by = _play(lab, tmp_path, "other", server=True)["who"]["stdout"].splitlines()[0]
    assert "nodecmd_server" not in ran_by, ran_by


@pytest.mark.parametrize(
    "cmd",
    [
        "/bin/sh -c '/usr/bin/python3 && sleep 0'",
        "/bin/sh -c 'FOO='\"'\"'a b'\"'\"' /usr/bin/python3 && sleep 0'",
    ],
)
def test_the_pipelined_module_command_is_recognised(cmd):
    from stepwise.lab.ansible_plugins.connection.stepwise_lab import _pipelined_module_env

    env = _pipelined_module_env(cmd, "/usr/bin/python3")
    assert env == ({} if "FOO" not in cmd else {"FOO": "a b"})


@pytest.mark.parametrize(
    "cmd",
    [
        "/bin/sh -c '/usr/bin/python3.9 && sleep 0'",  # another interpreter
        "/bin/sh -c 'FOO=$(id) /usr/bin/python3 && sleep 0'",  # a shell would run this
        "/bin/sh -c 'FOO=`id` /usr/bin/python3 && sleep 0'",
        "/bin/sh -c '/usr/bin/python3 && sleep 0; rm -rf /x'",
        "/bin/sh -c 'echo hi'",
        "/bin/bash -c '/usr/bin/python3 && sleep 0'",
        "/bin/sh -c 'cd /tmp; /usr/bin/python3 && sleep 0'",
    ],
)
def test_any_other_command_runs_in_a_shell_as_before(cmd):
    from stepwise.lab.ansible_plugins.connection.stepwise_lab import _pipelined_module_env

    assert _pipelined_module_env(cmd, "/usr/bin/python3") is None
