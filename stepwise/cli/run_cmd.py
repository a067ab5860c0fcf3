"""Commands that change a cloud, in the words of a TripleO operator: `update run`,
`upgrade prepare|run|converge`, `external-upgrade run --tags ...`, `management-upgrade run`;
and `discover`, `forget`."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import typer

from stepwise.cli.app import app
from stepwise.cli.common import console, err_console, print_json, reported
from stepwise.cli.options import (
    DEP,
    EXTRA,
    FACTS,
    FORKS,
    FRESH,
    INV,
    JSON,
    KEEP,
    LAB,
    LIMIT,
    MAXFAIL,
    NO_PRESTAGE_ARGS,
    NO_PRESTAGE_KW,
    PARALLEL,
    PRESTAGE_PARALLEL_ARGS,
    PRESTAGE_PARALLEL_KW,
    RERUN,
    SECRET,
    SKIP,
    STORE,
    TAGS,
    YES,
    command_line,
    confirm,
    connector,
    facts_for,
    open_cloud_store,
    parse_extra_vars,
    parse_secrets,
    prestage_bound,
)
from stepwise.cli.pause import batch_asker, require_terminal
from stepwise.errors import InputError, Problem
from stepwise.model import load_deployment
from stepwise.model.vocab import RunState
from stepwise.paths import state_dir
from stepwise.plan.commands import COMMANDS, FAMILIES, Command, CommandInfo
from stepwise.plan.prestage import DEFAULT_PARALLEL
from stepwise.plan.table import WORKFLOW_TABLE

EXIT_FAILED, EXIT_ABORTED, EXIT_INTERRUPTED = 1, 5, 130
SKIP_PREFLIGHT = typer.Option(
    False,
    "--skip-preflight",
    help="Start without the preflight checks (disk, repositories, clusters, ...); "
    "recorded with the run.",
)


@dataclass(frozen=True)
class RunOptions:
    """What the operator typed for a command that changes the cloud (its typer options)."""

    deployment: Path
    limit: str | None
    tags: list[str] | None
    skip_tags: list[str] | None
    extra_vars: list[str] | None
    secrets: list[str] | None
    yes: bool
    json_out: bool
    store_url: str | None
    facts: Path | None
    lab: Path | None
    inventory: Path | None
    fresh: bool
    rerun: list[str] | None
    forks: int
    max_parallel: int
    max_fail: int
    keep: bool
    plane: str | None = None
    accept_downtime: bool = False
    skip_preflight: bool = False
    of_run: int | None = None
    prestage_parallel: int = DEFAULT_PARALLEL
    no_prestage: bool = False
    pause: bool = False

    @property
    def prestage(self) -> int:
        """The nodes that fetch at once: what the mirror serves and this run reaches (its
        --forks in each of its --max-parallel-units playbooks); 0 with --no-prestage."""
        return prestage_bound(
            self.prestage_parallel, self.no_prestage, self.forks, self.max_parallel
        )


def _run(title: str, command: Command, opts: RunOptions, ask: bool) -> None:
    """Plan the command's part, verify it, run it (or continue its unfinished run), say how it
    ended; the exit code says it to scripts."""
    from stepwise.plan import PLAN_VARIABLES
    from stepwise.plan.selection import split_list
    from stepwise.run.resume import RunRequest, run_plan
    from stepwise.run.store.store import existing_store
    from stepwise.secrets import Redactor, secret_values
    from stepwise.verify import plan_verified
    from stepwise.verify.downtime import refuse_unaccepted_downtime

    with reported():
        require_terminal(opts.pause)
        dep = load_deployment(opts.deployment)
        ev = parse_extra_vars(opts.extra_vars)
        hidden = parse_secrets(opts.secrets)
        # every secret value is masked in whatever is recorded or shown (the command line too)
        redact = Redactor(secret_values(ev, hidden))
        store = existing_store(dep, opts.store_url)
        workflow, selection = _select(command, opts, dep, store, ev)
        fx = facts_for(dep, opts.facts, store, workflow, opts.of_run)
        variables = {k: ev[k] for k in PLAN_VARIABLES if k in ev}
        # bad input and unsafe plans are refused here, before any file is created
        plan = plan_verified(workflow, dep, fx, selection, variables=variables)
        refuse_unaccepted_downtime(plan, dep, opts.accept_downtime)
        cmd = redact(command_line())
        # a bad --inventory is refused before the store is created
        observer = None if opts.json_out else _progress(title)
        engine = _engine_options(dep, opts, ev, hidden, redact, cmd, observer)
        result = run_plan(
            RunRequest(
                store=store or open_cloud_store(dep, opts.store_url),
                deployment=dep,
                workflow=workflow,
                selection=selection,
                facts=fx,
                variables=variables,
                command=cmd,
                options=engine,
                fresh=opts.fresh,
                rerun=split_list(opts.rerun),
                observer=observer,
                plan=plan,
                confirm=confirm(opts.yes) if ask or opts.fresh else None,
                accept_downtime=opts.accept_downtime,
                preflight=not opts.skip_preflight,
            )
        )
        _end(title, result, opts.json_out)


def _select(command: Command, opts: RunOptions, dep, store, ev: dict):
    """The workflow and the part of it the command's options select (the seed's
    `-e system_upgrade_nodes=` is external-upgrade's --limit), given what the store says
    is done already."""
    from stepwise.plan.options import command_selection
    from stepwise.plan.selection import split_list

    nodes = ev.get("system_upgrade_nodes")
    limit = opts.limit if opts.limit is not None or not nodes else str(nodes)
    return command_selection(
        command,
        progress=store.progress(dep.name) if store is not None else frozenset(),
        limit=limit,
        tags=split_list(opts.tags),
        skip_tags=split_list(opts.skip_tags),
        plane=opts.plane,
        of_run=opts.of_run,
        prestage=opts.prestage,
    )


def _engine_options(dep, opts: RunOptions, ev, hidden, redact, cmd: str, observer=None):
    """How the engine runs: the operator's -e and secrets, Ansible's forks and failure
    percentage, the connection, where work files are kept, and `--pause`'s question."""
    from stepwise.run.run_options import EngineOptions

    base = state_dir(dep.path)
    return EngineOptions(
        extra_vars=ev,
        secrets=hidden,
        redact=redact,
        forks=opts.forks,
        max_fail_percentage=opts.max_fail,
        max_parallel_units=opts.max_parallel,
        connector=connector(opts.lab, opts.inventory),
        keep_work_dir=opts.keep,
        continue_command=cmd.replace(" --fresh", ""),
        work_dir=(base / "work") if opts.keep else None,
        persist_dir=base / "persist" / dep.name,
        before_batch=batch_asker(observer) if opts.pause else None,
    )


