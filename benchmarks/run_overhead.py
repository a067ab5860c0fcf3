"""Benchmark: wall time of stepwise running a plan vs plain `ansible-playbook` running the
same plays on the same hosts, as a ratio (target <= 1.15x).

    python benchmarks/run_overhead.py                      # local hosts (no lab needed)
    python benchmarks/run_overhead.py --lab examples/classic.yaml   # on a lab's nodes

Both sides get the same rendered plays, inventory, Ansible environment and forks; stepwise
adds what it does for real: the lock, the store (every task result recorded), resume
bookkeeping, event streaming. Runs alternate (ABAB...) after a warm-up run and the median of each is compared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "run"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", metavar="DEPLOYMENT", help="bring up a lab of this deployment and run on its nodes")
    ap.add_argument("--computes", type=int, default=6, help="local mode: compute nodes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured runs first (the first one really updates)")
    ap.add_argument("--workflow", default="update")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from stepwise.model import load_deployment
    from stepwise.plan import make_plan
    from stepwise.run import ansible_env
    from stepwise.run.engine import EngineOptions
    from stepwise.run.render import inventory, plan_vars, render_unit
    from stepwise.run.resume import RunRequest, run_plan
    from stepwise.run.store import open_store

    root = Path(tempfile.mkdtemp(prefix="stepwise-bench-"))
    lab_dir = None
    overrides = None
    if args.lab:
        import stepwise.lab as lab
        lab_dir = root / "lab"
        lab.up(args.lab, lab_dir)
        dep = load_deployment(args.lab)
        overrides = lab.inventory(lab_dir)
    else:
        from conftest import write_cloud
        dep = load_deployment(write_cloud(root, computes=args.computes, controllers=3))
    try:
        plan = make_plan(args.workflow, dep)
        plays = [p for u in plan.units if (p := render_unit(plan, u, dep, run_id=0)) is not None]
        n_tasks = sum(len(p["tasks"]) for p in plays)
        pb = root / "plain.yml"
        pb.write_text(json.dumps(plays))
        inv = ansible_env.write_inventory(root / "inv.json", inventory(dep, overrides=overrides))
        ev = root / "ev.json"
        ev.write_text(json.dumps({**plan_vars(plan, dep), "stepwise_run_id": 0}))
        env = {**os.environ, **ansible_env.ansible_env()}
        plain_cmd = [ansible_env.ansible_playbook_path(), "-i", str(inv), "-e", f"@{ev}", "--forks", "50", str(pb)]
        store = open_store(f"sqlite:///{root / 'store.sqlite'}")
        plain, ours = [], []
        for _ in range(args.warmup):
            subprocess.run(plain_cmd, env=env, capture_output=True, text=True)
        for i in range(args.repeat):
            t = time.perf_counter()
            p = subprocess.run(plain_cmd, env=env, capture_output=True, text=True)
            plain.append(time.perf_counter() - t)
            if p.returncode != 0:
                print(p.stdout[-3000:], file=sys.stderr)
                return 1
            t = time.perf_counter()
            res = run_plan(RunRequest(store, dep, plan, fresh=True, lock_path=root / "bench.lock",
                                      options=EngineOptions(forks=50, inventory_overrides=overrides)))
            ours.append(time.perf_counter() - t)
            if not res.ok:
                print(res.message, file=sys.stderr)
                return 1
        ratio = statistics.median(ours) / statistics.median(plain)
        out = {"mode": "lab" if args.lab else "local", "workflow": args.workflow, "units": len(plan.units),
               "plays": len(plays), "tasks": n_tasks, "hosts": len(dep.nodes),
               "ansible_playbook_s": [round(x, 2) for x in plain], "stepwise_s": [round(x, 2) for x in ours],
               "ratio": round(ratio, 3), "target": 1.15, "ok": ratio <= 1.15}
        print(json.dumps(out) if args.json else
              f"{out['mode']}: {out['plays']} plays, {n_tasks} tasks, {out['hosts']} hosts: "
              f"ansible-playbook {statistics.median(plain):.2f}s, stepwise {statistics.median(ours):.2f}s, "
              f"ratio {ratio:.3f} (target <= 1.15)")
        return 0 if out["ok"] else 1
    finally:
        if lab_dir is not None:
            import stepwise.lab as lab
            lab.down(lab_dir, quiet=True)


if __name__ == "__main__":
    sys.exit(main())
