"""Commands that change a cloud, in the words of a TripleO operator: `update run`,
`upgrade prepare|run|converge`, `external-upgrade run --tags ...`, `management-upgrade run`;
and those that look at it: `discover`, `status`, `history`, `export`; and `demo`."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

from stepwise.cli.common import console, err_console, print_json, reported
from stepwise.cli.main import app
from stepwise.errors import InputError, Problem, StepwiseError
from stepwise.model import NO_FACTS, Deployment, load_deployment, load_facts
from stepwise.run.discover import stored_facts

DEP = typer.Option(..., "--deployment", "-d", help="The deployment YAML.", metavar="PATH")
LIMIT = typer.Option(None, "--limit", "-l", help="Ansible-style: nodes, roles, globs, '!x', '&x', comma-separated.")
TAGS = typer.Option(None, "--tags", "-t", help="Run only units with these tags or steps (comma-separated, repeatable).")
SKIP = typer.Option(None, "--skip-tags", help="Skip units with these tags or steps.")
EXTRA = typer.Option(None, "--extra-vars", "-e", help="key=value, JSON, or @file (repeatable), as ansible-playbook.")
YES = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")
JSON = typer.Option(False, "--json", help="Print a JSON result (for scripts) instead of live progress.")
STORE = typer.Option(None, "--store", help="State store URL (default: .stepwise/<cloud>.sqlite next to the "
                     "deployment; or $STEPWISE_STORE). PostgreSQL: postgresql+psycopg://user:pw@host/db")
FACTS = typer.Option(None, "--facts", help="Facts file; default: what `stepwise discover` stored.")
LAB = typer.Option(None, "--lab", help="Run against a lab directory (its connection and inventory).", metavar="DIR")
INV = typer.Option(None, "--inventory", "-i", help="Inventory (YAML/JSON) whose host vars override the deployment's "
                   "(e.g. SSH user, key, port).", metavar="PATH")
FRESH = typer.Option(False, "--fresh", help="Start a new run instead of continuing an unfinished one.")
RERUN = typer.Option(None, "--rerun", help="Run this completed unit again (repeatable; never a once-only unit).")
FORKS = typer.Option(50, "--forks", help="Parallel hosts per task, as Ansible's --forks.")
MAXFAIL = typer.Option(0, "--max-fail-percentage", help="Failed hosts tolerated per unit/batch (%) before the run stops.")
KEEP = typer.Option(False, "--keep-artifacts", help="Keep the rendered playbook and Ansible artifacts.")

update_app = typer.Typer(help="Minor update: rolling, with no API downtime.", no_args_is_help=True)
upgrade_app = typer.Typer(help="Major upgrade: prepare, run (control plane, then data plane), converge.",
                          no_args_is_help=True)
external_app = typer.Typer(help="Operations run by tag: system_upgrade_prepare/run/transfer_data/cleanup, "
                           "online_upgrade, ...", no_args_is_help=True)
management_app = typer.Typer(help="Upgrade the management node (undercloud).", no_args_is_help=True)
app.add_typer(update_app, name="update")
app.add_typer(upgrade_app, name="upgrade")
app.add_typer(external_app, name="external-upgrade")
app.add_typer(management_app, name="management-upgrade")
app.add_typer(management_app, name="undercloud-upgrade", hidden=True)


# -- helpers ------------------------------------------------------------------------------
def parse_extra_vars(values: list[str] | None) -> dict[str, Any]:
    """`-e` as ansible-playbook: key=value pairs, a JSON/YAML mapping, or @file."""
    out: dict[str, Any] = {}
    for v in values or []:
        v = v.strip()
        if v.startswith("@"):
            path = Path(v[1:])
            if not path.is_file():
                raise InputError(Problem(f"extra-vars file not found: {path}", field="-e"))
            from ruamel.yaml import YAML
            data = YAML(typ="safe").load(path.read_text())
            if not isinstance(data, dict):
                raise InputError(Problem("extra-vars file must hold a mapping", file=str(path), field="-e"))
            out.update(data)
        elif v.startswith("{"):
            try:
                data = json.loads(v)
            except ValueError as exc:
                raise InputError(Problem(f"-e '{v}' is not valid JSON: {exc}", field="-e")) from None
            out.update(data)
        else:
            for pair in shlex.split(v):
                if "=" not in pair:
                    raise InputError(Problem(f"-e '{pair}' is not key=value", field="-e",
                                             hint="use -e key=value, -e '{\"key\": 1}' or -e @vars.yml"))
                k, val = pair.split("=", 1)
                out[k] = val
    return out


def open_cloud_store(deployment: Deployment, url: str | None):
    from stepwise.run.store import default_store_url, open_store
    return open_store(default_store_url(deployment.path, deployment.name, url))


def _overrides(lab: Path | None, inv: Path | None) -> dict[str, Any] | None:
    over: dict[str, Any] = {"all": {"children": {}}}
    if lab is not None:
        try:
            from stepwise.lab import inventory as lab_inventory  # type: ignore[attr-defined]
        except ImportError:
            raise StepwiseError("this stepwise has no lab (stepwise.lab.inventory is missing)") from None
        over["all"]["children"]["lab"] = lab_inventory(lab).get("all", lab_inventory(lab))
    if inv is not None:
        if not inv.is_file():
            raise InputError(Problem("inventory file not found", file=str(inv), field="--inventory"))
        from ruamel.yaml import YAML
        data = YAML(typ="safe").load(inv.read_text()) or {}
        over["all"]["children"]["given"] = data.get("all", data)
    return over if over["all"]["children"] else None


def _confirm(what: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise InputError(Problem(f"{what} needs confirmation and there is no terminal to ask on",
                                 hint="add --yes to confirm"))
    if not typer.confirm(f"{what}. Continue?", default=False):
        raise typer.Exit(1)


def _command_line() -> str:
    return "stepwise " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _run(title: str, workflow: str, deployment: Path, *, stage: str | None = None, plane: str | None = None,
         limit: str | None, tags: list[str] | None, skip_tags: list[str] | None, extra_vars: list[str] | None,
         yes: bool, json_out: bool, store_url: str | None, facts: Path | None, lab: Path | None,
         inventory: Path | None, fresh: bool, rerun: list[str] | None, forks: int, max_fail: int, keep: bool,
         confirm: str | None = None) -> None:
    from stepwise.plan import make_plan
    from stepwise.run.engine import EngineOptions
    from stepwise.run.resume import RunRequest, run_plan
    from stepwise.run.selection import select, split_list

    with reported():
        dep = load_deployment(deployment)
        ev = parse_extra_vars(extra_vars)
        tag_list, skip_list = split_list(tags), split_list(skip_tags)
        if limit is None and ev.get("system_upgrade_nodes") and any(t.startswith("system_upgrade_") for t in tag_list):
            limit = str(ev["system_upgrade_nodes"])  # the seed's external-upgrade spelling of --limit
        if max_fail < 0 or max_fail > 100:
            raise InputError(Problem("--max-fail-percentage must be between 0 and 100", field="--max-fail-percentage"))
        store = open_cloud_store(dep, store_url)
        if workflow == "upgrade" and any(t.startswith("system_upgrade_") for t in tag_list):
            workflow = "system-upgrade"  # `upgrade run --tags system_upgrade_run --limit ...` (the seed)
            stage = plane = None
        if facts:
            fx = load_facts(facts, dep)
        elif workflow in ("update", "undercloud-upgrade"):
            fx = stored_facts(dep, store)
        else:
            # Discovered versions are those of the current release's repositories: they
            # cannot say what a major upgrade changes (everything does, unless --facts says).
            fx = NO_FACTS
        plan = make_plan(workflow, dep, fx, limit, **({"stage": stage} if stage else {}),
                         **({"plane": plane} if plane else {}))
        try:
            from stepwise.verify import verify_plan
        except ImportError:
            verify_plan = None
        if verify_plan is not None:
            plan = verify_plan(plan, dep) or plan
        plan = select(plan, dep, limit=limit, tags=tag_list, skip_tags=skip_list)
        if ev:
            from types import MappingProxyType
            plan = plan.with_units(plan.units, params=MappingProxyType({**plan.params, **{
                k: ev[k] for k in ("target_release", "system_upgrade_source") if k in ev}}))
        overrides = _overrides(lab, inventory)
        n_nodes = len({n for u in plan.units for n in u.nodes})
        if confirm:
            _confirm(f"{confirm}: {len(plan.units)} units on {n_nodes} node(s) of {dep.name}", yes)
        options = EngineOptions(extra_vars=ev, forks=forks, max_fail_percentage=max_fail, inventory_overrides=overrides,
                                keep_work_dir=keep, continue_command=_command_line().replace(" --fresh", ""),
                                work_dir=(Path(dep.path).resolve().parent / ".stepwise" / "work") if keep else None)
        observer = None
        if not json_out:
            from stepwise.cli.progress import LineProgress, LiveProgress
            observer = LiveProgress(console, title) if console.is_terminal else LineProgress(err_console, title)
        result = run_plan(RunRequest(store=store, deployment=dep, plan=plan, command=_command_line(), options=options,
                                     fresh=fresh, rerun=split_list(rerun), observer=observer))
        if json_out:
            print_json(result.to_json())
        else:
            if result.stale_lock:
                err_console.print(f"note: took over a stale lock of a dead process (pid {result.stale_lock.get('pid')})")
            if result.ok:
                console.print(f"[green]{title}: run {result.run_id} {('finished' if result.status == 'done' else 'had nothing left to do')}[/]"
                              f" ({result.units_done}/{result.units_total} units, {result.elapsed_s:.1f}s"
                              + (f", {result.units_reused} done before" if result.units_reused else "") + ")")
            else:
                err_console.print(f"[bold red]failed:[/] {result.message}", soft_wrap=True)
        if not result.ok:
            raise typer.Exit(1)


def _workflow_command(group: typer.Typer, name: str, title: str, workflow: str, stage: str | None,
                      confirm: str | None, doc: str, with_plane: bool = False) -> None:
    def cmd(deployment: Path = DEP, limit: Optional[str] = LIMIT, tags: Optional[List[str]] = TAGS,
            skip_tags: Optional[List[str]] = SKIP, extra_vars: Optional[List[str]] = EXTRA, yes: bool = YES,
            json_out: bool = JSON, store: Optional[str] = STORE, facts: Optional[Path] = FACTS,
            lab: Optional[Path] = LAB, inventory: Optional[Path] = INV, fresh: bool = FRESH,
            rerun: Optional[List[str]] = RERUN, forks: int = FORKS, max_fail: int = MAXFAIL, keep: bool = KEEP,
            plane: Optional[str] = typer.Option(None, "--plane", help="control | data (upgrade run only).",
                                                hidden=not with_plane)) -> None:
        _run(title, workflow, deployment, stage=stage, plane=plane, limit=limit, tags=tags, skip_tags=skip_tags,
             extra_vars=extra_vars, yes=yes, json_out=json_out, store_url=store, facts=facts, lab=lab,
             inventory=inventory, fresh=fresh, rerun=rerun, forks=forks, max_fail=max_fail, keep=keep,
             confirm=confirm)
    cmd.__doc__ = doc
    group.command(name)(cmd)


_workflow_command(update_app, "run", "update", "update", None, None,
                  "Run the minor update (rolling; continues an unfinished update run).")
_workflow_command(upgrade_app, "prepare", "upgrade prepare", "upgrade", "prepare", "Prepare the major upgrade",
                  "Validations, backup, pin RPC: the upgrade's first stage.")
_workflow_command(upgrade_app, "run", "upgrade run", "upgrade", "run", "Run the major upgrade",
                  "Upgrade nodes (--plane control|data to split); with --tags system_upgrade_* the OS upgrade "
                  "of the --limit nodes.", with_plane=True)
_workflow_command(upgrade_app, "converge", "upgrade converge", "upgrade", "converge", "Converge the major upgrade",
                  "Unpin RPC, online data migrations, re-assert state: the upgrade's last stage.")
_workflow_command(external_app, "run", "external-upgrade", "system-upgrade", None, "Run external upgrade tasks",
                  "Run system_upgrade_* (or other) operations by tag; -e system_upgrade_nodes=... works as --limit.")
_workflow_command(management_app, "run", "management upgrade", "undercloud-upgrade", None,
                  "Upgrade the management node", "Upgrade the management node (undercloud): stop services, "
                  "update the tool first, then all packages, re-run install, every DB sync.")


@app.command()
def discover(deployment: Path = DEP, limit: Optional[str] = LIMIT, store: Optional[str] = STORE,
             lab: Optional[Path] = LAB, inventory: Optional[Path] = INV, extra_vars: Optional[List[str]] = EXTRA,
             output: Optional[Path] = typer.Option(None, "--output", "-o", help="Also write a facts file (YAML/JSON)."),
             os_target: Optional[int] = typer.Option(None, "--os-target", help="Target OS major to record."),
             json_out: bool = JSON) -> None:
    """Gather installed and available versions from the nodes into the store (plans use them)."""
    from stepwise.plan.limits import resolve_limit
    from stepwise.run.discover import discover as do_discover

    with reported():
        dep = load_deployment(deployment)
        nodes = resolve_limit(dep, limit)
        st = open_cloud_store(dep, store)
        facts = do_discover(dep, st, nodes=nodes, extra_vars=parse_extra_vars(extra_vars),
                            inventory_overrides=_overrides(lab, inventory), os_target=os_target)
        if output is not None:
            if output.suffix == ".json":
                output.write_text(json.dumps(facts, indent=2) + "\n")
            else:
                from stepwise.run.export import to_yaml
                output.write_text(to_yaml(facts))
        if json_out:
            print_json(facts)
            return
        changing = sum(1 for nf in facts["nodes"].values() for p in nf["packages"].values()
                       if p.get("available") and p.get("available") != p.get("installed"))
        console.print(f"discovered {len(facts['nodes'])} node(s); {changing} package(s) have a newer version"
                      + (f"; wrote {output}" if output else ""))


@app.command()
def status(deployment: Path = DEP, store: Optional[str] = STORE, json_out: bool = JSON) -> None:
    """Per node and service: version and state; the current run and where it is."""
    from stepwise.observe.status import status as do_status
    from stepwise.run.resume import lock_path_for

    with reported():
        dep = load_deployment(deployment)
        st = open_cloud_store(dep, store)
        data = do_status(st, dep.name, lock_path_for(dep, dep.name))
        if json_out:
            print_json(data)
            return
        from rich.table import Table
        run = data["run"]
        if run:
            console.print(f"run {run['id']} ({run['workflow']} {' '.join(f'{k}={v}' for k, v in run['params'].items() if k != 'facts')}):"
                          f" [bold]{run['status']}[/], {run['units'].get('done', 0)}/{run['units']['total']} units done"
                          + (f", now {', '.join(run['current'])}" if run['current'] and run['status'] == 'running' else "")
                          + (f"; {run['message']}" if run['message'] else ""), soft_wrap=True)
        else:
            console.print("no run yet")
        t = Table("node", "os", "service", "version", "state", box=None)
        for node, info in data["nodes"].items():
            first = True
            for svc, s in info["services"].items():
                t.add_row(node if first else "", str((info["os"] or {}).get("major", "")) if first else "", svc,
                          s["version"] or "?", s["state"])
                first = False
        console.print(t)


@app.command()
def history(deployment: Path = DEP, store: Optional[str] = STORE,
            run: Optional[int] = typer.Option(None, "--run", help="Show one run's units and failures."),
            limit: int = typer.Option(20, "--last", help="How many runs to list."), json_out: bool = JSON) -> None:
    """The runs on this cloud, or one run's units, attempts and failures."""
    from stepwise.observe.status import history as do_history
    from stepwise.run.resume import lock_path_for

    with reported():
        dep = load_deployment(deployment)
        st = open_cloud_store(dep, store)
        data = do_history(st, dep.name, run, limit, lock_path_for(dep, dep.name))
        if json_out:
            print_json(data)
            return
        if run is None:
            for r in data["runs"]:
                console.print(f"{r['id']:>4} {r['started_at']} {r['workflow']:<18} {r['status']:<11} "
                              f"{r['units'].get('done', 0)}/{r['units']['total']} units  {r['command']}",
                              markup=False, soft_wrap=True)
            return
        for u in data["units"]:
            console.print(f"{u['state']:<8} x{u['attempts']} {u['id']}" + (f"  {u['message']}" if u["message"] else ""),
                          markup=False, soft_wrap=True)
        for f in data["failures"]:
            console.print(f"FAILED {f['host']}: {f['task']} ({f['unit']}): {f['message']}", markup=False, soft_wrap=True)


