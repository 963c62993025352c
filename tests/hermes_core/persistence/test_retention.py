"""Retention and erasure in the store, on SQLite and PostgreSQL: the lease one replica sweeps
under, what each sweep deletes (and what it leaves), a conversation deleted whole, an end
user erased. The row builders here (one of everything an end user leaves behind, in every
table) serve the server's tests too."""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import insert, select, update

from hermes_core.ids import token_hex
from hermes_core.persistence import Store
from hermes_core.persistence.database import Database
from hermes_core.persistence.retention import TODOS, Counts, Horizon, add_counts
from hermes_core.persistence.runs import RUNS
from hermes_core.persistence.sessions import LOCKS, MESSAGES, SESSIONS
from hermes_core.persistence.tables import (
    ApiRunRow,
    ApprovalRow,
    ConversationRow,
    CronFiringRow,
    FileRow,
    IdempotencyKeyRow,
    MemoryRow,
    MessageRow,
    ResponseRow,
    RunRow,
    SessionLockRow,
    SessionRow,
    SkillRow,
    SkillVersionRow,
    TodoRow,
    UsageDailyRow,
    WebhookDeliveryRow,
)
from tests.hermes_core.persistence.helpers import new_session, stored, user


def table(row: Any) -> Any:
    return row.__table__


TABLES: list[Any] = [
    table(row)
    for row in (
        SessionRow,
        MessageRow,
        TodoRow,
        SessionLockRow,
        MemoryRow,
        ApprovalRow,
        SkillRow,
        SkillVersionRow,
        FileRow,
        RunRow,
        ApiRunRow,
        WebhookDeliveryRow,
        IdempotencyKeyRow,
        ResponseRow,
        ConversationRow,
        UsageDailyRow,
    )
]
"""Every table that holds a key's or an end user's data."""


async def put(db: Database, row: Any, **values: Any) -> None:
    async with db.engine.begin() as conn:
        await conn.execute(insert(table(row)).values(**values))


async def end_user_rows(
    store: Store, key: str, user: str, *, at: float, memory: str = "user"
) -> dict[str, str]:
    """One of everything for ``user`` behind ``key``, made at ``at`` (``memory``: the memory
    target written, one per call for the same user); the ids made."""
    db = store.db
    owner = f"{key}/{user}"
    tag = token_hex(4)
    session = f"sess_{tag}"
    run = f"run_{tag}"
    file_id = f"file-{tag}"
    skill = f"skill_{tag * 4}"
    conversation = f"conv_{tag}"
    common = {"created_at": at}
    await put(
        db,
        SessionRow,
        id=session,
        owner=owner,
        name=f"chat-{tag}",
        profile="hermes-agent",
        system_prompt=f"memory of {user}",
        updated_at=at,
        **common,
    )
    await put(
        db,
        MessageRow,
        session_id=session,
        position=0,
        role="user",
        content=f"I am {user}",
        search_text=f"I am {user}",
        **common,
    )
    await store.db.search_index.catch_up()
    await put(db, TodoRow, session_id=session, items=[{"id": "1", "content": user}], updated_at=at)
    await put(
        db,
        SessionLockRow,
        owner=owner,
        name=f"chat-{tag}",
        run_id=run,
        lease_until=at - 1,
        instance="gone",
    )
    await put(
        db, MemoryRow, scope=owner, target=memory, entries=[f"{user} likes tea"], updated_at=at
    )
    await put(
        db,
        ApprovalRow,
        id=f"appr_{tag}",
        owner=key,
        conversation_owner=owner,
        conversation=f"chat-{tag}",
        session_id=session,
        run_id=run,
        profile="hermes-agent",
        call_id="call_1",
        tool="shell",
        arguments={"command": "ls"},
        reason="asks",
        status="approved",
        scope="once",
        expires_at=at,
        **common,
    )
    await put(
        db,
        SkillRow,
        id=skill,
        owner=owner,
        name=f"skill-{tag}",
        description="d",
        default_version=1,
        latest_version=1,
        last_number=1,
        origin="agent",
        **common,
    )
    await put(
        db,
        SkillVersionRow,
        id=f"skv_{tag}",
        skill_id=skill,
        version=1,
        name=f"skill-{tag}",
        description="d",
        body=f"for {user}",
        bundle=b"zip",
        **common,
    )
    await put(
        db,
        FileRow,
        id=file_id,
        owner=key,
        end_user=user,
        filename="notes.txt",
        purpose="user_data",
        bytes=5,
        **common,
    )
    await put(
        db,
        RunRow,
        id=run,
        owner=key,
        end_user=user,
        session_id=session,
        endpoint="chat.completions",
        model="hermes-agent",
        status="completed",
        usage={},
        instance="a",
        ended_at=at,
        **common,
    )
    await put(db, ApiRunRow, run_id=run, owner=key, metadata={"who": user}, **common)
    await put(
        db,
        WebhookDeliveryRow,
        id=f"wh_{tag}",
        owner=key,
        run_id=run,
        event_id=f"evt_{tag}",
        event_type="run.completed",
        body=json.dumps({"user": user}),
        url="https://example.invalid/hook",
        source="config",
        status="delivered",
        next_attempt_at=at,
        **common,
    )
    await put(
        db,
        IdempotencyKeyRow,
        owner=key,
        key=f"idem-{tag}",
        endpoint="/v1/chat/completions",
        fingerprint="f",
        state="done",
        run_id=run,
        status_code=200,
        content_type="application/json",
        body=f"the answer to {user}".encode(),
        expires_at=at + DAY,
        **common,
    )
    # A cron's firing that started the run: kept (it guards its time against firing twice).
    await put(
        db,
        CronFiringRow,
        id=f"firing_{tag}",
        cron_id=f"cron_{tag}",
        owner=key,
        scheduled_at=at,
        status="started",
        run_id=run,
        **common,
    )
    await put(
        db,
        ResponseRow,
        id=f"resp_{tag}",
        owner=key,
        end_user=user,
        session_id=session,
        run_id=run,
        status="completed",
        body={"output_text": f"hello {user}"},
        updated_at=at,
        **common,
    )
    await put(db, ConversationRow, id=conversation, owner=key, end_user=user, metadata={}, **common)
    await put(
        db,
        UsageDailyRow,
        day="2026-01-01",
        owner=key,
        end_user=user,
        profile="hermes-agent",
        provider="sim",
        model=f"m-{tag}",
        calls=1,
        input_tokens=1,
        cache_read_tokens=0,
        cache_write_tokens=0,
        output_tokens=1,
        reasoning_tokens=0,
        cost_usd=0.0,
    )
    return {
        "session": session,
        "run": run,
        "file": file_id,
        "skill": skill,
        "conversation": conversation,
        "name": f"chat-{tag}",
    }