def _progress(title: str):
    """Live progress on a terminal, a line per event otherwise (logs, CI)."""
    from stepwise.cli.progress import LineProgress, LiveProgress

    if console.is_terminal:
        return LiveProgress(console, title)
    return LineProgress(err_console, title)


def _end(title: str, result, json_out: bool) -> None:
    """Say how the run ended (JSON for scripts) and exit with its code."""
    if json_out:
        print_json(result.to_json())
    else:
        _say(title, result)
    if result.status is RunState.INTERRUPTED:
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.status is RunState.ABORTED:
        raise typer.Exit(EXIT_ABORTED)
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)


def _say(title: str, result) -> None:
    from rich.text import Text

    if result.stale_lock:
        err_console.print(
            Text(
                "note: took over a stale lock of a dead process "
                f"(pid {result.stale_lock.get('pid')})"
            )
        )
    if result.status is RunState.NOTHING:
        console.print(Text(f"{title}: {result.message}", style="green"))
    elif result.ok:
        console.print(
            Text(
                f"{title}: run {result.run_id} finished "
                f"({result.units_done}/{result.units_total} units, {result.elapsed_s:.1f}s"
                + (f", {result.units_reused} done before" if result.units_reused else "")
                + ")",
                style="green",
            )
        )
    else:
        err_console.print(
            Text.assemble(
                (
                    f"{result.status}: "
                    if result.status in (RunState.INTERRUPTED, RunState.ABORTED)
                    else "failed: ",
                    "bold red",
                ),
                result.message,
            ),
            soft_wrap=True,
        )


PAUSE = typer.Option(
    False,
    "--pause",
    help="Stop before each batch and ask: continue, or abort there (a safe point; the same "
    "command continues later). Needs a terminal.",
)
ACCEPT_DOWNTIME_OPT = typer.Option(
    False,
    "--accept-downtime",
    help="Accept the downtime windows the plan announces for services whose availability "
    "rule cannot hold with this cloud's instances (one controller); refused without it.",
)
_PLANE_HELP = "control | data (upgrade run only)."
_RUN_HELP = "The update run to take back (rollback only)."


def _workflow_command(group: typer.Typer, command: Command, info: CommandInfo) -> None:
    """Register `command` on its family's group, with the options its CommandInfo shows."""
    name, title, ask, doc = command.verb, info.title, info.asks, info.help
    with_plane, with_run, with_prestage = info.plane, info.of_run, info.prestage

    def cmd(
        deployment: Path = DEP,
        limit: str | None = LIMIT,
        tags: list[str] | None = TAGS,
        skip_tags: list[str] | None = SKIP,
        extra_vars: list[str] | None = EXTRA,
        secret: list[str] | None = SECRET,
        yes: bool = YES,
        json_out: bool = JSON,
        store: str | None = STORE,
        facts: Path | None = FACTS,
        lab: Path | None = LAB,
        inventory: Path | None = INV,
        fresh: bool = FRESH,
        rerun: list[str] | None = RERUN,
        forks: int = FORKS,
        max_parallel: int = PARALLEL,
        max_fail: int = MAXFAIL,
        keep: bool = KEEP,
        plane: str | None = typer.Option(None, "--plane", help=_PLANE_HELP, hidden=not with_plane),
        accept_downtime: bool = ACCEPT_DOWNTIME_OPT,
        skip_preflight: bool = SKIP_PREFLIGHT,
        of_run: int | None = typer.Option(None, "--run", help=_RUN_HELP, hidden=not with_run),
        prestage_parallel: int = typer.Option(
            *PRESTAGE_PARALLEL_ARGS, **PRESTAGE_PARALLEL_KW, hidden=not with_prestage
        ),
        no_prestage: bool = typer.Option(
            *NO_PRESTAGE_ARGS, **NO_PRESTAGE_KW, hidden=not with_prestage
        ),
        pause: bool = PAUSE,
    ) -> None:
        # the options in signature order are RunOptions's fields in order
        given = locals()
        opts = RunOptions(*(given[name] for name in inspect.signature(cmd).parameters))
        _run(title, command, opts, ask)

    cmd.__doc__ = doc
    group.command(name)(cmd)


