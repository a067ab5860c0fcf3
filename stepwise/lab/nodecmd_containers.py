"""Node commands of container-style nodes: `podman` (pull, image inspect/exists, images,
create, rm, inspect, ps) and `skopeo inspect`, as docs/node-commands.md lists them.

Transfers are the real skopeo's against the lab's real registry; the node's store is
lab/podman.py. Exit codes as podman's: 125 for its errors, 1 for `image exists` of an absent
image.
"""

from __future__ import annotations

import json
import subprocess

from stepwise.lab import containers as lab_containers
from stepwise.lab import podman as lab_podman
from stepwise.lab.nodecmd_base import command, err, out, unit_state
from stepwise.lab.nodes import Lab

ENGINE_ERROR = 125


def _words(args: list[str]) -> list[str]:
    """The arguments without flags (`--tls-verify=false`, `-a`, `-f`, `--format json`)."""
    words, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("--format", "--name"):
            skip = True
        elif not a.startswith("-"):
            words.append(a)
    return words


def _option(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


@command("podman")
def podman(lab: Lab, node: str, args: list[str]) -> int:
    """podman's subcommands the catalog's container tasks use."""
    words = _words(args)
    if not words:
        return err("Error: missing command 'podman COMMAND'")
    verb, rest = words[0], words[1:]
    try:
        if verb == "pull" and rest:
            out(lab_podman.pull(lab, node, rest[0]))
            return 0
        if verb == "image" and rest:
            return _image(lab, node, rest[0], rest[1:])
        if verb == "images":
            return _images(lab, node)
        if verb == "create":
            name = _option(args, "--name")
            if not name or not rest:
                return _fail("Error: podman create needs --name NAME IMAGE")
            out(lab_podman.create(lab, node, name, rest[0]))
            return 0
        if verb == "rm" and rest:
            return _rm(lab, node, rest, force="-f" in args or "--force" in args)
        if verb == "inspect" and rest:
            return _inspect(lab, node, rest[0])
        if verb == "ps":
            out(json.dumps(_ps(lab, node, all_="-a" in args or "--all" in args), indent=4))
            return 0
    except lab_podman.PodmanError as exc:
        return _fail(str(exc))
    return _fail(f"Error: unrecognized command `podman {' '.join(words[:2])}`")


def _fail(msg: str) -> int:
    err(msg)
    return ENGINE_ERROR


def _image(lab: Lab, node: str, verb: str, refs: list[str]) -> int:
    if verb == "exists":
        return 0 if refs and lab_podman.find_image(lab, node, refs[0]) else 1
    if verb == "inspect" and refs:
        found = [lab_podman.find_image(lab, node, r) for r in refs]
        if any(f is None for f in found):
            missing = next(r for r, f in zip(refs, found, strict=True) if f is None)
            out("[]")
            return _fail(f"Error: {missing}: image not known")
        out(json.dumps([lab_podman.inspect_image(i, e) for i, e in found if i], indent=4))  # type: ignore[misc]
        return 0
    return _fail(f"Error: unrecognized command `podman image {verb}`")


def _images(lab: Lab, node: str) -> int:
    out(f"{'REPOSITORY':<60} {'TAG':<10} IMAGE ID")
    for image_id, entry in sorted(lab_podman.images_of(lab, node).items()):
        for tag in entry["repo_tags"] or ["<none>:<none>"]:
            repo, _, t = tag.rpartition(":")
            out(f"{repo:<60} {t:<10} {image_id[:12]}")
    return 0


def _rm(lab: Lab, node: str, names: list[str], force: bool) -> int:
    rc = 0
    for name in names:
        running = unit_state(lab, node, name) == "active"
        if running and not force:
            rc = _fail(
                f"Error: cannot remove container {name} as it is running - "
                "running or paused containers cannot be removed without force"
            )
            continue
        if running:
            lab.call("stop", node=node, unit=name)  # rm -f kills the container
        if lab_podman.remove(lab, node, name):
            out(name)
        elif not force:
            rc = _fail(f"Error: no container with ID or name {name!r} found: no such container")
    return rc


def _state(lab: Lab, node: str, name: str) -> str:
    return "running" if unit_state(lab, node, name) == "active" else "exited"


def _inspect(lab: Lab, node: str, name: str) -> int:
    c = lab_podman.containers_of(lab, node).get(name)
    if c is None:
        out("[]")
        return _fail(f"Error: no such object: {name!r}")
    status = _state(lab, node, name)
    out(
        json.dumps(
            [
                {
                    "Id": c["id"],
                    "Name": name,
                    "Image": c["image"],
                    "ImageName": c["image_name"],
                    "ImageDigest": c["digest"],
                    "State": {"Status": status, "Running": status == "running"},
                    # the image's labels, as podman shows them (TripleO's images carry
                    # `version`): what a pin reads the running release from
                    "Config": {
                        "Labels": {"version": lab_podman.container_version(lab, node, name) or ""}
                    },
                }
            ],
            indent=4,
        )
    )
    return 0


def _ps(lab: Lab, node: str, all_: bool) -> list[dict]:
    rows = []
    for name, c in sorted(lab_podman.containers_of(lab, node).items()):
        state = _state(lab, node, name)
        if state == "running" or all_:
            rows.append(
                {"Id": c["id"], "Names": [name], "Image": c["image_name"],
                 "ImageID": c["image"], "State": state}
            )  # fmt: skip
    return rows


@command("skopeo")
def skopeo(lab: Lab, node: str, args: list[str]) -> int:
    """The real `skopeo inspect` of a reference, through the node's registry mirror."""
    words = [a for a in args if not a.startswith("-")]
    if len(words) != 2 or words[0] != "inspect" or not words[1].startswith("docker://"):
        return err("usage: skopeo inspect [--tls-verify=false] docker://REF")
    if not lab.spec.containers:
        return err("skopeo: this lab has no container registry")
    source = lab_containers.to_lab_registry(lab.spec, words[1].removeprefix("docker://"))
    res = subprocess.run(
        ["/usr/bin/skopeo", "inspect", "--tls-verify=false", f"docker://{source}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        return err(res.stderr.strip() or "skopeo inspect failed")
    doc = json.loads(res.stdout)
    # the name the node asked for (its registries.conf mirror is the lab's address)
    doc["Name"] = lab_containers.from_lab_registry(lab.spec, doc.get("Name", ""))
    out(json.dumps(doc, indent=4))
    return 0
