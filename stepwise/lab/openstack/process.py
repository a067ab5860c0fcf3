"""A real OpenStack service that is a process, not a WSGI API: nova's conductor, scheduler and
compute, run by the unit's wrapper (`svcproc`) as its child from the installed release's venv.

As for the APIs (`kinds/openstack_api.py`) the package step swaps the code and the config step
renders the configuration and the run file (first line: the release it was rendered for); a
unit whose run file was rendered for another release refuses to start, the restart loop of new
code on old configuration. A start lasts until the service says it is ready on the unit's
NOTIFY_SOCKET (systemd's `Type=notify`, as RDO's nova units are), not a fixed time. The unit
answers its health on its own port while the process runs:
what `systemctl is-active` says of a real unit. Whether the service is up for its peers is the
service's own (nova's service records, RPC versions), asked through its API.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from stepwise.lab import containers, repos, services
from stepwise.lab.openstack import config as openstack_config
from stepwise.lab.openstack import releases

#: how often the wait for the service's readiness looks whether it exited instead
POLL_SECONDS = 0.1


def _fail(msg: str) -> NoReturn:
    print(f"error: {msg}", flush=True)
    raise SystemExit(1)


def installed_release(unit: Any) -> releases.Release:
    """The real release the node's package stands for (sets the unit's version); fails
    without the package, without real code for its version, or on another release's
    configuration."""
    lab, node, name = unit.lab, unit.node, unit.name
    version = services.service_version(lab, node, name)  # its container's image's, or package's
    if not version:
        if containers.containerized(lab.spec, node, name):
            _fail(f"{name}: its container or the container's image is absent")
        _fail(f"{name}: package {lab.service(name).packages[0]} is not installed")
    unit.version = version
    unit.major = repos.major(unit.version)
    release = openstack_config.release_on(lab, node, name)
    if release is None:
        _fail(f"{name} {unit.version}: no real OpenStack code stands for this version")
    have = openstack_config.rendered_for(lab, node, name)
    if have != release.lock:
        _fail(
            f"{name} {releases.version_of(release, name)}: "
            f"configuration is for '{have or 'nothing'}', not "
            f"{release.lock}: apply the configuration of the new version"
        )
    return release


def start(unit: Any) -> tuple[str, int, bool]:
    """Run the service's console script as the unit's child; the unit's own address and port
    (where it answers its health)."""
    lab, node, name = unit.lab, unit.node, unit.name
    release = installed_release(unit)
    log = openstack_config.paths(lab, node, name)["log"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with _notify_socket() as (ready, address):
        with open(log, "ab") as out:  # the service logs to its output (nova.conf is the node's)
            unit.child = subprocess.Popen(
                openstack_config.command_of(lab, node, name, release),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "NOTIFY_SOCKET": address},
            )
        _wait_ready(unit, ready, log)
    unit.publish(
        real=True,
        code=f"{releases.SERVICES[name].project} {releases.version_of(release, name)}",
        release=release.label,
        venv=str(openstack_config.code_of(lab, node, name, release)),
    )
    return lab.node(node).address, lab.service(name).port, False


@contextlib.contextmanager
def _notify_socket() -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket the service tells its readiness on, as systemd's NOTIFY_SOCKET of a
    `Type=notify` unit (RDO's nova units are: oslo.service sends `READY=1` once the service is
    built and launched); its address in the abstract namespace (no file to clean up)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"stepwise-notify-{os.getpid()}-{time.monotonic_ns()}"
    try:
        sock.bind("\0" + name)
        sock.settimeout(POLL_SECONDS)
        yield sock, "@" + name
    finally:
        sock.close()


def _wait_ready(unit: Any, ready: socket.socket, log: Path) -> None:
    """Until the service says READY=1, as `systemctl start` of a `Type=notify` unit waits (the
    supervisor's start timeout bounds it); a service that exits first failed its start. A
    process that ends later (a check in its start after the notification) is a failed unit
    the supervisor restarts, as systemd's `Restart=always` does."""
    name = unit.name
    while True:
        if unit.child.poll() is not None:
            code = unit.child.returncode
            _fail(f"{name}: {releases.SERVICES[name].command} exited ({code}); see {log}")
        try:
            said = ready.recv(4096)
        except TimeoutError:
            continue
        if b"READY=1" in said.split(b"\n"):
            return


def health(unit: Any) -> tuple[bool, str]:
    """Healthy while the process runs."""
    if unit.child is None or unit.child.poll() is not None:
        return False, f"{releases.SERVICES[unit.name].command} not running"
    return True, f"{releases.SERVICES[unit.name].command} running (pid {unit.child.pid})"
