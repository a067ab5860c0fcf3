"""Planning at scale: 10,000 nodes x 60 services, as a user runs it and phase by phase.

    python benchmarks/bench_plan_scale.py [--nodes 10000] [--repeat 3]

1. The whole command, in a fresh process each time: the cloud is written as a deployment YAML
   (counted node templates) with a catalog directory of 60 service files, then
   `stepwise plan update|upgrade|system-upgrade -d <file> --json > /dev/null` and the same
   without --json
   (the tree). Wall time (best and median of --repeat) and peak RSS of that process.
2. The same work in this process, phase by phase: load (YAML + catalog), plan, verify (the
   estimate and the perturbed replays, as the CLI does), JSON (write to /dev/null), tree.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.clouds import write_big_cloud  # noqa: E402

WORKFLOWS = ("update", "upgrade", "system-upgrade")


def stepwise_command() -> list[str]:
    """The installed `stepwise` next to this interpreter (the project's .venv when run from it)."""
    for candidate in (
        Path(sys.executable).parent / "stepwise",
        ROOT / ".venv" / "bin" / "stepwise",
    ):
        if candidate.is_file():
            return [str(candidate)]
    return [sys.executable, "-c", "from stepwise.cli.main import main; main()"]


def run_once(argv: list[str]) -> tuple[float, float]:
    """Run one command with stdout to /dev/null; return (wall seconds, peak RSS MiB) of that
    child."""
    with open(os.devnull, "wb") as devnull, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=devnull, stderr=err)
        # wait4 gives this child's own rusage (RUSAGE_CHILDREN would be the max over all children)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{err.read().decode()}")
    return wall, usage.ru_maxrss / 1024


def whole_process(dep_file: Path, repeat: int) -> None:
    cmd = stepwise_command()
    print(
        f"whole process ({Path(cmd[0]).name} plan ... -d {dep_file.name} > /dev/null), "
        f"best / median of {repeat} after a warm-up run:"
    )
    run_once(
        cmd + ["plan", "update", "-d", str(dep_file), "--json"]
    )  # file caches, not the first run's disk reads
    for wf in WORKFLOWS:
        for label, extra in (("--json", ["--json"]), ("tree", [])):
            runs = [
                run_once(cmd + ["plan", wf, "-d", str(dep_file), *extra]) for _ in range(repeat)
            ]
            walls = [w for w, _ in runs]
            print(
                f"  plan {wf:14} {label:6}: {min(walls):.2f} s / {statistics.median(walls):.2f} s, "
                f"peak RSS {max(r for _, r in runs):.0f} MiB"
            )


def phases(dep_file: Path) -> None:
    import resource

    from rich.console import Console

    from stepwise.cli.render import render_plan
    from stepwise.model import load_deployment
    from stepwise.plan import make_plan
    from stepwise.verify import PERTURBATIONS, verify_plan

    print(
        f"in-process phases (verify: the estimate + {PERTURBATIONS} perturbed replays + "
        "lower bound, as the CLI):"
    )
    gc.disable()  # as the CLI's plan command (stepwise.cli.common.gc_paused)
    for wf in WORKFLOWS:
        t0 = time.perf_counter()
        dep = load_deployment(dep_file)
        t1 = time.perf_counter()
        if wf == "update":
            print(
                f"  model: {len(dep.nodes)} nodes, {len(dep.catalog)} services, "
                f"{sum(len(v) for v in dep.instances.values())} instances"
            )
        plan = make_plan(wf, dep)
        t2 = time.perf_counter()
        verified = verify_plan(plan, dep)
        t3 = time.perf_counter()
        with open(os.devnull, "wb") as devnull:
            verified.write_json(devnull)
        t4 = time.perf_counter()
        render_plan(verified, Console(file=io.StringIO(), width=100))
        t5 = time.perf_counter()
        print(
            f"  {wf:14} load {t1 - t0:.3f} s | plan {t2 - t1:.3f} s ({len(plan.units)} units) | "
            f"verify {t3 - t2:.3f} s | JSON {t4 - t3:.3f} s | tree {t5 - t4:.3f} s | "
            f"estimated {verified.duration_s / 3600:.1f} h, "
            f"{verified.duration_s / verified.lower_bound_s:.3f}x the lower bound"
        )
        del dep, plan, verified
    gc.enable()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak RSS of this process: {peak:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each whole-process command")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stepwise-bench-") as tmp:
        dep_file = write_big_cloud(Path(tmp), args.nodes, 60)
        print(
            f"cloud: {args.nodes} nodes x 60 services, "
            f"{dep_file.stat().st_size / 1024:.1f} KiB deployment + "
            f"{len(list((Path(tmp) / 'catalog').glob('*.yaml')))} catalog files in {tmp}"
        )
        whole_process(dep_file, args.repeat)
        phases(dep_file)


if __name__ == "__main__":
    main()
