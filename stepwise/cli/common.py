"""Shared CLI plumbing: one way to report errors and print JSON, so every command behaves alike."""

from __future__ import annotations

import dataclasses
import errno
import gc
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, BinaryIO

import typer
from rich.console import Console
from rich.text import Text

from stepwise.errors import Problem, StepwiseError


def _width(stream: Any) -> int | None:
    """No wrapping into a pipe or file: a script or `grep` reads whole lines. Rich's default
    there is 80 columns; $COLUMNS still decides when set, a terminal decides for itself."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return None if tty or os.environ.get("COLUMNS") else UNWRAPPED


#: the width of output that is not a terminal: wide enough that no line of stepwise's wraps
UNWRAPPED = 4000
#: the $COLUMNS and $LINES taken as they are; anything else is as if unset
SANE_SIZE = {"COLUMNS": (20, UNWRAPPED), "LINES": (5, 10_000)}


def _sane_terminal_env() -> None:
    """Drop a $COLUMNS or $LINES that is no sane size before rich reads them (it reads them
    itself, at every print): `'²'.isdigit()` is True and `int('²')` raises, 0 columns print
    nothing at all, and a non-number made rich wrap a file at its default 80. Without them a
    terminal gives its own size and a pipe or file is not wrapped."""
    for name, (low, high) in SANE_SIZE.items():
        value = os.environ.get(name)
        if value is None:
            continue
        text = value.strip()
        if not (text.isascii() and text.isdigit() and low <= int(text) <= high):
            del os.environ[name]
        elif text != value:
            os.environ[name] = text  # rich takes digits only: " 100" would be its default 80


_sane_terminal_env()
# emoji=False: a `:skull:` in a node name or a task message prints as it is, like `[/]`
console = Console(highlight=False, emoji=False, width=_width(sys.stdout))
err_console = Console(stderr=True, highlight=False, emoji=False, width=_width(sys.stderr))


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a short command that builds a big, acyclic
    result (a plan of 10,000 nodes is millions of objects): the collector would walk them
    again and again (~10% of `stepwise plan`'s time) to find no cycle; reference counting
    still frees everything. Never around a run: that one lives for hours."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def reported() -> Iterator[None]:
    """Turn StepwiseError into a clear message and its exit code; never a traceback."""
    try:
        yield
    except StepwiseError as exc:
        kind = "error"
        if exc.exit_code == 3:
            kind = "refused"
        elif exc.exit_code == 130:
            kind = "interrupted"
        _json_error(kind, exc.exit_code, exc.problems)
        for p in exc.problems:
            # the problem quotes data (a --limit, a key, a task's stderr): printed as text
            err_console.print(Text.assemble((f"{kind}:", "bold red"), " ", str(p)), soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        # Ctrl-C while a command plans or asks (a run holds it once the nodes are asked)
        say_interrupted()
        err_console.print("[yellow]interrupted[/]")
        raise typer.Exit(130) from None


def say_interrupted() -> None:
    """A Ctrl-C said to a script that asked for JSON (the JSON error of kind "interrupted")."""
    _json_error("interrupted", 130, [Problem("interrupted (SIGINT)")])


def _json_error(kind: str, exit_code: int, problems: Sequence[Problem]) -> None:
    """A script that asked for JSON gets the error as JSON too (stdout, where it reads); a
    stdout that cannot take it leaves the error to stderr and its exit code."""
    if not _json_asked():
        return
    with suppress(OSError):
        print_json(
            {
                "error": {
                    "kind": kind,
                    "exit_code": exit_code,
                    "problems": [dataclasses.asdict(p) for p in problems],
                }
            }
        )


def _json_asked() -> bool:
    """Whether this command line asked for `--json` (before a `--` that ends the options)."""
    from stepwise.cli import safety

    argv = safety.current_argv if safety.current_argv is not None else sys.argv[1:]
    options = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in options


def print_json(data: Any) -> None:
    """Print `data` as JSON; never `NaN`/`Infinity` (not JSON): inputs are finite by validation,
    so a non-finite number here is a bug and fails loudly rather than breaking a script."""
    text = json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n"
    with _stdout_written() as out:
        out.write(text)
        out.flush()


def write_stdout(write: Callable[[BinaryIO], None]) -> None:
    """Let `write` put encoded output straight onto stdout's bytes, after whatever text is
    pending: a 30 MB plan never becomes one str, nor one bytes object."""
    with _stdout_written() as out:
        out.flush()
        write(out.buffer)
        out.buffer.flush()


@contextmanager
def _stdout_written() -> Iterator[Any]:
    """sys.stdout to write on; a closed one, or one on a full device, is an OutputError (a
    clean exit 74, see `safety.guarded`). A reader that went away stays a BrokenPipeError:
    click and `guarded` end such a command as a pipe's writer ends."""
    from stepwise.cli.safety import OutputError

    if sys.stdout is None:  # started with stdout closed (`>&-`)
        raise OutputError(errno.EBADF, "it is closed")
    try:
        yield sys.stdout
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(exc.errno, exc.strerror or str(exc)) from exc
