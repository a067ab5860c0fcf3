"""Where a cloud's store is, without opening it.

Kept apart from `store.py` (SQLAlchemy, Alembic): read-only commands such as `stepwise plan`
only need to know whether a store exists, and importing SQLAlchemy to find out that it does
not would cost them ~0.3 s at every start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ENV_VAR = "STEPWISE_STORE"


def default_store_url(deployment_path: str | Path, cloud: str, explicit: str | None = None) -> str:
    """`--store` wins, then $STEPWISE_STORE, then `.stepwise/<cloud>.sqlite` next to the
    deployment."""
    url = explicit or os.environ.get(ENV_VAR)
    if url:
        return url
    base = Path(deployment_path).resolve().parent / ".stepwise"
    return f"sqlite:///{base / (cloud + '.sqlite')}"


def existing_store_url(deployment: Any, explicit: str | None = None) -> str | None:
    """The URL of the cloud's store if it exists already (a SQLite file that is there, or a
    server URL); None when nothing was ever recorded."""
    url = default_store_url(deployment.path, deployment.name, explicit)
    if url.startswith("sqlite:///"):
        from stepwise.paths import checked_path

        try:
            os.stat(checked_path(url[len("sqlite:///") :], "--store"))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            pass  # reported with its reason when the store is opened
    return url