def _register_commands() -> None:
    """One command group per family of the workflow table's commands (`upgrade`: prepare, run,
    converge); a workflow whose operator name differs from its stored one (`management-upgrade`)
    keeps the stored one as a hidden alias."""
    groups: dict[str, typer.Typer] = {}
    for wf, entry in WORKFLOW_TABLE.items():
        for command in entry.commands:
            group = groups.get(command.family)
            if group is None:
                group = groups[command.family] = typer.Typer(
                    help=FAMILIES[command.family], no_args_is_help=True
                )
                app.add_typer(group, name=command.family)
                if entry.label == command.family:
                    app.add_typer(group, name=str(wf), hidden=True)
            _workflow_command(group, command, COMMANDS[command])


_register_commands()


#: the first line of a YAML facts file `discover -o` writes
FACTS_HEADER = "# Facts gathered by `stepwise discover`.\n"


DISCOVER_OUTPUT = typer.Option(None, "--output", "-o", help="Also write a facts file (YAML/JSON).")
DISCOVER_OS_TARGET = typer.Option(None, "--os-target", help="Target OS major to record.")
DISCOVER_FORCE = typer.Option(
    False,
    "--force",
    help="With --output: replace an existing file stepwise "
    "did not write (a facts file it wrote is replaced anyway).",
)


@app.command()
def discover(
    deployment: Path = DEP,
    limit: str | None = LIMIT,
    store: str | None = STORE,
    lab: Path | None = LAB,
    inventory: Path | None = INV,
    extra_vars: list[str] | None = EXTRA,
    output: Path | None = DISCOVER_OUTPUT,
    os_target: int | None = DISCOVER_OS_TARGET,
    json_out: bool = JSON,
    force: bool = DISCOVER_FORCE,
) -> None:
    """Gather installed and available versions and OS majors from the nodes into the store
    (plans use them), and the hashes of the services' configuration (into --output only)."""
    from stepwise.plan.limits import resolve_limit
    from stepwise.run.discover import discover as do_discover

    with reported():
        dep = load_deployment(deployment)
        nodes = resolve_limit(dep, limit)
        ev = parse_extra_vars(extra_vars)
        if output is not None:  # refused before any node is contacted, not after all of them
            _write_facts(output, None, force)
        conn = connector(lab, inventory)
        st = open_cloud_store(dep, store)
        facts = do_discover(
            dep, st, nodes=nodes, extra_vars=ev, connector=conn, os_target=os_target
        )
        if output is not None:
            _write_facts(output, facts, force)
        if json_out:
            print_json(facts)
            return
        changing = sum(
            1
            for nf in facts["nodes"].values()
            for p in nf["packages"].values()
            if p.get("available") and p.get("available") != p.get("installed")
        )
        console.print(
            f"discovered {len(facts['nodes'])} node(s); {changing} package(s) have a newer version"
            + (f"; wrote {output}" if output else ""),
            markup=False,
        )


def _write_facts(output: Path, facts: dict | None, force: bool) -> None:
    """Write discover's facts to `output`; with None, only check that they could be written
    there. A YAML facts file starts with a comment of stepwise's: only such a file (or any
    with --force) is replaced; JSON has no comment, so an existing one needs --force."""
    from stepwise.paths import check_output, write_output
    from stepwise.run.ansible_files import to_yaml

    ours = FACTS_HEADER.encode("utf-8")
    if facts is None:
        check_output(output, field="--output", force=force, ours=ours)
        return
    text = (
        json.dumps(facts, indent=2) + "\n"
        if output.suffix == ".json"
        else FACTS_HEADER + to_yaml(facts)
    )
    write_output(output, text.encode("utf-8"), field="--output", force=force, ours=ours, mode=0o644)


@app.command()
def forget(
    deployment: Path = DEP,
    key: str = typer.Argument(..., help="Marker, e.g. system_upgrade_transfer_data@database-0"),
    store: str | None = STORE,
    yes: bool = YES,
) -> None:
    """Forget that a once-only operation completed (its flag file on the node removed by hand)."""
    from stepwise.run.store.store import existing_store

    with reported():
        dep = load_deployment(deployment)
        st = existing_store(dep, store)
        if st is None or st.marker(dep.name, key) is None:
            raise InputError(Problem(f"no record '{key}' for {dep.name}", field="KEY"))
        confirm(yes)(f"Allow {key} to run again")
        st.clear_marker(dep.name, key)
        console.print(f"forgot {key}", markup=False)
