"""The real OpenStack client as an availability probe, and tempest as acceptance, against a real
keystone, placement and glance (the `real_cloud` fixture): no mock of either."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
import urllib.request

import pytest

from stepwise.lab.nodes import Lab
from stepwise.lab.openstack import tempest as openstack_tempest
from stepwise.lab.openstack import tempest_conf
from stepwise.lab.openstack.client import ClientProbe, write_clouds_yaml
from stepwise.lab.openstack.venvs import ensure_venv
from stepwise.lab.probe import Probe, failed, per_second, summarize
from tests.lab.openstack_cloud import CLOUD
from tests.lab_json import lab_json

pytestmark = pytest.mark.lab

TARGETS = {"client:keystone", "client:placement", "client:glance"}


def _token(cloud) -> str:
    body = {
        "auth": {
            "identity": {
                "methods": ["password"],
                "password": {
                    "user": {
                        "name": "admin",
                        "domain": {"id": "default"},
                        "password": cloud.password,
                    }
                },
            },
            "scope": {"project": {"name": "admin", "domain": {"id": "default"}}},
        }
    }
    req = urllib.request.Request(
        cloud.auth_url + "/auth/tokens",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers["X-Subject-Token"]


def _names(url: str, key: str, token: str) -> list[str]:
    req = urllib.request.Request(
        url, headers={"X-Auth-Token": token, "OpenStack-API-Version": "placement 1.0"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return [x["name"] for x in json.loads(r.read())[key]]


def _probe_leftovers(cloud) -> list[str]:
    token = _token(cloud)
    names = _names(cloud.url("placement") + "/resource_providers", "resource_providers", token)
    names += _names(cloud.url("glance") + "/v2/images", "images", token)
    return [n for n in names if n.startswith("stepwise-probe-")]


def test_clouds_yaml_private_merged_and_usable_by_the_cli(real_cloud, tmp_path):
    path = tmp_path / "clouds.yaml"
    write_clouds_yaml(path, "other", "http://127.0.0.1:1/v3", "u", "p", "p", "R")
    write_clouds_yaml(
        path, CLOUD, real_cloud.auth_url, "admin", real_cloud.password, "admin", "RegionOne"
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    import yaml

    assert set(yaml.safe_load(path.read_text())["clouds"]) == {"other", CLOUD}
    with pytest.raises(ValueError, match="loopback"):
        write_clouds_yaml(path, "x", "http://10.0.0.1:5000/v3", "u", "p", "p", "R")
    # what a user of the lab does: the real openstack CLI with the lab's clouds.yaml
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env["OS_CLIENT_CONFIG_FILE"] = str(path)
    r = subprocess.run(
        [
            str(ensure_venv("client") / "bin" / "openstack"),
            "--os-cloud",
            CLOUD,
            "token",
            "issue",
            "-f",
            "value",
            "-c",
            "project_id",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-500:]
    assert len(r.stdout.strip()) == 32


def test_client_probe_records_calls_and_a_stopped_glance(real_cloud, tmp_path):
    out = tmp_path / "client.jsonl"
    probe = ClientProbe(
        CLOUD,
        real_cloud.clouds_yaml,
        out,
        interval=0.5,
        max_seconds=120,
        log=tmp_path / "client.log",
    ).start()
    try:
        deadline = time.monotonic() + 60  # the first round imports openstacksdk (a few seconds)
        while time.monotonic() < deadline:
            recs = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
            if {r["target"] for r in recs if r["ok"]} == TARGETS and len(recs) >= 9:
                break
            time.sleep(0.5)
        real_cloud.stop_service("glance")
        t_stop = time.time()
        time.sleep(4)
    finally:
        real_cloud.start_service("glance")
    t_back = time.time()
    # glance's healthcheck answers before every uWSGI worker serves: on CI's loaded machine a
    # call 0.5 s after it was reset (stop 51), so "back" is judged from 2 s on
    time.sleep(5)
    records = probe.stop()
    assert probe.returncode == 0, (tmp_path / "client.log").read_text()[-1000:]
    before = [r for r in records if r["t"] < t_stop - 2]
    after = [r for r in records if t_stop + 0.5 < r["t"] < t_stop + 3.5]
    back = [r for r in records if r["t"] > t_back + 2.0 and r["target"] == "client:glance"]
    assert back and all(r["ok"] for r in back), back
    assert {r["target"] for r in before} == TARGETS
    assert all(r["ok"] for r in before), [r for r in before if not r["ok"]]
    assert all(set(r) == {"t", "target", "ok", "detail", "ms"} for r in records)
    bad = [r for r in after if r["target"] == "client:glance"]
    assert bad and not any(r["ok"] for r in bad)
    assert all("glance" in r["detail"] or "image" in r["detail"] for r in bad), bad[:2]
    assert all(0 < len(r["detail"]) <= 200 for r in bad)
    # keystone and placement kept answering while glance was down
    assert all(r["ok"] for r in after if r["target"] != "client:glance")
    assert not any(real_cloud.password in json.dumps(r) for r in records)
    assert "client:glance" in failed(summarize(records), "client:")
    # it deleted what it made: the image glance went away under, the round SIGTERM cut short
    assert _probe_leftovers(real_cloud) == [], (tmp_path / "client.log").read_text()[-1000:]


def test_lab_probe_merges_client_records(real_cloud, tmp_path):
    lab_dir = tmp_path / "lab"
    lab_dir.mkdir()
    # a lab with no node of its own: the real cloud is the fixture's
    (lab_dir / "lab.json").write_text(
        lab_json(
            openstack={
                "series": "2025.1",
                "cloud": CLOUD,
                "clouds_yaml": str(real_cloud.clouds_yaml),
            },
        )
    )
    out = tmp_path / "probe.jsonl"
    with Probe(Lab(lab_dir), rate=2, max_seconds=60, out=out) as p:
        time.sleep(8)
    summary = summarize(p.records)
    assert set(summary["targets"]) == TARGETS
    assert summary["total"]["failed"] == 0, summary
    assert {a["target"] for a in per_second(p.records)} == TARGETS
    assert len(out.read_text().splitlines()) == len(p.records)
    assert not list((lab_dir / "run").glob("client-probe-*.jsonl"))  # merged, then removed


def test_tempest_counts_passes_and_a_stopped_glance_as_failed(real_cloud, tmp_path):
    tests = [
        "tempest\\.api\\.identity\\.v3\\.test_tokens\\.",
        "tempest\\.api\\.image\\.v2\\.test_images\\.BasicOperationsImagesTest\\.",
    ]
    tempest_conf.write_config(
        tmp_path / "ws",
        real_cloud.auth_url,
        tempest_conf.Admin("admin", real_cloud.password, "admin"),
        "RegionOne",
    )
    assert stat.S_IMODE((tmp_path / "ws" / "etc" / "tempest.conf").stat().st_mode) == 0o600
    ok = openstack_tempest.run(tmp_path / "ws", tests, timeout=600)
    assert (ok.run, ok.passed, ok.failed, ok.skipped) == (7, 7, 0, 0), ok
    by_api = dict(ok.passed_by_api)
    assert set(by_api) == {"identity", "image"} and sum(by_api.values()) == 7, ok
    assert ok.ok and ok.failures == ()
    real_cloud.stop_service("glance")
    try:
        bad = openstack_tempest.run(tmp_path / "ws", tests, timeout=600)
    finally:
        real_cloud.start_service("glance")
    assert bad.failed >= 1 and not bad.ok, bad
    assert bad.passed == 3  # keystone's token tests do not need glance
    assert all("BasicOperationsImagesTest" in tid and reason for tid, reason in bad.failures), (
        bad.failures
    )


def test_client_probe_without_its_cloud_says_so(tmp_path):
    yaml_path = write_clouds_yaml(
        tmp_path / "clouds.yaml", "there", "http://127.0.0.1:9/v3", "u", "p", "p", "R"
    )
    probe = ClientProbe(
        "missing", yaml_path, tmp_path / "c.jsonl", max_seconds=30, log=tmp_path / "c.log"
    )
    probe.start()
    deadline = time.monotonic() + 60
    while probe.running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert probe.stop() == []
    assert probe.returncode == 2
    assert "missing was not found" in (tmp_path / "c.log").read_text()


def test_the_openstack_cli_server_answers_as_the_cli_does(real_cloud, tmp_path, capfd):
    """The lab's `openstack` CLI server (lab/openstack/client_server.py): a call answers with
    the CLI's output and exit status, in a child of the server; with the server gone, the
    call is not taken (the caller runs the CLI itself) and the next call starts it again."""
    from types import SimpleNamespace

    from stepwise.lab.openstack import client_server

    venv = ensure_venv("client")
    lab = SimpleNamespace(
        dir=tmp_path,
        run_dir=tmp_path / "run",
        log_dir=tmp_path / "log",
        socket_name=f"\0swt-{os.getpid()}",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_CLIENT_CONFIG_FILE=str(real_cloud.clouds_yaml), OS_CLOUD=CLOUD)
    cli = str(venv / "bin" / "openstack")
    calls = [
        ["token", "issue", "-f", "value", "-c", "project_id"],
        ["project", "list", "-f", "value", "-c", "Name", "--sort-column", "Name"],
        ["server", "list"],  # no compute endpoint in this cloud: the CLI's error and status
        ["no-such-command"],
    ]

    def direct(args):
        r = subprocess.run([cli, *args], env=env, capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout, r.stderr

    def served(args):
        capfd.readouterr()
        code = client_server.call(lab, venv, [cli, *args], env, timeout=120)
        out, err = capfd.readouterr()
        return code, out, err

    assert served(calls[0])[0] is None  # no server yet: not taken, and one starts now
    pid_file = lab.run_dir / client_server.PID_FILE
    try:
        deadline = time.monotonic() + 60
        while served(["--version"])[0] is None:
            assert time.monotonic() < deadline, (
                lab.log_dir / "openstack-client-server.log"
            ).read_text()
            time.sleep(0.5)
        for args in calls:
            want, got = direct(args), served(args)
            assert got[0] == want[0], (args, got, want)
            if args[0] == "token":
                assert len(got[1].strip()) == 32, got  # a new token's project: the same id
                assert got[1] == want[1]
            else:
                assert got[1:] == want[1:], (args, got, want)
        assert direct(["server", "list"])[0] != 0  # the error case is one
        server = int(pid_file.read_text())
        os.kill(server, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while served(["--version"])[0] is not None:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        deadline = time.monotonic() + 60
        while served(["--version"])[0] is None:  # started again by the call that found none
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert int(pid_file.read_text()) != server
    finally:
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
