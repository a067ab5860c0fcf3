"""The input model on valid input: the built-in catalog, the examples, facts and rule semantics."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from stepwise.model import Availability, load_catalog, load_deployment, load_facts
from stepwise.model.catalog import BUILTIN_CATALOG, node_step_seconds
from stepwise.model.catalog_checks import find_cycle
from stepwise.model.choices import RpcMixing
from stepwise.model.vocab import DEFAULT_STEP_SECONDS, NODE_STEPS, UPGRADE_EXTRA_KEYS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

REQUIRED_SERVICES = {
    "haproxy",
    "galera",
    "rabbitmq",
    "pacemaker",
    "memcached",
    "keystone",
    "glance_api",
    "nova_api",
    "nova_conductor",
    "nova_scheduler",
    "nova_compute",
    "neutron_server",
    "neutron_ovs_agent",
    "neutron_l3_agent",
    "openvswitch",
    "cinder_api",
    "cinder_scheduler",
    "cinder_volume",
    "ceph_mon",
    "ceph_osd",
}


def _documented_commands() -> set[str]:
    """The first column of docs/node-commands.md's command list: the only commands a built-in
    catalog task may call (`*-manage` style entries are patterns)."""
    text = (ROOT / "docs" / "node-commands.md").read_text()
    table = text.split("## The command list", 1)[1].split("\n\n|", 1)[1].split("\n\n", 1)[0]
    names: set[str] = set()
    for row in table.splitlines()[2:]:
        names.update(re.findall(r"`([^`]+)`", row.split("|")[1]))
    return names


#: docs/node-commands.md: the only commands a task may call (first word of the command line).
NODE_COMMANDS = _documented_commands()
#: the lab's own diagnostics and stepwise's lab-only helpers: never a catalog command
LAB_ONLY = {"healthcheck", "mysql-upgrade-dump", "mysql-upgrade-restore", "upgrade-transfer-data"}
#: docs/catalog.md: the only Jinja variables a task may use.
JINJA_VARS = {
    "inventory_hostname",
    "stepwise_node_address",
    "stepwise_bootstrap_node",
    "system_upgrade_source",
    "stepwise_cluster_seed",
    "target_release",
    "stepwise_drain_policy",
    "item",
}
#: plain shell helpers a `shell` task may combine the node commands with (they touch no paths)
SHELL_HELPERS = {"set", "test", "awk", "echo", "sleep"} & NODE_COMMANDS
TASK_KEYWORDS = {
    "name",
    "register",
    "changed_when",
    "failed_when",
    "when",
    "until",
    "retries",
    "delay",
    "loop",
    # how many hosts run the task at once (an unpin's restart: one controller at a time)
    "throttle",
    # on another node than the play's (pcs adds a node to its cluster from a member only)
    "delegate_to",
    # a wait that keeps a window open and gates nothing (the conductor's wait for the computes)
    "ignore_errors",
    # what earlier tasks registered handed to a shell as variables, never spliced into its
    # code (the drain's refusal quotes nova's answers)
    "environment",
}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------ built-in catalog


def test_builtin_catalog_has_the_reference_services(catalog):
    assert REQUIRED_SERVICES <= set(catalog.services)
    assert len(catalog) >= 18


def test_every_catalog_file_is_named_after_its_service(catalog):
    for svc in catalog:
        assert Path(svc.source).name == f"{svc.name}.yaml"
        assert Path(svc.source).parent == BUILTIN_CATALOG


def test_examples_catalog_symlink_is_the_builtin_catalog():
    link = EXAMPLES / "catalog"
    assert link.is_symlink()
    assert link.resolve() == BUILTIN_CATALOG.resolve()


@pytest.mark.parametrize(
    "name,plane,rolling,cluster,rpc,rule",
    [
        ("galera", "infra", True, "galera", None, ("quorum", "majority")),
        ("rabbitmq", "infra", True, "rabbitmq", None, ("quorum", "majority")),
        ("pacemaker", "infra", True, "pacemaker", None, ("quorum", "majority")),
        ("ceph_mon", "infra", True, "ceph-mon", None, ("quorum", "majority")),
        ("ceph_osd", "data", True, "ceph-osd", None, ("max_unavailable", 1)),
        ("nova_compute", "data", True, None, "nova", ("max_unavailable", 0.10)),
        ("nova_api", "control", True, None, "nova", ("min_available", 1)),
        ("nova_conductor", "control", True, None, "nova", ("min_available", 1)),
        ("keystone", "control", True, None, None, ("min_available", 1)),
        ("neutron_server", "control", True, None, "neutron", ("min_available", 1)),
        ("cinder_api", "control", True, None, "cinder", ("min_available", 1)),
        ("openvswitch", "infra", True, None, None, None),
    ],
)
def test_reference_service_semantics(catalog, name, plane, rolling, cluster, rpc, rule):
    svc = catalog[name]
    assert (svc.plane, svc.rolling, svc.cluster, svc.rpc) == (plane, rolling, cluster, rpc)
    if rule is None:
        assert svc.availability is None
    else:
        assert (svc.availability.rule, svc.availability.value) == rule


def test_reference_dependencies_follow_the_real_upgrade_order(catalog):
    assert "nova_conductor" in catalog["nova_compute"].depends_on
    assert "ceph_mon" in catalog["ceph_osd"].depends_on
    assert "neutron_server" in catalog["neutron_ovs_agent"].depends_on
    assert "galera" in catalog["keystone"].depends_on
    for api in (
        "glance_api",
        "nova_api",
        "nova_conductor",
        "nova_scheduler",
        "neutron_server",
        "cinder_api",
    ):
        assert "keystone" in catalog[api].depends_on, api
    assert find_cycle({s.name: s.depends_on for s in catalog}) is None
    # no service depends on a data-plane service except data-plane ones of the same project
    for svc in catalog:
        for dep in svc.depends_on:
            if catalog[dep].plane == "data":
                assert svc.plane == "data" and dep.split("_")[0] == svc.name.split("_")[0], (
                    svc.name,
                    dep,
                )


def _all_tasks(svc):
    for wf, steps in svc.tasks.items():
        for step, tasks in steps.items():
            for t in tasks:
                yield f"{wf}.{step}", t
    for t in svc.converge:
        yield "converge", t
    for step, tasks in svc.system_upgrade.items():
        for t in tasks:
            yield f"system_upgrade.{step}", t


#: what `ansible.builtin.systemd_service` runs for each state (`systemctl show` first)
SYSTEMD_VERBS = {
    "started": "start",
    "stopped": "stop",
    "reloaded": "reload",
    "restarted": "restart",
}


def _unit_command(task) -> str | None:
    """What a task asks of systemd as the `systemctl VERB UNIT` line it amounts to: the
    systemd_service module's `name`/`state`, or the command itself (None for other tasks)."""
    mod = task.get("ansible.builtin.systemd_service")
    if mod is not None:
        # no state: a query of the unit (`systemctl show`), asks nothing of it
        return f"systemctl {SYSTEMD_VERBS[mod['state']]} {mod['name']}" if "state" in mod else None
    cmd = task.get("ansible.builtin.command")
    return cmd if isinstance(cmd, str) and cmd.startswith("systemctl ") else None


