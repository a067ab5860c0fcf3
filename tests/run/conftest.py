"""Fixtures of the run-layer tests: a small cloud whose nodes are `local` Ansible hosts, and
whose service tasks leave traces (files) under a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

SERVICES = {
    "api": {
        "plane": "control",
        "packages": ["openstack-api"],
        "availability": {"max_unavailable": 1},
        "health": {"command": "test -e TRACE/{node}.api.running"},
    },
    "worker": {
        "plane": "data",
        "packages": ["openstack-worker"],
        "depends_on": ["api"],
        "availability": {"max_unavailable": "50%"},
    },
}
STEPS = ("stop", "packages", "config", "migrate", "start", "verify")


def _tasks(service: str, step: str) -> list[dict]:
    line = f"{service} {step} {{{{ stepwise_unit }}}}"
    t = [
        {
            "name": f"{step} trace",
            "ansible.builtin.shell": f'echo "{line}" >> '
            "{{ trace }}/{{ inventory_hostname }}.log && sleep {{ step_sleep | default(0) }}",
        }
    ]
    if step == "start":
        t.append(
            {
                "ansible.builtin.file": {
                    "path": f"{{{{ trace }}}}/{{{{ inventory_hostname }}}}.{service}.running",
                    "state": "touch",
                }
            }
        )
    if step == "stop":
        t.append(
            {
                "ansible.builtin.file": {
                    "path": f"{{{{ trace }}}}/{{{{ inventory_hostname }}}}.{service}.running",
                    "state": "absent",
                }
            }
        )
    return t


def write_cloud(
    root: Path, computes: int = 2, controllers: int = 1, extra_services: dict | None = None
) -> Path:
    """Write deployment.yaml + catalog/ under root; return the deployment path."""
    import json

    cat = root / "catalog"
    cat.mkdir(parents=True, exist_ok=True)
    services = {**SERVICES, **(extra_services or {})}
    for name, spec in services.items():
        body = json.loads(json.dumps({"name": name, **spec}).replace("TRACE", str(root / "trace")))
        for wf in ("update", "upgrade"):
            body.setdefault(wf, {s: _tasks(name, s) for s in STEPS})
        body.setdefault(
            "converge",
            [
                {
                    "name": "converge",
                    "ansible.builtin.shell": f"echo '{name} converge' >> "
                    "{{ trace }}/{{ inventory_hostname }}.log",
                }
            ],
        )
        body.setdefault(
            "system_upgrade",
            {
                k: [
                    {
                        "name": k,
                        "ansible.builtin.shell": "sleep {{ step_sleep | default(0) }} && "
                        f"echo '{name} system_upgrade_{k}' >> "
                        "{{ trace }}/{{ inventory_hostname }}.log",
                    }
                ]
                for k in ("prepare", "run", "transfer_data", "cleanup")
            },
        )
        (cat / f"{name}.yaml").write_text(json.dumps(body, indent=1))

    def nodes(prefix: str, count: int) -> list[dict]:
        return [
            {
                "name": f"{prefix}-{i}",
                "vars": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "/usr/bin/python3",
                    "stepwise_flag_dir": str(root / "flags" / f"{prefix}-{i}"),
                },
            }
            for i in range(count)
        ]

    dep = {
        "name": "testcloud",
        "catalog": "catalog/",
        "vars": {"trace": str(root / "trace")},
        "roles": [
            {
                "name": "Controller",
                "tags": ["controlplane"],
                "update_serial": 1,
                "services": ["api"],
                "nodes": nodes("ctl", controllers),
            },
            {
                "name": "Compute",
                "update_serial": 2,
                "services": ["worker"],
                "nodes": nodes("cmp", computes),
            },
        ],
    }
    (root / "trace").mkdir(exist_ok=True)
    path = root / "deployment.yaml"
    path.write_text(json.dumps(dep, indent=1))
    return path


@pytest.fixture
def cloud(tmp_path: Path) -> Path:
    return write_cloud(tmp_path)


def trace_lines(root: Path, host: str) -> list[str]:
    f = root / "trace" / f"{host}.log"
    return f.read_text().splitlines() if f.exists() else []


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch):
    monkeypatch.delenv("STEPWISE_STORE", raising=False)
