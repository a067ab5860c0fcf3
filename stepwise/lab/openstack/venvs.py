"""Virtualenvs of real OpenStack code, built once per machine into a cache and reused.

A venv is named by its lock file (a `pip freeze` of an install made under the release branch's
upper-constraints, kept in `locks/`) and keyed by the lock's content and the interpreter, so a
changed lock or a new Python gets a new venv and nothing is ever rebuilt by accident. The
interpreter is the system's `/usr/bin/python3`: uWSGI's Debian python3 plugin embeds that
Python, and a venv only runs under the interpreter it was made from.

Venvs are not relocatable (their scripts name their own path), so a build happens in place
under an exclusive `flock` and is only used once its ready marker exists; a failed build is
removed. Concurrent `lab up`s wait for the one that builds.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

#: (done, total, what): packages collected of the lock's total, then "installing"
BuildProgress = Callable[[int, int, str], None]
SYSTEM_PYTHON = "/usr/bin/python3"
LOCK_DIR = Path(__file__).resolve().parent / "locks"
READY = ".stepwise-ready"


class VenvError(RuntimeError):
    """A venv could not be built (the message names the lock and pip's last lines)."""


def cache_root() -> Path:
    """Where built venvs live (`$XDG_CACHE_HOME/stepwise/openstack`, else `~/.cache/...`)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "stepwise" / "openstack"


def lock_file(name: str) -> Path:
    """The lock file of venv `name` (e.g. `2025.1.0`, `client`, `tempest`)."""
    path = LOCK_DIR / f"{name}.txt"
    if not path.is_file():
        raise VenvError(f"no lock file for {name!r} in {LOCK_DIR}")
    return path


def requirements(name: str) -> list[str]:
    """The pinned requirements of a lock (comments and blank lines left out)."""
    out = []
    for line in lock_file(name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


@functools.lru_cache(maxsize=8)
def _python_version(python: str) -> str:
    """The interpreter's full version (part of every venv's key; asked once per process: a
    lab up names each release's venv for every image it builds and pushes)."""
    r = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, timeout=30
    )
    if r.returncode != 0:
        raise VenvError(f"{python} does not run: {r.stderr.strip()[-200:]}")
    return r.stdout.strip()


def venv_path(name: str, python: str = SYSTEM_PYTHON) -> Path:
    """Where venv `name` lives for this lock content and interpreter."""
    if not Path(python).exists():
        raise VenvError(
            f"{python} not found: install the Debian package python3 (and python3-venv)"
        )
    # the pins, not the file: a reworded comment rebuilds nothing
    pins = "\n".join(requirements(name))
    digest = hashlib.sha256((pins + "\n" + _python_version(python)).encode()).hexdigest()
    return cache_root() / "venvs" / f"{name}-{digest[:12]}"


def is_built(name: str, python: str = SYSTEM_PYTHON) -> bool:
    """Whether venv `name` is ready (built earlier on this machine)."""
    return (venv_path(name, python) / READY).is_file()


def ensure_venv(
    name: str, progress: BuildProgress | None = None, python: str = SYSTEM_PYTHON
) -> Path:
    """The path of venv `name`, built first if this machine has not built it yet."""
    path = venv_path(name, python)
    if (path / READY).is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / (path.name + ".lock"), "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # another lab up may be building it: wait for it
        if (path / READY).is_file():
            return path
        shutil.rmtree(path, ignore_errors=True)
        try:
            _build(name, path, python, progress or (lambda _d, _t, _w: None))
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        (path / READY).write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
    return path


_COLLECTING = re.compile(r"^\s*(Collecting|Processing|Requirement already satisfied)")


def _build(name: str, path: Path, python: str, progress: BuildProgress) -> None:
    reqs = requirements(name)
    if not reqs:  # a venv of nothing would pass for built and fail later, far from the cause
        raise VenvError(
            f"the lock {lock_file(name)} lists no package: "
            "regenerate it (scripts/lock-openstack.sh)"
        )
    total = len(reqs)
    progress(0, total, f"creating the {name} venv")
    r = subprocess.run(
        [python, "-m", "venv", str(path)], capture_output=True, text=True, timeout=300
    )
    if r.returncode != 0:
        raise VenvError(
            f"python3 -m venv failed for {name}: {r.stderr.strip()[-300:]} "
            "(install the Debian package python3-venv)"
        )
    # The lock is complete (a freeze), so no resolution is needed: --no-deps installs exactly it.
    cmd = [
        str(path / "bin" / "pip"),
        "install",
        "--no-deps",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "-r",
        str(lock_file(name)),
    ]
    env = dict(os.environ, PIP_NO_INPUT="1")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    done, tail = 0, []
    assert proc.stdout is not None
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-15:]
        if _COLLECTING.match(line):
            done = min(total, done + 1)
            progress(done, total, f"{name}: {line.split()[1] if len(line.split()) > 1 else ''}")
        elif line.startswith("Installing collected packages"):
            progress(total, total, f"{name}: installing {total} packages")
    if proc.wait() != 0:
        lines = "\n  ".join(t for t in tail if not t.startswith("WARNING: Location"))
        raise VenvError(f"pip could not install the {name} lock ({lock_file(name)}):\n  {lines}")
    progress(total, total, f"{name}: ready")
