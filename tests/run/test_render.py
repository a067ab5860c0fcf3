"""Rendering units into plays (no Ansible run): every unit with work renders tasks that do it,
data reaches Ansible as `!unsafe` values, once-only and destructive units carry their guards."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import write_cloud

from stepwise.model import load_deployment, load_facts
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import make_plan
from stepwise.plan.units import Plan, Unit
from stepwise.run.ansible_files import to_yaml
from stepwise.run.inventory import Connector, inventory
from stepwise.run.render import node_packages, render_unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
#: the lab's own commands (docs/node-commands.md): never in a play stepwise renders
LAB_ONLY = ("healthcheck ", "mysql-upgrade-dump", "mysql-upgrade-restore", "upgrade-transfer-data")


def test_unit_play_runs_each_services_tasks_on_its_nodes(tmp_path: Path):
    dep = load_deployment(write_cloud(tmp_path, computes=2))
    u = Unit(
        "u",
        Step.START,
        ("ctl-0", "cmp-0"),
        ("api", "worker"),
        work={"ctl-0": ("api",), "cmp-0": ("worker",)},
    )
    play = render_unit(Plan(Workflow.UPDATE, dep.name, (u,)), u, dep)
    assert play["name"] == "u" and play["hosts"] == "ctl-0,cmp-0" and play["any_errors_fatal"]
    blocks = {b["name"]: b for b in play["tasks"]}
    assert blocks["Tasks of api"]["when"] == "inventory_hostname in stepwise_on['api']"
    assert (
        list(blocks["Tasks of api"])[-1] == "block"
    )  # name, when, block: the order Ansible users write
    assert play["vars"]["stepwise_on"] == {"api": ["ctl-0"], "worker": ["cmp-0"]}
    # task names are sentences that start with a capital and name their service
    assert all(
        t["name"][0].isupper() and "worker" in t["name"] for t in blocks["Tasks of worker"]["block"]
    )


def test_defaults_health_checks_and_once_only_guard(tmp_path: Path):
    dep = load_deployment(write_cloud(tmp_path, computes=1))
    plan = Plan(Workflow.UPDATE, dep.name, ())
    verify = render_unit(plan, Unit("v", Step.VERIFY, ("ctl-0",), ("api",)), dep)
    names = [t["name"] for b in verify["tasks"] for t in b["block"]]
    assert "Check that api is healthy" in names
    assert "stepwise_health" in verify["vars"]
    assert render_unit(plan, Unit("g", Step.GATE, (), ()), dep) is None
    xfer = Unit("x", Step.SYSTEM_UPGRADE_TRANSFER_DATA, ("cmp-0",), ("worker",), idempotent=False)
    play = render_unit(Plan(Workflow.SYSTEM_UPGRADE, dep.name, (xfer,)), xfer, dep, run_id=7)
    guard = play["tasks"][0]["ansible.builtin.shell"]["cmd"]
    assert "runs at most once" in play["tasks"][0]["name"] and "run=7 unit=x" in guard
    assert ".attempt" in guard  # an attempt is recorded, the flag only after success
    assert "mark system_upgrade_transfer_data completed" in play["tasks"][-1]["name"]
    exported = render_unit(
        Plan(Workflow.SYSTEM_UPGRADE, dep.name, (xfer,)), xfer, dep, for_export=True
    )
    assert "never" in exported["tags"]
    repos = render_unit(plan, Unit("r", Step.REPOS, ("ctl-0",), ()), dep)
    assert "target_release" in repos["tasks"][0]["ansible.builtin.command"]["argv"]


def test_the_os_upgrade_reboot_checks_its_preconditions_on_the_node(tmp_path: Path):
    dep = load_deployment(write_cloud(tmp_path, computes=1))
    u = Unit("r", Step.SYSTEM_UPGRADE_RUN, ("cmp-0",), (), work={"cmp-0": ()})
    play = render_unit(Plan(Workflow.SYSTEM_UPGRADE, dep.name, (u,)), u, dep)
    first = play["tasks"][0]["ansible.builtin.shell"]["cmd"]
    assert "not prepared" in first and "already runs OS" in first
    prep = render_unit(
        Plan(Workflow.SYSTEM_UPGRADE, dep.name, (u,)),
        Unit("p", Step.SYSTEM_UPGRADE_PREPARE, ("cmp-0",), ("worker",)),
        dep,
    )
    assert any(
        "system_upgrade_prepared" in str(t.get("ansible.builtin.shell", "")) for t in prep["tasks"]
    )
    # stepwise's own scripts are passed as `cmd` (no free-form splitting of their quotes)
    assert all(isinstance(t.get("ansible.builtin.shell", {}), dict) for t in prep["tasks"])


def test_packages_no_service_owns_are_installed(tmp_path: Path):
    dep = load_deployment(write_cloud(tmp_path, computes=1))
    u = Unit(
        "k",
        Step.PACKAGES,
        ("cmp-0",),
        (),
        work={"cmp-0": ()},
        vars={"extra_packages": {"cmp-0": ["kernel"]}},
    )
    play = render_unit(Plan(Workflow.UPDATE, dep.name, (u,)), u, dep, record=False)
    task = play["tasks"][0]
    assert "stepwise_node_packages" in task["ansible.builtin.command"]["argv"]
    assert play["vars"]["stepwise_node_packages"] == {"cmp-0": ["kernel"]}
    # with the record (test_record.py): that update carries it, one task in all
    tasks = render_unit(Plan(Workflow.UPDATE, dep.name, (u,)), u, dep)["tasks"]
    assert len(tasks) == 1 and "stepwise_node_packages" in tasks[0]["stepwise_facts"]["update"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_unit_of_every_workflow_with_work_renders_tasks(example: Path):
    dep = load_deployment(example)
    fx = (
        load_facts(ROOT / "examples" / "facts" / "minor-update.yaml", dep)
        if example.stem == "classic"
        else None
    )
    workflows = {Workflow.UPDATE: {}, Workflow.UPGRADE: {}}
    if any(r.is_management for r in dep.roles):
        workflows = {Workflow.UNDERCLOUD_UPGRADE: {}}
    elif example.stem == "composed":
        workflows[Workflow.SYSTEM_UPGRADE] = {}  # the preview of the whole procedure
    checked = 0
    for wf, kw in workflows.items():
        plans = [make_plan(wf, dep, **kw)] + (
            [make_plan(wf, dep, fx, **kw)] if fx is not None else []
        )
        for plan in plans:
            for u in plan.units:
                play = render_unit(plan, u, dep)
                if u.is_barrier:
                    assert play is None
                    continue
                assert play is not None and play["tasks"], (wf, u.id, u.step)
                # the work the unit names is in its tasks: each service's block, unowned packages
                blocks = {t.get("name") for t in play["tasks"]}
                assert node_packages(u) == {} or "stepwise_node_packages" in play["vars"], (
                    wf,
                    u.id,
                )
                assert blocks, (wf, u.id)
                # stepwise's own node work, like the catalog, calls only commands a real node has
                text = to_yaml(play)
                assert not [w for w in LAB_ONLY if w in text], (wf, u.id, u.step)
                checked += 1
    assert checked > 10


def test_data_never_becomes_template_code(tmp_path: Path):
    dep = load_deployment(write_cloud(tmp_path, computes=1))
    inv = inventory(
        dep, Connector.from_inventory({"all": {"hosts": {"cmp-0": {"ansible_port": 2222}}}})
    )
    text = to_yaml(inv)
    assert "stepwise_node_address: !unsafe" in text and "ansible_port: 2222" in text
    u = Unit(
        "k",
        Step.PACKAGES,
        ("cmp-0",),
        (),
        work={"cmp-0": ()},
        vars={"extra_packages": {"cmp-0": ["{{ lookup('pipe', 'touch /tmp/x') }}"]}},
    )
    play_text = to_yaml([render_unit(Plan(Workflow.UPDATE, dep.name, (u,)), u, dep)])
    assert "!unsafe '{{ lookup(''pipe'', ''touch /tmp/x'') }}'" in play_text
    yaml.safe_load(play_text.replace("!unsafe", ""))  # still one YAML document


def _leaves(tasks: list[dict]) -> list[dict]:
    return [t for b in tasks for t in (b["block"] if "block" in b else [b])]


def test_a_node_wide_task_every_service_declares_runs_once_per_node():
    """os-apply-config renders the whole node: the config unit of a classic controller runs it
    once, not once per service; a task between two twins keeps both (it may change what the
    second one does)."""
    dep = load_deployment(ROOT / "examples" / "classic.yaml")
    node = dep.roles[0].nodes[0].name
    services = tuple(s for s, nodes in dep.instances.items() if node in {n.name for n in nodes})
    assert len(services) > 5
    u = Unit("c", Step.CONFIG, (node,), services)
    tasks = _leaves(render_unit(Plan(Workflow.UPDATE, dep.name, (u,)), u, dep)["tasks"])
    renders = [t for t in tasks if t.get("ansible.builtin.command") == "os-apply-config"]
    assert len(renders) == 1, [t["name"] for t in tasks]

    # two twins with a different task between them: nothing dropped
    from stepwise.run import render

    last = render._Last()
    twin, other = {"name": "a", "ansible.builtin.command": "x"}, {"ansible.builtin.command": "y"}
    assert not last.repeats(twin, ["n1", "n2"])
    assert last.repeats({**twin, "name": "b"}, ["n1"])  # same task, fewer nodes
    assert not last.repeats(other, ["n1"])
    assert not last.repeats(twin, ["n1"])
    assert not last.repeats({**twin, "name": "c"}, ["n1", "n3"])  # a node it has not run on


def test_the_services_package_updates_of_a_node_are_one_dnf_transaction():
    """A classic controller's packages unit updates every service's packages in one `dnf -y
    update` (not one module run per service); each node gets exactly its services' packages."""
    dep = load_deployment(ROOT / "examples" / "classic.yaml")
    node = dep.roles[0].nodes[0].name
    services = tuple(s for s, nodes in dep.instances.items() if node in {n.name for n in nodes})
    u = Unit("p", Step.PACKAGES, (node,), services)
    # (the plays without the record: with it, the update carries it, test_record.py)
    play = render_unit(Plan(Workflow.UPDATE, dep.name, (u,)), u, dep, record=False)
    tasks = _leaves(play["tasks"])
    per_service = [t for t in tasks if str(t.get("ansible.builtin.command", "")).startswith("dnf")]
    assert per_service == []
    batched = [t for t in tasks if "stepwise_dnf_update" in str(t.get("ansible.builtin.command"))]
    assert len(batched) == 1
    assert batched[0]["when"] == "inventory_hostname in stepwise_dnf_update[0]"
    owned = {p for s in services for p in dep.catalog[s].packages}
    assert set(play["vars"]["stepwise_dnf_update"][0][node]) == owned


