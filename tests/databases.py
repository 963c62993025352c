"""A fresh, empty database per test, on each engine the store supports.

SQLite: a file in the test's temporary directory. PostgreSQL: a database of its own
(``CREATE DATABASE``) on the server :mod:`tests.postgres` finds, dropped afterwards — tests
never see each other's rows, and the migrations run on every test's database as they would in
production.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url

from hermes_core.persistence import sqlite_url
from tests.postgres import postgres_url, require_postgres

ENGINES = ["sqlite", "postgresql"]


def server_url_or_skip() -> str:
    url = postgres_url()
    if url is None:
        if require_postgres():
            pytest.fail("PostgreSQL is required (HERMES_REQUIRE_POSTGRES=1) but not available")
        pytest.skip("no PostgreSQL here")
    return url


async def drop_database(url: str) -> None:
    """Drop a PostgreSQL database made by :func:`fresh_database`, connections and all."""
    parsed = make_url(url)
    admin = await asyncpg.connect(
        parsed.set(drivername="postgresql", database="postgres").render_as_string(
            hide_password=False
        )
    )
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
    finally:
        await admin.close()


@asynccontextmanager
async def fresh_database(engine: str, directory: Path) -> AsyncIterator[str]:
    """The SQLAlchemy URL of a new, empty database on ``engine``."""
    if engine == "sqlite":
        yield sqlite_url(directory / "hermes.db")
        return
    server = make_url(server_url_or_skip())
    name = f"t_{secrets.token_hex(6)}"
    admin_dsn = server.set(drivername="postgresql").render_as_string(hide_password=False)
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
