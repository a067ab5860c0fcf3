"""How stepwise invokes Ansible: environment, the process wrapper, and the one place that
starts ansible-playbook through ansible-runner (`run_playbook`, for the engine and discover).

The same environment is used by `export` and by the benchmark's plain `ansible-playbook`, so
the comparison measures stepwise's overhead, not a different Ansible configuration.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LIBRARY_DIR = Path(__file__).resolve().parent / "ansible" / "library"


def ansible_env(
    extra: Mapping[str, str] | None = None, plugin_dirs: Sequence[str] = ()
) -> dict[str, str]:
    """Environment variables for ansible-playbook (quiet, fast, no retry files); `plugin_dirs`:
    connection plugins a connector brings (the lab's)."""
    env = {
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_SYSTEM_WARNINGS": "False",
        "ANSIBLE_COMMAND_WARNINGS": "False",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_LIBRARY": str(LIBRARY_DIR),
        "ANSIBLE_INVENTORY_ENABLED": "yaml",
    }
    conn = list(plugin_dirs)
    if os.environ.get("ANSIBLE_CONNECTION_PLUGINS"):
        conn.append(os.environ["ANSIBLE_CONNECTION_PLUGINS"])
    if conn:
        env["ANSIBLE_CONNECTION_PLUGINS"] = os.pathsep.join(conn)
    env.update(extra or {})
    return env


def ansible_playbook_path() -> str:
    """The ansible-playbook of the Python running stepwise (its venv), else the PATH's."""
    candidate = Path(sys.executable).parent / "ansible-playbook"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("ansible-playbook")
    if not found:
        from stepwise.errors import StepwiseError

        raise StepwiseError(
            "ansible-playbook not found: install ansible-core (pip install ansible-core)"
        )
    return found


WRAPPER = """#!{python}
# Started by stepwise through ansible-runner. If stepwise dies (even by SIGKILL) this
# ansible-playbook must die with it, and its forks with it (SIGHUP from the lost terminal),
# so a resumed run never races a leftover one on the same nodes.
import ctypes, os, signal, sys
signal.signal(signal.SIGHUP, signal.SIG_DFL)
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except Exception:
    pass
if os.getppid() == 1:
    sys.exit(137)
with open({pidfile!r}, "w") as f:
    f.write(str(os.getpid()))
os.execv({playbook!r}, [{playbook!r}] + sys.argv[1:])
"""


WRAPPER_DETACHED = """#!{python}
# Started by stepwise for a once-only unit (data transfer): it must never be cut in half, so
# it outlives stepwise. It relays ansible-playbook's output while someone reads it and keeps
# draining it after (so Ansible never blocks), ignoring the hangup of the lost terminal. A
# resumed stepwise waits for it (its pid is in the lock) and reads the outcome from the
# node's flag file.
import os, signal, subprocess, sys
signal.signal(signal.SIGHUP, signal.SIG_IGN)
with open({pidfile!r}, "w") as f:
    f.write(str(os.getpid()))
p = subprocess.Popen([{playbook!r}] + sys.argv[1:], \
stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out, relay = sys.stdout.buffer, True
for chunk in iter(lambda: p.stdout.read1(65536), b""):
    if relay:
        try:
            out.write(chunk)
            out.flush()
        except OSError:
            relay = False
sys.exit(p.wait())
"""


def write_wrapper(directory: Path, detached: bool = False) -> tuple[Path, Path]:
    """An executable that records its pid and runs ansible-playbook (see WRAPPER and
    WRAPPER_DETACHED)."""
    directory.mkdir(parents=True, exist_ok=True)
    pidfile = directory / "ansible.pid"
    path = directory / "ansible-playbook"
    template = WRAPPER_DETACHED if detached else WRAPPER
    path.write_text(
        template.format(
            python=sys.executable, pidfile=str(pidfile), playbook=ansible_playbook_path()
        )
    )
    path.chmod(0o755)
    return path, pidfile


@dataclass(frozen=True)
class Playbook:
    """One ansible-playbook process as ansible-runner starts it: what it runs, against which
    inventory, with which variable files (never on its command line: they may hold secrets),
    environment and wrapper (`write_wrapper`)."""

    #: ansible-runner's private data directory (its artifacts go there)
    directory: Path
    playbook: Path
    inventory: Path
    wrapper: Path
    var_files: tuple[Path, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    forks: int = 50
    verbosity: int = 0
    #: how long ansible-runner waits for the process's output before it looks again (s)
    poll_s: float = 0.1


def run_playbook(
    book: Playbook,
    on_event: Callable[[Mapping[str, Any]], bool],
    cancel: Callable[[], bool] = lambda: False,
) -> Any:
    """Run `book` to its end, quietly (events go to `on_event`, which returns whether
    ansible-runner should also write the event to disk); `cancel` is asked while it runs.
    Returns ansible-runner's Runner (`rc`, `status`)."""
    import ansible_runner

    # with our wrapper as `binary`, ansible-runner passes no playbook: it is given here
    cmdline = shlex.quote(str(book.playbook)) + "".join(
        f" -e @{shlex.quote(str(f))}" for f in book.var_files
    )
    return ansible_runner.run(
        private_data_dir=str(book.directory),
        inventory=str(book.inventory),
        cmdline=cmdline,
        envvars=dict(book.env),
        forks=book.forks,
        binary=str(book.wrapper),
        event_handler=on_event,
        quiet=True,
        suppress_env_files=True,
        verbosity=book.verbosity or None,
        cancel_callback=cancel,
        settings={
            "suppress_ansible_output": True,
            "pexpect_timeout": book.poll_s,
            "pexpect_use_poll": True,
        },
    )
