"""Shared CLI plumbing: one way to report errors and print JSON, so every command behaves alike."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import typer
from rich.console import Console

from stepwise.errors import StepwiseError

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


@contextmanager
def reported() -> Iterator[None]:
    """Turn StepwiseError into a clear message and its exit code; never a traceback."""
    try:
        yield
    except StepwiseError as exc:
        kind = "error"
        if exc.exit_code == 3:
            kind = "refused"
        for p in exc.problems:
            err_console.print(f"[bold red]{kind}:[/] {p}", markup=True, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        raise typer.Exit(130) from None


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()
