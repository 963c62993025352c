"""A turn that begins its conversation (no session name: a new session named by its own id)
has nothing awaiting approval, so a profile that may ask does not look its open approvals up;
a named conversation's turns still do (its earlier runs, here or on another replica, may have
left questions)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from hermes_core.agent import Agent, AgentRequest
from hermes_core.persistence import Store, sqlite_url
from hermes_core.providers.scripted import ScriptedProvider
from server.runs.approvals import ApprovalDesk, Asker
from server.services import Services
from server.serving.common import with_approvals
from server.sessions.service import SessionService


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[SessionService]:
    store = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=True)
    try:
        yield SessionService(store)
    finally:
        await store.close()


async def _begin(sessions: SessionService, name: str | None, run_id: str) -> bool:
    agent = Agent(provider=ScriptedProvider("unused"), owner="alice")
    turn = await sessions.begin(
        agent,
        AgentRequest(user_message="hello"),
        owner="alice",
        profile="hermes-agent",
        run_id=run_id,
        name=name,
    )
    sessions.abandon(run_id)
    return turn.fresh


async def test_only_an_unnamed_turn_begins_a_fresh_conversation(
    sessions: SessionService,
) -> None:
    assert await _begin(sessions, None, "run_1")
    assert not await _begin(sessions, "named", "run_2")  # its name may have a past elsewhere
    assert not await _begin(sessions, "named", "run_3")  # continued


class _NoOpenApprovals:
    async def open(self, owner: str, conversation: str) -> list[object]:
        raise AssertionError("a fresh conversation's open approvals were looked up")


async def test_a_fresh_conversations_turn_looks_up_no_open_approvals() -> None:
    services = cast(
        Services,
        SimpleNamespace(
            approvals=ApprovalDesk(), store=SimpleNamespace(approvals=_NoOpenApprovals())
        ),
    )
    agent = Agent(provider=ScriptedProvider("unused"), owner="alice")
    request = AgentRequest(user_message="approve")
    asker = Asker(
        owner="alice",
        conversation=("alice", "sess_new"),
        session_id="sess_new",
        profile="hermes-agent",
        wait_seconds=0,
    )

    settled = await with_approvals(
        services, agent, request, asker, forked=False, fresh=True, answers={}, spoken="approve"
    )

    assert settled is request
    assert agent.approval_callback is not None  # its own calls may still ask
    with pytest.raises(AssertionError):
        await with_approvals(
            services, agent, request, asker, forked=False, answers={}, spoken="approve"
        )
