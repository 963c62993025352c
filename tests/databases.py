"""A fresh, empty database per test, on each engine the store supports.

SQLite: a file in the test's temporary directory. PostgreSQL: a database of its own
(``CREATE DATABASE``) on the server :mod:`tests.postgres` finds, dropped afterwards — tests
never see each other's rows, and the migrations run on every test's database as they would in
production.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url

from hermes_core.persistence import Store, sqlite_url
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


class MigratedTemplate:
    """New SQLite files begin as a copy of one this process migrated, not migrated each.

    A fresh database costs ~0.1 s of CPU to migrate (alembic, eleven revisions), and the fast
    tests open about 260 of them: a quarter of the suite's CPU. The template is made by the
    real migrations (``Store.open``) once per test process; a copy of it is what any new
    database would be after them. Only SQLite files that do not exist yet, opened with
    ``migrate`` on, are copied; PostgreSQL databases and the migration tests' own
    (``test_migrations.py``) are migrated as in production.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / "migrated-template.db"
        self._original = Store.__dict__["open"].__func__

    def patch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        template, original = self, self._original

        async def open_copied(cls: type[Store], /, url: str, **options: Any) -> Store:
            if options.get("migrate", True):
                await template.copy_to(url)
            store: Store = await original(cls, url, **options)
            return store

        monkeypatch.setattr(Store, "open", classmethod(open_copied))

    async def copy_to(self, url: str) -> None:
        parsed = make_url(url)
        if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
            return
        target = Path(parsed.database)
        if await asyncio.to_thread(target.exists) or not await asyncio.to_thread(
            target.parent.is_dir
        ):
            return  # an existing database, or a directory the server makes: left as it is
        if not await asyncio.to_thread(self.path.exists):
            await self._make()
        await asyncio.to_thread(shutil.copyfile, self.path, target)

    async def _make(self) -> None:
        building = self.path.with_name(f"building-{secrets.token_hex(4)}.db")
        store = await self._original(Store, sqlite_url(building))
        await store.close()
        await asyncio.to_thread(_settle, building, self.path)


def _settle(building: Path, path: Path) -> None:
    """Put all of ``building`` in its one file (no WAL beside it), then make it ``path``."""
    with contextlib.closing(sqlite3.connect(building)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    os.replace(building, path)
