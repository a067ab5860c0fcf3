"""`stepwise import kolla`: a Kolla-Ansible inventory (`multinode`, `all-in-one`) and its
`globals.yml` -> a deployment of style kolla.

Kolla-Ansible lists hosts in a few host groups (control, network, compute, storage,
monitoring) and places each service by a service group (`nova-api`, `neutron-server`, ...)
whose children are host groups; `globals.yml` switches projects on (`enable_cinder: yes`) and
names the images (`docker_registry`, `docker_namespace`, `openstack_release`). A host's
services are the enabled service groups it is in (as Ansible resolves children of children),
read into catalog entries by name (`-` becomes `_`, with the few names kolla spells otherwise);
hosts with the same services are one role. Groups of no service (`deployment`, `baremetal`,
`common`, ...) are left out, so the deploy host is no node unless it runs services; a service
group no catalog entry knows is left unmanaged. Jinja in globals.yml is never evaluated: such
a value counts as Kolla-Ansible's default, and the operator is told.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.catalog import Catalog
from stepwise.model.checks import validate
from stepwise.model.container_specs import ContainersSpec
from stepwise.model.import_common import Findings, Imported, checked, roles_of_hosts
from stepwise.model.inventory import Host, Inventory, effective_hosts, group_members, load_inventory
from stepwise.model.yamlsrc import line_of, load_yaml

#: the groups Kolla-Ansible's inventories list hosts in (in this order a role is named)
HOST_GROUPS = ("control", "network", "compute", "storage", "monitoring")
#: groups that place no service: how kolla bootstraps and groups hosts
INFRA_GROUPS = frozenset(
    {"all", "ungrouped", "deployment", "baremetal", "tls-backend", "common", "kolla"}
)
#: kolla's service group -> catalog entry, where `-` to `_` is not the catalog's name
KOLLA_NAMES = {
    "mariadb": "galera",
    "loadbalancer": "haproxy",
    "nova-novncproxy": "nova_vnc_proxy",
    "nova-super-conductor": "nova_conductor",
    "ovn-nb-db": "ovn_dbs",
    "ovn-sb-db": "ovn_dbs",
    "ovn-northd": "ovn_dbs",
    "neutron-ovn-metadata-agent": "ovn_metadata_agent",
    "ceilometer-central": "ceilometer_agent_central",
    "ceilometer-notification": "ceilometer_agent_notification",
    "ceilometer-compute": "ceilometer_agent_compute",
    "ceilometer-ipmi": "ceilometer_agent_ipmi",
}
#: project groups: a service group's parents, never a service of their own
PROJECT_GROUPS = frozenset(
    {
        "nova", "neutron", "glance", "cinder", "heat", "ironic", "manila", "ceilometer",
        "aodh", "gnocchi", "octavia", "designate", "placement", "barbican", "mistral",
        "magnum", "cloudkitty", "cyborg", "tacker", "trove", "watcher", "blazar", "skyline",
        "masakari", "prometheus", "opensearch", "letsencrypt", "ovn-controller",
        "ovn-database", "hacluster", "hacluster-remote", "valkey", "bifrost",
    }
)  # fmt: skip
#: projects Kolla-Ansible enables by default (`enable_openstack_core` and infrastructure);
#: every other `enable_*` defaults to no (ansible/group_vars/all/*.yml)
CORE = frozenset({"keystone", "glance", "nova", "neutron", "placement", "heat", "horizon"})
ON_BY_DEFAULT = frozenset(
    {"mariadb", "memcached", "rabbitmq", "openvswitch", "loadbalancer", "fluentd", "cron"}
)
#: services of an enabled project that Kolla-Ansible deploys only when switched on
OFF_BY_DEFAULT = {
    "nova-serialproxy": "enable_nova_serialconsole_proxy",
    "neutron-bgp-dragent": "enable_neutron_bgp_dragent",
    "neutron-metering-agent": "enable_neutron_metering",
    "neutron-ovn-vpn-agent": "enable_neutron_vpnaas",
}
#: what Kolla-Ansible runs on a host group itself, with no service group of its own (the
#: nova-cell role's compute services; the OVS agent where an agent or instances need it)
IMPLIED = {
    "compute": ("nova_compute", "nova_libvirt"),
}
OVS_AGENT_GROUPS = ("compute", "neutron-dhcp-agent", "neutron-l3-agent", "neutron-metadata-agent")
#: kolla-ansible's image defaults (common.yml): registry, namespace, release, base distro
IMAGE_DEFAULTS = {
    "docker_registry": "quay.io",
    "docker_namespace": "openstack.kolla",
    "openstack_release": "master",
    "kolla_base_distro": "rocky",
}
DISTRO_VERSION = {"rocky": "10", "debian": "trixie", "ubuntu": "noble"}
_TRUE = {"yes", "true", "on", "1"}
_FALSE = {"no", "false", "off", "0"}


@dataclass
class Globals:
    """globals.yml as read: its literal values; `templated` the keys whose value is Jinja."""

    values: dict[str, Any]
    templated: list[str]
    file: str | None = None

    def flag(self, key: str, default: bool) -> bool:
        """A yes/no setting as Ansible's `bool` filter reads it; the default when absent or
        templated."""
        value = self.values.get(key)
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower() if value is not None else ""
        return True if text in _TRUE else False if text in _FALSE else default

    def text(self, key: str) -> str:
        """A literal setting, else kolla-ansible's default."""
        value = self.values.get(key)
        return str(value) if isinstance(value, (str, int)) and value != "" else IMAGE_DEFAULTS[key]