@app.command()
def export(workflow: str = typer.Argument(..., metavar="WORKFLOW", help="update | upgrade | system-upgrade | "
                                          "undercloud-upgrade"),
           deployment: Path = DEP, output: Path = typer.Option(..., "--output", "-o", help="Directory to write."),
           limit: Optional[str] = LIMIT, stage: Optional[str] = typer.Option(None, "--stage"),
           plane: Optional[str] = typer.Option(None, "--plane"), facts: Optional[Path] = FACTS,
           store: Optional[str] = STORE, lab: Optional[Path] = LAB, inventory: Optional[Path] = INV) -> None:
    """Write the plan as standalone playbooks (site.yml, one file per unit, inventory, ansible.cfg)."""
    from stepwise.plan import make_plan
    from stepwise.run.export import export as do_export

    with reported():
        dep = load_deployment(deployment)
        if facts:
            fx = load_facts(facts, dep)
        else:
            fx = stored_facts(dep, open_cloud_store(dep, store)) if (store or os.environ.get("STEPWISE_STORE") or
                 (Path(dep.path).resolve().parent / ".stepwise" / f"{dep.name}.sqlite").exists()) else NO_FACTS
        plan = make_plan(workflow, dep, fx, limit, **({"stage": stage} if stage else {}),
                         **({"plane": plane} if plane else {}))
        files = do_export(plan, dep, output, inventory_overrides=_overrides(lab, inventory))
        console.print(f"wrote {len(files)} files to {output}: ansible-playbook -i {output}/inventory.yml {output}/site.yml")


@app.command()
def forget(deployment: Path = DEP, key: str = typer.Argument(..., help="Marker, e.g. system_upgrade_transfer_data@database-0"),
           store: Optional[str] = STORE, yes: bool = YES) -> None:
    """Forget that a once-only operation ran (after removing its flag file on the node by hand)."""
    with reported():
        dep = load_deployment(deployment)
        st = open_cloud_store(dep, store)
        if st.marker(dep.name, key) is None:
            raise InputError(Problem(f"no record '{key}' for {dep.name}", field="KEY"))
        _confirm(f"Allow {key} to run again", yes)
        st.clear_marker(dep.name, key)
        console.print(f"forgot {key}")


try:  # the demo needs the lab; without it the rest of the commands still work
    from stepwise.cli import demo_cmd  # noqa: F401,E402
except ImportError:
    pass
