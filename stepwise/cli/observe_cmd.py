"""Commands that look at a cloud without touching it: `status` and `history` (the store only)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from stepwise.cli.app import app
from stepwise.cli.common import console, print_json, reported
from stepwise.cli.options import DEP, JSON, STORE
from stepwise.model import load_deployment
from stepwise.model.vocab import RunState, UnitState


@app.command()
def status(deployment: Path = DEP, store: str | None = STORE, json_out: bool = JSON) -> None:
    """Per node and service: version and state; the current run and where it is."""
    from stepwise.observe.status import status as do_status
    from stepwise.run.resume import lock_path_for
    from stepwise.run.store.store import existing_store

    with reported():
        dep = load_deployment(deployment)
        st = existing_store(dep, store)
        if st is None:
            data = {"cloud": dep.name, "lock": None, "run": None, "nodes": {}}
        else:
            data = do_status(st, dep.name, lock_path_for(dep, dep.name))
        if json_out:
            print_json(data)
            return
        run = data["run"]
        if run:
            line = Text(
                f"run {run['id']} ({run['workflow']} "
                + " ".join(
                    f"{k}={v}"
                    for k, v in run["params"].items()
                    if k in ("stage", "plane", "limit", "tags")
                )
                + "): "
            )
            line.append(run["status"], style="bold")
            line.append(
                f", {run['units'].get(UnitState.DONE, 0)}/{run['units']['total']} units done"
                + (
                    f", now {', '.join(run['current'])}"
                    if run["current"] and RunState(run["status"]).live
                    else ""
                )
                + (f"; {run['message']}" if run["message"] else "")
            )
            console.print(line, soft_wrap=True)
        else:
            console.print("no run recorded for this cloud yet", markup=False)
        t = Table("node", "os", "service", "version", "state", box=None)
        for node, info in data["nodes"].items():
            first = True
            for svc, s in info["services"].items():
                t.add_row(
                    Text(node if first else ""),
                    Text(str((info["os"] or {}).get("major", "")) if first else ""),
                    Text(svc),
                    Text(s["version"] or "?"),
                    Text(s["state"]),
                )
                first = False
        console.print(t)


@app.command()
def history(
    deployment: Path = DEP,
    store: str | None = STORE,
    run: int | None = typer.Option(
        None, "--run", help="Show one run's units and failures.", min=1, max=2**62
    ),
    limit: int = typer.Option(20, "--last", help="How many runs to list.", min=1, max=10000),
    json_out: bool = JSON,
) -> None:
    """The runs on this cloud, or one run's units, attempts and failures."""
    from stepwise.errors import InputError, Problem
    from stepwise.observe.status import history as do_history
    from stepwise.run.resume import lock_path_for
    from stepwise.run.store.store import existing_store

    with reported():
        dep = load_deployment(deployment)
        st = existing_store(dep, store)
        if st is None:
            if run is not None:
                raise InputError(
                    Problem(
                        f"no run {run} for cloud {dep.name}: nothing was recorded yet",
                        field="--run",
                    )
                )
            data = {"cloud": dep.name, "runs": []}
        else:
            data = do_history(st, dep.name, run, limit, lock_path_for(dep, dep.name))
        if json_out:
            print_json(data)
            return
        if run is None:
            for r in data["runs"]:
                console.print(
                    f"{r['id']:>4} {r['started_at']} {r['workflow']:<18} {r['status']:<11} "
                    f"{r['units'].get(UnitState.DONE, 0)}/{r['units']['total']} units  "
                    f"{r['command']}",
                    markup=False,
                    soft_wrap=True,
                )
            if not data["runs"]:
                console.print("no run recorded for this cloud yet", markup=False)
            return
        for u in data["units"]:
            console.print(
                f"{u['state']:<11} x{u['attempts']} {u['id']:<6} {u['step']:<28} "
                f"{','.join(u['nodes'][:4])}" + (f"  {u['message']}" if u["message"] else ""),
                markup=False,
                soft_wrap=True,
            )
        for f in data["failures"]:
            console.print(
                f"FAILED {f['host']}: {f['task']} ({f['unit']}): {f['message']}",
                markup=False,
                soft_wrap=True,
            )
