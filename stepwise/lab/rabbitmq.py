"""A real RabbitMQ cluster on the nodes of a `lab: {openstack: SERIES}` deployment that run the
catalog's rabbitmq service: one member per node, Debian's rabbitmq-server 3.10.

Names and ports never collide between labs or members: member k of the service (its position
in the service's instances) is `rabbit{k+1}@localhost`, its Erlang distribution listens on
`DIST_BASE + 100 * lab index + k` (loopback only), AMQP on the node's own address, port 5672.
Each lab runs its own Erlang port mapper (`epmd` on `EPMD_BASE + lab index`, a unit of the
lab-wide pseudo-node, so `lab down` ends it), and the members and `rabbitmqctl` never start
another one. The Erlang cookie is a file the lab writes (`HOME` of every member and CLI call).
Mnesia, logs and config live in the node's root.

The unit (the catalog's `rabbitmq-server`) is the lab's wrapper (`svcproc`): it starts
`rabbitmq-server` (package and configuration checked as for any unit) and waits until AMQP
listens. At `lab up` it also deploys the cluster, as a deployment tool would: the first member
forms it and sets the queue policy, each other one joins (`stop_app; join_cluster; start_app`,
one at a time under a lab-wide lock). Later it is the broker alone: a member restarted boots
on its database and rejoins its cluster by itself (RabbitMQ's own), and the OS upgrade's new
clusters (members on two Erlang/OS majors cannot cluster, `mixed_os: false`) are the
catalog's: `system_upgrade: form_cluster` removes the old cluster's database and starts a
cluster of one, `join_cluster` adds each later new-OS member with rabbitmqctl.

Queue policy: TripleO's mirrored `ha-all` (every queue but `amq.*` mirrored on every member,
promoted on shutdown), not Kolla's quorum queues: the lab's examples are TripleO-shaped, a
policy is set on the server once for every client's queues (quorum queues are chosen by each
client's `rabbit_quorum_queue`), and RabbitMQ 3.10 still mirrors.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepwise.lab.nodes import file_lock

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab

KIND = "rabbitmq"
SBIN = Path("/usr/lib/rabbitmq/bin")
AMQP_PORT = 5672
EPMD_BASE = 24400
DIST_BASE = 26000
EPMD_UNIT = "epmd"
POLICY = ("ha-all", r"^(?!amq\.).*", '{"ha-mode":"all","ha-promote-on-shutdown":"always"}')
#: one scheduler, few async threads, and no scheduler busy-waiting (an idle Erlang VM spins
#: its schedulers before sleeping: three members per lab, two labs side by side in CI, took
#: the CPU galera and keystone needed): 3 members share 2 cores with everything else
ERL_ARGS = (
    "+S 1:1 +A 4 +sbwt none +sbwtdcpu none +sbwtdio none "
    "-kernel inet_dist_use_interface {127,0,0,1} -start_epmd false"
)


class RabbitError(RuntimeError):
    """A rabbitmqctl call failed (the message has its last output)."""


def claim(services: dict[str, Any]) -> list[str]:
    """Mark the rabbitmq services of a real-OpenStack lab as real (`kind`); their names."""
    names = [n for n, s in services.items() if s.get("cluster") == "rabbitmq"]
    for n in names:
        services[n]["kind"] = KIND
    return names


def check_installed() -> None:
    """Debian's rabbitmq-server and epmd are there (fails with what to install)."""
    if not (SBIN / "rabbitmq-server").exists() or not shutil.which("epmd"):
        raise RuntimeError("rabbitmq-server not found: install the Debian package rabbitmq-server")


def real_services(lab: Lab) -> list[str]:
    """The lab's services that run a real RabbitMQ cluster."""
    return [n for n, s in lab.spec.services.items() if s.kind == KIND]


def is_real(lab: Lab, service: str) -> bool:
    return service in lab.spec.services and lab.service(service).kind == KIND


def transport_url(lab: Lab) -> str:
    """oslo.messaging's URL of every member of the lab's cluster (the services fail over
    between them, as TripleO's and Kolla's templates list them). The default user: the
    members listen on loopback addresses, where RabbitMQ lets guest in."""
    members = [lab.node(n).address for s in real_services(lab)
               for n in lab.service(s).instances]  # fmt: skip
    return "rabbit://" + ",".join(f"guest:guest@{a}:{AMQP_PORT}" for a in members) + "/"


def node_name(lab: Lab, service: str, node: str) -> str:
    return f"rabbit{lab.service(service).instances.index(node) + 1}@localhost"


def epmd_port(lab: Lab) -> int:
    return EPMD_BASE + int(lab.index)


