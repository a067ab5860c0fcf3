"""The durable state store (SQLAlchemy + Alembic).

The names are loaded on first use (PEP 562), so `stepwise.run.store.location` can be imported
without SQLAlchemy: `stepwise plan` asks whether a store exists before opening one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepwise.run.store.location import default_store_url

if TYPE_CHECKING:
    from stepwise.run.store.store import RunInfo, Store, open_store

__all__ = ["RunInfo", "Store", "default_store_url", "open_store"]


def __getattr__(name: str) -> Any:
    if name in ("RunInfo", "Store", "open_store"):
        from stepwise.run.store import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
