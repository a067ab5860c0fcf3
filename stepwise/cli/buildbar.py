"""A bar for the one-time build of the lab's real OpenStack venvs (minutes on a new machine).

On a terminal, a rich progress bar per venv (packages collected of the lock's total, elapsed
time); otherwise a line when each venv starts and ends, so a CI log stays short.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text


@contextmanager
def build_bar(console: Console) -> Iterator[Callable[[int, int, str], None]]:
    """A `build(done, total, what)` callback for `stepwise.lab.control.up`."""
    if not console.is_terminal:
        started: dict[str, float] = {}

        def lines(done: int, total: int, what: str) -> None:
            name = what.split(":")[0].removeprefix("creating the ").removesuffix(" venv")
            if name not in started:
                started[name] = time.monotonic()
                console.print(Text(f"building venv {name} ({total} packages)", style="dim"))
            elif what.endswith(": ready"):
                console.print(
                    Text(
                        f"venv {name} built in {time.monotonic() - started[name]:.0f}s", style="dim"
                    )
                )

        yield lines
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    tasks: dict[str, int] = {}

    def update(done: int, total: int, what: str) -> None:
        name = what.split(":")[0].removeprefix("creating the ").removesuffix(" venv")
        if name not in tasks:
            tasks[name] = bar.add_task(Text(f"venv {name}").plain, total=total)
        bar.update(tasks[name], completed=done)

    with bar:
        yield update
