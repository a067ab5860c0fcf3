"""A containerized (tripleo-style) cloud through the planner, the verifier and the renderer:
only services whose image digest moves are planned, their units run the style's tasks."""

from __future__ import annotations

import json
from types import MappingProxyType

from stepwise.model.deployment import build_deployment
from stepwise.model.facts import Facts, ImageFact, NodeFacts
from stepwise.model.specs import DeploymentSpec
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import make_plan, selection_for
from stepwise.run.render import render_unit
from stepwise.verify import plan_verified
from tests.plan.cloud import catalog, service

OLD, NEW = "sha256:" + "1" * 64, "sha256:" + "2" * 64
CONTAINERS = {"registry": "127.0.0.1:8787", "namespace": "tripleo", "tag": "current"}


def tripleo_cloud(style: str = "tripleo"):
    cat = catalog(
        service("db", "infra", rule={"quorum": "majority"}, cluster="galera", leave=True),
        service("api", "control", deps=("db",), rule={"min_available": 1}),
        service("agent", "data", rule={"max_unavailable": 1}),
    )
    spec = DeploymentSpec.model_validate(
        {
            "name": "tc",
            "style": style,
            "containers": {**CONTAINERS, "upgrade_namespace": "tripleo-next"},
            "roles": [
                {
                    "name": "Controller",
                    "tags": ["controlplane"],
                    "services": ["db", "api"],
                    "nodes": {"count": 3, "name": "ctl-{index}"},
                },
                {
                    "name": "Compute",
                    "services": ["agent"],
                    "nodes": {"count": 2, "name": "cmp-{index}"},
                },
            ],
        }
    )
    return build_deployment(spec, cat)


def image_facts(dep, moving: set[str], ref=None) -> Facts:
    """Every container on OLD; the services in `moving` have NEW as their target (`ref`:
    service -> the reference discover asked about)."""
    ref = ref or (lambda s: f"127.0.0.1:8787/tripleo/openstack-{s}:current")
    nodes = {}
    for n in dep.nodes:
        images = {
            s: ImageFact(OLD, NEW if s in moving else OLD, ref(s)) for s in dep.services_on(n)
        }
        nodes[n.name] = NodeFacts(images=MappingProxyType(images))
    return Facts(MappingProxyType(nodes), True, "<test>")


def test_an_update_plans_only_the_services_whose_digest_moves():
    dep = tripleo_cloud()
    plan = plan_verified(
        Workflow.UPDATE, dep, image_facts(dep, {"api"}), selection_for(Workflow.UPDATE)
    )
    touched = {s for u in plan.units for s in u.services}
    assert touched == {"api"}
    assert {n for u in plan.units for n in u.nodes} == {"ctl-0", "ctl-1", "ctl-2"}
    # no package step: the image is the package; the switch is the config step
    assert Step.PACKAGES not in {u.step for u in plan.units}
    assert Step.CONFIG in {u.step for u in plan.units}
    first = next(u for u in plan.units if u.batch)
    assert (
        "image 127.0.0.1:8787/tripleo/openstack-api:current 111111111111 -> 222222222222"
        in first.why
    )
    # nothing moves: nothing to do
    idle = make_plan(Workflow.UPDATE, dep, image_facts(dep, set()))
    assert not [u for u in idle.units if u.step is not Step.GATE]


def test_the_units_of_a_container_node_run_its_unit_and_no_dnf():
    dep = tripleo_cloud()
    facts = image_facts(dep, {"api", "agent"})
    plan = plan_verified(Workflow.UPDATE, dep, facts, selection_for(Workflow.UPDATE))
    plays = [p for u in plan.units if (p := render_unit(plan, u, dep)) is not None]
    text = json.dumps(plays)
    # the switch renders the configuration for the new image (os-apply-config); no package
    assert "dnf" not in text and "os-apply-config" in text
    by_unit = {p["name"]: p for p in plays}
    stop = next(by_unit[u.id] for u in plan.units if u.step is Step.STOP and "ctl-0" in u.nodes)
    units = [
        t["ansible.builtin.systemd_service"]["name"]
        for b in stop["tasks"]
        for t in b.get("block", [])
    ]
    assert units == ["tripleo_api"]
    config = next(by_unit[u.id] for u in plan.units if u.step is Step.CONFIG and "cmp-0" in u.nodes)
    # the play carries the images of its nodes: the reference and the target digest
    assert config["vars"]["stepwise_images"]["cmp-0"]["agent"] == {
        "ref": "127.0.0.1:8787/tripleo/openstack-agent:current",
        "target": NEW,
    }
    argv = [
        t["ansible.builtin.command"]["argv"]
        for b in config["tasks"]
        for t in b["block"]
        if isinstance(t.get("ansible.builtin.command"), dict)
    ]
    assert argv[0] == ["podman", "rm", "-f", "agent"]
    assert argv[1][:4] == ["podman", "create", "--name", "agent"]


