"""CPU and wall time of a lab node command, through the lab's node-command server vs in a
process of its own (STEPWISE_LAB_NODECMD_SERVER=0), on a small stand-in lab.

The CPU of a call through the server is the caller's (the client's start-up) plus the
server's forked child's (read from the server's reaped-children times in /proc).

    python benchmarks/node_commands.py [--calls 40]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ["systemctl is-active keystone", "df -Pk /", "crudini --get /etc/os-release '' ID"]


def children_cpu(pid: int) -> float:
    """Seconds of CPU of `pid`'s reaped children (cutime + cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def measure(lab, node: str, server: bool, calls: int) -> tuple[float, float]:
    """(CPU seconds per call, median wall seconds per call)."""
    env = lab.node_env(node)
    env["STEPWISE_LAB_NODECMD_SERVER"] = "1" if server else "0"
    spid = int((lab.run_dir / "nodecmd-server.pid").read_text())
    walls = []
    before, sbefore = os.times(), children_cpu(spid)
    for i in range(calls):
        t = time.perf_counter()
        subprocess.run(
            COMMANDS[i % len(COMMANDS)],
            shell=True,
            env=env,
            cwd=lab.node_root(node),
            capture_output=True,
        )
        walls.append(time.perf_counter() - t)
    after, safter = os.times(), children_cpu(spid)
    cpu = after.children_user - before.children_user
    cpu += after.children_system - before.children_system
    cpu += safter - sbefore
    return cpu / calls, statistics.median(walls)


def say_comparison(
    rows: dict[bool, list[tuple[float, float]]], what: str, digits: int, detail: str
) -> None:
    """Print the best (CPU, wall) per call of the rounds through the server (True) and in a
    process of their own (False), and their ratio."""
    best = {k: (min(c for c, _ in v), min(w for _, w in v)) for k, v in rows.items()}
    for server, label in ((True, "through the server"), (False, "a process of its own")):
        cpu, wall = best[server]
        print(
            f"{what} {label:22}: {cpu * 1000:6.{digits}f} ms CPU, {wall * 1000:6.{digits}f} ms wall"
        )
    print(
        f"the server's call costs {best[True][0] / best[False][0]:.2f}x the CPU and "
        f"{best[True][1] / best[False][1]:.2f}x the wall time of a process of its own ({detail})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    from stepwise.lab import control

    with tempfile.TemporaryDirectory() as tmp:
        lab = control.up(ROOT / "tests" / "lab" / "fixtures" / "mini.yaml", Path(tmp) / "lab")
        try:
            measure(lab, "ctrl-0", True, 5)  # warm-up
            measure(lab, "ctrl-0", False, 5)
            rows = {}
            for server in (True, False, True, False):
                cpu, wall = measure(lab, "ctrl-0", server, args.calls)
                rows.setdefault(server, []).append((cpu, wall))
        finally:
            control.down(lab.dir)
    say_comparison(
        rows, "node command", 1, f"{args.calls} calls each, best of 2 rounds, {', '.join(COMMANDS)}"
    )


if __name__ == "__main__":
    main()
