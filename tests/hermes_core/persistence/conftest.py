"""The store under test: opened on a fresh database (SQLite, then PostgreSQL) per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hermes_core.persistence import Store

INSTANCE = "instance-a"
"""The server instance name the ``store`` fixture runs as (crash recovery is per instance)."""


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(database_url, instance=INSTANCE)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def other(store: Store, database_url: str) -> AsyncIterator[Store]:
    """Another replica's store on ``store``'s database, with connections of its own, as a
    process of its own would have."""
    opened = await Store.open(database_url, instance="instance-b")
    try:
        yield opened
    finally:
        await opened.close()
