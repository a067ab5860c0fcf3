"""Options shared by the commands that touch a cloud, and turning them into values: the
store, the connector (SSH inventory or a lab), `-e` variables, facts."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from stepwise.errors import InputError, Problem
from stepwise.model import NO_FACTS, Deployment, Facts, load_facts
from stepwise.paths import is_directory, read_input
from stepwise.plan.prestage import (
    DEFAULT_FORKS,
    DEFAULT_PARALLEL,
    DEFAULT_PROCESSES,
    nodes_at_once,
)
from stepwise.plan.variables import checked_variables

DEP = typer.Option(..., "--deployment", "-d", help="The deployment YAML.", metavar="PATH")
LIMIT = typer.Option(
    None, "--limit", "-l", help="Ansible-style: nodes, roles, globs, '!x', '&x', comma-separated."
)
TAGS = typer.Option(
    None,
    "--tags",
    "-t",
    help="Run only units with these tags or steps (comma-separated, repeatable).",
)
SKIP = typer.Option(None, "--skip-tags", help="Skip units with these tags or steps.")
EXTRA = typer.Option(
    None,
    "--extra-vars",
    "-e",
    help="key=value, JSON, or @file (repeatable), as ansible-playbook. "
    "Values of keys that look secret (password, token, key, ...) are never stored or shown.",
)
YES = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")
JSON = typer.Option(
    False, "--json", help="Print a JSON result (for scripts) instead of live progress."
)
STORE = typer.Option(
    None,
    "--store",
    help="State store URL (default: .stepwise/<cloud>.sqlite next to the "
    "deployment; or $STEPWISE_STORE). PostgreSQL: postgresql+psycopg://user:pw@host/db",
)
FACTS = typer.Option(None, "--facts", help="Facts file; default: what `stepwise discover` stored.")
LAB = typer.Option(
    None,
    "--lab",
    help="Run against a lab directory (its connection and inventory); "
    "default for a deployment whose lab is up: none (SSH).",
    metavar="DIR",
)
INV = typer.Option(
    None,
    "--inventory",
    "-i",
    help="Inventory (YAML/JSON) whose host vars override the deployment's "
    "(e.g. SSH user, key, port).",
    metavar="PATH",
)
FRESH = typer.Option(
    False, "--fresh", help="Start a new run instead of continuing an unfinished one."
)
RERUN = typer.Option(
    None, "--rerun", help="Run this completed unit again (repeatable; never a once-only unit)."
)
FORKS = typer.Option(
    50, "--forks", help="Parallel hosts per unit, as Ansible's --forks.", min=1, max=1000
)
PARALLEL = typer.Option(
    8,
    "--max-parallel-units",
    help="Units running at the same time at most (1: one after another).",
    min=1,
    max=256,
)
#: the prestage options' arguments (a run command hides them where they do not apply)
PRESTAGE_PARALLEL_ARGS: tuple[Any, ...] = (DEFAULT_PARALLEL, "--prestage-parallel")
PRESTAGE_PARALLEL_KW: dict[str, Any] = {
    "help": "Nodes the mirror or registry serves at once at full speed in the prestage "
    "stage; the connection bounds it too (--forks hosts in each of --max-parallel-units "
    "playbooks; plan assumes their defaults).",
    "min": 1,
    "max": 1_000_000,
}
NO_PRESTAGE_ARGS: tuple[Any, ...] = (False, "--no-prestage")
NO_PRESTAGE_KW: dict[str, Any] = {
    "help": "No prestage stage: each node fetches while it is visited (the plan as before)."
}
PRESTAGE_PARALLEL = typer.Option(*PRESTAGE_PARALLEL_ARGS, **PRESTAGE_PARALLEL_KW)
NO_PRESTAGE = typer.Option(*NO_PRESTAGE_ARGS, **NO_PRESTAGE_KW)


def prestage_bound(
    parallel: int,
    no_prestage: bool,
    forks: int = DEFAULT_FORKS,
    processes: int = DEFAULT_PROCESSES,
) -> int:
    """The Selection's `prestage` from the options: the nodes that fetch at once, what the
    mirror serves and the connection reaches (0 is no prestage stage)."""
    return 0 if no_prestage else nodes_at_once(parallel, forks, processes)


MAXFAIL = typer.Option(
    0,
    "--max-fail-percentage",
    help="Failed hosts tolerated (%) before the run stops; 0: the first failure stops it.",
    min=0,
    max=100,
)
KEEP = typer.Option(
    False, "--keep-artifacts", help="Keep the rendered playbooks and Ansible artifacts."
)


SECRET = typer.Option(
    None,
    "--secret",
    help="KEY=@FILE or KEY=env:VARIABLE (repeatable): a variable for the "
    "tasks whose value is never stored, logged or shown, whatever its name.",
    metavar="KEY=SOURCE",
)

#: an Ansible variable name (anything else fails on the node, halfway through a run)
_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")
#: what makes shlex.split differ from str.split; shlex builds each word a character at a time
#: (a 1 MiB word took 80 s), so quoted text is split by it only up to _MAX_QUOTED characters
_QUOTING = re.compile(r"[\\'\"]")
_MAX_QUOTED = 64 * 1024


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    # 1e400 is a valid JSON number that Python reads as infinity: refused like Infinity
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is not a finite number")
    return value


def _load_extra_file(v: str) -> dict[str, Any]:
    from stepwise.model.limits import check_finite
    from stepwise.model.yamlsrc import load_yaml, to_plain

    if not v[1:]:
        raise InputError(
            Problem(
                "extra-vars file not found: (no path after @)",
                field="-e",
                hint="give -e @path/to/vars.yml",
            )
        )
    path = Path(v[1:])
    data = to_plain(load_yaml(path, field="-e"))
    if not isinstance(data, dict):
        raise InputError(Problem("extra-vars file must hold a mapping", file=str(path), field="-e"))
    check_finite(data, "-e", str(path))
    return data


def parse_extra_vars(values: list[str] | None) -> dict[str, Any]:
    """`-e` as ansible-playbook: key=value pairs, a JSON/YAML mapping, or @file. Keys must be
    variable names, numbers finite; the variables the plans read as `plan.variables` says."""
    out: dict[str, Any] = {}
    for v in values or []:
        v = v.strip()
        if v.startswith("@"):
            out.update(_load_extra_file(v))
        elif v.startswith("{"):
            try:
                data = json.loads(v, parse_constant=_no_constant, parse_float=_finite_float)
            except (ValueError, RecursionError) as exc:
                raise InputError(Problem(f"-e is not valid JSON: {exc}", field="-e")) from None
            if not isinstance(data, dict):
                raise InputError(Problem("-e JSON must be a mapping", field="-e"))
            out.update(data)
        else:
            for pair in _split_pairs(v):
                if "=" not in pair:
                    raise InputError(
                        Problem(
                            f"-e '{pair}' is not key=value",
                            field="-e",
                            hint="use -e key=value, -e '{\"key\": 1}' or -e @vars.yml",
                        )
                    )
                k, val = pair.split("=", 1)
                out[k] = val
    return _checked_vars(out)


def _split_pairs(v: str) -> list[str]:
    """An -e argument's words, as shlex.split makes them (quotes, backslashes)."""
    if not _QUOTING.search(v):
        # what shlex.split gives without quotes (its whitespace), in linear time
        return [w for w in re.split(r"[ \t\r\n]+", v) if w]
    if len(v) > _MAX_QUOTED:
        raise InputError(
            Problem(
                f"-e with quotes is longer than {_MAX_QUOTED:,} characters",
                field="-e",
                hint="put long values in a file: -e @vars.yml",
            )
        )
    try:
        return shlex.split(v)
    except ValueError as exc:
        raise InputError(
            Problem(
                f"-e cannot be split into key=value pairs: {exc}",
                field="-e",
                hint="quote values with spaces: -e 'key=\"a b\"'",
            )
        ) from None


