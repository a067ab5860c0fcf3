"""`stepwise import tripleo|inventory`: a cloud as it is, as a deployment file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.text import Text

from stepwise.cli.app import app
from stepwise.cli.common import console, err_console, print_json, reported
from stepwise.errors import InputError, Problem

if TYPE_CHECKING:
    from stepwise.model.importing import Imported

import_app = typer.Typer(
    help="Turn a cloud as it is (a TripleO roles file, an Ansible inventory) into a deployment.",
    no_args_is_help=True,
)
app.add_typer(import_app, name="import")

OUT_OPT = typer.Option(
    ..., "--output", "-o", metavar="PATH", help="The deployment YAML to write ('-': stdout)."
)
FORCE_OPT = typer.Option(
    False, "--force", help="Replace an existing file that `stepwise import` did not write."
)
JSON_OPT = typer.Option(False, "--json", help="Print what was written as JSON (needs -o FILE).")
CATALOG_OPT = typer.Option(
    None, "--catalog", "-c", metavar="DIR", help="A catalog directory (default: the built-in one)."
)


ENV_OPT = typer.Option(
    None,
    "--environment",
    "-e",
    metavar="PATH",
    help="THT environment file(s), as given to `overcloud deploy -e`: "
    "services their resource_registry maps to OS::Heat::None are left out.",
)
PREPARE_OPT = typer.Option(
    None,
    "--containers-prepare",
    metavar="PATH",
    help="containers-prepare-parameter.yaml: a containerized cloud (style tripleo), "
    "its images' registry, namespace, name prefix/suffix and tag.",
)

STRICT_OPT = typer.Option(
    False,
    "--strict",
    help="Refuse a service no catalog entry knows (default: left unmanaged, named in plans).",
)


def _pairs(values: list[str] | None, option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or ():
        key, sep, value = v.partition("=")
        if not sep or not key.strip():
            raise InputError(Problem(f"'{v}' is not ROLE=VALUE", field=option))
        out[key.strip()] = value.strip()
    return out


def _counts(values: list[str] | None) -> dict[str, int]:
    """`--count ROLE=N` as role -> N; N in ASCII digits (`'²'.isdigit()` is True and `int`
    refuses it) and at most a cloud's worth of nodes."""
    from stepwise.model.limits import MAX_NODES

    counts: dict[str, int] = {}
    for role, n in _pairs(values, "--count").items():
        if not (n.isascii() and n.isdigit()) or int(n) > MAX_NODES:
            raise InputError(
                Problem(
                    f"--count {role}={n}: not a number of nodes",
                    field="--count",
                    hint=f"give ROLE=N with N a whole number from 0 to {MAX_NODES:,}",
                )
            )
        counts[role] = int(n)
    return counts


def _catalog_ref(catalog: Path | None, output: str) -> str | None:
    """The catalog as the written deployment names it: relative to the output file's directory."""
    if catalog is None:
        return None
    if output == "-":
        return str(catalog.resolve())
    return os.path.relpath(catalog.resolve(), Path(output).resolve().parent)


#: the first line of every deployment `import` writes (no data in it: a file name with a
#: newline in a comment would start YAML of its own); only a file that starts so is replaced
HEADER = (
    "# Imported by `stepwise import` (the source is in `description`); "
    "check it, then keep it with the cloud.\n"
)


def _write(result: Imported, output: str, force: bool = False, json_out: bool = False) -> None:
    import yaml

    from stepwise.paths import write_output

    if json_out and output == "-":
        raise InputError(
            Problem(
                "--json prints what was written: give the deployment a file with -o FILE",
                field="--json",
            )
        )

    # everything from data is serialised by the YAML library, never formatted into the text
    text = HEADER + yaml.safe_dump(result.doc, sort_keys=False, default_flow_style=None, width=120)
    if output == "-":
        typer.echo(text, nl=False)
    else:
        write_output(
            output,
            text.encode("utf-8"),
            field="--output",
            force=force,
            ours=HEADER.encode("utf-8"),
            mode=0o644,
        )
    dep = result.deployment
    if json_out:
        print_json(
            {
                "wrote": output,
                "roles": len(dep.roles),
                "nodes": len(dep.nodes),
                "services": len({s for r in dep.roles for s in r.declared}),
                "with_runtime": len(dep.instances),
                "notes": list(result.notes),
            }
        )
        return
    for note in result.notes:
        err_console.print(Text("note: " + note), soft_wrap=True)
    if output != "-":
        console.print(
            Text(
                f"wrote {output}: {len(dep.roles)} role(s), {len(dep.nodes)} node(s), "
                f"{len({s for r in dep.roles for s in r.declared})} service(s) "
                f"({len(dep.instances)} with a runtime)"
            ),
            soft_wrap=True,
        )


