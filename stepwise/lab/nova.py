"""The lab's nova: a stand-in for the compute API the catalog's drain calls (`nova`,
`openstack server ...`), over the workloads of lab state (`_lab/workloads.json`).

It behaves as nova does where the drain depends on it: a live migration is accepted at once
and completes `MIGRATION_SECONDS` later (the instance shows `MIGRATING` on its source until
then, so a leave that does not wait stops a compute that still runs it); an instance marked
non-migratable (`lab fault no-live-migrate NODE VM`: a PCI device, a local disk) is refused by
`host-evacuate-live` and stays `ACTIVE` on its host; a cold migration stops it, starts it on
another compute and waits for the resize confirm; a stopped instance is `SHUTOFF` where it is.
An instance's ID is its name. A pending migration completes on the next call of any of these
commands or of `lab status` (nova's own periodic work; no process of the lab's runs it).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from stepwise.lab import services
from stepwise.lab.nodecmd_base import command, err, out
from stepwise.lab.nodes import Lab, read_unit

#: how long a live migration takes in the lab (a real one: seconds to minutes)
MIGRATION_SECONDS = 4.0
#: workload fields: `state` running | stopped | lost, `host`; and while it moves `migrating_to`
#: and `done_at`, `migrated_at` once moved; `verify_resize` after a cold migration; `tags`;
#: `no_live_migrate`; `busy_until` while a client's snapshot runs (`lab fault snapshot`)
STATUS = {"running": "ACTIVE", "stopped": "SHUTOFF", "lost": "ERROR"}
#: the client's options that take no value
FLAGS = (
    "--all-projects",
    "--wait",
    "--long",
    "--no-name-lookup",
    "--live-migration",
    "--disable",
    "--enable",
)


def compute_service(lab: Lab) -> str | None:
    return next((n for n, s in lab.spec.services.items() if s.workloads), None)


def status_of(st: dict[str, Any]) -> str:
    """The instance's status as `openstack server list` shows it."""
    if st.get("migrating_to"):
        return "MIGRATING"
    if st.get("verify_resize"):
        return "VERIFY_RESIZE"
    return STATUS.get(st["state"], "ERROR")


def settle(lab: Lab) -> None:
    """Complete the live migrations whose time has come: the instance runs on its target and
    its source process ends (in this order: no request is refused in between)."""
    with lab.node_lock("_lab"):
        wl = services.workloads(lab)
        now = time.time()
        done = [vm for vm, st in wl.items() if st.get("migrating_to") and st["done_at"] <= now]
        for vm in done:
            st = wl[vm]
            dst = st.pop("migrating_to")
            st.pop("done_at")
            res = lab.call("start", node=dst, unit=vm)
            if res.get("ok"):
                lab.call("stop", node=st["host"], unit=vm)
                # when it left its source: a drain that waits ends after it (the e2e test)
                st["host"], st["migrated_at"] = dst, time.time()
            else:  # nova rolls the migration back: the instance stays where it runs
                lab.call("stop", node=dst, unit=vm)  # a half-started end would take its traffic
        if done:
            services.save_workloads(lab, wl)


def _target(lab: Lab, wl: dict[str, Any], host: str) -> str | None:
    """Where nova's scheduler puts an instance leaving `host`: an enabled, running compute not
    older than the source, the least loaded one first."""
    comp = compute_service(lab)
    src = read_unit(lab, host, comp)
    disabled = set(lab.read_state("_lab", "nova_disabled.json", []) or [])
    cands = []
    for cand in lab.service(comp).instances:
        u = read_unit(lab, cand, comp)
        if cand == host or cand in disabled or not u or (src and u["major"] < src["major"]):
            continue
        load = sum(
            1
            for w in wl.values()
            if w["state"] == "running" and (w.get("migrating_to") or w["host"]) == cand
        )
        cands.append((load, cand))
    return min(cands)[1] if cands else None


@command("nova")
def nova(lab: Lab, node: str, args: list[str]) -> int:
    comp = compute_service(lab)
    if comp is None or len(args) < 2:
        return err("usage: nova host-evacuate-live|service-disable|service-enable NODE")
    verb, host = args[0], args[1]
    if host not in lab.service(comp).instances:
        return err(f"ERROR (NotFound): Compute host {host} could not be found.")
    settle(lab)
    if verb in ("service-disable", "service-enable"):
        with lab.node_lock("_lab"):
            disabled = set(lab.read_state("_lab", "nova_disabled.json", []) or [])
            disabled = disabled | {host} if verb == "service-disable" else disabled - {host}
            lab.write_state("_lab", "nova_disabled.json", sorted(disabled))
        return 0
    if verb != "host-evacuate-live":
        return err(f"nova: unknown command {verb}")
    if not read_unit(lab, host, comp):
        return err(f"ERROR: Compute service of {host} is unavailable; cannot live-migrate")
    return _evacuate_live(lab, host)