async def rows_mentioning(db: Database, text: str) -> list[str]:
    """``table: row`` of every row of every table in which ``text`` appears anywhere."""
    found = []
    async with db.engine.connect() as conn:
        for each in TABLES:
            for row in await conn.execute(select(each)):
                shown = repr(tuple(row))
                if text in shown:
                    found.append(f"{each.name}: {shown[:200]}")
    return found


async def count_rows(db: Database) -> dict[str, int]:
    async with db.engine.connect() as conn:
        return {each.name: len((await conn.execute(select(each))).all()) for each in TABLES}


# --- the lease ------------------------------------------------------------------------------


async def test_a_lease_has_one_holder_until_released_or_run_out(store: Store) -> None:
    leases = store.leases
    assert await leases.take("job", "a", seconds=60)
    assert await leases.take("job", "a", seconds=60)  # its own: taken again (renewed)
    assert not await leases.take("job", "b", seconds=60)
    assert await leases.renew("job", "a", seconds=60)
    await leases.release("job", "b")  # not b's: nothing happens
    assert not await leases.take("job", "b", seconds=60)
    await leases.release("job", "a")
    assert await leases.take("job", "b", seconds=-1)  # b's, already run out
    assert await leases.take("job", "a", seconds=60)  # so a takes it over
    assert not await leases.renew("job", "b", seconds=60)  # and b hears it lost it


# --- sweeping -------------------------------------------------------------------------------

DAY = 86400.0


async def session_at(
    store: Store, name: str, *, owner: str = "alice", profile: str = "p", updated: float
) -> str:
    session_id = store.sessions.create(
        owner=owner, profile=profile, system_prompt="You help.", name=name
    )
    store.sessions.add_messages(session_id, 0, stored(user(f"hello from {name}")))
    await store.db.writer.flush()
    async with store.db.engine.begin() as conn:
        await conn.execute(
            update(SESSIONS).where(SESSIONS.c.id == session_id).values(updated_at=updated)
        )
    return session_id