@import_app.command("tripleo")
def import_tripleo_cmd(
    roles_data: Path = typer.Option(
        ...,
        "--roles-data",
        "-r",
        metavar="PATH",
        help="tripleo-heat-templates roles file (roles_data.yaml).",
    ),
    inventory: Path | None = typer.Option(
        None,
        "--inventory",
        "-i",
        metavar="PATH",
        help="tripleo-ansible-inventory.yaml of the stack: real hosts and addresses.",
    ),
    stack: str = typer.Option(
        "overcloud", "--stack", help="Stack name (%stackname% of the host name formats)."
    ),
    count: list[str] | None = typer.Option(
        None,
        "--count",
        metavar="ROLE=N",
        help="Nodes of a role without inventory (default: its CountDefault).",
    ),
    environment: list[Path] | None = ENV_OPT,
    containers_prepare: Path | None = PREPARE_OPT,
    undercloud_registry: str | None = typer.Option(
        None,
        "--undercloud-registry",
        metavar="HOST:PORT",
        help="Where push_destination: true pushes (the undercloud's registry, e.g. "
        "192.168.24.1:8787); default: the prepare file's DockerInsecureRegistryAddress.",
    ),
    strict: bool = STRICT_OPT,
    catalog: Path | None = CATALOG_OPT,
    output: str = OUT_OPT,
    force: bool = FORCE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Import a TripleO cloud: roles, services (by their OS::TripleO::Services names), counts,
    host name formats, update_serial and tags; hosts and addresses from the inventory; with
    --containers-prepare, its containers (style tripleo)."""
    from stepwise.model import load_catalog
    from stepwise.model.importing import import_tripleo

    with reported():
        result = import_tripleo(
            roles_data,
            load_catalog(catalog),
            stack=stack,
            inventory=inventory,
            counts=_counts(count),
            catalog_ref=_catalog_ref(catalog, output),
            environments=list(environment or ()),
            containers_prepare=containers_prepare,
            strict=strict,
            undercloud_registry=undercloud_registry,
        )
        _write(result, output, force, json_out)


@import_app.command("inventory")
def import_inventory_cmd(
    inventory: Path = typer.Argument(
        ..., metavar="INVENTORY", help="An Ansible inventory (INI or YAML); groups are roles."
    ),
    name: str = typer.Option("cloud", "--name", help="Name of the deployment."),
    services: list[str] | None = typer.Option(
        None,
        "--services",
        metavar="GROUP=a,b",
        help="Services of a group (else its var stepwise_services).",
    ),
    controlplane: list[str] | None = typer.Option(
        None,
        "--controlplane",
        metavar="GROUP",
        help="A group updated as control plane (default: groups without data-plane services).",
    ),
    catalog: Path | None = CATALOG_OPT,
    output: str = OUT_OPT,
    force: bool = FORCE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Import a cloud not deployed by TripleO from its Ansible inventory."""
    from stepwise.model import load_catalog
    from stepwise.model.importing import import_inventory

    with reported():
        by_group = {
            g: [s.strip() for s in v.split(",") if s.strip()]
            for g, v in _pairs(services, "--services").items()
        }
        result = import_inventory(
            inventory,
            load_catalog(catalog),
            name=name,
            services=by_group,
            controlplane=list(controlplane or ()),
            catalog_ref=_catalog_ref(catalog, output),
        )
        _write(result, output, force, json_out)


@import_app.command("kolla")
def import_kolla_cmd(
    inventory: Path = typer.Argument(
        ..., metavar="INVENTORY", help="Kolla-Ansible's inventory (multinode, all-in-one)."
    ),
    globals_file: Path | None = typer.Option(
        None,
        "--globals",
        metavar="PATH",
        help="globals.yml: the enabled projects (enable_*), neutron_plugin_agent and the "
        "images (docker_registry, docker_namespace, openstack_release); default: "
        "Kolla-Ansible's defaults.",
    ),
    name: str = typer.Option("kolla", "--name", help="Name of the deployment."),
    catalog: Path | None = CATALOG_OPT,
    output: str = OUT_OPT,
    force: bool = FORCE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Import a Kolla-Ansible cloud: the service groups its hosts are in (nova-api,
    neutron-server, ...) as catalog services, one role per set of hosts running the same,
    style kolla; groups of no service (deployment, baremetal, common) left out."""
    from stepwise.model import load_catalog
    from stepwise.model.import_kolla import import_kolla

    with reported():
        _check_name(name)
        result = import_kolla(
            inventory,
            load_catalog(catalog),
            globals_file=globals_file,
            name=name,
            catalog_ref=_catalog_ref(catalog, output),
        )
        _write(result, output, force, json_out)


@import_app.command("openstack-ansible")
def import_osa_cmd(
    user_config: Path = typer.Argument(
        ...,
        metavar="USER_CONFIG",
        help="OpenStack-Ansible's openstack_user_config.yml, or the openstack_inventory.json "
        "it generates from it.",
    ),
    name: str = typer.Option("openstack", "--name", help="Name of the deployment."),
    catalog: Path | None = CATALOG_OPT,
    output: str = OUT_OPT,
    force: bool = FORCE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Import an OpenStack-Ansible cloud: its host groups (shared_infra_hosts,
    compute_hosts, ...) as the services OpenStack-Ansible places there, one role per set of
    hosts running the same."""
    from stepwise.model import load_catalog
    from stepwise.model.import_osa import import_openstack_ansible

    with reported():
        _check_name(name)
        result = import_openstack_ansible(
            user_config, load_catalog(catalog), name=name, catalog_ref=_catalog_ref(catalog, output)
        )
        _write(result, output, force, json_out)


def _check_name(name: str) -> None:
    """--name is the deployment's name: a name, or refused before anything is read."""
    import re

    from stepwise.model.specs import NAME_RE

    if not re.fullmatch(NAME_RE, name) or len(name) > 128:
        raise InputError(Problem(f"deployment name '{name}' is not a valid name", field="--name"))
