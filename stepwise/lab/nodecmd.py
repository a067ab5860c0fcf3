"""The node commands of a lab node (docs/node-commands.md): one entry point, dispatched on the
name it is called by (`bin/dnf`, `bin/systemctl`, ... in the lab's bin directory).

Exit codes and output follow the real tools closely enough for Ansible tasks written for real
hosts: `dnf check-update` exits 100 with updates, `systemctl is-active` 3 when not active.
"""

from __future__ import annotations

import configparser
import os
import sys
import time
from collections.abc import Callable

from stepwise.lab import containers, repos
from stepwise.lab import services as lab_services
from stepwise.lab.nodecmd_base import (
    COMMANDS,
    command,
    disk_full,
    err,
    faults,
    job_timeout,
    out,
    unit_state,
)
from stepwise.lab.nodes import Lab, SupervisorDown, current

MANAGE_SUFFIX = "-manage"
STATUS_SUFFIX = "-status"
#: upstream schema tools not named PROJECT-manage -> (project, the `manage` words they mean)
SYNC_TOOLS: dict[str, tuple[str, list[str]]] = {
    "aodh-dbsync": ("aodh", ["db", "sync"]),
    "gnocchi-upgrade": ("gnocchi", ["db", "sync"]),
    "ironic-inspector-dbsync": ("ironic", ["db", "sync"]),
}


#: the stand-in root disk of a lab node (1K blocks): 20 GiB, 8 GiB used
LAB_DISK_KB, LAB_USED_KB = 20 * 1024 * 1024, 8 * 1024 * 1024


@command("df")
def df(lab: Lab, node: str, args: list[str]) -> int:
    """`df -Pk [/]`: the node's stand-in root disk in POSIX format, full under the lab's
    `disk-full` fault (the same fault that makes dnf and crudini fail with ENOSPC)."""
    paths = [a for a in args if not a.startswith("-")] or ["/"]
    used = LAB_DISK_KB - 12 * 1024 if disk_full(lab, node) else LAB_USED_KB
    out("Filesystem     1024-blocks      Used Available Capacity Mounted on")
    for _p in paths:
        free = LAB_DISK_KB - used
        out(
            f"/dev/vda1      {LAB_DISK_KB:>11} {used:>9} {free:>9} "
            f"{used * 100 // LAB_DISK_KB:>7}% /"
        )
    return 0


# --- systemctl -------------------------------------------------------------------------
def _unit(lab: Lab, node: str, name: str) -> str | None:
    """The service of this node that systemd unit `name` runs (the catalog's `unit`, as the
    service's package names it; a catalog without `unit` uses the service's own name)."""
    name = name.removesuffix(".service")
    services = lab.node(node).services
    if containers.node_style(lab.spec, node) is not None:
        # a container-style node: tripleo_<service> / kolla-<service>-container
        for s in services:
            if containers.containerized(lab.spec, node, s):
                if lab.spec.containers.services[s].unit == name:
                    return s
    for s in services:
        if lab.service(s).unit == name:
            return s
    return name if name in services else None


def http_health(lab: Lab, node: str, service: str, timeout: float = 2.0) -> tuple[bool, str]:
    # imported here: a quarter of a node command's start-up, and most commands never ask
    import urllib.error
    import urllib.request

    svc = lab.service(service)
    url = f"http://{lab.node(node).address}:{svc.port}{svc.health_path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return False, e.read().decode(errors="replace")
    except OSError as e:
        return False, f"{url}: {getattr(e, 'reason', e)}"


@command("systemctl")
def systemctl(lab: Lab, node: str, args: list[str]) -> int:
    """systemctl on the lab's units: jobs go to the supervisor, `is-active` and `status` ask
    the service's health too; exit codes as systemd's (4/5 unknown unit, 3 not active)."""
    words = [a for a in args if not a.startswith("-")]
    if len(words) < 2:
        return err(
            "usage: systemctl start|stop|restart|reload|kill|status|show|"
            "is-active|is-enabled|enable|disable UNIT"
        )
    verb = words[0]
    rc = 0
    for name in words[1:]:
        unit = _unit(lab, node, name)
        shown = name.removesuffix(".service")  # messages name the unit as systemd would
        if unit is None and verb == "show":
            # systemd answers `show` for any name: a unit it does not know is `not-found`
            _show(lab, node, None, shown)
            continue
        if unit is None:
            err(f"Unit {shown}.service could not be found.")
            rc = 5 if verb not in ("is-active", "is-enabled") else 4
            continue
        if verb in ("start", "restart") and not lab_services.service_version(lab, node, unit):
            if containers.containerized(lab.spec, node, unit):
                # the unit's `podman start` fails: what systemd reports is a failed job
                err(
                    f"Job for {shown}.service failed: Error: no container with name or ID "
                    f'"{unit}" found (or its image is not in the store)'
                )
                rc = 1
                continue
            err(
                f"Failed to {verb} {shown}.service: "
                f"Unit {shown}.service not found (package not installed)."
            )
            rc = 5
            continue
        if verb in ("start", "stop", "restart", "kill", "reload"):
            # a failed job sets the exit code even after an earlier unit's error
            rc = _job(lab, node, verb, unit, shown) or rc
        elif verb in ("enable", "disable"):
            rc = rc or _enable(lab, node, verb, unit, now="--now" in args)
        elif verb == "is-enabled":
            rc = rc or _is_enabled(lab, node, unit)
        elif verb in ("is-active", "status"):
            rc = rc or _show_state(lab, node, verb, unit, shown)
        elif verb == "show":
            _show(lab, node, unit, shown)
        else:
            return err(f"Unknown command verb {verb}.")
    return rc


