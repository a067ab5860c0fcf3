"""The durable state store (SQLAlchemy + Alembic)."""

from stepwise.run.store.store import RunInfo, Store, default_store_url, open_store

__all__ = ["RunInfo", "Store", "default_store_url", "open_store"]