def _commands(cmd: str | dict, shell: bool) -> list[str]:
    """The commands a task line runs (for shell: each pipeline part and $(...) of each line)."""
    if isinstance(cmd, dict):  # the module's parameters: {cmd: ..., executable: /bin/bash}
        cmd = cmd["cmd"]
    if not shell:
        return [shlex.split(cmd)[0]]
    words = []
    cmd = re.sub(r"'[^']*'", "''", cmd)  # quoted program text (awk) is not a command
    cmd = re.sub(r'"[^"$`]*"', '""', cmd)  # nor a double-quoted string with no substitution (SQL)
    cmd = cmd.replace("\\\n", " ")  # a line continued with a backslash is one command
    for part in re.split(r"\n|\||\$\(|&&|;", cmd):
        part = re.sub(r"^\s*[A-Za-z_]+=", "", part).strip()
        part = re.sub(r"^(if|then|else|elif)\s+", "", part)  # shell syntax: the command follows it
        if part in ("fi", "then", "else"):
            continue
        if part and not part.startswith(("'", '"', ")")):
            word = part.split()[0]
            if word not in SHELL_HELPERS:
                words.append(word)
    return words


def test_every_task_is_a_named_command_calling_the_node_vocabulary(catalog):
    seen = 0
    for svc in catalog:
        if svc.health.get("command"):
            assert _commands(svc.health["command"], shell=True)[0] in NODE_COMMANDS, (
                svc.name,
                svc.health,
            )
        registered: dict[str, set[str]] = {}  # a step's tasks may read what earlier ones register
        for where, task in _all_tasks(svc):
            seen += 1
            known = JINJA_VARS | registered.setdefault(where, set())
            modules = [k for k in task if k.startswith("ansible.builtin.")]
            assert modules in (
                ["ansible.builtin.command"],
                ["ansible.builtin.shell"],
                ["ansible.builtin.systemd_service"],
            ), (svc.name, where, task)
            assert set(task) - set(modules) <= TASK_KEYWORDS, (svc.name, where, task)
            assert isinstance(task.get("name"), str) and task["name"], (svc.name, where)
            if modules == ["ansible.builtin.systemd_service"]:
                # the module runs `systemctl show` and the verb: only the unit and its state, or
                # only the unit for a query whose answer the task registers (rabbitmq's stop
                # asks rabbitmqctl of a running broker only)
                args = task[modules[0]]
                query = set(args) == {"name"} and "register" in task
                assert query or (
                    set(args) == {"name", "state"} and args["state"] in SYSTEMD_VERBS
                ), task
                assert args["name"] == svc.unit, (svc.name, where, args)
                continue
            cmd = task[modules[0]]
            for word in _commands(cmd, shell=modules[0].endswith("shell")):
                assert word in NODE_COMMANDS or word.endswith(("-manage", "-status")), (
                    svc.name,
                    where,
                    cmd,
                    word,
                )
            for text in (
                str(cmd),
                task["name"],
                str(task.get("when", "")),
                str(task.get("delegate_to", "")),
            ):
                for var in re.findall(r"{{\s*([A-Za-z_][A-Za-z0-9_]*)", text):
                    assert var in known, (svc.name, where, var)
            if "register" in task:
                registered[where].add(task["register"])
            if "when" in task:
                assert re.fullmatch(r"[A-Za-z0-9_ =!.'\"-]+", task["when"]), task["when"]
    assert seen > 300


