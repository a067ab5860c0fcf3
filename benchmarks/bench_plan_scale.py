"""Planning at scale: 10,000 nodes x 60 services, as a user runs it and phase by phase.

    python benchmarks/bench_plan_scale.py [--nodes 10000] [--repeat 3]

1. The whole command, in a fresh process each time: the cloud is written as a deployment YAML
   (counted node templates) with a catalog directory of 60 service files, then
   `stepwise plan update|upgrade|system-upgrade -d <file> --json > /dev/null` and the same
   without --json
   (the tree), each with the prestage stage (the default) and with --no-prestage. Wall time
   (best and median of --repeat) and peak RSS of that process, and the ratio of each to its
   --no-prestage twin (measured in the same run: a busy machine moves both).
2. The same work in this process, phase by phase: load (YAML + catalog), plan, verify (the
   estimate and the perturbed replays, as the CLI does), JSON (write to /dev/null), tree
   (and its line count), with the prestage as `stepwise plan` selects it: the prestage's
   estimate against its own bound, the disruptive part's against its own.
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


def run_once(argv: list[str]) -> tuple[float, float, float]:
    """Run one command with stdout to /dev/null; return (wall seconds, peak RSS MiB, CPU
    seconds: user + system, what a busy machine does not stretch) of that child."""
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
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


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
            got = {}
            for pre in ([], ["--no-prestage"]):
                argv = cmd + ["plan", wf, "-d", str(dep_file), *extra, *pre]
                runs = [run_once(argv) for _ in range(repeat)]
                got[bool(pre)] = runs
                walls, cpus = [r[0] for r in runs], [r[2] for r in runs]
                ratio = ""
                if pre:
                    best = min(r[0] for r in got[False]), min(r[2] for r in got[False])
                    ratio = (
                        f" (with the prestage: {best[0] / min(walls):.2f}x this wall, "
                        f"{best[1] / min(cpus):.2f}x CPU)"
                    )
                print(
                    f"  plan {wf:14} {label:6} {'--no-prestage' if pre else 'prestage':13}: "
                    f"{min(walls):.2f} s / {statistics.median(walls):.2f} s, "
                    f"CPU {min(cpus):.2f} s, peak RSS {max(r[1] for r in runs):.0f} MiB{ratio}"
                )


def phases(dep_file: Path) -> None:
    import resource

    from rich.console import Console

    from stepwise.cli.render import render_plan
    from stepwise.model import load_deployment
    from stepwise.model.vocab import Step
    from stepwise.plan import make_plan, selection_for
    from stepwise.plan.prestage import DEFAULT_PARALLEL, nodes_at_once
    from stepwise.plan.units import prestage_seconds
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
        # the prestage as `stepwise plan` selects it (the mirror's default, the connection's)
        sel = selection_for(wf, prestage=nodes_at_once(DEFAULT_PARALLEL))
        plan = make_plan(wf, dep, selection=sel)
        t2 = time.perf_counter()
        verified = verify_plan(plan, dep)
        t3 = time.perf_counter()
        with open(os.devnull, "wb") as devnull:
            verified.write_json(devnull)
        t4 = time.perf_counter()
        tree = io.StringIO()
        render_plan(verified, Console(file=tree, width=100))
        t5 = time.perf_counter()
        fetch, fetch_bound = prestage_seconds(verified), verified.prestage_bound_s
        rest = verified.duration_s - fetch
        rest_bound = verified.lower_bound_s - fetch_bound
        print(
            f"  {wf:14} load {t1 - t0:.3f} s | plan {t2 - t1:.3f} s ({len(plan.units)} units) | "
            f"verify {t3 - t2:.3f} s | JSON {t4 - t3:.3f} s | tree {t5 - t4:.3f} s "
            f"({len(tree.getvalue().splitlines())} lines)\n"
            f"  {'':14} disruptive part {rest / 3600:.1f} h, {rest / rest_bound:.3f}x its bound"
            + (
                f" | prestage {fetch / 60:.1f} min, {fetch / fetch_bound:.3f}x its bound "
                f"({sum(1 for u in plan.units if u.step is Step.PRESTAGE)} units)"
                if fetch_bound
                else " | no prestage"
            )
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
