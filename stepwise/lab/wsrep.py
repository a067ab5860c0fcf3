"""A Galera member's wsrep configuration: the provider library (galera-4), its ports, and
the part of a member's my.cnf that makes a MariaDB server a member of a cluster.

A leaf below both the MariaDB server (`mariadb.py`, whose template datadir is written by a
one-member cluster) and the cluster's lifecycle (`galera.py`).
"""

from __future__ import annotations

import os

GCOMM_PORT = 4567
IST_PORT = 4568
SST_PORT = 4444
#: mariabackup streams a hot copy (the donor keeps serving); rsync SST as root fails on the
#: joiner (its daemon drops to `nobody`, which cannot read a 0700 tree) and running the
#: members as `mysql` cannot reach node roots under a private (0700) directory.
SST_METHOD = "mariabackup"
PROVIDERS = (
    "/usr/lib/galera/libgalera_smm.so",
    "/usr/lib/libgalera_smm.so",
    "/usr/lib64/galera-4/libgalera_smm.so",
)


def provider() -> str:
    """Path of galera-4's provider library, or a clear error naming the Debian package."""
    for p in PROVIDERS:
        if os.path.exists(p):
            return p
    raise RuntimeError("galera-4's libgalera_smm.so not found: install the Debian package galera-4")


def wsrep_cnf(name: str, node: str, address: str, members: list[str]) -> str:
    """The Galera part of a member's my.cnf (appended after its [mysqld] options)."""
    gcomm = ",".join(f"{a}:{GCOMM_PORT}" for a in members)
    opts = ";".join(
        [
            f"gmcast.listen_addr=tcp://{address}:{GCOMM_PORT}",
            f"ist.recv_addr={address}:{IST_PORT}",
            # the default 128M ring buffer would be most of a member's memory
            "gcache.size=16M",
            # join messages resent every 0.2 s, not 1 s: on loopback a member is in
            # the group's view a second sooner (lab up joins two members)
            "evs.join_retrans_period=PT0.2S",
        ]
    )
    return f"""binlog_format=ROW
innodb_autoinc_lock_mode=2
wsrep_on=ON
wsrep_provider={provider()}
wsrep_cluster_name={name}
wsrep_cluster_address=gcomm://{gcomm}
wsrep_node_name={node}
wsrep_node_address={address}
wsrep_sst_receive_address={address}:{SST_PORT}
wsrep_provider_options={opts}
wsrep_sst_method={SST_METHOD}
wsrep_sst_auth=root:
wsrep_sync_wait=0
[sst]
sockopt=bind={address}
sst-log-archive=0
"""
