"""The `stepwise` command: a thin layer over model -> plan -> verify -> run -> observe."""

from __future__ import annotations

import sys

import typer

from stepwise import __version__

app = typer.Typer(
    name="stepwise",
    help="Upgrade a running multi-node cloud without breaking it: "
    "plan, verify, run through Ansible, resume.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion SHELL
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"stepwise {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """stepwise: rolling updates, major upgrades, OS upgrades and management-node upgrades."""


def _register() -> None:
    # Each command family lives in its own module; importing registers it on `app`.
    import importlib

    from stepwise.cli import plan_cmd  # noqa: F401

    for mod in (
        "stepwise.cli.catalog_cmd",
        "stepwise.cli.import_cmd",
        "stepwise.cli.lab_cmd",
        "stepwise.cli.run_cmd",
        "stepwise.cli.observe_cmd",
        "stepwise.cli.export_cmd",
        "stepwise.cli.report_cmd",
        "stepwise.cli.facts_cmd",
    ):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise


def run(argv: list[str] | None = None) -> int:
    """Run the `stepwise` command with `argv` (default: sys.argv[1:]) and return its exit code;
    never raises. Any exception other than bad input is a bug: exit 70, traceback in a log."""
    from stepwise.cli.safety import guarded

    args = list(sys.argv[1:] if argv is None else argv)
    return guarded(lambda: (_register(), app(args=args, prog_name="stepwise")), args)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    # the command modules register on `stepwise.cli.main`, not on this `__main__` copy of it
    from stepwise.cli.main import main as _main

    _main()