def test_a_kolla_upgrade_targets_the_upgrade_namespace():
    dep = tripleo_cloud("kolla")
    bare = make_plan(Workflow.UPGRADE, dep, variables={"target_release": "R2"})
    # without facts every container switches, to the next release's namespace
    assert {s for u in bare.units if u.step is Step.STOP for s in u.services} == {
        "db",
        "api",
        "agent",
    }
    assert bare.params["images"]["ctl-0"]["api"] == {
        "ref": "127.0.0.1:8787/tripleo-next/api:current",
        "target": "",
    }
    stop = next(u for u in bare.units if u.step is Step.STOP and "cmp-0" in u.nodes)
    assert "kolla-agent-container" in json.dumps(render_unit(bare, stop, dep))
    # discover asked about the upgrade's reference: its digest is the target
    ref = "127.0.0.1:8787/tripleo-next/api:current"
    facts = image_facts(dep, {"api"}, ref=lambda s: ref if s == "api" else "x/y/z:current")
    plan = make_plan(Workflow.UPGRADE, dep, facts, variables={"target_release": "R2"})
    assert plan.params["images"]["ctl-0"]["api"] == {"ref": ref, "target": NEW}
    # a digest discover got for another reference (the update's) is never a target
    assert plan.params["images"]["ctl-0"]["db"]["target"] == ""
    other = make_plan(
        Workflow.UPGRADE,
        dep,
        facts,
        variables={"target_release": "R2", "target_namespace": "elsewhere"},
    )
    assert other.params["images"]["ctl-0"]["api"] == {
        "ref": "127.0.0.1:8787/elsewhere/api:current",
        "target": "",
    }


def test_a_packages_cloud_has_no_images_param():
    cat = catalog(service("api", "control"))
    spec = DeploymentSpec.model_validate(
        {"name": "p", "roles": [{"name": "C", "services": ["api"], "nodes": [{"name": "c0"}]}]}
    )
    plan = make_plan(Workflow.UPDATE, build_deployment(spec, cat))
    assert "images" not in plan.params
    assert any(u.step is Step.PACKAGES for u in plan.units)


def test_the_os_upgrade_of_container_roles_recreates_them_from_the_next_releases_images():
    """The seed's procedure on containerized TripleO: leapp takes the host while the node's
    containers are stopped; after it, before they start, each container is recreated from the
    next release's image by digest (the image fetched then, on the new OS, never before)."""
    dep = tripleo_cloud()
    target = "127.0.0.1:8787/tripleo-next/openstack-{}:current"
    facts = image_facts(dep, {"db", "api", "agent"}, ref=target.format)
    plan = make_plan(Workflow.SYSTEM_UPGRADE, dep, facts, variables={"target_release": "R2"})
    images = plan.params["images"]
    assert images["ctl-1"]["api"] == {"ref": target.format("api"), "target": NEW}
    for node in ("ctl-1", "cmp-0"):
        steps = [u.step for u in plan.units if node in u.nodes and u.step is not Step.GATE]
        os_at = steps.index(Step.SYSTEM_UPGRADE_RUN)
        assert steps.index(Step.SYSTEM_UPGRADE_PREPARE) < os_at < steps.index(Step.CONFIG)
        assert steps.index(Step.CONFIG) < steps.index(Step.START), steps
        # no package of a container to install: its image is switched by its config step
        assert Step.PACKAGES not in steps[os_at:], steps
    # every unit has work on its nodes (a packages unit of containers had none: refused at run)
    plays = [render_unit(plan, u, dep) for u in plan.units if u.step is not Step.GATE]
    assert len(plays) > 20
    first = next(u for u in plan.units if u.step is Step.CONFIG and "ctl-0" in u.nodes)
    assert "containers recreated from its images, pulled now on the new OS" in first.why
    config = next(u for u in plan.units if u.step is Step.CONFIG and "cmp-0" in u.nodes)
    play = json.dumps(render_unit(plan, config, dep))
    # pulled if the node has it not, by digest; the container recreated from that digest
    assert "skopeo" in play or "podman pull" in play
    assert "podman" in play and "create" in play and "stepwise_image_digest" in play
    # a reference discover asked about under another namespace has no digest to switch to
    stale = make_plan(
        Workflow.SYSTEM_UPGRADE, dep, image_facts(dep, {"api"}), variables={"target_release": "R2"}
    )
    assert stale.params["images"]["ctl-1"]["api"]["target"] == ""


