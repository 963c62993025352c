"""The schema: migrations create it, it matches the sqlmodel tables, and a server that may not
migrate refuses a database that is behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect
from sqlmodel import SQLModel

from hermes_core.persistence import Database, SchemaOutOfDate, Store, sqlite_url
from hermes_core.persistence.database import SCHEMA_HEAD
from hermes_core.persistence.search import PG_VECTOR
from tests.hermes_core.persistence.helpers import new_session, user
from tests.hermes_core.persistence.migrating import (
    newest_revision,
    schema_differences,
    to_revision,
)


async def test_open_creates_every_table_at_the_newest_revision(database_url: str) -> None:
    store = await Store.open(database_url)
    try:
        assert await store.db.current_revision() == newest_revision()
        async with store.db.engine.connect() as conn:
            tables = set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
        assert set(SQLModel.metadata.tables) <= tables
    finally:
        await store.close()


async def test_opening_an_up_to_date_database_again_keeps_its_data(database_url: str) -> None:
    first = await Store.open(database_url)
    try:
        session = await new_session(first, user("hello"))
    finally:
        await first.close()

    for migrate in (True, False):
        again = await Store.open(database_url, migrate=migrate)
        try:
            assert await again.sessions.get("alice", session.id) == session
            assert [m.message for m in await again.sessions.messages(session.id)] == [user("hello")]
        finally:
            await again.close()


async def test_migrated_schema_matches_the_tables(database_url: str) -> None:
    store = await Store.open(database_url)
    try:
        async with store.db.engine.connect() as conn:
            assert await conn.run_sync(schema_differences) == []
    finally:
        await store.close()


async def test_the_search_expression_is_served_by_the_full_text_index(store: Store) -> None:
    # compare_metadata cannot see the raw-DDL search index: check that the query's
    # expression is the indexed one, or PostgreSQL would scan every message.
    async with store.db.engine.connect() as conn:
        if store.db.dialect == "postgresql":
            await conn.exec_driver_sql("SET enable_seqscan = off")
            query = f"EXPLAIN SELECT id FROM messages WHERE {PG_VECTOR} @@ 'x'::tsquery"
            index = "ix_messages_search"
        else:
            query = "EXPLAIN QUERY PLAN SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'x'"
            index = "VIRTUAL TABLE INDEX"
        plan = " ".join(str(row) for row in (await conn.exec_driver_sql(query)).all())
    assert index in plan


async def test_an_empty_database_is_refused_without_migrating(database_url: str) -> None:
    db = Database(database_url)
    try:
        with pytest.raises(SchemaOutOfDate, match="revision none"):
            await db.ensure_schema(upgrade=False)
    finally:
        await db.close()
    with pytest.raises(SchemaOutOfDate):
        await Store.open(database_url, migrate=False)


async def test_messages_stay_searchable_across_the_batched_index_migration(
    tmp_path: Path,
) -> None:
    # 0002 replaced SQLite's per-row index trigger with one index statement per write batch.
    url = sqlite_url(tmp_path / "hermes.db")
    store = await Store.open(url)
    try:
        await new_session(store, user("an ocelot in the garden"), session_id="before")
        async with store.db.engine.begin() as conn:
            await conn.run_sync(to_revision("0001"))
            await conn.exec_driver_sql(  # written while the trigger indexes
                "INSERT INTO messages (session_id, position, role, content, source, compacted, "
                "search_text, created_at) VALUES ('before', 1, 'user', '\"a pangolin\"', 'client', "
                "0, 'a pangolin', 0)"
            )
        await store.db.upgrade()
        await new_session(store, user("an ocelot on the roof"), session_id="after")
        hits = await store.search.search("alice", "ocelot", limit=10)
        assert sorted(hit.session_id for hit in hits) == ["after", "before"]
        pangolins = await store.search.search("alice", "pangolin", limit=10)
        assert [hit.session_id for hit in pangolins] == ["before"]
    finally:
        await store.close()


def test_the_schema_head_a_start_compares_with_is_the_newest_migration() -> None:
    # A start skips alembic when the database is at SCHEMA_HEAD: a new migration must move it.
    assert newest_revision() == SCHEMA_HEAD


async def test_a_database_behind_is_migrated_at_open_or_refused_when_it_may_not_be(
    database_url: str,
) -> None:
    store = await Store.open(database_url)
    try:
        session = await new_session(store, user("kept across the upgrade"))
        async with store.db.engine.begin() as conn:
            await conn.run_sync(to_revision("0004"))
    finally:
        await store.close()

    with pytest.raises(SchemaOutOfDate, match="revision 0004"):
        await Store.open(database_url, migrate=False)
    upgraded = await Store.open(database_url, migrate=True)
    try:
        assert await upgraded.db.current_revision() == SCHEMA_HEAD
        assert await upgraded.sessions.get("alice", session.id) == session
    finally:
        await upgraded.close()