async def sweep_sessions(store: Store, horizon: Horizon) -> tuple[Counts, list[tuple[str, str]]]:
    counts: Counts = {}
    gone: list[tuple[str, str]] = []
    async for batch in store.retention.expire_sessions(horizon, holder="retention_test"):
        add_counts(counts, batch.counts)
        gone.extend(batch.gone)
    return counts, gone


async def names_left(store: Store) -> set[str]:
    async with store.db.engine.connect() as conn:
        return {row.name for row in await conn.execute(select(SESSIONS.c.name))}


async def test_sessions_past_retention_go_with_their_rows_and_others_stay(store: Store) -> None:
    now = time.time()
    old = await session_at(store, "old", updated=now - 40 * DAY)
    await session_at(store, "fresh", updated=now - 1 * DAY)
    await session_at(store, "busy", updated=now - 40 * DAY)
    # A conversation with an old branch and a fresh one keeps the fresh one (and workspace).
    await session_at(store, "mixed", updated=now - 40 * DAY)
    await session_at(store, "mixed", updated=now)
    async with store.db.engine.begin() as conn:
        await conn.execute(insert(TODOS).values(session_id=old, items=[], updated_at=now))
    assert await store.sessions.lock("alice", "busy", "run_live", lease_seconds=60)

    counts, gone = await sweep_sessions(store, Horizon(default=now - 30 * DAY))

    assert gone == [("alice", "old")]
    assert await names_left(store) == {"fresh", "busy", "mixed"}
    assert counts["sessions"] == 2
    assert counts["messages"] == 2
    assert counts["todos"] == 1
    async with store.db.engine.connect() as conn:
        orphans = select(MESSAGES.c.id).where(MESSAGES.c.session_id.not_in(select(SESSIONS.c.id)))
        assert (await conn.execute(orphans)).first() is None
        locks = (await conn.execute(select(LOCKS.c.name, LOCKS.c.run_id))).all()
    assert [tuple(lock) for lock in locks] == [("busy", "run_live")]  # the sweep's own went


async def test_a_profiles_own_retention_overrides_the_default(store: Store) -> None:
    now = time.time()
    await session_at(store, "short-lived", profile="short", updated=now - 5 * DAY)
    await session_at(store, "kept-forever", profile="forever", updated=now - 900 * DAY)
    await session_at(store, "default-old", profile="other", updated=now - 40 * DAY)
    await session_at(store, "default-new", profile="other", updated=now - 5 * DAY)
    horizon = Horizon(default=now - 30 * DAY, by_profile={"short": now - 2 * DAY, "forever": None})

    await sweep_sessions(store, horizon)

    assert await names_left(store) == {"kept-forever", "default-new"}


async def test_no_horizon_deletes_nothing(store: Store) -> None:
    await session_at(store, "ancient", updated=0.0)
    counts, _ = await sweep_sessions(store, Horizon())
    assert counts == {}
    assert await names_left(store) == {"ancient"}


async def test_runs_that_ended_long_ago_go_with_their_api_runs_deliveries_and_idempotency_keys(
    store: Store,
) -> None:
    now = time.time()
    old = await end_user_rows(store, "alice", "u1", at=now - 40 * DAY)
    new = await end_user_rows(store, "alice", "u2", at=now)
    async with store.db.engine.begin() as conn:
        await conn.execute(  # a run that began long ago and still goes
            insert(RUNS).values(
                id="run_live",
                owner="alice",
                endpoint="chat.completions",
                model="hermes-agent",
                status="running",
                usage={},
                instance="a",
                created_at=now - 40 * DAY,
            )
        )

    counts: Counts = {}
    async for batch in store.retention.expire_runs(Horizon(default=now - 30 * DAY)):
        add_counts(counts, batch)

    assert counts == {"runs": 1, "api_runs": 1, "webhook_deliveries": 1, "idempotency_keys": 1}
    async with store.db.engine.connect() as conn:
        runs = set((await conn.execute(select(RUNS.c.id))).scalars())
    assert runs == {new["run"], "run_live"}
    assert old["run"] not in runs


async def test_old_approvals_and_files_go(store: Store) -> None:
    now = time.time()
    old = await end_user_rows(store, "alice", "u1", at=now - 40 * DAY)
    new = await end_user_rows(store, "alice", "u2", at=now)

    approvals: Counts = {}
    async for batch in store.retention.expire_approvals(Horizon(default=now - 30 * DAY), now=now):
        add_counts(approvals, batch)
    files = [
        record.id
        async for batch in store.retention.expire_files(now - 30 * DAY)
        for record in batch
    ]

    assert approvals == {"approvals": 1}
    assert files == [old["file"]]
    assert await store.files.get("alice", new["file"]) is not None


