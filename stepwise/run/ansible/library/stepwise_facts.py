#!/usr/bin/python
"""Ansible module shipped with stepwise: installed and available versions of packages, the
OS major version of a node and the hashes of its services' configuration, in the shape of
stepwise's facts file (one node's entry).

With `update`, the module first runs a packages unit's own update and then reports what the
node runs: the record after a packages unit rides on the update's module run instead of
costing a task of its own, and the packages the update just brought to the newest version are
not asked about again (asking what is available costs a repository metadata load)."""

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
  update:
    type: list
    elements: str
    default: []
    description: "a package update to run first (argv, e.g. dnf -y update PKG...); the
      packages it names are at the newest version their repositories offer afterwards"
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


def _fresh(out, fresh):
    """What was just updated has nothing newer available (the update took the newest)."""
    for p in fresh:
        if p in out and out[p]["installed"] is not None:
            out[p]["available"] = out[p]["installed"]
    return out


def _to_ask(out, packages, fresh):
    """The packages whose available version the repositories must tell: all but those just
    updated (and found installed)."""
    return [p for p in packages if p not in fresh or out[p]["installed"] is None]


def _rpm(module, packages, fresh):
    """One `rpm -q` for what is installed, `dnf repoquery` for what is available."""
    out = {p: {"installed": None, "available": None} for p in packages}
    if not packages:
        return out
    # rpm prints "package X is not installed" (and exits 1) for a missing one: not a NAME line
    _rc, lines = _lines(module, ["rpm", "-q", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\n"] + packages)
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0] in out:
            out[parts[0]]["installed"] = parts[1]
    for p in _to_ask(out, packages, fresh):
        rc, lines = _lines(
            module,
            ["dnf", "-q", "repoquery", "--latest-limit", "1", "--qf", "%{version}-%{release}", p],
        )
        out[p]["available"] = lines[-1] if rc == 0 and lines else None
    return _fresh(out, fresh)


def _dnf(module, packages, fresh):
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
    ask = _to_ask(out, packages, fresh)
    _rc, lines = _lines(module, ["dnf", "-q", "check-update"] + ask) if ask else (0, [])
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


def _dpkg(module, packages, fresh):
    """One `dpkg-query` for what is installed, one `apt-cache policy` for the candidates."""
    out = {p: {"installed": None, "available": None} for p in packages}
    if not packages:
        return out
    # a package dpkg never heard of goes to stderr (exit 1); the others are still printed
    _rc, lines = _lines(
        module, ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev} ${Version}\n"] + packages
    )
    for line in lines:
        parts = line.split()
        # "ii" is installed; "un"/"rc" (removed, config left) have no version to report
        if len(parts) == 3 and parts[0] in out and parts[1].startswith("i"):
            out[parts[0]]["installed"] = parts[2]
    ask = _to_ask(out, packages, fresh)
    _rc, lines = _lines(module, ["apt-cache", "policy"] + ask) if ask else (0, [])
    current = None
    for line in lines:
        if not line.startswith("Installed:") and line.endswith(":") and " " not in line:
            current = line[:-1]
        elif line.startswith("Candidate:") and current in out:
            v = line.split(":", 1)[1].strip()
            out[current]["available"] = None if v == "(none)" else v
    return _fresh(out, fresh)


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


def _update(module):
    """Run the `update` argv (when given): the result's fields of the command module, and the
    packages it named (now at their newest version)."""
    argv = module.params["update"]
    if not argv:
        return {"changed": False}, set()
    if module.check_mode:
        return {"changed": True, "cmd": argv}, set()  # as the command module: not run
    rc, out, err = module.run_command(argv)
    result = {"cmd": argv, "rc": rc, "stdout": out, "stderr": err}
    if rc != 0:
        module.fail_json(msg=f"the update failed (rc={rc})", **result)
    # dnf's word for a transaction that changed nothing
    result["changed"] = "Nothing to do" not in out
    return result, set(argv) & set(module.params["packages"])


def _packages(module, packages, fresh):
    """package -> {installed, available} by the node's package tool, or None without one."""
    if fresh and set(packages) <= fresh and module.get_bin_path("rpm"):
        return _rpm(module, packages, fresh)  # nothing to ask the repositories: rpmdb only
    if module.get_bin_path("dnf"):
        return _dnf(module, packages, fresh)
    if module.get_bin_path("rpm"):
        return _rpm(module, packages, fresh)
    if module.get_bin_path("dpkg-query"):
        return _dpkg(module, packages, fresh)
    return None


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
            "update": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    result, fresh = _update(module)
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
        module.exit_json(stepwise_facts=facts, **result)
    pk = _packages(module, packages, fresh)
    if pk is None and module.params["required"]:
        module.fail_json(
            msg="no dnf, rpm or dpkg-query on this node: set stepwise_discover_command"
        )
    if pk is None:
        module.exit_json(stepwise_facts={}, **result)
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
    module.exit_json(stepwise_facts=facts, **result)


if __name__ == "__main__":
    main()
