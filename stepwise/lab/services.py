"""Node-side state of services: installed packages, rendered config, enabled units, schema."""

from __future__ import annotations

import configparser
from typing import Any

from stepwise.lab import repos as lab_repos
from stepwise.lab.kinds import kind_named
from stepwise.lab.nodes import Lab, ini_section


def installed(lab: Lab, node: str) -> dict[str, dict[str, str]]:
    return lab.read_state(node, "packages.json", {}) or {}


def release(lab: Lab, node: str) -> str:
    return (lab.read_state(node, "repos.json", {}) or {}).get("release", lab_repos.INITIAL_RELEASE)


def enabled_repos(lab: Lab, node: str) -> list[str]:
    return lab_repos.enabled_repos(lab.spec.repos, release(lab, node), lab.os_major(node))


def node_packages(lab: Lab, node: str) -> list[str]:
    """Packages a node has at first boot: its services' (those not in containers), its tools'
    and the OS base."""
    from stepwise.lab import containers

    pk = set(lab_repos.BASE_PACKAGES) | set(lab.node(node).tool_packages)
    for s in lab.node(node).services:
        # a container-style node has its services in images, not in host packages
        if not containers.containerized(lab.spec, node, s):
            pk.update(lab.service(s).packages)
    return sorted(pk)


def install_initial(lab: Lab, node: str) -> None:
    pkgs = {}
    for p in node_packages(lab, node) + [lab_repos.LEAPP[0]]:
        found = lab_repos.base_version(
            lab.spec.repos, p, lab_repos.INITIAL_RELEASE, lab_repos.INITIAL_OS
        )
        if found:
            pkgs[p] = {"version": found[0], "repo": found[1]}
    lab.write_state(node, "packages.json", pkgs)
    lab.write_state(node, "repos.json", {"release": lab_repos.INITIAL_RELEASE})
    lab.write_state(node, "kernel.json", {"running": pkgs["kernel"]["version"]})
    write_os_release(lab, node, lab_repos.INITIAL_OS)


def write_os_release(lab: Lab, node: str, major: int) -> None:
    path = lab.node_root(node) / "etc" / "os-release"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'NAME="Lab Linux"\nVERSION_ID="{major}"\nID="lablinux"\nPRETTY_NAME="Lab Linux {major}"\n'
    )


def service_version(lab: Lab, node: str, service: str) -> str | None:
    """The version a service runs at its next start: its container image's on a
    container-style node, else its installed package's (None: it cannot start)."""
    from stepwise.lab import containers, podman

    if containers.containerized(lab.spec, node, service):
        return podman.container_version(lab, node, service)
    pk = lab.service(service).packages
    if not pk:
        return "1.0.0"
    return installed(lab, node).get(pk[0], {}).get("version")


def services_of_packages(lab: Lab, node: str, packages: list[str]) -> list[str]:
    return [s for s in lab.node(node).services if set(lab.service(s).packages) & set(packages)]


#: where the deployment leaves a service's newly rendered configuration (discover hashes it
#: against the running one: stepwise.run.discover.CONFIG_RENDERED)
STAGED_CONFIG = "/var/lib/config-data/puppet-generated/{service}/etc/{service}/{service}.conf"


def render_config(lab: Lab, node: str, service: str) -> None:
    """What the deployment's config step writes: config for the installed version, or the
    configuration the deployment rendered for the service when there is one (staged).

    Operator settings the deployment does not own (`[upgrade_levels]` pins) are kept.
    """
    svc = lab.service(service)
    if kind_named(svc.kind).render_config(lab, node, service):
        return  # real code: its kind renders what the real service reads
    version = service_version(lab, node, service)
    path = lab.node_path(node, f"/etc/{service}/{service}.conf")
    staged = lab.node_path(node, STAGED_CONFIG.format(service=service))
    if staged.is_file():
        # the deployment rendered this service's configuration (a configuration change):
        # the config step applies that file as it is, as TripleO's config copy does
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(staged.read_bytes())
        return
    pins = ini_section(path, "upgrade_levels")
    cp = configparser.ConfigParser(interpolation=None)
    cp["DEFAULT"] = {"config_for": lab_repos.release_of(version) or "", "host": node}
    if svc.schema:
        vip = lab.spec.vips[lab.spec.db_service]
        cp["database"] = {
            "connection": f"mysql+pymysql://stepwise@{vip.address}:{vip.port}/{svc.project}"
        }
    if svc.rpc:
        cp["upgrade_levels"] = pins
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        cp.write(fh)


def units_enabled(lab: Lab, node: str) -> list[str]:
    return list((lab.read_state(node, "units.json", {}) or {}).get("enabled", []))


def set_enabled(lab: Lab, node: str, unit: str, on: bool) -> None:
    cur = set(units_enabled(lab, node))
    cur = cur | {unit} if on else cur - {unit}
    lab.write_state(node, "units.json", {"enabled": sorted(cur)})


def db_members(lab: Lab) -> list[tuple[str, int]]:
    """Addresses of the running database servers (Galera members), in the VIP's order."""
    from stepwise.lab.nodes import read_unit

    name = lab.spec.db_service
    svc = lab.service(name)
    return [(lab.node(n).address, svc.db_port) for n in svc.instances if read_unit(lab, n, name)]


def _on_a_member(lab: Lab, sql: str, args: tuple) -> list[tuple]:
    """Run one statement on the first member that takes it (Galera replicates a write to the
    others; a member outside the primary component refuses it)."""
    from stepwise.lab import mariadb

    members = db_members(lab)
    if not members:
        raise RuntimeError("cannot connect to the database: no database server is running")
    last: Exception | None = None
    for host, port in members:
        try:
            return mariadb.execute(host, port, sql, args)
        except Exception as exc:  # noqa: BLE001 - try the next member
            last = exc
    raise RuntimeError(f"no database server takes the statement: {last}")


def set_schema(lab: Lab, project: str, version: int, online: int | None = None) -> None:
    """Write a project's schema version (once: Galera replicates it to every member)."""
    sql = (
        "INSERT INTO schema_versions (project, version, online) VALUES (%s,%s,%s) "
        "ON DUPLICATE KEY UPDATE version=VALUES(version)"
        + (", online=VALUES(online)" if online is not None else "")
    )
    _on_a_member(lab, sql, (project, version, online or 0))


def contract_key(project: str) -> str:
    """Where the lab keeps the version a project's schema was contracted to (a row of the
    same table, so replication and state transfers carry it)."""
    return f"{project}#contracted"


def get_schema(lab: Lab, project: str) -> tuple[int, int] | None:
    """(version, online) of a project's schema, or None when no database server answers."""
    try:
        rows = _on_a_member(
            lab, "SELECT version, online FROM schema_versions WHERE project=%s", (project,)
        )
    except RuntimeError:
        return None
    return (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)


def workloads(lab: Lab) -> dict[str, Any]:
    """Where each workload runs now ({vm: {host, state}}), initially its home compute."""
    data = lab.read_state("_lab", "workloads.json", None)
    if data is None:
        data = {vm: {"host": w.home, "state": "running"} for vm, w in lab.spec.workloads.items()}
    return data


def save_workloads(lab: Lab, data: dict[str, Any]) -> None:
    lab.write_state("_lab", "workloads.json", data)
