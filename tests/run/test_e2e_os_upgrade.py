"""The OS upgrade end to end, as the seed's operators run it (major-upgrades-with-os-upgrade):
its 12 steps as commands, on a lab of the seed's composed roles (shrunk for CI), with the
availability probe and a cluster sampler running throughout. One node goes through the
reprovision mode (wiped, new image, persisted data restored) instead of the in-place one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from stepwise.lab.nodes import read_unit
from tests.run.test_e2e_lab import STEPWISE, _lab_or_skip, lab_dir  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "tests" / "run" / "fixtures" / "composed-mini.yaml"
FIRST = "controller-openstack-0,database-0,messaging-0"
# Steps 8-9, as the seed allows: the remaining control plane one node of each cluster role at
# a time (as step 2 took the first ones; the ceph-mon controllers one by one), the rest "one by
# one or in batches" (a compute with the ceph node: the other compute takes its instances).
LATER = [
    "controller-openstack-1,database-1,messaging-1",
    "controller-openstack-2,database-2,messaging-2",
    "novacompute-0,cephstorage-0",
    "novacompute-1",
    "networker-0",
]
REPROVISIONED = "networker-0"
CLUSTERS = ("galera", "rabbitmq", "pacemaker")

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


class ClusterSampler(threading.Thread):
    """Every half second: which clusters have quorum, how many ceph-mon members serve."""

    def __init__(self, lab) -> None:
        super().__init__(daemon=True)
        self.lab, self.samples, self.halt = lab, [], threading.Event()

    def run(self) -> None:
        from stepwise.lab import health

        mons = self.lab.spec.services["ceph_mon"].instances
        while not self.halt.is_set():
            s = {
                "t": time.time(),
                "ceph_mon": sum(1 for n in mons if read_unit(self.lab, n, "ceph_mon")),
            }
            for c in CLUSTERS:
                s[c] = health.quorum(self.lab, c)
                if not s[c][0] and c != "galera":
                    # who ran and who had left, read again: what the next failure report shows
                    members = self.lab.spec.services[c].instances
                    s[c + "_members"] = {
                        n: ("running" if read_unit(self.lab, n, c) else "down")
                        + (" left" if health.left(self.lab, n, c) else "")
                        + f" os{self.lab.os_major(n)}"
                        for n in members
                    }
            s["until"] = time.time()
            self.samples.append(s)
            self.halt.wait(0.5)


def _inside(sample: dict, spans: list[tuple[float, float]], slack: float = 3.0) -> bool:
    """Whether the sample's reads (from "t" to "until") overlap a window: under load one
    round of reads takes seconds, and the state it saw may be from any moment of it."""
    return any(a - slack <= sample["until"] and sample["t"] <= b + slack for a, b in spans)


def _units_near(store, t: float, slack: float = 20.0) -> list[str]:
    """The recorded units that ran within `slack` seconds of `t`: what a failure report
    needs to tell which step took a cluster down."""
    from stepwise.run.store.base import epoch

    out = []
    for r in store.runs("composed-mini", limit=1000):
        for u in store.units(r.id):
            if u.started_at and u.ended_at:
                a, b = epoch(u.started_at), epoch(u.ended_at)
                if a - slack <= t <= b + slack:
                    out.append(f"run {r.id} {u.unit_id} {a - t:+.1f}..{b - t:+.1f}s")
    return out


def test_the_seeds_twelve_steps_on_composed_roles(tmp_path: Path, lab_dir: Path):  # noqa: F811
    _lab_or_skip()
    import stepwise.lab as lab
    from stepwise.lab import mariadb
    from stepwise.lab.nodes import Lab
    from stepwise.lab.probe import Probe
    from stepwise.observe.windows import cloud_intervals, outside_windows
    from stepwise.run.store import open_store

    dep_path = tmp_path / MINI.name
    shutil.copy(MINI, dep_path)
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log: list[str] = []

    def sw(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        # the prestage stage has its own scenarios (test_e2e_prestage, test_e2e_containers):
        # here each of the many commands would add a fetch and a gate to CI's time
        yes = [] if args[0] == "discover" else ["--yes", "--no-prestage"]
        p = subprocess.run(
            [
                STEPWISE,
                *args,
                "-d",
                str(dep_path),
                "--lab",
                str(lab_dir),
                "--store",
                store_url,
                *yes,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        log.append(
            f"$ stepwise {' '.join(args)} -> {p.returncode}\n{p.stdout[-1500:]}{p.stderr[-1500:]}"
        )
        if ok:
            assert p.returncode == 0, "\n".join(log[-3:])
        return p

    lab.up(dep_path, lab_dir)
    the_lab = Lab(lab_dir)
    try:
        galera = the_lab.spec.services["galera"]
        members = [(the_lab.node(n).address, galera.db_port) for n in galera.instances]
        rows = [(f"row-{i}", f"written before step 1 ({i})") for i in range(20)]
        vip = the_lab.spec.vips["galera"]
        for k, v in rows:  # written once, through the VIP: Galera puts them on every member
            mariadb.execute(vip.address, vip.port, "INSERT INTO data VALUES (%s, %s)", (k, v))
        sw("discover")
        sampler = ClusterSampler(the_lab)
        sampler.start()
        with Probe(the_lab, rate=2.0) as probe:
            # 1: repositories, backup, RPC pinned
            sw("upgrade", "prepare", "-e", "target_release=R2")
            # 2-4: prepare and upgrade the OS of one node of each cluster-/schema-sensitive role
            sw("upgrade", "run", "--tags", "system_upgrade_prepare", "--limit", FIRST)
            sw(
                "external-upgrade",
                "run",
                "--tags",
                "system_upgrade_prepare",
                "-e",
                f"system_upgrade_nodes={FIRST}",
            )
            sw("upgrade", "run", "--tags", "system_upgrade_run", "--limit", FIRST)
            # the same command again does nothing; with --fresh too, since the recorded facts say
            # these nodes run the new OS: no second reboot (a reboot rewrites the node's boot
            # record, dropping this mark). The node-side refusal behind it: test_engine.py.
            for n in FIRST.split(","):
                the_lab.write_state(
                    n, "kernel.json", {**the_lab.read_state(n, "kernel.json", {}), "mark": 1}
                )
            again = sw("upgrade", "run", "--tags", "system_upgrade_run", "--limit", FIRST, ok=False)
            assert again.returncode == 0 and "nothing to do" in again.stdout + again.stderr, log[-1]
            forced = sw(
                "upgrade",
                "run",
                "--tags",
                "system_upgrade_run",
                "--limit",
                FIRST,
                "--fresh",
                ok=False,
            )
            assert forced.returncode == 0 and "nothing to do" in forced.stdout + forced.stderr, log[
                -1
            ]
            assert all(
                the_lab.read_state(n, "kernel.json", {}).get("mark") == 1 for n in FIRST.split(",")
            ), log[-1]
            # 5: the data of the old nodes of those roles onto the new one (control plane down)
            sw(
                "external-upgrade",
                "run",
                "--tags",
                "system_upgrade_transfer_data",
                "--limit",
                "ControllerOpenstack,Database,Messaging",
            )
            again = sw(
                "external-upgrade",
                "run",
                "--tags",
                "system_upgrade_transfer_data",
                "--limit",
                "ControllerOpenstack,Database,Messaging",
                ok=False,
            )
            assert again.returncode == 0 and "nothing to do" in again.stdout + again.stderr, log[-1]
            # 6-7: the new release on those nodes, their external (ceph) services back
            sw("upgrade", "run", "--limit", FIRST, "-e", "target_release=R2")
            sw(
                "external-upgrade",
                "run",
                "--tags",
                "system_upgrade_run",
                "-e",
                f"system_upgrade_nodes={FIRST}",
            )
            # 8-9: every other node, in the groups above
            for n in LATER:
                mode = ["-e", "system_upgrade_mode=reprovision"] if n == REPROVISIONED else []
                sw("upgrade", "run", "--tags", "system_upgrade_prepare", "--limit", n, *mode)
                sw(
                    "external-upgrade",
                    "run",
                    "--tags",
                    "system_upgrade_prepare",
                    "-e",
                    f"system_upgrade_nodes={n}",
                )
                if n == REPROVISIONED:
                    kept = tmp_path / ".stepwise" / "persist" / "composed-mini"
                    assert (kept / n).is_dir() and oct(kept.stat().st_mode & 0o777) == "0o700"
                sw("upgrade", "run", "--tags", "system_upgrade_run", "--limit", n, *mode)
                sw("upgrade", "run", "--limit", n, "-e", "target_release=R2")
                sw(
                    "external-upgrade",
                    "run",
                    "--tags",
                    "system_upgrade_run",
                    "-e",
                    f"system_upgrade_nodes={n}",
                )
            # 10-12: online data migrations, converge, cleanup
            sw("external-upgrade", "run", "--tags", "online_upgrade")
            sw("upgrade", "converge")
            sw("external-upgrade", "run", "--tags", "system_upgrade_cleanup")
        sampler.halt.set()
        sampler.join(5)
        summary = probe.stop()

        # a second transfer is refused once the nodes it would copy from are gone
        second = sw(
            "external-upgrade",
            "run",
            "--tags",
            "system_upgrade_transfer_data",
            "--limit",
            "ControllerOpenstack,Database,Messaging",
            "--fresh",
            ok=False,
        )
        assert second.returncode != 0 and "error" in second.stderr, log[-1]

        from stepwise.lab.control import status as lab_status

        status = lab_status(the_lab)
        assert {n["name"]: n["os_major"] for n in status["nodes"]} == {
            n["name"]: 9 for n in status["nodes"]
        }
        assert all(n["release"] == "R2" for n in status["nodes"])
        assert all(s["healthy"] for n in status["nodes"] for s in n["services"]), json.dumps(
            status["nodes"]
        )[:3000]
        assert all(w["healthy"] for w in status["workloads"])

        store = open_store(store_url)
        transfers = [
            u
            for r in store.runs("composed-mini", limit=1000)
            for u in store.units(r.id)
            if u.step == "system_upgrade_transfer_data" and u.state == "done"
        ]
        assert len(transfers) == 1, transfers

        assert sorted(mariadb.execute(vip.address, vip.port, "SELECT k, v FROM data")) == sorted(
            rows
        )
        for host, port in members:
            assert sorted(mariadb.execute(host, port, "SELECT k, v FROM data")) == sorted(rows)

        assert not (
            tmp_path / ".stepwise" / "persist" / "composed-mini" / REPROVISIONED
        ).exists(), "cleanup removes what was persisted"

        intervals = cloud_intervals(store, "composed-mini")
        assert sampler.samples
        assert min(s["ceph_mon"] for s in sampler.samples) >= 2
        # A cluster counts as below majority when two samples in a row (half a second apart at
        # least) say so: corosync declares a member lost only after its token timeout (1 s, plus
        # 650 ms per member beyond two), so a shorter gap in what the sampler read is no
        # membership change. The sampler reads the members one by one while they start and
        # stop; one round once saw a moment no cluster would have (stop 33's CI run: a single
        # sample, the next one quorate).
        for c in CLUSTERS:
            lost = [
                s
                for s, nxt in zip(sampler.samples, sampler.samples[1:], strict=False)
                if not s[c][0] and not nxt[c][0] and not _inside(s, intervals.get(c, []))
            ]
            assert not lost, (
                f"{c} below majority outside its announced windows: {lost[:3]}; "
                f"its windows: {intervals.get(c, [])}; "
                f"units then: {_units_near(store, lost[0]['t'])}"
            )
        workloads = {k: v for k, v in summary["targets"].items() if k.startswith("workload:")}
        assert workloads and all(v["failed"] == 0 for v in workloads.values()), workloads
        outside = outside_windows(probe.records, intervals)
        late = [r for r in probe.records if not r.get("ok") and outside_windows([r], intervals)]
        assert outside == {}, (
            f"{outside}; the requests: {late[:6]}; "
            f"units then: {_units_near(store, float(late[0]['t'])) if late else []}"
        )
    finally:
        lab.down(lab_dir)
        (tmp_path / "commands.log").write_text("\n".join(log))
        if "probe" in locals():
            (tmp_path / "probe.json").write_text(json.dumps(probe.records))
        if "sampler" in locals():  # what the clusters looked like, for a failure's post-mortem
            (tmp_path / "samples.json").write_text(json.dumps(sampler.samples, default=str))