def dist_port(index: int, k: int) -> int:
    """The Erlang distribution port of member `k` (0-based) of lab slot `index`."""
    return DIST_BASE + 100 * index + k


def loopback_ports(index: int) -> set[int]:
    """Every port on 127.0.0.1 a lab of slot `index` may listen on (its epmd, its members)."""
    return {EPMD_BASE + index} | {dist_port(index, k) for k in range(100)}


def epmd_command(lab: Lab) -> list[str]:
    """The lab's own Erlang port mapper (a unit of the lab-wide pseudo-node)."""
    return ["epmd", "-port", str(epmd_port(lab)), "-address", "127.0.0.1"]


def home(lab: Lab) -> Path:
    """The HOME of every member and CLI call: it holds the lab's Erlang cookie."""
    return lab.dir / "rabbitmq"


def write_cookie(lab: Lab) -> None:
    """The lab's shared Erlang cookie (0400, as Erlang requires)."""
    import secrets

    h = home(lab)
    h.mkdir(parents=True, exist_ok=True)
    cookie = h / ".erlang.cookie"
    if not cookie.exists():
        fd = os.open(cookie, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(16).upper())


def base(lab: Lab, node: str) -> Path:
    return lab.node_path(node, "/var/lib/rabbitmq")


def env(lab: Lab, node: str, service: str) -> dict[str, str]:
    """The member's environment (server and CLI alike)."""
    b = base(lab, node)
    k = lab.service(service).instances.index(node)
    e = dict(os.environ)
    e.update(
        HOME=str(home(lab)),
        ERL_EPMD_PORT=str(epmd_port(lab)),
        RABBITMQ_NODENAME=node_name(lab, service, node),
        RABBITMQ_NODE_IP_ADDRESS=lab.node(node).address,
        RABBITMQ_NODE_PORT=str(AMQP_PORT),
        RABBITMQ_DIST_PORT=str(dist_port(int(lab.index), k)),
        RABBITMQ_MNESIA_BASE=str(b / "mnesia"),
        RABBITMQ_LOG_BASE=str(lab.node_path(node, "/var/log/rabbitmq")),
        RABBITMQ_CONFIG_FILE=str(b / "rabbitmq"),
        RABBITMQ_CONF_ENV_FILE=str(b / "rabbitmq-env.conf"),
        RABBITMQ_ENABLED_PLUGINS_FILE=str(b / "enabled_plugins"),
        RABBITMQ_PID_FILE=str(b / "rabbitmq.pid"),
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=ERL_ARGS,
        RABBITMQ_CTL_ERL_ARGS="-start_epmd false",
    )
    return e


def ctl(
    lab: Lab, node: str, service: str, args: list[str], timeout=90
) -> subprocess.CompletedProcess[str]:
    """The real rabbitmqctl as this member (`-n NAME` in `args` names another)."""
    return subprocess.run(
        [str(SBIN / "rabbitmqctl"), *args],
        env=env(lab, node, service),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _ctl_ok(lab: Lab, node: str, service: str, args: list[str]):
    r = ctl(lab, node, service, args)
    if r.returncode != 0:
        raise RabbitError(f"rabbitmqctl {' '.join(args)}: {(r.stderr or r.stdout).strip()[-300:]}")


def amqp_answers(address: str, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, AMQP_PORT), timeout=timeout):
            return True
    except OSError:
        return False


def _prepare(lab: Lab, node: str) -> None:
    b = base(lab, node)
    b.mkdir(parents=True, exist_ok=True)
    (b / "enabled_plugins").write_text("[].\n")
    (b / "rabbitmq.conf").write_text(
        "# stepwise lab: a small member\nvm_memory_high_watermark.absolute = 256MB\n"
        "disk_free_limit.absolute = 50MB\nloopback_users = none\n"
    )
    (b / "rabbitmq-env.conf").touch()


def deployed_marker(lab: Lab, service: str, node: str) -> Path:
    """Lab-wide (outside the node's root, which a reprovision wipes): this node's member was
    deployed into the cluster once, by `lab up`."""
    return home(lab) / "deployed" / f"{service}@{node}"


def start(unit: Any) -> None:
    """Start the member (the unit's child) and bring it into its cluster."""
    lab, node, name = unit.lab, unit.node, unit.name
    _prepare(lab, node)
    # `lab up` deploys the cluster, as a deployment tool does: the first member forms it, the
    # others join. A member started later (restarted, or on a node upgraded to another OS or
    # reprovisioned, whose database the catalog removed) is the broker alone: it boots on
    # the database it has, or as a cluster of its own on none, and the catalog's
    # form_cluster / join_cluster tasks cluster it with rabbitmqctl
    deploying = not deployed_marker(lab, name, node).exists()
    e = env(lab, node, name)
    unit.child = subprocess.Popen(
        [str(SBIN / "rabbitmq-server")], env=e, stdin=subprocess.DEVNULL, cwd=str(base(lab, node))
    )
    _wait_amqp(unit, 180)
    if deploying:
        try:
            _join_or_form(lab, node, name)
        except (RabbitError, subprocess.TimeoutExpired) as exc:
            unit.child.terminate()
            print(f"error: {name}: {exc}", flush=True)
            raise SystemExit(1) from None