def test_every_preflight_command_is_a_documented_node_command(catalog):
    """The preflight's own checks and the catalog's `preflight:` entries ask the nodes only
    documented, real commands (the lab answers the same ones)."""
    from stepwise.run.preflight import NODE_CHECKS

    commands = [c.command for c in NODE_CHECKS]
    commands += [cmd for svc in catalog for _name, cmd in svc.preflight]
    assert any("-status upgrade check" in c for c in commands)
    bash_syntax = {"for", "do", "case", "exit", "$?"}  # the Galera check's wait loop
    for cmd in commands:
        for word in _commands(cmd, shell=True):
            assert word in NODE_COMMANDS | bash_syntax or word.endswith("-status"), (cmd, word)


def test_services_are_started_stopped_and_reloaded_by_the_systemd_module(catalog):
    """systemd has a module: the catalog uses it (ansible-lint's command-instead-of-module)
    and keeps `systemctl` commands for queries only (`status`, which the rule allows)."""
    modules = 0
    for svc in catalog:
        for where, task in _all_tasks(svc):
            cmd = task.get("ansible.builtin.command")
            modules += "ansible.builtin.systemd_service" in task
            # every start/stop/reload goes through ansible.builtin.systemd_service
            if isinstance(cmd, str) and cmd.startswith("systemctl "):
                assert cmd.split()[1] == "status", (svc.name, where, cmd)
    assert modules > 400


def test_the_command_list_holds_only_real_commands():
    """The documented list is the real tools', with no lab-only command in it."""
    assert {"systemctl", "dnf", "crudini", "os-apply-config", "pcs", "socat"} <= NODE_COMMANDS
    assert not NODE_COMMANDS & LAB_ONLY


