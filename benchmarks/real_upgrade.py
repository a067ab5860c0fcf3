"""Real OpenStack through stepwise's workflows on the lab: what it costs and what it breaks.

Runs `stepwise demo --json` on examples/openstack.yaml (three controllers with real keystone,
placement and glance on a real Galera cluster behind HAProxy) and prints, per workflow phase,
the wall time, the real client's calls and failed calls, and the time spent in schema
migrations (units of the migrate and contract steps); then tempest's identity and image tests
after the upgrade and the one-time venv build if this machine had none.

    .venv/bin/python benchmarks/real_upgrade.py [--deployment examples/openstack.yaml]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployment", default=str(ROOT / "examples" / "openstack.yaml"))
    args = ap.parse_args()
    stepwise = str(Path(sys.executable).parent / "stepwise")
    with tempfile.TemporaryDirectory(prefix="swb-") as tmp:
        t0 = time.monotonic()
        r = subprocess.run([stepwise, "demo", "-d", args.deployment, "--json", "--lab-dir", f"{tmp}/lab",
                            "--report", f"{tmp}/report.html"], capture_output=True, text=True)
        wall = time.monotonic() - t0
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:], sep="\n", file=sys.stderr)
        return 1
    report = json.loads(r.stdout[r.stdout.index("{"):])
    print(f"demo on {Path(args.deployment).name}: {wall:.0f} s in all (lab up, runs, checks, tempest, lab down)")
    print(f"{'phase':<30} {'wall s':>7} {'units':>6} {'client calls':>13} {'failed':>7} {'migrations s':>13}")
    for p in report["phases"]:
        calls = sum(c["requests"] for c in p["probe"]["client"].values())
        failed = sum(c["failed"] for c in p["probe"]["client"].values())
        print(f"{p['phase']:<30} {p['elapsed_s']:>7.1f} {p['units']:>6} {calls:>13} {failed:>7} {p['migration_s']:>13.1f}")
    os_report = report.get("openstack", {})
    t = os_report.get("tempest", {})
    if t:
        print(f"tempest after the upgrade: {t['run']} tests, {t['passed']} passed, {t['failed']} failed, "
              f"{t['skipped']} skipped, {t['seconds']:.0f} s")
    for svc, sc in os_report.get("schemas", {}).items():
        print(f"{svc}: schema {sc['version']} at the head of {sc['code']}: {sc['at_head']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
