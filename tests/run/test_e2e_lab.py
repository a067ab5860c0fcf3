"""End to end on the lab's classic deployment (slow: minutes; `pytest -m e2e`).

SIGKILL, then SIGINT, of stepwise at random moments of a lab update, then the same command
again: the same end state as an uninterrupted run, and no unit recorded done ran again.
(`stepwise demo` itself runs end to end on real OpenStack in test_e2e_real_openstack.py: the
README's first command; the stand-in's minor update and its computes' reboot into the new
kernel in test_e2e_imported_tripleo.py; its major upgrade in test_e2e_os_upgrade.py.)
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "examples" / "classic.yaml"
STEPWISE = str(Path(sys.executable).parent / "stepwise")

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


@pytest.fixture
def lab_dir():
    """A short path: the lab's unix sockets live under it (108-byte limit), so not in pytest's
    long tmp_path."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="swl-"))
    yield d / "lab"
    shutil.rmtree(d, ignore_errors=True)


def small_classic(path: Path, name: str | None = None) -> Path:
    """The classic layout with one ceph node (the scenarios that use it touch no ceph node but
    the one), written to `path`; `name` renames the cloud (its store and lab are its own)."""
    full = (ROOT / "examples" / "classic.yaml").read_text()
    text = full.replace('count: 3, name: "ceph', 'count: 1, name: "ceph')
    assert text != full, "examples/classic.yaml no longer has three ceph nodes to shrink"
    if name:
        text = text.replace("name: classic", f"name: {name}")
    path.write_text(text)
    return path


def _lab_or_skip():
    try:
        import stepwise.lab  # noqa: F401
        from stepwise.lab import haproxy, mariadb

        mariadb.binaries()
        haproxy.binary()
    except Exception as exc:  # pragma: no cover - depends on the machine
        if os.environ.get("CI"):
            pytest.fail(f"the lab cannot run here: {exc}")
        pytest.skip(f"no lab here: {exc}")


def test_sigkill_and_sigint_during_a_lab_update_then_run_again(tmp_path: Path, lab_dir: Path):
    _lab_or_skip()
    import stepwise.lab as lab
    from stepwise.cli.demo_cmd import agreement
    from stepwise.model import load_deployment
    from stepwise.observe.status import ran_after_done
    from stepwise.run.store import open_store

    dep_path = tmp_path / "classic.yaml"
    dep_path.write_text(CLASSIC.read_text())
    lab.up(dep_path, lab_dir)
    try:
        # the data-plane roles keep this test to a few minutes; the kill points are random
        cmd = [
            STEPWISE,
            "update",
            "run",
            "-d",
            str(dep_path),
            "--lab",
            str(lab_dir),
            "--limit",
            "Compute,CephStorage",
            "--json",
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(
            [STEPWISE, "discover", "-d", str(dep_path), "--lab", str(lab_dir)],
            check=True,
            env=env,
            capture_output=True,
        )
        rnd = random.Random(int(os.environ.get("STEPWISE_KILL_SEED", "7")))
        for sig in (signal.SIGKILL, signal.SIGINT):
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            time.sleep(rnd.uniform(4, 25))
            if p.poll() is None:
                os.kill(p.pid, sig)
            if sig is signal.SIGINT:
                # a first Ctrl-C aborts at the next safe point; a second one interrupts, unless
                # the abort reached its safe point in between
                time.sleep(0.7)
                if p.poll() is None:
                    os.kill(p.pid, sig)
            out = p.communicate(timeout=300)[0].decode()
            if sig is signal.SIGINT and p.returncode != 0:
                # Ctrl-C is an interrupt, not a failure: the running units are recorded so
                # (or it came during the preflight: the run did not start, nothing recorded)
                assert (
                    (p.returncode == 130 and '"status": "interrupted"' in out)
                    or (p.returncode == 130 and '"kind": "interrupted"' in out)
                    or (p.returncode == 5 and '"status": "aborted"' in out)
                ), out
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        res = json.loads(done.stdout)
        assert res["status"] in ("done", "nothing")
        dep = load_deployment(dep_path)
        store = open_store(f"sqlite:///{tmp_path / '.stepwise' / 'classic.sqlite'}")
        runs = store.runs("classic")
        assert runs[0].status == "done"
        # no unit recorded done ran again afterwards
        for r in runs:
            again = ran_after_done(store, r.id)
            assert again == [], [(t.unit_id, t.host, t.task) for t in again[:5]]

        def stale() -> list[tuple[str, str]]:
            facts = store.facts("classic")
            return [
                (n, p)
                for n, f in facts["nodes"].items()
                for p, v in f["packages"].items()
                if v.get("available")
                and v.get("available") != v.get("installed")
                and dep.role_of(n).name in ("Compute", "CephStorage")
                and any(p in dep.catalog[s].packages for s in dep.services_on(n))
            ]

        # what each node reported after its packages unit (the update carries the record):
        # the store already knows every new version, before any discover
        assert stale() == []
        assert agreement(store, dep, lab_dir)["mismatches"] == []
        # every service whose package had an update now runs it, as the lab says
        subprocess.run(
            [STEPWISE, "discover", "-d", str(dep_path), "--lab", str(lab_dir)],
            check=True,
            env=env,
            capture_output=True,
        )
        assert stale() == []
        assert agreement(store, dep, lab_dir)["mismatches"] == []
    finally:
        lab.down(lab_dir)