def test_every_service_stops_updates_configures_and_starts_itself(catalog):
    for svc in catalog:
        if not svc.has_runtime:
            continue
        for wf in ("update", "upgrade"):
            steps = svc.steps(wf)
            assert [_unit_command(t) for t in steps["stop"] if _unit_command(t)] in (
                [f"systemctl stop {svc.unit}"],
                [],
            ), (svc.name, wf)
            for step in ("stop", "packages", "config", "start"):
                assert steps.get(step), (svc.name, wf, step)
            cmds = " ".join(
                next(v for k, v in t.items() if k.startswith("ansible.")) for t in steps["packages"]
            )
            assert cmds.startswith("dnf -y update ") and cmds.split()[3:] == list(svc.packages), (
                svc.name,
                wf,
            )
            assert [t.get("ansible.builtin.command") for t in steps["config"]] == [
                "os-apply-config"
            ], (svc.name, wf)
        assert svc.health, svc.name  # stepwise adds the health check to every verify step
        last = svc.system_upgrade["prepare"][-1]
        assert (_unit_command(last) or last.get("ansible.builtin.command")) in (
            f"systemctl stop {svc.unit}",
            "pcs cluster stop",
        )


def test_configuration_only_services_have_nothing_to_run(catalog):
    # `runtime: none` entries (timezone, kernel settings, backend configuration): no packages,
    # tasks, rules or health check, so the planner has nothing to stop or start there
    none = [s for s in catalog if not s.has_runtime]
    assert {"timezone", "kernel", "sshd", "tuned", "ca_certs", "cinder_backends"} <= {
        s.name for s in none
    }
    for svc in none:
        assert not (
            svc.packages
            or svc.tasks
            or svc.converge
            or svc.system_upgrade
            or svc.health
            or svc.availability
            or svc.depends_on
            or svc.cluster
            or svc.rpc
        ), svc.name
        assert svc.aliases, svc.name  # each stands for a THT service


def test_node_wide_work_is_left_to_stepwise(catalog):
    # stepwise adds these once per node (repositories, leapp, reboot): a service repeating them
    # would switch repositories or reboot a node once per service
    for svc in catalog:
        for where, task in _all_tasks(svc):
            cmd = str(next(v for k, v in task.items() if k.startswith("ansible.")))
            assert not re.search(r"\b(tripleo-repos|leapp|reboot)\b", cmd), (svc.name, where, cmd)
            assert "stepwise_bootstrap_node" not in str(task.get("when", "")), (svc.name, where)


def test_rpc_groups_keep_talking_as_their_projects_guides_say(catalog):
    """nova pins (`[upgrade_levels] compute = auto`, lifted at converge); cinder caps its RPC
    at the oldest version in its services table by itself (a SIGHUP, or cinder-api's restart,
    at converge lifts it); neutron-server speaks each agent's reported versions and the agents
    follow it (no pin, none to lift); heat and ironic upgrade cold (every instance stopped:
    no old and new code ever talk), so they are in no RPC group."""
    rpc_services = {s.name: s for s in catalog if s.rpc}
    assert {s.rpc for s in rpc_services.values()} == {"nova", "neutron", "cinder"}
    for svc in rpc_services.values():
        steps = svc.steps("upgrade")
        unpin = [_unit_command(t) or t["ansible.builtin.command"] for t in steps.get("unpin", ())]
        if svc.rpc == "nova":
            assert svc.rpc_mixing is RpcMixing.PINNED
            (pin,) = steps["pin"]
            # nova's own pin: every nova service of a node reads /etc/nova/nova.conf, `auto` caps
            # the compute RPC at the oldest compute's version; the conductor only asks again when
            # it restarts; the scheduler sends no compute RPC and is left running
            assert pin["ansible.builtin.command"] == (
                "crudini --set /etc/nova/nova.conf upgrade_levels compute auto"
            )
            again = {"nova_conductor": ["restart"], "nova_scheduler": []}.get(svc.name, ["reload"])
            assert unpin == [
                "crudini --del /etc/nova/nova.conf upgrade_levels compute",
                *(f"systemctl {a} {svc.unit}" for a in again),
            ], svc.name
            continue
        assert "pin" not in steps, svc.name
        if svc.rpc == "cinder":
            assert svc.rpc_mixing is RpcMixing.NEGOTIATED
            again = "restart" if svc.name == "cinder_api" else "reload"
            assert unpin == [f"systemctl {again} {svc.unit}"], svc.name
        else:
            server = svc.name == "neutron_server"
            assert svc.rpc_mixing is (RpcMixing.NEGOTIATED if server else RpcMixing.FOLLOWS)
            assert unpin == [], svc.name
            assert server or "neutron_server" in svc.depends_on, svc.name
    for svc in catalog:
        if not svc.rpc:
            assert not svc.has_step("upgrade", "pin") and not svc.has_step("upgrade", "unpin"), (
                svc.name
            )
    # no entry sets a pin its project does not have
    for svc in catalog:
        for _where, task in _all_tasks(svc):
            assert "upgrade_levels" not in str(task) or svc.rpc == "nova", svc.name


