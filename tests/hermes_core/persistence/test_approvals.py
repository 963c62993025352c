"""Stored approvals: found only by their owner, decided once, claimed by one run, and a
"for this session" approval standing as a grant in its conversation only."""

from __future__ import annotations

import asyncio
import dataclasses

from hermes_core.persistence import ApprovalRecord, Store

ASKED = ApprovalRecord(
    id="apr_1",
    owner="alice",
    conversation_owner="alice",
    conversation="project",
    session_id="sess_1",
    run_id="run_1",
    profile="hermes-agent",
    call_id="call_1",
    tool="shell",
    toolset="shell",
    arguments={"command": "rm -rf build"},
    reason="deletes files recursively",
    status="pending",
    scope="once",
    created_at=1000.0,
    expires_at=1900.0,
)


async def test_an_approval_is_found_by_its_owner_only(store: Store) -> None:
    store.approvals.add(ASKED)

    found = await store.approvals.get("alice", "apr_1")
    assert found == ASKED
    assert await store.approvals.get("bob", "apr_1") is None
    assert await store.approvals.of_run("alice", "run_1") == [ASKED]
    assert await store.approvals.of_run("bob", "run_1") == []


async def test_only_the_first_of_two_racing_answers_is_recorded(store: Store) -> None:
    store.approvals.add(ASKED)

    first, second = await asyncio.gather(
        store.approvals.decide("apr_1", "approved", now=1001.0),
        store.approvals.decide("apr_1", "denied", now=1002.0),
    )

    assert [first, second].count(True) == 1
    decided = await store.approvals.get("alice", "apr_1")
    assert decided is not None
    assert decided.status == ("approved" if first else "denied")


async def test_an_open_approval_is_claimed_by_one_run_and_is_then_no_longer_open(
    store: Store,
) -> None:
    store.approvals.add(ASKED)
    assert [r.id for r in await store.approvals.open("alice", "project")] == ["apr_1"]

    assert await store.approvals.claim(["apr_1"], "run_2") == 1
    assert await store.approvals.claim(["apr_1"], "run_3") == 0
    assert await store.approvals.open("alice", "project") == []
    claimed = await store.approvals.get("alice", "apr_1")
    assert claimed is not None
    assert claimed.resumed_by == "run_2"


async def test_approving_for_the_session_grants_the_tool_in_that_conversation_only(
    store: Store,
) -> None:
    store.approvals.add(ASKED)
    store.approvals.add(dataclasses.replace(ASKED, id="apr_2", tool="code", call_id="call_2"))
    await store.approvals.decide("apr_1", "approved", now=1001.0, scope="session")
    await store.approvals.decide("apr_2", "approved", now=1001.0)  # once: no grant

    assert await store.approvals.granted("alice", "project", "shell")
    assert not await store.approvals.granted("alice", "project", "code")
    assert not await store.approvals.granted("alice", "other-project", "shell")
    assert not await store.approvals.granted("bob", "project", "shell")


def test_a_pending_approval_past_its_time_counts_as_expired() -> None:
    assert not ASKED.expired_at(1899.0)
    assert ASKED.expired_at(1900.0)
    assert not dataclasses.replace(ASKED, status="approved").expired_at(5000.0)
