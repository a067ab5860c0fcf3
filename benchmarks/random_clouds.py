"""Random cloud shapes for the plan-quality benchmark: what `chain_cloud` fixes, drawn.

A drawn cloud has a database and a message queue (quorum clusters), a chain of 1-8 control
services on the controllers, one to four compute roles whose agents depend on each other in
a chain of 1-8 hanging on a random link of the control chain (chains that cross planes), a
networkers' agent and a storage chain of 1-8 hanging on it or on a control service, with
availability rules from `max_unavailable` 1 % to 50 %, `min_available` and quorums, and
`update_serial` 1-100 per role, over 100 to 10,000 nodes (log-uniform). The same seed draws the
same clouds.
"""

from __future__ import annotations

import math
import random
from typing import Any

from benchmarks.clouds import _svc, deployment_of
from stepwise.model.deployment import Deployment


def _data_rule(rng: random.Random, smallest_role: int) -> dict[str, Any]:
    """A data-plane rule that its smallest role can keep: a share out, or a count kept in."""
    if rng.random() < 0.8 or smallest_role < 3:
        return {"max_unavailable": f"{rng.choice((1, 2, 5, 10, 20, 25, 33, 50))}%"}
    return {"min_available": rng.randint(1, max(1, smallest_role // 2))}


def _chain(
    rng: random.Random, prefix: str, length: int, head: tuple[str, ...], rule: dict[str, Any]
) -> list[dict[str, Any]]:
    """`length` data-plane services, each depending on the one before, the first on `head`."""
    return [
        _svc(
            f"{prefix}{i}",
            "data",
            deps=head if i == 0 else (f"{prefix}{i - 1}",),
            rule=rule,
            rpc="rpc" if rng.random() < 0.5 else None,
            leave=i == 0 and rng.random() < 0.5,
            durations={"leave": float(rng.choice((30, 60, 120)))} if i == 0 else None,
        )
        for i in range(length)
    ]


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def random_cloud_specs(
    rng: random.Random, nodes: int | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Service specs and the deployment spec of one drawn cloud (see the module's docstring)."""
    nodes = nodes or int(round(math.exp(rng.uniform(math.log(100), math.log(10_000)))))
    controllers = rng.choice((3, 3, 5))
    ctl_len, compute_len, storage_len = (rng.randint(1, 8) for _ in range(3))
    infra = [
        _svc("db", "infra", rule={"quorum": "majority"}, cluster="galera", leave=True),
        _svc("mq", "infra", rule={"quorum": "majority"}, cluster="rabbitmq", leave=True),
    ]
    # a control service's schema: offline (not rolling: an announced window), migrated while it
    # rolls, or upstream's expand/contract
    schemas = [
        rng.choice(("offline", "migrate", "migrate", "expand_contract")) for _ in range(ctl_len)
    ]
    ctl = [
        _svc(
            f"ctl{i}",
            "control",
            deps=("db", "mq") if i == 0 else (f"ctl{i - 1}",),
            rule={"min_available": rng.randint(1, controllers - 1)},
            rolling=schema != "offline",
            rpc="rpc",
            migrate=schema != "expand_contract",
            schema="expand_contract" if schema == "expand_contract" else None,
        )
        for i, schema in enumerate(schemas)
    ]
    networkers = rng.randint(2, 12)
    storage_n = max(2, int(nodes * rng.uniform(0.05, 0.2)))
    compute_n = max(2, nodes - controllers - 3 - networkers - storage_n)
    compute_roles = rng.randint(1, 4)
    sizes = [s for s in _split(compute_n, compute_roles) if s]
    compute = _chain(
        rng, "agentA", compute_len, (f"ctl{rng.randrange(ctl_len)}",), _data_rule(rng, min(sizes))
    )
    net = _svc(
        "netagent",
        "data",
        deps=(f"ctl{rng.randrange(ctl_len)}",),
        rule={"min_available": rng.randint(1, networkers - 1)},
        rpc="rpc",
    )
    storage_head = "netagent" if rng.random() < 0.5 else f"ctl{rng.randrange(ctl_len)}"
    storage = _chain(rng, "agentB", storage_len, (storage_head,), _data_rule(rng, storage_n))
    roles: list[dict[str, Any]] = [
        {
            "name": "Controller",
            "tags": ["controlplane"],
            "services": [s["name"] for s in ctl],
            "nodes": {"count": controllers, "name": "controller-{index}"},
        },
        {
            "name": "Database",
            "tags": ["controlplane"],
            "services": ["db", "mq"],
            "nodes": {"count": 3, "name": "database-{index}"},
        },
        {
            "name": "Networker",
            "update_serial": rng.randint(1, networkers),
            "services": ["netagent", "agentA0"],
            "nodes": {"count": networkers, "name": "networker-{index}"},
        },
    ]
    for i, n in enumerate(sizes):
        roles.append(
            {
                "name": f"Compute{i}",
                "update_serial": rng.randint(1, 100),
                "services": [s["name"] for s in compute],
                "nodes": {"count": n, "name": f"compute{i}-{{index}}"},
            }
        )
    roles.append(
        {
            "name": "Storage",
            "update_serial": rng.randint(1, 100),
            "services": [s["name"] for s in storage],
            "nodes": {"count": storage_n, "name": "storage-{index}"},
        }
    )
    shape = f"c{ctl_len}a{compute_len}b{storage_len}r{len(sizes)}"
    return infra + ctl + compute + [net] + storage, {
        "name": f"random-{shape}-{nodes}",
        "roles": roles,
    }


def random_cloud(rng: random.Random, nodes: int | None = None) -> Deployment:
    """`random_cloud_specs` built in memory (no files)."""
    return deployment_of(*random_cloud_specs(rng, nodes))
