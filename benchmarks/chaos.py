"""Chaos on the lab: random faults across a minor update and a major upgrade, run the way an
operator would (the same stepwise commands, repeated after each fault is repaired).

    .venv/bin/python benchmarks/chaos.py [--deployment examples/classic.yaml] [--faults 6]
        [--seed 1] [--json]

Faults: a node loses power (crash, recovered after the command stopped), a service ignores
stop requests (hang-stop, cleared after), the package tool is slow (slow), stepwise is killed
(SIGKILL) or interrupted (SIGINT). Each fault hits a random command at a random moment;
after it, the command is repeated until it finishes (at most --attempts times).

Prints: faults injected (by kind), commands that finished, units that ran again although the
store had recorded them done, once-only units whose work ran twice on a node, and failed
probe requests outside the plan's announced windows and outside the faults' own intervals
(from the injection until 15 s after the fault is repaired).
Targets: every command finished, 0, 0, 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STEPWISE = str(Path(sys.executable).parent / "stepwise")
KINDS = ("crash", "hang-stop", "slow", "sigkill", "sigint")
COMMANDS = (
    ("update run", ["update", "run"]),
    ("upgrade prepare", ["upgrade", "prepare", "-e", "target_release=R2"]),
    ("upgrade run", ["upgrade", "run", "-e", "target_release=R2"]),
    ("upgrade converge", ["upgrade", "converge", "-e", "target_release=R2"]),
)


@dataclass
class Fault:
    kind: str
    command: str
    after_s: float
    node: str = ""
    target: str = ""
    injected_at: float = 0.0
    repaired_at: float = 0.0
    injected: bool = False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployment", type=Path, default=ROOT / "examples" / "classic.yaml")
    ap.add_argument("--faults", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--attempts", type=int, default=5, help="runs of one command at most")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import stepwise.lab as lab
    from stepwise.lab.faults import inject
    from stepwise.lab.nodes import Lab
    from stepwise.lab.probe import Probe
    from stepwise.model import load_deployment
    from stepwise.observe.status import ran_after_done
    from stepwise.observe.windows import cloud_intervals, outside_windows
    from stepwise.run.store import open_store

    rnd = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="swc-"))
    dep_path = work / args.deployment.name
    shutil.copy(args.deployment, dep_path)
    dep = load_deployment(dep_path)
    lab_dir = work / "lab"
    store_url = f"sqlite:///{work / 'store.sqlite'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base = [STEPWISE]
    common = ["-d", str(dep_path), "--lab", str(lab_dir), "--store", store_url]
    nodes = [n.name for n in dep.nodes]
    faults = [
        Fault(
            rnd.choice(KINDS),
            rnd.choice([c for c, _ in COMMANDS if c != "upgrade prepare"]),
            round(rnd.uniform(3, 40), 1),
        )
        for _ in range(args.faults)
    ]
    say = (lambda m: None) if args.json else (lambda m: print(m, flush=True))
    results: dict[str, dict] = {}
    lab.up(dep_path, lab_dir)
    the_lab = Lab(lab_dir)
    try:
        subprocess.run(base + ["discover"] + common, env=env, check=True, capture_output=True)
        with Probe(the_lab, rate=2.0) as probe:
            for title, argv in COMMANDS:
                todo = [f for f in faults if f.command == title]
                attempts = 0
                rc = None
                while attempts < args.attempts:
                    attempts += 1
                    t0 = time.monotonic()
                    p = subprocess.Popen(
                        base + argv + common + ["--json", "--yes"],
                        env=env,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                    fault = todo.pop(0) if todo else None
                    if fault is not None:
                        while p.poll() is None and time.monotonic() - t0 < fault.after_s:
                            time.sleep(0.1)
                        if p.poll() is None:
                            _inject(fault, p, the_lab, nodes, rnd, inject)
                            say(
                                f"{title}: attempt {attempts}: "
                                f"{fault.kind} {fault.node} {fault.target}".rstrip()
                            )
                    out, err = p.communicate(timeout=1800)
                    rc = p.returncode
                    if rc != 0:
                        last = _message(out, err)
                        say(f"{title}: attempt {attempts} exit {rc}: {last[:300]}")
                    if fault is not None and fault.injected:
                        _repair(fault, the_lab, inject)
                    if rc == 0 and not todo:
                        break
                    if rc == 0 and todo:
                        # a fault left for this command: the command is done, so the next one
                        # gets it
                        nxt = _next_command(title)
                        for f in todo:
                            f.command = nxt or title
                        break
                results[title] = {
                    "attempts": attempts,
                    "finished": rc == 0,
                    "last_error": "" if rc == 0 else last,
                }
                say(
                    f"{title}: {'finished' if rc == 0 else 'NOT finished'} "
                    f"after {attempts} attempt(s)"
                )
            probe_records = list(probe.records)
        probe.stop()

        store = open_store(store_url)
        runs = store.runs(dep.name, limit=1000)
        rerun_after_done = [
            f"run {r.id} {t.unit_id} on {t.host}" for r in runs for t in ran_after_done(store, r.id)
        ]
        twice = _once_only_twice(store, runs)
        # a fault's own effects last from its injection until it is repaired (and settled)
        spans = [(f.injected_at - 1.0, f.repaired_at + 15.0) for f in faults if f.injected]
        unexcused = [r for r in probe_records if not any(a <= float(r["t"]) <= b for a, b in spans)]
        lost = outside_windows(unexcused, cloud_intervals(store, dep.name))  # vip targets
        for r in unexcused:
            if not r["ok"] and not str(r["target"]).startswith("vip:"):
                lost[r["target"]] = lost.get(r["target"], 0) + 1
        n_lost = sum(lost.values())
        out = {
            "deployment": str(args.deployment),
            "seed": args.seed,
            "faults": [asdict(f) for f in faults],
            "faults_injected": sum(f.injected for f in faults),
            "by_kind": {k: sum(1 for f in faults if f.injected and f.kind == k) for k in KINDS},
            "commands": results,
            "commands_finished": sum(r["finished"] for r in results.values()),
            "units_rerun_after_done": rerun_after_done,
            "once_only_run_twice": twice,
            "failed_requests_outside_windows_and_faults": n_lost,
            "failed_by_target": lost,
        }
        ok = (
            out["commands_finished"] == len(COMMANDS)
            and not rerun_after_done
            and not twice
            and not n_lost
        )
        out["ok"] = ok
        if args.json:
            print(json.dumps(out))
        else:
            print(
                f"faults injected: {out['faults_injected']} "
                f"({', '.join(f'{k} {v}' for k, v in out['by_kind'].items() if v)})"
            )
            print(f"commands finished: {out['commands_finished']} of {len(COMMANDS)}")
            print(
                f"units run again after recorded done: {len(rerun_after_done)}; "
                f"once-only work run twice: {len(twice)}"
            )
            print(
                f"failed probe requests outside announced windows and fault intervals: {n_lost} "
                f"(of {len(probe_records)} requests)"
            )
            print("targets met" if ok else "TARGETS NOT MET")
        return 0 if ok else 1
    finally:
        lab.down(lab_dir)
        shutil.rmtree(work, ignore_errors=True)


def _message(out: str, err: str) -> str:
    try:
        return str(json.loads(out).get("message", ""))
    except ValueError:
        return (err or out).strip()[-600:]


def _next_command(title: str) -> str | None:
    names = [c for c, _ in COMMANDS]
    i = names.index(title)
    return names[i + 1] if i + 1 < len(names) else None


def _inject(
    fault: Fault, p: subprocess.Popen, the_lab, nodes: list[str], rnd: random.Random, inject
) -> None:
    fault.injected_at = time.time()
    fault.injected = True
    if fault.kind == "sigkill":
        os.kill(p.pid, signal.SIGKILL)
    elif fault.kind == "sigint":
        os.kill(p.pid, signal.SIGINT)
    elif fault.kind == "crash":
        # a node without workloads: a power loss of a compute loses its instances, which no
        # upgrade tool can bring back (the availability check would only measure the fault)
        from stepwise.lab import services

        hosts = {w["host"] for w in services.workloads(the_lab).values()}
        fault.node = rnd.choice([n for n in nodes if n not in hosts] or nodes)
        inject(the_lab, "crash", fault.node)
    elif fault.kind == "hang-stop":
        fault.node = rnd.choice(nodes)
        fault.target = rnd.choice(sorted(the_lab.node(fault.node).services))
        inject(the_lab, "hang-stop", fault.node, fault.target)
    elif fault.kind == "slow":
        fault.node = rnd.choice(nodes)
        fault.target = "dnf"
        inject(the_lab, "slow", fault.node, "dnf", seconds=15.0)


def _repair(fault: Fault, the_lab, inject) -> None:
    if fault.kind == "crash":
        inject(the_lab, "recover", fault.node)
    elif fault.kind in ("hang-stop", "slow"):
        inject(the_lab, "clear", fault.node)
    fault.repaired_at = time.time()


def _once_only_twice(store, runs) -> list[str]:
    """Once-only units whose work (not stepwise's own guard tasks) completed twice on a node,
    across runs."""
    work_done: dict[tuple[str, str, str], int] = {}
    for r in runs:
        once = {u.unit_id: u.step for u in store.units(r.id) if not u.idempotent}
        for t in store.task_results(r.id):
            if (
                t.unit_id in once
                and t.status in ("ok", "changed")
                and not t.task.startswith("stepwise |")
            ):
                key = (once[t.unit_id], t.host, t.task)
                work_done[key] = work_done.get(key, 0) + 1
    return [
        f"{step} {task} on {host}: {n} times"
        for (step, host, task), n in work_done.items()
        if n > 1
    ]


if __name__ == "__main__":
    sys.exit(main())
