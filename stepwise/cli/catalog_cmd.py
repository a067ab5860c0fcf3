"""`stepwise catalog list`: every service a deployment can name, with its aliases."""

from __future__ import annotations

from pathlib import Path

import typer

from stepwise.cli.app import app
from stepwise.cli.common import console, print_json, reported

catalog_app = typer.Typer(
    help="The service catalog: what each service is and the names it answers to.",
    no_args_is_help=True,
)
app.add_typer(catalog_app, name="catalog")

CATALOG_OPT = typer.Option(
    None,
    "--catalog",
    "-c",
    metavar="DIR",
    help="A catalog directory (default: the built-in one).",
)


@catalog_app.command("list")
def list_services(
    catalog: Path | None = CATALOG_OPT,
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List every service: name, plane, whether it has a runtime, and its aliases."""
    from stepwise.model import load_catalog

    with reported():
        cat = load_catalog(catalog)
        rows = [
            {
                "name": s.name,
                "plane": s.plane,
                "runtime": s.has_runtime,
                "aliases": list(s.aliases),
                "packages": list(s.packages),
                "cluster": s.cluster,
                "source": s.source,
            }
            for s in cat
        ]
        if json_out:
            print_json({"catalog": cat.path, "services": rows})
            return
        from rich.text import Text

        # one line per service, never wrapped: aliases stay whole for grep and copy-paste
        console.print(Text(f"{len(rows)} services in {cat.path}"), soft_wrap=True)
        width = max(len(r["name"]) for r in rows)
        console.print(
            Text(f"{'service':<{width}}  {'plane':<7}  {'runtime':<7}  aliases", style="bold"),
            soft_wrap=True,
        )
        for r in rows:
            # data as Text: a catalog's names and aliases never become markup
            console.print(
                Text(
                    f"{r['name']:<{width}}  {r['plane']:<7}  "
                    f"{'yes' if r['runtime'] else 'none':<7}  " + ", ".join(r["aliases"])
                ),
                soft_wrap=True,
            )


@catalog_app.command("lint")
def lint(
    catalog: Path | None = CATALOG_OPT,
    strict: bool = typer.Option(
        False, "--strict", help="Findings are errors (exit 2), as in CI; default: warnings."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Check the catalog's tasks against ansible-lint's main rules (task names, modules instead
    of commands, changed_when, shell and pipes): each finding with its file and line."""
    import dataclasses

    from stepwise.errors import InputError
    from stepwise.model import load_catalog

    with reported():
        cat = load_catalog(catalog)
        if strict and cat.lint:
            raise InputError(list(cat.lint))
        if json_out:
            print_json({"catalog": cat.path, "warnings": [dataclasses.asdict(p) for p in cat.lint]})
            return
        from rich.text import Text

        from stepwise.cli.common import err_console

        for p in cat.lint:
            # a finding quotes the catalog's text: printed as text, never as markup
            err_console.print(
                Text.assemble(("warning:", "bold yellow"), " ", str(p)), soft_wrap=True
            )
        console.print(
            Text(f"{len(cat.lint)} finding(s) in {len(cat)} services of {cat.path}"),
            soft_wrap=True,
        )
