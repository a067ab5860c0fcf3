# Shipped with stepwise: Ansible reaches stepwise lab nodes through this connection.
"""Run tasks on a stepwise lab node: local subprocesses in the node's environment."""

from __future__ import annotations

DOCUMENTATION = """
name: stepwise_lab
short_description: run tasks on a stepwise lab node
description:
  - Commands run as local processes with the lab's node commands first on PATH and the node
    named in the environment, so dnf, systemctl, crudini, pcs ... act on that node.
  - Files put or fetched map absolute paths into the node's root directory.
author: stepwise
version_added: "2.19"
options:
  stepwise_lab_dir:
    description: the lab's state directory
    vars: [{name: stepwise_lab_dir}]
    required: true
  stepwise_lab_node:
    description: >-
      the node's name in the lab (the inventory names it; a host it does not name is the node
      of its inventory name). The last variable found wins: a delegated task's
      inventory_hostname is the host it was delegated from, its stepwise_lab_node the
      delegated host's
    vars: [{name: inventory_hostname}, {name: stepwise_lab_node}]
    required: true
"""

import os
import shutil
import subprocess

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.connection import ConnectionBase

ENV_LAB = "STEPWISE_LAB_DIR"
ENV_NODE = "STEPWISE_LAB_NODE"
# the node Python's compiled-code cache for module payloads (nodepython/sitecustomize.py)
NODE_PYTHON = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "nodepython"
)


def _code_cache():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "stepwise", "lab", "module-code-v1")


class Connection(ConnectionBase):
    """A connection to one lab node."""

    transport = "stepwise_lab"
    has_pipelining = True

    def _lab(self):
        lab_dir = os.path.realpath(self.get_option("stepwise_lab_dir"))
        node = self.get_option("stepwise_lab_node")
        root = os.path.join(lab_dir, "nodes", node, "root")
        if not os.path.isdir(root):
            raise AnsibleConnectionFailure(f"stepwise lab node {node} not found in {lab_dir}")
        if os.path.exists(os.path.join(lab_dir, "run", "down", node)):
            raise AnsibleConnectionFailure(f"lab node {node} is down (unreachable)")
        return lab_dir, node, root

    def _connect(self):
        self._lab()
        self._connected = True
        return self

    def _env(self):
        lab_dir, node, _ = self._lab()
        env = dict(os.environ)
        env["PATH"] = os.path.join(lab_dir, "bin") + ":" + env.get("PATH", "/usr/bin:/bin")
        env[ENV_LAB] = lab_dir
        env[ENV_NODE] = node
        # module runs compile their zipped module_utils once per machine, not once per run
        # (benchmarks/module_runs.py measures it against STEPWISE_LAB_NO_CODE_CACHE=1)
        if not os.environ.get("STEPWISE_LAB_NO_CODE_CACHE"):
            paths = (NODE_PYTHON, env.get("PYTHONPATH"))
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
            env["STEPWISE_LAB_CODE_CACHE"] = _code_cache()
        return env

    def _map(self, path):
        lab_dir, _, root = self._lab()
        path = os.path.abspath(path)
        if path == lab_dir or path.startswith(lab_dir + os.sep):
            return path
        return os.path.join(root, path.lstrip("/"))

    def exec_command(self, cmd, in_data=None, sudoable=True):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        _, _, root = self._lab()
        proc = subprocess.Popen(
            cmd,
            shell=True,
            executable="/bin/sh",
            env=self._env(),
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        stdout, stderr = proc.communicate(in_data)
        return proc.returncode, stdout, stderr

    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        dst = self._map(out_path)
        if not os.path.exists(to_bytes(in_path)):
            raise AnsibleError(f"file or module does not exist: {in_path}")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(in_path, dst)

    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        shutil.copyfile(self._map(in_path), out_path)

    def close(self):
        self._connected = False
