"""Boot a lab's cloud once its nodes and supervisor exist: the database cluster formed (a new
cluster on its first member, the others joining), the VIP, the services (real OpenStack's
databases, registration and cells on the way), the workloads and routers; then the wait
until every one of them is healthy."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from stepwise.errors import Problem, StepwiseError
from stepwise.lab import galera, mariadb
from stepwise.lab import services as lab_services
from stepwise.lab.nodes import Lab
from stepwise.lab.status import status

Progress = Callable[[str], None]


def boot_all(lab: Lab, progress: Progress) -> None:
    """Database first (services check their schema on start), then everything else."""
    db = lab.spec.db_service
    nodes = lab.nodes()

    # a node's boot waits for its slowest unit (a real RabbitMQ member: over a minute loaded)
    wait = 120.0 + max(s.start_timeout or 0.0 for s in lab.spec.services.values())

    def boot(node: str, units: list[str]) -> dict[str, Any]:
        return lab.call("boot", node=node, units=units, timeout=wait)

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as ex:
        if db:
            # as a deployment tool forms it: a new cluster on the first member, then the
            # others join it (a member alone does not form one)
            first, *rest = lab.service(db).instances
            galera.request_new_cluster(lab, first)
            boot(first, [db])
            list(ex.map(lambda n: boot(n, [db]), rest))
            for p in lab.spec.projects:
                lab_services.set_schema(lab, p, 1)
        # The VIP before the services: they reach their database through it.
        lab.call("start", node="_lab", unit="haproxy")
        if db:
            wait_db_vip(lab)
            progress(f"database up on {len(lab.service(db).instances)} node(s)")
        real = lab.spec.openstack
        if real:
            from stepwise.lab.openstack import bootstrap, nova_cells
            from stepwise.lab.openstack.config import is_real_placed

            cells = (
                (lambda: nova_cells.databases(lab, progress))
                if is_real_placed(lab, "nova_api")
                else None
            )
            bootstrap.databases(lab, progress, beside=cells)
        # real nova-compute reports to placement when it starts: once keystone lists placement
        late = {"nova_compute"} if real and nova_cells.computes(lab) else set()
        list(ex.map(lambda n: boot(n, [s for s in lab.node(n).services
                                       if s != db and s not in late]), nodes))  # fmt: skip
        if real:
            bootstrap.register(lab, progress)
        if late:
            nova_cells.wait_conductors(lab)
            list(ex.map(lambda n: boot(n, sorted(late)), nova_cells.computes(lab)))
            nova_cells.discover(lab, progress)
            nova_cells.servers(lab, progress)
    wl = lab_services.workloads(lab)
    from stepwise.lab import routers

    # Waited for: `lab up` returning before a workload listens made a probe started right
    # after it count a refused connection as the upgrade's (a CI failure of the drain test).
    units = [(st["host"], vm) for vm, st in wl.items()] + routers.masters(lab)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(units)))) as ex:
        list(ex.map(lambda nu: lab.call("start", node=nu[0], unit=nu[1], timeout=60), units))
    progress(f"services started on {len(nodes)} node(s), {len(wl)} workload(s), VIP {lab.spec.vip}")


def wait_db_vip(lab: Lab, timeout: float = 15.0) -> None:
    vip = lab.spec.vips[lab.spec.db_service]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            mariadb.execute(vip.address, vip.port, "SELECT 1")
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.1)


def wait_healthy(lab: Lab, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    bad: list[str] = []
    while time.monotonic() < deadline:
        st = status(lab, ask_clusters=False)
        bad = [
            f"{n['name']}/{s['name']}: {s['health']}"
            for n in st["nodes"]
            for s in n["services"]
            if not s["healthy"]
        ]
        bad += [f"{w['name']}: {w['state']}" for w in st["workloads"] if not w["healthy"]]
        bad += [f"{r['name']}: not forwarding" for r in st["routers"] if not r["forwarding"]]
        if not bad:
            return
        time.sleep(0.3)
    raise StepwiseError(
        Problem(
            "lab did not become healthy: " + "; ".join(bad[:8]) + _db_log_tails(lab, bad),
            file=str(lab.log_dir),
            hint="see the per-node logs in the lab's log directory",
        )
    )


def _db_log_tails(lab: Lab, bad: list[str]) -> str:
    """The last lines of the logs of the database members among `bad`: where a member stuck
    joining says why (the lab's directory is gone by the time a CI run is read)."""
    db = lab.spec.db_service
    out = []
    for line in bad:
        node, _, rest = line.partition("/")
        if db and rest.startswith(f"{db}:"):
            log = mariadb.error_log(lab.node_root(node))
            try:
                tail = log.read_text(errors="replace").splitlines()[-12:]
            except OSError:
                continue
            out.append(f"\n--- {node}: {log} (last lines)\n" + "\n".join(tail))
    return "".join(out)