def test_schema_owners_expand_once_on_the_bootstrap_node_and_contract_in_converge(catalog):
    # upstream's rolling upgrades: expand (in the bootstrap node's visit), online data
    # migrations and contract (converge); heat and ironic stay offline (a window)
    expand = {
        "keystone": "keystone-manage db_sync --expand",
        "glance_api": "glance-manage db expand",
        # nova's API database (cell mappings) first, then the cells' schema
        "nova_conductor": ("nova-manage api_db sync", "nova-manage db sync"),
        "neutron_server": "neutron-db-manage upgrade --expand",
        "cinder_api": "cinder-manage db sync",
    }
    for name, cmds in expand.items():
        assert catalog[name].schema == "expand_contract" and catalog[name].rolling
        tasks = catalog[name].steps("upgrade")["migrate"]
        assert tuple(t["ansible.builtin.command"] for t in tasks) == (
            cmds if isinstance(cmds, tuple) else (cmds,)
        )
        assert not catalog[name].has_step("update", "migrate")  # a minor update keeps the schema
    assert "online_data_migrations" in str(catalog["nova_conductor"].converge)
    assert "db_sync --migrate" in str(catalog["keystone"].converge)
    assert "db_sync --contract" in str(catalog["keystone"].contract)
    assert "upgrade --contract" in str(catalog["neutron_server"].contract)
    assert not catalog["nova_conductor"].contract  # nova's migrations only add
    for name in ("heat_engine", "ironic_conductor"):
        assert not catalog[name].rolling and catalog[name].has_step("upgrade", "migrate")


def test_galera_transfers_data_once_to_the_new_os_node(catalog):
    (task,) = catalog["galera"].system_upgrade["transfer_data"]
    assert (
        task["ansible.builtin.command"]
        == "rsync -a --delete {{ system_upgrade_source }}:/var/lib/mysql/ /var/lib/mysql/"
    )
    # the new major opens the copied datadir; its system tables follow before it serves again
    rejoin = [
        t.get("ansible.builtin.command") for t in catalog["galera"].steps("upgrade")["rejoin"]
    ]
    assert "mariadb-upgrade" in rejoin
    assert [s.name for s in catalog if "transfer_data" in s.system_upgrade] == ["galera"]
    assert "mariadb-dump " in str(catalog["galera"].steps("upgrade")["backup"])


def test_storage_and_compute_leave_and_rejoin(catalog):
    osd = catalog["ceph_osd"]
    assert "ceph osd set noout" in str(osd.steps("update")["leave"])
    assert "ceph osd unset noout" in str(osd.steps("update")["rejoin"])
    assert osd.seconds("verify") > DEFAULT_STEP_SECONDS["verify"]  # waits for PGs clean
    assert "active+clean" in osd.steps("upgrade")["verify"][0]["name"]
    compute = catalog["nova_compute"]
    leave = str(compute.steps("update")["leave"])
    assert "service set --disable --disable-reason stepwise-drain {{ inventory_hostname }}" in leave
    assert "openstack server migrate --live-migration {{ item }}" in leave
    assert "compute service set --enable {{ inventory_hostname }}" in str(
        compute.steps("update")["rejoin"]
    )
    assert "pcs node standby" in str(catalog["pacemaker"].steps("update")["leave"])


def test_api_health_checks_use_distinct_ports(catalog):
    ports = {}
    for svc in catalog:
        if not svc.has_runtime:
            continue
        url = svc.health.get("http")
        if url:
            # /healthcheck (oslo.middleware), or an unauthenticated version document (placement's
            # root, nova's v2.1: nova has no /healthcheck)
            m = re.fullmatch(r"http://\{address\}:(\d+)/(healthcheck|v2\.1)?", url)
            assert m, url
            assert m.group(1) not in ports, (svc.name, ports.get(m.group(1)))
            ports[m.group(1)] = svc.name
        else:
            assert svc.health == {"command": f"systemctl is-active {svc.unit}"}, svc.name
    assert ports["8774"] == "nova_api" and ports["5000"] == "keystone"


