"""Plan quality on the 1,000-node reference cloud: planned duration vs its lower bound vs
the role-ordered workflow (one role after another, update_serial nodes at a time).

    python benchmarks/bench_plan_quality.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.clouds import reference_cloud  # noqa: E402
from benchmarks.role_ordered import role_ordered_duration  # noqa: E402
from stepwise.plan import make_plan  # noqa: E402
from stepwise.verify import verify_plan  # noqa: E402


def hours(s: float) -> str:
    return f"{s / 3600:.2f} h"


def main() -> None:
    dep = reference_cloud()
    print(f"reference cloud: {len(dep.nodes)} nodes in {len(dep.roles)} roles, {len(dep.catalog)} services")
    for wf in ("update", "upgrade"):
        plan = verify_plan(make_plan(wf, dep), dep)
        base = role_ordered_duration(dep, wf)
        print(f"{wf:8} stepwise {hours(plan.duration_s)} | lower bound {hours(plan.lower_bound_s)} "
              f"({plan.duration_s / plan.lower_bound_s:.3f}x) | role-ordered {hours(base)} "
              f"({base / plan.duration_s:.2f}x longer than stepwise) | downtime windows: "
              f"{', '.join(sorted({w.service for w in plan.windows})) or 'none'}")


if __name__ == "__main__":
    main()