def _evacuate_live(lab: Lab, host: str) -> int:
    """Accept a live migration for each running instance of `host` that can move; they
    complete later (`settle`). Prints nova's table: server, accepted, error."""
    rc = 0
    with lab.node_lock("_lab"):
        wl = services.workloads(lab)
        for vm, st in sorted(wl.items()):
            if st["host"] != host or st["state"] != "running" or st.get("migrating_to"):
                continue
            dst = _target(lab, wl, host)
            if st.get("no_live_migrate"):
                rc = err(f"{vm} | False | {vm}: cannot live-migrate (instance is not migratable)")
            elif _task_state(st) != "None":
                rc = err(f"{vm} | False | {vm} is in task_state {_task_state(st)} (HTTP 409)")
            elif dst is None:
                rc = err(f"{vm} | False | No valid host was found to live-migrate {vm}")
            else:
                st["migrating_to"], st["done_at"] = dst, time.time() + MIGRATION_SECONDS
                out(f"{vm} | True | live migration to {dst} accepted")
        services.save_workloads(lab, wl)
    return rc


def _live_migrate(lab: Lab, vm: str) -> int:
    """`openstack server migrate --live-migration ID`: accepted (it completes later, see
    `settle`), refused for an instance that cannot move or has nowhere to go."""
    with lab.node_lock("_lab"):
        wl = services.workloads(lab)
        st = wl.get(vm)
        if st is None:
            return err(f"No server with a name or ID of '{vm}' exists.")
        task = _task_state(st)
        if task != "None":
            return err(
                f"Cannot 'os-migrateLive' instance {vm} while it is in task_state {task} (HTTP 409)"
            )
        if st["state"] != "running":
            return err(
                f"Cannot 'os-migrateLive' instance {vm} while it is in vm_state {st['state']} "
                "(HTTP 409)"
            )
        if not read_unit(lab, st["host"], compute_service(lab) or ""):
            return err(f"Compute service of {st['host']} is unavailable at this time. (HTTP 400)")
        if st.get("no_live_migrate"):
            return err(f"Migration pre-check error: {vm} is not live-migratable (HTTP 400)")
        dst = _target(lab, wl, st["host"])
        if dst is None:
            return err(f"No valid host was found. No valid host found for live migration of {vm}")
        st["migrating_to"], st["done_at"] = dst, time.time() + MIGRATION_SECONDS
        services.save_workloads(lab, wl)
    return 0


