"""Bad input of issue #34's third round is refused (exit 2, what and where) instead of being
accepted, read loosely or ignored; the -e variables the plans read reach the plan that runs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from stepwise.errors import InputError, Problem
from tests.security.helpers import EXAMPLES, cli, no_traceback

CONTAINERS = EXAMPLES / "tripleo-containers.yaml"


@pytest.mark.parametrize(
    "value",
    [
        "{\"target_namespace\": \"{{ lookup('pipe', 'id') }}\"}",
        'target_namespace=\'{{ lookup("pipe", "id") }}\'',
        "target_namespace=$(id)",
        '{"target_namespace": {"a": 1}}',
        "target_namespace=" + "a" * ((1 << 20) - 100),
        "target_namespace=Upper/Case",
        "system_upgrade_mode=sideways",
    ],
)
def test_plan_variables_are_checked_like_the_deployments_fields(tmp_path: Path, value: str):
    for cmd in (["plan", "upgrade"], ["upgrade", "prepare"], ["discover"]):
        r = cli(
            *cmd,
            "-d",
            CONTAINERS,
            "-e",
            "target_release=R2",
            "-e",
            value,
            "--store",
            f"sqlite:///{tmp_path}/s.db",
        )
        assert r.code == 2 and no_traceback(r.text), (cmd, r.text)
        assert "target_namespace" in r.text or "system_upgrade_mode" in r.text, r.text
        assert "a" * 1000 not in r.text  # a huge value is not printed back whole
    assert not (tmp_path / "s.db").exists()  # refused before anything is opened


def test_target_namespace_reaches_the_plan_a_run_executes(tmp_path: Path, monkeypatch):
    """`upgrade prepare -e target_namespace=X` runs a plan whose images are X's and which
    records X, so a resumed run plans with it again (it was dropped on the way to the run)."""
    import stepwise.run.resume as resume

    seen = {}

    def captured(req):
        seen["plan"] = req.plan
        raise InputError(Problem("captured before anything runs"))

    monkeypatch.setattr(resume, "run_plan", captured)
    args = ["-d", CONTAINERS, "-e", "target_release=R2", "-e", "target_namespace=other-ns"]
    r = cli("upgrade", "prepare", *args, "--store", f"sqlite:///{tmp_path}/s.db", "--yes")
    assert "captured" in r.text, r.text
    params = seen["plan"].params
    assert params["target_namespace"] == "other-ns"
    refs = [i["ref"] for node in params["images"].values() for i in node.values()]
    assert refs and all("/other-ns/" in ref for ref in refs), refs
    # what a resume plans with, read back from the recorded params
    assert resume._plan_variables(SimpleNamespace(params=dict(params)))["target_namespace"] == (
        "other-ns"
    )