def test_only_the_catalogs_plain_update_form_is_batched_and_order_is_kept():
    from stepwise.run.package_batch import UpdateBatches, canonical_update

    plain = {
        "name": "Update the x packages",
        "ansible.builtin.command": "dnf -y update openstack-x python3-x",
        "register": "x_dnf",
        "changed_when": "'Nothing to do' not in x_dnf.stdout",
    }
    assert canonical_update(plain) == ("openstack-x", "python3-x")
    assert canonical_update({"ansible.builtin.command": "dnf -y update a"}) == ("a",)
    for other in (
        {**plain, "when": "x is defined"},  # a condition: left as written
        {**plain, "ansible.builtin.command": "dnf -y update --best a"},  # an option
        {**plain, "ansible.builtin.command": "dnf -y update $(touch /tmp/x)"},
        {**plain, "ansible.builtin.command": "dnf -y update"},  # the whole node: not a service's
        {**plain, "changed_when": True},  # the register may be read by a later task
        {"ansible.builtin.command": {"argv": ["dnf", "-y", "update", "a"]}},
        {"ansible.builtin.shell": "dnf -y update a"},
    ):
        assert canonical_update(other) is None, other

    batches = UpdateBatches()
    first = batches.add("a", ["n1", "n2"], ("pa", "common"))
    assert first is not None and batches.add("b", ["n2"], ("pb", "common")) is None
    batches.close()  # another task came: the next update may not move before it
    second = batches.add("c", ["n1"], ("pc",))
    assert second is not None and second is not first
    assert batches.batches == [
        {"n1": ["pa", "common"], "n2": ["pa", "common", "pb"]},
        {"n1": ["pc"]},
    ]
    assert "a, b" in first["name"] and second["when"].endswith("stepwise_dnf_update[1]")


