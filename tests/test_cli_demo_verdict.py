"""`stepwise demo` exits non-zero when a check it reports failed (it exited 0 whatever the
schemas, the seeded data and tempest said). No lab: the demo's steps are replaced by fakes that
fill its report as the real ones do, so only the verdict is under test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import stepwise.cli.demo_cmd as demo_cmd
import stepwise.lab as lab
import stepwise.run.discover as discover
from stepwise.cli.demo_checks import failed_checks
from stepwise.cli.main import app

ROOT = Path(__file__).resolve().parents[1]

PASSED = {
    "schemas_before": {"keystone": {"version": "1", "at_head": True, "code": "2023.2"}},
    "schemas": {"keystone": {"version": "2", "at_head": True, "code": "2024.1"}},
    "seed": {"checked": 3, "missing": [], "kept": True},
    "tempest": {
        "ok": True,
        "run": 103,
        "passed": 85,
        "failed": 0,
        "skipped": 18,
        "failures": [],
        "seconds": 90.0,
    },
    "client": {"client:keystone": {"calls": 70, "failed": 0}},
}
ALL_SKIPPED = {
    "ok": False,
    "run": 103,
    "passed": 0,
    "failed": 1,
    "skipped": 103,
    "failures": ["tempest run: no test passed"],
    "seconds": 9.0,
}


def _phase(**probe: Any) -> dict[str, Any]:
    return {
        "phase": "minor update",
        "probe": {
            "requests": 100,
            "failed": 0,
            "failed_outside_windows": {},
            "client": {},
            "stopped_early": None,
            **probe,
        },
    }


def _report(openstack: dict[str, Any] | None = None, **phase: Any) -> dict[str, Any]:
    report: dict[str, Any] = {
        "phases": [_phase(**phase)],
        "status_agrees_with_lab": {"checked": 9, "mismatches": []},
    }
    if openstack is not None:
        report["openstack"] = openstack
    return report


@pytest.mark.parametrize(
    ("report", "says"),
    [
        (_report({**PASSED, "tempest": ALL_SKIPPED}), "tempest: 0 passed"),
        (
            _report(
                {**PASSED, "schemas": {"keystone": {"version": "1", "at_head": False, "code": "X"}}}
            ),
            "keystone: schema 1 is behind X",
        ),
        (
            _report({**PASSED, "seed": {"checked": 3, "missing": ["image i"], "kept": False}}),
            "seeded resources: 1 missing",
        ),
        (
            _report({**PASSED, "client": {"client:glance": {"calls": 9, "failed": 2}}}),
            "client:glance: 2 of 9 calls failed",
        ),
        (_report(stopped_early="sampling stopped early"), "the probe sampling stopped early"),
        (_report(failed_outside_windows={"vip:nova_api": 3}), "3 failed outside the announced"),
    ],
)
def test_each_failed_check_is_named(report, says):
    (line,) = failed_checks(report)
    assert says in line


def test_a_report_whose_checks_passed_has_no_failed_check():
    assert failed_checks(_report(PASSED)) == []


def test_client_calls_failed_inside_announced_windows_fail_no_check():
    """One controller announces its APIs' windows: the client's calls that fail inside them
    were announced; one outside them fails the demo."""
    inside = {"client:nova": {"calls": 40, "failed": 5, "outside_windows": 0}}
    assert failed_checks(_report({**PASSED, "client": inside})) == []
    outside = {"client:nova": {"calls": 40, "failed": 5, "outside_windows": 1}}
    (line,) = failed_checks(_report({**PASSED, "client": outside}))
    assert "client:nova: 1 of 40 calls failed outside the announced windows" in line
    # failures inside the announced windows are the plan's downtime, not a failed check
    assert failed_checks(_report(PASSED, failed=4)) == []
    mismatch = _report(PASSED)
    mismatch["status_agrees_with_lab"]["mismatches"] = [{"node": "c-0", "service": "nova"}]
    assert failed_checks(mismatch) == ["status vs lab: 1 mismatch(es)"]


@pytest.fixture
def fake_demo(monkeypatch, tmp_path):
    """The demo with its lab and runs replaced: each fake writes what the real step reports;
    `tempest` is what the fake tempest run returns."""
    outcome: dict[str, Any] = {"tempest": PASSED["tempest"]}
    monkeypatch.setattr(lab, "up", lambda *a, **k: None)
    monkeypatch.setattr(lab, "down", lambda *a, **k: None)
    monkeypatch.setattr(lab, "connector", lambda *a, **k: None)
    monkeypatch.setattr(discover, "discover", lambda *a, **k: None)
    monkeypatch.setattr(discover, "stored_facts", lambda *a, **k: None)
    monkeypatch.setattr(demo_cmd, "_plan_update", lambda *a, **k: None)
    monkeypatch.setattr(demo_cmd, "_demo_phases", lambda *a, **k: [])
    monkeypatch.setattr(demo_cmd, "_openstack_before", lambda *a, **k: {"project": "p"})

    def run_phases(phases, dep, store, lab_dir, report, *rest):
        report["phases"].append(_phase())

    def after(lab_dir, seeded, report, work, json_out, tempest_list="full"):
        report["openstack"] = {**PASSED, "tempest": outcome["tempest"]}

    monkeypatch.setattr(demo_cmd, "_run_phases", run_phases)
    monkeypatch.setattr(demo_cmd, "_openstack_after", after)
    monkeypatch.setattr(demo_cmd, "agreement", lambda *a: {"checked": 9, "mismatches": []})

    def run() -> Any:
        return CliRunner().invoke(
            app,
            [
                "demo",
                "-d",
                str(ROOT / "examples" / "openstack.yaml"),
                "--lab-dir",
                str(tmp_path / "lab"),
                "--report",
                str(tmp_path / "demo.html"),
                "--json",
            ],
        )

    return outcome, run


def test_the_demo_exits_non_zero_when_tempest_skipped_every_test(fake_demo):
    outcome, run = fake_demo
    outcome["tempest"] = ALL_SKIPPED
    r = run()
    assert r.exit_code == demo_cmd.EXIT_CHECK_FAILED == 1, r.output
    report = json.loads(r.stdout[r.stdout.index("{") :])
    assert report["failed_checks"] == ["tempest: 0 passed, 1 failed, 103 skipped"]


def test_the_demo_exits_zero_when_every_check_passed(fake_demo):
    _outcome, run = fake_demo
    r = run()
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout[r.stdout.index("{") :])["failed_checks"] == []
