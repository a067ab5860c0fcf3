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

import json
import os
import selectors
import shlex
import shutil
import subprocess

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase
from ansible.release import __version__ as ansible_version


def _load_nodecmd_client():
    """The client half of the lab's fork servers, from its file beside this plugin (it
    imports nothing of stepwise; loaded by path, nothing added to Ansible's sys.path)."""
    import importlib.util

    path = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        "nodecmd_client",
        "stepwise_nodecmd_client.py",
    )
    spec = importlib.util.spec_from_file_location("_stepwise_nodecmd_client", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nodecmd_client = _load_nodecmd_client()

ENV_LAB = "STEPWISE_LAB_DIR"
ENV_NODE = "STEPWISE_LAB_NODE"
# the node Python's compiled-code cache for module payloads (nodepython/sitecustomize.py)
NODE_PYTHON = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "nodepython"
)


def _code_cache():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "stepwise", "lab", "module-code-v1")


def _pipelined_module_env(cmd, python):
    """The environment assignments of a pipelined module run's command, when `cmd` is exactly
    the one Ansible builds for it with interpreter `python` (`/bin/sh -c '[VAR=value ...]
    PYTHON && sleep 0'`, each value quoted by shlex); None for any other command."""
    try:
        outer = shlex.split(cmd)
    except ValueError:
        return None
    if len(outer) != 3 or outer[:2] != ["/bin/sh", "-c"]:
        return None
    inner = outer[2]
    try:
        words = shlex.split(inner)
    except ValueError:
        return None
    if len(words) < 4 or words[-4:] != [python, "&&", "sleep", "0"]:
        return None
    env = {}
    for word in words[:-4]:
        key, sep, value = word.partition("=")
        if not sep or not key.isidentifier():
            return None
        env[key] = value
    # only the form Ansible writes: anything a shell would read otherwise stays the shell's
    expected = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), python])
    return env if inner == expected + " && sleep 0" else None


def _read_both(out_fd, err_fd):
    """Everything written to two pipes until both are closed (then closed here)."""
    chunks = {out_fd: [], err_fd: []}
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        open_fds = set(chunks)
        while open_fds:
            for key, _ in sel.select():
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
                    open_fds.discard(key.fd)
    return b"".join(chunks[out_fd]), b"".join(chunks[err_fd])


class Connection(ConnectionBase):
    """A connection to one lab node."""

    transport = "stepwise_lab"
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # the lab's module server, looked up at the first module run (False: none to use)
        self._module_server_info = None

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
        ran = self._module_run_in_server(cmd, in_data, root)
        if ran is not None:
            return ran
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

    def _module_server(self):
        """The lab's module server (`stepwise.lab.module_server`) as its file names it, when it
        runs this controller's ansible-core: (socket, interpreter), else None."""
        if self._module_server_info is False:
            return None
        info = None
        if os.environ.get("STEPWISE_LAB_NODECMD_SERVER") != "0":
            lab_dir, _, _ = self._lab()
            try:
                with open(os.path.join(lab_dir, "run", "module-server.json")) as fh:
                    found = json.load(fh)
                if found.get("ansible") == ansible_version:
                    info = (found["socket"], found["python"])
            except (OSError, ValueError, KeyError, TypeError):
                info = None
        self._module_server_info = info if info is not None else False
        return info

    def _module_run_in_server(self, cmd, in_data, root):
        """A pipelined module run (`/bin/sh -c '[VAR=value ...] PYTHON && sleep 0'` with the
        wrapper on standard input) forked from the lab's warm interpreter: (rc, stdout,
        stderr), or None when this is no such run or no server takes it (then it runs here)."""
        if not in_data:
            return None
        server = self._module_server()
        if server is None:
            return None
        socket_name, python = server
        env = _pipelined_module_env(cmd, python)
        if env is None:
            return None
        env = {**self._env(), **env}
        devnull = os.open(os.devnull, os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            sock = nodecmd_client.start(
                socket_name,
                [python, to_text(in_data, errors="surrogate_or_strict")],
                env,
                root,
                (devnull, out_w, err_w),
            )
        finally:
            for fd in (devnull, out_w, err_w):
                os.close(fd)
        if sock is None:
            os.close(out_r)
            os.close(err_r)
            return None
        stdout, stderr = _read_both(out_r, err_r)
        return nodecmd_client.status(sock), stdout, stderr

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
