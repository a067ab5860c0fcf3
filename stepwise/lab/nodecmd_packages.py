"""Node commands for packages and repositories: `dnf` (`yum`) and `tripleo-repos`."""

from __future__ import annotations

from stepwise.lab import repos as lab_repos
from stepwise.lab import services
from stepwise.lab.nodecmd_base import command, disk_full, err, faults, job_timeout, out
from stepwise.lab.nodes import Lab, SupervisorDown

#: What a transaction installs: package -> (version, repository).
Changes = dict[str, tuple[str, str]]


@command("dnf", "yum")
def dnf(lab: Lab, node: str, args: list[str]) -> int:
    """dnf as Ansible's tasks use it: list, check-update (100 with updates), install, update
    and downgrade (only with -y: there is no terminal to confirm on), --downloadonly."""
    flags = {a for a in args if a.startswith("-")}
    words = [a for a in args if not a.startswith("-")]
    if not words:
        return err(
            "usage: dnf [-y] install|update|downgrade|list installed|check-update|repolist [PKG...]"
        )
    verb, names = words[0], words[1:]
    repos = lab.spec.repos
    enabled = services.enabled_repos(lab, node)
    pkgs = services.installed(lab, node)
    if verb == "list":
        return _list_installed(pkgs, names)
    if verb == "check-update":
        return _check_update(repos, enabled, pkgs, names)
    if verb == "repolist":
        return _repolist(lab, node, enabled)
    if verb not in ("install", "update", "upgrade", "downgrade"):
        return err(f"No such command: {verb}")
    if "-y" not in flags and "--assumeyes" not in flags:
        return err("Operation aborted: run with -y (no terminal to confirm on a lab node)")
    if verb == "downgrade":
        changes, problem = _resolve_downgrade(repos, enabled, pkgs, names)
    else:
        changes, problem = _resolve(repos, enabled, pkgs, verb, names)
    if problem is not None:
        return err(problem)
    if "--downloadonly" in flags and faults(lab, node).get("repos_unreachable") and enabled:
        return err(_unreachable(enabled[0]))
    if not changes:
        out("Dependencies resolved.\nNothing to do.\nComplete!")
        return 0
    if disk_full(lab, node):
        return err(
            "Error: Transaction test error:\n"
            "  installing package needs more space on the / filesystem "
            "[Errno 28] No space left on device"
        )
    for p, (v, r) in sorted(changes.items()):
        out(f"{_action(pkgs.get(p), v)}: {p} {v} {r}")
    if "--downloadonly" in flags:
        _cache(lab, node, changes)
        out("The downloaded packages were saved in cache.\nComplete!")
        return 0
    _install(lab, node, changes)
    problem = _run_scriptlets(lab, node, changes)
    if problem is not None:
        return err(problem)
    if any(p in changes for p in lab.spec.reboot_packages):
        out("A reboot is required to run the new kernel.")
    out("Complete!")
    return 0


def _list_installed(pkgs: dict, names: list[str]) -> int:
    """`dnf list [installed] [PKG...]`: every named package must be installed."""
    names = names[1:] if names[:1] == ["installed"] else names
    for p in sorted(names or pkgs):
        if p in pkgs:
            out(f"{p} {pkgs[p]['version']} @{pkgs[p]['repo']}")
        elif names:
            return err(f"Error: No matching Packages to list ({p})")
    return 0


def _check_update(repos: dict, enabled: list[str], pkgs: dict, names: list[str]) -> int:
    """`dnf check-update [PKG...]`: the newer versions the enabled repositories have."""
    found = 0
    for p in sorted(names or pkgs):
        if p in pkgs:
            best = lab_repos.latest(repos, enabled, p)
            if best and lab_repos.vkey(best[0]) > lab_repos.vkey(pkgs[p]["version"]):
                out(f"{p} {best[0]} {best[1]}")
                found += 1
    return 100 if found else 0


def _unreachable(repo: str) -> str:
    """dnf's error for a repository whose metadata cannot be downloaded."""
    return (
        f"Error: Failed to download metadata for repo '{repo}': Cannot download "
        "repomd.xml: Curl error (7): Couldn't connect to server"
    )


def _cache(lab: Lab, node: str, changes: Changes) -> None:
    """`--downloadonly`: the packages land in the node's cache (`dnf-cache.json`: package ->
    version and repository); nothing installed changes."""
    with lab.node_lock(node):
        cache = lab.read_state(node, "dnf-cache.json", {})
        for p, (v, r) in changes.items():
            cache[p] = {"version": v, "repo": r}
        lab.write_state(node, "dnf-cache.json", cache)


def _repolist(lab: Lab, node: str, enabled: list[str]) -> int:
    """`dnf repolist [--enabled]`: the enabled repositories, or dnf's error for the first one
    whose metadata cannot be downloaded (the lab's `repos-unreachable` fault)."""
    if faults(lab, node).get("repos_unreachable") and enabled:
        return err(_unreachable(enabled[0]))
    out("repo id                     repo name")
    for r in enabled:
        out(f"{r:<27} {r}")
    return 0


