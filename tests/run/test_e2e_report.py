"""The report of a real lab run (~2 min; `pytest -m e2e`): a minor update of the classic
cloud's computes under the availability probe, as the demo runs it; the probe's samples are
kept in the store, the lab goes down, and the report, written from the store alone, renders
in headless Chromium with its timeline, availability chart (with the probe) and summary."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.observe.browser import (
    assert_readable,
    assert_rendered,
    assert_self_contained,
    chromium,
    open_report,
)

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "examples" / "classic.yaml"

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def test_report_of_a_lab_run(tmp_path: Path):
    from tests.run.test_e2e_lab import _lab_or_skip

    _lab_or_skip()
    chromium()
    import stepwise.lab as lab
    from stepwise.cli.demo_cmd import _phase
    from stepwise.cli.report_cmd import write_runs_html
    from stepwise.model import load_deployment
    from stepwise.run.discover import discover, stored_facts
    from stepwise.run.store import open_store

    short = Path(tempfile.mkdtemp(prefix="swr-"))  # the lab's unix sockets need a short path
    lab_dir = short / "lab"
    dep = load_deployment(CLASSIC)
    store = open_store(f"sqlite:///{tmp_path / 'classic.sqlite'}")
    lab.up(CLASSIC, lab_dir)
    try:
        conn = lab.connector(lab_dir)
        discover(dep, store, connector=conn)
        out = _phase(
            "minor update (computes)",
            "update",
            dep,
            store,
            lab_dir,
            stored_facts(dep, store),
            True,
            limit="Compute",
        )
    finally:
        lab.down(lab_dir)
        shutil.rmtree(short, ignore_errors=True)
    assert out["status"] == "done", out
    samples = store.probe_samples(out["run"])
    assert samples and {s["target"] for s in samples} >= {"vip:keystone"}
    assert sum(s["requests"] for s in samples) == out["probe"]["requests"]
    html_path = Path(os.environ.get("STEPWISE_REPORT_OUT") or tmp_path / "run.html")
    write_runs_html(store, dep, [out["run"]], html_path)
    doc = html_path.read_text()
    assert_self_contained(doc)
    assert "vip:keystone" in doc and "compute-0" in doc
    shot = (
        Path(os.environ["STEPWISE_REPORT_SHOT"])
        if os.environ.get("STEPWISE_REPORT_SHOT")
        else tmp_path / "run.png"
    )
    check = open_report(html_path, shot, tmp_path, height=1400)
    assert_rendered(check)
    assert_readable(check)