async def test_deleting_a_conversation_deletes_its_sessions_and_approvals(store: Store) -> None:
    rows = await end_user_rows(store, "alice", "u1", at=time.time())
    other = await end_user_rows(store, "alice", "u2", at=time.time())

    counts = await store.retention.delete_conversation("alice/u1", rows["name"])

    assert counts == {"sessions": 1, "messages": 1, "todos": 1, "approvals": 1}
    assert not await store.retention.has_conversation("alice/u1", rows["name"])
    assert await store.retention.has_conversation("alice/u2", other["name"])


async def test_messages_written_after_the_newest_were_deleted_are_still_found(
    store: Store,
) -> None:
    # SQLite gives a new message the largest id left plus one: the deleted newest messages'
    # ids come back, and the search index must not skip them as already indexed.
    await new_session(store, user("an older note about llamas"), name="kept")
    await new_session(store, user("the newest note about llamas"), name="gone")
    assert len(await store.search.search("alice", "llamas", limit=5)) == 2

    await store.retention.delete_conversation("alice", "gone")
    fresh = await new_session(store, user("a fresh note about alpacas"), name="fresh")

    hits = await store.search.search("alice", "alpacas", limit=5)
    assert [hit.session_id for hit in hits] == [fresh.id]
    assert len(await store.search.search("alice", "llamas", limit=5)) == 1


# --- erasure --------------------------------------------------------------------------------


async def test_erasing_an_end_user_leaves_no_row_of_theirs_and_every_other(store: Store) -> None:
    now = time.time()
    await end_user_rows(store, "alice", "erase-me", at=now)
    await end_user_rows(store, "alice", "erase-me", at=now - 3 * DAY, memory="memory")
    await end_user_rows(store, "alice", "keep-me", at=now)
    await end_user_rows(store, "bob", "erase-me", at=now)  # the same name behind another key
    # A run of theirs from before runs knew their end user: found through their session.
    async with store.db.engine.begin() as conn:
        session = (
            await conn.execute(select(SESSIONS.c.id).where(SESSIONS.c.owner == "alice/erase-me"))
        ).scalar()
        await conn.execute(
            insert(RUNS).values(
                id="run_unmarked",
                owner="alice",
                session_id=session,
                endpoint="responses",
                model="hermes-agent",
                status="completed",
                usage={},
                instance="a",
                created_at=now,
            )
        )
    assert await store.erasure.live_runs("alice", "erase-me") == set()
    before = await count_rows(store.db)

    erased = await store.erasure.erase("alice", "erase-me")

    assert [row for row in await rows_mentioning(store.db, "alice/erase-me")] == []
    after = await count_rows(store.db)
    went = {name: before[name] - after[name] for name in before}
    # Two of everything (and the unmarked run); Bob's "erase-me" and Alice's other end user
    # lost nothing.
    assert went == {name: 3 if name == "runs" else 2 for name in before}
    assert {name: erased.counts[name] for name in went} == went
    assert erased.counts["runs"] == 3  # and the unmarked one
    assert len(erased.files) == 2
    assert len(erased.skill_ids) == 2
    async with store.db.engine.connect() as conn:
        left = (await conn.execute(select(RUNS.c.end_user))).scalars().all()
    assert sorted(left) == ["erase-me", "keep-me"]  # bob's erase-me, alice's keep-me
    async with store.db.engine.connect() as conn:
        firings = (await conn.execute(select(table(CronFiringRow).c.run_id))).scalars().all()
    assert len(firings) == 4  # every firing kept: the erased runs' two no longer name them
    assert sum(run is None for run in firings) == 2


async def test_an_end_users_live_runs_are_found_by_record_and_by_lock(store: Store) -> None:
    now = time.time()
    async with store.db.engine.begin() as conn:
        await conn.execute(
            insert(RUNS).values(
                id="run_a",
                owner="alice",
                end_user="u1",
                endpoint="chat.completions",
                model="hermes-agent",
                status="running",
                usage={},
                instance="a",
                created_at=now,
            )
        )
    assert await store.sessions.lock("alice/u1", "chat", "run_b", lease_seconds=60)
    assert await store.sessions.lock("alice/u2", "chat", "run_c", lease_seconds=60)

    assert await store.erasure.live_runs("alice", "u1") == {"run_a", "run_b"}
