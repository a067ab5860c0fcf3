"""Alembic environment of the state store: always driven programmatically by `store.open_store`
(the connection comes in through `config.attributes['connection']`)."""

from __future__ import annotations

from alembic import context

from stepwise.run.store.models import Base

target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = context.config.attributes["connection"]
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        version_table="stepwise_alembic_version",
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():  # pragma: no cover - stepwise never runs offline migrations
    raise SystemExit("stepwise's store migrations run online only")
run_migrations_online()
