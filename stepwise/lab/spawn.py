"""Start a lab process: `python -m` a module in a session of its own, its output to a log.

Kept apart from `control` so that a module `control` starts (the openstack CLI's server) can
start its own process without importing `control` back.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stepwise.lab.nodes import Lab


def spawn(
    lab: Lab, env: dict[str, str], log: str, argv: list[str], python: str = sys.executable
) -> subprocess.Popen:
    """A lab process (`python -m` argv: this Python unless told) in a session of its own, its
    output to `log`."""
    lab.log_dir.mkdir(parents=True, exist_ok=True)
    with open(lab.log_dir / log, "ab") as fh:
        return subprocess.Popen(
            [python, "-m", *argv],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(lab.dir),
        )


def package_dir(lab: Lab, name: str) -> Path:
    """A directory of the lab's run holding only a link to the stepwise package: what another
    interpreter (the client venv's, the nodes') puts on its path to run stepwise's fork
    server, without stepwise's venv shadowing its own packages."""
    path_dir = Path(lab.run_dir) / name
    path_dir.mkdir(parents=True, exist_ok=True)
    link = path_dir / "stepwise"
    package = Path(__file__).resolve().parents[1]
    if not link.is_symlink() or link.resolve() != package:
        link.unlink(missing_ok=True)
        link.symlink_to(package, target_is_directory=True)
    return path_dir
