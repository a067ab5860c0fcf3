"""Real HAProxy (Debian's) as the lab's VIP: one frontend per API service and the database.

One process for the whole lab keeps it cheap; each service gets a frontend on the VIP
address with its port and a backend per node with HTTP health checks, as a TripleO
controller's HAProxy has. The database backend sends traffic to one node at a time (the
others are `backup`), like Galera behind HAProxy does, checked through clustercheck.
Taking a node out of the balancer (`pcs node standby`) sets its servers to maintenance
through the admin socket; leaving standby gives back the ones no task had drained.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from stepwise.lab.kinds import kind_named
from stepwise.lab.labspec import LabService, LabSpec
from stepwise.lab.nodes import Lab

#: A healthy server is checked every second; after a failed check, and while it is down, every
#: 300 ms, so a failure is confirmed (fall 2) and a return seen (rise 1) as fast as before. Every
#: check of a stand-in reads the state of the units it depends on: at 300 ms for every server,
#: the checks were half of what an idle classic lab spent (14% of a core; 7% since).
CHECK = "check inter 1000 fastinter 300 downinter 300 fall 2 rise 1"
#: where a node's tasks reach the load balancer's runtime API (`socat ... unix-connect:PATH`)
NODE_STATS_SOCKET = "/var/lib/haproxy/stats"


def binary() -> str:
    path = shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
    )
    if not path:
        raise RuntimeError("'haproxy' not found: install the Debian package haproxy")
    return path


def admin_socket(lab: Lab) -> Path:
    return lab.dir / "haproxy" / "admin.sock"


def backend(svc: LabService, name: str) -> str:
    """The backend of lab service `name` (`svc`: its entry in lab.json; a lab made before
    the entries had one named it after the service)."""
    return svc.frontend or name


def render(spec: LabSpec, lab_dir: Path) -> str:
    """The haproxy.cfg of a lab."""
    out = [
        "global",
        "    maxconn 2000",
        f"    stats socket {lab_dir}/haproxy/admin.sock mode 600 level admin",
        "defaults",
        "    mode http",
        "    timeout connect 1s",
        # TripleO's haproxy.cfg gives clients and servers 2m: a slow answer is an answer. At
        # 10 s a real keystone that took longer while two lab scenarios saturated both cores
        # became a 504 (a CI failure that no real cloud's load balancer would have made)
        "    timeout client 2m",
        "    timeout server 2m",
        # a stopped server refuses the check at once, whatever this is; a slow answer is what
        # it times: at 1 s, two slow checks in a row of both neutron-servers (uWSGI, two real
        # clouds on 2 cores) marked the backend empty and a client call got a 503 in CI
        "    timeout check 5s",
        "    retries 2",
        "    option redispatch",
    ]
    for name, vip in spec.vips.items():
        svc = spec.services[name]
        # named after the catalog's `frontend:` (TripleO's names), which the drains address
        out.append(f"listen {backend(svc, name)}")
        out.append(f"    bind {vip.address}:{vip.port}")
        out += kind_named(svc.kind).backend(spec, svc, CHECK)
    return "\n".join(out) + "\n"


def write_config(spec: LabSpec, lab_dir: Path) -> Path:
    path = lab_dir / "haproxy" / "haproxy.cfg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(spec, lab_dir))
    return path


def command(lab: Lab, cmd: str) -> str:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(str(admin_socket(lab)))
        s.sendall(cmd.encode() + b"\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data.decode()
    finally:
        s.close()


#: HAProxy's admin-state flags of a server: put in maintenance, drained (`set server ... state`)
_FORCED_MAINT = 0x01
_FORCED_DRAIN = 0x08
#: the node state file that keeps which of a node's servers were drained when it went standby
_STANDBY_FILE = "haproxy-standby.json"


def admin_states(lab: Lab, node: str) -> dict[str, str]:
    """`backend/server` -> maint | drain | ready for every server of `node` in the load
    balancer: the admin state HAProxy keeps for it (one `show servers state` for all)."""
    backends = {
        backend(lab.service(name), name)
        for name in lab.spec.vips
        if node in lab.service(name).instances
    }
    out = {}
    # a version line, a header, then one line per server of every backend
    # (be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state ...)
    for line in command(lab, "show servers state").splitlines()[2:]:
        cols = line.split()
        if len(cols) > 6 and cols[1] in backends and cols[3] == node:
            flags = int(cols[6])
            state = (
                "maint" if flags & _FORCED_MAINT else "drain" if flags & _FORCED_DRAIN else "ready"
            )
            out[f"{cols[1]}/{node}"] = state
    return out


def standby(lab: Lab, node: str, on: bool) -> None:
    """Pacemaker standby of `node` as the load balancer sees it: the VIPs' traffic leaves all
    its servers (maintenance), and comes back when the node leaves standby, to the servers
    that were ready before it: a server an operator's task had drained stays drained, since
    its service's own rejoin puts it back once that service is ready (a Galera member synced,
    an API answering), not the moment pacemaker lets the node host resources again."""
    states = admin_states(lab, node)
    kept = lab.read_state(node, _STANDBY_FILE)
    if on:
        if kept is None:  # a second standby keeps what the first one saw
            lab.write_state(node, _STANDBY_FILE, [s for s, st in states.items() if st == "drain"])
        for server in states:
            command(lab, f"set server {server} state maint")
        return
    drained = set(kept or [])
    for server in states:
        command(lab, f"set server {server} state {'drain' if server in drained else 'ready'}")
    lab.state_file(node, _STANDBY_FILE).unlink(missing_ok=True)
