"""`stepwise facts template`: a facts file to fill in, for operators who give facts by hand."""

from __future__ import annotations

from pathlib import Path

import typer

from stepwise.cli.app import app
from stepwise.cli.common import console, print_json, reported
from stepwise.cli.options import DEP

facts_app = typer.Typer(
    help="Facts files: installed and available versions per node (docs/facts.md).",
    no_args_is_help=True,
)
app.add_typer(facts_app, name="facts")

#: the first line of a template stepwise wrote (such a file is replaced without --force)
HEADER = "# stepwise facts template"


def _template_text(doc: dict) -> str:
    """The template as written: the constant header, then the document. Node and package names
    are data: serialised by the YAML library, never put in the comment."""
    import yaml

    return (
        f"{HEADER}: fill in the versions (a package whose available version differs from the\n"
        "# installed one changes); `stepwise plan ... --facts FILE` reads it. "
        "Format: docs/facts.md\n"
        # libyaml's emitter where PyYAML has it (the loader reads with it too): the same
        # text, about 3x faster than the pure-Python one on a 4,000-node template
        + yaml.dump(
            doc,
            Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
            sort_keys=False,
            default_flow_style=None,
            width=120,
        )
    )


def _say_written(output: str, doc: dict, json_out: bool) -> None:
    """What was written: its nodes and the package entries to fill in (once, in the shared
    form's defaults)."""
    shared = len(doc["defaults"].get("packages", {}))
    packages = shared or sum(len(n["packages"]) for n in doc["nodes"].values())
    if json_out:
        print_json({"wrote": output, "nodes": len(doc["nodes"]), "packages": packages})
        return
    where = " (in defaults: every node reads them; override a node under nodes)" if shared else ""
    console.print(
        f"wrote {output}: {len(doc['nodes'])} node(s), {packages} package entries to fill in"
        + where,
        markup=False,
        soft_wrap=True,
    )


@facts_app.command("template")
def template_cmd(
    deployment: Path = DEP,
    output: str = typer.Option(
        ..., "--output", "-o", metavar="FILE", help="The facts file to write ('-': stdout)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace a file stepwise did not write."),
    per_node: bool | None = typer.Option(
        None,
        "--per-node/--shared",
        help="Every node with its packages (the default up to 1,000 nodes), or what nodes share "
        "once in `defaults` with an empty entry per node to override (the default above: a "
        "per-node template of a large cloud is larger than the facts loader reads).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write a facts skeleton for a deployment: every node with the packages of its services,
    versions left empty to fill in (`installed`, `available`), the OS major and target."""
    from stepwise.errors import InputError, Problem
    from stepwise.model import load_deployment
    from stepwise.model.facts_template import facts_template
    from stepwise.paths import write_output

    with reported():
        doc = facts_template(load_deployment(deployment), per_node=per_node)
        text = _template_text(doc)
        if output == "-":
            if json_out:
                raise InputError(
                    Problem(
                        "--json prints what was written: give a file with -o FILE", field="--json"
                    )
                )
            typer.echo(text, nl=False)
            return
        write_output(
            output,
            text.encode("utf-8"),
            field="--output",
            force=force,
            ours=HEADER.encode("utf-8"),
            mode=0o644,
        )
        _say_written(output, doc, json_out)
