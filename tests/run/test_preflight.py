"""Preflight: each check's judge on the answers real tools give (fast), the store-side checks,
the command and a run's refusal on local hosts (fast, through Ansible), and on the lab: a
healthy lab passes, a full disk and a planted leapp inhibitor are named with node and check,
and a run refused by them changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepwise.cli.main import _register

_register()
from conftest import write_cloud

from stepwise.cli.main import app
from stepwise.errors import InputError
from stepwise.model import load_deployment
from stepwise.model.catalog import load_catalog
from stepwise.model.vocab import RunState, UnitState, Verdict, Workflow
from stepwise.plan.selection import Selection
from stepwise.run.preflight import (
    Answer,
    Context,
    checks_for,
    judge_ceph,
    judge_disk,
    judge_galera,
    judge_leapp,
    judge_pacemaker,
    judge_repos,
    judge_status_check,
)
from stepwise.run.preflight_play import half_done
from stepwise.run.store import open_store
from stepwise.run.store.store import RunOrigin
from stepwise.verify import plan_verified

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

DF = (
    "Filesystem     1024-blocks      Used Available Capacity Mounted on\n"
    "/dev/vda1         20971520   8388608  {free} 40% /\n"
)


def _ctx(tmp_path: Path, workflow: Workflow = Workflow.UPDATE, **variables) -> Context:
    dep = load_deployment(write_cloud(tmp_path))
    plan = plan_verified(workflow, dep, _facts(), Selection(), variables={}, runnable=False)
    return Context(dep, plan, variables, tuple(n.name for n in dep.nodes))


def _facts():
    from stepwise.model import NO_FACTS

    return NO_FACTS


# -- the judges -----------------------------------------------------------------------------
def test_disk_passes_above_the_threshold_and_fails_below_it_with_what_to_free(tmp_path):
    ctx = _ctx(tmp_path)
    ok = judge_disk(ctx, "ctl-0", Answer(0, DF.format(free=600 * 1024)))
    assert ok.verdict is Verdict.PASS and "600 MiB free" in ok.detail
    low = judge_disk(ctx, "ctl-0", Answer(0, DF.format(free=100 * 1024)))
    assert low.verdict is Verdict.FAIL
    assert (low.node, low.check) == ("ctl-0", "disk")
    assert "100 MiB free on /, 500 MiB needed" in low.detail
    assert "free at least 400 MiB" in low.todo
    # -e stepwise_preflight_min_free_mib overrides the default
    strict = _ctx(tmp_path / "b", stepwise_preflight_min_free_mib=1000)
    assert judge_disk(strict, "ctl-0", Answer(0, DF.format(free=600 * 1024))).verdict is (
        Verdict.FAIL
    )
    with pytest.raises(InputError) as exc:
        _ctx(tmp_path / "c", stepwise_preflight_min_free_mib="lots").min_free_mib()
    assert "stepwise_preflight_min_free_mib" in str(exc.value)
    broken = judge_disk(ctx, "ctl-0", Answer(1, "", "df: /: No such file"))
    assert broken.verdict is Verdict.FAIL and "No such file" in broken.detail


def test_an_os_upgrade_needs_more_free_space_by_default(tmp_path):
    dep = load_deployment(write_cloud(tmp_path))
    plan = plan_verified(
        Workflow.SYSTEM_UPGRADE,
        dep,
        _facts(),
        Selection(limit="ctl-0", tags=("system_upgrade_prepare",)),
        variables={},
        runnable=False,
        preview=True,
    )
    ctx = Context(dep, plan, {}, ("ctl-0",))
    assert ctx.min_free_mib() == 2048
    assert ctx.os_prepared_here("ctl-0") and not ctx.os_prepared_here("cmp-0")
    assert [c.name for c in checks_for(ctx, "ctl-0")] == ["disk", "repositories", "leapp"]
    assert [c.name for c in checks_for(ctx, "cmp-0")] == ["disk", "repositories"]


def test_repositories():
    listing = "repo id   repo name\nbaseos    BaseOS\nappstream AppStream\n"
    ok = judge_repos(None, "n", Answer(0, listing))
    assert ok.verdict is Verdict.PASS and "2 enabled: baseos, appstream" in ok.detail
    down = judge_repos(
        None, "n", Answer(1, "", "Error: Failed to download metadata for repo 'baseos'")
    )
    assert down.verdict is Verdict.FAIL and "baseos" in down.detail and down.todo
    assert judge_repos(None, "n", Answer(0, "")).verdict is Verdict.FAIL
    assert judge_repos(None, "n", Answer(127, "", "dnf: not found")).verdict is Verdict.SKIP


def _report(*entries) -> str:
    return json.dumps({"leapp_run_id": "x", "entries": list(entries)})


def test_leapp_inhibitors_are_named_with_their_remediation():
    inhibitor = {
        "title": "Detected loaded kernel drivers which have been removed in RHEL 9",
        "flags": ["inhibitor"],  # older leapp: flags; newer: groups
        "detail": {"remediations": [{"type": "hint", "context": "Unload the drivers"}]},
    }
    newer = {"title": "Missing required answers", "groups": ["inhibitor", "sanity"]}
    info = {"title": "SElinux relabeling will be scheduled", "groups": ["selinux"]}
    bad = judge_leapp(None, "ctl-0", Answer(1, _report(inhibitor, newer, info)))
    assert bad.verdict is Verdict.FAIL and bad.check == "leapp"
    assert "2 inhibitor(s)" in bad.detail and "kernel drivers" in bad.detail
    assert "Missing required answers" in bad.detail and "SElinux" not in bad.detail
    assert "Unload the drivers" in bad.todo
    assert judge_leapp(None, "n", Answer(0, _report(info))).verdict is Verdict.PASS
    none = judge_leapp(None, "n", Answer(1, "", "leapp: command not found"))
    assert none.verdict is Verdict.FAIL and "command not found" in none.detail


class _Cloud:
    """What the cluster judges read of a context: the workflow's trait and the member count."""

    def __init__(self, replaces_os: bool = False, members: int = 3):
        self.replaces_os, self.members = replaces_os, members

    def cluster_size(self, _kinds) -> int:
        return self.members


