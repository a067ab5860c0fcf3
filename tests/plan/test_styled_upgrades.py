"""Container styles through the planner and its verifier: a valid cloud of any style plans.

A container's code changes where its image is switched (its `config` step), not in a
`packages` step: the verifier must see that new code start, also in a visit whose packages
step updates a service the style runs on the host (pacemaker under tripleo)."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache
from types import MappingProxyType

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from stepwise.errors import InputError, UnsafePlanError
from stepwise.model.catalog import Catalog, load_catalog
from stepwise.model.deployment import Deployment, build_deployment
from stepwise.model.facts import NO_FACTS, Facts, ImageFact, NodeFacts, PackageFact
from stepwise.model.specs import DeploymentSpec
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import make_plan, selection_for
from stepwise.verify import plan_verified, verify_plan

CONTAINERS = {
    "registry": "127.0.0.1:8787",
    "namespace": "tripleo",
    "tag": "current",
    "upgrade_namespace": "tripleo-next",
}


@lru_cache(maxsize=1)
def builtin_catalog() -> Catalog:
    """The catalog stepwise ships (its pacemaker runs on the host under tripleo)."""
    return load_catalog()


def styled_cloud(style: str, roles: list[dict]) -> Deployment:
    """A deployment of `style` with `roles` (the containers block every style may carry)."""
    spec = DeploymentSpec.model_validate(
        {"name": f"{style}-cloud", "style": style, "containers": CONTAINERS, "roles": roles}
    )
    return build_deployment(spec, builtin_catalog())


def three_controllers(style: str = "tripleo") -> Deployment:
    """Issue 34's cloud: three controllers, the host's pacemaker beside containerized
    haproxy, keystone, glance and nova (keystone has no dependency here: its visit is the
    one pacemaker's packages step shares)."""
    return styled_cloud(
        style,
        [
            {
                "name": "Controller",
                "tags": ["controlplane"],
                "services": ["pacemaker", "haproxy", "keystone", "glance_api", "nova_api"],
                "nodes": {"count": 3, "name": "controller-{index}"},
            }
        ],
    )


def test_a_tripleo_controller_cloud_plans_its_upgrade():
    dep = three_controllers()
    plan = plan_verified(
        Workflow.UPGRADE,
        dep,
        NO_FACTS,
        selection_for(Workflow.UPGRADE),
        variables={"target_release": "R2"},
    )
    steps = [u.step for u in plan.units]
    # the contract and the unpin are still there, after every switch to the new images
    last_switch = max(i for i, u in enumerate(plan.units) if u.step is Step.CONFIG and u.batch)
    assert steps.index(Step.CONTRACT) > last_switch
    assert steps.index(Step.UNPIN_RPC) > last_switch
    # keystone's visits share a packages step with the host's pacemaker
    packages = [u for u in plan.units if u.step is Step.PACKAGES]
    assert packages and all(u.services == ("pacemaker",) for u in packages)
    assert {u.batch for u in packages} & {
        u.batch for u in plan.units if u.step is Step.CONFIG and "keystone" in u.services
    }


def test_the_same_cloud_plans_in_the_packages_style():
    dep = three_controllers("packages")
    plan = plan_verified(
        Workflow.UPGRADE,
        dep,
        NO_FACTS,
        selection_for(Workflow.UPGRADE),
        variables={"target_release": "R2"},
    )
    assert Step.CONTRACT in {u.step for u in plan.units}


def test_a_reboot_visit_switches_only_the_containers_it_changes():
    """A new kernel reboots a node in its last visit, which takes every service down: a
    container whose image does not move comes back from the image it runs, not switched to
    its target (in an upgrade that would start its new code before its own visit)."""
    dep = styled_cloud(
        "tripleo",
        [
            {
                "name": "Controller",
                "tags": ["controlplane"],
                "services": ["pacemaker", "keystone"],
                "nodes": {"count": 2, "name": "controller-{index}"},
            }
        ],
    )
    # the kernel changes everywhere, keystone's image nowhere
    fx = drawn_facts(dep, [[([], True), ([], True)]])
    for workflow in (Workflow.UPDATE, Workflow.UPGRADE):
        plan = plan_verified(
            workflow, dep, fx, selection_for(workflow), variables={"target_release": "R2"}
        )
        reboots = {u.batch for u in plan.units if u.step is Step.REBOOT}
        assert reboots, workflow
        switched = {
            s
            for u in plan.units
            if u.step is Step.CONFIG and u.batch in reboots
            for s in u.services
        }
        assert "keystone" not in switched, workflow
        # keystone still stops and starts with its rebooting node
        assert any("keystone" in u.starts for u in plan.units if u.batch in reboots)


# The services the property draws from: what the styles containerize, and what tripleo runs on
# the host (pacemaker, openvswitch), with the built-in catalog's dependencies, RPC groups,
# expand/contract and offline (heat) schemas and clusters.
CONTROLLER_SERVICES = (
    "pacemaker",
    "haproxy",
    "galera",
    "rabbitmq",
    "memcached",
    "keystone",
    "glance_api",
    "placement_api",
    "nova_api",
    "nova_scheduler",
    "nova_conductor",
    "cinder_api",
    "heat_engine",
    "openvswitch",
)
COMPUTE_SERVICES = ("nova_compute", "nova_libvirt", "openvswitch", "ovn_controller", "iscsid")
STYLES = ("packages", "tripleo", "kolla")
OLD, NEW = "sha256:" + "1" * 64, "sha256:" + "2" * 64


@st.composite
def styled_roles(draw) -> tuple[str, list[dict]]:
    """A style and a role layout: 1-4 controllers, sometimes computes, sometimes a database
    role (in the packages style under a container style, as TripleO's composed roles do)."""
    style = draw(st.sampled_from(STYLES))
    controllers = draw(
        st.lists(st.sampled_from(CONTROLLER_SERVICES), unique=True, min_size=1, max_size=7)
    )
    roles = [
        {
            "name": "Controller",
            "tags": ["controlplane"] if draw(st.booleans()) else [],
            "update_serial": draw(st.integers(1, 2)),
            "services": controllers,
            "nodes": {"count": draw(st.integers(1, 4)), "name": "controller-{index}"},
        }
    ]
    if draw(st.booleans()):
        database = {
            "name": "Database",
            "tags": ["controlplane"],
            "services": draw(
                st.lists(
                    st.sampled_from(("galera", "pacemaker", "rabbitmq")), unique=True, min_size=1
                )
            ),
            "nodes": {"count": draw(st.integers(1, 3)), "name": "database-{index}"},
        }
        if draw(st.booleans()):
            database["style"] = "packages"
        roles.append(database)
    if draw(st.booleans()):
        roles.append(
            {
                "name": "Compute",
                "update_serial": draw(st.integers(1, 2)),
                "services": draw(
                    st.lists(st.sampled_from(COMPUTE_SERVICES), unique=True, min_size=1)
                ),
                "nodes": {"count": draw(st.integers(1, 3)), "name": "compute-{index}"},
            }
        )
    return style, roles


@st.composite
def styled_cases(draw: st.DrawFn) -> dict:
    """A style, a role layout and what changes, as plain data (a failing case reads as the
    deployment it is): `changes` is None (no facts: everything changes) or, per role, per
    node, the services that change there (a container's digest moves, a host service's
    packages get a new version) and whether its kernel does (a partly updated cloud looks the
    same: what is done no longer changes)."""
    style, roles = draw(styled_roles())
    changes = None
    if draw(st.booleans()):
        changes = [
            [
                (
                    draw(st.lists(st.sampled_from(role["services"]), unique=True)),
                    draw(st.integers(0, 4)) == 0,
                )
                for _ in range(role["nodes"]["count"])
            ]
            for role in roles
        ]
    return {"style": style, "roles": roles, "changes": changes}


def drawn_facts(dep: Deployment, changes: list | None) -> Facts:
    """The facts `changes` (see `styled_cases`) describe for `dep`."""
    if changes is None:
        return NO_FACTS
    nodes = {}
    for role, per_node in zip(dep.roles, changes, strict=True):
        boxed = set(dep.containerized(role))
        for node, (moving, kernel) in zip(role.nodes, per_node, strict=True):
            images = {s: ImageFact(OLD, NEW if s in moving else OLD) for s in boxed}
            packages = {
                p: PackageFact("1.0.0", "1.1.0" if s in moving else "1.0.0")
                for s in role.services
                if s not in boxed
                for p in dep.catalog[s].packages
            }
            if kernel:
                packages["kernel"] = PackageFact("1.0.0", "1.1.0")
            nodes[node.name] = NodeFacts(
                MappingProxyType(packages), images=MappingProxyType(images)
            )
    return Facts(MappingProxyType(nodes), True, "<drawn>")


def test_every_plan_for_a_styled_cloud_passes_its_verifier():
    """Whatever the style and the layout, the planner makes a plan its own verifier accepts
    for the update and the upgrade, or refuses with a reason; and it makes plans for most
    drawn clouds (a property that every refusal would satisfy proves nothing)."""
    seen: Counter[str] = Counter()

    @settings(
        max_examples=120,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(styled_cases(), st.sampled_from([Workflow.UPDATE, Workflow.UPGRADE]))
    def plans_pass(case: dict, workflow: Workflow) -> None:
        seen["drawn"] += 1
        try:
            dep = styled_cloud(case["style"], case["roles"])
        except InputError:
            return  # e.g. a quorum rule on a service placed once
        seen["valid"] += 1
        fx = drawn_facts(dep, case["changes"])
        variables = {"target_release": "R2"} if workflow is Workflow.UPGRADE else {}
        try:
            plan = make_plan(workflow, dep, fx, variables=variables)
        except (InputError, UnsafePlanError) as refused:
            assert str(refused).strip(), "a refusal says why"
            seen["refused"] += 1
            return
        # raises on any broken invariant, also with perturbed durations
        verify_plan(plan, dep)
        seen["planned"] += 1
        event(f"{workflow} {dep.style} planned")

    plans_pass()
    assert seen["valid"] >= seen["drawn"] // 2, seen
    assert seen["planned"] >= seen["valid"] // 2, seen
