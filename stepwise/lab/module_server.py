"""Ansible module runs on lab nodes, forked from a warm interpreter (the node-command server in
`module` mode).

Every task a plan runs on a lab node is one Ansible module run: the node's `/usr/bin/python3`
started on the AnsiballZ wrapper Ansible pipes to it, which unpacks its zip and imports
`ansible.module_utils.basic` and ~40 more files before the module does its few milliseconds of
work: ~0.11 s of CPU and wall (`benchmarks/module_runs.py`, with the compiled-code cache) of a
~0.22 s task, for every task of every unit. On a real node the same start-up is the node's;
on the lab it is the lab machine's, on the critical path of every run and of CI.

This is what Mitogen does for Ansible, kept to the lab: the lab's server runs under the nodes'
interpreter with the module_utils of the ansible-core that builds the payloads imported once,
and forks a child per module run. The child takes the task's environment, directory and
streams, and executes the wrapper Ansible sent exactly as `python3` reading it from a pipe
would: a fresh `__main__`, `sys.argv` of `['']`, the interpreter's own path. The wrapper
imports the module itself from its payload (`ansible.__path__` lists each payload's `ansible`
directory before the installed one, as the payload's own `extend_path` would); only the
module_utils come from the import already done, and they are the same files: the connection
(`ansible_plugins/connection/stepwise_lab.py`) hands a run over only when the server's
ansible-core version is the controller's and its interpreter is the task's. Anything else, a
server that is not up, or STEPWISE_LAB_NODECMD_SERVER=0, runs `python3` as before.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab

#: the interpreter the lab's nodes run modules with (`ansible_python_interpreter`)
NODE_PYTHON_BIN = "/usr/bin/python3"
#: what the connection reads to find the server: its socket, interpreter and ansible-core
INFO_FILE = "module-server.json"

#: the standard library the wrapper and `basic` import (the module_utils are imported by
#: `warm`, from the installed ansible-core)
PRELOAD = (
    "base64",
    "datetime",
    "json",
    "locale",
    "runpy",
    "shlex",
    "shutil",
    "selectors",
    "subprocess",
    "tempfile",
    "zipfile",
    "grp",
    "pwd",
    "platform",
    "hashlib",
    "syslog",
)

#: the module_utils every module run imports (what the AnsiballZ wrapper's loader pulls in)
MODULE_UTILS = (
    "ansible.module_utils._internal._ansiballz._loader",
    "ansible.module_utils.basic",
    "ansible.module_utils.common.json",
    "ansible.module_utils.common.text.converters",
)


class _PayloadFirst:
    """`ansible`'s package path in the warm interpreter: the `ansible` directory of every
    `sys.path` entry first (a module run's payload zip, which the wrapper puts first), then the
    installed ansible-core's: what the payload's `ansible/__init__.py` (`extend_path`) makes
    of it in a fresh interpreter, evaluated at each import."""

    def __init__(self, installed: str) -> None:
        self.installed = installed

    def __iter__(self) -> Any:
        for entry in list(sys.path):
            if entry:
                yield os.path.join(entry, "ansible")
        yield self.installed

    def __repr__(self) -> str:
        return f"_PayloadFirst({self.installed!r})"


def warm(installed: str) -> None:
    """Import the module_utils of the ansible-core at `installed` (its `ansible` directory)
    under a package whose path a payload extends."""
    import importlib
    import types

    pkg = types.ModuleType("ansible")
    pkg.__path__ = _PayloadFirst(installed)  # type: ignore[assignment]
    pkg.__package__ = "ansible"
    pkg.__file__ = os.path.join(installed, "__init__.py")
    sys.modules["ansible"] = pkg
    for name in MODULE_UTILS:
        importlib.import_module(name)
    # where `ansible` lives tells core code from a collection's in deprecation messages: in a
    # module run it is the payload's package, as the wrapper's fresh interpreter has it
    from ansible.module_utils._internal import _deprecator

    _deprecator._ANSIBLE_MODULE_BASE_PATH = _PayloadPackage(installed)  # type: ignore[misc]


class _PayloadPackage(os.PathLike):
    """The `ansible` package directory a module run's fresh interpreter would have: its
    payload's (the first zip on `sys.path`), else the installed one."""

    def __init__(self, installed: str) -> None:
        self.installed = installed

    def __fspath__(self) -> str:
        for entry in sys.path:
            if entry.endswith(".zip"):
                return os.path.join(entry, "ansible")
        return self.installed


def run_wrapper() -> None:
    """In the forked child: run the AnsiballZ wrapper Ansible sent (the request's second
    argument) as `python3` reading it from its standard input does."""
    import builtins
    import types

    source = sys.argv[1]
    sys.argv = [""]
    # the server's own directories (stepwise's link, the script's) are no module's
    keep = os.environ.get("STEPWISE_LAB_MODULE_PATH", "")
    sys.path[:] = ["", *(p for p in sys.path if p and p != keep)]
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    exec(compile(source, "<stdin>", "exec"), main.__dict__)  # noqa: S102 - Ansible's wrapper


def ansible_core() -> tuple[str, str]:
    """The ansible-core stepwise runs (its `ansible` directory and version)."""
    import ansible.release

    return os.path.dirname(ansible.release.__file__), ansible.release.__version__


def start(lab: Lab, env: dict[str, str]) -> None:
    """Start the lab's module server beside its node-command server (nothing when the nodes'
    interpreter is missing or STEPWISE_LAB_NODECMD_SERVER=0: module runs then start their
    own interpreter, as before)."""
    from stepwise.lab.ansible_plugins.connection.stepwise_lab import NODE_PYTHON, _code_cache
    from stepwise.lab.nodes import ENV_LAB
    from stepwise.lab.spawn import package_dir, spawn

    if os.environ.get("STEPWISE_LAB_NODECMD_SERVER") == "0" or not os.path.exists(NODE_PYTHON_BIN):
        return
    installed, version = ansible_core()
    link = str(package_dir(lab, "module-server-path"))
    name = f"{lab.socket_name}-module".lstrip("\0")
    env = dict(env, **{ENV_LAB: str(lab.dir)})
    env.pop("PYTHONHOME", None)
    # the nodes' module runs see the lab's compiled-code cache (as the connection sets it)
    env.update(
        PYTHONPATH=os.pathsep.join((link, NODE_PYTHON)),
        STEPWISE_LAB_CODE_CACHE=_code_cache(),
        STEPWISE_LAB_MODULE_PATH=link,
    )
    argv = ["stepwise.lab.nodecmd_server", str(lab.dir), name, "module", installed]
    proc = spawn(lab, env, "module-server.log", argv, NODE_PYTHON_BIN)
    info = {"socket": "\0" + name, "python": NODE_PYTHON_BIN, "ansible": version, "pid": proc.pid}
    (lab.run_dir / INFO_FILE).write_text(json.dumps(info))
