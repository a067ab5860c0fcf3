"""Node commands for clusters, workloads, reboots, OS upgrade and data transfer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from stepwise.lab import health as lab_health
from stepwise.lab import repos as lab_repos
from stepwise.lab import services as lab_services
from stepwise.lab.nodecmd_base import command, disk_full, err, faults, out
from stepwise.lab.nodes import Lab, read_unit


def cluster_service(lab: Lab, kinds: tuple[str, ...]) -> str | None:
    return next((n for n, s in lab.spec.services.items() if s.cluster in kinds), None)


# --- rabbitmq --------------------------------------------------------------------------
@command("rabbitmqctl")
def rabbitmqctl(lab: Lab, node: str, args: list[str]) -> int:
    """The real rabbitmqctl as this node's member where the lab runs a real RabbitMQ cluster,
    else the stand-in's answers to the commands the catalog calls."""
    from stepwise.lab import rabbitmq

    svc = cluster_service(lab, ("rabbitmq",))
    if svc is None or node not in lab.service(svc).instances:
        return err("rabbitmqctl: command not found (rabbitmq-server is not installed here)")
    args = _lab_member_names(lab, svc, args)
    if rabbitmq.is_real(lab, svc):
        r = rabbitmq.ctl(lab, node, svc, args)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        return r.returncode
    return _rabbitmqctl_stand_in(lab, node, svc, [a for a in args if a != "-q"])


def _lab_member_names(lab: Lab, svc: str, args: list[str]) -> list[str]:
    """A member named as a real deployment names it, `rabbit@<its host>` (a catalog's
    `join_cluster rabbit@{{ the seed }}`), as the lab's member on that node
    (`rabbitN@localhost`: every lab member shares one host)."""
    from stepwise.lab import rabbitmq

    members = lab.service(svc).instances
    return [
        rabbitmq.node_name(lab, svc, a.partition("@")[2])
        if a.startswith("rabbit@") and a.partition("@")[2] in members
        else a
        for a in args
    ]


def _rabbit_members(lab: Lab, node: str, svc: str) -> tuple[list[str], list[str]]:
    """The stand-in cluster this node's member is in (its OS major's members, when members on
    two majors cannot cluster) and which of them run, as rabbitN@localhost names."""
    from stepwise.lab import rabbitmq

    members = lab.service(svc).instances
    if lab.service(svc).os_bound:
        members = [n for n in members if lab.os_major(n) == lab.os_major(node)]
    running = [n for n in members if read_unit(lab, n, svc)]
    return (
        [rabbitmq.node_name(lab, svc, n) for n in members],
        [rabbitmq.node_name(lab, svc, n) for n in running],
    )


def _rabbitmqctl_stand_in(lab: Lab, node: str, svc: str, args: list[str]) -> int:
    """cluster_status, status, await_startup, await_online_nodes N, stop_app, start_app,
    join_cluster, set_policy, reset."""
    import time

    from stepwise.lab import rabbitmq

    me = rabbitmq.node_name(lab, svc, node)
    words = [a for a in args if not a.startswith("-")]
    if words[:1] in (["stop_app"], ["start_app"]):
        out(f"{'Stopping' if words[0] == 'stop_app' else 'Starting'} node {me} ...")
        return 0
    if words[:1] in (["join_cluster"], ["set_policy"], ["reset"]):
        # the stand-in's membership is its OS major's members: joining, resetting and the
        # queue policy change nothing it reports, but need its member running
        if me not in _rabbit_members(lab, node, svc)[1]:
            return err(f"Error: unable to perform an operation on node '{me}' (not running)")
        out(f"{words[0]} on node {me} ... (lab stand-in)")
        return 0
    deadline = time.monotonic() + (120 if words[:1] == ["await_online_nodes"] else 0)
    while True:
        disk, running = _rabbit_members(lab, node, svc)
        if me not in running:
            if time.monotonic() < deadline:
                time.sleep(1)
                continue
            return err(f"Error: unable to perform an operation on node '{me}' (not running)")
        if words[:1] == ["await_online_nodes"] and len(running) < int(words[1]):
            if time.monotonic() < deadline:
                time.sleep(1)
                continue
            return err(f"Error: {len(running)} of {words[1]} nodes online")
        break
    if words[:1] == ["cluster_status"]:
        data = {"disk_nodes": disk, "running_nodes": running, "stand_in": True}
        text = "\n".join(
            [f"Cluster status of node {me} ...", "Disk Nodes", *disk, "Running Nodes", *running]
        )
        out(json.dumps(data) if "json" in args else text)
        return 0
    if words[:1] in (["status"], ["await_startup"], ["await_online_nodes"]):
        out(f"Status of node {me} ...\nRunning: {len(running)} of {len(disk)} (lab stand-in)")
        return 0
    return err(f"rabbitmqctl {' '.join(words[:1])}: not answered by the lab's stand-in")


