"""The OS upgrade (seed major-upgrades-with-os-upgrade): each of the seed's 12 steps is a
command an operator types; each plans what is left from the milestones reached, runs its
part, and is verified. No Ansible here: the milestones a command's units reach are added as
the engine would record them."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepwise.errors import InputError, UnsafePlanError
from stepwise.model import NO_FACTS, load_catalog, load_deployment, load_facts
from stepwise.model.vocab import Stage, Step, Workflow
from stepwise.plan import make_plan, progress
from stepwise.plan.options import command_selection
from stepwise.plan.progress import implicit_clears, implicit_marks
from stepwise.verify import verify_plan

ROOT = Path(__file__).resolve().parents[2]
FIRST = "controller-openstack-0,database-0,messaging-0"


class Cloud:
    """A composed cloud going through commands, the milestones kept as the store would."""

    def __init__(self, example: str = "composed.yaml"):
        self.dep = load_deployment(ROOT / "examples" / example)
        self.progress: set[str] = set()

    def run(self, command: str, **kw):
        wf, sel = command_selection(command, progress=self.progress, **kw)
        plan = verify_plan(
            make_plan(wf, self.dep, NO_FACTS.with_progress(self.progress), selection=sel), self.dep
        )
        for u in plan.units:
            for prefix in implicit_clears(u):
                self.progress = {m for m in self.progress if not m.startswith(prefix)}
            self.progress |= set(u.marks) | set(implicit_marks(u))
        return plan


def steps(plan) -> list[str]:
    return [str(u.step) for u in plan.units if not u.is_barrier]


def test_the_seeds_twelve_steps_as_commands():
    c = Cloud()
    assert steps(c.run("upgrade prepare")) == ["validate", "repos", "backup", "pin_rpc"]
    # step 2: stop all services on the first nodes and prepare the OS upgrade (ceph: external)
    p = c.run("upgrade run", tags="system_upgrade_prepare", limit=FIRST)
    # their services leave the load balancers and clusters first: they still serve
    assert steps(p) == ["leave", "system_upgrade_prepare"] and set(p.units[1].nodes) == set(
        FIRST.split(",")
    )
    assert {"galera", "keystone"} <= set(p.units[0].services)
    assert "ceph_mon" not in p.units[1].stops  # the monitors are the external installer's
    p = c.run("external-upgrade run", tags="system_upgrade_prepare", limit=FIRST)
    assert steps(p) == ["external_system_upgrade_prepare"] and p.units[0].nodes == (
        "controller-openstack-0",
    )
    # step 4: into the new OS
    assert steps(c.run("upgrade run", tags="system_upgrade_run", limit=FIRST)) == [
        "system_upgrade_run"
    ]
    # step 5: role names, as the seed writes them: the old nodes stop, the data moves once
    p = c.run(
        "external-upgrade run",
        tags="system_upgrade_transfer_data",
        limit="ControllerOpenstack,Database,Messaging",
    )
    stops = [u for u in p.units if u.step is Step.STOP]
    assert {n for u in stops for n in u.nodes} == {
        "controller-openstack-1",
        "controller-openstack-2",
        "database-1",
        "database-2",
        "messaging-1",
        "messaging-2",
    }
    assert all("ceph_mon" not in u.stops for u in stops)  # at least 2 monitors keep running
    (xfer,) = [u for u in p.units if u.step is Step.SYSTEM_UPGRADE_TRANSFER_DATA]
    assert (
        xfer.nodes == ("database-0",)
        and not xfer.idempotent
        and xfer.vars["system_upgrade_source"] == "database-1"
    )
    assert {w.service for w in p.windows} >= {
        "galera",
        "keystone",
        "nova_api",
    }  # the downtime starts here
    # step 6: a fresh cloud on the transferred data: databases first, DB syncs, the rest
    p = c.run("upgrade run", limit=FIRST)
    order = steps(p)
    # the APIs started after the DB syncs rejoin the load balancer before the checks
    assert order == [
        "packages",
        "config",
        "form_cluster",
        "join_cluster",
        "start",
        "rejoin",
        "migrate",
        "start",
        "rejoin",
        "verify",
    ]
    # the clusters that cannot span two OS majors start over: galera on the node the data
    # moved to, rabbitmq on the first messaging node, pacemaker on the bootstrap node of its
    # first role; the other first nodes join pacemaker's from there (pcs adds a node from a
    # member only)
    (form,) = [u for u in p.units if u.step is Step.FORM_CLUSTER]
    assert dict(form.work) == {
        "controller-openstack-0": ("pacemaker",),
        "database-0": ("galera",),
        "messaging-0": ("rabbitmq",),
    }
    (join,) = [u for u in p.units if u.step is Step.JOIN_CLUSTER]
    assert dict(join.work) == {"database-0": ("pacemaker",), "messaging-0": ("pacemaker",)}
    assert join.vars["stepwise_cluster_seed"] == {"pacemaker": "controller-openstack-0"}
    db_start = next(u for u in p.units if u.step is Step.START)
    assert "galera" in db_start.starts and "rabbitmq" in db_start.starts
    assert all(u.stage is Stage.UPGRADE for u in p.units if not u.is_barrier)
    # step 7: the monitor count is restored
    assert steps(c.run("external-upgrade run", tags="system_upgrade_run", limit=FIRST)) == [
        "external_system_upgrade_run"
    ]
    # step 8: the other sensitive nodes one by one, no transfer
    for n in (
        "controller-openstack-1",
        "database-1",
        "messaging-1",
        "controller-openstack-2",
        "database-2",
        "messaging-2",
    ):
        for cmd, kw in (
            ("upgrade run", {"tags": "system_upgrade_prepare"}),
            ("external-upgrade run", {"tags": "system_upgrade_prepare"}),
            ("upgrade run", {"tags": "system_upgrade_run"}),
            ("upgrade run", {}),
            ("external-upgrade run", {"tags": "system_upgrade_run"}),
        ):
            p = c.run(cmd, limit=n, **kw)
            assert Step.SYSTEM_UPGRADE_TRANSFER_DATA not in [u.step for u in p.units]
            assert Step.FORM_CLUSTER not in [u.step for u in p.units]
            if cmd == "upgrade run" and not kw:
                # they join the new clusters (galera's by its start: a member joins those
                # running), pacemaker's from the node that formed it in an earlier command
                # rabbitmq's from the first messaging node (rabbitmqctl join_cluster)
                (join,) = [u for u in p.units if u.step is Step.JOIN_CLUSTER]
                rabbit = ("rabbitmq",) if n.startswith("messaging") else ()
                assert join.work == {n: ("pacemaker", *rabbit)}
                assert join.vars["stepwise_cluster_seed"] == {
                    "pacemaker": "controller-openstack-0",
                    **({"rabbitmq": "messaging-0"} if rabbit else {}),
                }
                assert steps(p).index("join_cluster") < steps(p).index("start")
    # step 9: computes (workloads moved away first), networkers, ceph storage
    p = c.run("upgrade run", tags="system_upgrade_prepare", limit="novacompute-0")
    assert steps(p) == ["leave", "system_upgrade_prepare"]
    for n in (
        "novacompute-0",
        "novacompute-1",
        "networker-0",
        "networker-1",
        "cephstorage-0",
        "cephstorage-1",
        "cephstorage-2",
    ):
        for cmd, kw in (
            ("upgrade run", {"tags": "system_upgrade_prepare"}),
            ("external-upgrade run", {"tags": "system_upgrade_prepare"}),
            ("upgrade run", {"tags": "system_upgrade_run"}),
            ("upgrade run", {}),
            ("external-upgrade run", {"tags": "system_upgrade_run"}),
        ):
            c.run(cmd, limit=n, **kw)
    assert steps(c.run("external-upgrade run", tags="online_upgrade")) == ["converge"]  # step 10
    p = c.run("upgrade converge")  # step 11
    # the expanded schemas are contracted only now that no node runs the old code
    assert steps(p) == ["unpin_rpc", "contract", "verify"]
    (contract,) = [u for u in p.units if u.step is Step.CONTRACT]
    assert "keystone" in contract.services and contract.nodes == ("controller-openstack-0",)
    assert steps(c.run("external-upgrade run", tags="system_upgrade_cleanup")) == [
        "system_upgrade_cleanup"
    ]  # 12
    assert (
        not progress.in_os_upgrade(c.progress) and progress.PINNED not in c.progress
    )  # the procedure is over


def test_a_step_out_of_order_is_refused_with_the_command_to_run_first():
    c = Cloud()
    c.run("upgrade prepare")
    with pytest.raises(InputError) as exc:
        c.run("upgrade run", tags="system_upgrade_run", limit=FIRST)
    assert "prepared" in str(exc.value) and "--tags system_upgrade_prepare --limit" in str(
        exc.value
    )
    c.run("upgrade run", tags="system_upgrade_prepare", limit=FIRST)
    with pytest.raises(InputError) as exc:  # the ceph monitor of controller-openstack-0 still runs
        c.run("upgrade run", tags="system_upgrade_run", limit=FIRST)
    assert "external-upgrade run" in str(
        exc.value
    ) and "system_upgrade_nodes=controller-openstack-0" in str(exc.value)
    with pytest.raises(InputError) as exc:  # a compute before the control plane
        c.run("upgrade run", tags="system_upgrade_prepare", limit="novacompute-0")
    assert "started" in str(exc.value)


def test_before_upgrade_prepare_the_prerequisites_are_named():
    c = Cloud()
    with pytest.raises(InputError) as exc:
        c.run("upgrade run", tags="system_upgrade_prepare", limit=FIRST)
    assert "stepwise upgrade prepare" in str(exc.value)


def test_the_seeds_safety_rules():
    c = Cloud()
    c.run("upgrade prepare")
    with pytest.raises(InputError, match="without --limit"):
        c.run("upgrade run", tags="system_upgrade_prepare")
    with pytest.raises(UnsafePlanError, match="whole role Compute"):
        c.run("upgrade run", tags="system_upgrade_prepare", limit="Compute")
    with pytest.raises(InputError, match="needs --tags"):
        c.run("external-upgrade run")


def test_a_repeated_step_has_nothing_left_to_do():
    c = Cloud()
    c.run("upgrade prepare")
    c.run("upgrade run", tags="system_upgrade_prepare", limit=FIRST)
    assert c.run("upgrade run", tags="system_upgrade_prepare", limit=FIRST).units == ()


def test_ceph_and_hyperconverged_nodes_can_be_os_upgraded():
    c = Cloud("hci.yaml")
    plan = verify_plan(make_plan(Workflow.SYSTEM_UPGRADE, c.dep), c.dep)
    hci = [u for u in plan.units if "computehci-0" in u.nodes]
    kinds = [str(u.step) for u in hci]
    assert kinds.index("leave") < kinds.index(
        "system_upgrade_run"
    )  # workloads leave before the reboot
    assert (
        "external_system_upgrade_prepare" in kinds and "external_system_upgrade_run" in kinds
    )  # noout, OSD back
    assert kinds.count("system_upgrade_run") == 1


def test_a_plan_from_recorded_progress_continues_after_step_7():
    dep = load_deployment(ROOT / "examples" / "composed.yaml")
    fx = load_facts(ROOT / "examples" / "facts" / "os-upgrade.yaml", dep)
    plan = verify_plan(make_plan(Workflow.SYSTEM_UPGRADE, dep, fx), dep)
    assert not any(
        u.step is Step.SYSTEM_UPGRADE_TRANSFER_DATA for u in plan.units
    )  # never a second transfer
    assert "controller-openstack-0" in plan.params["initial"]["new_os"]
    assert "controller-openstack-2" in plan.params["initial"]["down"]["pacemaker"]
    assert "controller-openstack-0" not in {
        n for u in plan.units for n in u.nodes if u.stage is Stage.UPGRADE
    }


def test_a_node_prepared_for_the_os_upgrade_is_fenced_from_other_plans():
    c = Cloud()
    c.run("upgrade prepare")
    c.run("upgrade run", tags="system_upgrade_prepare", limit=FIRST)
    fx = NO_FACTS.with_progress(c.progress)
    assert progress.prepared_not_upgraded(fx) == sorted(FIRST.split(","))
    # a minor update now would stop, update and maybe reboot them: a reboot runs the staged leapp
    for wf in (Workflow.UPDATE, Workflow.UPGRADE):
        with pytest.raises(UnsafePlanError) as info:
            make_plan(wf, c.dep, fx)
        (p,) = info.value.problems
        assert "database-0" in p.message and "prepared for the OS upgrade" in p.message
        assert (
            "--tags system_upgrade_run --limit " in p.hint and "'!controller-openstack-0" in p.hint
        )
    # leaving them out plans the rest, and none of them is touched
    plan = make_plan(Workflow.UPDATE, c.dep, fx, limit=",".join("!" + n for n in FIRST.split(",")))
    assert plan.units and not {n for u in plan.units for n in u.nodes} & set(FIRST.split(","))
    # once on the new OS they are no longer fenced
    c.run("external-upgrade run", tags="system_upgrade_prepare", limit=FIRST)
    c.run("upgrade run", tags="system_upgrade_run", limit=FIRST)
    assert progress.prepared_not_upgraded(NO_FACTS.with_progress(c.progress)) == []


def _kwargs(argv: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """`upgrade run --tags T --limit N` -> ("upgrade run", {"tags": T, "limit": N})."""
    command, kw, rest = " ".join(argv[:2]), {}, list(argv[2:])
    while rest:
        opt, value = rest.pop(0), rest.pop(0)
        if opt in ("--tags", "--limit"):
            kw[opt[2:]] = value
        elif value.startswith("system_upgrade_nodes="):
            kw["limit"] = value.split("=", 1)[1]
    return command, kw


@pytest.mark.parametrize("example", ["openstack.yaml", "composed.yaml"])
def test_the_seed_commands_of_a_deployment_run_the_whole_procedure(example: str):
    from stepwise.plan.commands import seed_commands

    c = Cloud(example)
    commands = seed_commands(c.dep, "R2")
    done = []
    for argv in commands:
        command, kw = _kwargs(argv)
        p = c.run(command, **kw)
        # a node is prepared by the command that names it (every one, in the seed's order)
        assert "system_upgrade_prepare" not in argv or command != "upgrade run" or p.units, argv
        done += [u.step for u in p.units]
    assert done.count(Step.SYSTEM_UPGRADE_TRANSFER_DATA) == 1 and Step.CONTRACT in done
    assert not progress.in_os_upgrade(c.progress)  # the procedure is over
    # every node goes into the new OS by one command; the first node of each sensitive role together
    into_new_os = [a for a in commands if a[:2] == ("upgrade", "run") and "system_upgrade_run" in a]
    firsts = [
        r for r in c.dep.roles if any(s in ("galera", "pacemaker", "rabbitmq") for s in r.services)
    ]
    assert len(into_new_os) == sum(len(r.nodes) for r in c.dep.roles) - len(firsts) + 1


def test_a_cluster_across_two_roles_stops_all_its_old_members_before_a_new_one_starts(tmp_path):
    """RabbitMQ on two roles (found by tests/test_import_properties.py): their first nodes go
    through steps 2-7 together, so no old-OS member of either role still runs when the first
    new-OS member starts (a cluster cannot span two OS majors)."""
    from stepwise.model.importing import import_tripleo

    def role(name: str, services: list[str]) -> str:
        listed = "".join(f"\n  - OS::TripleO::Services::{s}" for s in services)
        return f"- name: {name}\n  CountDefault: 3\n  ServicesDefault:{listed}\n"

    roles = tmp_path / "roles_data.yaml"
    roles.write_text(
        role("Controller", ["Aide"])
        + role("ControllerOpenstack", ["HAproxy", "AodhApi", "OsloMessagingNotify"])
        + role("Database", ["HAproxy", "AodhListener", "OsloMessagingNotify"])
    )
    dep = import_tripleo(roles, load_catalog(), stack="overcloud").deployment
    plan = verify_plan(make_plan(Workflow.SYSTEM_UPGRADE, dep), dep)
    prepare = next(u for u in plan.units if u.step == Step.SYSTEM_UPGRADE_PREPARE)
    assert set(prepare.nodes) == {"overcloud-controlleropenstack-0", "overcloud-database-0"}
    first_start = next(
        i for i, u in enumerate(plan.units) if u.step == Step.START and "rabbitmq" in u.services
    )
    stopped = {
        n
        for u in plan.units[:first_start]
        if u.step == Step.STOP
        for n in u.stops.get("rabbitmq", ())
    }
    others = {f"overcloud-{r}-{i}" for r in ("controlleropenstack", "database") for i in (1, 2)}
    assert others <= stopped