def load_globals(path: Path | str | None) -> Globals:
    """globals.yml (a mapping of settings); none given: kolla-ansible's defaults."""
    if path is None:
        return Globals({}, [])
    doc = load_yaml(Path(path), field="--globals")
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise InputError(
            Problem(
                "globals.yml is a mapping of settings (enable_cinder: yes, ...)",
                file=str(path),
                line=getattr(doc, "line", None) or 1,
                field="--globals",
            )
        )
    templated = [str(k) for k, v in doc.items() if isinstance(v, str) and "{{" in v]
    values = {str(k): v for k, v in doc.items() if str(k) not in templated}
    return Globals(values, templated, str(path))


def _project(group: str) -> str:
    """The project whose `enable_*` switches a service group on."""
    if group.startswith(("neutron-ovn-", "ovn-")):
        return "ovn"
    if group in ("ironic-neutron-agent", "nova-compute-ironic"):
        return "ironic"
    return group.split("-", 1)[0]


def _enabled(group: str, g: Globals) -> bool:
    """Whether kolla deploys service group `group` with these globals."""
    project = _project(group)
    ovn = str(g.values.get("neutron_plugin_agent", "openvswitch")) == "ovn"
    if project == "ovn":
        return ovn
    if group in ("neutron-dhcp-agent", "neutron-l3-agent", "neutron-metadata-agent") and ovn:
        return False
    if project in CORE:
        on = g.flag(f"enable_{project}", g.flag("enable_openstack_core", True))
    else:
        on = g.flag(f"enable_{project}", project in ON_BY_DEFAULT)
    if group in ("nova-novncproxy", "nova-spicehtml5proxy"):
        console = str(g.values.get("nova_console", "novnc"))
        return on and console == ("novnc" if group == "nova-novncproxy" else "spice")
    if group in OFF_BY_DEFAULT:
        return on and g.flag(OFF_BY_DEFAULT[group], False)
    # a service of an enabled project may have its own switch (enable_cinder_backup)
    return on and g.flag(f"enable_{group.replace('-', '_')}", True)


def _service_groups(inv: Inventory) -> list[str]:
    """The groups that place a service: not a host group, a project or infrastructure."""
    return [
        name
        for name in inv.groups
        if name not in INFRA_GROUPS and name not in HOST_GROUPS and name not in PROJECT_GROUPS
    ]


@dataclass(frozen=True)
class _Host:
    """A host with what it runs: its host groups (for the role's name) and service names."""

    host: Host
    host_groups: tuple[str, ...]
    services: tuple[str, ...]