# --- ceph ------------------------------------------------------------------------------
@command("ceph")
def ceph(lab: Lab, node: str, args: list[str]) -> int:
    mon = cluster_service(lab, ("ceph-mon",))
    flags_file = lab.run_dir / "ceph.json"
    import json

    flags = json.loads(flags_file.read_text()) if flags_file.exists() else {}
    if args[:2] == ["osd", "set"] or args[:2] == ["osd", "unset"]:
        if len(args) < 3:
            return err("usage: ceph osd set|unset FLAG")
        flags[args[2]] = args[1] == "set"
        flags_file.write_text(json.dumps(flags))
        out(f"{args[2]} is {'set' if flags[args[2]] else 'unset'}")
        return 0
    if mon is None:
        return err("Error initializing cluster client: no monitors in this cloud")
    ok, why = lab_health.quorum(lab, mon)
    members = lab.service(mon).instances
    if args[:2] == ["mon", "stat"]:
        inq = [n for n in members if read_unit(lab, n, mon)]
        out(f"e1: {len(members)} mons, quorum {','.join(inq) if ok else '(none)'}; {why}")
        return 0 if ok else 1
    if args[:1] == ["health"]:
        if not ok:
            out(f"HEALTH_ERR {why}")
            return 1
        warn = [f"{k} flag(s) set" for k, v in flags.items() if v]
        down = [n for n in members if not read_unit(lab, n, mon)]
        if down:
            warn.append(f"mons down: {','.join(down)}")
        out("HEALTH_WARN " + "; ".join(warn) if warn else "HEALTH_OK")
        return 0
    if args[:2] in (["mon", "remove"], ["mon", "add"]) and len(args) > 2:
        target = args[2]
        if target not in members:
            return err(f"Error ENOENT: mon.{target} does not exist")
        with lab.node_lock(target):
            st = lab.read_state(target, "cluster.json", {}) or {}
            st.setdefault(mon, {})["left"] = args[1] == "remove"
            lab.write_state(target, "cluster.json", st)
        out(f"{'removing' if args[1] == 'remove' else 'adding'} mon.{target}")
        return 0
    return err(
        "usage: ceph osd set|unset noout | ceph mon stat | ceph health | ceph mon remove|add NODE"
    )


# --- nova (workloads): stepwise/lab/nova.py ---------------------------------------------


# --- reboot, OS upgrade ----------------------------------------------------------------
#: where leapp writes its pre-upgrade report (under the node's root)
LEAPP_REPORT = "/var/log/leapp/leapp-report.json"


def _inhibitor(title: str, remedy: str) -> dict:
    return {
        "title": title,
        "severity": "high",
        "groups": ["inhibitor"],
        "summary": title,
        "detail": {"remediations": [{"type": "hint", "context": remedy}]},
    }


def leapp_preupgrade(lab: Lab, node: str) -> int:
    """`leapp preupgrade`: the report of what would stop the upgrade, written where leapp
    writes it; exit 1 with inhibitors. Nothing else changes (no `leapp.json`)."""
    cur = lab.os_major(node)
    entries = []
    if cur + 1 not in lab_repos.OS_MAJORS:
        entries.append(_inhibitor(f"No upgrade path from OS {cur}", "nothing to upgrade to"))
    if disk_full(lab, node):
        entries.append(
            _inhibitor(
                "Not enough space on / to download the upgrade packages",
                "free space on / (dnf clean all, old kernels)",
            )
        )
    for text in faults(lab, node).get("leapp_inhibitors", []):
        entries.append(_inhibitor(text, "planted by `stepwise lab fault leapp-inhibitor`"))
    report = lab.node_path(node, LEAPP_REPORT)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps({"leapp_run_id": "lab", "entries": entries}, indent=1))
    for e in entries:
        out(f"Upgrade has been inhibited: {e['title']}")
    out("A pre-upgrade report has been generated at /var/log/leapp/leapp-report.json")
    return 1 if entries else 0


@command("leapp")
def leapp(lab: Lab, node: str, args: list[str]) -> int:
    if args[:1] == ["preupgrade"]:
        return leapp_preupgrade(lab, node)
    if args[:1] != ["upgrade"]:
        return err("usage: leapp upgrade|preupgrade")
    cur = lab.os_major(node)
    target = cur + 1
    if target not in lab_repos.OS_MAJORS:
        return err(f"Inhibitor: no upgrade path from OS {cur}")
    if "leapp" not in lab_services.installed(lab, node):
        return err("leapp: command not found (package leapp is not installed)")
    rel = lab_services.release(lab, node)
    if f"openstack-{rel}-el{target}" not in lab.spec.repos:
        return err(
            f"Inhibitor: enabled OpenStack release {rel} has no repositories for OS {target}; "
            "switch the node to the next release (tripleo-repos) first"
        )
    if disk_full(lab, node):
        return err("Inhibitor: not enough space on / to download the upgrade packages")
    lab.write_state(node, "leapp.json", {"target": target, "release": rel})
    out(f"Upgrade to OS {target} prepared; the next reboot applies it.")
    return 0