def _opts(args: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
    """`--key value` options, `-c` columns in their order, the positional words."""
    opts: dict[str, str] = {}
    cols: list[str] = []
    words: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in FLAGS:
            opts[a] = "1"
        elif a == "-c" and i + 1 < len(args):
            cols.append(args[i + 1])
            i += 1
        elif a.startswith("-") and i + 1 < len(args):
            opts[a] = args[i + 1]
            i += 1
        else:
            words.append(a)
        i += 1
    return opts, cols, words


@command("openstack")
def openstack(lab: Lab, node: str, args: list[str]) -> int:
    from stepwise.lab.openstack import client, config

    if config.is_real_placed(lab, "nova_api"):  # real nova: the real client, as its admin
        return client.run_openstack(lab, args)
    opts, cols, words = _opts(args)
    if words[:3] == ["compute", "service", "set"]:
        return _service_set(lab, opts, words[3:])
    if words[:3] == ["compute", "service", "list"]:
        return _service_list(lab, opts, cols)
    if words[:1] == ["server"]:
        if compute_service(lab) is None:
            return err("Public endpoint for compute service not found")
        settle(lab)
        return _server(lab, opts, cols, words[1:])
    from stepwise.lab import routers

    if words[:1] in (["router"], ["network"]):
        return routers.command(lab, opts, cols, words)
    return err(f"openstack: '{' '.join(words[:2])}' is not an openstack command")


def _service_set(lab: Lab, opts: dict[str, str], words: list[str]) -> int:
    """`openstack compute service set --disable|--enable HOST nova-compute`."""
    comp = compute_service(lab)
    if comp is None or len(words) != 2 or ("--disable" in opts) == ("--enable" in opts):
        return err("usage: openstack compute service set --disable|--enable HOST nova-compute")
    return nova(lab, "", ["service-disable" if "--disable" in opts else "service-enable", words[0]])


def _service_list(lab: Lab, opts: dict[str, str], cols: list[str]) -> int:
    """`openstack compute service list [--host HOST] [--service nova-compute]`: a compute is
    `up` while its unit runs (nova: while its heartbeats reach the conductor)."""
    comp = compute_service(lab)
    if comp is None or opts.get("--service", "nova-compute") != "nova-compute":
        return 0
    disabled = set(lab.read_state("_lab", "nova_disabled.json", []) or [])
    for host in lab.service(comp).instances:
        if opts.get("--host", host) != host:
            continue
        running = bool(read_unit(lab, host, comp))
        # a running compute reported just now; a stopped one over nova's minute ago
        at = datetime.now(UTC) - timedelta(seconds=1 if running else 90)
        row = {
            "Binary": "nova-compute",
            "Host": host,
            "Status": "disabled" if host in disabled else "enabled",
            "State": "up" if running else "down",
            "Updated At": at.strftime("%Y-%m-%dT%H:%M:%S.%f"),
        }
        out(" ".join(row[c] for c in (cols or ["Binary", "Host", "Status", "State"])))
    return 0


def _server(lab: Lab, opts: dict[str, str], cols: list[str], words: list[str]) -> int:
    if words[:1] == ["list"]:
        return _server_list(lab, opts, cols)
    if words[:1] == ["migrate"] and "--live-migration" in opts and len(words) == 2:
        return _live_migrate(lab, words[1])
    verb, ids = words[:1], words[1:]
    if words[:2] == ["resize", "confirm"] or words[:2] == ["migration", "confirm"]:
        verb, ids = ["confirm"], words[2:]
    if len(ids) != 1 or verb[0] not in ("migrate", "confirm", "stop", "start", "set", "unset"):
        return err(
            "usage: openstack server list|migrate|resize confirm|stop|start|set --tag|unset --tag"
        )
    with lab.node_lock("_lab"):
        wl = services.workloads(lab)
        vm = ids[0]
        if vm not in wl:
            return err(f"No server with a name or ID of '{vm}' exists.")
        rc = _server_action(lab, wl, vm, verb[0], opts)
        services.save_workloads(lab, wl)
    return rc


def _server_list(lab: Lab, opts: dict[str, str], cols: list[str]) -> int:
    tags = [t for t in opts.get("--tags", "").split(",") if t]
    for vm, st in sorted(services.workloads(lab).items()):
        if "--host" in opts and st["host"] != opts["--host"]:
            continue
        if "--status" in opts and status_of(st) != opts["--status"].upper():
            continue
        if any(t not in st.get("tags", []) for t in tags):
            continue
        row = {
            "ID": vm,
            "Name": vm,
            "Status": status_of(st),
            "Task State": _task_state(st),
            "Host": st["host"],
        }
        out(" ".join(row.get(c, "") for c in (cols or ["ID", "Name", "Status"])))
    return 0


def _task_state(st: dict[str, Any]) -> str:
    """The instance's task as nova's `server list --long` shows it ("None": idle)."""
    if st.get("migrating_to"):
        return "migrating"
    return "image_snapshot" if st.get("busy_until", 0) > time.time() else "None"


def _server_action(lab: Lab, wl: dict[str, Any], vm: str, verb: str, opts: dict) -> int:
    st = wl[vm]
    if verb in ("set", "unset"):
        tag = opts.get("--tag")
        if not tag:
            return err(f"usage: openstack server {verb} --tag TAG ID")
        cur = set(st.get("tags", []))
        st["tags"] = sorted(cur | {tag} if verb == "set" else cur - {tag})
        return 0
    if st.get("migrating_to"):
        return err(f"Cannot '{verb}' instance {vm} while it is in task_state migrating (HTTP 409)")
    if verb == "confirm":
        if not st.pop("verify_resize", False):
            return err(f"Cannot 'confirmResize' instance {vm} while it is in vm_state active")
        return 0
    if verb == "stop":
        if st["state"] != "running":
            return err(f"Cannot 'stop' instance {vm} while it is in vm_state {st['state']}")
        lab.call("stop", node=st["host"], unit=vm)
        st["state"] = "stopped"
        return 0
    if verb == "start":
        if st["state"] == "running":
            return err(f"Cannot 'start' instance {vm} while it is in vm_state active")
        res = lab.call("start", node=st["host"], unit=vm)
        if not res.get("ok"):
            return err(f"{vm}: start on {st['host']} failed: {res.get('message')}")
        st["state"] = "running"
        return 0
    return _cold_migrate(lab, wl, vm)


def _cold_migrate(lab: Lab, wl: dict[str, Any], vm: str) -> int:
    """Stop, move, start on another compute: the instance waits in VERIFY_RESIZE."""
    st = wl[vm]
    dst = _target(lab, wl, st["host"])
    if dst is None:
        return err(f"No valid host was found. No valid host found for cold migrate of {vm}")
    was_running = st["state"] == "running"
    lab.call("stop", node=st["host"], unit=vm)
    if was_running:
        res = lab.call("start", node=dst, unit=vm)
        if not res.get("ok"):
            lab.call("start", node=st["host"], unit=vm)
            return err(f"{vm}: cold migration to {dst} failed: {res.get('message')}")
    st["host"], st["verify_resize"] = dst, True
    out(f"Complete: {vm} migrated to {dst}, waiting for the resize confirm")
    return 0
