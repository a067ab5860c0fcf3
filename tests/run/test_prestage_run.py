"""The prestage stage run by the engine on `local` hosts: one dnf --downloadonly per node, and a
prestage that fails on one node stops the run before anything anywhere is stopped; the same
command continues once the repository answers again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import trace_lines

from stepwise.errors import InputError
from stepwise.model import load_deployment
from stepwise.model.vocab import Stage, Step, UnitState, Workflow
from stepwise.plan import selection_for
from stepwise.run.resume import RunRequest, run_plan
from stepwise.run.store import open_store
from tests.plan.cloud import facts

#: a dnf that records its arguments and fails, as dnf does on an unreachable repository, when
#: asked for the package `broken-pkg` while the file `repo-down` exists
FAKE_DNF = """#!/bin/sh
echo "$*" >> {log}
case " $* " in
  *" broken-pkg "*) if [ -e {down} ]; then
    echo "Error: Failed to download metadata for repo 'r2'" >&2; exit 1; fi;;
esac
exit 0
"""


@pytest.fixture
def fake_dnf(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """(the dnf calls' log, the file whose presence takes the repository down)."""
    bin_dir, log, down = tmp_path / "bin", tmp_path / "dnf.log", tmp_path / "repo-down"
    bin_dir.mkdir()
    dnf = bin_dir / "dnf"
    dnf.write_text(FAKE_DNF.format(log=log, down=down))
    dnf.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log, down


def test_a_failed_prestage_disrupts_nothing_and_the_same_command_continues(cloud, fake_dnf):
    log, down = fake_dnf
    dep = load_deployment(cloud)
    st = open_store(f"sqlite:///{cloud.parent / 'store.sqlite'}")
    # every node changes; cmp-1 also fetches a package no service owns, from the broken repo
    fx = facts(
        dep,
        {
            "ctl-0": ["openstack-api"],
            "cmp-0": ["openstack-worker"],
            "cmp-1": ["openstack-worker", "broken-pkg"],
        },
    )
    sel = selection_for(Workflow.UPDATE, prestage=2)
    down.touch()
    res = run_plan(RunRequest(st, dep, Workflow.UPDATE, selection=sel, facts=fx))
    assert res.status == "failed"
    assert {f.host for f in res.failures} == {"cmp-1"}
    # nothing was stopped anywhere: no service task ran on any node
    for host in ("ctl-0", "cmp-0", "cmp-1"):
        assert trace_lines(cloud.parent, host) == [], host
    states = st.unit_states(res.run_id)
    calls = log.read_text().splitlines()
    assert len(calls) == 3 and all(c.startswith("-y update --downloadonly") for c in calls)
    assert sorted(c.split()[3:] for c in calls) == [
        ["broken-pkg", "openstack-worker"],
        ["openstack-api"],
        ["openstack-worker"],
    ]
    assert sorted(states.values()).count(UnitState.FAILED) == 1
    assert sum(1 for s in states.values() if s == UnitState.DONE) == 2  # the other prestages
    # the same command with another bound is a different plan: refused, saying which it was
    with pytest.raises(InputError) as info:
        run_plan(RunRequest(st, dep, Workflow.UPDATE, facts=fx))  # --no-prestage
    assert "planned with --prestage-parallel 2" in info.value.problems[0].hint
    # the repository is back: the same command continues and runs the update
    down.unlink()
    again = run_plan(RunRequest(st, dep, Workflow.UPDATE, selection=sel, facts=fx))
    assert again.status == "done" and again.resumed and again.run_id == res.run_id
    assert again.units_reused == 2
    stops = [line.split()[1] for line in trace_lines(cloud.parent, "cmp-1")]
    assert stops[:2] == ["stop", "packages"]
    downloads = [c for c in log.read_text().splitlines() if "--downloadonly" in c]
    assert len(downloads) == 4  # only cmp-1's prestage ran again
    assert any(c == "-y update broken-pkg" for c in log.read_text().splitlines())


def test_a_prestage_unit_renders_one_download_per_node_and_no_service_task(cloud):
    from stepwise.plan import make_plan
    from stepwise.run.render import render_unit

    dep = load_deployment(cloud)
    fx = facts(dep, {"cmp-0": ["openstack-worker", "kernel-tools"]})
    plan = make_plan(Workflow.UPDATE, dep, fx, selection=selection_for(Workflow.UPDATE, prestage=4))
    (pre,) = [u for u in plan.units if u.step is Step.PRESTAGE]
    assert pre.stage is Stage.PRESTAGE and pre.nodes == ("cmp-0",)
    play = render_unit(plan, pre, dep)
    assert play is not None
    (task,) = play["tasks"]
    assert "--downloadonly" in task["ansible.builtin.command"]["argv"]
    assert dict(play["vars"])["stepwise_prestage_packages"] == {
        "cmp-0": ["kernel-tools", "openstack-worker"]
    }