def apply_leapp(lab: Lab, node: str) -> str | None:
    plan = lab.read_state(node, "leapp.json")
    if not plan:
        return None
    target, rel = plan["target"], plan["release"]
    repos = lab.spec.repos
    enabled = lab_repos.enabled_repos(repos, rel, target)
    pkgs = lab_services.installed(lab, node)
    new = {}
    for p in pkgs:
        best = lab_repos.latest(repos, enabled, p)
        if best:
            new[p] = {"version": best[0], "repo": best[1]}
    lab.write_state(node, "packages.json", new)
    lab_services.write_os_release(lab, node, target)
    # The upgraded node comes up with no service running: they start on the new OS only when
    # the upgrade workflow says so (after the data transfer).
    lab.write_state(node, "units.json", {"enabled": []})
    lab.state_file(node, "leapp.json").unlink()
    return f"OS upgraded to {target}"


@command("reboot")
def reboot(lab: Lab, node: str, args: list[str]) -> int:
    lab.call("poweroff", node=node)
    with lab.node_lock(node):
        wl = lab_services.workloads(lab)
        for _vm, st in wl.items():
            if st["host"] == node and st["state"] == "running":
                st["state"] = "lost"  # not moved away: the instance died with its host
        lab_services.save_workloads(lab, wl)
        msg = apply_leapp(lab, node)
        kernel = lab_services.installed(lab, node).get("kernel", {}).get("version")
        lab.write_state(node, "kernel.json", {"running": kernel})
    # as a real reboot: done when the node answers again, its units still starting (systemd
    # starts them in the background; the start and health checks that follow wait for them).
    # Waiting here made a lone controller's reboot wait 90 s for an API whose database sits
    # behind a VIP that comes back only when the node leaves standby, after the reboot.
    units = lab_services.units_enabled(lab, node)
    res = lab.call("boot", node=node, units=units, wait=False, timeout=120)
    out(f"{node} rebooted{': ' + msg if msg else ''}; running kernel {kernel}")
    failed = [u for u, r in res.get("units", {}).items() if not r.get("ok")]
    if failed:
        out(f"units failed to start after boot: {', '.join(failed)}")
    return 0


@command("reprovision")
def reprovision(lab: Lab, node: str, args: list[str]) -> int:
    """Wipe the node and install the next OS major's image: the OS packages and the node's
    services at the newest release built for that OS, nothing enabled, no configuration, no
    data. What the node must keep comes back from what was persisted before."""
    cur = lab.os_major(node)
    target = cur + 1
    if target not in lab_repos.OS_MAJORS:
        return err(f"no image for OS {target}")
    release = next(
        (r for r in reversed(lab_repos.RELEASES) if f"openstack-{r}-el{target}" in lab.spec.repos),
        None,
    )
    if release is None:
        return err(f"no OpenStack release is built for OS {target}")
    lab.call("poweroff", node=node)
    with lab.node_lock(node):
        wl = lab_services.workloads(lab)
        for _vm, st in wl.items():
            if st["host"] == node and st["state"] == "running":
                st["state"] = "lost"  # not moved away: the instance died with its host
        lab_services.save_workloads(lab, wl)
        root = lab.node_root(node)
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        repos = lab.spec.repos
        enabled = lab_repos.enabled_repos(repos, release, target)
        pkgs = {}
        for p in lab_services.node_packages(lab, node):
            best = lab_repos.latest(repos, enabled, p)
            if best:
                pkgs[p] = {"version": best[0], "repo": best[1]}
        lab.write_state(node, "packages.json", pkgs)
        lab.write_state(node, "repos.json", {"release": release})
        lab.write_state(node, "units.json", {"enabled": []})
        lab.write_state(node, "kernel.json", {"running": pkgs.get("kernel", {}).get("version")})
        lab_services.write_os_release(lab, node, target)
    lab.call("boot", node=node, units=[], timeout=120)
    out(
        f"{node} reprovisioned with the OS {target} image ({release}); "
        "nothing runs, nothing was kept"
    )
    return 0


# --- data ------------------------------------------------------------------------------
DATADIR = "/var/lib/mysql"


