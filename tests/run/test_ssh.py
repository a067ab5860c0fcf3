"""The engine over real SSH: an sshd on 127.0.0.1 on a high port, started here."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import trace_lines, write_cloud

from stepwise.model import load_deployment
from stepwise.run.inventory import Connector
from stepwise.run.resume import RunRequest, run_plan
from stepwise.run.run_options import EngineOptions
from stepwise.run.store import open_store

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sshd(tmp_path: Path):
    if not Path(SSHD).exists():
        if os.environ.get("CI"):
            pytest.fail("sshd is needed in CI: apt-get install -y openssh-server")
        pytest.skip("no sshd (apt-get install openssh-server)")
    d = tmp_path / "sshd"
    d.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key")], check=True
    )
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "client_key")], check=True
    )
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    for f in ("authorized_keys", "host_key", "client_key"):
        (d / f).chmod(0o600)
    port = _port()
    (d / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {d / 'host_key'}",
                f"PidFile {d / 'sshd.pid'}",
                f"AuthorizedKeysFile {d / 'authorized_keys'}",
                "StrictModes no",
                "UsePAM no",
                "PasswordAuthentication no",
                "PermitRootLogin prohibit-password",
                "Subsystem sftp internal-sftp",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"sshd did not start: {proc.stderr.read()}")
            time.sleep(0.1)
    yield {
        "ansible_connection": "ssh",
        "ansible_host": "127.0.0.1",
        "ansible_port": port,
        "ansible_user": getpass.getuser(),
        "ansible_ssh_private_key_file": str(d / "client_key"),
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
    }
    proc.terminate()
    proc.wait(5)


def test_update_over_ssh(tmp_path: Path, sshd):
    dep_path = write_cloud(tmp_path, computes=1)
    dep = load_deployment(dep_path)
    over = {"all": {"hosts": {n.name: dict(sshd) for n in dep.nodes}}}
    st = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    res = run_plan(
        RunRequest(
            st, dep, "update", options=EngineOptions(connector=Connector.from_inventory(over))
        )
    )
    assert res.status == "done", res.message
    assert [l.split()[1] for l in trace_lines(tmp_path, "cmp-0")] == [
        "stop",
        "packages",
        "config",
        "migrate",
        "start",
        "verify",
    ]
    # every task really went through ssh (the local connection would not need the key)
    assert all(r.status in ("ok", "changed", "skipped") for r in st.task_results(res.run_id))
