"""Real OpenStack through stepwise's workflows on the lab: what it costs and what it breaks.

Runs `stepwise demo --json` on examples/openstack.yaml (three controllers with real keystone,
placement and glance on a real Galera cluster behind HAProxy) and prints, per workflow phase,
the wall time, the real client's calls and failed calls, and the time spent in schema
migrations (units of the migrate and contract steps); then tempest's identity and image tests
after the upgrade and the one-time venv build if this machine had none. With --os-upgrade,
then the seed's OS upgrade (12 steps as commands, to the new OS and 2024.1 at once) on a fresh
lab of the same deployment: its wall time, the client's calls and failed calls (and those
outside the announced windows), the migrations' time and tempest after it. On a deployment
with real nova (examples/openstack-nova.yaml, one controller: --accept-downtime) also per
phase the compute and network API's failed calls, and per compute the servers nova moved off
it (live migrations, from nova's own records) and how long they took.

    .venv/bin/python benchmarks/real_upgrade.py [--deployment examples/openstack.yaml]
        [--os-upgrade] [--accept-downtime]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: real nova's and neutron's client targets, whose failed calls get a column each
APIS = ("nova", "neutron")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployment", default=str(ROOT / "examples" / "openstack.yaml"))
    ap.add_argument(
        "--os-upgrade", action="store_true", help="also run the seed's OS upgrade on a fresh lab"
    )
    ap.add_argument(
        "--accept-downtime",
        action="store_true",
        help="pass --accept-downtime to the demo (a deployment with one controller)",
    )
    args = ap.parse_args()
    stepwise = str(Path(sys.executable).parent / "stepwise")
    with tempfile.TemporaryDirectory(prefix="swb-") as tmp:
        t0 = time.monotonic()
        r = subprocess.run(
            [
                stepwise,
                "demo",
                "-d",
                args.deployment,
                "--json",
                "--lab-dir",
                f"{tmp}/lab",
                "--report",
                f"{tmp}/report.html",
                "--keep",  # nova's migration records are read before the lab goes down
                *(["--accept-downtime"] if args.accept_downtime else []),
            ],
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - t0
        moved = servers_moved(Path(tmp) / "lab")
        subprocess.run([stepwise, "lab", "down", "--dir", f"{tmp}/lab"], capture_output=True)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:], sep="\n", file=sys.stderr)
        return 1
    report = json.loads(r.stdout[r.stdout.index("{") :])
    print(
        f"demo on {Path(args.deployment).name}: {wall:.0f} s in all "
        "(lab up, runs, checks, tempest, lab down)"
    )
    print(
        f"{'phase':<30} {'wall s':>7} {'units':>6} {'client calls':>13} {'failed':>7} "
        f"{'outside windows':>16} {'nova failed':>12} {'neutron failed':>15} {'migrations s':>13}"
    )
    for p in report["phases"]:
        client = p["probe"]["client"]
        calls = sum(c["requests"] for c in client.values())
        failed = sum(c["failed"] for c in client.values())
        outside = sum(n for t, n in p["probe"]["failed_outside_windows"].items() if "client:" in t)
        nova, neutron = (client.get(f"client:{api}", {}).get("failed", "-") for api in APIS)
        print(
            f"{p['phase']:<30} {p['elapsed_s']:>7.1f} {p['units']:>6} {calls:>13} {failed:>7} "
            f"{outside:>16} {nova:>12} {neutron:>15} {p['migration_s']:>13.1f}"
        )
    for host, m in sorted((moved or {}).items()):
        print(
            f"{host}: {m['servers']} server(s) live-migrated off it, "
            f"{m['mean_s']:.1f} s each on average (longest {m['max_s']:.0f} s)"
        )
    os_report = report.get("openstack", {})
    t = os_report.get("tempest", {})
    if t:
        print(
            f"tempest after the upgrade: {t['run']} tests, {t['passed']} passed, "
            f"{t['failed']} failed, {t['skipped']} skipped, {t['seconds']:.0f} s"
        )
    for svc, sc in os_report.get("schemas", {}).items():
        print(f"{svc}: schema {sc['version']} at the head of {sc['code']}: {sc['at_head']}")
    return os_upgrade(Path(args.deployment), stepwise) if args.os_upgrade else 0


def servers_moved(lab_dir: Path) -> dict[str, dict[str, float]] | None:
    """Per compute: the servers nova live-migrated off it and how long each took (nova's
    os-migrations records, second resolution), None without real nova."""
    from stepwise.lab.nodes import Lab
    from stepwise.lab.openstack import config, nova_cells

    if not (lab_dir / "lab.json").exists():
        return None
    lab = Lab(lab_dir)
    if not config.is_real_placed(lab, "nova_api"):
        return None
    out: dict[str, dict[str, float]] = {}
    for m in nova_cells.call(lab, "GET", "/os-migrations")["migrations"]:
        if m["status"] != "completed" or m.get("migration_type") != "live-migration":
            continue
        took = _epoch(m["updated_at"]) - _epoch(m["created_at"])
        row = out.setdefault(m["source_compute"], {"servers": 0, "total_s": 0.0, "max_s": 0.0})
        row["servers"] += 1
        row["total_s"] += took
        row["max_s"] = max(row["max_s"], took)
    for row in out.values():
        row["mean_s"] = row["total_s"] / row["servers"]
    return out


def _epoch(stamp: str) -> float:
    from datetime import UTC, datetime

    return datetime.fromisoformat(stamp.split(".")[0]).replace(tzinfo=UTC).timestamp()


def os_upgrade(deployment: Path, stepwise: str) -> int:
    """The seed's 12 steps on a fresh lab, under the probe and the real client."""
    import stepwise.lab as lab
    from stepwise.lab.nodes import Lab
    from stepwise.lab.openstack import checks
    from stepwise.lab.probe import Probe
    from stepwise.model import load_deployment
    from stepwise.observe.status import schema_seconds
    from stepwise.observe.windows import cloud_intervals, outside_windows
    from stepwise.plan.commands import seed_commands
    from stepwise.run.store import open_store

    dep = load_deployment(deployment)
    with tempfile.TemporaryDirectory(prefix="swb-") as tmp:
        lab_dir, store_url = Path(tmp) / "lab", f"sqlite:///{tmp}/store.sqlite"
        lab.up(deployment, lab_dir)
        try:
            the_lab = Lab(lab_dir)
            seeded = checks.seed(the_lab)
            common = ["-d", str(deployment), "--lab", str(lab_dir), "--store", store_url]
            subprocess.run([stepwise, "discover", *common], check=True, capture_output=True)
            commands = seed_commands(dep, "R2")
            t0, t0_wall = time.monotonic(), time.time()
            with Probe(the_lab, rate=2.0) as probe:
                for argv in commands:
                    r = subprocess.run(
                        [stepwise, *argv, *common, "--yes"], capture_output=True, text=True
                    )
                    if r.returncode != 0:
                        print(
                            " ".join(argv),
                            r.stdout[-2000:],
                            r.stderr[-2000:],
                            sep="\n",
                            file=sys.stderr,
                        )
                        return 1
            summary = probe.stop()
            wall = time.monotonic() - t0
            store = open_store(store_url)
            units = [u for run in store.runs(dep.name, limit=1000) for u in store.units(run.id)]
            migration_s = schema_seconds(units)
            client = {k: v for k, v in summary["targets"].items() if k.startswith("client:")}
            intervals = cloud_intervals(store, dep.name)
            outside = outside_windows(probe.records, intervals)
            late = [r for r in probe.records if not r.get("ok") and outside_windows([r], intervals)]
            kept = checks.seed_kept(the_lab, seeded)
            tempest = checks.acceptance(the_lab, Path(tmp) / "tempest")
        finally:
            lab.down(lab_dir)
    calls, failed = (
        sum(c["requests"] for c in client.values()),
        sum(c["failed"] for c in client.values()),
    )
    print(
        f"OS upgrade (seed's 12 steps, {len(commands)} commands): {wall:.0f} s, "
        f"{len(units)} units; client {calls} calls, {failed} failed "
        f"({sum(v for k, v in outside.items() if k.startswith('client:'))} outside "
        f"the announced windows); migrations {migration_s:.1f} s; "
        f"seeded resources kept: {kept['kept']}"
    )
    for r in late:
        near = {
            svc: [(round(a - t0_wall), round(b - t0_wall)) for a, b in spans]
            for svc, spans in intervals.items()
            if svc in ("keystone", "placement_api", "glance_api")
        }
        print(
            f"  outside the windows at {r['t'] - t0_wall:.1f} s: {r['target']}: "
            f"{str(r.get('detail', ''))[:200]} (windows: {near})"
        )
    print(
        f"tempest after the OS upgrade: {tempest['run']} tests, {tempest['passed']} passed, "
        f"{tempest['failed']} failed, {tempest['skipped']} skipped, {tempest['seconds']:.0f} s"
    )
    return 0 if kept["kept"] and not tempest["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
