"""Commands that change a cloud, in the words of a TripleO operator: `update run`,
`upgrade prepare|run|converge`, `external-upgrade run --tags ...`, `management-upgrade run`;
and `discover`, `forget`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from stepwise.cli.common import console, err_console, print_json, reported
from stepwise.cli.main import app
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
    PARALLEL,
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
)
from stepwise.errors import InputError, Problem
from stepwise.model import load_deployment
from stepwise.model.vocab import RunState
from stepwise.plan.commands import Command

update_app = typer.Typer(help="Minor update: rolling, with no API downtime.", no_args_is_help=True)
upgrade_app = typer.Typer(
    help="Major upgrade: prepare, run (control plane, then data plane), converge.",
    no_args_is_help=True,
)
external_app = typer.Typer(
    help="Operations run by tag: system_upgrade_prepare/run/transfer_data/cleanup, "
    "online_upgrade, ...",
    no_args_is_help=True,
)
management_app = typer.Typer(help="Upgrade the management node (undercloud).", no_args_is_help=True)
app.add_typer(update_app, name="update")
app.add_typer(upgrade_app, name="upgrade")
app.add_typer(external_app, name="external-upgrade")
app.add_typer(management_app, name="management-upgrade")
app.add_typer(management_app, name="undercloud-upgrade", hidden=True)

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130


def _run(
    title: str,
    command: Command,
    deployment: Path,
    *,
    plane: str | None = None,
    limit: str | None,
    tags: list[str] | None,
    skip_tags: list[str] | None,
    extra_vars: list[str] | None,
    secrets: list[str] | None,
    yes: bool,
    json_out: bool,
    store_url: str | None,
    facts: Path | None,
    lab: Path | None,
    inventory: Path | None,
    fresh: bool,
    rerun: list[str] | None,
    forks: int,
    max_parallel: int,
    max_fail: int,
    keep: bool,
    ask: bool,
) -> None:
    from stepwise.plan import make_plan
    from stepwise.plan.commands import command_selection
    from stepwise.plan.select import split_list
    from stepwise.run.engine import EngineOptions
    from stepwise.run.resume import RunRequest, check_variables, run_plan
    from stepwise.run.store.store import existing_store
    from stepwise.secrets import Redactor, secret_values
    from stepwise.verify import verify_plan

    with reported():
        dep = load_deployment(deployment)
        ev = parse_extra_vars(extra_vars)
        hidden = parse_secrets(secrets)
        # every secret value is masked in whatever is recorded or shown (the command line too)
        redact = Redactor(secret_values(ev, hidden))
        tag_list, skip_list = split_list(tags), split_list(skip_tags)
        if limit is None and ev.get("system_upgrade_nodes"):
            limit = str(
                ev["system_upgrade_nodes"]
            )  # the seed's external-upgrade spelling of --limit
        store = existing_store(dep, store_url)
        progress = store.progress(dep.name) if store is not None else frozenset()
        workflow, selection = command_selection(
            command, progress=progress, limit=limit, tags=tag_list, skip_tags=skip_list, plane=plane
        )
        fx = facts_for(dep, facts, store, workflow)
        variables = {k: ev[k] for k in ("target_release", "system_upgrade_mode") if k in ev}
        # bad input and unsafe plans are refused here, before any file is created
        plan = make_plan(workflow, dep, fx, selection=selection, variables=variables)
        if variables:
            from types import MappingProxyType

            plan = plan.with_units(
                plan.units, params=MappingProxyType({**plan.params, **variables})
            )
        check_variables(plan)
        plan = verify_plan(plan, dep)
        conn = connector(lab, inventory)
        store = store or open_cloud_store(dep, store_url)
        cmd = redact(command_line())
        base = Path(dep.path).resolve().parent / ".stepwise"
        options = EngineOptions(
            extra_vars=ev,
            secrets=hidden,
            redact=redact,
            forks=forks,
            max_fail_percentage=max_fail,
            max_parallel_units=max_parallel,
            connector=conn,
            keep_work_dir=keep,
            continue_command=cmd.replace(" --fresh", ""),
            work_dir=(base / "work") if keep else None,
            persist_dir=base / "persist" / dep.name,
        )
        observer = None
        if not json_out:
            from stepwise.cli.progress import LineProgress, LiveProgress

            observer = (
                LiveProgress(console, title)
                if console.is_terminal
                else LineProgress(err_console, title)
            )
        result = run_plan(
            RunRequest(
                store=store,
                deployment=dep,
                workflow=workflow,
                selection=selection,
                facts=fx,
                variables=variables,
                command=cmd,
                options=options,
                fresh=fresh,
                rerun=split_list(rerun),
                observer=observer,
                plan=plan,
                confirm=confirm(yes) if ask else None,
            )
        )
        if json_out:
            print_json(result.to_json())
        else:
            _say(title, result)
        if result.status is RunState.INTERRUPTED:
            raise typer.Exit(EXIT_INTERRUPTED)
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
                    "interrupted: " if result.status is RunState.INTERRUPTED else "failed: ",
                    "bold red",
                ),
                result.message,
            ),
            soft_wrap=True,
        )


def _workflow_command(
    group: typer.Typer,
    name: str,
    title: str,
    command: Command,
    ask: bool,
    doc: str,
    with_plane: bool = False,
) -> None:
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
        plane: str | None = typer.Option(
            None, "--plane", help="control | data (upgrade run only).", hidden=not with_plane
        ),
    ) -> None:
        _run(
            title,
            command,
            deployment,
            plane=plane,
            limit=limit,
            tags=tags,
            skip_tags=skip_tags,
            extra_vars=extra_vars,
            secrets=secret,
            yes=yes,
            json_out=json_out,
            store_url=store,
            facts=facts,
            lab=lab,
            inventory=inventory,
            fresh=fresh,
            rerun=rerun,
            forks=forks,
            max_parallel=max_parallel,
            max_fail=max_fail,
            keep=keep,
            ask=ask or fresh,
        )

    cmd.__doc__ = doc
    group.command(name)(cmd)


_workflow_command(
    update_app,
    "run",
    "update",
    Command.UPDATE_RUN,
    False,
    "Run the minor update (rolling; continues an unfinished update run).",
)
_workflow_command(
    upgrade_app,
    "prepare",
    "upgrade prepare",
    Command.UPGRADE_PREPARE,
    True,
    "Validations, repositories of -e target_release, backup, pin RPC: the upgrade's first stage "
    "(the OS upgrade's step 1).",
)
_workflow_command(
    upgrade_app,
    "run",
    "upgrade run",
    Command.UPGRADE_RUN,
    True,
    "Upgrade nodes (--plane control|data to split). With --tags system_upgrade_prepare|"
    "system_upgrade_run --limit NODES the OS upgrade's prepare or reboot of those nodes; while an "
    "OS upgrade is under way, --limit NODES upgrades nodes that run the new OS (its step 6).",
    with_plane=True,
)
_workflow_command(
    upgrade_app,
    "converge",
    "upgrade converge",
    Command.UPGRADE_CONVERGE,
    True,
    "Unpin RPC, online data migrations, re-assert state: the upgrade's last stage.",
)
_workflow_command(
    external_app,
    "run",
    "external-upgrade",
    Command.EXTERNAL_UPGRADE_RUN,
    True,
    "The OS upgrade's operations of external installers and of the whole cloud, by tag: "
    "system_upgrade_prepare / system_upgrade_run (ceph), system_upgrade_transfer_data (--limit "
    "roles), online_upgrade, system_upgrade_cleanup; -e system_upgrade_nodes=... works as --limit.",
)
_workflow_command(
    management_app,
    "run",
    "management upgrade",
    Command.MANAGEMENT_UPGRADE_RUN,
    True,
    "Upgrade the management node (undercloud): the tool first, dump the database while it runs, "
    "stop every service, all packages, restore, re-run install, every DB sync. With --tags "
    "system_upgrade_prepare|system_upgrade_run --limit NODE its own OS upgrade first.",
)


#: the first line of a YAML facts file `discover -o` writes
FACTS_HEADER = "# Facts gathered by `stepwise discover`.\n"


@app.command()
def discover(
    deployment: Path = DEP,
    limit: str | None = LIMIT,
    store: str | None = STORE,
    lab: Path | None = LAB,
    inventory: Path | None = INV,
    extra_vars: list[str] | None = EXTRA,
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Also write a facts file (YAML/JSON)."
    ),
    os_target: int | None = typer.Option(None, "--os-target", help="Target OS major to record."),
    json_out: bool = JSON,
    force: bool = typer.Option(
        False,
        "--force",
        help="With --output: replace an existing file stepwise "
        "did not write (a facts file it wrote is replaced anyway).",
    ),
) -> None:
    """Gather installed and available versions and OS majors from the nodes into the store
    (plans use them)."""
    from stepwise.plan.limits import resolve_limit
    from stepwise.run.ansible_files import to_yaml
    from stepwise.run.discover import discover as do_discover

    with reported():
        dep = load_deployment(deployment)
        nodes = resolve_limit(dep, limit)
        ev = parse_extra_vars(extra_vars)
        conn = connector(lab, inventory)
        st = open_cloud_store(dep, store)
        facts = do_discover(
            dep, st, nodes=nodes, extra_vars=ev, connector=conn, os_target=os_target
        )
        if output is not None:
            from stepwise.paths import write_output

            # a YAML facts file starts with a comment of stepwise's: only such a file (or any
            # with --force) is replaced; JSON has no comment, so an existing one needs --force
            text = (
                json.dumps(facts, indent=2) + "\n"
                if output.suffix == ".json"
                else FACTS_HEADER + to_yaml(facts)
            )
            write_output(
                output,
                text.encode("utf-8"),
                field="--output",
                force=force,
                ours=FACTS_HEADER.encode("utf-8"),
                mode=0o644,
            )
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


try:  # the demo needs the lab; without it the rest of the commands still work
    from stepwise.cli import demo_cmd  # noqa: F401,E402
except ImportError:
    pass