def _checked_vars(out: dict[str, Any]) -> dict[str, Any]:
    from stepwise.model.limits import MAX_STRING

    for k in out:
        if not _VAR_RE.fullmatch(str(k)):
            raise InputError(
                Problem(
                    f"-e '{k}' is not a variable name",
                    field="-e",
                    hint="letters, digits and '_', not starting with a digit",
                )
            )
    if len(json.dumps(out, default=str)) > MAX_STRING:
        raise InputError(
            Problem(f"-e values are larger than {MAX_STRING:,} characters", field="-e")
        )
    if not isinstance(out.get("system_upgrade_nodes", ""), str):
        raise InputError(Problem("system_upgrade_nodes must be a string", field="-e"))
    # the variables the plans read, as `plan` and a resumed run check them
    return checked_variables(out)


def parse_secrets(values: list[str] | None) -> dict[str, str]:
    """`--secret KEY=@FILE` (the file's text, one trailing newline dropped) or
    `--secret KEY=env:NAME` (an environment variable): values only Ansible ever sees."""
    out: dict[str, str] = {}
    for v in values or []:
        k, eq, src = v.partition("=")
        if (
            not eq
            or not _VAR_RE.fullmatch(k)
            or not (src.startswith("@") or src.startswith("env:"))
        ):
            raise InputError(
                Problem(
                    f"--secret '{k if eq else '...'}=...' is not KEY=@FILE or KEY=env:NAME",
                    field="--secret",
                    hint="e.g. --secret db_password=@/run/secrets/db",
                )
            )
        if src.startswith("env:"):
            if src[4:] not in os.environ:
                raise InputError(
                    Problem(
                        f"--secret {k}: environment variable '{src[4:]}' is not set",
                        field="--secret",
                    )
                )
            # taken out of the environment: Ansible's processes (and ansible-runner's record of
            # their environment) never see it
            out[k] = os.environ.pop(src[4:])
            continue
        path = Path(src[1:])
        raw = read_input(path, field="--secret", limit=65536, what="secret file")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(
                Problem(
                    f"--secret {k}: the file is not UTF-8 text", file=str(path), field="--secret"
                )
            ) from None
        out[k] = text[:-1] if text.endswith("\n") else text
    return out


