"""A real OpenStack client beside the lab's HTTP probe: clouds.yaml and the client probe process.

The client probe (`client_probe.py`) runs under the client venv's python (openstacksdk from
PyPI, `locks/client.txt`), never under stepwise's, so the lab only starts it as a subprocess
and reads back the JSON-lines records it wrote, in the HTTP probe's record format with
`client:*` targets.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from stepwise.lab.openstack import client_probe, client_server
from stepwise.lab.openstack.venvs import BuildProgress, ensure_venv

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab

SCRIPT = Path(__file__).resolve().parent / "client_probe.py"
TARGET_PREFIX = "client:"
LOOPBACK = ("127.", "localhost", "::1")
MAX_RECORDS = 1_000_000


def write_clouds_yaml(
    path: Path,
    cloud_name: str,
    auth_url: str,
    username: str,
    password: str,
    project: str,
    region: str,
    domain: str = "Default",
) -> Path:
    """Write (or update) cloud `cloud_name` in the clouds.yaml at `path`, mode 0600 (it holds
    the password), so `openstack --os-cloud NAME ...` and the client probe can use it. Other
    clouds already in the file are kept. The auth URL must be on loopback (the lab's VIPs)."""
    import yaml

    host = urlsplit(auth_url).hostname or ""
    if not host.startswith(LOOPBACK):
        raise ValueError(f"auth_url {auth_url!r} is not on loopback")
    path = Path(path)
    doc: dict[str, Any] = {}
    if path.is_file():
        doc = yaml.safe_load(path.read_text()) or {}
    doc.setdefault("clouds", {})[cloud_name] = {
        "auth": {
            "auth_url": auth_url,
            "username": username,
            "password": password,
            "project_name": project,
            "user_domain_name": domain,
            "project_domain_name": domain,
        },
        "region_name": region,
        "identity_api_version": 3,
        "interface": "public",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    # written beside and renamed: a reader never sees half a file, nor a moment of a wider mode
    fd, tmp = tempfile.mkstemp(prefix=".clouds-", suffix=".yaml", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:  # mkstemp makes it 0600
            yaml.safe_dump(doc, fh, default_flow_style=False, sort_keys=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_records(path: Path) -> list[dict[str, Any]]:
    """The client probe's records in `path` (a torn last line or a foreign line is skipped)."""
    out: list[dict[str, Any]] = []
    try:
        fh = open(path)
    except FileNotFoundError:
        return out
    with fh:
        for line in fh:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if (
                isinstance(r, dict)
                and str(r.get("target", "")).startswith(TARGET_PREFIX)
                and isinstance(r.get("t"), (int, float))
                and isinstance(r.get("ok"), bool)
            ):
                out.append(
                    {
                        "t": float(r["t"]),
                        "target": r["target"],
                        "ok": r["ok"],
                        "detail": str(r.get("detail", ""))[:200],
                        "ms": float(r.get("ms") or 0.0),
                    }
                )
                if len(out) >= MAX_RECORDS:
                    break
    return out


@dataclass
class ClientProbe:
    """The client probe as a subprocess of the client venv, writing its records to `out`.

    `start()` builds the client venv if this machine has not yet (about 15 s, once) and starts
    the script; `stop()` sends SIGTERM (the script deletes what it created and exits), kills it
    if it is still there after `grace` seconds, and returns its records."""

    cloud: str
    clouds_yaml: Path
    out: Path
    interval: float = client_probe.INTERVAL
    max_seconds: float = 3600.0
    log: Path | None = None  # the script's stderr (a traceback if it could not start)
    #: image and flavor names of the small servers it creates now and then (None: none)
    server_image: str | None = None
    server_flavor: str | None = None
    grace: float = 15.0
    progress: BuildProgress | None = None
    returncode: int | None = field(default=None, init=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def command(self) -> list[str]:
        python = ensure_venv("client", self.progress) / "bin" / "python"
        return [
            str(python),
            str(SCRIPT),
            "--cloud",
            self.cloud,
            "--clouds-yaml",
            str(self.clouds_yaml),
            "--out",
            str(self.out),
            "--interval",
            str(self.interval),
            "--max-seconds",
            str(self.max_seconds),
            *(
                ["--server-image", self.server_image, "--server-flavor", self.server_flavor]
                if self.server_image and self.server_flavor
                else []
            ),
        ]

    def start(self) -> ClientProbe:
        cmd = self.command()
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text("")
        # OS_* variables of the caller would override or add to clouds.yaml: the probe uses
        # exactly the cloud it was given
        env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        err = open(self.log, "a") if self.log else subprocess.DEVNULL
        try:
            # its own session: a Ctrl-C at the terminal reaches stepwise, which stops it
            # cleanly with SIGTERM, rather than both at once
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                start_new_session=True,
            )
        finally:
            if self.log:
                err.close()  # type: ignore[union-attr]
        return self

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> list[dict[str, Any]]:
        """Stop the script (SIGTERM, then SIGKILL after `grace` s) and return its records."""
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(self.grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            self.returncode = proc.returncode
            self._proc = None
        return read_records(self.out)

    def __enter__(self) -> ClientProbe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_openstack(lab: Lab, args: list[str], timeout: float = 600.0) -> int:
    """The real `openstack` CLI (the client venv's, built at `lab up`) as the node's admin
    with the lab's clouds.yaml, as an operator's overcloudrc gives it on a controller; its
    output and exit status are the command's."""
    venv = ensure_venv("client")
    env = dict(os.environ, OS_CLIENT_CONFIG_FILE=str(Path(lab.dir) / "clouds.yaml"),
               OS_CLOUD=str(lab.spec.name))  # fmt: skip
    cmd = [str(venv / "bin" / "python"), str(venv / "bin" / "openstack"), *args]
    code = client_server.call(lab, venv, cmd[1:], env, timeout)
    if code is not None:
        if code == 124:
            print(f"openstack {' '.join(args[:3])}: no answer in {timeout:.0f}s", flush=True)
        return code
    try:
        return subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"openstack {' '.join(args[:3])}: no answer in {timeout:.0f}s", flush=True)
        return 1


def client_probe_for_lab(
    lab: Lab, max_seconds: float, interval: float = client_probe.INTERVAL
) -> ClientProbe | None:
    """The client probe of a lab that runs real OpenStack, or None: the one place that reads
    the lab spec's `openstack` entry (its cloud's name, its clouds.yaml: by default
    `<lab dir>/clouds.yaml`, where `lab up` writes it). With real nova-compute it also
    creates and deletes a small server now and then (the image and flavor `lab up` made)."""
    from stepwise.lab.openstack import nova_cells

    ostack = lab.spec.openstack
    if ostack is None or not ostack.cloud:
        return None
    clouds_yaml = Path(ostack.clouds_yaml or Path(lab.dir) / "clouds.yaml")
    run_dir, log_dir = Path(lab.run_dir), Path(lab.log_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    fd, out = tempfile.mkstemp(prefix="client-probe-", suffix=".jsonl", dir=run_dir)
    os.close(fd)
    return ClientProbe(
        cloud=ostack.cloud,
        clouds_yaml=clouds_yaml,
        out=Path(out),
        interval=ostack.client_interval if ostack.client_interval is not None else interval,
        max_seconds=max_seconds,
        log=log_dir / "client-probe.log",
        **(
            {"server_image": nova_cells.IMAGE, "server_flavor": nova_cells.FLAVOR}
            if nova_cells.computes(lab)
            else {}
        ),
    )