def _join_or_form(lab: Lab, node: str, service: str) -> None:
    """At deployment, one member at a time: join a running member deployed before, or form
    the cluster (and set the queue policy) when there is none."""
    with file_lock(home(lab) / f"{service}.join.lock"):
        formed = [
            n
            for n in lab.service(service).instances
            if n != node
            and deployed_marker(lab, service, n).exists()
            and amqp_answers(lab.node(n).address, 0.5)
        ]
        if formed:
            peer = node_name(lab, service, formed[0])
            _ctl_ok(lab, node, service, ["stop_app"])
            _ctl_ok(lab, node, service, ["join_cluster", peer])
            _ctl_ok(lab, node, service, ["start_app"])
        else:
            name, pattern, definition = POLICY
            _ctl_ok(
                lab, node, service,
                ["set_policy", name, pattern, definition, "--apply-to", "queues"],
            )  # fmt: skip
        # under the lock: the next member must find this one deployed, or it forms a second
        # cluster of its own
        marker = deployed_marker(lab, service, node)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()


def _wait_amqp(unit: Any, timeout: float) -> None:
    """Until the member's AMQP listener answers (the broker booted); fails if it exits."""
    addr = unit.lab.node(unit.node).address
    deadline = time.monotonic() + timeout
    while not amqp_answers(addr, 0.5):
        if unit.child.poll() is not None:
            print(f"error: rabbitmq-server exited ({unit.child.returncode}); see "
                  f"{unit.lab.node_path(unit.node, '/var/log/rabbitmq')}", flush=True)  # fmt: skip
            raise SystemExit(1)
        if time.monotonic() > deadline:
            unit.child.kill()
            print(f"error: rabbitmq-server did not listen on {addr}:{AMQP_PORT}", flush=True)
            raise SystemExit(1)
        time.sleep(0.3)


def health(unit: Any) -> tuple[bool, str]:
    """Healthy while the member runs and its AMQP listener answers (the app is started)."""
    if unit.child is None or unit.child.poll() is not None:
        return False, "rabbitmq-server not running"
    addr = unit.lab.node(unit.node).address
    if not amqp_answers(addr):
        return False, f"AMQP not answering on {addr}:{AMQP_PORT} (app stopped?)"
    return True, f"{node_name(unit.lab, unit.name, unit.node)} serving AMQP on {addr}"


def cluster_status(lab: Lab, service: str) -> dict[str, Any] | None:
    """`rabbitmqctl cluster_status` of the first member that answers (None: none does)."""
    for n in lab.service(service).instances:
        if not amqp_answers(lab.node(n).address, 0.5):
            continue
        r = ctl(lab, n, service, ["cluster_status", "--formatter", "json"], timeout=30)
        if r.returncode == 0:
            try:
                return dict(json.loads(r.stdout), asked=n)
            except ValueError:
                continue
    return None


def component(lab: Lab, ask: bool = True) -> list[dict[str, str]]:
    """`lab status`'s rows for the real clusters: version and each member's state (`ask`:
    from `rabbitmqctl cluster_status`, else only that it is real)."""
    rows = []
    for service in real_services(lab):
        st = cluster_status(lab, service) if ask else None
        members = [node_name(lab, service, n) for n in lab.service(service).instances]
        if not ask:
            detail = f"a RabbitMQ cluster (Debian's rabbitmq-server): {', '.join(members)}"
        elif st is None:
            detail = f"a RabbitMQ cluster, no member answering ({', '.join(members)})"
        else:
            running = set(st.get("running_nodes", []))
            known = st.get("disk_nodes", [])
            ver = next(iter(st.get("versions", {}).values()), {}).get("rabbitmq_version", "?")
            states = ", ".join(
                f"{m} {'running' if m in running else 'stopped'}"
                + ("" if m in known else " (not in this cluster)")
                for m in members
            )
            detail = (
                f"a RabbitMQ {ver} cluster of {len(running)} running (Debian's "
                f"rabbitmq-server; policy {POLICY[0]}): {states}"
            )
        rows.append({"name": service, "kind": "real", "detail": detail})
    return rows