def _job(lab: Lab, node: str, verb: str, unit: str, shown: str) -> int:
    """Start, stop, restart, kill or reload a unit through the supervisor: 1 if the job failed."""
    res = lab.call(verb, node=node, unit=unit, timeout=job_timeout(lab, unit))
    if res.get("ok"):
        return 0
    err(
        f"Job for {shown}.service failed: {res.get('message')}\n"
        f'See "systemctl status {shown}.service" for details.'
    )
    return 1


def _enable(lab: Lab, node: str, verb: str, unit: str, now: bool) -> int:
    """Enable or disable a unit at boot; with --now start or stop it too."""
    with lab.node_lock(node):
        lab_services.set_enabled(lab, node, unit, verb == "enable")
    if not now:
        return 0
    res = lab.call(
        "start" if verb == "enable" else "stop",
        node=node,
        unit=unit,
        timeout=job_timeout(lab, unit),
    )
    return 0 if res.get("ok") else 1


def _show(lab: Lab, node: str, unit: str | None, shown: str) -> None:
    """`show`: the unit's properties as systemd prints them, which Ansible's systemd_service
    module reads (`LoadState`, `ActiveState`, `SubState`, `UnitFileState`) to decide what to
    do. The state is the supervisor's (no health check: stopping an unhealthy unit must still
    stop it)."""
    if unit is None:
        out(f"Id={shown}.service\nLoadState=not-found\nActiveState=inactive\nSubState=dead")
        return
    state = unit_state(lab, node, unit)  # `active`, `activating (auto-restart)`, ...
    active, _, sub = state.partition(" (")
    sub = sub.split(",")[0].rstrip(")") or {"active": "running", "failed": "failed"}.get(
        active, "dead"
    )
    enabled = "enabled" if unit in lab_services.units_enabled(lab, node) else "disabled"
    out(
        f"Id={shown}.service\nLoadState=loaded\nActiveState={active}\nSubState={sub}\n"
        f"UnitFileState={enabled}"
    )


def _is_enabled(lab: Lab, node: str, unit: str) -> int:
    """`is-enabled`: says enabled or disabled, 1 when disabled."""
    on = unit in lab_services.units_enabled(lab, node)
    out("enabled" if on else "disabled")
    return 0 if on else 1


def _show_state(lab: Lab, node: str, verb: str, unit: str, shown: str) -> int:
    """`is-active` (one word) or `status` (the unit's page): an active unit whose health check
    fails is `failed` / `active (unhealthy)`; 3 unless it is active and healthy."""
    state = unit_state(lab, node, unit)
    healthy, detail = http_health(lab, node, unit) if state == "active" else (False, state)
    active = state if state != "active" else ("active" if healthy else "active (unhealthy)")
    if verb == "is-active":
        out(active.split(" ")[0] if healthy or state != "active" else "failed")
    else:
        out(
            f"* {shown}.service\n"
            f"   Loaded: loaded (enabled: {unit in lab_services.units_enabled(lab, node)})\n"
            f"   Active: {active}\n"
            f"  Version: {lab_services.service_version(lab, node, unit)}\n"
            f"   Health: {detail}"
        )
    return 0 if healthy else 3


@command("healthcheck")
def healthcheck(lab: Lab, node: str, args: list[str]) -> int:
    if not args or _unit(lab, node, args[0]) is None:
        return err("usage: healthcheck SERVICE (a service of this node)")
    ok, detail = http_health(lab, node, args[0])
    out(detail)
    return 0 if ok else 1


