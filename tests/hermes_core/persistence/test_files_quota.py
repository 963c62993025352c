"""A key's files quota is checked and its record added as one step, even by two stores (two
replicas) on one PostgreSQL at once."""

from __future__ import annotations

import asyncio

import pytest

from hermes_core.persistence import Store
from tests.hermes_core.persistence.helpers import uploaded

ROUNDS = 20


async def test_a_file_past_the_quota_is_not_added(store: Store) -> None:
    before = await store.files.add_within(uploaded("bob", 60), max_files=5, quota_bytes=100)
    assert (before.count, before.bytes) == (0, 0)
    refused = await store.files.add_within(uploaded("bob", 60), max_files=5, quota_bytes=100)
    assert (refused.count, refused.bytes) == (1, 60)
    await store.files.add_within(uploaded("bob", 40), max_files=2, quota_bytes=100)
    refused = await store.files.add_within(uploaded("bob", 0), max_files=2, quota_bytes=100)
    assert refused.count == 2
    assert (await store.files.usage("bob")).count == 2


async def test_two_stores_adding_one_keys_files_at_once_keep_it_within_its_count(
    store: Store, other: Store, database_url: str
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("several processes share a PostgreSQL only")
    for n in range(ROUNDS):
        owner = f"carol-{n}"
        tries = [
            s.files.add_within(uploaded(owner), max_files=1, quota_bytes=100)
            for s in (store, other) * 2
        ]
        await asyncio.gather(*tries)
        assert (await store.files.usage(owner)).count == 1, n
