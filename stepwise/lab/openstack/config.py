"""The configuration a real node has for keystone, placement and glance, rendered into a lab
node's root for the release installed there.

What the deployment's config step writes on a real node (puppet-keystone, kolla's templates):
the service's own INI file, pointing at the database VIP, the shared fernet keys and keystone's
VIP for token validation; plus the WSGI server's file, which names the code to run. The
WSGI file records the release it was rendered for: a package update that restarts a service
before its configuration is rendered again finds it rendered for the other release and does
not start (the lab's rule for "new code, old configuration"; see `kinds/openstack_api.py`).
"""

from __future__ import annotations

import configparser
import io
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from stepwise.lab.nodes import ini_section
from stepwise.lab.openstack import releases

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab

MARKER = "# stepwise-lab: rendered for "
ADMIN_USER = "admin"
ADMIN_PROJECT = "admin"
SERVICE_PROJECT = "service"
REGION = "RegionOne"
#: MariaDB user the services connect as (the lab's own, with every privilege)
DB_USER = "stepwise"
DB_PASSWORD = "stepwise"


def is_real(lab: Lab, service: str) -> bool:
    """Whether `service` runs real OpenStack code in this lab."""
    return lab.service(service).real_openstack


def new_password() -> str:
    """A random password any command line takes as a value: it starts with a letter (a
    `token_urlsafe` starting with '-' was read as an option by keystone-manage bootstrap)."""
    import secrets
    import string

    return secrets.choice(string.ascii_letters) + secrets.token_urlsafe(18)


def secret(lab: Lab) -> str:
    """The lab's OpenStack password (admin and service users), kept 0600 in the lab directory."""
    return (lab.dir / "openstack" / "password").read_text().strip()


def release_on(lab: Lab, node: str, service: str) -> releases.Release | None:
    """The real release whose code the node has installed for `service`."""
    from stepwise.lab import services as lab_services

    return releases.release_for(
        lab.spec.openstack.series if lab.spec.openstack else "",
        lab_services.service_version(lab, node, service),
    )


def venv_of(release: releases.Release) -> Path:
    """The release's venv (built by `lab up` before any node needs it)."""
    from stepwise.lab.openstack.venvs import venv_path

    return venv_path(release.lock)


def code_of(lab: Lab, node: str, service: str, release: releases.Release) -> Path:
    """The venv a node runs `service`'s code from: on a container-style node the venv unpacked
    from the image of the service's container (what the node pulled), else the release's."""
    from stepwise.lab import containers, podman

    if containers.containerized(lab.spec, node, service):
        venv = podman.venv_of_container(lab, node, service)
        if venv is None:
            raise RuntimeError(f"{service} on {node}: its container's image holds no code")
        return venv
    return venv_of(release)


def paths(lab: Lab, node: str, service: str) -> dict[str, Path]:
    """Where a real service's files live inside the node's root."""
    real = releases.SERVICES[service]
    conf = lab.node_path(node, real.config)
    return {
        "config": conf,
        # what runs it, first line the release it was rendered for: uWSGI's file for an API,
        # the console script's command line for a process
        "run": conf.parent / (f"{service}.run" if real.command else f"{service}-uwsgi.ini"),
        "log": lab.node_path(node, f"/var/log/{conf.parent.name}/{service}.log"),
        # uWSGI's master FIFO: `c` reloads the workers one at a time (a reload that keeps serving)
        "fifo": conf.parent / f"{service}-uwsgi.fifo",
    }


def db_url(lab: Lab, database: str) -> str:
    vip = lab.spec.vips[lab.spec.db_service]
    return f"mysql+pymysql://{DB_USER}:{DB_PASSWORD}@{vip.address}:{vip.port}/{database}"


def keystone_url(lab: Lab) -> str:
    """keystone's public endpoint: the VIP."""
    return f"http://{lab.spec.vip}:{lab.spec.vips['keystone'].port}"


def _authtoken(lab: Lab, username: str) -> dict[str, str]:
    url = keystone_url(lab)
    return {
        "www_authenticate_uri": url,
        "auth_url": url,
        "auth_type": "password",
        "project_domain_name": "Default",
        "user_domain_name": "Default",
        "project_name": SERVICE_PROJECT,
        "username": username,
        "password": secret(lab),
        "service_token_roles_required": "true",
        # validated tokens cached in the deployment's memcached (every member, as TripleO's
        # and Kolla's templates list them); without it each call is validated by keystone
        **({"memcached_servers": ",".join(servers)} if (servers := _memcached(lab)) else {}),
    }