def _wsrep(status: str, size: int) -> str:
    return f"wsrep_cluster_size\t{size}\nwsrep_cluster_status\t{status}\n"


def test_galera_primary_and_size():
    ok = judge_galera(_Cloud(), "ctl-0", Answer(0, _wsrep("Primary", 3)))
    assert ok.verdict is Verdict.PASS and "Primary, 3" in ok.detail
    nonprim = judge_galera(_Cloud(), "ctl-0", Answer(0, _wsrep("non-Primary", 1)))
    assert nonprim.verdict is Verdict.FAIL and "non-Primary" in nonprim.detail
    assert "pc.bootstrap" in nonprim.todo
    short = judge_galera(_Cloud(), "ctl-0", Answer(0, _wsrep("Primary", 2)))
    assert short.verdict is Verdict.FAIL and "2 of 3" in short.detail
    # an OS upgrade takes members out on purpose: the size is not compared, a silent one skipped
    assert judge_galera(_Cloud(True), "c", Answer(0, _wsrep("Primary", 1))).verdict is (
        Verdict.PASS
    )
    assert judge_galera(_Cloud(True), "c", Answer(1, "", "no socket")).verdict is Verdict.SKIP
    gone = judge_galera(_Cloud(), "ctl-0", Answer(1, "", "Can't connect to local server"))
    assert gone.verdict is Verdict.FAIL and "Can't connect" in gone.detail