def _map_operand(lab: Lab, node: str, arg: str) -> tuple[str, str | None, str]:
    """An rsync operand as it is on a real node -> (path here, remote node or None, node path).
    `NODE:/path` is that node's file, reached as over SSH; `/path` is this node's."""
    host, sep, path = arg.partition(":")
    if sep and host and "/" not in host and path.startswith("/"):
        host = next((n for n in lab.nodes() if host in (n, lab.node(n).address)), host)
        if host not in lab.nodes():
            raise LookupError(f"ssh: Could not resolve hostname {host}: Name or service not known")
        if (lab.run_dir / "down" / host).exists():
            raise LookupError(f"ssh: connect to host {host} port 22: No route to host")
        tail = "/" if path.endswith("/") else ""
        return str(lab.node_path(host, path)) + tail, host, path
    if arg.startswith("/"):
        tail = "/" if arg.endswith("/") and arg != "/" else ""
        return str(lab.node_path(node, arg)) + tail, None, arg
    return arg, None, arg


@command("rsync")
def rsync(lab: Lab, node: str, args: list[str]) -> int:
    """Debian's real rsync between lab nodes: `NODE:/path` is that node's file (a real node
    reaches it over SSH), an absolute path is this node's. A copy of a MariaDB datadir takes
    the lab's stand-in of its on-disk format (the MariaDB major that wrote it) along."""
    from stepwise.lab import mariadb

    real = shutil.which("rsync", path=mariadb.SYSTEM_PATH)
    if real is None:
        return err("rsync: command not found (install the Debian package rsync)")
    mapped: list[str] = []
    operands: list[tuple[str | None, str]] = []
    for a in args:
        if a.startswith("-"):
            mapped.append(a)
            continue
        try:
            here, host, path = _map_operand(lab, node, a)
        except LookupError as exc:
            err(
                f"{exc}\nrsync: connection unexpectedly closed (0 bytes received so far) [Receiver]"
            )
            return 255
        mapped.append(here)
        operands.append((host, path))
    if disk_full(lab, node):
        err("rsync: [receiver] write failed: No space left on device (28)")
        return 11
    r = subprocess.run([real, *mapped], check=False)
    if r.returncode == 0 and len(operands) >= 2:
        (src_host, src), (dst_host, dst) = operands[0], operands[-1]
        if src.rstrip("/") == DATADIR and dst.rstrip("/") == DATADIR:
            fmt = mariadb.data_format(lab.node_root(src_host or node))
            if fmt:
                mariadb.set_data_format(lab.node_root(dst_host or node), fmt)
    return r.returncode


@command("mariadb-upgrade", "mysql_upgrade")
def mariadb_upgrade(lab: Lab, node: str, args: list[str]) -> int:
    """Debian's real mariadb-upgrade against this node's member; afterwards the datadir is in
    the installed MariaDB's format (the lab's stand-in of the major change is recorded)."""
    from stepwise.lab import mariadb

    real = mariadb.binaries()["mariadb-upgrade"]
    defaults = (
        []
        if any(a.startswith(("-S", "--socket")) for a in args)
        else [f"--socket={mariadb.socket_path(lab.node_root(node))}"]
    )
    if not any(a.startswith(("-u", "--user")) for a in args):
        defaults.append("--user=root")
    r = subprocess.run([real, *defaults, *args], check=False)
    if r.returncode == 0:
        mariadb.set_data_format(
            lab.node_root(node), mariadb.installed_format(lab_services.installed(lab, node))
        )
    return r.returncode


def _mariadb_tool(lab: Lab, node: str, tool: str, args: list[str]) -> int:
    """Debian's real MariaDB client `tool`, talking to this node's Galera member as it would on
    a real node: the default socket and user are the node's, and a `--result-file` lands in the
    node's root."""
    import os

    from stepwise.lab import mariadb

    real = mariadb.binaries()[tool]
    mapped = [
        f"--result-file={lab.node_path(node, a.split('=', 1)[1])}"
        if a.startswith("--result-file=/")
        else a
        for a in args
    ]
    if (
        tool == "mariadb-dump"
        and disk_full(lab, node)
        and any(a.startswith("--result-file=") for a in args)
    ):
        return err("mariadb-dump: Got errno 28 on write")
    defaults = []
    if not any(a.startswith(("-S", "--socket")) for a in args):
        defaults.append(f"--socket={mariadb.socket_path(lab.node_root(node))}")
    if not any(a.startswith(("-u", "--user")) for a in args):
        defaults.append("--user=root")
    os.execv(real, [real, *defaults, *mapped])
    return 1


@command("mariadb", "mysql")
def mariadb_client(lab: Lab, node: str, args: list[str]) -> int:
    return _mariadb_tool(lab, node, "mariadb", args)


@command("mariadb-dump", "mysqldump")
def mariadb_dump(lab: Lab, node: str, args: list[str]) -> int:
    return _mariadb_tool(lab, node, "mariadb-dump", args)
