"""TripleO's containers-prepare-parameter.yaml -> a deployment's `containers:` block.

`parameter_defaults.ContainerImagePrepare` is a list of strategies; each one's `set:` names
images (`namespace`, `name_prefix`, `name_suffix`, `tag`) and its `push_destination` the
registry the nodes pull from: a `host:port` (the images are pushed there under the
namespace's path), `true` (the undercloud's registry, which the file names in
`DockerInsecureRegistryAddress`) or absent/false (the nodes pull from the namespace's own
registry). An entry's `includes`/`excludes` pick the images it prepares; the last entry that
takes an image is its source (TripleO merges the entries' parameters in order). The first
entry is the block; a service another entry prepares (a hotfix tag) gets its own source
under `images:`. Nothing else of the file is read: its registry credentials are never looked
at.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.checks import validate
from stepwise.model.choices import DeployStyle
from stepwise.model.container_specs import ContainersSpec
from stepwise.model.containers import DEFAULT_PREFIX
from stepwise.model.yamlsrc import field_name, line_of, load_yaml, to_plain

HINT = (
    "give TripleO's containers-prepare-parameter.yaml: parameter_defaults: "
    "{ContainerImagePrepare: [{push_destination: HOST:PORT, set: {namespace: ..., tag: ...}}]}"
)


def _registry_part(first: str) -> bool:
    """Whether a namespace's first path component is a registry (as container tools decide:
    it has a '.' or a ':' or is localhost)."""
    return "." in first or ":" in first or first == "localhost"


def load_containers_prepare(
    path: Path | str,
    *,
    undercloud_registry: str | None = None,
    images: Mapping[str, str] | None = None,
    doc: Any = None,
) -> dict[str, Any]:
    """The `containers:` block the file describes (checked again by the deployment's schema).
    `undercloud_registry` is where `push_destination: true` pushes (TripleO's undercloud
    registry); without it the file's DockerInsecureRegistryAddress is taken. `images`: the
    deployment's containerized services and their image names (no prefix or suffix): each is
    prepared by the last entry whose `includes` and `excludes` take it, as TripleO merges the
    entries' parameters in order; one another entry than the first prepares gets its own
    source in the block's `images:`. Raises InputError naming the file, line and field of
    what is missing or wrong. `doc`: the file as `load_yaml` read it, when the caller has it (a
    file read twice may have changed in between, and a pipe gives nothing the second time)."""
    fname = str(path)
    if doc is None:
        doc = load_yaml(Path(path))
    data = to_plain(doc)

    def problem(message: str, trail: list[Any], field: str) -> InputError:
        return InputError(
            Problem(message, file=fname, line=line_of(doc, trail) or 1, field=field, hint=HINT)
        )

    defaults = data.get("parameter_defaults") if isinstance(data, dict) else None
    prepare = defaults.get("ContainerImagePrepare") if isinstance(defaults, dict) else None
    trail: list[Any] = ["parameter_defaults", "ContainerImagePrepare"]
    if not isinstance(prepare, list) or not prepare or not isinstance(prepare[0], dict):
        raise problem(
            "no ContainerImagePrepare strategy (a list of mappings)",
            trail if isinstance(defaults, dict) else [],
            "parameter_defaults.ContainerImagePrepare",
        )
    entries = [_entry(data, prepare, i, problem, undercloud_registry) for i in range(len(prepare))]
    block = dict(entries[0].source)
    own: dict[str, Any] = {}
    unprepared = []
    for service, name in sorted((images or {}).items()):
        takers = [e for e in entries if e.takes(name)]
        if not takers:
            unprepared.append(f"{service} ({name})")
        elif takers[-1] is not entries[0]:
            own[service] = dict(takers[-1].source)
    if unprepared:
        raise problem(
            "no ContainerImagePrepare entry prepares the image of "
            + ", ".join(unprepared[:8])
            + (", ..." if len(unprepared) > 8 else "")
            + " (every entry's includes or excludes leave it out): TripleO would deploy "
            "those services with no image",
            trail,
            "parameter_defaults.ContainerImagePrepare",
        )
    if own:
        block["images"] = own
    return block


class _Entry:
    """One ContainerImagePrepare entry: the image source its `set:` names, and which images
    it takes (`includes`/`excludes`: regular expressions searched in the image's reference,
    as tripleo-common's image prepare filters them)."""

    def __init__(
        self, source: dict[str, Any], written: str, includes: list[Any], excludes: list[Any]
    ):
        self.source, self.written = source, written
        self.includes, self.excludes = includes, excludes

    def reference(self, name: str) -> str:
        """The image's reference as TripleO names it when it filters: the namespace as the
        file writes it, prefix, name, suffix and tag."""
        src = self.source
        prefix = src.get("name_prefix")
        prefix = DEFAULT_PREFIX[DeployStyle.TRIPLEO] if prefix is None else prefix
        return f"{self.written}/{prefix}{name}{src.get('name_suffix', '')}:{src['tag']}"

    def takes(self, name: str) -> bool:
        ref = self.reference(name)
        if self.includes and not any(p.search(ref) for p in self.includes):
            return False
        return not any(p.search(ref) for p in self.excludes)


def _entry(data: dict, prepare: list[Any], i: int, problem: Any, undercloud: str | None) -> _Entry:
    """Entry `i` read and checked: its source as a `containers:` block, its filters."""
    trail: list[Any] = ["parameter_defaults", "ContainerImagePrepare", i]
    at = f"parameter_defaults.ContainerImagePrepare[{i}]"
    strategy = prepare[i]
    if not isinstance(strategy, dict):
        raise problem("an entry is not a mapping", trail, at)
    settings = strategy.get("set")
    if not isinstance(settings, dict):
        raise problem("the strategy has no 'set:' mapping", trail, f"{at}.set")
    for key in ("namespace", "tag"):
        if not isinstance(settings.get(key), str) or not settings[key].strip():
            where = [*trail, "set", key] if key in settings else [*trail, "set"]
            raise problem(f"set.{key} is missing or not a string", where, f"{at}.set.{key}")
    first, _, rest = settings["namespace"].strip().partition("/")
    source, namespace = (
        (first, rest)
        if rest and _registry_part(first)
        else ("", first + "/" + rest if rest else first)
    )
    registry, registry_trail = _registry(data, strategy, source, problem, i, undercloud)
    block: dict[str, Any] = {"registry": registry, "namespace": namespace, "tag": settings["tag"]}
    for key in ("name_prefix", "name_suffix"):
        if key in settings:
            value = settings[key]
            if value is not None and not isinstance(value, str):
                raise problem(f"set.{key} is not a string", [*trail, "set", key], f"{at}.set.{key}")
            block[key] = value or ""
    # checked here, against this file's own lines and fields: the deployment's check would
    # name the roles file, where the operator finds no tag or registry to fix
    where = {key: [*trail, "set", key] for key in block} | {"registry": registry_trail}
    _check_block(block, where, problem)
    includes, excludes = (
        _patterns(strategy, k, trail, at, problem) for k in ("includes", "excludes")
    )
    return _Entry(block, settings["namespace"].strip(), includes, excludes)


def _patterns(strategy: dict, key: str, trail: list[Any], at: str, problem: Any) -> list[Any]:
    """An entry's `includes` or `excludes`: a list of regular expressions."""
    value = strategy.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise problem(f"{key} is not a list of image name patterns", [*trail, key], f"{at}.{key}")
    out = []
    for j, text in enumerate(value):
        try:
            out.append(re.compile(text))
        except re.error as exc:
            raise problem(
                f"{key}[{j}] {text!r} is not a regular expression ({exc})",
                [*trail, key, j],
                f"{at}.{key}[{j}]",
            ) from None
    return out


def _check_block(block: dict[str, Any], where: dict[str, list[Any]], problem: Any) -> None:
    """`block` as the deployment's `containers:` schema checks it; a fault is raised against
    the field of this file the value came from (`where`: the block's key -> its trail)."""
    try:
        validate(ContainersSpec, block, None, "")
    except InputError as exc:
        first = exc.problems[0]
        key = (first.field or "").split(".")[0].split("[")[0]
        trail = where.get(key, [])
        raise problem(
            f"{first.message} (read as the deployment's containers.{key})",
            trail,
            field_name(trail) or "parameter_defaults.ContainerImagePrepare[0]",
        ) from None


def _registry(
    data: dict,
    strategy: dict,
    source: str,
    problem: Any,
    i: int,
    undercloud: str | None = None,
) -> tuple[str, list[Any]]:
    """The registry the nodes pull from (entry `i`'s push destination, else the namespace's
    own), with the trail of the file's field it came from."""
    at = f"parameter_defaults.ContainerImagePrepare[{i}]"
    trail: list[Any] = ["parameter_defaults", "ContainerImagePrepare", i, "push_destination"]
    push = strategy.get("push_destination")
    if isinstance(push, str) and push.strip():
        return push.strip(), trail
    if push is True and undercloud:
        # what TripleO's image uploader resolves `true` to: the undercloud's registry
        return undercloud.strip(), trail
    if push is True:
        insecure = data["parameter_defaults"].get("DockerInsecureRegistryAddress")
        if isinstance(insecure, list) and insecure and isinstance(insecure[0], str):
            return insecure[0], ["parameter_defaults", "DockerInsecureRegistryAddress", 0]
        raise problem(
            "push_destination: true pushes to the undercloud's registry, which this file does "
            "not name (no DockerInsecureRegistryAddress): give it with --undercloud-registry "
            "HOST:PORT (the undercloud's ctlplane address, port 8787)",
            trail,
            f"{at}.push_destination",
        )
    # `is`, not `in`: 0 == False. TripleO tests it for truth (kolla_builder's `if
    # push_destination:`), so 0 and '' push nowhere there while 1 pushes to a registry named
    # '1': neither is a registry or a boolean, and the file is refused rather than guessed at
    if push is not None and push is not False:
        raise problem(
            f"push_destination {push!r} is not HOST:PORT, true or false",
            trail,
            f"{at}.push_destination",
        )
    if not source:
        raise problem(
            "the nodes pull from the namespace's registry, and set.namespace names none",
            ["parameter_defaults", "ContainerImagePrepare", i, "set", "namespace"],
            f"{at}.set.namespace",
        )
    return source, ["parameter_defaults", "ContainerImagePrepare", i, "set", "namespace"]
