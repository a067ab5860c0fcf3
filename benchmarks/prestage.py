"""Prestage on the lab: how long each node is disrupted with and without the prestage stage.

    .venv/bin/python benchmarks/prestage.py [--deployment examples/tripleo-containers.yaml]
        [--workflow update] [--json]

Brings the deployment up as a lab twice (fresh each time), runs the same minor update with the
prestage (images pulled and checked by digest on every node first) and with --no-prestage (the
pull happens in each node's switch, while its services are stopped), and prints per node the
disruption (the start of its first stop unit to the end of its start unit: first service down
to last service started again), the sum over the nodes, and the whole run's wall time, with the
ratios. In the example, keystone, placement and glance are real OpenStack whose images carry
their release's venv (a ~70 MB gzip layer, ~230 MB unpacked, shared by the three images of a
release): the pull and unpack a node needs before its services can switch is what the prestage
moves out of the window; the stand-ins' images (nova_api, haproxy) are kB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STEPWISE = str(Path(sys.executable).parent / "stepwise")


def _epoch(t: datetime | str) -> float:
    return (datetime.fromisoformat(t) if isinstance(t, str) else t).timestamp()


def _sw(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([STEPWISE, *args], env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"stepwise {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
    return p


def disruption(units: list) -> dict[str, float]:
    """node -> seconds from the start of its first stop unit to the end of its last start."""
    out: dict[str, float] = {}
    for node in sorted({n for u in units for n in u.nodes}):
        stops = [_epoch(u.started_at) for u in units if u.step == "stop" and node in u.nodes]
        starts = [_epoch(u.ended_at) for u in units if u.step == "start" and node in u.nodes]
        if stops and starts:
            out[node] = max(starts) - min(stops)
    return out


def one_run(deployment: Path, workflow: str, prestage: bool) -> dict:
    """A fresh lab, discover, the workflow's run; the store's units measured."""
    import stepwise.lab as lab
    from stepwise.run.store import open_store

    work = Path(tempfile.mkdtemp(prefix="swb-"))
    try:
        dep = work / deployment.name
        shutil.copy(deployment, dep)
        lab_dir = work / "lab"
        url = f"sqlite:///{work / 'store.sqlite'}"
        lab.up(dep, lab_dir)
        try:
            common = ["-d", str(dep), "--store", url, "--lab", str(lab_dir)]
            _sw("discover", *common)
            flags = [] if prestage else ["--no-prestage"]
            t0 = time.monotonic()
            done = _sw(workflow, "run", *common, *flags, "--yes", "--json")
            wall = time.monotonic() - t0
            res = json.loads(done.stdout)
            units = list(open_store(url).units(res["run_id"]))
        finally:
            lab.down(lab_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    pre = [u for u in units if u.step == "prestage"]
    return {
        "prestage": prestage,
        "status": res["status"],
        "wall_s": round(wall, 1),
        "prestage_s": round(
            max((_epoch(u.ended_at) for u in pre), default=0.0)
            - min((_epoch(u.started_at) for u in pre), default=0.0),
            1,
        ),
        "disruption_s": {n: round(s, 1) for n, s in disruption(units).items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--deployment", type=Path, default=ROOT / "examples" / "tripleo-containers.yaml"
    )
    ap.add_argument("--workflow", default="update", choices=["update"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with_ = one_run(args.deployment, args.workflow, prestage=True)
    without = one_run(args.deployment, args.workflow, prestage=False)
    a, b = with_["disruption_s"], without["disruption_s"]
    nodes = sorted(set(a) & set(b))
    total_a, total_b = sum(a[n] for n in nodes), sum(b[n] for n in nodes)
    out = {
        "deployment": args.deployment.name,
        "with_prestage": with_,
        "without_prestage": without,
        "disruption_ratio": round(total_a / total_b, 3) if total_b else None,
        "wall_ratio": round(with_["wall_s"] / without["wall_s"], 3),
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{args.workflow} of {args.deployment.name}: disruption per node (first stop -> start)")
    print(f"{'node':28} {'prestage':>10} {'no prestage':>12}")
    for n in nodes:
        print(f"{n:28} {a[n]:9.1f}s {b[n]:11.1f}s")
    print(f"{'sum':28} {total_a:9.1f}s {total_b:11.1f}s  ratio {out['disruption_ratio']}")
    print(
        f"whole run: {with_['wall_s']}s with prestage (of it the prestage {with_['prestage_s']}s), "
        f"{without['wall_s']}s without; ratio {out['wall_ratio']}"
    )
    return 0 if with_["status"] == without["status"] == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
