"""Facts about the nodes: installed and available package versions, OS major versions, and
the hash of each service's configuration (running vs rendered).

Without facts every package of every service is taken to change, every node to be on its
current OS, and the target to be the next OS major.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from stepwise.errors import InputError, Problem
from stepwise.model.checks import validate
from stepwise.model.deployment import Deployment
from stepwise.model.fact_specs import FactsSpec
from stepwise.model.yamlsrc import line_of, load_yaml, to_plain

DEFAULT_OS_MAJOR = 8


@dataclass(frozen=True, slots=True)
class PackageFact:
    installed: str | None
    available: str | None

    @property
    def changes(self) -> bool:
        return self.available is not None and self.available != self.installed


@dataclass(frozen=True, slots=True)
class ConfigFact:
    """Hashes of a service's configuration on a node: what it runs with and what the
    deployment rendered for it."""

    current: str | None
    rendered: str | None

    @property
    def changes(self) -> bool:
        # both must be known: a missing hash is no evidence of a change (no restart for it)
        return (
            self.current is not None and self.rendered is not None and self.current != self.rendered
        )


#: the fields of an image fact, in the facts file's order
IMAGE_FACT_KEYS = ("running", "target", "ref")


@dataclass(frozen=True, slots=True)
class ImageFact:
    """A container service's image on a node: the digest its container runs, the registry's
    digest of the reference this workflow goes to, and that reference."""

    running: str | None
    target: str | None
    ref: str | None = None

    @property
    def changes(self) -> bool:
        # an unknown digest on either side is taken to change (the safe side: the switch
        # recreates the container from the verified target)
        return self.running is None or self.target is None or self.running != self.target

    def describe(self) -> str:
        """`image REF RUNNING -> TARGET` with the digests shortened as podman shows them."""
        return f"image {self.ref or '?'} {_short(self.running)} -> {_short(self.target)}"


def _short(digest: str | None) -> str:
    return digest.removeprefix("sha256:")[:12] if digest else "?"


@dataclass(frozen=True, slots=True)
class NodeFacts:
    packages: Mapping[str, PackageFact] = field(default_factory=lambda: MappingProxyType({}))
    os_major: int = DEFAULT_OS_MAJOR
    os_target: int = DEFAULT_OS_MAJOR + 1
    #: service -> its configuration hashes on this node
    config: Mapping[str, ConfigFact] = field(default_factory=lambda: MappingProxyType({}))
    #: container service -> its image digests on this node (container styles)
    images: Mapping[str, ImageFact] = field(default_factory=lambda: MappingProxyType({}))
    #: the target was given (a facts file's `os.target`, discover's --os-target), not taken
    #: to be the next major: only a declared target says that a major upgrade changes the OS
    os_target_declared: bool = False


@dataclass(frozen=True, eq=False)
class Facts:
    """Per-node facts; `known` is False when no facts file was given (everything changes)."""

    nodes: Mapping[str, NodeFacts]
    known: bool = True
    source: str = "<none>"
    #: milestones of a procedure that spans commands (see stepwise.plan.progress)
    progress: frozenset[str] = frozenset()
    #: the nodes' OS majors are known (from discover, a run, or the facts file), not defaults
    os_known: bool = False

    def with_progress(self, progress: frozenset[str] | set[str]) -> Facts:
        return Facts(self.nodes, self.known, self.source, frozenset(progress), self.os_known)

    def without_packages(self) -> Facts:
        """The same facts, but every package taken to change (a major upgrade)."""
        return Facts(self.nodes, False, self.source, self.progress, self.os_known)

    def of(self, node: str) -> NodeFacts:
        return self.nodes.get(node, NodeFacts())

    def changes_os(self, node: str) -> bool:
        """The node goes to another OS major in this procedure: its OS is known and a target
        above it was declared (a major upgrade combined with the OS upgrade, the seed's
        procedure). An undeclared target (the next major by default) says nothing here."""
        nf = self.nodes.get(node)
        return (
            self.os_known
            and nf is not None
            and nf.os_target_declared
            and nf.os_target > nf.os_major
        )

    def changes(self, node: str, packages: tuple[str, ...] | list[str]) -> bool:
        """True when any of `packages` has a newer version available on `node`."""
        if not self.known:
            return True
        facts = self.nodes.get(node)
        if facts is None:
            return True  # a node we know nothing about: assume it changes (safe side)
        return any(facts.packages[p].changes for p in packages if p in facts.packages)

    def config_changes(self, node: str, service: str) -> bool:
        """True when `service`'s rendered configuration on `node` differs from the one it runs
        with (known facts only: without facts every service restarts anyway)."""
        if not self.known or node not in self.nodes:
            return False
        fact = self.nodes[node].config.get(service)
        return fact is not None and fact.changes

    def image(self, node: str, service: str) -> ImageFact | None:
        """The image facts of a container service on `node`, if known."""
        facts = self.nodes.get(node)
        return facts.images.get(service) if facts is not None else None

    def image_changes(self, node: str, service: str) -> bool:
        """True when the container of `service` on `node` must switch to another image (no
        facts, or no image facts for it: taken to change, as packages are)."""
        if not self.known:
            return True
        fact = self.image(node, service)
        return fact is None or fact.changes

    def changed_packages(self, node: str) -> tuple[str, ...]:
        if not self.known or node not in self.nodes:
            return ()
        return tuple(sorted(p for p, f in self.nodes[node].packages.items() if f.changes))


NO_FACTS = Facts(MappingProxyType({}), known=False)


#: the shape expected where a facts file has another one (by the last part of the field path)
SHAPES = {
    "nodes": "a mapping of node name to that node's facts, e.g. nodes: {compute-0: "
    "{os: {major: 8}, packages: {openstack-nova-compute: {installed: 1.0.0, available: 1.1.0}}}}",
    "defaults": "the facts every node shares: {os: {major: 8, target: 9}, packages: {PACKAGE: "
    "{installed: VERSION, available: VERSION}}}",
    "packages": "a mapping of package name to {installed: VERSION, available: VERSION}",
    "package": "{installed: VERSION, available: VERSION} (either may be left out)",
    "config": "a mapping of service name to {current: HASH, rendered: HASH}",
    "service_config": "{current: HASH, rendered: HASH} (the hash of the configuration the "
    "service runs with, and of the one the deployment rendered for it)",
    "images": "a mapping of service name to {running: DIGEST, target: DIGEST, ref: REF}",
    "image": "{running: sha256:..., target: sha256:..., ref: REGISTRY/NAMESPACE/NAME:TAG} (the "
    "digest the container runs, the registry's digest of the reference this workflow goes to)",
    "os": "{major: 8, target: 9} (the OS major version installed, "
    "and the one an OS upgrade goes to)",
    "progress": "a list of milestones stepwise recorded (leave it out in a hand-written file)",
}


def _shape_of(field: str | None) -> str | None:
    parts = (field or "").split(".")
    if len(parts) >= 2 and parts[-2] == "packages":
        return SHAPES["package"]
    if len(parts) >= 2 and parts[-2] == "config":
        return SHAPES["service_config"]
    if len(parts) >= 2 and parts[-2] == "images":
        return SHAPES["image"]
    return SHAPES.get(parts[-1]) or (
        SHAPES["defaults"] if len(parts) == 2 and parts[0] == "nodes" else None
    )


def _with_shape(problem: Problem) -> Problem:
    """The problem told with the shape expected where it is (not pydantic's type names)."""
    shape = _shape_of(problem.field)
    if shape is None or "unknown key" in problem.message:
        return problem
    said = "wrong shape" if problem.message.startswith("Input should be") else problem.message
    return replace(
        problem, message=f"{said}: expected {shape}", hint=problem.hint or "see docs/facts.md"
    )


def load_facts(path: Path | str, deployment: Deployment) -> Facts:
    """Load a facts file (YAML or JSON) and check every node it names exists. A wrong shape is
    told with the shape expected there (docs/facts.md)."""
    path = Path(path)
    doc = load_yaml(path)
    data = to_plain(doc)
    if isinstance(data, dict) and "roles" in data and not {"defaults", "nodes"} & set(data):
        raise InputError(
            Problem(
                "this is a deployment file, not facts",
                file=str(path),
                field="--facts",
                hint="give it with -d; facts come from `stepwise discover`, or write them from "
                "`stepwise facts template -d DEPLOYMENT -o facts.yaml` (docs/facts.md)",
            )
        )
    try:
        spec = validate(FactsSpec, data, doc, str(path))
    except InputError as exc:
        raise InputError([_with_shape(p) for p in exc.problems]) from None
    return build_facts(spec, deployment, doc, str(path))


def build_facts(
    spec: FactsSpec, deployment: Deployment, doc=None, fname: str = "<memory>"
) -> Facts:
    problems = []
    for name in spec.nodes:
        if name not in deployment.node_by_name:
            problems.append(
                Problem(
                    f"unknown node '{name}'",
                    file=fname,
                    line=line_of(doc, ["nodes", name]),
                    field=f"nodes.{name}",
                    hint="facts may only name nodes of the deployment",
                )
            )
    problems.extend(_config_problems(spec, deployment, doc, fname))
    if problems:
        raise InputError(problems)
    default_pk = {
        k: PackageFact(v.installed, v.available)
        for k, v in (spec.defaults.packages.items() if spec.defaults else [])
    }
    default_os = spec.defaults.os if spec.defaults and spec.defaults.os else None
    out: dict[str, NodeFacts] = {}
    for node in deployment.nodes:
        nf = spec.nodes.get(node.name)
        pk = dict(default_pk)
        os_spec = default_os
        config = _config_of(spec, deployment, node.name)
        images = _images_of(spec, node.name)
        if nf is not None:
            pk.update({k: PackageFact(v.installed, v.available) for k, v in nf.packages.items()})
            if nf.os is not None:
                os_spec = nf.os
        major = os_spec.major if os_spec and os_spec.major is not None else DEFAULT_OS_MAJOR
        declared = (
            os_spec.target
            if os_spec and os_spec.target is not None
            else (default_os.target if default_os and default_os.target else None)
        )
        target = declared if declared is not None else major + 1
        out[node.name] = NodeFacts(
            MappingProxyType(pk), major, target, config, images, declared is not None
        )
    os_known = bool(default_os and default_os.major is not None) or any(
        nf.os is not None and nf.os.major is not None for nf in spec.nodes.values()
    )
    return Facts(MappingProxyType(out), True, fname, frozenset(spec.progress), os_known=os_known)


def _config_problems(spec: FactsSpec, deployment: Deployment, doc, fname: str) -> list[Problem]:
    """A configuration hash may name only a service placed on its node (in `defaults`: one
    placed somewhere)."""
    problems = []
    placed = set(deployment.instances)
    where: list[tuple[list, str, set[str]]] = []
    if spec.defaults is not None:
        where.append((["defaults"], "a service of the deployment", placed))
    for name in spec.nodes:
        if name in deployment.node_by_name:
            on = set(deployment.services_on(deployment.node_by_name[name]))
            where.append((["nodes", name], f"a service that runs on {name}", on))
    for path, what, allowed in where:
        nf = spec.defaults if path == ["defaults"] else spec.nodes[path[1]]
        for key, example in (
            ("config", "{nova_api: {current: HASH, rendered: HASH}}"),
            ("images", "{nova_api: {running: DIGEST, target: DIGEST, ref: REF}}"),
        ):
            for service in getattr(nf, key) if nf is not None else ():
                if service not in allowed:
                    problems.append(
                        Problem(
                            f"{key} names '{service}', which is not {what}",
                            file=fname,
                            line=line_of(doc, [*path, key, service]),
                            field=".".join([*path, key, service]),
                            hint=f"{key} is keyed by the service (catalog) name, e.g. "
                            f"{key}: {example}",
                        )
                    )
    return problems


def _images_of(spec: FactsSpec, node: str) -> Mapping[str, ImageFact]:
    """The image facts of `node`: the defaults', then its own."""
    merged = {
        s: ImageFact(i.running, i.target, i.ref)
        for s, i in (spec.defaults.images.items() if spec.defaults else ())
    }
    nf = spec.nodes.get(node)
    if nf is not None:
        merged.update({s: ImageFact(i.running, i.target, i.ref) for s, i in nf.images.items()})
    return MappingProxyType(merged)


def _config_of(spec: FactsSpec, deployment: Deployment, node: str) -> Mapping[str, ConfigFact]:
    """The configuration hashes of `node`: the defaults' for the services it runs, then its own."""
    on = set(deployment.services_on(deployment.node_by_name[node]))
    merged = {
        s: ConfigFact(c.current, c.rendered)
        for s, c in (spec.defaults.config.items() if spec.defaults else ())
        if s in on
    }
    nf = spec.nodes.get(node)
    if nf is not None:
        merged.update({s: ConfigFact(c.current, c.rendered) for s, c in nf.config.items()})
    return MappingProxyType(merged)


def facts_to_dict(facts: Facts) -> dict | None:
    """Facts in the facts-file shape (FactsSpec), e.g. to record what a run was planned from;
    None when nothing was known."""
    # a major upgrade's facts know no package but may know its containers' target images:
    # those are recorded (a continued run switches to the same digests)
    if not facts.known and not facts.os_known and not any(n.images for n in facts.nodes.values()):
        return (
            {"nodes": {}, "progress": sorted(facts.progress), "known": False}
            if facts.progress
            else None
        )
    nodes = {}
    for name, nf in facts.nodes.items():
        entry: dict = {
            "packages": {
                p: {
                    k: v
                    for k, v in (("installed", f.installed), ("available", f.available))
                    if v is not None
                }
                for p, f in nf.packages.items()
            }
        }
        if nf.config:
            entry["config"] = {
                s: {k: v for k, v in (("current", c.current), ("rendered", c.rendered)) if v}
                for s, c in nf.config.items()
            }
        if nf.images:
            entry["images"] = {
                s: {
                    k: v
                    for k, v in (("running", i.running), ("target", i.target), ("ref", i.ref))
                    if v
                }
                for s, i in nf.images.items()
            }
        if facts.os_known:
            # an undeclared target stays undeclared when read back (see NodeFacts)
            entry["os"] = {"major": nf.os_major} | (
                {"target": nf.os_target} if nf.os_target_declared else {}
            )
        nodes[name] = entry
    return {"nodes": nodes, "progress": sorted(facts.progress), "known": facts.known}


def facts_from_dict(data: dict, deployment: Deployment, source: str = "<recorded>") -> Facts:
    """Facts from the facts-file shape (a recorded snapshot, or what discover stored)."""
    if not isinstance(data, dict):
        raise InputError(
            Problem(
                "the facts are not a mapping",
                file=source,
                hint="the store was changed outside stepwise",
            )
        )
    data = dict(data)
    raw = data.pop("progress", None) or []
    if not isinstance(raw, list) or not all(isinstance(p, str) and len(p) <= 300 for p in raw):
        raise InputError(
            Problem("progress is not a list of milestones", file=source, field="progress")
        )
    progress = frozenset(raw)
    known = data.pop("known", True)
    if not known and not data.get("nodes"):
        return Facts(MappingProxyType({}), False, source, progress)
    spec = validate(FactsSpec, data, None, source)
    facts = build_facts(spec, deployment, None, source).with_progress(progress)
    return facts if known else facts.without_packages()
