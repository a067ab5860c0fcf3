"""TripleO's containers-prepare-parameter.yaml -> a deployment's `containers:` block.

`parameter_defaults.ContainerImagePrepare` is a list of strategies; the first one's `set:`
names the OpenStack images (`namespace`, `name_prefix`, `name_suffix`, `tag`) and its
`push_destination` the registry the nodes pull from: a `host:port` (the images are pushed
there under the namespace's path), `true` (the undercloud's registry, which the file names in
`DockerInsecureRegistryAddress`) or absent/false (the nodes pull from the namespace's own
registry). Nothing else of the file is read: its registry credentials are never looked at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.checks import validate
from stepwise.model.container_specs import ContainersSpec
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
    path: Path | str, *, undercloud_registry: str | None = None
) -> dict[str, Any]:
    """The `containers:` block the file describes (checked again by the deployment's schema).
    `undercloud_registry` is where `push_destination: true` pushes (TripleO's undercloud
    registry); without it the file's DockerInsecureRegistryAddress is taken. Raises
    InputError naming the file, line and field of what is missing or wrong."""
    fname = str(path)
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
    _one_strategy(prepare, trail, problem)
    strategy = prepare[0]
    at = "parameter_defaults.ContainerImagePrepare[0]"
    settings = strategy.get("set")
    if not isinstance(settings, dict):
        raise problem("the strategy has no 'set:' mapping", [*trail, 0], f"{at}.set")
    for key in ("namespace", "tag"):
        if not isinstance(settings.get(key), str) or not settings[key].strip():
            where = [*trail, 0, "set", key] if key in settings else [*trail, 0, "set"]
            raise problem(f"set.{key} is missing or not a string", where, f"{at}.set.{key}")
    first, _, rest = settings["namespace"].strip().partition("/")
    source, namespace = (
        (first, rest)
        if rest and _registry_part(first)
        else ("", first + "/" + rest if rest else first)
    )
    registry, registry_trail = _registry(data, strategy, source, problem, at, undercloud_registry)
    block: dict[str, Any] = {"registry": registry, "namespace": namespace, "tag": settings["tag"]}
    for key in ("name_prefix", "name_suffix"):
        if key in settings:
            value = settings[key]
            if value is not None and not isinstance(value, str):
                raise problem(
                    f"set.{key} is not a string", [*trail, 0, "set", key], f"{at}.set.{key}"
                )
            block[key] = value or ""
    # checked here, against this file's own lines and fields: the deployment's check would
    # name the roles file, where the operator finds no tag or registry to fix
    where = {key: [*trail, 0, "set", key] for key in block} | {"registry": registry_trail}
    _check_block(block, where, problem)
    return block


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


def _one_strategy(prepare: list[Any], trail: list[Any], problem: Any) -> None:
    """Refuses what stepwise cannot plan as TripleO would prepare it: a second entry (its
    `includes` take some images from elsewhere, e.g. a hotfix tag) or `includes`/`excludes`
    on the first. Dropped, its images would be planned from the first entry's tag."""
    for i, entry in enumerate(prepare):
        keys = [k for k in ("includes", "excludes") if isinstance(entry, dict) and k in entry]
        if i == 0 and not keys:
            continue
        what = f"entry {i} ({', '.join(keys) or 'a second strategy'})"
        raise problem(
            f"ContainerImagePrepare {what}: stepwise plans every image from one strategy "
            "(one namespace and tag), so images prepared by another entry or left out by "
            "excludes would be planned wrong",
            [*trail, i, keys[0]] if keys else [*trail, i],
            f"parameter_defaults.ContainerImagePrepare[{i}]" + (f".{keys[0]}" if keys else ""),
        )


def _registry(
    data: dict,
    strategy: dict,
    source: str,
    problem: Any,
    at: str,
    undercloud: str | None = None,
) -> tuple[str, list[Any]]:
    """The registry the nodes pull from: the push destination, else the namespace's own;
    with the trail of the file's field it came from."""
    trail: list[Any] = ["parameter_defaults", "ContainerImagePrepare", 0, "push_destination"]
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
            ["parameter_defaults", "ContainerImagePrepare", 0, "set", "namespace"],
            f"{at}.set.namespace",
        )
    return source, ["parameter_defaults", "ContainerImagePrepare", 0, "set", "namespace"]
