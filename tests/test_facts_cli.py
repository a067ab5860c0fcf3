"""Facts by hand: `stepwise facts template` writes a file to fill in that plans as it says;
wrong shapes are told with the shape expected; a deployment given as facts is recognised."""

from __future__ import annotations

import json

import yaml

from tests.security.helpers import EXAMPLES, cli

CLASSIC = EXAMPLES / "classic.yaml"


def test_a_filled_template_plans_exactly_what_it_says(tmp_path):
    out = tmp_path / "facts.yaml"
    r = cli("facts", "template", "-d", CLASSIC, "-o", out)
    assert r.code == 0 and "8 node(s)" in r.out, r.text
    doc = yaml.safe_load(out.read_text())
    assert set(doc["nodes"]) == {
        "controller-0",
        "controller-1",
        "controller-2",
        "compute-0",
        "compute-1",
        "ceph-0",
        "ceph-1",
        "ceph-2",
    }
    assert doc["nodes"]["compute-0"]["packages"]["openstack-nova-compute"] == {
        "installed": None,
        "available": None,
    }
    # as written: nothing changes
    plan = cli("plan", "update", "-d", CLASSIC, "--facts", out, "--json")
    assert plan.code == 0 and not json.loads(plan.out)["units"]
    doc["nodes"]["compute-1"]["packages"]["openstack-nova-compute"] = {
        "installed": "1.0.0",
        "available": "1.1.0",
    }
    out.write_text(yaml.safe_dump(doc))
    plan = json.loads(cli("plan", "update", "-d", CLASSIC, "--facts", out, "--json").out)
    assert {n for u in plan["units"] for n in u["nodes"]} == {"compute-1"}


def test_the_template_is_not_written_over_a_file_of_someone_else(tmp_path):
    out = tmp_path / "mine.yaml"
    out.write_text("mine: true\n")
    r = cli("facts", "template", "-d", CLASSIC, "-o", out)
    assert r.code == 2 and out.read_text() == "mine: true\n"


def test_wrong_shapes_say_the_shape_expected(tmp_path):
    cases = {
        "nodes: [a, b]\n": "nodes: wrong shape: expected a mapping of node name",
        "defaults:\n  packages:\n    nova: 1.0\n": "defaults.packages.nova: wrong shape: "
        "expected {installed: VERSION",
        "defaults:\n  os: 9\n": "defaults.os: wrong shape: expected {major: 8, target: 9}",
    }
    for text, said in cases.items():
        f = tmp_path / "f.yaml"
        f.write_text(text)
        r = cli("plan", "update", "-d", CLASSIC, "--facts", f)
        assert r.code == 2 and said in r.err and "Input should be" not in r.err, r.err


def test_a_deployment_given_as_facts_is_recognised():
    r = cli("plan", "update", "-d", CLASSIC, "--facts", CLASSIC)
    assert (
        r.code == 2
        and "this is a deployment file, not facts" in r.err
        and "unknown key" not in r.err
    )


def test_a_large_cloud_gets_the_shared_template_which_the_loader_reads_and_plans(tmp_path):
    """Above 1,000 nodes the template names each package once in `defaults` (a per-node one of
    100,000 nodes was 80 MiB, past the loader's limit); filled in there, it changes every node
    that runs the package, and --per-node still gives each node its own entries."""
    from benchmarks.clouds import write_big_cloud

    dep = write_big_cloud(tmp_path, 1200, 60)
    out = tmp_path / "facts.yaml"
    r = cli("facts", "template", "-d", dep, "-o", out)
    assert r.code == 0 and "1200 node(s)" in r.out and "in defaults" in r.out, r.text
    doc = yaml.safe_load(out.read_text())
    assert len(doc["nodes"]) == 1200 and all(v == {} for v in doc["nodes"].values())
    pkgs = doc["defaults"]["packages"]
    assert pkgs and all(v == {"installed": None, "available": None} for v in pkgs.values())
    # 1,200 empty node entries and a few packages: a line per node, not a block
    assert out.stat().st_size < 100 * 1200
    name = sorted(pkgs)[0]
    pkgs[name] = {"installed": "1.0.0", "available": "1.1.0"}
    out.write_text(yaml.safe_dump(doc))
    plan = cli("plan", "update", "-d", dep, "--facts", out, "--json", "--no-prestage")
    assert plan.code == 0, plan.text
    assert {n for u in json.loads(plan.out)["units"] for n in u["nodes"]}
    per_node = tmp_path / "per-node.yaml"
    assert cli("facts", "template", "-d", dep, "-o", per_node, "--per-node").code == 0
    full = yaml.safe_load(per_node.read_text())
    assert "packages" not in full["defaults"]
    assert all(v["packages"] for v in full["nodes"].values())