def host_db_cloud():
    """tripleo_cloud with "db" run on the host in the tripleo style (as TripleO runs
    pacemaker): `styles: {tripleo: {host: true}}`."""
    db = service("db", "infra", rule={"quorum": "majority"}, cluster="galera", leave=True)
    cat = catalog(
        {**db, "styles": {"tripleo": {"host": True}}},
        service("api", "control", deps=("db",), rule={"min_available": 1}),
        service("agent", "data", rule={"max_unavailable": 1}),
    )
    spec = DeploymentSpec.model_validate(
        {
            "name": "tc",
            "style": "tripleo",
            "containers": CONTAINERS,
            "roles": [
                {
                    "name": "Controller",
                    "tags": ["controlplane"],
                    "services": ["db", "api"],
                    "nodes": {"count": 3, "name": "ctl-{index}"},
                }
            ],
        }
    )
    return build_deployment(spec, cat)


def test_a_service_the_style_runs_on_the_host_keeps_its_packages():
    """On a container node, a host-level service changes with its packages (dnf, its own
    unit), a containerized one with its image digest; the host one has no image anywhere."""
    from stepwise.model.facts import PackageFact
    from stepwise.model.facts_template import facts_template
    from stepwise.plan.changes import image_params

    dep = host_db_cloud()
    assert not dep.catalog["db"].in_container(dep.roles[0].style)
    # the deployment's one answer to "which services of this role run in containers"
    assert dep.containerized(dep.roles[0]) == ("api",) == dep.containerized(dep.roles[0].name)
    nodes = {
        n.name: NodeFacts(
            packages=MappingProxyType({"pkg-db": PackageFact("1.0.0", "1.1.0")}),
            images=MappingProxyType({"api": ImageFact(OLD, NEW, None)}),
        )
        for n in dep.nodes
    }
    facts = Facts(MappingProxyType(nodes), True, "<test>")
    plan = plan_verified(Workflow.UPDATE, dep, facts, selection_for(Workflow.UPDATE))
    by_step = {u.step: u for u in plan.units if "ctl-0" in u.nodes}
    assert by_step[Step.PACKAGES].services == ("db",)  # api's package is its image
    plays = {u.step: render_unit(plan, u, dep) for u in by_step.values()}
    text = json.dumps(plays[Step.PACKAGES])
    assert "pkg-db" in text and "podman" not in text
    stop = [t for b in plays[Step.STOP]["tasks"] for t in b["block"]]
    assert [t.get("ansible.builtin.systemd_service", {}).get("name") for t in stop] == [
        "tripleo_api",
        None,  # db's own task as its entry writes it: `systemctl stop db`
    ]
    assert "systemctl stop db" in json.dumps(stop[1])
    assert set(plan.params["images"]["ctl-0"]) == {"api"}
    assert set(image_params(dep, facts)["ctl-0"]) == {"api"}
    assert set(facts_template(dep)["nodes"]["ctl-0"]["images"]) == {"api"}
    # nothing of db changes: only api's image is planned
    still = {n: NodeFacts(images=nodes[n].images) for n in nodes}
    idle = plan_verified(
        Workflow.UPDATE,
        dep,
        Facts(MappingProxyType(still), True, "<test>"),
        selection_for(Workflow.UPDATE),
    )
    assert {s for u in idle.units for s in u.services} == {"api"}


def test_a_host_service_has_no_container_tasks_to_give():
    import pytest
    from pydantic import ValidationError

    from stepwise.model.specs import StyleTasksSpec

    with pytest.raises(ValidationError, match="runs as the entry is written; remove: unit"):
        StyleTasksSpec.model_validate({"host": True, "unit": "tripleo_db"})
