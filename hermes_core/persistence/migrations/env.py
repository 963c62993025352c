"""Alembic's entry point: migrations run on the connection that ``Database`` hands over."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import hermes_core.persistence.tables  # noqa: F401  (registers the tables on the metadata)

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=SQLModel.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
