"""The `stepwise` typer application that every command module registers on.

It lives apart from `main.py` so that a command module imports only this (never the entry
point), and `main.py` imports the command modules to register them: no import runs in a
circle.
"""

from __future__ import annotations

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
