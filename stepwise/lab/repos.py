"""The lab's package repositories: OpenStack releases per OS major, and the OS itself.

Release R1 is `1.0.0`, its minor update `1.1.0`, R2 `2.0.0`. R1 is built for OS 8 only and R2
for OS 8 and 9, as real distributions do: an old release is never rebuilt for a new OS, so an
OS upgrade has to take the node to the new release too. Packages the OS ships (kernel,
corosync, mariadb, ...) come from the OS repositories, whose versions follow the OS major.
"""

from __future__ import annotations

from collections.abc import Iterable

RELEASES = ("R1", "R2")
OS_MAJORS = (8, 9)
INITIAL_RELEASE = "R1"
INITIAL_OS = 8

#: name -> (OS 8 base, OS 8 update, OS 9 base). A catalog package with one of these names is an
#: OS package, whatever service owns it.
SYSTEM_PACKAGES: dict[str, tuple[str, str, str]] = {
    "kernel": ("4.18.0", "4.18.1", "5.14.0"),
    "kernel-core": ("4.18.0", "4.18.1", "5.14.0"),
    "glibc": ("2.28.0", "2.28.1", "2.34.0"),
    "systemd": ("239.0", "239.1", "252.0"),
    "corosync": ("2.4.5", "2.4.6", "3.1.5"),
    "mariadb": ("10.3.28", "10.3.32", "10.5.16"),
    "mariadb-server": ("10.3.28", "10.3.32", "10.5.16"),
    "mariadb-server-galera": ("10.3.28", "10.3.32", "10.5.16"),
    "python3": ("3.6.8", "3.6.9", "3.9.16"),
}
#: Installed on every node at first boot.
BASE_PACKAGES = ("kernel", "kernel-core", "glibc", "systemd", "python3")
#: Only on the old OS: the in-place upgrader.
LEAPP = ("leapp", "0.14.0")

OPENSTACK_VERSIONS = {"R1": "1.0.0", "R1-updates": "1.1.0", "R2": "2.0.0"}
#: Which OpenStack repositories exist for which OS major.
OPENSTACK_REPOS = {8: ("R1", "R1-updates", "R2"), 9: ("R2",)}


def vkey(version: str) -> tuple[int, ...]:
    """Sortable key of a dotted version."""
    out = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def major(version: str | None) -> int:
    return vkey(version)[0] if version else 0


def release_of(version: str | None) -> str | None:
    """The OpenStack release an OpenStack package version belongs to (1.x -> R1)."""
    return f"R{major(version)}" if version else None


def build_repos(packages: Iterable[str]) -> dict[str, dict[str, str]]:
    """All repositories of a lab: repo name -> package -> version."""
    os_pkgs = set(SYSTEM_PACKAGES) | {LEAPP[0]}
    openstack = sorted({p for p in packages if p not in os_pkgs})
    repos: dict[str, dict[str, str]] = {}
    for m, idx in ((8, 0), (9, 2)):
        repos[f"os{m}-baseos"] = {p: v[idx] for p, v in SYSTEM_PACKAGES.items()}
    repos["os8-baseos"][LEAPP[0]] = LEAPP[1]
    repos["os8-updates"] = {p: v[1] for p, v in SYSTEM_PACKAGES.items()}
    for m, names in OPENSTACK_REPOS.items():
        for name in names:
            repos[f"openstack-{name}-el{m}"] = {p: OPENSTACK_VERSIONS[name] for p in openstack}
    return repos


def enabled_repos(repos: dict[str, dict[str, str]], release: str, os_major: int) -> list[str]:
    """Repositories a node on `os_major` with OpenStack `release` enabled can use."""
    out = [r for r in repos if r.startswith(f"os{os_major}-")]
    out += [
        r
        for r in repos
        if r.startswith(f"openstack-{release}-")
        and r.endswith(f"-el{os_major}")
        or r == f"openstack-{release}-el{os_major}"
    ]
    return sorted(set(out))


def latest(
    repos: dict[str, dict[str, str]], enabled: Iterable[str], package: str
) -> tuple[str, str] | None:
    """(version, repo) of the newest `package` in the enabled repositories, or None."""
    best: tuple[str, str] | None = None
    for r in enabled:
        v = repos.get(r, {}).get(package)
        if v is not None and (best is None or vkey(v) > vkey(best[0])):
            best = (v, r)
    return best


def base_version(
    repos: dict[str, dict[str, str]], package: str, release: str, os_major: int
) -> tuple[str, str] | None:
    """The version a fresh install gets: the release's (or OS's) base repository, no updates."""
    for r in (f"openstack-{release}-el{os_major}", f"os{os_major}-baseos"):
        if package in repos.get(r, {}):
            return repos[r][package], r
    return None