def open_cloud_store(deployment: Deployment, url: str | None):
    from stepwise.run.store import default_store_url, open_store

    return open_store(default_store_url(deployment.path, deployment.name, url))


def connector(lab: Path | None, inventory_file: Path | None):
    """The connector the operator chose: a lab directory, an inventory file over SSH, or both
    (the inventory's host vars on top of the lab's); None: the deployment's own addresses."""
    from stepwise.run.inventory import Connector

    found = None
    if lab is not None:
        try:
            import stepwise.lab as labmod
        except ImportError:
            raise InputError(
                Problem("this stepwise has no lab (stepwise.lab is missing)", field="--lab")
            ) from None
        if not is_directory(lab, "--lab") or not (lab / "lab.json").is_file():
            raise InputError(
                Problem(
                    f"no lab in {lab}",
                    field="--lab",
                    hint="bring one up with `stepwise lab up -d DEPLOYMENT`",
                )
            )
        found = labmod.connector(lab)
    if inventory_file is not None:
        from stepwise.model.inventory import effective_hosts, load_inventory
        from stepwise.model.yamlsrc import to_plain

        # read as Ansible reads it (INI or YAML; groups at the top or under all:, children of
        # children, group vars inherited): a TripleO inventory's ansible_ssh_user is on its
        # role groups, and a host's connection must be the one the operator's Ansible uses
        hosts = effective_hosts(load_inventory(inventory_file))
        given = Connector("inventory", {h.name: to_plain(h.vars) for h in hosts.values()})
        found = found.merged(given) if found else given
    return found


def facts_for(
    deployment: Deployment,
    facts_file: Path | None,
    store,
    workflow=None,
    of_run: int | None = None,
) -> Facts:
    """--facts, else what `discover` and the runs stored, else nothing known (everything
    changes), with the milestones reached. A major upgrade takes every package to change:
    discover sees only the current release's repositories. A rollback plans from what run
    `of_run` recorded and what the nodes run now (the store only)."""
    from stepwise.plan.table import StoredFacts, entry

    if workflow is not None and entry(workflow).stored_facts is StoredFacts.ROLLBACK:
        return _rollback_facts(deployment, facts_file, store, of_run)
    progress = store.progress(deployment.name) if store is not None else frozenset()
    if facts_file:
        fx = load_facts(facts_file, deployment)
        return fx.with_progress(progress | fx.progress)
    if store is None:
        return NO_FACTS
    wanted = StoredFacts.PACKAGES if workflow is None else entry(workflow).stored_facts
    # the run layer only when there is a store to read
    from stepwise.run.discover import stored_facts

    if wanted is StoredFacts.NONE:
        # every package changes; a container's target image is the digest discover saw in
        # the target namespace (`discover -e target_namespace=...`), when it asked
        if deployment.containers is None:
            return NO_FACTS.with_progress(progress)
        return stored_facts(deployment, store, packages=False, keep=("images",))
    return stored_facts(deployment, store, packages=wanted is StoredFacts.PACKAGES)


def _rollback_facts(deployment: Deployment, facts_file: Path | None, store, of_run) -> Facts:
    if facts_file:
        raise InputError(
            Problem(
                "a rollback plans from the store's record of the run it takes back, not from "
                "a facts file",
                field="--facts",
                hint="leave --facts out; name the run with --run N",
            )
        )
    if of_run is None:
        raise InputError(
            Problem(
                "a rollback needs the update run it takes back",
                field="--run",
                hint="add --run N (`stepwise history -d ...` lists the runs)",
            )
        )
    from stepwise.run.rollback import rollback_facts  # the run layer: the store's records

    return rollback_facts(deployment, store, of_run)


def command_line() -> str:
    """The command as typed, with the values of secret-looking -e keys masked."""
    from stepwise.cli import safety
    from stepwise.secrets import mask_argv

    argv = safety.current_argv if safety.current_argv is not None else sys.argv[1:]
    return "stepwise " + " ".join(shlex.quote(a) for a in mask_argv(argv))


def confirm(yes: bool):
    """A confirm callback for run_plan: --yes, or a terminal to ask on."""

    def ask(what: str) -> None:
        if yes:
            return
        if not sys.stdin.isatty():
            raise InputError(
                Problem(
                    f"{what}: needs confirmation and there is no terminal to ask on",
                    hint="add --yes to confirm",
                )
            )
        if not typer.confirm(f"{what}. Continue?", default=False):
            raise InputError(Problem("not confirmed: nothing was run"))

    return ask
