"""Benchmark: wall time of stepwise running a plan vs plain `ansible-playbook` running the
same plays on the same hosts, as a ratio (target <= 1.15x).

    python benchmarks/run_overhead.py                      # local hosts (no lab needed)
    python benchmarks/run_overhead.py --lab examples/classic.yaml   # on a lab's nodes

Both sides get the same verified plan, rendered the same way (`stepwise export` writes the
plays ansible-playbook runs), the same inventory, connection and forks. stepwise adds what it
does for real: the lock, the store (every task result recorded), the once-only guards, the
gate between chains, event streaming; and it runs independent units at the same time where
ansible-playbook runs the plays one after another. Runs alternate (ABAB...) after a warm-up
run, and the medians are compared.

The plays include stepwise's record of what each node runs after a packages unit (it feeds
`status` and the next plan): carried by the unit's own package update where stepwise wrote
one (the same module run), a task of its own otherwise. ansible-playbook is also timed on the
plays without any record (`bare`, `stepwise export` with record=False), which shows what the
record costs (target: stepwise / bare <= 1.05x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "run"))


#: the local hosts' package tool: what dnf answers on a node whose packages are up to date
#: (the benchmark measures what stepwise adds around the tasks, not a package manager)
_DNF = """#!/bin/sh
case "$1 $2 $3" in
"-q list installed") shift 3; for p in "$@"; do echo "$p.noarch 1.0-1 @bench"; done ;;
"-q check-update"*) exit 0 ;;
"-y update"*) printf 'Dependencies resolved.\\nNothing to do.\\nComplete!\\n' ;;
*) echo "dnf (benchmark): $*" >&2; exit 1 ;;
esac
"""


def _local_cloud(root: Path, computes: int) -> Path:
    """The tests' small cloud on local hosts, its packages step written as the catalog writes
    it (`dnf -y update PKG`), with `_DNF` first on the hosts' PATH."""
    from conftest import SERVICES, STEPS, _tasks, write_cloud

    services = {}
    for name, spec in SERVICES.items():
        steps = {s: _tasks(name, s) for s in STEPS}
        steps["packages"] = [
            {
                "name": "update",
                "ansible.builtin.command": "dnf -y update " + " ".join(spec["packages"]),
                "register": "dnf_result",
                "changed_when": "'Nothing to do' not in dnf_result.stdout",
            }
        ]
        services[name] = {**spec, "update": steps, "upgrade": steps}
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "dnf").write_text(_DNF)
    (bin_dir / "dnf").chmod(0o755)
    os.environ["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    return write_cloud(root, computes=computes, controllers=3, extra_services=services)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--lab", metavar="DEPLOYMENT", help="bring up a lab of this deployment and run on its nodes"
    )
    ap.add_argument("--computes", type=int, default=6, help="local mode: compute nodes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--warmup", type=int, default=1, help="unmeasured runs first (the first one really updates)"
    )
    ap.add_argument("--workflow", default="update")
    ap.add_argument("--forks", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from stepwise.model import load_deployment
    from stepwise.run import ansible_env
    from stepwise.run.export import export
    from stepwise.run.resume import RunRequest, plan_run, run_plan
    from stepwise.run.run_options import EngineOptions
    from stepwise.run.store import open_store

    root = Path(tempfile.mkdtemp(prefix="stepwise-bench-"))
    lab_dir = None
    conn = None
    try:
        if args.lab:
            import stepwise.lab as lab

            lab_dir = root / "lab"
            dep_path = root / Path(args.lab).name
            dep_path.write_text(Path(args.lab).read_text())
            lab.up(dep_path, lab_dir)
            conn = lab.connector(lab_dir)
        else:
            dep_path = _local_cloud(root, args.computes)
        dep = load_deployment(dep_path)
        store = open_store(f"sqlite:///{root / 'store.sqlite'}")
        opts = EngineOptions(connector=conn, forks=args.forks)

        def request() -> RunRequest:
            return RunRequest(
                store, dep, args.workflow, fresh=True, lock_path=root / "bench.lock", options=opts
            )

        plan = plan_run(request(), request().facts)
        out_dir = root / "export"
        export(plan, dep, out_dir, connector=conn)
        import yaml

        class _Loader(yaml.SafeLoader):
            pass

        # Ansible's !unsafe marks data that is never template code; here it is only counted
        _Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
        plays = yaml.load((out_dir / "site.yml").read_text(), Loader=_Loader)
        n_tasks = sum(len(p.get("tasks", [])) for p in plays)
        env = {
            **os.environ,
            **ansible_env.ansible_env(plugin_dirs=conn.plugin_dirs if conn else ()),
            "ANSIBLE_CONFIG": str(out_dir / "ansible.cfg"),
        }
        # the same plays without what packages units report afterwards
        export(plan, dep, root / "bare", connector=conn, record=False)
        shutil.copyfile(root / "bare" / "site.yml", out_dir / "bare.yml")
        bare = yaml.load((out_dir / "bare.yml").read_text(), Loader=_Loader)
        n_record = n_tasks - sum(len(p["tasks"]) for p in bare)
        n_carried = sum(
            1 for p in plays for t in p.get("tasks", []) if "update" in t.get("stepwise_facts", {})
        )

        def plain_run(playbook: str = "site.yml") -> float:
            t = time.perf_counter()
            cmd = [
                ansible_env.ansible_playbook_path(),
                "-i",
                "inventory.yml",
                "--forks",
                str(args.forks),
                playbook,
            ]
            p = subprocess.run(cmd, env=env, cwd=out_dir, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"ansible-playbook failed:\n{p.stdout[-3000:]}")
            return time.perf_counter() - t

        def our_run() -> float:
            t = time.perf_counter()
            res = run_plan(request())
            if res.status != "done":
                raise SystemExit(f"stepwise run failed: {res.message}")
            return time.perf_counter() - t

        for _ in range(args.warmup):
            plain_run()
            our_run()
        plain, ours, bare_s = [], [], []
        for _ in range(args.repeat):
            plain.append(plain_run())
            ours.append(our_run())
            bare_s.append(plain_run("bare.yml"))
        ratio = statistics.median(ours) / statistics.median(plain)
        out = {
            "mode": "lab" if args.lab else "local",
            "workflow": args.workflow,
            "units": len(plan.units),
            "plays": len(plays),
            "tasks": n_tasks,
            "record_tasks": n_record,
            "records_carried_by_updates": n_carried,
            "hosts": len(dep.nodes),
            "ansible_playbook_s": [round(x, 2) for x in plain],
            "stepwise_s": [round(x, 2) for x in ours],
            "ansible_playbook_bare_s": [round(x, 2) for x in bare_s],
            "ratio": round(ratio, 3),
            "ratio_to_bare": round(statistics.median(ours) / statistics.median(bare_s), 3),
            "target": 1.15,
            "target_to_bare": 1.05,
        }
        out["ok"] = out["ratio"] <= out["target"] and out["ratio_to_bare"] <= out["target_to_bare"]
        print(
            json.dumps(out)
            if args.json
            else f"{out['mode']}: {out['plays']} plays, {n_tasks} tasks "
            f"({n_record} of them stepwise's record, {n_carried} records carried by the "
            "packages units' own updates), "
            f"{out['hosts']} hosts: ansible-playbook {statistics.median(plain):.2f}s, "
            f"stepwise {statistics.median(ours):.2f}s, ratio {ratio:.3f} (target <= 1.15); "
            f"ansible-playbook without any record {statistics.median(bare_s):.2f}s "
            f"(stepwise / that: {out['ratio_to_bare']:.3f}, target <= 1.05)"
        )
        return 0 if out["ok"] else 1
    finally:
        if lab_dir is not None:
            import stepwise.lab as lab

            lab.down(lab_dir)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