def _memcached(lab: Lab) -> list[str]:
    from stepwise.lab import memcached

    return memcached.servers(lab)


def cache_section(lab: Lab) -> dict[str, str]:
    """keystone's `[cache]`: oslo.cache on every memcached member (as TripleO and Kolla
    configure it; python-memcached's pool), or nothing without memcached."""
    servers = _memcached(lab)
    if not servers:
        return {}
    return {
        "enabled": "true",
        "backend": "oslo_cache.memcache_pool",
        "memcache_servers": ",".join(servers),
    }


def _ini(sections: dict[str, dict[str, str]]) -> str:
    cp = configparser.ConfigParser(interpolation=None)
    for name, values in sections.items():
        if name == "DEFAULT":
            cp["DEFAULT"].update(values)
        else:
            cp[name] = values
    buf = io.StringIO()
    cp.write(buf)
    return buf.getvalue()


#: the services' database pools. A pooled connection is replaced at its first checkout after
#: `connection_recycle_time` seconds (Kolla-Ansible's default of 10): when galera's leave drains
#: a member from the database VIP, the services move their connections to the next member
#: themselves within that time, between two queries, so none is cut mid-query.
POOL = {"max_pool_size": "2", "max_overflow": "4", "connection_recycle_time": "10"}


def service_ini(lab: Lab, node: str, service: str) -> str:
    """The service's own configuration file."""
    root = lab.node_root(node)
    log = {"log_file": str(paths(lab, node, service)["log"]), "use_stderr": "false"}
    if service == "keystone":
        return _ini(
            {
                "DEFAULT": log,
                "database": {"connection": db_url(lab, "keystone"), **POOL},
                "fernet_tokens": {"key_repository": str(root / "etc/keystone/fernet-keys")},
                "credential": {"key_repository": str(root / "etc/keystone/credential-keys")},
                "token": {"provider": "fernet"},
                # the lab issues many tokens on 2 cores: bcrypt's cost is lowered, nothing else
                "identity": {"password_hash_rounds": "4"},
                **({"cache": cache} if (cache := cache_section(lab)) else {}),
            }
        )
    if releases.SERVICES[service].project == "nova":
        # one file for the node's nova services: each logs to its own file (its output)
        return _ini(nova_conf(lab, node))
    if service == "neutron_server":
        return _ini(neutron_conf(lab, node, log))
    if service == "placement_api":
        return _ini(
            {
                "DEFAULT": log,
                "placement_database": {"connection": db_url(lab, "placement"), **POOL},
                "api": {"auth_strategy": "keystone"},
                "keystone_authtoken": _authtoken(lab, "placement"),
            }
        )
    if service == "glance_api":
        shared = lab.dir / "shared" / "glance"
        return _ini(
            {
                "DEFAULT": dict(log, enabled_backends="fs:file", bind_host=lab.node(node).address),
                "database": {"connection": db_url(lab, "glance"), **POOL},
                "keystone_authtoken": _authtoken(lab, "glance"),
                "paste_deploy": {"flavor": "keystone"},
                "glance_store": {"default_backend": "fs"},
                # one image directory for every glance node: it stands in for the NFS/ceph share a
                # real deployment gives glance, so an image uploaded through one node is served
                # by all
                "fs": {"filesystem_store_datadir": str(shared / "images")},
                # staging is shared too: an image staged through one node is imported by another
                # (tempest's glance-direct import failed with a staging directory per node)
                "os_glance_staging_store": {"filesystem_store_datadir": str(shared / "staging")},
                "os_glance_tasks_store": {"filesystem_store_datadir": str(shared / "tasks")},
            }
        )
    raise KeyError(service)


def nova_state(lab: Lab, node: str) -> Path:
    """nova's `state_path` on the node (instances, locks, a compute's node identity)."""
    return lab.node_root(node) / "var" / "lib" / "nova"


#: durable queues (mirrored by the lab's `ha-all` policy, as TripleO's RabbitMQ has them). With
#: transient ones a restarted RabbitMQ forgets the conductor's queue: a compute's state report
#: sent before the restarted conductor declares it again is dropped, and the compute waits out
#: `rpc_response_timeout` (60 s) before it reports again ("Lost connection to nova-conductor
#: for reporting service status: MessagingTimeout"), so the controller's visit waited ~30 s
#: for the computes to report. A durable queue keeps the report until the conductor is back.
DURABLE = {"oslo_messaging_rabbit": {"amqp_durable_queues": "true"}}


