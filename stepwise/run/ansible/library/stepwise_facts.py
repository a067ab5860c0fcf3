#!/usr/bin/python
"""Ansible module shipped with stepwise: installed and available versions of packages, the
OS major version of a node and the hashes of its services' configuration, in the shape of
stepwise's facts file (one node's entry)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: stepwise_facts
short_description: Report installed/available package versions and the OS major version
options:
  packages: {type: list, elements: str, default: []}
  command:
    type: str
    description: "a command printing the node's facts as JSON; package names are appended"
  os_release: {type: str, default: /etc/os-release}
  required: {type: bool, default: true, description: "fail when no package tool is found"}
  config:
    type: dict
    default: {}
    description: "service -> [the file it runs with, the file the deployment rendered for it]"
  root: {type: str, default: "", description: "the node's root ('' is /)"}
  images:
    type: dict
    default: {}
    description: "service -> {container: NAME, ref: REF}: the digest NAME runs (podman inspect)
      and the registry's digest of REF (skopeo inspect docker://REF)"
  tls_verify: {type: bool, default: true, description: "skopeo's --tls-verify"}
"""

import json
import re
import shlex

from ansible.module_utils.basic import AnsibleModule


def _lines(module, cmd):
    rc, out, _err = module.run_command(cmd, use_unsafe_shell=isinstance(cmd, str))
    return rc, [line.strip() for line in out.splitlines() if line.strip()]


def _os_major(path):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("VERSION_ID="):
            m = re.match(r"(\d+)", line.split("=", 1)[1].strip().strip('"'))
            if m:
                return int(m.group(1))
    return None


def _rpm(module, packages):
    out = {}
    for p in packages:
        rc, lines = _lines(module, ["rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}\n", p])
        installed = lines[-1] if rc == 0 and lines else None
        rc, lines = _lines(
            module,
            ["dnf", "-q", "repoquery", "--latest-limit", "1", "--qf", "%{version}-%{release}", p],
        )
        available = lines[-1] if rc == 0 and lines else None
        out[p] = {"installed": installed, "available": available}
    return out


def _dnf(module, packages):
    """`dnf list installed` and `dnf check-update` (also what the lab's nodes understand)."""
    out = {p: {"installed": None, "available": None} for p in packages}
    if not packages:
        return out
    _rc, lines = _lines(module, ["dnf", "-q", "list", "installed"] + list(packages))
    for line in lines:
        parts = line.split()
        if len(parts) >= 2:
            name = parts[0]
            base = name.rsplit(".", 1)[0] if name not in out else name
            if base in out:
                out[base]["installed"] = parts[1]
    _rc, lines = _lines(module, ["dnf", "-q", "check-update"] + list(packages))
    for line in lines:
        parts = line.split()
        if len(parts) >= 2:
            name = parts[0]
            base = name.rsplit(".", 1)[0] if name not in out else name
            if base in out:
                out[base]["available"] = parts[1]
    for _p, v in out.items():
        # check-update lists only newer versions: otherwise what is installed is the latest
        if v["available"] is None and v["installed"] is not None:
            v["available"] = v["installed"]
    return out


def _dpkg(module, packages):
    out = {}
    for p in packages:
        rc, lines = _lines(module, ["dpkg-query", "-W", "-f", "${Version}\n", p])
        installed = lines[-1] if rc == 0 and lines else None
        rc, lines = _lines(module, ["apt-cache", "policy", p])
        available = None
        for line in lines:
            if line.startswith("Candidate:"):
                v = line.split(":", 1)[1].strip()
                available = None if v == "(none)" else v
        out[p] = {"installed": installed, "available": available}
    return out


def _config(module, config, root):
    """service -> {current, rendered}: the sha256 of the file the service runs with and of
    the one the deployment rendered for it (a missing file has no hash)."""
    files = sorted({root + f for pair in config.values() for f in pair})
    if not files:
        return {}
    # sha256sum prints every file it can read and exits 1 when one is missing: both are fine
    _rc, lines = _lines(module, ["sha256sum", "--"] + files)
    sums = {}
    for line in lines:
        digest, _, name = line.partition("  ")
        if len(digest) == 64 and name:
            sums[name] = digest
    out = {}
    for service, (current, rendered) in config.items():
        fact = {
            k: sums[root + f]
            for k, f in (("current", current), ("rendered", rendered))
            if root + f in sums
        }
        if fact:
            out[service] = fact
    return out


def _json(module, argv):
    """What a command printed as JSON, or None when it failed or printed something else."""
    rc, out, _err = module.run_command(argv)
    if rc != 0:
        return None
    try:
        return json.loads(out)
    except ValueError:
        return None


def _images(module, images, tls_verify):
    """service -> {running, target, ref}: the digest of the image its container runs and the
    registry's digest of the reference it goes to (an unknown one is left out: it changes)."""
    out = {}
    for service, want in images.items():
        fact = {"ref": want["ref"]}
        running = _json(module, ["podman", "inspect", want["container"]])
        if isinstance(running, list) and running and isinstance(running[0], dict):
            digest = running[0].get("ImageDigest")
            if digest:
                fact["running"] = digest
        verify = "--tls-verify=" + ("true" if tls_verify else "false")
        target = _json(module, ["skopeo", "inspect", verify, "docker://" + want["ref"]])
        if isinstance(target, dict) and target.get("Digest"):
            fact["target"] = target["Digest"]
        out[service] = fact
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "default": []},
            "command": {"type": "str"},
            "os_release": {"type": "str", "default": "/etc/os-release"},
            "required": {"type": "bool", "default": True},
            "config": {"type": "dict", "default": {}},
            "root": {"type": "str", "default": ""},
            "images": {"type": "dict", "default": {}},
            "tls_verify": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    packages = module.params["packages"]
    if module.params.get("command"):
        cmd = module.params["command"] + " " + " ".join(shlex.quote(p) for p in packages)
        rc, out, err = module.run_command(cmd, use_unsafe_shell=True)
        if rc != 0:
            module.fail_json(msg=f"discover command failed (rc={rc}): {err.strip() or out.strip()}")
        try:
            facts = json.loads(out)
        except ValueError as exc:
            module.fail_json(msg=f"discover command printed no JSON: {exc}")
        module.exit_json(changed=False, stepwise_facts=facts)
    if module.get_bin_path("dnf"):
        pk = _dnf(module, packages)
    elif module.get_bin_path("rpm"):
        pk = _rpm(module, packages)
    elif module.get_bin_path("dpkg-query"):
        pk = _dpkg(module, packages)
    elif module.params["required"]:
        module.fail_json(
            msg="no dnf, rpm or dpkg-query on this node: set stepwise_discover_command"
        )
    else:
        module.exit_json(changed=False, stepwise_facts={})
    facts = {
        "packages": {k: {kk: vv for kk, vv in v.items() if vv is not None} for k, v in pk.items()}
    }
    major = _os_major(module.params["os_release"])
    if major is not None:
        facts["os"] = {"major": major}
    config = _config(module, module.params["config"] or {}, module.params["root"] or "")
    if config:
        facts["config"] = config
    images = _images(module, module.params["images"] or {}, module.params["tls_verify"])
    if images:
        facts["images"] = images
    module.exit_json(changed=False, stepwise_facts=facts)


if __name__ == "__main__":
    main()
