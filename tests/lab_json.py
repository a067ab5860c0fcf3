"""A minimal valid `lab.json` for tests that need a lab directory without bringing one up
(the connector, export's inventory, a log path): every field the typed lab spec requires
(stepwise.lab.labspec), empty, with the nodes and fields a test gives."""

from __future__ import annotations

import json
from typing import Any


def lab_json(nodes: dict[str, dict[str, Any]] | None = None, **fields: Any) -> str:
    """The text of a lab.json with `nodes` (each given a role, address, index and services
    if it lacks them) and `fields` over the empty defaults."""
    full = {
        name: {"role": "Controller", "address": "127.1.0.1", "index": i, "services": [], **node}
        for i, (name, node) in enumerate((nodes or {}).items())
    }
    spec = {
        "name": "test", "dir": "/nonexistent", "index": 1, "deployment": "test.yaml",
        "python": "python3", "vip": "127.1.0.100", "vips": {}, "db_service": None,
        "nodes": full, "services": {}, "workloads": {}, "routers": {}, "repos": {},
        "projects": [], "openstack": None, "containers": None,
    }  # fmt: skip
    spec.update(fields)
    return json.dumps(spec)
