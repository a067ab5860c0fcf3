"""Where a cloud's store is, without opening it.

Kept apart from `store.py` (SQLAlchemy, Alembic): read-only commands such as `stepwise plan`
only need to know whether a store exists, and importing SQLAlchemy to find out that it does
not would cost them ~0.3 s at every start.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from stepwise.paths import state_dir

ENV_VAR = "STEPWISE_STORE"


def default_store_url(
    deployment_path: str | Path, cloud: str, explicit: str | None = None, *, existing: bool = False
) -> str:
    """`--store` wins, then $STEPWISE_STORE, then `.stepwise/<cloud>.sqlite` next to the
    deployment. A given SQLite URL that can hold no store is an InputError naming it: an
    in-memory database, or (`existing`: the store is to be read) a file whose directory is
    missing, which read commands took for a store with no run."""
    url = explicit or os.environ.get(ENV_VAR)
    if url:
        _check_given(url, "--store" if explicit else f"${ENV_VAR}", existing)
        return url
    base = state_dir(deployment_path)
    return f"sqlite:///{base / (cloud + '.sqlite')}"


def existing_store_url(deployment: Any, explicit: str | None = None) -> str | None:
    """The URL of the cloud's store if it exists already (a SQLite file that is there, or a
    server URL); None when nothing was ever recorded."""
    url = default_store_url(deployment.path, deployment.name, explicit, existing=True)
    if url.startswith("sqlite:///"):
        from stepwise.paths import checked_path

        try:
            os.stat(checked_path(url[len("sqlite:///") :], "--store"))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            pass  # reported with its reason when the store is opened
    return url


_SQLITE = re.compile(r"^sqlite(?:\+\w+)?://(.*)$", re.DOTALL)


def _check_given(url: str, source: str, existing: bool) -> None:
    """Refuse a SQLite URL the operator gave that can hold no store (see default_store_url)."""
    from stepwise.errors import InputError, Problem

    m = _SQLITE.match(url)
    if m is None:
        return  # a server's URL: its faults are found when it is opened
    shown = url if len(url) <= 200 else url[:200] + "..."
    rest = m.group(1)
    db = rest[1:].split("?", 1)[0] if rest.startswith("/") else rest
    if db in ("", ":memory:"):
        raise InputError(
            Problem(
                f"the state store {shown} is an in-memory database: nothing recorded in it "
                "outlives the command",
                field=source,
                hint="give a file: sqlite:////path/to/cloud.sqlite (four slashes for an "
                f"absolute path){', or unset ' + source if source.startswith('$') else ''}",
            )
        )
    parent = Path(db).parent
    try:
        parent_is_dir = parent.is_dir()
    except OSError as e:  # a name too long, a loop of links: no store can be there
        raise InputError(
            Problem(
                f"the state store {shown} cannot be used: {e.strerror or e}",
                field=source,
                hint="give a shorter path to a directory that exists",
            )
        ) from None
    if existing and not parent_is_dir:
        raise InputError(
            Problem(
                f"the state store {shown} cannot exist: its directory {parent} does not",
                field=source,
                hint="correct the URL (sqlite:////abs/path has four slashes, three make the "
                "path relative to the current directory)"
                + (f", or unset {source}" if source.startswith("$") else ""),
            )
        )
