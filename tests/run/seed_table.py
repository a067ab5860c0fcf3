"""What the e2e tests of the seed's OS upgrade share: its command table typed against one lab
and store, each command's output kept for the failure report, and the check that no probe or
client request failed outside the downtime windows the plans announced."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEPWISE = str(Path(sys.executable).parent / "stepwise")


def seed_cli(
    dep_path: Path, lab_dir: Path, store_url: str, log: list[str], run_options: Sequence[str] = ()
) -> Callable[..., subprocess.CompletedProcess]:
    """`stepwise ARGS -d DEP --lab LAB --store URL` (a run with `--yes --no-prestage` and
    `run_options`: the prestage has its own scenarios, and each of the many commands would add
    a fetch and a gate to CI's time); a non-zero exit fails the test with the last commands'
    output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def sw(*args: str) -> subprocess.CompletedProcess:
        yes = [] if args[0] == "discover" else ["--yes", "--no-prestage", *run_options]
        common = ["-d", str(dep_path), "--lab", str(lab_dir), "--store", store_url]
        p = subprocess.run(
            [STEPWISE, *args, *common, *yes],
            env=env,
            capture_output=True,
            text=True,
            # against a hang only: step 8's run took 6 minutes on a machine shared with
            # another real-OpenStack scenario
            timeout=1800,
        )
        log.append(
            f"$ stepwise {' '.join(args)} -> {p.returncode}\n{p.stdout[-1500:]}{p.stderr[-1500:]}"
        )
        assert p.returncode == 0, "\n".join(log[-3:])
        return p

    return sw


def write_rows(address: str, port: int) -> list[tuple[str, str]]:
    """Twenty rows into the lab database's `data` table at `address:port`, before step 1:
    what every later step must keep."""
    from stepwise.lab import mariadb

    rows = [(f"row-{i}", f"written before step 1 ({i})") for i in range(20)]
    for k, v in rows:
        mariadb.execute(address, port, "INSERT INTO data VALUES (%s, %s)", (k, v))
    return rows


def assert_failures_inside_windows(records: list, store_url: str, cloud: str, log: list[str]):
    """Every failed probe or client request of `records` fell inside a downtime window the
    plans of `cloud`'s runs announced; the ones outside go to `log` before the test fails."""
    from stepwise.observe.windows import cloud_intervals, outside_windows
    from stepwise.run.store import open_store

    intervals = cloud_intervals(open_store(store_url), cloud)
    outside = outside_windows(records, intervals)
    if outside:
        failed = [r for r in records if not r.get("ok") and str(r.get("target")) in outside]
        log.append(f"failed outside windows: {outside}; windows: {intervals}")
        log.extend(
            f"  t={float(r['t']):.1f} {r.get('target')} {str(r.get('error', ''))[:200]}"
            for r in failed[:60]
        )
    assert not outside, f"requests failed outside the announced windows: {outside}"
