"""The management node's upgrade on the lab: stepwise's stop-first order against the naive
in-place order (packages updated while the services run, then configuration, restarts, DB
syncs), as the seed undercloud-upgrade compares them (20-25 min against more than 2 h).

    .venv/bin/python benchmarks/management_upgrade.py [--deployment examples/undercloud.yaml]

For each order: wall time, commands or units that failed, services not healthy at the end;
then, for the naive order, the time stepwise takes to repair the node (its run from where the
naive order left it). Prints the ratios. Each order gets a fresh lab.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _unhealthy(lab) -> list[str]:
    from stepwise.lab.control import status

    return [
        f"{n['name']}/{s['name']}"
        for n in status(lab)["nodes"]
        for s in n["services"]
        if not s["healthy"]
    ]


def _stepwise(dep, work: Path, lab_dir: Path, name: str) -> tuple[float, str]:
    import stepwise.lab as lab
    from stepwise.run.discover import discover, stored_facts
    from stepwise.run.resume import RunRequest, run_plan
    from stepwise.run.run_options import EngineOptions
    from stepwise.run.store import open_store

    conn = lab.connector(lab_dir)
    store = open_store(f"sqlite:///{work / (name + '.sqlite')}")
    discover(dep, store, connector=conn)
    t0 = time.monotonic()
    res = run_plan(
        RunRequest(
            store,
            dep,
            "undercloud-upgrade",
            facts=stored_facts(dep, store),
            variables={"target_release": "R2"},
            lock_path=work / f"{name}.lock",
            options=EngineOptions(connector=conn),
        )
    )
    return time.monotonic() - t0, res.status


def _naive(dep, the_lab) -> tuple[float, int]:
    """The in-place order: nothing stopped before the packages change."""
    node = dep.nodes[0].name
    commands = ["tripleo-repos R2", "dnf -y update", "os-apply-config"]
    commands += [f"systemctl restart {s}" for s in dep.services_on(dep.nodes[0])]
    for s in dep.services_on(dep.nodes[0]):
        for task in dep.catalog[s].tasks.get("upgrade", {}).get("migrate", ()):
            cmd = task.get("ansible.builtin.command")
            if isinstance(cmd, str):
                commands.append(cmd)
    failed = 0
    t0 = time.monotonic()
    for cmd in commands:
        r = subprocess.run(
            cmd,
            shell=True,
            env=the_lab.node_env(node),
            cwd=the_lab.node_root(node),
            capture_output=True,
            text=True,
            timeout=600,
        )
        failed += r.returncode != 0
    return time.monotonic() - t0, failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployment", type=Path, default=ROOT / "examples" / "undercloud.yaml")
    args = ap.parse_args()
    import stepwise.lab as lab
    from stepwise.lab.nodes import Lab
    from stepwise.model import load_deployment

    results = {}
    for order in ("stop-first", "naive"):
        work = Path(tempfile.mkdtemp(prefix="swm-"))
        try:
            dep_path = work / args.deployment.name
            dep_path.write_text(args.deployment.read_text())
            dep = load_deployment(dep_path)
            lab_dir = work / "lab"
            lab.up(dep_path, lab_dir)
            try:
                the_lab = Lab(lab_dir)
                if order == "stop-first":
                    wall, status = _stepwise(dep, work, lab_dir, "stop-first")
                    results[order] = {
                        "wall_s": wall,
                        "failed": int(status != "done"),
                        "unhealthy": _unhealthy(the_lab),
                    }
                else:
                    wall, failed = _naive(dep, the_lab)
                    unhealthy = _unhealthy(the_lab)
                    repair, status = _stepwise(dep, work, lab_dir, "repair")
                    results[order] = {
                        "wall_s": wall,
                        "failed": failed,
                        "unhealthy": unhealthy,
                        "repair_s": repair,
                        "repair_status": status,
                        "unhealthy_after_repair": _unhealthy(the_lab),
                    }
            finally:
                lab.down(lab_dir)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    s, n = results["stop-first"], results["naive"]
    print(f"management node upgrade of {args.deployment.name} on the lab (R1 -> R2)")
    print(
        f"stop-first (stepwise): {s['wall_s']:.1f} s, {s['failed']} failed, "
        f"{len(s['unhealthy'])} unhealthy at the end"
    )
    print(
        f"naive in-place order:  {n['wall_s']:.1f} s, {n['failed']} failed command(s), "
        f"{len(n['unhealthy'])} unhealthy at the end ({', '.join(n['unhealthy'][:6])}"
        f"{'...' if len(n['unhealthy']) > 6 else ''})"
    )
    print(
        f"  repaired by stepwise in {n['repair_s']:.1f} s ({n['repair_status']}, "
        f"{len(n['unhealthy_after_repair'])} unhealthy after)"
    )
    total = n["wall_s"] + n["repair_s"]
    print(
        f"time to a healthy node: naive + repair {total:.1f} s vs stop-first {s['wall_s']:.1f} s "
        f"-> ratio {total / s['wall_s']:.2f}"
    )


if __name__ == "__main__":
    main()
