"""`discover`: ask the nodes what they have installed and what their repositories offer, keep
it in the store (plans use it), and produce a facts file of the documented shape."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from stepwise.errors import InputError, Problem, StepwiseError
from stepwise.model import NO_FACTS, Deployment, Facts
from stepwise.model.checks import validate
from stepwise.model.choices import DeployStyle
from stepwise.model.containers import container_name, image_ref
from stepwise.model.fact_specs import FactsSpec, NodeFactsSpec
from stepwise.model.facts import IMAGE_FACT_KEYS, build_facts
from stepwise.run import ansible_env
from stepwise.run.ansible_files import to_yaml, unsafe, write_private
from stepwise.run.inventory import Connector, inventory
from stepwise.run.node_work import NODE_ROOT, OS_RELEASE
from stepwise.run.store.store import Store

#: the configuration a service runs with (docs/node-commands.md: config of S is /etc/S/S.conf)
CONFIG_CURRENT = "/etc/{service}/{service}.conf"
#: the one the deployment rendered for it and the config step applies (TripleO's
#: container-puppet output directory, mirrored at the file's own path)
CONFIG_RENDERED = "/var/lib/config-data/puppet-generated/{service}/etc/{service}/{service}.conf"


def config_files(service: str) -> list[str]:
    """[the file `service` runs with, the file the deployment rendered for it]."""
    return [CONFIG_CURRENT.format(service=service), CONFIG_RENDERED.format(service=service)]


def stored_facts(
    deployment: Deployment,
    store: Store,
    packages: bool = True,
    keep: tuple[str, ...] = ("os", "images"),
) -> Facts:
    """What `discover` and the runs stored, as the Facts a plan takes, with the milestones
    reached (NO_FACTS and no progress when nothing was recorded). `packages=False`: the
    package versions are not used (a major upgrade changes everything whatever discover
    saw in the current release's repositories), the OS majors and milestones are; `keep`: the
    node facts kept then (a major upgrade keeps only the images discover asked the target
    release's registry namespace about)."""
    progress = store.progress(deployment.name)
    data = store.facts(deployment.name)
    if not data or not any(
        f.get("packages") or f.get("os") or f.get("images") for f in data["nodes"].values()
    ):
        return NO_FACTS.with_progress(progress)
    _refuse_unknown_nodes(data, deployment)
    if not packages:
        # the images stay: their targets are the ones discover asked for (a major upgrade's
        # with -e target_namespace), which the plan checks against its own references
        data = {
            "nodes": {
                n: {k: f[k] for k in keep if f.get(k)}
                for n, f in data["nodes"].items()
                if any(f.get(k) for k in keep)
            }
        }
        if not data["nodes"]:
            return NO_FACTS.with_progress(progress)
    # stored facts are input like a facts file: the same model, the same limits, exit 2
    facts = build_facts(
        validate(FactsSpec, data, None, f"store:{deployment.name}"),
        deployment,
        None,
        f"store:{deployment.name}",
    )
    if not packages:
        facts = (
            facts.without_packages()
        )  # what changes is not known: every package may (the safe side)
    return facts.with_progress(progress)


def _refuse_unknown_nodes(data: Mapping[str, Any], deployment: Deployment) -> None:
    """Stored facts of a node the deployment does not have are refused, as a stored image of
    an unknown service is: a plan from them would be a plan of another cloud."""
    unknown = [n for n in data["nodes"] if n not in deployment.node_by_name]
    if unknown:
        raise InputError(
            [
                Problem(
                    f"the store holds facts of node '{n}', which the deployment does not have",
                    file=f"store:{deployment.name}",
                    field=f"nodes.{n}",
                    hint="run `stepwise discover` again (it forgets the facts of nodes the "
                    "deployment no longer has), or check that -d names this cloud's deployment",
                )
                for n in unknown[:20]
            ]
        )


def valid_node_facts(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a node reported, in the facts-file node shape, or None if it does not validate:
    a node's answer is data like a facts file, never trusted as it is."""
    try:
        return NodeFactsSpec.model_validate(
            {k: raw[k] for k in ("os", "packages", "config", "images") if k in raw}
        ).model_dump()
    except ValidationError:
        return None


def discover(
    deployment: Deployment,
    store: Store | None,
    *,
    nodes: Sequence[str] | None = None,
    extra_vars: Mapping[str, Any] | None = None,
    connector: Connector | None = None,
    os_target: int | None = None,
    forks: int = 50,
    cloud: str | None = None,
) -> dict[str, Any]:
    """Gather facts from `nodes` (default: all) and store them; returns them in the FactsSpec
    shape. Unreachable or failing nodes are reported and nothing is stored for them.
    Container nodes also report their images: the target reference is in the deployment's
    namespace, or in `-e target_namespace=NS` (a major upgrade's)."""
    names = list(nodes) if nodes else [n.name for n in deployment.nodes]
    found, errors = _ask_nodes(deployment, names, extra_vars, connector, forks)
    out_nodes: dict[str, Any] = {}
    for host in names:
        if host not in found:
            continue
        nf = valid_node_facts(found[host])
        if nf is None:
            errors[host] = "reported facts that are not valid (package names, versions, OS major)"
            del found[host]
            continue
        out_nodes[host] = _facts_entry(nf, os_target)
    facts = {"nodes": out_nodes}
    if store is not None and out_nodes:
        _save(store, cloud or deployment.name, deployment, facts)
    missing = [h for h in names if h not in found]
    if missing:
        raise StepwiseError(_no_answer(missing, errors, len(names), len(out_nodes)))
    return facts


def image_targets(deployment: Deployment, host: str, namespace: str | None) -> dict[str, Any]:
    """service -> {container, ref} of a container node: what discover asks its podman and the
    registry about (`namespace`: the target release's, else the deployment's)."""
    role = deployment.role_of(host)
    if role.style is DeployStyle.PACKAGES or deployment.containers is None:
        return {}
    return {
        s: {
            "container": container_name(s),
            "ref": image_ref(
                s,
                role.style,
                deployment.containers,
                image=deployment.catalog[s].image,
                namespace=namespace,
            ),
        }
        for s in deployment.containerized(role)
    }


def _inventory(
    deployment: Deployment, connector: Connector | None, namespace: str | None = None
) -> dict[str, Any]:
    """The run's inventory, each host with the packages to ask about: its services' and the
    ones that need a reboot (the kernel: a minor update that brings a new kernel installs it
    and reboots into it), and its services' configuration files to hash."""
    inv = inventory(deployment, connector)
    for role in inv["all"]["children"].values():
        for host, hv in role["hosts"].items():
            images = image_targets(deployment, host, namespace)
            if images:
                hv["stepwise_images_to_inspect"] = unsafe(images)
            pkgs = sorted(
                {p for s in deployment.services_on(host) for p in deployment.catalog[s].packages}
                | set(deployment.reboot_packages)
            )
            hv["stepwise_packages"] = unsafe(pkgs)
            hv["stepwise_config"] = unsafe(
                {s: config_files(s) for s in deployment.services_on(host)}
            )
    return inv


def _play(names: Sequence[str]) -> dict[str, Any]:
    return {
        "name": "stepwise discover",
        "hosts": ",".join(names),
        "gather_facts": False,
        "tasks": [
            {
                "name": "discover",
                "stepwise_facts": {
                    "packages": "{{ stepwise_packages }}",
                    "command": "{{ stepwise_discover_command | default(omit) }}",
                    "os_release": OS_RELEASE,
                    "config": "{{ stepwise_config }}",
                    "root": NODE_ROOT,
                    "images": "{{ stepwise_images_to_inspect | default({}) }}",
                    "tls_verify": "{{ stepwise_registry_tls_verify | default(true) }}",
                },
            }
        ],
    }


def _ask_nodes(
    deployment: Deployment,
    names: Sequence[str],
    extra_vars: Mapping[str, Any] | None,
    connector: Connector | None,
    forks: int,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Run the discover play: what each node answered, and why the others did not."""
    namespace = (extra_vars or {}).get("target_namespace")
    inv = _inventory(deployment, connector, str(namespace) if namespace else None)
    found: dict[str, Any] = {}
    errors: dict[str, str] = {}

    def on_event(ev: Mapping[str, Any]) -> bool:
        data = ev.get("event_data") or {}
        host = data.get("host")
        res = data.get("res") or {}
        if ev.get("event") == "runner_on_ok" and "stepwise_facts" in res:
            found[host] = res["stepwise_facts"]
        elif ev.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            errors[host] = str(res.get("msg") or res.get("stderr") or "failed").strip()
        return False

    run_read_only_play("discover", _play(names), inv, extra_vars, connector, forks, on_event)
    return found, errors


def _facts_entry(nf: Mapping[str, Any], os_target: int | None) -> dict[str, Any]:
    """A node's validated answer in the facts-file shape (installed and available versions,
    OS major and target)."""
    entry: dict[str, Any] = {
        "packages": {
            p: {
                k: v
                for k, v in (pf or {}).items()
                if k in ("installed", "available") and v is not None
            }
            for p, pf in (nf.get("packages") or {}).items()
        }
    }
    os_ = {
        k: v for k, v in (nf.get("os") or {}).items() if k in ("major", "target") and v is not None
    }
    if os_target is not None:
        os_["target"] = os_target
    if os_:
        entry["os"] = os_
    config = {
        s: {k: v for k, v in (cf or {}).items() if k in ("current", "rendered") and v is not None}
        for s, cf in (nf.get("config") or {}).items()
    }
    if config:
        entry["config"] = config
    images = {
        s: {k: v for k, v in (f or {}).items() if k in IMAGE_FACT_KEYS and v}
        for s, f in (nf.get("images") or {}).items()
    }
    if images:
        entry["images"] = images
    return entry


def _save(store: Store, cloud: str, deployment: Deployment, facts: dict[str, Any]) -> None:
    """Keep the facts, and each node's services with the version of their first package."""
    store.save_facts(cloud, facts)
    # a node the deployment no longer has: its stored facts would refuse every plan
    store.forget_nodes_except(cloud, deployment.node_by_name)
    pairs, versions = [], {}
    for host, entry in facts["nodes"].items():
        for s in deployment.services_on(host):
            pkgs = deployment.catalog[s].packages
            pairs.append((host, s))
            versions[(host, s)] = (
                (entry["packages"].get(pkgs[0]) or {}).get("installed") if pkgs else None
            )
    store.set_services(cloud, pairs, versions=versions)


def _no_answer(
    missing: Sequence[str], errors: Mapping[str, str], asked: int, answered: int
) -> list[Problem]:
    problems = [Problem(f"{h}: {errors.get(h, 'no answer')}") for h in missing]
    problems.append(
        Problem(
            f"discover got no facts from {len(missing)} of {asked} node(s)"
            + (f"; stored what the other {answered} reported" if answered else ""),
            hint="check the nodes are reachable (`--limit` to retry just those)",
        )
    )
    return problems


def run_read_only_play(
    name: str,
    play: Mapping[str, Any],
    inv: Mapping[str, Any],
    extra_vars: Mapping[str, Any] | None,
    connector: Connector | None,
    forks: int,
    on_event: Callable[[Mapping[str, Any]], bool],
) -> None:
    """Run one play that only asks the nodes (discover, preflight) in a private directory
    removed afterwards: the inventory and the -e values in 0600 files, data values unsafe."""
    pdd = Path(tempfile.mkdtemp(prefix=f"stepwise-{name}-"))
    try:
        (pdd / "project").mkdir(parents=True)
        pb = pdd / "project" / f"{name}.yml"
        pb.write_text(json.dumps([play]))
        inv_path = write_private(pdd / "inventory" / "hosts.yml", to_yaml(inv))
        ev_path = write_private(pdd / "vars" / "extra.yml", to_yaml(unsafe(dict(extra_vars or {}))))
        wrapper, _pid = ansible_env.write_wrapper(pdd / "bin")
        book = ansible_env.Playbook(
            directory=pdd,
            playbook=pb,
            inventory=inv_path,
            wrapper=wrapper,
            var_files=(ev_path,),
            env=ansible_env.ansible_env(plugin_dirs=connector.plugin_dirs if connector else ()),
            forks=forks,
            poll_s=0.2,
        )
        ansible_env.run_playbook(book, on_event)
    finally:
        shutil.rmtree(pdd, ignore_errors=True)