# --- config ----------------------------------------------------------------------------
@command("crudini")
def crudini(lab: Lab, node: str, args: list[str]) -> int:
    if len(args) < 3 or args[0] not in ("--set", "--get", "--del"):
        return err("usage: crudini --set|--get|--del FILE SECTION [KEY [VALUE]]")
    mode, path, section, rest = args[0], lab.node_path(node, args[1]), args[2], args[3:]
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(path)
    is_default = section == "DEFAULT"
    if mode == "--get":
        if not rest:
            if not is_default and not cp.has_section(section):
                return err(f"Section not found: {section}")
            for k in cp.defaults() if is_default else cp[section]:
                out(k)
            return 0
        if not cp.has_option(section, rest[0]) and not (is_default and rest[0] in cp.defaults()):
            return err(f"Parameter not found: {rest[0]}")
        out(cp.get(section, rest[0]))
        return 0
    if disk_full(lab, node):
        return err(f"crudini: {args[1]}: [Errno 28] No space left on device")
    with lab.node_lock(node):
        if mode == "--set":
            if not is_default and not cp.has_section(section):
                cp.add_section(section)
            if rest:
                cp.set(section, rest[0], rest[1] if len(rest) > 1 else "")
        else:
            if rest:
                cp.remove_option(section, rest[0])
            elif not is_default:
                cp.remove_section(section)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as fh:
            cp.write(fh)
    return 0


@command("os-apply-config")
def os_apply_config(lab: Lab, node: str, args: list[str]) -> int:
    names = lab.node(node).services
    if "--service" in args:
        i = args.index("--service")
        if i + 1 >= len(args) or args[i + 1] not in names:
            return err(f"os-apply-config: no such service on {node}")
        names = [args[i + 1]]
    with lab.node_lock(node):
        for s in names:
            if lab_services.service_version(lab, node, s):
                lab_services.render_config(lab, node, s)
                out(f"{s}: configuration for {lab_services.service_version(lab, node, s)} applied")
    return 0


@command("socat")
def socat(lab: Lab, node: str, args: list[str]) -> int:
    """Debian's real socat, with a unix socket path mapped into the node's root (so a task's
    `unix-connect:/var/lib/haproxy/stats` reaches the lab's HAProxy runtime API)."""
    import re
    import shutil

    real = shutil.which("socat", path="/usr/bin:/bin")
    if not real:
        return err("socat: not installed on this machine (Debian package socat)")
    mapped = [
        re.sub(
            r"^((?i:unix-connect|unix-client|unix):)(/.*)$",
            lambda m: m.group(1) + str(lab.node_path(node, m.group(2))),
            a,
        )
        for a in args
    ]
    os.execv(real, [real, *mapped])
    return 1


# --- database --------------------------------------------------------------------------
def _schema_action(words: list[str], args: list[str]) -> str | None:
    """The upstream spellings of the three schema phases: `db sync` / `db_sync --expand` /
    `db expand` / `upgrade heads|--expand` expand; `online_data_migrations` / `--migrate` /
    `db migrate` migrate data online; `--contract` / `db contract` contract."""
    flags = {a for a in args if a.startswith("--")}
    if "--contract" in flags or words[:2] == ["db", "contract"]:
        return "contract"
    if "--migrate" in flags or words[:2] in (["db", "online_data_migrations"], ["db", "migrate"]):
        return "migrate"
    # barbican says `db upgrade`, designate `database sync`, octavia/mistral `upgrade head`
    if words[:2] in (
        ["db", "sync"],
        ["api_db", "sync"],
        ["db", "expand"],
        ["upgrade", "heads"],
        ["db", "upgrade"],
        ["database", "sync"],
    ) or words[:1] in (["db_sync"], ["upgrade"]):
        return "expand"
    return None


def manage(lab: Lab, node: str, project: str, args: list[str]) -> int:
    words = [a for a in args if not a.startswith("-")]
    if project not in lab.spec.projects:
        return err(f"{project}-manage: no database for project {project} in this cloud")
    versions = [
        repos.major(lab_services.service_version(lab, node, s))
        for s in lab.node(node).services
        if lab.service(s).project == project and lab_services.service_version(lab, node, s)
    ]
    if not versions:
        return err(f"{project}-manage: command not found ({project} is not installed on {node})")
    code = max(versions)
    try:
        cur = lab_services.get_schema(lab, project)
        if cur is None:
            return err('(pymysql.err.OperationalError) (2003, "Can\'t connect to MySQL server")')
        action = _schema_action(words, args)
        if action == "expand":
            if code < cur[0]:
                return err(
                    f"database schema {cur[0]} is newer than this code ({code}): "
                    "downgrade is not supported"
                )
            lab_services.set_schema(lab, project, code)
            out(f"{project} database schema at version {code}")
        elif action == "migrate":
            lab_services.set_schema(lab, project, cur[0], online=cur[0])
            out(f"{project} online data migrations complete for schema {cur[0]}")
        elif action == "contract":
            if code < cur[0]:
                return err(f"{project}: this code ({code}) cannot contract schema {cur[0]}")
            lab_services.set_schema(lab, lab_services.contract_key(project), cur[0])
            out(
                f"{project} database schema {cur[0]} contracted: "
                f"code older than {cur[0]} can no longer use it"
            )
        elif words[:2] in (["db", "version"], ["current"]):
            out(str(cur[0]))
        else:
            return err(
                f"usage: {project}-manage db "
                "sync|expand|migrate|contract|online_data_migrations|version"
            )
    except Exception as exc:  # noqa: BLE001 - report DB errors the way the tool would
        return err(f"{project}-manage: database error: {exc}")
    return 0


