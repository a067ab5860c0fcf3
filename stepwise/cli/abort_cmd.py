"""`stepwise abort`: ask the cloud's running run to stop at its next safe point."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from stepwise.cli.app import app
from stepwise.cli.common import console, err_console, print_json, reported
from stepwise.cli.options import DEP, JSON, STORE
from stepwise.model import load_deployment
from stepwise.model.vocab import RunState

WAIT = typer.Option(
    True,
    "--wait/--no-wait",
    help="Wait until the run has stopped at its safe point (default) or return at once.",
)


@app.command()
def abort(
    deployment: Path = DEP, store: str | None = STORE, wait: bool = WAIT, json_out: bool = JSON
) -> None:
    """Stop the running run at the next safe point: the units running and the rest of their
    batches finish, nothing else starts, every service keeps serving; the same command
    continues it later."""
    from stepwise.run.abort import request_abort, running_run, wait_for_end
    from stepwise.run.resume import lock_path_for
    from stepwise.run.store.store import existing_store

    with reported():
        dep = load_deployment(deployment)
        st = existing_store(dep, store)
        lock_path = lock_path_for(dep, dep.name)
        run = running_run(st, dep.name, lock_path)
        assert st is not None  # running_run refuses a cloud without a store
        asked = request_abort(st, run)
        if not json_out:
            console.print(
                Text(
                    f"run {run.id} ({run.workflow}) "
                    + ("asked to stop" if asked else "was already asked to stop")
                    + " at its next safe point: the units running and the rest of their batches "
                    "finish, nothing else starts"
                    + ("; waiting for it" if wait else "; `stepwise status` shows when it ends")
                ),
                soft_wrap=True,
            )
        if not wait:
            if json_out:
                print_json({"run_id": run.id, "status": str(RunState.ABORTING), "message": ""})
            return
        end = wait_for_end(st, dep.name, run.id, lock_path)
    _ended(end, json_out)


def _ended(run, json_out: bool) -> None:
    """Say how the run ended: aborted (or done, if it finished first) exits 0."""
    if json_out:
        print_json({"run_id": run.id, "status": str(run.status), "message": run.message})
    else:
        ok = run.status in (RunState.ABORTED, RunState.DONE)
        (console if ok else err_console).print(
            Text.assemble(
                (f"run {run.id} {run.status}: ", "bold green" if ok else "bold red"),
                run.message or ("its process is gone" if run.status.live else ""),
            ),
            soft_wrap=True,
        )
    if run.status not in (RunState.ABORTED, RunState.DONE):
        raise typer.Exit(1)