def _resolve(
    repos: dict, enabled: list[str], pkgs: dict, verb: str, names: list[str]
) -> tuple[Changes, str | None]:
    """What an install or update would change, or why dnf refuses it (a package no enabled
    repository has, an update of a package not installed)."""
    changes: Changes = {}
    for p in (names or sorted(pkgs)) if verb != "install" else names:
        best = lab_repos.latest(repos, enabled, p)
        if best is None:
            if verb == "install" or names:
                return changes, (
                    f"Error: Unable to find a match: {p} "
                    f"(enabled repositories: {', '.join(enabled)})"
                )
            continue
        if p not in pkgs and verb != "install":
            return changes, f"Package {p} is not installed"
        if p not in pkgs or lab_repos.vkey(best[0]) > lab_repos.vkey(pkgs[p]["version"]):
            changes[p] = best
    return changes, None


def _action(installed: dict | None, version: str) -> str:
    if installed is None:
        return "Installing"
    return (
        "Downgrading"
        if lab_repos.vkey(version) < lab_repos.vkey(installed["version"])
        else "Upgrading"
    )


def _split_spec(spec: str, pkgs: dict) -> tuple[str, str | None]:
    """`NAME-VERSION` (as dnf takes it) -> (name, version); a bare installed name -> (name,
    None). Names hold dashes too: the version is what follows the last dash before a digit."""
    if spec in pkgs:
        return spec, None
    name, _, version = spec.rpartition("-")
    if name and version[:1].isdigit():
        return name, version
    return spec, None


def _resolve_downgrade(
    repos: dict, enabled: list[str], pkgs: dict, names: list[str]
) -> tuple[Changes, str | None]:
    """What `dnf downgrade NAME[-VERSION] ...` changes, or dnf's refusal: an argument no
    enabled repository has a version of, or a package that is not installed. A bare name goes
    to the highest version below the installed one; a package already at (or below) the
    version asked is left as it is, as dnf does."""
    if not names:
        return {}, "Error: No packages marked for downgrade."
    changes: Changes = {}
    for spec in names:
        name, version = _split_spec(spec, pkgs)
        if name not in pkgs:
            return changes, f"Packages for argument {name} available, but not installed.\n" + (
                "Error: No packages marked for downgrade."
            )
        have = lab_repos.vkey(pkgs[name]["version"])
        offers = sorted(
            ((repos[r][name], r) for r in enabled if name in repos.get(r, {})),
            key=lambda vr: lab_repos.vkey(vr[0]),
        )
        if version is not None:
            offers = [(v, r) for v, r in offers if v == version]
            if not offers:
                return changes, f"No match for argument: {spec}\n" + (
                    "Error: No packages marked for downgrade."
                )
        lower = [(v, r) for v, r in offers if lab_repos.vkey(v) < have]
        if lower:
            changes[name] = lower[-1]
        else:
            out(f"Package {name} of lowest version already installed, cannot downgrade it.")
    return changes, None


def _install(lab: Lab, node: str, changes: Changes) -> None:
    """Record the new versions (re-read under the node's lock: another dnf may have run)."""
    with lab.node_lock(node):
        pkgs = services.installed(lab, node)
        for p, (v, r) in changes.items():
            pkgs[p] = {"version": v, "repo": r}
        lab.write_state(node, "packages.json", pkgs)


def _run_scriptlets(lab: Lab, node: str, changes: Changes) -> str | None:
    """The packages' scriptlets restart a running service (`systemctl try-restart`); a failed
    restart is a warning, as in dnf. Returns why the supervisor could not be asked, if so."""
    for svc in services.services_of_packages(lab, node, list(changes)):
        try:
            res = lab.call(
                "restart", node=node, unit=svc, only_if_running=True, timeout=job_timeout(lab, svc)
            )
        except SupervisorDown as exc:
            return str(exc)
        if res.get("restarted") is False:
            continue
        if not res.get("ok"):
            err(
                f"warning: %postun({svc}) scriptlet failed: "
                f"restart of {svc}.service failed: {res.get('message')}"
            )
    return None


@command("tripleo-repos")
def tripleo_repos(lab: Lab, node: str, args: list[str]) -> int:
    """Switch the node's repositories to a release, as TripleO's tool does."""
    rel = [a for a in args if not a.startswith("-")]
    if not rel or rel[0] not in lab_repos.RELEASES:
        return err(f"usage: tripleo-repos RELEASE (one of {', '.join(lab_repos.RELEASES)})")
    with lab.node_lock(node):
        lab.write_state(node, "repos.json", {"release": rel[0]})
    enabled = services.enabled_repos(lab, node)
    if not any(r.startswith("openstack-") for r in enabled):
        out(f"warning: release {rel[0]} has no repositories for OS {lab.os_major(node)}")
    out("enabled: " + " ".join(enabled))
    return 0