def nova_conf(lab: Lab, node: str) -> dict[str, dict[str, str]]:
    """nova.conf, one file for every nova service of the node (as a real node has it): cells v2
    on the database VIP, RabbitMQ's members, placement through keystone, the fake virt driver
    (nova's own, as devstack's fake-virt jobs run it), and the operator's `[upgrade_levels]`
    pin of the file it replaces kept. A compute gets no database credentials (its conductor
    reaches the database for it)."""
    from stepwise.lab import rabbitmq

    state = nova_state(lab, node)
    auth = {k: v for k, v in _authtoken(lab, "nova").items()
            if k in ("auth_url", "auth_type", "project_domain_name", "user_domain_name",
                     "project_name", "username", "password")}  # fmt: skip
    pins = ini_section(
        lab.node_path(node, releases.SERVICES["nova_compute"].config), "upgrade_levels"
    )
    return {
        "DEFAULT": dict(
            use_stderr="true",
            host=node,
            my_ip=lab.node(node).address,
            state_path=str(state),
            instances_path=str(state / "instances"),
            # nova's fake driver with a stable node identity, as a hypervisor driver has (the
            # live-migrating variant reports a new one in every process: a restarted compute
            # then refuses to start, "Duplicate compute node record")
            compute_driver="fake.PredictableNodeUUIDDriver",
            transport_url=rabbitmq.transport_url(lab),
        ),
        "api": {"auth_strategy": "keystone"},
        **(
            {
                "api_database": {"connection": db_url(lab, "nova_api"), **POOL},
                "database": {"connection": db_url(lab, "nova"), **POOL},
            }
            if {"nova_api", "nova_conductor", "nova_scheduler"} & set(lab.node(node).services)
            else {}
        ),
        "keystone_authtoken": _authtoken(lab, "nova"),
        "placement": dict(auth, region_name=REGION),
        # required since 2023.1 (`nova-status upgrade check` fails without it): nova's calls to
        # other services carry its own token beside the user's
        "service_user": dict(auth, send_service_user_token="true"),
        **_nova_neutron(lab, auth),
        # one worker each: two cores run every node of the lab
        "conductor": {"workers": "1"},
        "scheduler": {"workers": "1", "discover_hosts_in_cells_interval": "-1"},
        "oslo_concurrency": {"lock_path": str(state / "tmp")},
        "vnc": {"enabled": "false"},
        **DURABLE,
        **({"cache": cache} if (cache := cache_section(lab)) else {}),
        **({"upgrade_levels": pins} if pins else {}),
    }  # fmt: skip


def neutron_conf(lab: Lab, node: str, log: dict[str, str]) -> dict[str, dict[str, str]]:
    """neutron.conf of neutron-server with ML2 and no agent (the lab runs none: ports stay
    unbound, servers boot with no network); nova is not notified of port events."""
    from stepwise.lab import rabbitmq

    state = lab.node_root(node) / "var" / "lib" / "neutron"
    return {
        "DEFAULT": dict(
            log,
            host=node,
            core_plugin="ml2",
            service_plugins="",
            auth_strategy="keystone",
            transport_url=rabbitmq.transport_url(lab),
            state_path=str(state),
            notify_nova_on_port_status_changes="false",
            notify_nova_on_port_data_changes="false",
        ),
        "database": {"connection": db_url(lab, "neutron"), **POOL},
        "keystone_authtoken": _authtoken(lab, "neutron"),
        "oslo_concurrency": {"lock_path": str(state / "tmp")},
        # no agent reports here: its healthcheck is the API's, not the agents'
        "agent": {"report_interval": "0"},
        **DURABLE,
    }


#: ML2 with VXLAN tenant networks (made in the database only: no agent wires them) and flat
#: provider networks; no mechanism driver, so ports stay unbound
ML2_CONF = {"ml2": {"type_drivers": "flat,vlan,vxlan", "tenant_network_types": "vxlan",
                    "mechanism_drivers": "", "extension_drivers": "port_security"},
            "ml2_type_flat": {"flat_networks": "*"},
            "ml2_type_vxlan": {"vni_ranges": "1:1000"}}  # fmt: skip


def _nova_neutron(lab: Lab, auth: dict[str, str]) -> dict[str, dict[str, str]]:
    """nova.conf's `[neutron]` when the lab runs real neutron-server (nova asks it for the
    servers' ports and security groups), else nothing."""
    if not is_real_placed(lab, "neutron_server"):
        return {}
    return {"neutron": dict(auth, region_name=REGION, service_metadata_proxy="false")}


