"""The lab's routers and floating IPs: a stand-in for neutron's L3 HA routers (no real neutron
runs here), enough for the L3 agent's drain to matter.

Each workload gets a router with a floating IP (`127.L.210+.x`, the workload's port) hosted,
as an L3 HA router, by every node of the L3 agent service; one of them is the keepalived
master. The master runs the router unit (`router-vm-N`, a process of the lab supervisor on
that node): it holds the floating IP and forwards each request to the workload's address.
As on a real node, stopping the L3 agent leaves that process running and holding the address
("keepalived still holds the IP"), but the router no longer forwards: a request through a
router on a stopped L3 agent fails. `openstack network agent remove router` moves the master
to another node hosting the router (the new master starts before the old one goes, as VRRP
takes over), `add router` makes the node host it again (a backup, or the master of a router
no node serves). The probe reaches every workload through its floating IP (`fip:vm-N`).
"""

from __future__ import annotations

from typing import Any

from stepwise.lab.nodecmd_base import err, out
from stepwise.lab.nodes import Lab, lab_address, read_unit

#: agent IDs of the lab: the node's name behind this prefix (real ones are UUIDs)
AGENT = "l3-agent-"
STATE = "routers.json"


def l3_service(services: dict[str, Any]) -> str | None:
    """The L3 agent: the service the routers live on."""
    return "neutron_l3_agent" if "neutron_l3_agent" in services else None


def build(services: dict[str, Any], workloads: dict[str, Any], index: int) -> dict[str, Any]:
    """`lab.json`'s routers: one per workload, on every node of the L3 agent."""
    l3 = l3_service(services)
    if l3 is None or not services[l3]["instances"]:
        return {}
    hosts = list(services[l3]["instances"])
    routers = {}
    for k, (vm, w) in enumerate(sorted(workloads.items(), key=lambda kv: int(kv[0][3:]))):
        routers[f"router-{vm}"] = {
            "fip": lab_address(index, 210 + k // 250, 1 + k % 250),
            "port": w["port"],
            "workload": vm,
            "hosts": hosts,
            "master": hosts[k % len(hosts)],
        }
    return routers


def state(lab: Lab) -> dict[str, Any]:
    """router -> {hosts, master}: where it is now (initially as built)."""
    data = lab.read_state("_lab", STATE, None)
    if data is None:
        data = {
            r: {"hosts": list(s.hosts), "master": s.master, "tags": []}
            for r, s in lab.spec.routers.items()
        }
    return data


def masters(lab: Lab) -> list[tuple[str, str]]:
    """(node, router unit) of each router's master, its state written (at `lab up`, which
    starts them)."""
    st = state(lab)
    lab.write_state("_lab", STATE, st)
    return [(s["master"], r) for r, s in st.items() if s["master"]]


def forwarding(lab: Lab, node: str) -> tuple[bool, str]:
    """Whether a router unit on `node` forwards: its L3 agent must run there."""
    l3 = l3_service(lab.spec.services)
    if l3 is None or not read_unit(lab, node, l3):
        return False, f"the L3 agent of {node} is not running: the router does not forward"
    return True, "forwarding"


def _agent_node(lab: Lab, agent: str) -> str | None:
    node = agent.removeprefix(AGENT)
    l3 = l3_service(lab.spec.services)
    return node if l3 and node in lab.service(l3).instances else None


def command(lab: Lab, opts: dict[str, str], cols: list[str], words: list[str]) -> int:
    """`openstack network agent ...` and `openstack router ...` of the lab."""
    l3 = l3_service(lab.spec.services)
    if l3 is None:
        return err("No L3 agent in this cloud")
    with lab.node_lock("_lab"):
        st = state(lab)
        rc = _dispatch(lab, st, opts, cols, words)
        lab.write_state("_lab", STATE, st)
    return rc


def _dispatch(lab: Lab, st: dict, opts: dict[str, str], cols: list[str], words: list[str]) -> int:
    if words[:3] == ["network", "agent", "list"]:
        return _agent_list(lab, st, opts, cols)
    if words[:2] == ["router", "list"]:
        agent = opts.get("--agent")
        node = _agent_node(lab, agent) if agent else None
        if agent and node is None:
            return err(f"Agent {agent} could not be found.")
        tags = [t for t in opts.get("--tags", "").split(",") if t]
        for r, s in sorted(st.items()):
            if (node and node not in s["hosts"]) or any(t not in s["tags"] for t in tags):
                continue
            row = {"ID": r, "Name": r, "Status": "ACTIVE" if s["master"] else "DOWN"}
            out(" ".join(row.get(c, "") for c in (cols or ["ID", "Name", "Status"])))
        return 0
    if words[:2] in (["router", "set"], ["router", "unset"]) and len(words) == 3:
        if words[2] not in st or not opts.get("--tag"):
            return err(f"usage: openstack router {words[1]} --tag TAG ROUTER")
        cur = set(st[words[2]]["tags"])
        tag = opts["--tag"]
        st[words[2]]["tags"] = sorted(cur | {tag} if words[1] == "set" else cur - {tag})
        return 0
    if words[:3] in (["network", "agent", "remove"], ["network", "agent", "add"]):
        # openstack network agent add|remove router --l3 AGENT ROUTER
        if words[3:4] != ["router"]:
            return err(f"usage: openstack network agent {words[2]} router --l3 AGENT ROUTER")
        return _move(lab, st, words[2], opts.get("--l3"), words[4:])
    return err(f"openstack: '{' '.join(words[:3])}' is not an openstack command")


def _agent_list(lab: Lab, st: dict, opts: dict[str, str], cols: list[str]) -> int:
    l3 = l3_service(lab.spec.services)
    router = opts.get("--router")
    if router and router not in st:
        return err(f"No Router found for {router}")
    for node in lab.service(l3).instances:
        if "--host" in opts and node != opts["--host"]:
            continue
        if router and node not in st[router]["hosts"]:
            continue
        ha = ("active" if st[router]["master"] == node else "standby") if router else ""
        row = {
            "ID": f"{AGENT}{node}",
            "Host": node,
            "Alive": "True" if read_unit(lab, node, l3) else "False",
            "Agent Type": "L3 agent",
            "HA State": ha,
        }
        out(" ".join(row.get(c, "") for c in (cols or ["ID", "Agent Type", "Host", "Alive"])))
    return 0


def _move(lab: Lab, st: dict, verb: str, agent: str | None, rest: list[str]) -> int:
    """`add`/`remove` router ROUTER to/from AGENT's node, failing the master over."""
    node = _agent_node(lab, agent or "")
    if node is None or len(rest) != 1 or rest[0] not in st:
        return err(f"usage: openstack network agent {verb} router --l3 AGENT ROUTER")
    r = st[rest[0]]
    if verb == "add":
        r["hosts"] = sorted(set(r["hosts"]) | {node})
        if not r["master"]:
            return _make_master(lab, rest[0], r, node)
        return 0
    r["hosts"] = [h for h in r["hosts"] if h != node]
    if r["master"] != node:
        return 0
    l3 = l3_service(lab.spec.services)
    others = [h for h in r["hosts"] if read_unit(lab, h, l3)]
    old = r["master"]
    if others:
        rc = _make_master(lab, rest[0], r, others[0])
    else:
        r["master"], rc = None, 0
    lab.call("stop", node=old, unit=rest[0])
    return rc


def _make_master(lab: Lab, router: str, r: dict, node: str) -> int:
    res = lab.call("start", node=node, unit=router)
    if not res.get("ok"):
        return err(f"{router}: cannot become active on {node}: {res.get('message')}")
    r["master"] = node
    return 0
