"""`export`: the plan as standalone Ansible playbooks, for operators who drive Ansible themselves.

The same plays stepwise runs (one per unit, in plan order), tagged with the unit's tags and
step; `system_upgrade_*` plays are also tagged `never`, so they run only when asked by name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from stepwise.errors import InputError, Problem
from stepwise.model import Deployment
from stepwise.model.task_lint import NO_MODULE_HERE
from stepwise.paths import checked_path
from stepwise.plan.units import Plan, Unit
from stepwise.run import ansible_env
from stepwise.run.ansible_files import ansible_cfg, to_yaml
from stepwise.run.inventory import Connector, inventory, plan_vars
from stepwise.run.render import render_unit
from stepwise.secrets import Redactor, secret_values

#: the file that marks a directory as an export stepwise wrote (only such a one is replaced)
MARKER = ".stepwise-export"


def export(
    plan: Plan,
    deployment: Deployment,
    out_dir: Path | str,
    *,
    connector: Connector | None = None,
    force: bool = False,
    record: bool = True,
) -> list[Path]:
    """Write playbooks, inventory and ansible.cfg to the new directory `out_dir` (with `force`,
    replace an export stepwise made there); returns the files written. `record=False` leaves
    out what packages units report afterwards (the overhead benchmark's bare plays).

    Everything is written into a fresh private directory beside it, then renamed into place:
    a failed write leaves no half-written play, an old export never mixes with a new one, and
    no link inside the target is ever followed."""
    out = checked_path(out_dir, "--output")
    old = _replaceable(out, force)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise InputError(
            Problem(
                f"cannot create the export directory: {exc.strerror or exc}",
                file=str(out),
                field="--output",
            )
        ) from None
    try:
        names = _write(plan, deployment, stage, connector, record)
        os.chmod(stage, 0o755)  # playbooks hold no secret: readable as any checkout would be
        if old:
            trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, trash / "export")
            os.replace(stage, out)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.rename(stage, out)  # fails if something appeared there meanwhile: never merged
    except OSError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise InputError(
            Problem(
                f"cannot write the export: {exc.strerror or exc}",
                file=str(out),
                field="--output",
                hint="check the disk space and that the directory is writable",
            )
        ) from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return [out / n for n in names]


def _replaceable(out: Path, force: bool) -> bool:
    """Whether `out` holds an export to replace (True) or does not exist (False); refuses
    anything else."""
    if out.is_symlink():
        raise InputError(
            Problem(
                "the export directory is a symbolic link; stepwise does not write through links",
                file=str(out),
                field="--output",
                hint="give a new directory",
            )
        )
    if not out.exists():
        return False
    if not out.is_dir():
        raise InputError(
            Problem(
                "exists and is not a directory",
                file=str(out),
                field="--output",
                hint="give a new directory",
            )
        )
    if not force:
        raise InputError(
            Problem(
                "the export directory exists",
                file=str(out),
                field="--output",
                hint="give a new directory, or --force to replace an export stepwise wrote there",
            )
        )
    if not (out / MARKER).is_file():
        raise InputError(
            Problem(
                "the directory exists and is not an export of stepwise; not replaced",
                file=str(out),
                field="--output",
                hint="give a new directory",
            )
        )
    return True


#: ansible-lint's yaml line length (160) less the indentation and quotes of a play's name
TITLE_MAX = 150


def _play_title(unit: Unit) -> str:
    """`Batch Controller#2, step stop: nova_api, nova_scheduler on ctl-0 (unit u12)`: named
    after its batch and step, then what and where, as many names as fit in a line (names are
    validated: no template can hide in them)."""

    def listed(names: tuple[str, ...], keep: int) -> str:
        more = len(names) - keep
        return ", ".join(names[:keep]) + (f" and {more} more" if more > 0 else "")

    head = f"Batch {unit.batch}, step {unit.step}" if unit.batch else f"Step {unit.step}"
    title = ""
    for keep in (3, 2, 1):
        where = f" on {listed(tuple(unit.nodes), keep)}" if unit.nodes else ""
        what = f": {listed(tuple(unit.services), keep)}" if unit.services else ""
        title = f"{head}{what}{where} (unit {unit.id})"
        if len(title) <= TITLE_MAX:
            break
    return title


_NO_MODULE_LINE = re.compile(
    # the command line may be quoted (`'sed -i ''s/a/b/'' FILE'`)
    r"^(\s*)(?:- )?ansible\.builtin\.(?:command|shell): ['\"]?(?:"
    + "|".join(map(re.escape, NO_MODULE_HERE))
    + r")\b",
    re.M,
)


def _playbook(plays: list[dict]) -> str:
    """The plays as YAML, with ansible-lint's `# noqa` (on a line of its own: no value is ever
    touched) before a command whose module cannot do its job (`NO_MODULE_HERE`)."""
    return _NO_MODULE_LINE.sub(
        lambda m: f"{m.group(1)}# noqa: command-instead-of-module\n{m.group(0)}", to_yaml(plays)
    )


def _write(
    plan: Plan, deployment: Deployment, out: Path, connector: Connector | None, record: bool
) -> list[str]:
    """Write the export into the fresh directory `out`; returns the paths written, relative
    to it."""
    (out / "units").mkdir()
    written: list[str] = []
    plays = []
    for i, u in enumerate(plan.units):
        play = render_unit(plan, u, deployment, run_id="export", for_export=True, record=record)
        if play is None:
            continue
        # the engine matches events by the play's name (the unit id); a reader of the export
        # gets a sentence saying what the play does where, and the hosts as a list (a line
        # of every host of a large play is too long to read)
        play = {**play, "name": _play_title(u), "hosts": play["hosts"].split(",")}
        plays.append(play)
        # named after the unit, its step and its batch: `0012-u13-stop-Controller_2.yml`
        label = "-".join(x for x in (u.id, str(u.step), u.batch or "") if x)
        name = f"units/{i:04d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)[:80]}.yml"
        # no data in the comment (a reason with a line break would end it and start YAML):
        # the unit's step, nodes and why are in plan.json, written by the JSON library
        (out / name).write_text(
            f"# unit {i} of the plan: its step, nodes and why are plan.json's units[{i}]\n"
            + _playbook([play])
        )
        written.append(name)
    (out / "site.yml").write_text(
        f"# stepwise {plan.workflow} plan: {len(plays)} plays in order (plan.json tells why).\n"
        "# Run: ansible-playbook -i inventory.yml site.yml [--limit ...] [--tags ...]\n"
        + _playbook(plays)
    )
    inv = inventory(deployment, connector, extra=plan_vars(plan, deployment))
    # the inventory carries what the operator's inventory and the deployment hold, secrets
    # included (ansible_password, ansible_become_password, a deployment's db_password): it is
    # readable by its owner only, whatever the directory's mode
    fd = os.open(out / "inventory.yml", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(to_yaml(inv))
    lib = out / "library"
    lib.mkdir()
    for m in ansible_env.LIBRARY_DIR.glob("*.py"):
        shutil.copyfile(m, lib / m.name)
    env = ansible_env.ansible_env(plugin_dirs=connector.plugin_dirs if connector else ())
    defaults = {
        "library": "./library",
        "retry_files_enabled": "False",
        "interpreter_python": "auto_silent",
    }
    if env.get("ANSIBLE_CONNECTION_PLUGINS"):
        # the connector's plugin directories and the operator's environment variable
        defaults["connection_plugins"] = env["ANSIBLE_CONNECTION_PLUGINS"]
    cfg = {"defaults": defaults, "connection": {"pipelining": "True"}}
    sources = {"connection_plugins": "ANSIBLE_CONNECTION_PLUGINS (environment)"}
    (out / "ansible.cfg").write_text(ansible_cfg(cfg, sources))
    (out / "plan.json").write_text(json.dumps(plan.to_json(), indent=1, allow_nan=False))
    (out / MARKER).write_text("stepwise export (see plan.json)\n")
    files = written + ["site.yml", "inventory.yml", "ansible.cfg", "plan.json"]
    _private_where_secret(out, files, secret_values(inv))
    return files


def _private_where_secret(out: Path, names: list[str], secrets: list[str]) -> None:
    """Make private (0600) every exported file that holds one of `secrets`: a play or the
    plan may quote a variable's value; the world-readable rest holds none."""
    redact = Redactor(secrets)
    if not redact:
        return
    for name in names:
        path = out / name
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        if redact(text) != text:
            os.chmod(path, 0o600)