def is_real_placed(lab: Lab, service: str) -> bool:
    """Whether `service` is placed in the lab and runs real code."""
    return service in lab.spec.services and is_real(lab, service)


def uwsgi_ini(lab: Lab, node: str, service: str, release: releases.Release) -> str:
    """The uWSGI file that serves the release's code on the node's address (as devstack and
    Debian's OpenStack packages run their APIs)."""
    real = releases.SERVICES[service]
    conf = paths(lab, node, service)["config"]
    env_value = str(conf.parent) if real.config_env.endswith("_DIR") else str(conf)
    svc = lab.service(service)
    code = code_of(lab, node, service, release)
    return "\n".join(
        [
            f"{MARKER}{release.lock}",
            "[uwsgi]",
            "plugins = python3",
            f"virtualenv = {code}",
            f"http-socket = {lab.node(node).address}:{svc.port}",
            f"wsgi-file = {code / 'bin' / real.wsgi_script}",
            f"env = {real.config_env}={env_value}",
            "master = true",
            # processes, not threads: keystone under threaded uWSGI mixed up concurrent requests'
            # role assignments (tempest's application-credential tests failed at concurrency 2)
            "processes = 2",
            "threads = 1",
            "lazy-apps = true",
            "die-on-term = true",
            # SIGTERM finishes the requests in progress first, as httpd's graceful-stop does
            "hook-master-start = unix_signal:15 gracefully_kill_them_all",
            f"master-fifo = {paths(lab, node, service)['fifo']}",
            "http-keepalive = false",
            "buffer-size = 65535",
            "disable-logging = true",
            f"logto = {paths(lab, node, service)['log'].with_suffix('.uwsgi.log')}",
            "",
        ]
    )


def rendered_for(lab: Lab, node: str, service: str) -> str | None:
    """The release lock the node's WSGI file was rendered for (None: never rendered)."""
    try:
        first = paths(lab, node, service)["run"].read_text().splitlines()[0]
    except (FileNotFoundError, IndexError):
        return None
    return first[len(MARKER) :].strip() if first.startswith(MARKER) else None


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def render(lab: Lab, node: str, service: str) -> releases.Release | None:
    """Write the service's configuration for the release installed on the node."""
    release = release_on(lab, node, service)
    if release is None:
        return None
    p = paths(lab, node, service)
    p["log"].parent.mkdir(parents=True, exist_ok=True)
    _write_private(p["config"], service_ini(lab, node, service))
    if service == "neutron_server":
        paste = code_of(lab, node, service, release) / "etc" / "neutron" / "api-paste.ini"
        shutil.copyfile(paste, p["config"].parent / "api-paste.ini")
        ml2 = p["config"].parent / "plugins" / "ml2" / "ml2_conf.ini"
        ml2.parent.mkdir(parents=True, exist_ok=True)
        ml2.write_text(_ini(ML2_CONF))
    if service == "nova_api":
        paste = code_of(lab, node, service, release) / "etc" / "nova" / "api-paste.ini"
        shutil.copyfile(paste, p["config"].parent / "api-paste.ini")
    if service == "glance_api":
        paste = code_of(lab, node, service, release) / "etc" / "glance" / "glance-api-paste.ini"
        shutil.copyfile(paste, p["config"].parent / "glance-api-paste.ini")
        for d in ("images", "staging", "tasks"):
            (lab.dir / "shared" / "glance" / d).mkdir(parents=True, exist_ok=True)
    _write_private(p["run"], run_file(lab, node, service, release))
    return release


def run_file(lab: Lab, node: str, service: str, release: releases.Release) -> str:
    """The file that says how the node runs the service's code (marked with the release)."""
    if not releases.SERVICES[service].command:
        return uwsgi_ini(lab, node, service, release)
    return f"{MARKER}{release.lock}\n{' '.join(command_of(lab, node, service, release))}\n"


def command_of(lab: Lab, node: str, service: str, release: releases.Release) -> list[str]:
    """The command line of a console service: the venv's python running its script (a
    script's first line names where the venv was built, not where an image unpacked it)."""
    real = releases.SERVICES[service]
    code = code_of(lab, node, service, release)
    conf = paths(lab, node, service)["config"]
    return [str(code / "bin" / "python"), str(code / "bin" / real.command), "--config-file",
            str(conf)]  # fmt: skip
