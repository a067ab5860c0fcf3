"""`--pause`: the operator's go-ahead before each batch, for who wants the seed's interactive
update (`openstack overcloud update stack -i`: a breakpoint per node, continue or abort).

The engine asks before the first unit of each batch (`EngineOptions.before_batch`); nothing of
that batch has started, so `abort` is a safe point: the run is recorded aborted, as `stepwise
abort` leaves it, and the same command continues it.
"""

from __future__ import annotations

import select
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.text import Text

from stepwise.cli.common import err_console
from stepwise.errors import InputError, Problem

#: how often a wait for the operator's answer looks whether the run is stopping anyway
POLL_S = 0.25
CONTINUE = ("c", "continue")
ABORT = ("a", "abort")


def require_terminal(pause: bool) -> None:
    """`--pause` asks at a terminal: refused (exit 2, before anything is planned or recorded)
    when standard input is not one."""
    if pause and not sys.stdin.isatty():
        raise InputError(
            Problem(
                "--pause asks before each batch at a terminal, and standard input is not one",
                field="--pause",
                hint="run the command in a terminal, or without --pause "
                "(`stepwise abort` stops a run at its next safe point from anywhere)",
            )
        )


@contextmanager
def _display_held(progress: Any) -> Iterator[None]:
    """The live progress view stops redrawing while the operator reads and answers."""
    live = getattr(progress, "live", None)
    if live is not None:
        live.stop()
    try:
        yield
    finally:
        if live is not None:
            live.start()


def _read_line(stopping: Callable[[], bool]) -> str | None:
    """A line typed at the terminal; None when the run stops meanwhile (Ctrl-C, `stepwise
    abort`) or the terminal is gone."""
    while not stopping():
        ready, _, _ = select.select([sys.stdin], [], [], POLL_S)
        if ready:
            line = sys.stdin.readline()
            return line if line else None
    return None


def batch_asker(progress: Any) -> Callable[[str, list[str], Callable[[], bool]], bool]:
    """The engine's `before_batch`: shows the batch and its nodes, asks continue or abort."""

    def ask(batch: str, nodes: list[str], stopping: Callable[[], bool]) -> bool:
        with _display_held(progress):
            # Text, never markup: the batch and node names are the deployment's
            err_console.print(
                Text.assemble(
                    ("paused", "bold yellow"), f" before batch {batch}: {', '.join(nodes)}"
                ),
                soft_wrap=True,
            )
            while True:
                err_console.print(Text("continue or abort? [c/a] "), end="")
                line = _read_line(stopping)
                if line is None:
                    err_console.print()
                    return False
                answer = line.strip().lower()
                if answer in CONTINUE:
                    return True
                if answer in ABORT:
                    return False
                err_console.print(Text(f"answer c (continue) or a (abort), not {answer!r}"))

    return ask
