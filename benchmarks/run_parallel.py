"""How parallel a real run is: the composed example's minor update on the lab, run by the DAG
executor, against the makespan of the same plan's DAG replayed with the measured unit
durations (wall / makespan, target <= 1.15), and the same run with one unit at a time.

    .venv/bin/python benchmarks/run_parallel.py [--deployment examples/composed.yaml]
        [--skip-sequential | --skip-parallel]

Prints, for each engine: wall time of the run, sum of the unit durations, the replayed
makespan and their ratios. Brings a fresh lab up for each run and takes it down after.
"""

from __future__ import annotations

import argparse
import calendar
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _epoch(t) -> float:
    return calendar.timegm(t.timetuple()) + t.microsecond / 1e6


def replayed_makespan(plan, durations: dict[str, float]) -> float:
    """The plan's DAG with each unit taking its measured time, every unit as early as its
    predecessors allow (barriers take none)."""
    end: dict[str, float] = {}
    for u in plan.units:
        start = max((end[a] for a in u.after if a in end), default=0.0)
        end[u.id] = start + durations.get(u.id, 0.0)
    return max(end.values(), default=0.0)


def one_run(deployment: Path, max_parallel: int) -> dict[str, float]:
    import stepwise.lab as lab
    from stepwise.model import load_deployment
    from stepwise.run.discover import discover, stored_facts
    from stepwise.run.resume import RunRequest, plan_run, run_plan
    from stepwise.run.run_options import EngineOptions
    from stepwise.run.store import open_store

    work = Path(tempfile.mkdtemp(prefix="swb-"))
    try:
        dep_path = work / deployment.name
        dep_path.write_text(deployment.read_text())
        dep = load_deployment(dep_path)
        lab_dir = work / "lab"
        lab.up(dep_path, lab_dir)
        try:
            conn = lab.connector(lab_dir)
            store = open_store(f"sqlite:///{work / 'store.sqlite'}")
            discover(dep, store, connector=conn)
            req = RunRequest(
                store,
                dep,
                "update",
                facts=stored_facts(dep, store),
                options=EngineOptions(connector=conn, max_parallel_units=max_parallel),
            )
            plan = plan_run(req, req.facts)
            t0 = time.monotonic()
            res = run_plan(req)
            wall = time.monotonic() - t0
            if res.status != "done":
                raise SystemExit(f"the run failed: {res.message}")
            rows = {u.unit_id: u for u in store.units(res.run_id)}
            durations = {
                uid: _epoch(r.ended_at) - _epoch(r.started_at)
                for uid, r in rows.items()
                if r.started_at and r.ended_at and r.message != "barrier passed"
            }
            return {
                "units": len(plan.units),
                "wall_s": wall,
                "engine_s": res.elapsed_s,
                "sum_s": sum(durations.values()),
                "makespan_s": replayed_makespan(plan, durations),
            }
        finally:
            lab.down(lab_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployment", type=Path, default=ROOT / "examples" / "composed.yaml")
    ap.add_argument("--max-parallel-units", type=int, default=8)
    ap.add_argument("--skip-sequential", action="store_true")
    ap.add_argument("--skip-parallel", action="store_true")
    args = ap.parse_args()
    engines = ([] if args.skip_parallel else [("parallel", args.max_parallel_units)]) + (
        [] if args.skip_sequential else [("sequential", 1)]
    )
    print(f"minor update of {args.deployment.name} on the lab")
    for name, k in engines:
        r = one_run(args.deployment, k)
        print(
            f"{name:<10} (max {k} unit(s) at once): {r['units']} units, wall {r['wall_s']:.1f} s "
            f"(engine {r['engine_s']:.1f} s), sum of unit durations {r['sum_s']:.1f} s, "
            f"makespan of the DAG with the measured durations {r['makespan_s']:.1f} s -> "
            f"wall / makespan = {r['wall_s'] / r['makespan_s']:.2f}, "
            f"sum / wall = {r['sum_s'] / r['wall_s']:.2f}"
        )


if __name__ == "__main__":
    main()
