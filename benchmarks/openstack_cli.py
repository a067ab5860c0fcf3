"""CPU and wall time of one real `openstack` CLI call, through the lab's warm CLI server
(`stepwise/lab/openstack/client_server.py`) vs in a process of its own, with the lab's client
venv (built once per machine).

The calls answer without a cloud (`--version`, a command's `--help`: the CLI's start-up, its
plugins and the command's parser, which every call pays before its first request), so the
figure is what the server saves per call; a real call adds its requests to both. The CPU of a
call through the server is the caller's share plus the server's forked child's (the server's
reaped-children times in /proc).

    python benchmarks/openstack_cli.py [--calls 20]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import TextIO  # noqa: E402

from benchmarks.node_commands import children_cpu, say_comparison  # noqa: E402

CALLS = [["--version"], ["server", "list", "--help"], ["compute", "service", "list", "--help"]]


@contextlib.contextmanager
def _quiet() -> Iterator[TextIO]:
    """This process's stdout (which the served CLI writes to) on /dev/null meanwhile."""
    with open(os.devnull, "w") as sink:
        saved = os.dup(1)
        os.dup2(sink.fileno(), 1)
        try:
            yield sink
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def measure(lab, venv: Path, server_pid: int | None, calls: int) -> tuple[float, float]:
    """(CPU seconds per call, median wall seconds per call); through the server when its pid
    is given."""
    from stepwise.lab.openstack import client_server

    cli = str(venv / "bin" / "openstack")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    walls = []
    before = os.times()
    sbefore = children_cpu(server_pid) if server_pid else 0.0
    with _quiet() as sink:
        for i in range(calls):
            argv = [cli, *CALLS[i % len(CALLS)]]
            t = time.perf_counter()
            if server_pid:
                code = client_server.call(lab, venv, argv, env, timeout=60)
                assert code is not None, "the server did not take the call"
            else:
                subprocess.run(argv, env=env, stdout=sink, check=False)
            walls.append(time.perf_counter() - t)
    after = os.times()
    cpu = after.user - before.user + after.system - before.system
    cpu += after.children_user - before.children_user
    cpu += after.children_system - before.children_system
    if server_pid:
        cpu += children_cpu(server_pid) - sbefore
    return cpu / calls, statistics.median(walls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    from stepwise.lab.openstack import client_server
    from stepwise.lab.openstack.venvs import ensure_venv

    venv = ensure_venv("client")
    with tempfile.TemporaryDirectory() as tmp:
        lab = SimpleNamespace(
            dir=Path(tmp),
            run_dir=Path(tmp) / "run",
            log_dir=Path(tmp) / "log",
            socket_name=f"\0swb-{os.getpid()}",
        )
        client_server.ensure_started(lab, venv)
        pid = int((lab.run_dir / client_server.PID_FILE).read_text())
        try:
            deadline = time.monotonic() + 60
            env = dict(os.environ)
            # its answer (the version) goes nowhere: only whether the server took the call counts
            with _quiet():
                while client_server.call(lab, venv, ["openstack", "--version"], env, 60) is None:
                    if time.monotonic() > deadline:
                        raise SystemExit("the openstack CLI server did not come up")
                    time.sleep(0.2)
            rows: dict[bool, list[tuple[float, float]]] = {}
            for served in (True, False, True, False):
                rows.setdefault(served, []).append(
                    measure(lab, venv, pid if served else None, args.calls)
                )
        finally:
            os.kill(pid, signal.SIGTERM)
    calls = ", ".join(" ".join(c) for c in CALLS)
    say_comparison(rows, "openstack call", 0, f"{args.calls} calls each, best of 2 rounds: {calls}")


if __name__ == "__main__":
    main()