def test_pacemaker_ceph_and_service_checks():
    failed = "Cluster name: x\nFailed Resource Actions:\n  * galera_start_0 on ctl-1 'error'\n"
    assert judge_pacemaker(_Cloud(), "n", Answer(0, "Online: [ a b c ]")).verdict is Verdict.PASS
    f = judge_pacemaker(_Cloud(), "n", Answer(0, failed))
    assert f.verdict is Verdict.FAIL and "pcs resource cleanup" in f.todo
    assert judge_pacemaker(_Cloud(), "n", Answer(1, "", "not running")).verdict is Verdict.FAIL
    assert judge_ceph(None, "n", Answer(0, "HEALTH_OK")).verdict is Verdict.PASS
    assert judge_ceph(None, "n", Answer(0, "HEALTH_WARN noout flag(s) set")).verdict is (
        Verdict.WARN
    )
    assert judge_ceph(None, "n", Answer(1, "HEALTH_ERR 2 mons down")).verdict is Verdict.FAIL
    judge = judge_status_check("keystone_status")
    assert judge(None, "n", Answer(0)).verdict is Verdict.PASS
    assert judge(None, "n", Answer(1)).verdict is Verdict.WARN
    table = "| Check: Database |\n| Result: Failure |\n| Details: cannot connect |"
    bad = judge(None, "n", Answer(2, table))
    assert (
        bad.verdict is Verdict.FAIL and "Failure" in bad.detail and bad.check == "keystone_status"
    )
    # a service stopped on purpose (an OS upgrade's node between two seed steps) is not asked
    assert judge(None, "n", Answer(0, "STEPWISE_NOT_RUNNING\n")).verdict is Verdict.SKIP


def test_a_service_check_asks_only_where_the_service_runs():
    from stepwise.run.preflight import Context, checks_for

    dep = load_deployment(ROOT / "examples" / "openstack.yaml")
    node = next(n.name for n in dep.nodes if "keystone" in dep.services_on(n.name))
    from types import SimpleNamespace

    plan = SimpleNamespace(workflow=Workflow.UPDATE, params={}, units=[])  # what checks read
    ctx = Context(dep, plan)
    (ks,) = [c for c in checks_for(ctx, node) if c.name == "keystone_status"]
    unit = dep.catalog["keystone"].unit
    assert ks.command.startswith(f"if ! systemctl is-active {unit} ")
    assert ks.command.endswith("keystone-status upgrade check")


# -- the catalog's checks --------------------------------------------------------------------
def test_the_builtin_catalog_declares_the_services_upgrade_checks():
    cat = load_catalog()
    assert cat["keystone"].preflight == (("keystone_status", "keystone-status upgrade check"),)
    assert cat["glance_api"].preflight[0][1] == "glance-status upgrade check"
    assert cat["placement_api"].preflight[0][1] == "placement-status upgrade check"
    dep = load_deployment(ROOT / "examples" / "openstack.yaml")
    node = next(n.name for n in dep.nodes if "keystone" in dep.services_on(n.name))
    plan = plan_verified(Workflow.UPDATE, dep, _facts(), Selection(), variables={}, runnable=False)
    names = [c.name for c in checks_for(Context(dep, plan, {}, (node,)), node)]
    assert "keystone_status" in names and "galera" in names


def test_a_catalog_preflight_entry_is_validated(tmp_path: Path):
    write_cloud(tmp_path)
    f = tmp_path / "catalog" / "api.yaml"
    body = json.loads(f.read_text())
    body["preflight"] = [{"name": "api check"}]
    f.write_text(json.dumps(body))
    with pytest.raises(InputError) as exc:
        load_catalog(tmp_path / "catalog")
    text = str(exc.value)
    assert "api.yaml" in text and "preflight" in text


# -- the store's checks ----------------------------------------------------------------------
def test_a_node_left_half_done_by_another_command_fails_until_a_later_run_finishes(tmp_path):
    ctx = _ctx(tmp_path)
    store = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    units = [u.to_json() for u in ctx.plan.units]
    run = store.create_run(
        "testcloud", "update", "other-key", RunOrigin("stepwise update run -l ctl-0"), {}, {}, units
    )
    ctl = next(u for u in ctx.plan.units if list(u.nodes) == ["ctl-0"])
    store.set_units(run, [ctl.id], UnitState.FAILED, "boom")
    store.finish_run(run, RunState.FAILED, "boom")
    found = half_done(ctx, store, "testcloud", "my-key")
    assert [(f.node, f.check, f.verdict) for f in found] == [("ctl-0", "half_done", Verdict.FAIL)]
    assert "stepwise update run -l ctl-0" in found[0].todo
    # the same command resumes its own run: not refused by it
    assert half_done(ctx, store, "testcloud", "other-key") == []
    # a later finished run that worked on the node clears it
    later = store.create_run(
        "testcloud", "update", "k3", RunOrigin("x"), {}, {"units": units}, units
    )
    store.finish_run(later, RunState.DONE)
    assert half_done(ctx, store, "testcloud", "my-key") == []