def test_every_api_behind_a_vip_drains_through_one_template():
    """nova_api's entry has no leave of its own: its `frontend:` brings the drain (the backend's
    name a play variable, `!unsafe`), and its rejoin sets it ready only after its health."""
    dep = load_deployment(ROOT / "examples" / "classic.yaml")
    plan = make_plan(Workflow.UPDATE, dep)
    ctl = "controller-0"
    leave, rejoin = (
        next(u for u in plan.units if u.step is step and "nova_api" in u.services_on(ctl))
        for step in (Step.LEAVE, Step.REJOIN)
    )
    out, back = (render_unit(plan, u, dep) for u in (leave, rejoin))
    assert out is not None and back is not None
    assert "!unsafe 'nova_osapi'" in to_yaml(out)
    (block,) = [b for b in out["tasks"] if b["name"] == "Tasks of nova_api"]
    drain, wait = block["block"]
    assert "state drain" in drain["ansible.builtin.shell"]["cmd"]
    assert drain["environment"]["BACKEND"] == "{{ stepwise_frontends['nova_api'] }}"
    assert "show stat" in wait["ansible.builtin.shell"]["cmd"] and wait["until"]
    (block,) = [b for b in back["tasks"] if b["name"] == "Tasks of nova_api"]
    health, ready = block["block"]
    assert (
        "ansible.builtin.uri" in health and "state ready" in ready["ansible.builtin.shell"]["cmd"]
    )
    assert back["vars"]["stepwise_health"]["nova_api"]["http"].endswith(":8774/v2.1")
    # the catalog's entries hold no copy of it any more
    for name in ("keystone", "glance_api", "placement_api"):
        assert not dep.catalog[name].steps(Workflow.UPDATE.task_section).get(Step.LEAVE)


def test_a_container_node_drains_its_apis_too():
    """The drain is the service's own work, kept in a container style: the containerized
    nova_api leaves the load balancer before its container stops."""
    dep = load_deployment(ROOT / "examples" / "tripleo-containers.yaml")
    plan = make_plan(Workflow.UPDATE, dep)
    node = "controller-openstack-0"
    leave = next(
        u for u in plan.units if u.step is Step.LEAVE and "nova_api" in u.services_on(node)
    )
    play = render_unit(plan, leave, dep)
    assert play is not None and play["vars"]["stepwise_frontends"]["nova_api"] == "nova_osapi"
    (block,) = [b for b in play["tasks"] if b["name"] == "Tasks of nova_api"]
    assert "state drain" in block["block"][0]["ansible.builtin.shell"]["cmd"]
