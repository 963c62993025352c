"""The database: an async engine for a URL, its migrations, and the shared write queue.

SQLite (the embedded default) runs in WAL mode, so readers never wait for the writer, with
``synchronous=NORMAL``: a commit survives a crash of the process (what ``kill -9`` tests), only
a power loss may lose the last transactions. PostgreSQL needs nothing special.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from hermes_core import json_codec
from hermes_core.persistence.committers import AsyncCommitter, SqliteCommitter
from hermes_core.persistence.search_index import SearchIndex
from hermes_core.persistence.writer import WriteBehind

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)
MIGRATIONS = Path(__file__).with_name("migrations")
SCHEMA_HEAD = "0014"
"""The newest migration's revision (a test holds it to the scripts'): a start reads the
database's revision with one query and compares it to this, and loads alembic (~0.1 s to
import, more to read its scripts) only when the schema is behind."""


class SchemaOutOfDate(RuntimeError):
    """The database's schema is not the one this code needs (run ``hermes-server db upgrade``)."""


def sqlite_url(path: Path | str) -> str:
    return f"sqlite+aiosqlite:///{Path(path)}"


class Database:
    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        self.url = url
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite" and parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        self.engine: AsyncEngine = self._new_engine()
        if self.dialect == "sqlite":
            # See persistence/writer.py for why the writer talks to sqlite3 directly.
            path = parsed.database or ":memory:"
            self.writer = WriteBehind(SqliteCommitter(path, setup=_pragmas_on))
        else:
            self.writer = WriteBehind(AsyncCommitter(self._new_engine))
        # SQLite's full-text index is kept up to date in batches; PostgreSQL's keeps itself.
        self.search_index = SearchIndex(self.writer, batched=self.dialect == "sqlite")

    def _new_engine(self) -> AsyncEngine:
        # JSON columns (messages, usage) are encoded on the hot path of every run.
        options: dict[str, Any] = {"json_serializer": json_codec.dumps_text}
        if self.dialect == "postgresql":
            options["pool_size"] = 10
            options["pool_pre_ping"] = True
        engine = create_async_engine(self.url, **options)
        if self.dialect == "sqlite":
            event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine

    @property
    def safe_url(self) -> str:
        """The URL with any password masked, for logs."""
        return make_url(self.url).render_as_string(hide_password=True)

    # --- schema -------------------------------------------------------------------------------

    async def upgrade(self) -> None:
        """Apply every migration not yet applied."""
        async with self.engine.begin() as conn:
            await conn.run_sync(_upgrade)

    async def current_revision(self) -> str | None:
        async with self.engine.connect() as conn:
            return await conn.run_sync(_current)

    async def ensure_schema(self, *, upgrade: bool) -> None:
        """Upgrade (when allowed and behind) or check that the schema is at the newest
        revision."""
        async with self.engine.connect() as conn:
            current = await conn.run_sync(_stored_revision)
        if current == SCHEMA_HEAD:
            return  # the common start: nothing to migrate, alembic never loaded
        if upgrade:
            await self.upgrade()
            return
        raise SchemaOutOfDate(
            f"The database is at schema revision {current or 'none'}, this server needs "
            f"{SCHEMA_HEAD}: run `hermes-server db upgrade`."
        )

    # --- health and life ----------------------------------------------------------------------

    async def ping(self) -> bool:
        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception:  # any failure means "not reachable"; the reason is logged
            log.warning("database ping failed", exc_info=True)
            return False
        return True

    async def close(self) -> None:
        await self.writer.close()
        await self.engine.dispose()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    _pragmas_on(dbapi_connection)


def _pragmas_on(dbapi_connection: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _upgrade(connection: Connection) -> None:
    from alembic import command

    config = _config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _current(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def _stored_revision(connection: Connection) -> str | None:
    """The revision alembic recorded, read without alembic: None on a new database (no
    ``alembic_version`` table) or one at several heads (then alembic sorts it out)."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    rows = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return str(rows[0]) if len(rows) == 1 else None