# ------------------------------------------------------------------------------ examples


@pytest.mark.parametrize(
    "fname,roles,nodes",
    [
        ("classic.yaml", {"Controller": 3, "Compute": 2, "CephStorage": 3}, 8),
        (
            "composed.yaml",
            {
                "ControllerOpenstack": 3,
                "Database": 3,
                "Messaging": 3,
                "Networker": 2,
                "Compute": 2,
                "CephStorage": 3,
            },
            16,
        ),
        ("hci.yaml", {"Controller": 3, "ComputeHCI": 3}, 6),
        ("undercloud.yaml", {"Undercloud": 1}, 1),
    ],
)
def test_examples_load(fname, roles, nodes, catalog):
    dep = load_deployment(EXAMPLES / fname, catalog)
    assert {r.name: len(r.nodes) for r in dep.roles} == roles
    assert len(dep.nodes) == nodes
    assert [n.index for n in dep.nodes] == list(range(nodes))
    assert len({n.address for n in dep.nodes}) == nodes
    for r in dep.roles:
        assert set(r.services) <= set(dep.catalog.services)


def test_classic_example(catalog):
    dep = load_deployment(EXAMPLES / "classic.yaml", catalog)
    ctl = dep.role_by_name["Controller"]
    assert ctl.is_controlplane and not ctl.is_management
    assert {
        "galera",
        "rabbitmq",
        "pacemaker",
        "haproxy",
        "keystone",
        "ceph_mon",
        "nova_api",
    } <= set(ctl.services)
    assert [n.name for n in dep.role_by_name["Compute"].nodes] == ["compute-0", "compute-1"]
    assert [n.address for n in dep.role_by_name["Compute"].nodes] == ["127.0.2.10", "127.0.2.11"]
    assert [n.name for n in dep.instances["ceph_osd"]] == ["ceph-0", "ceph-1", "ceph-2"]
    assert [n.name for n in dep.instances["neutron_ovs_agent"]] == [
        "controller-0",
        "controller-1",
        "controller-2",
        "compute-0",
        "compute-1",
    ]
    assert dep.bootstrap_node("galera").name == "controller-0"
    assert dep.bootstrap_node("nova_compute").name == "compute-0"
    assert dep.bootstrap_node("heat_api") is None  # in the catalog, not placed
    assert dep.services_on("compute-1") == ("nova_compute", "neutron_ovs_agent", "openvswitch")
    assert dep.role_of("ceph-2").name == "CephStorage"
    assert dep.role_by_name["Compute"].update_serial == 1


def test_composed_example_matches_the_seed_layout(catalog):
    dep = load_deployment(EXAMPLES / "composed.yaml", catalog)
    assert [r.name for r in dep.roles] == [
        "ControllerOpenstack",
        "Database",
        "Messaging",
        "Networker",
        "Compute",
        "CephStorage",
    ]
    assert [r.name for r in dep.roles if r.is_controlplane] == [
        "ControllerOpenstack",
        "Database",
        "Messaging",
    ]
    assert {"controller-openstack-0", "database-0", "messaging-0", "novacompute-0"} <= set(
        dep.node_by_name
    )
    assert len(dep.instances["pacemaker"]) == 9
    assert [n.name for n in dep.instances["galera"]] == ["database-0", "database-1", "database-2"]
    assert dep.role_by_name["ControllerOpenstack"].bootstrap_node.name == "controller-openstack-0"


def test_hci_example_colocates_compute_and_osds(catalog):
    dep = load_deployment(EXAMPLES / "hci.yaml", catalog)
    hci = dep.role_by_name["ComputeHCI"]
    assert {"nova_compute", "ceph_osd", "neutron_ovs_agent"} <= set(hci.services)
    assert dep.instances["ceph_osd"] == dep.instances["nova_compute"] == hci.nodes
    assert len(dep.instances["ceph_mon"]) == 3


def test_undercloud_example_is_a_management_node(catalog):
    dep = load_deployment(EXAMPLES / "undercloud.yaml", catalog)
    (role,) = dep.roles
    assert role.is_management and not role.is_controlplane
    assert [n.name for n in role.nodes] == ["undercloud-0"]
    assert role.nodes[0].vars == {"ansible_user": "stack"}
    assert role.tool_packages == ("python3-tripleoclient", "stepwise-content")
    # quorum services on the single management node are fine: its upgrade stops everything anyway
    assert {"galera", "rabbitmq", "keystone", "ironic_api", "ironic_conductor"} <= set(
        role.services
    )


