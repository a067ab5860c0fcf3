"""Lab fixtures: every lab brought up here is always taken down (finalizers), even on failure."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


class Node:
    """Run node commands on one lab node, as an Ansible command task would."""

    def __init__(self, lab, name: str):
        self.lab, self.name = lab, name

    def run(self, cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run(
            cmd,
            shell=True,
            env=self.lab.node_env(self.name),
            cwd=self.lab.node_root(self.name),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and r.returncode != 0:
            raise AssertionError(f"{self.name}: {cmd} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r


@pytest.fixture
def make_lab(tmp_path, monkeypatch):
    from stepwise.lab import control

    monkeypatch.setenv("STEPWISE_LAB_HOME", str(tmp_path / "labs"))
    made = []

    def make(name: str = "mini.yaml", **kw):
        lab = control.up(FIXTURES / name, tmp_path / f"lab{len(made)}", **kw)
        made.append(lab)
        return lab

    yield make
    for lab in made:
        control.down(lab.dir)


@pytest.fixture
def lab(make_lab):
    return make_lab()


@pytest.fixture
def node(lab):
    return lambda name: Node(lab, name)


@pytest.fixture(scope="session")
def real_cloud(tmp_path_factory):
    """A real keystone, placement and glance (tests/lab/openstack_cloud.py) for the client probe
    and tempest tests, started once per session; to be replaced by a lab running real OpenStack."""
    from tests.lab.openstack_cloud import start_cloud

    cloud = start_cloud(tmp_path_factory.mktemp("cloud"))
    yield cloud
    cloud.stop()
