"""Alembic driven by the migration tests: a revision reached on a connection, the newest one
the scripts know, and what differs between a database and the tables the code declares.

alembic is imported where it is used: every test process imports every test module while it
collects them, and alembic costs each ~0.3 s that only these few tests need.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection
from sqlmodel import SQLModel

from hermes_core.persistence.database import MIGRATIONS

SEARCH_OBJECTS = ("messages_fts", "ix_messages_search")
"""Full-text search objects made by raw DDL (FTS5 tables on SQLite, a GIN index on PostgreSQL):
not in the sqlmodel tables, by design."""


def newest_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def to_revision(revision: str, *, up: bool = False) -> Callable[[Connection], None]:
    """For ``run_sync``: migrate the connection's database down (or ``up``) to ``revision``."""

    def migrate(connection: Connection) -> None:
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = connection
        (command.upgrade if up else command.downgrade)(config, revision)

    return migrate


def schema_differences(connection: Connection) -> list[Any]:
    """For ``run_sync``: how the database differs from the declared tables, the search
    objects aside."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection)
    return [
        diff
        for diff in compare_metadata(context, SQLModel.metadata)
        if not (isinstance(diff, tuple) and str(diff[1].name).startswith(SEARCH_OBJECTS))
    ]
