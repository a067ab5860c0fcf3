"""Where the OS upgrade forms the new clusters: a cluster that cannot span two OS majors
(corosync, Galera) starts over on the new OS. One first new-OS node forms each such cluster
(its catalog's `system_upgrade: form_cluster`); every later new-OS node joins that one
(`join_cluster`), which may have to run on the forming node (`pcs cluster node add`): the
join's unit names it in `stepwise_cluster_seed` (service -> node)."""

from __future__ import annotations

from stepwise.model.vocab import SystemUpgradeKey
from stepwise.plan.os_cloud import OsCloud

Work = dict[str, tuple[str, ...]]

#: the join's variable: service -> the node that formed its new cluster
SEED_VAR = "stepwise_cluster_seed"


def seeds(c: OsCloud) -> dict[str, str]:
    """service -> the first new-OS node that forms its new cluster: the service's bootstrap
    node when it is a first node, else the first of the first nodes running it (in the
    roles' order). The same answer in every command of the procedure: the first nodes are
    recorded (`first@ROLE=NODE`) by step 2. Computed once per OsCloud: every later node's
    visit asks it (10,000 nodes in a large plan)."""
    if c.cluster_seeds is not None:
        return c.cluster_seeds
    catalog = c.dep.catalog
    firsts = [c.first[r.name] for r in c.sensitive]
    out: dict[str, str] = {}
    for n in firsts:
        for s in c.internal(n):
            if s in out or not catalog[s].system_upgrade.get(SystemUpgradeKey.FORM_CLUSTER):
                continue
            boot = c.dep.bootstrap_node(s)
            on = [m for m in firsts if s in c.internal(m)]
            out[s] = boot.name if boot is not None and boot.name in on else n
    c.cluster_seeds = out
    return out


def forming(c: OsCloud, on: Work) -> Work:
    """node -> the services whose new cluster it forms, among `on` (node -> services)."""
    seed = seeds(c)
    work = {n: tuple(s for s in ss if seed.get(s) == n) for n, ss in on.items()}
    return {n: ss for n, ss in work.items() if ss}


def joining(c: OsCloud, on: Work) -> Work:
    """node -> the services whose new cluster it joins (formed on another node)."""
    seed = seeds(c)
    catalog = c.dep.catalog
    work = {
        n: tuple(
            s
            for s in ss
            if catalog[s].system_upgrade.get(SystemUpgradeKey.JOIN_CLUSTER) and seed.get(s) != n
        )
        for n, ss in on.items()
    }
    return {n: ss for n, ss in work.items() if ss}


def seed_vars(c: OsCloud, work: Work) -> dict[str, dict[str, str]]:
    """The join's play variable for `work`: each joined service's forming node."""
    seed = seeds(c)
    return {SEED_VAR: {s: seed[s] for ss in work.values() for s in ss if s in seed}}