def test_examples_without_catalog_key_use_the_builtin_one_and_with_it_that_directory(tmp_path):
    text = (EXAMPLES / "hci.yaml").read_text()
    assert "catalog:" not in text
    dep = load_deployment(EXAMPLES / "hci.yaml")
    assert dep.catalog.path == str(BUILTIN_CATALOG)
    (tmp_path / "catalog").symlink_to(EXAMPLES / "catalog")
    variant = write(
        tmp_path / "hci.yaml", "catalog: catalog\n" + text
    )  # relative to the deployment file
    dep2 = load_deployment(variant)
    assert dep2.catalog.path == str(tmp_path / "catalog")
    assert set(dep2.catalog.services) == set(dep.catalog.services)


# ------------------------------------------------------------------------------ facts


def test_minor_update_facts_change_only_nova_and_the_compute_kernel(catalog):
    dep = load_deployment(EXAMPLES / "classic.yaml", catalog)
    facts = load_facts(EXAMPLES / "facts" / "minor-update.yaml", dep)
    cat = catalog
    assert facts.changed_packages("compute-0") == ("kernel", "openstack-nova-compute")
    assert facts.changed_packages("controller-2") == (
        "openstack-nova-api",
        "openstack-nova-conductor",
        "openstack-nova-scheduler",
    )
    assert facts.changed_packages("ceph-1") == ()
    assert facts.changes("controller-0", cat["nova_api"].packages)
    assert not facts.changes("controller-0", cat["galera"].packages)
    assert not facts.changes("ceph-0", cat["ceph_osd"].packages)
    assert facts.of("compute-1").packages["openstack-nova-compute"].installed == "1.0.0"
    assert facts.of("compute-1").packages["mariadb-server"].available == "1.0.0"
    assert all(facts.of(n.name).os_major == 8 for n in dep.nodes)


def test_major_upgrade_facts_fit_every_example(catalog):
    for fname in ("classic.yaml", "composed.yaml", "hci.yaml", "undercloud.yaml"):
        dep = load_deployment(EXAMPLES / fname, catalog)
        facts = load_facts(EXAMPLES / "facts" / "major-upgrade.yaml", dep)
        for node in dep.nodes:
            for svc in dep.services_on(node):
                assert facts.changes(node.name, dep.catalog[svc].packages), (fname, node.name, svc)
                for p in dep.catalog[svc].packages:
                    assert facts.of(node.name).packages[p].available == "2.0.0"
            assert "kernel" in facts.changed_packages(node.name)


def test_os_upgrade_facts_have_one_new_os_node_per_sensitive_role(catalog):
    dep = load_deployment(EXAMPLES / "composed.yaml", catalog)
    facts = load_facts(EXAMPLES / "facts" / "os-upgrade.yaml", dep)
    on9 = sorted(n.name for n in dep.nodes if facts.of(n.name).os_major == 9)
    assert on9 == ["controller-openstack-0", "database-0", "messaging-0"]
    assert all(facts.of(n.name).os_target == 9 for n in dep.nodes)
    assert facts.changed_packages("database-0") == ()
    assert "mariadb-server" in facts.changed_packages("database-1")


def test_facts_defaults_and_overrides(tmp_path, catalog):
    dep = load_deployment(EXAMPLES / "classic.yaml", catalog)
    f = write(
        tmp_path / "facts.yaml",
        """\
defaults:
  os: {major: 8, target: 9}
  packages:
    openvswitch: {installed: 1.0.0, available: 1.1.0}
nodes:
  compute-1:
    os: {major: 9}
    packages:
      openvswitch: {installed: 1.1.0, available: 1.1.0}
""",
    )
    facts = load_facts(f, dep)
    assert facts.changes("compute-0", ("openvswitch",)) and not facts.changes(
        "compute-1", ("openvswitch",)
    )
    assert (facts.of("compute-1").os_major, facts.of("compute-1").os_target) == (9, 9)
    assert (facts.of("compute-0").os_major, facts.of("compute-0").os_target) == (8, 9)
    assert not facts.changes("compute-0", ("kernel",))  # not mentioned: no update known


