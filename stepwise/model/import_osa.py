"""`stepwise import openstack-ansible`: OpenStack-Ansible's `openstack_user_config.yml` ->
a deployment.

The file places hosts in host groups (`shared_infra_hosts`, `identity_hosts`,
`compute_hosts`, ... each a mapping of host name -> `ip:` and overrides); OpenStack-Ansible's
env.d turns each group into the services it runs (in LXC containers or on the host, each
service in a virtualenv of its release). Read here: the groups, their hosts and `ip`; each
group's services by the table below (env.d's defaults); a group the table does not know is
left unmanaged by its name. `global_overrides`, `cidr_networks`, `used_ips` and the
per-host `container_vars` are not read. The inventory OpenStack-Ansible generates from that
file (openstack_inventory.json, Ansible's `--list` shape) is read the same way: its host
groups' physical hosts (the containers it lists in other groups are no nodes stepwise plans),
each at its `_meta.hostvars` address; `lxc_hosts`, the group it derives of the hosts that run
containers, is no host group of the operator's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.catalog import Catalog
from stepwise.model.import_common import Findings, Imported, checked, roles_of_hosts
from stepwise.model.inventory import Host
from stepwise.model.yamlsrc import line_of, load_yaml

#: an openstack_user_config host group (`-` read as `_`) -> the catalog services it runs
OSA_GROUPS: dict[str, tuple[str, ...]] = {
    "shared_infra_hosts": ("galera", "rabbitmq", "memcached"),
    "identity_hosts": ("keystone",),
    "image_hosts": ("glance_api",),
    "placement_infra_hosts": ("placement_api",),
    "compute_infra_hosts": (
        "nova_api",
        "nova_conductor",
        "nova_scheduler",
        "nova_metadata",
        "nova_vnc_proxy",
    ),
    "orchestration_hosts": ("heat_api", "heat_api_cfn", "heat_engine"),
    "dashboard_hosts": ("horizon",),
    "network_infra_hosts": ("neutron_server",),
    "network_hosts": ("neutron_server",),
    "network_northd_hosts": ("ovn_dbs",),
    "network_gateway_hosts": ("ovn_controller",),
    "compute_hosts": ("nova_compute", "nova_libvirt", "ovn_controller"),
    "storage_infra_hosts": ("cinder_api", "cinder_scheduler"),
    "storage_hosts": ("cinder_volume",),
    "load_balancer_hosts": ("haproxy",),
    "haproxy_hosts": ("haproxy",),
    "key_manager_hosts": ("barbican_api",),
    "swift_proxy_hosts": ("swift_proxy",),
    "swift_hosts": ("swift_storage",),
    "ironic_infra_hosts": ("ironic_api", "ironic_conductor"),
    "metering_infra_hosts": ("ceilometer_agent_central", "ceilometer_agent_notification"),
    "metrics_hosts": ("gnocchi_api", "gnocchi_metricd"),
    "octavia_infra_hosts": ("octavia_api", "octavia_worker", "octavia_health_manager"),
    "dnsaas_hosts": ("designate_api", "designate_central", "designate_worker"),
    "manila_infra_hosts": ("manila_api", "manila_scheduler"),
    "manila_data_hosts": ("manila_share",),
}
#: top-level keys that are no host group
NOT_GROUPS = frozenset({"cidr_networks", "used_ips", "global_overrides"})
HINT = (
    "give OpenStack-Ansible's openstack_user_config.yml (host groups such as "
    "shared_infra_hosts: {infra1: {ip: 172.29.236.11}})"
)


#: groups the generated inventory derives that are no host group of openstack_user_config
DERIVED_GROUPS = frozenset({"lxc_hosts"})


def _generated_host_groups(
    doc: Mapping[Any, Any], fname: str, found: Findings
) -> dict[str, list[Host]]:
    """The host groups of the generated inventory (`GROUP_hosts: {hosts: [...]}`), each host
    at its `_meta.hostvars` address (`ansible_host`, else `management_address`)."""
    meta = doc.get("_meta")
    hostvars = meta.get("hostvars") if isinstance(meta, Mapping) else None
    if not isinstance(hostvars, Mapping):
        found.problems.append(
            Problem(
                "the generated inventory's _meta has no hostvars mapping",
                file=fname,
                line=line_of(doc, ["_meta"]) or 1,
                field="_meta.hostvars",
                hint=HINT,
            )
        )
        return {}
    out: dict[str, list[Host]] = {}
    for key, body in doc.items():
        group = str(key).replace("-", "_")
        if not group.endswith("_hosts") or group in DERIVED_GROUPS:
            continue
        names = body.get("hosts") if isinstance(body, Mapping) else None
        if not isinstance(names, list):
            found.problems.append(
                Problem(
                    "a group of the generated inventory is a mapping with a hosts list",
                    file=fname,
                    line=line_of(doc, [key]),
                    field=str(key),
                    hint=HINT,
                )
            )
            continue
        hosts = []
        for name in names:
            hv = hostvars.get(name)
            hv = hv if isinstance(hv, Mapping) else {}
            ip = hv.get("ansible_host") or hv.get("management_address")
            hosts.append(Host(str(name), None if ip is None else str(ip), line_of(doc, [key])))
        if hosts:
            out[group] = hosts
    return out


def _host_groups(doc: Mapping[Any, Any], fname: str, found: Findings) -> dict[str, list[Host]]:
    """Each `*_hosts` group's hosts (name, `ip` as address, line), problems where the shape
    is wrong."""
    out: dict[str, list[Host]] = {}
    for key, body in doc.items():
        if key in NOT_GROUPS or not str(key).endswith("_hosts"):
            continue
        line = line_of(doc, [key])
        if not isinstance(body, Mapping):
            found.problems.append(
                Problem(
                    "a host group is a mapping of host names to {ip: ADDRESS}",
                    file=fname,
                    line=line,
                    field=str(key),
                    hint=HINT,
                )
            )
            continue
        hosts = []
        for host, hv in body.items():
            ip = hv.get("ip") if isinstance(hv, Mapping) else None
            hosts.append(
                Host(str(host), None if ip is None else str(ip), line_of(doc, [key, host]))
            )
        out[str(key).replace("-", "_")] = hosts
    return out


def import_openstack_ansible(
    user_config: Path | str,
    catalog: Catalog,
    *,
    name: str = "openstack",
    catalog_ref: str | None = None,
) -> Imported:
    """Import an OpenStack-Ansible cloud from its openstack_user_config.yml (or the
    openstack_inventory.json generated from it): one role per set of hosts in the same host
    groups, their services by `OSA_GROUPS` (a group it does not know left unmanaged by name);
    style packages (OpenStack-Ansible's per-release virtualenvs are installed, configured and
    restarted per service, as packages are)."""
    path = Path(user_config)
    fname = str(path)
    doc = load_yaml(path, field="USER_CONFIG")
    if not isinstance(doc, Mapping):
        raise InputError(
            Problem(
                "openstack_user_config.yml is a mapping of host groups",
                file=fname,
                line=getattr(doc, "line", None) or 1,
                hint=HINT,
            )
        )
    found = Findings()
    generated = "_meta" in doc
    groups = (_generated_host_groups if generated else _host_groups)(doc, fname, found)
    member: dict[str, tuple[Host, list[str]]] = {}
    for group, hosts in groups.items():
        for h in hosts:
            member.setdefault(h.name, (h, []))[1].append(group)
    placed = []
    for host, host_groups in member.values():
        services = [s for g in host_groups for s in OSA_GROUPS.get(g, (g,))]
        # named as operators name their hosts (infra1..3 -> infra): a list of a dozen host
        # groups is no role name
        stem = re.sub(r"[0-9_.\-]+$", "", host.name) or host_groups[0].removesuffix("_hosts")
        placed.append((host, (stem,), tuple(dict.fromkeys(services))))
    roles = roles_of_hosts(placed, catalog, fname, found)
    if not roles and not found.problems:
        found.problems.append(Problem("no host group with hosts", file=fname, hint=HINT))
    if found.problems:
        raise InputError(found.problems)
    found.notes.append(
        "OpenStack-Ansible runs each service in a virtualenv of its release (in LXC "
        "containers by default): imported as style packages, whose steps (stop, install, "
        "configure, start) are the same; container_vars and global_overrides are not read"
    )
    if generated:
        found.notes.append(
            "read as OpenStack-Ansible's generated inventory: the physical hosts of its host "
            "groups (its containers are not nodes), at their _meta.hostvars addresses"
        )
    head = {"name": name, "description": f"imported from {path.name} (OpenStack-Ansible)"}
    return checked(head, roles, catalog, catalog_ref, fname, found.notes)


__all__ = ["OSA_GROUPS", "import_openstack_ansible"]
