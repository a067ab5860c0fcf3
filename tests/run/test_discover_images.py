"""discover's image facts: what the node module asks (`podman inspect NAME`, `skopeo inspect
docker://REF`) and reports, the references discover asks about per style and namespace, and
how they reach the facts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from stepwise.model.deployment import build_deployment
from stepwise.model.specs import DeploymentSpec
from stepwise.run import discover
from stepwise.run.discover import _facts_entry, image_targets, valid_node_facts
from tests.plan.cloud import catalog, service

sys.path.insert(0, str(Path(discover.__file__).parent / "ansible" / "library"))
import stepwise_facts  # noqa: E402

RUNNING, TARGET = "sha256:" + "c" * 64, "sha256:" + "d" * 64


class _Node:
    """A node's podman and skopeo as the module calls them: answers by argv."""

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str]]) -> None:
        self.answers = answers
        self.asked: list[list[str]] = []

    def run_command(self, cmd, use_unsafe_shell=False):
        self.asked.append(list(cmd))
        rc, out = self.answers.get(tuple(cmd), (125, ""))
        return rc, out, "" if rc == 0 else "Error: no such object"


def test_the_module_reports_running_and_target_digests():
    ref = "127.0.0.1:8787/tripleo/openstack-keystone:current"
    node = _Node(
        {
            ("podman", "inspect", "keystone"): (0, json.dumps([{"ImageDigest": RUNNING}])),
            ("skopeo", "inspect", "--tls-verify=false", f"docker://{ref}"): (
                0,
                json.dumps({"Digest": TARGET, "Name": ref}),
            ),
        }
    )
    wanted = {
        "keystone": {"container": "keystone", "ref": ref},
        "nova_api": {"container": "nova_api", "ref": "r/ns/openstack-nova-api:current"},
    }
    got = stepwise_facts._images(node, wanted, False)
    assert got == {
        "keystone": {"ref": ref, "running": RUNNING, "target": TARGET},
        # no container, registry unreachable: nothing known (the plan takes it to change)
        "nova_api": {"ref": "r/ns/openstack-nova-api:current"},
    }
    assert ["podman", "inspect", "nova_api"] in node.asked


def test_discover_asks_each_container_node_about_its_services_images():
    cat = catalog(service("db", "infra"), service("api", "control"))
    spec = DeploymentSpec.model_validate(
        {
            "name": "c",
            "style": "tripleo",
            "containers": {"registry": "reg:5000", "namespace": "tripleo", "tag": "current"},
            "roles": [
                {"name": "C", "services": ["db", "api"], "nodes": [{"name": "c0"}]},
                {"name": "P", "style": "packages", "services": ["api"], "nodes": [{"name": "p0"}]},
            ],
        }
    )
    dep = build_deployment(spec, cat)
    assert image_targets(dep, "c0", None) == {
        "db": {"container": "db", "ref": "reg:5000/tripleo/openstack-db:current"},
        "api": {"container": "api", "ref": "reg:5000/tripleo/openstack-api:current"},
    }
    assert image_targets(dep, "c0", "next")["api"]["ref"] == "reg:5000/next/openstack-api:current"
    assert image_targets(dep, "p0", None) == {}


def test_a_nodes_image_answer_is_validated_and_kept():
    raw = {
        "packages": {},
        "images": {"api": {"running": RUNNING, "target": TARGET, "ref": "r/a:t"}},
    }
    entry = _facts_entry(valid_node_facts(raw), None)
    assert entry["images"] == {"api": {"running": RUNNING, "target": TARGET, "ref": "r/a:t"}}
    # a digest that is no digest is refused like any other bad answer
    assert valid_node_facts({"images": {"api": {"running": "latest"}}}) is None