# ------------------------------------------------------------------------------ semantics


@pytest.mark.parametrize(
    "rule,value,total,down",
    [
        ("max_unavailable", 0.10, 5, 1),  # 10% of 5 rounds down to 0, but at least 1
        ("max_unavailable", 0.10, 25, 2),
        ("max_unavailable", 0.10, 200, 20),
        ("max_unavailable", 0.5, 3, 1),
        ("max_unavailable", 1.0, 4, 4),
        ("max_unavailable", 2, 1, 1),
        ("max_unavailable", 0.10, 0, 0),
        ("min_available", 2, 3, 1),
        ("min_available", 2, 2, 0),
        ("min_available", 1, 3, 2),
        ("quorum", "majority", 1, 0),
        ("quorum", "majority", 2, 0),
        ("quorum", "majority", 3, 1),
        ("quorum", "majority", 4, 1),
        ("quorum", "majority", 5, 2),
        ("quorum", "majority", 9, 4),
    ],
)
def test_allowed_down(rule, value, total, down):
    assert Availability(rule, value).allowed_down(total) == down


def test_pre_and_post_land_at_the_start_of_stop_and_the_end_of_start(tmp_path):
    write(
        tmp_path / "cat" / "svc.yaml",
        """\
name: svc
plane: control
update:
  pre: [{name: pre-task, ansible.builtin.command: systemctl status svc}]
  stop: [{name: stop-task, ansible.builtin.command: systemctl stop svc}]
  start: [{name: start-task, ansible.builtin.command: systemctl start svc}]
  post: [{name: post-task, ansible.builtin.command: healthcheck svc}]
  verify: []
""",
    )
    svc = load_catalog(tmp_path / "cat")["svc"]
    steps = svc.steps("update")
    assert [t["name"] for t in steps["stop"]] == ["pre-task", "stop-task"]
    assert [t["name"] for t in steps["start"]] == ["start-task", "post-task"]
    assert "pre" not in steps and "post" not in steps and "verify" not in steps
    assert svc.steps("upgrade") == steps  # it writes no `upgrade:`: the same steps
    assert set(steps) <= set(NODE_STEPS) | set(UPGRADE_EXTRA_KEYS)


def test_durations_override_defaults_and_shared_steps_take_the_maximum(catalog):
    osd, compute = catalog["ceph_osd"], catalog["nova_compute"]
    assert osd.seconds("verify") == 120 and osd.seconds("stop") == DEFAULT_STEP_SECONDS["stop"]
    assert compute.seconds("leave") == 120
    assert node_step_seconds([osd, compute], "leave") == osd.seconds("leave") + 120
    assert node_step_seconds([osd, compute], "run") == max(
        osd.seconds("run"), compute.seconds("run")
    )
    assert node_step_seconds([], "reboot") == DEFAULT_STEP_SECONDS["reboot"]
    assert node_step_seconds([], "stop") == 0.0


def test_counted_nodes_expand_from_index_zero_or_start(tmp_path, catalog):
    f = write(
        tmp_path / "d.yaml",
        """\
name: cloud
roles:
  - name: A
    services: [nova_compute]
    nodes: {count: 3, name: "a-{index}", address: "10.0.0.{index}", vars: {rack: r1}}
  - name: B
    bootstrap: b-6
    nodes: {count: 2, name: "b-{index}", start: 5}
  - name: Empty
    nodes: {count: 0, name: "e-{index}"}
""",
    )
    dep = load_deployment(f, catalog)
    assert [(n.name, n.address, n.index, n.role) for n in dep.nodes] == [
        ("a-0", "10.0.0.0", 0, "A"),
        ("a-1", "10.0.0.1", 1, "A"),
        ("a-2", "10.0.0.2", 2, "A"),
        ("b-5", None, 3, "B"),
        ("b-6", None, 4, "B"),
    ]
    assert dep.nodes[1].vars == {"rack": "r1"}
    assert dep.role_by_name["B"].bootstrap_node.name == "b-6"
    assert dep.role_by_name["Empty"].bootstrap_node is None
    assert dep.role_by_name["A"].bootstrap_node.name == "a-0"
    assert dep.bootstrap_node("nova_compute").name == "a-0"
