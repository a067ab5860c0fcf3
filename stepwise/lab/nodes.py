"""Where a lab lives: its directory layout, node roots, addresses and the supervisor socket.

Stdlib only: node commands import this on every call, so it must load fast.
"""

from __future__ import annotations

import configparser
import fcntl
import hashlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stepwise.lab.labspec import LabNode, LabService, LabSpec, SpecError, read_spec
from stepwise.processes import pid_alive

ENV_LAB = "STEPWISE_LAB_DIR"
ENV_NODE = "STEPWISE_LAB_NODE"
MAX_LABS = 100
#: Second octet of every lab address: 127.<BASE + lab index>.x.y keeps labs apart.
ADDRESS_BASE = 100


def lab_address(index: int, third: int, fourth: int) -> str:
    """An address of lab `index` (each lab owns 127.<100+index>.0.0/16)."""
    return f"127.{ADDRESS_BASE + index}.{third}.{fourth}"


def node_address(lab_index: int, node_index: int) -> str:
    """Nodes sit in 127.L.1.1 .. 127.L.99.250; 127.L.0.x are VIPs, 127.L.200+.x workloads."""
    return lab_address(lab_index, 1 + node_index // 250, 1 + node_index % 250)


def vip_address(lab_index: int) -> str:
    return lab_address(lab_index, 0, 1)


def workload_address(lab_index: int, n: int) -> str:
    return lab_address(lab_index, 200 + n // 250, 1 + n % 250)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive `flock` on `path` (created with its directory) for the `with` block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_spec(path: Path) -> LabSpec:
    """A lab's `lab.json` as typed values; InputError (the file, the field, what to do) for
    anything else."""
    try:
        return read_spec(path)
    except SpecError as exc:
        # stepwise.errors only on this path: node commands import this module on every call
        from stepwise.errors import InputError, Problem

        raise InputError(
            Problem(
                str(exc),
                file=str(path),
                field=exc.field,
                hint="give the directory of a lab `stepwise lab up` brought up, "
                "or bring it up again",
            )
        ) from None


def read_unit(lab: Lab, node: str, unit: str) -> dict[str, Any] | None:
    """The published state of a unit if its process is alive."""
    try:
        data = json.loads(lab.unit_file(node, unit).read_text())
    except (FileNotFoundError, ValueError):
        return None
    if not pid_alive(int(data.get("pid", 0))):
        return None
    return data


class Lab:
    """A lab's on-disk state: `lab.json` (what was brought up) plus per-node roots."""

    def __init__(self, directory: str | os.PathLike[str]):
        self.dir = Path(directory).resolve()
        self._spec: LabSpec | None = None

    # --- layout -------------------------------------------------------------------------
    @property
    def spec_file(self) -> Path:
        return self.dir / "lab.json"

    @property
    def run_dir(self) -> Path:
        return self.dir / "run"

    @property
    def log_dir(self) -> Path:
        return self.dir / "log"

    @property
    def bin_dir(self) -> Path:
        return self.dir / "bin"

    @property
    def pids_file(self) -> Path:
        return self.run_dir / "pids.json"

    @property
    def supervisor_pid_file(self) -> Path:
        return self.run_dir / "supervisor.pid"

    def node_root(self, node: str) -> Path:
        return self.dir / "nodes" / node / "root"

    def node_path(self, node: str, path: str) -> Path:
        """Map an absolute path as a task sees it on the node to the file inside its root."""
        p = Path(path)
        if not p.is_absolute():
            return p
        root = self.node_root(node)
        try:
            p.resolve().relative_to(self.dir)
            return p  # already inside the lab (e.g. a temp file the connection placed)
        except ValueError:
            pass
        return root / str(p).lstrip("/")

    def unit_file(self, node: str, unit: str) -> Path:
        """Where a running emulated unit publishes its state (version, pid, RPC level)."""
        return self.run_dir / "units" / f"{node}__{unit}.json"

    @property
    def socket_name(self) -> str:
        # Abstract socket: no path-length limit and nothing left on disk after a crash.
        digest = hashlib.sha1(str(self.dir).encode()).hexdigest()[:16]
        return f"\0stepwise-lab-{digest}"

    @property
    def nodecmd_socket_name(self) -> str:
        """The abstract socket of the lab's node-command server (`nodecmd_server`)."""
        return f"{self.socket_name}-nodecmd"

    # --- spec ---------------------------------------------------------------------------
    @property
    def spec(self) -> LabSpec:
        """`lab.json` as typed values, validated when first read: the directory comes from the
        command line (`--lab`, `--dir`), so the file is input."""
        if self._spec is None:
            self._spec = _read_spec(self.spec_file)
        return self._spec

    def exists(self) -> bool:
        return self.spec_file.is_file()

    @property
    def index(self) -> int:
        return self.spec.index

    def nodes(self) -> list[str]:
        return list(self.spec.nodes)

    def node(self, name: str) -> LabNode:
        return self.spec.nodes[name]

    def service(self, name: str) -> LabService:
        return self.spec.services[name]

    # --- node state files ---------------------------------------------------------------
    def state_file(self, node: str, name: str) -> Path:
        return self.node_root(node) / "var" / "lib" / "stepwise" / name

    def read_state(self, node: str, name: str, default: Any = None) -> Any:
        try:
            return json.loads(self.state_file(node, name).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return default

    def write_state(self, node: str, name: str, data: Any) -> None:
        write_json(self.state_file(node, name), data)

    def node_lock(self, node: str) -> Any:
        """Serialise state changes of one node (Ansible forks run commands in parallel)."""
        return file_lock(self.dir / "nodes" / node / ".lock")

    def os_major(self, node: str) -> int:
        """The OS major version of a node, from its os-release file."""
        try:
            for line in (self.node_root(node) / "etc" / "os-release").read_text().splitlines():
                if line.startswith("VERSION_ID="):
                    return int(line.split("=", 1)[1].strip('"').split(".")[0])
        except (FileNotFoundError, ValueError):
            pass
        return 0

    def node_env(self, node: str) -> dict[str, str]:
        """Environment of a command run on `node`: lab commands first on PATH."""
        env = dict(os.environ)
        env["PATH"] = f"{self.bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        env[ENV_LAB] = str(self.dir)
        env[ENV_NODE] = node
        return env

    # --- supervisor ---------------------------------------------------------------------
    def call(self, op: str, timeout: float = 60.0, **args: Any) -> dict[str, Any]:
        """Send one request to the lab supervisor and return its answer."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self.socket_name)
        except OSError as exc:
            s.close()
            raise SupervisorDown(f"lab supervisor is not running ({exc.strerror or exc})") from None
        with s:
            s.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        if not buf:
            raise SupervisorDown("lab supervisor closed the connection")
        return json.loads(buf)

    def supervisor_alive(self) -> bool:
        try:
            return bool(self.call("ping", timeout=2.0).get("ok"))
        except (SupervisorDown, OSError, ValueError):
            return False


class SupervisorDown(RuntimeError):
    """The lab's supervisor cannot be reached."""


def ini_section(path: Path, section: str) -> dict[str, str]:
    """The options a section of an ini file sets itself (configparser's section view adds
    DEFAULT's: copied into another file they would land in the wrong section); empty when
    the file or the section is absent."""
    cp = configparser.ConfigParser(interpolation=None, default_section="\0")
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(path)
    return dict(cp[section]) if cp.has_section(section) else {}


def write_json(path: Path, data: Any) -> None:
    """Write atomically so concurrent readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # unique per writer: the supervisor's threads write the same files concurrently
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def pid_belongs_to(pid: int, lab_dir: Path) -> bool:
    """True when `pid` runs for this lab (its environment names the lab): guards against
    killing an unrelated process that reused a recorded PID."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read().split(b"\0")
    except OSError:
        return False
    return f"{ENV_LAB}={lab_dir}".encode() in env


def current() -> tuple[Lab, str]:
    """The lab and node a node command runs on (from the environment the connection sets)."""
    lab_dir = os.environ.get(ENV_LAB)
    node = os.environ.get(ENV_NODE)
    if not lab_dir or not node:
        raise SystemExit(f"not on a stepwise lab node ({ENV_LAB}/{ENV_NODE} not set)")
    return Lab(lab_dir), node