def _hosts(inv: Inventory, g: Globals, catalog: Catalog) -> list[_Host]:
    """Every host that runs an enabled service, with its service names (kolla's spelling,
    catalog names where kolla's differs), in inventory order."""
    effective = effective_hosts(inv)
    member: dict[str, list[str]] = {}
    for group in [*HOST_GROUPS, *_service_groups(inv)]:
        if group in inv.groups:
            for h in group_members(inv, group, effective):
                member.setdefault(h.name, []).append(group)
    out = []
    for name, groups in member.items():
        services = [grp for grp in groups if grp not in HOST_GROUPS and _enabled(grp, g)]
        for host_group, implied in IMPLIED.items():
            if host_group in groups and g.flag(
                "enable_nova", g.flag("enable_openstack_core", True)
            ):
                services.extend(implied)
        ovs = str(g.values.get("neutron_plugin_agent", "openvswitch")) == "openvswitch"
        if ovs and set(OVS_AGENT_GROUPS) & set(groups) and _enabled("neutron", g):
            services.append("neutron_ovs_agent")
        names = [KOLLA_NAMES.get(s) or s.replace("-", "_") for s in services]
        if names:
            hg = tuple(grp for grp in groups if grp in HOST_GROUPS)
            out.append(_Host(effective[name], hg, tuple(dict.fromkeys(names))))
    return out


def import_kolla(
    inventory: Path | str,
    catalog: Catalog,
    *,
    globals_file: Path | str | None = None,
    name: str = "kolla",
    catalog_ref: str | None = None,
) -> Imported:
    """Import a Kolla-Ansible cloud: its inventory's hosts, the services its service groups
    place on them (enabled by `globals_file`, else by Kolla-Ansible's defaults), one role per
    set of hosts running the same services, style kolla with the images globals.yml names."""
    inv = load_inventory(inventory)
    g = load_globals(globals_file)
    found = Findings()
    placed = [(kh.host, kh.host_groups, kh.services) for kh in _hosts(inv, g, catalog)]
    roles = roles_of_hosts(placed, catalog, inv.path, found)
    if not roles:
        found.problems.append(
            Problem(
                "no host of the inventory runs an enabled service",
                file=inv.path,
                hint="give Kolla-Ansible's inventory (multinode, all-in-one) and its globals.yml",
            )
        )
    if found.problems:
        raise InputError(found.problems)
    found.notes.extend(
        f"{g.file}: {key} is a template, not read: Kolla-Ansible's default is assumed"
        for key in g.templated
        if key.startswith(("enable_", "docker_", "openstack_", "neutron_plugin_agent"))
    )
    if g.file is None:
        found.notes.append(
            "no --globals: Kolla-Ansible's defaults are assumed (the core services, "
            f"images {_containers(g)['registry']}/{_containers(g)['namespace']}/*:"
            f"{_containers(g)['tag']})"
        )
    head = {
        "name": name,
        "description": f"imported from {Path(inv.path).name} (Kolla-Ansible)",
        "style": "kolla",
        "containers": _checked_containers(g),
    }
    return checked(head, roles, catalog, catalog_ref, inv.path, found.notes)


def _containers(g: Globals) -> dict[str, Any]:
    """The `containers:` block of globals.yml's image settings (kolla's tag is
    `openstack_release`-`kolla_base_distro`-its version, unless `openstack_tag` is given)."""
    tag = g.values.get("openstack_tag")
    if not isinstance(tag, str) or not tag:
        distro = g.text("kolla_base_distro")
        tag = f"{g.text('openstack_release')}-{distro}-{DISTRO_VERSION.get(distro, '')}".rstrip("-")
        tag += str(g.values.get("openstack_tag_suffix") or "")
    return {
        "registry": g.text("docker_registry"),
        "namespace": g.text("docker_namespace"),
        "tag": tag,
    }


#: the containers block's fields -> the globals.yml settings they come from
_SOURCE = {"registry": "docker_registry", "namespace": "docker_namespace", "tag": "openstack_tag"}


def _checked_containers(g: Globals) -> dict[str, Any]:
    """`_containers` checked by the deployment's schema, a fault named at globals.yml's line
    of the setting it came from (the deployment's check would name no file the operator has)."""
    block = _containers(g)
    try:
        validate(ContainersSpec, block, None, "")
    except InputError as exc:
        first = exc.problems[0]
        key = (first.field or "").split(".")[0]
        setting = _SOURCE.get(key, key)
        if setting == "openstack_tag" and "openstack_tag" not in g.values:
            setting = "openstack_release"
        doc = load_yaml(Path(g.file)) if g.file else None
        raise InputError(
            Problem(
                f"{first.message} (read as the deployment's containers.{key})",
                file=g.file,
                line=line_of(doc, [setting]) if doc is not None else None,
                field=setting,
            )
        ) from None
    return block


__all__ = ["Globals", "import_kolla", "load_globals"]
