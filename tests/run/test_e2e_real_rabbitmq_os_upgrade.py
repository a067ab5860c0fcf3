"""The seed's OS upgrade of a real three-member RabbitMQ cluster (issue 33, `-m e2e`): the
new-OS members form a new cluster with the catalog's own commands.

The first new-OS member's old database goes (`rm -rf /var/lib/rabbitmq/mnesia`: its queues
are transient), it starts as a cluster of one and gets the mirroring policy; each later one
joins it (`rabbitmqctl join_cluster rabbit@messaging-0`) once its own OS upgrade is done. After
each node's step 6 the new cluster holds exactly the new-OS members, all running; at the end
it is all three, and nothing of the old cluster (a vhost made before step 1) is in it.
A deployment without online data migrations converges too (step 10 is then a gate).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from stepwise.lab import control, rabbitmq
from stepwise.lab.nodes import Lab
from tests.run.seed_table import seed_cli

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "tests" / "run" / "fixtures" / "rabbitmq-mini.yaml"
OLD_VHOST = "before-the-os-upgrade"

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def _ctl(lab: Lab, node: str, *args: str) -> str:
    r = subprocess.run(["rabbitmqctl", *args], env=lab.node_env(node), cwd=lab.node_root(node),
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, f"rabbitmqctl {' '.join(args)}: {r.stdout}\n{r.stderr}"
    return r.stdout


def _cluster(lab: Lab, node: str) -> tuple[list[str], list[str]]:
    st = json.loads(_ctl(lab, node, "cluster_status", "--formatter", "json"))
    return sorted(st["disk_nodes"]), sorted(st["running_nodes"])


def test_the_new_os_members_form_a_new_rabbitmq_cluster(tmp_path: Path, monkeypatch):
    from stepwise.model import load_deployment
    from stepwise.plan.commands import seed_commands
    from stepwise.run.store import open_store

    monkeypatch.setenv("STEPWISE_LAB_HOME", str(tmp_path / "labs"))
    short = Path(tempfile.mkdtemp(prefix="swr-"))  # the lab's unix sockets: 108-byte paths
    lab_dir = short / "lab"
    dep = tmp_path / MINI.name
    dep.write_text(MINI.read_text())
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    log: list[str] = []
    sw = seed_cli(dep, lab_dir, store_url, log)

    lab = control.up(dep, lab_dir, timeout=240)
    try:
        nodes = lab.service("rabbitmq").instances
        names = {n: rabbitmq.node_name(lab, "rabbitmq", n) for n in nodes}
        assert _cluster(lab, nodes[0]) == (sorted(names.values()), sorted(names.values()))
        _ctl(lab, nodes[0], "add_vhost", OLD_VHOST)
        assert OLD_VHOST in _ctl(lab, nodes[2], "list_vhosts", "-q").split()  # cluster-wide
        sw("discover")
        new_os: list[str] = []
        for argv in map(list, seed_commands(load_deployment(dep), "R2")):
            sw(*argv)
            if argv[:2] == ["upgrade", "run"] and "--tags" not in argv:
                new_os.append(argv[argv.index("--limit") + 1])
                want = sorted(names[n] for n in new_os)
                assert _cluster(lab, new_os[0]) == (want, want), (new_os, log[-1])
                assert OLD_VHOST not in _ctl(lab, new_os[-1], "list_vhosts", "-q").split()
                assert "ha-all" in _ctl(lab, new_os[-1], "list_policies", "-q")

        assert new_os == list(nodes)
        status = control.status(lab)
        assert {(n["name"], n["os_major"], n["release"]) for n in status["nodes"]} == {
            (n, 9, "R2") for n in nodes
        }
        assert all(s["healthy"] for n in status["nodes"] for s in n["services"])
        everyone = sorted(names.values())
        for n in nodes:
            assert _cluster(lab, n) == (everyone, everyone)
        store = open_store(store_url)
        units = [u for r in store.runs("rabbitmq-mini", limit=1000) for u in store.units(r.id)]
        done = {
            (u.step, n) for u in units if u.state == "done" and "rabbitmq" in u.services
            for n in u.nodes
        }  # fmt: skip
        assert ("form_cluster", nodes[0]) in done
        assert {("join_cluster", n) for n in nodes[1:]} <= done, sorted(done)
        assert not {("form_cluster", n) for n in nodes[1:]} & done
        # converged with no online data migration to gate it
        assert [u.step for u in units if u.stage == "converge" and u.state == "done"] == ["verify"]
    finally:
        control.down(lab.dir)
        (tmp_path / "commands.log").write_text("\n".join(log))
        shutil.copytree(lab.log_dir, tmp_path / "lab-logs", dirs_exist_ok=True)
        shutil.rmtree(short, ignore_errors=True)
