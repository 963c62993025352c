"""The usage ledger in the store (SQLite, then PostgreSQL): entries add to their day's row,
concurrent additions are all counted, ``spent`` sums a key's (or one end user's) days, and a
report groups and filters what it sums."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from hermes_core.persistence import Spent, Store, UsageEntry
from hermes_core.usage import Usage


def _entry(**changes: object) -> UsageEntry:
    entry = UsageEntry(
        day="2026-11-20",
        owner="alice",
        end_user="",
        profile="hermes",
        provider="openai",
        model="gpt-4o",
        calls=1,
        usage=Usage(
            input_tokens=100,
            cache_read_tokens=40,
            cache_write_tokens=10,
            output_tokens=20,
            reasoning_tokens=5,
        ),
        cost_usd=0.25,
    )
    return dataclasses.replace(entry, **changes)  # type: ignore[arg-type]


async def test_entries_of_one_row_add_up(store: Store) -> None:
    store.usage.add([_entry(), _entry(calls=2)])
    store.usage.add([_entry()])

    (line,) = await store.usage.report(
        owner="alice", since_day="2026-11-01", until_day="2026-11-30"
    )

    assert line.group == {"day": "2026-11-20"}
    assert line.calls == 4
    assert line.usage == Usage(
        input_tokens=300,
        cache_read_tokens=120,
        cache_write_tokens=30,
        output_tokens=60,
        reasoning_tokens=15,
    )
    assert line.cost_usd == 0.75


async def test_additions_committed_concurrently_are_all_counted(store: Store) -> None:
    async def add_and_flush() -> None:
        store.usage.add([_entry()])
        await store.db.writer.flush()

    await asyncio.gather(*(add_and_flush() for _ in range(20)))

    assert await store.usage.spent("alice", since_day="2026-11-20") == Spent(2400, 5.0)


async def test_spent_sums_a_key_or_one_end_user_between_days(store: Store) -> None:
    store.usage.add(
        [
            _entry(day="2026-11-19"),
            _entry(end_user="u1"),
            _entry(end_user="u2", model="gpt-4o-mini"),
            _entry(end_user="u1", day="2026-11-21"),
            _entry(owner="bob"),
        ]
    )

    assert await store.usage.spent("alice", since_day="2026-11-20") == Spent(360, 0.75)
    assert await store.usage.spent("alice", "u1", since_day="2026-11-20") == Spent(240, 0.5)
    assert await store.usage.spent(
        "alice", "u1", since_day="2026-11-20", until_day="2026-11-20"
    ) == Spent(120, 0.25)
    assert await store.usage.spent("alice", "", since_day="2026-11-01") == Spent(120, 0.25)
    assert await store.usage.spent("carol", since_day="2026-11-01") == Spent(0, 0.0)


async def test_a_report_groups_and_filters(store: Store) -> None:
    store.usage.add(
        [
            _entry(end_user="u1"),
            _entry(end_user="u2", model="gpt-4o-mini", provider="azure"),
            _entry(end_user="u1", day="2026-11-21", profile="coder"),
            _entry(owner="bob", end_user="u1"),
            _entry(day="2026-10-01"),
        ]
    )
    window: dict[str, Any] = {"since_day": "2026-11-01", "until_day": "2026-11-30"}

    by_user = await store.usage.report(owner="alice", group_by=["end_user", "day"], **window)
    everyone = await store.usage.report(owner=None, group_by=["key"], **window)
    one_model = await store.usage.report(
        owner="alice", group_by=["provider", "model"], model="gpt-4o-mini", **window
    )
    one_profile = await store.usage.report(owner="alice", profile="coder", group_by=[], **window)
    nothing = await store.usage.report(owner="carol", group_by=[], **window)

    assert [(line.group, line.calls) for line in by_user] == [
        ({"end_user": "u1", "day": "2026-11-20"}, 1),
        ({"end_user": "u1", "day": "2026-11-21"}, 1),
        ({"end_user": "u2", "day": "2026-11-20"}, 1),
    ]
    assert [(line.group, line.calls) for line in everyone] == [
        ({"key": "alice"}, 3),
        ({"key": "bob"}, 1),
    ]
    assert [line.group for line in one_model] == [{"provider": "azure", "model": "gpt-4o-mini"}]
    assert [(line.group, line.usage.total_tokens) for line in one_profile] == [({}, 120)]
    assert nothing == []