def status_check(lab: Lab, node: str, project: str, args: list[str]) -> int:
    """The stand-in's `PROJECT-status upgrade check`: upstream's table, every check passing
    while the project's database answers (a stand-in has nothing else to check)."""
    if [a for a in args if not a.startswith("-")][:2] != ["upgrade", "check"]:
        return err(f"usage: {project}-status upgrade check")
    if not any(
        lab.service(s).project == project and lab_services.service_version(lab, node, s)
        for s in lab.node(node).services
    ):
        err(f"{project}-status: command not found ({project} is not installed on {node})")
        return 127  # the shell's code for a command that is not there
    if project in lab.spec.projects and lab_services.get_schema(lab, project) is None:
        out(
            "+----------------------------------+\n| Check: Database                  |\n"
            "| Result: Failure                  |\n| Details: cannot connect          |\n"
            "+----------------------------------+"
        )
        return 2
    out(
        "+----------------------------------+\n| Upgrade Check Results            |\n"
        "+----------------------------------+\n| Check: Database                  |\n"
        "| Result: Success                  |\n| Details: None                    |\n"
        "+----------------------------------+"
    )
    return 0


def _real_tool(lab: Lab, node: str, name: str) -> Callable[[list[str]], int] | None:
    """A real service's own tool (`keystone-manage`, `glance-status`, ...) where the lab runs
    that service's real code: the node's installed release with the node's configuration."""
    if not lab.spec.openstack:
        return None
    from stepwise.lab.openstack import releases

    service = releases.TOOLS.get(name)
    if service not in lab.spec.services or not lab.service(service).real_openstack:
        return None

    def run(args: list[str]) -> int:
        from stepwise.lab.openstack import bootstrap

        if service not in lab.node(node).services or not lab_services.service_version(
            lab, node, service
        ):
            return err(f"{name}: command not found ({service} is not installed on {node})")
        res = bootstrap.tool(lab, node, service, [name, *args])
        sys.stdout.write(res.stdout)
        sys.stderr.write(res.stderr)
        return res.returncode

    return run


def main() -> None:
    """Entry of every node command: dispatch on argv[0]'s name."""
    name = os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    if name in ("stepwise-lab-cmd", "nodecmd.py", "__main__.py") and args:
        name, args = args[0], args[1:]
    lab, node = current()
    if (lab.run_dir / "down" / node).exists():
        sys.exit(err(f"ssh: connect to host {node}: No route to host"))
    delay = faults(lab, node).get("slow", {}).get(name)
    if delay:
        time.sleep(float(delay))
    # registers the package, cluster, container and nova commands in COMMANDS
    from stepwise.lab import (  # noqa: F401
        nodecmd_cluster,
        nodecmd_containers,
        nodecmd_files,
        nodecmd_galera,
        nodecmd_pacemaker,
        nodecmd_packages,
        nova,
    )

    fn = COMMANDS.get(name)
    real = _real_tool(lab, node, name)
    if real is not None:
        sys.exit(real(args))
    if fn is None and name in SYNC_TOOLS:
        project, words = SYNC_TOOLS[name]
        sys.exit(manage(lab, node, project, words))
    if fn is None and name.endswith(STATUS_SUFFIX):
        sys.exit(status_check(lab, node, name[: -len(STATUS_SUFFIX)], args))
    if fn is None and name.endswith(MANAGE_SUFFIX):
        project = name[: -len(MANAGE_SUFFIX)].removesuffix("-db")
        sys.exit(manage(lab, node, project, args))
    if fn is None:
        sys.exit(err(f"{name}: command not found on lab node"))
    try:
        sys.exit(fn(lab, node, args))
    except SupervisorDown as exc:
        sys.exit(err(f"Failed to connect to bus: {exc}"))


if __name__ == "__main__":
    main()
