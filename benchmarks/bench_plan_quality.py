"""Plan quality on the 1,000-node reference cloud (every service changing, and a new kernel
everywhere): planned duration vs its lower bound (docs/lower-bound.md) vs the role-ordered
workflow (one role after another, update_serial nodes at a time), and how often each node is
disrupted. Then the chained clouds (`benchmarks.clouds.chain_cloud`: control-plane and
data-plane services depending on each other in chains of 2, 4 and 8) at 1,000 and 10,000
nodes: planned / bound for update and upgrade. Last, random shapes
(`benchmarks.random_clouds`: chains of 1-8 in both planes crossing them, rules from 1 % to 50 %
out, quorums, update_serial 1-100, 100 to 10,000 nodes, several compute roles): the worst and
median planned / bound per workflow over `--random` clouds (target: worst <= 1.10x).

    python benchmarks/bench_plan_quality.py [--chain-nodes 1000 10000] [--random 50 --seed 1]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collections import defaultdict  # noqa: E402

from benchmarks.clouds import chain_cloud, facts_with_kernel, reference_cloud  # noqa: E402
from benchmarks.random_clouds import random_cloud  # noqa: E402
from benchmarks.role_ordered import role_ordered_duration  # noqa: E402
from stepwise.model.facts import NO_FACTS  # noqa: E402
from stepwise.plan import make_plan  # noqa: E402
from stepwise.verify import verify_plan  # noqa: E402


def hours(s: float) -> str:
    return f"{s / 3600:.2f} h"


def disruptions(plan) -> tuple[int, int, int]:
    """Per node, the most: visits that take services out of service, drains (a `leave` step:
    live migration, standby, out of the load balancer) and reboots."""
    visits: dict[str, set[str]] = defaultdict(set)
    drains: dict[str, int] = defaultdict(int)
    reboots: dict[str, int] = defaultdict(int)
    for u in plan.units:
        for ns in u.stops.values():
            for n in ns:
                visits[n].add(u.batch or u.id)
        if u.step == "leave":
            for n in u.nodes:
                drains[n] += 1
        if u.step == "reboot":
            for n in u.nodes:
                reboots[n] += 1
    return (
        max((len(v) for v in visits.values()), default=0),
        max(drains.values(), default=0),
        max(reboots.values(), default=0),
    )


def chained(sizes: list[int]) -> None:
    """planned / bound of update and upgrade on the chained clouds."""
    for length in (2, 4, 8):
        for nodes in sizes:
            dep = chain_cloud(nodes, length)
            ratios = []
            for wf in ("update", "upgrade"):
                plan = verify_plan(make_plan(wf, dep, NO_FACTS), dep)
                ratios.append(
                    f"{wf} {plan.duration_s / plan.lower_bound_s:.3f}x "
                    f"({hours(plan.duration_s)} vs {hours(plan.lower_bound_s)})"
                )
            print(f"chains of {length}, {nodes:>6} nodes: {' | '.join(ratios)}")


def random_shapes(count: int, seed: int) -> None:
    """planned / bound of update and upgrade over `count` drawn clouds: each, then the worst
    and the median per workflow."""
    import random
    import statistics

    rng = random.Random(seed)
    ratios: dict[str, list[tuple[float, str]]] = {"update": [], "upgrade": []}
    for _ in range(count):
        dep = random_cloud(rng)
        row = []
        for wf, got in ratios.items():
            plan = verify_plan(make_plan(wf, dep, NO_FACTS), dep)
            got.append((plan.duration_s / plan.lower_bound_s, dep.name))
            row.append(f"{wf} {got[-1][0]:.3f}x ({hours(plan.duration_s)})")
        print(f"{dep.name:>28}: {' | '.join(row)}", flush=True)
    for wf, got in ratios.items():
        worst = max(got)
        print(
            f"random shapes, {wf}: worst {worst[0]:.3f}x ({worst[1]}), median "
            f"{statistics.median(r for r, _ in got):.3f}x over {len(got)} clouds (seed {seed})"
        )


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chain-nodes", type=int, nargs="*", default=[1000, 10_000])
    ap.add_argument("--random", type=int, default=50, help="random clouds drawn (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    reference()
    chained(args.chain_nodes)
    if args.random:
        random_shapes(args.random, args.seed)


def reference() -> None:
    dep = reference_cloud()
    print(
        f"reference cloud: {len(dep.nodes)} nodes in {len(dep.roles)} roles, "
        f"{len(dep.catalog)} services"
    )
    kernel = facts_with_kernel(dep)
    for wf, facts in (
        ("update", NO_FACTS),
        ("upgrade", NO_FACTS),
        ("update", kernel),
        ("upgrade", kernel),
    ):
        if facts is kernel and wf == "update":
            print("with a new kernel on every node (one reboot each):")
        plan = verify_plan(make_plan(wf, dep, facts), dep)
        base = role_ordered_duration(dep, wf, facts)
        print(
            f"{wf:8} stepwise {hours(plan.duration_s)} | lower bound {hours(plan.lower_bound_s)} "
            f"({plan.duration_s / plan.lower_bound_s:.3f}x) | role-ordered {hours(base)} "
            f"({base / plan.duration_s:.2f}x longer than stepwise) | downtime windows: "
            f"{', '.join(sorted({w.service for w in plan.windows})) or 'none'}"
        )
        visits, drains, reboots = disruptions(plan)
        print(f"{'':8} per node at most: {visits} visit(s), {drains} drain(s), {reboots} reboot(s)")


if __name__ == "__main__":
    main()
