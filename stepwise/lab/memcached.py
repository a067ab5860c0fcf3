"""Real memcached on the nodes of a `lab: {openstack: SERIES}` deployment that run the
catalog's memcached service: keystone's token cache and the services' `keystone_authtoken`
cache, as TripleO and Kolla deploy it.

The unit (the catalog's `memcached`) is the lab's wrapper (`svcproc`), which checks the
package and configuration as for any unit, then runs Debian's memcached as its child on the
node's own address, port 11211, with 16 MB (a lab's tokens and catalog fit many times over);
its health is memcached answering `version`. Stand-in memcached everywhere else.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab

KIND = "memcached"
PORT = 11211
MEMORY_MB = 16


def claim(services: dict[str, Any]) -> list[str]:
    """Mark the memcached services of a real-OpenStack lab as real (`kind`); their names."""
    names = [n for n, s in services.items() if "memcached" in s["packages"]]
    for n in names:
        services[n]["kind"] = KIND
    return names


def servers(lab: Lab) -> list[str]:
    """`host:port` of every real memcached member of the lab (what the services point at)."""
    return [
        f"{lab.node(n).address}:{PORT}"
        for name, svc in lab.spec.services.items()
        if svc.kind == KIND
        for n in svc.instances
    ]


def binary() -> str:
    """Debian's memcached (fails with what to install)."""
    path = shutil.which("memcached") or "/usr/bin/memcached"
    if not os.path.exists(path):
        raise RuntimeError("memcached not found: install the Debian package memcached")
    return path


def start(unit: Any) -> None:
    """Run memcached as the unit's child on the node's address (the wrapper's checks passed)."""
    addr = unit.lab.node(unit.node).address
    try:
        exe = binary()
    except RuntimeError as exc:
        print(f"error: {exc}", flush=True)
        raise SystemExit(1) from None
    # -u root: the lab runs as whoever runs it; memcached refuses root without it
    unit.child = subprocess.Popen(
        [exe, "-l", addr, "-p", str(PORT), "-U", "0", "-m", str(MEMORY_MB), "-t", "2",
         "-c", "512", "-u", "root"],
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(100):
        if unit.child.poll() is not None:
            print(f"error: memcached exited ({unit.child.returncode})", flush=True)
            raise SystemExit(1)
        if ping(addr)[0]:
            return
        time.sleep(0.1)
    unit.child.kill()
    print(f"error: memcached did not answer on {addr}:{PORT} within 10s", flush=True)
    raise SystemExit(1)


def ping(address: str, timeout: float = 1.0) -> tuple[bool, str]:
    """Whether memcached answers `version` on `address` (its version, else why not)."""
    try:
        with socket.create_connection((address, PORT), timeout=timeout) as s:
            s.sendall(b"version\r\n")
            line = s.recv(128).decode(errors="replace").strip()
    except OSError as exc:
        return False, f"memcached not answering on {address}:{PORT}: {exc.strerror or exc}"
    if not line.startswith("VERSION "):
        return False, f"memcached answered {line[:60]!r}"
    return True, f"memcached {line.split()[1]} serving on {address}:{PORT}"


def health(unit: Any) -> tuple[bool, str]:
    """The unit is healthy while its memcached runs and answers."""
    if unit.child is None or unit.child.poll() is not None:
        return False, "memcached not running"
    return ping(unit.lab.node(unit.node).address)


def version() -> str:
    """Debian's memcached version (`memcached -V`), for `lab status`."""
    try:
        r = subprocess.run([binary(), "-V"], capture_output=True, text=True, timeout=10)
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        return "memcached (not installed)"
    return r.stdout.strip() or "memcached"


def component(lab: Lab) -> dict[str, str] | None:
    """`lab status`'s row for the real memcached, None when the lab runs none."""
    members = servers(lab)
    if not members:
        return None
    return {
        "name": "memcached",
        "kind": "real",
        "detail": f"Debian's {version()} on {', '.join(members)} (keystone's cache, "
        "the services' keystone_authtoken)",
    }
