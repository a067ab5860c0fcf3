"""A running lab unit's own state (`Unit`): what its kind's start set (version, release major,
the RPC version it sends, its child process), shared by its health answers and its signal
handlers, and published for the supervisor, the node commands and `lab status`.

Its own module so that the kinds (stepwise.lab.kinds) and the unit's process
(stepwise.lab.svcproc) both use it without importing each other.
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from stepwise.lab.nodes import Lab, write_json
from stepwise.lab.rpc import rpc_pin


def fail(msg: str) -> NoReturn:
    """The unit's start failed: say why on its log and exit 1 (the supervisor restarts it)."""
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def config_path(lab: Lab, node: str, service: str) -> Path:
    """A stand-in's own configuration file on the node."""
    return lab.node_path(node, f"/etc/{service}/{service}.conf")


def read_config(lab: Lab, node: str, service: str) -> configparser.ConfigParser:
    """A stand-in's configuration as it reads it at start."""
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(config_path(lab, node, service))
    return cp


class Unit:
    """State shared by the HTTP handler and the signal handlers."""

    def __init__(self, lab: Lab, node: str, name: str):
        self.lab, self.node, self.name = lab, node, name
        self.major = 0
        self.version = ""
        self.rpc_send: int | None = None
        self.cache: tuple[float, tuple[bool, str]] = (0.0, (False, "starting"))
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.extra: dict[str, Any] = {}  # what a real service's start said of its code

    def publish(self, **extra: Any) -> None:
        """Write what the unit runs now (its unit file): the supervisor's readiness and every
        reader's view of its version and RPC level."""
        data = {
            "pid": os.getpid(),
            "node": self.node,
            "unit": self.name,
            "version": self.version,
            "major": self.major,
            "rpc_send": self.rpc_send,
            "ready": True,
            "since": time.time(),
        }
        self.extra.update(extra)  # kept by later publications (a pin read on SIGHUP)
        data.update(self.extra)
        write_json(self.lab.unit_file(self.node, self.name), data)

    def read_pin(self) -> None:
        """The RPC version this unit sends, read at its start and on SIGHUP (`rpc_pin`)."""
        self.rpc_send = rpc_pin(self.lab, self.node, self.name, self.major)

    def child_running(self) -> bool:
        """Its child process (mariadbd, uWSGI, a console script, a server) runs."""
        return self.child is not None and self.child.poll() is None
