"""Planning at scale: 10,000 nodes x 60 services. Prints time and peak memory.

    python benchmarks/bench_plan_scale.py [--nodes 10000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.clouds import big_cloud  # noqa: E402
from stepwise.plan import make_plan  # noqa: E402
from stepwise.verify import verify_plan  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=10_000)
    args = ap.parse_args()
    t0 = time.perf_counter()
    dep = big_cloud(args.nodes, 60)
    t1 = time.perf_counter()
    print(f"model: {len(dep.nodes)} nodes, {len(dep.catalog)} services, "
          f"{sum(len(v) for v in dep.instances.values())} instances, built in {t1 - t0:.2f} s")
    for wf in ("update", "upgrade"):
        t0 = time.perf_counter()
        plan = make_plan(wf, dep)
        t1 = time.perf_counter()
        verified = verify_plan(plan, dep, perturbations=1)
        t2 = time.perf_counter()
        print(f"{wf:8} plan: {t1 - t0:.2f} s for {len(plan.units)} units | verify (2 replays + bound): {t2 - t1:.2f} s | "
              f"estimated {verified.duration_s / 3600:.1f} h, lower bound {verified.lower_bound_s / 3600:.1f} h "
              f"({verified.duration_s / verified.lower_bound_s:.3f}x)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory (max RSS of the whole process): {peak:.0f} MiB")


if __name__ == "__main__":
    main()
