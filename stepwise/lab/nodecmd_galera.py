"""`galera_new_cluster`: start this node's Galera member as a new cluster, as MariaDB's script
does for systemd (it starts the unit once with `--wsrep-new-cluster`). The member's start
(`stepwise/lab/galera.py`) takes the request; MariaDB itself refuses a datadir whose
grastate.dat says it is not safe to bootstrap from."""

from __future__ import annotations

from stepwise.lab import galera
from stepwise.lab.nodecmd_base import command, err, job_timeout
from stepwise.lab.nodecmd_cluster import cluster_service
from stepwise.lab.nodes import Lab, read_unit


@command("galera_new_cluster")
def galera_new_cluster(lab: Lab, node: str, args: list[str]) -> int:
    svc = cluster_service(lab, ("galera",))
    if svc is None or node not in lab.service(svc).instances:
        return err("galera_new_cluster: command not found (mariadb-server is not installed here)")
    if read_unit(lab, node, svc):
        return 0  # systemctl start of a running unit: nothing happens
    # a unit failing to start (systemd restarting it) starts over as the new cluster
    lab.call("stop", node=node, unit=svc, timeout=job_timeout(lab, svc))
    galera.request_new_cluster(lab, node)
    res = lab.call("start", node=node, unit=svc, timeout=job_timeout(lab, svc))
    if not res.get("ok"):
        galera.request_new_cluster(lab, node, False)
        return err(
            f"Job for mariadb.service failed because the control process exited with error "
            f"code.\n{res.get('message', '')}\nSee the member's error log for details."
        )
    return 0