# -- the command and the run, on local hosts --------------------------------------------------
def test_preflight_json_shape_and_exit_codes(tmp_path: Path):
    dep = write_cloud(tmp_path)
    r = runner.invoke(app, ["preflight", "update", "-d", str(dep), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc) == {"workflow", "nodes", "ok", "failed", "findings"}
    assert doc["ok"] is True and doc["failed"] == 0 and doc["workflow"] == "update"
    assert doc["nodes"] == ["cmp-0", "cmp-1", "ctl-0"]
    for f in doc["findings"]:
        assert set(f) == {"node", "check", "verdict", "detail", "todo"}
    assert {(f["node"], f["check"]) for f in doc["findings"]} >= {
        ("ctl-0", "disk"),
        ("cmp-1", "disk"),
    }
    r = runner.invoke(
        app,
        [
            "preflight",
            "update",
            "-d",
            str(dep),
            "--json",
            "-e",
            "stepwise_preflight_min_free_mib=99999999",
        ],
    )
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["failed"] == 3
    assert {f["node"] for f in doc["findings"] if f["verdict"] == "fail"} == {
        "cmp-0",
        "cmp-1",
        "ctl-0",
    }
    table = runner.invoke(app, ["preflight", "update", "-d", str(dep), "--limit", "ctl-0"])
    assert table.exit_code == 0 and "every check passed" in table.output


def test_a_run_refuses_to_start_on_a_failed_preflight_and_records_its_skip(tmp_path: Path):
    dep = write_cloud(tmp_path)
    huge = ["-e", "stepwise_preflight_min_free_mib=99999999"]
    r = runner.invoke(app, ["update", "run", "-d", str(dep), *huge])
    assert r.exit_code == 3, r.output
    text = r.output.replace("\n", " ")
    assert "preflight: ctl-0: disk:" in text and "MiB needed" in text
    assert "nothing was changed" in text and "--skip-preflight" in text
    assert not any((tmp_path / "trace").iterdir())  # no task ran
    store_file = tmp_path / ".stepwise" / "testcloud.sqlite"
    assert not store_file.exists() or not open_store(f"sqlite:///{store_file}").runs("testcloud")
    skip = ["--limit", "cmp-0", "--skip-preflight", "--no-prestage"]  # one node: short
    r = runner.invoke(app, ["update", "run", "-d", str(dep), *huge, *skip])
    assert r.exit_code == 0, r.output
    (run,) = open_store(f"sqlite:///{store_file}").runs("testcloud")
    assert run.status is RunState.DONE and run.params.get("preflight") == "skipped"


# -- the lab ---------------------------------------------------------------------------------
LAB_FIXTURES = ROOT / "tests" / "lab" / "fixtures"


@pytest.fixture
def mini_lab(tmp_path, monkeypatch):
    """The lab tests' smallest cloud with every cluster the checks read (Galera, pacemaker,
    Ceph monitors): three controllers, two computes."""
    import shutil
    import tempfile

    from test_e2e_lab import _lab_or_skip

    _lab_or_skip()
    from stepwise.lab import control

    monkeypatch.setenv("STEPWISE_LAB_HOME", str(tmp_path / "labs"))
    shutil.copy(LAB_FIXTURES / "mini.yaml", tmp_path / "mini.yaml")
    shutil.copytree(LAB_FIXTURES / "catalog", tmp_path / "catalog")
    short = Path(tempfile.mkdtemp(prefix="swpf-"))  # unix socket paths stay short
    lab = control.up(tmp_path / "mini.yaml", short / "lab")
    try:
        yield tmp_path / "mini.yaml", lab
    finally:
        control.down(lab.dir)
        shutil.rmtree(short, ignore_errors=True)


def _lab_preflight(dep: Path, lab, *args: str) -> tuple[int, dict]:
    r = runner.invoke(app, ["preflight", *args, "-d", str(dep), "--lab", str(lab.dir), "--json"])
    return r.exit_code, json.loads(r.stdout)


@pytest.mark.lab
def test_lab_healthy_passes_a_full_disk_is_named_and_refuses_the_run(mini_lab):
    from stepwise.lab.faults import inject

    dep, lab = mini_lab
    code, doc = _lab_preflight(dep, lab, "update")
    assert code == 0, doc
    checks = {(f["node"], f["check"]): f["verdict"] for f in doc["findings"]}
    for node in ("ctrl-0", "ctrl-1", "ctrl-2"):
        for check in ("disk", "repositories", "galera", "pacemaker", "ceph"):
            assert checks[(node, check)] == "pass", doc
    assert checks[("cmp-0", "disk")] == "pass" and ("cmp-0", "galera") not in checks

    inject(lab, "disk-full", "cmp-1")
    inject(lab, "repos-unreachable", "cmp-0")
    code, doc = _lab_preflight(dep, lab, "update")
    assert code == 3
    failed = [(f["node"], f["check"]) for f in doc["findings"] if f["verdict"] == "fail"]
    assert failed == [("cmp-0", "repositories"), ("cmp-1", "disk")]
    inject(lab, "clear", "cmp-0")

    before = {n: lab.read_state(n, "packages.json") for n in lab.nodes()}
    store = f"sqlite:///{dep.parent / 'store.sqlite'}"
    r = runner.invoke(
        app, ["update", "run", "-d", str(dep), "--lab", str(lab.dir), "--store", store, "-y"]
    )
    assert r.exit_code == 3, r.output
    assert "preflight: cmp-1: disk:" in r.output.replace("\n", " ")
    assert {n: lab.read_state(n, "packages.json") for n in lab.nodes()} == before
    assert not open_store(store).runs("mini")


@pytest.mark.lab
def test_lab_leapp_inhibitor_is_named_before_the_os_upgrade(mini_lab):
    from stepwise.lab.faults import inject

    dep, lab = mini_lab
    store = f"sqlite:///{dep.parent / 'store.sqlite'}"
    common = ["-d", str(dep), "--lab", str(lab.dir), "--store", store]
    # the OS upgrade starts after the major upgrade's prepare (the new release's repositories)
    r = runner.invoke(app, ["upgrade", "prepare", *common, "-y", "-e", "target_release=R2"])
    assert r.exit_code == 0, r.output
    inject(lab, "leapp-inhibitor", "ctrl-0", "Unsupported network driver")
    select = ["--limit", "ctrl-0", "--tags", "system_upgrade_prepare"]
    code, doc = _lab_preflight(dep, lab, "system-upgrade", *select, "--store", store)
    assert code == 3, doc
    (bad,) = [f for f in doc["findings"] if f["verdict"] == "fail"]
    assert (bad["node"], bad["check"]) == ("ctrl-0", "leapp")
    assert "Unsupported network driver" in bad["detail"]
    assert lab.read_state("ctrl-0", "leapp.json") is None  # preupgrade staged nothing
    r = runner.invoke(app, ["upgrade", "run", *common, *select, "-y"])
    assert r.exit_code == 3, r.output
    assert "preflight: ctrl-0: leapp:" in r.output.replace("\n", " ")
    assert lab.read_state("ctrl-0", "leapp.json") is None
    assert len(open_store(store).runs("mini")) == 1  # the prepare only


def test_ctrl_c_during_the_preflight_is_held_until_it_ends():
    """Two Ctrl-C while the nodes are asked: the step finishes, then the run is reported
    interrupted before it started (a KeyboardInterrupt there could be hit by the second
    press while unwinding and end the process by the signal)."""
    import os
    import signal

    from stepwise.run.scheduler import interrupts_held

    before = signal.getsignal(signal.SIGINT)
    with interrupts_held() as held:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        finished = True
    assert finished and held == ["SIGINT", "SIGINT"]
    assert signal.getsignal(signal.SIGINT) is before


def test_nodes_a_continued_run_left_mid_visit_skip_the_cluster_checks():
    """Continuing a run that failed in a node's visit: that node left its clusters on purpose
    (its rejoin and verify come later in the same run), so its pacemaker and galera checks
    would only refuse the continuation; every other node is still checked."""
    from dataclasses import replace

    from stepwise.model.facts import NO_FACTS
    from stepwise.run.preflight import mid_visit

    dep = load_deployment(ROOT / "examples" / "classic.yaml")
    plan = plan_verified(Workflow.UPDATE, dep, NO_FACTS, Selection(), variables={}, runnable=False)
    ctx = Context(dep, plan, {}, tuple(n.name for n in dep.nodes))
    clustered = [n for n in ctx.nodes if {"galera", "pacemaker", "ceph"} & _checks(ctx, n)]
    assert clustered
    node = clustered[0]
    cut = next(u for u in ctx.plan.units if node in u.nodes and u.step == "start")
    left = mid_visit(ctx.plan, {cut.id: UnitState.FAILED, "u-other": UnitState.DONE})
    assert node in left
    resumed = replace(ctx, mid_visit=left)
    assert not {"galera", "pacemaker", "ceph"} & _checks(resumed, node)
    assert "disk" in _checks(resumed, node)  # the node's own checks stay
    others = [n for n in clustered if n not in left]
    assert all(_checks(resumed, n) == _checks(ctx, n) for n in others)


def _checks(ctx: Context, node: str) -> set[str]:
    return {c.name for c in checks_for(ctx, node)}


def test_an_os_upgrade_does_not_wait_for_a_galera_member_that_is_not_running(tmp_path: Path):
    """A member still joining is asked again for ten seconds; in an OS upgrade, where members
    are down on purpose, one whose server does not run at all answers at once (it waited ten
    seconds in every command of the seed's procedure before)."""
    import os
    import subprocess

    from stepwise.run.preflight import GALERA_QUERY, GALERA_QUERY_OS

    dep = load_deployment(ROOT / "examples" / "composed.yaml")
    node = next(n.name for n in dep.nodes if "galera" in dep.services_on(n.name))
    variables = {"target_release": "R2"}
    os_sel = Selection(limit=node, tags=("system_upgrade_prepare",))
    for workflow, sel, want in (
        (Workflow.UPDATE, Selection(), GALERA_QUERY),
        (Workflow.SYSTEM_UPGRADE, os_sel, GALERA_QUERY_OS),
    ):
        plan = plan_verified(
            workflow, dep, _facts(), sel, variables=variables, runnable=False, preview=True
        )
        ctx = Context(dep, plan, variables, (node,))
        (galera,) = [c for c in checks_for(ctx, node) if c.name == "galera"]
        assert galera.command == want, workflow
    # a server that is not running, and a `sleep` that only says it was called: how often the
    # query asked and waited is counted, not timed
    down = (
        "mariadb() { echo asked >&3; echo \"ERROR 2002 (HY000): Can't connect to local server "
        "through socket '/run/mysqld/mysqld.sock' (2)\" >&2; return 1; }\n"
        "sleep() { echo slept >&3; }\n"
        'exec 3>>"$CALLS"\n'
    )

    def calls(query: str) -> tuple[subprocess.CompletedProcess, list[str]]:
        log = tmp_path / "calls"
        log.write_text("")
        env = {"PATH": os.environ["PATH"], "CALLS": str(log)}
        r = subprocess.run(["bash", "-c", down + query], capture_output=True, text=True, env=env)
        return r, log.read_text().split()

    r, made = calls(GALERA_QUERY_OS)
    assert r.returncode == 1 and "Can't connect" in r.stdout
    assert made == ["asked"], made  # answered at once: asked once, never waited
    # the update's query does wait for a member that may still be joining: the count sees it
    _r, made = calls(GALERA_QUERY)
    assert made.count("asked") == 10 and made.count("slept") == 10, made
