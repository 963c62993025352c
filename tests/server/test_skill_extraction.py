"""Learning from runs (``server/skills/extraction.py``): a completed run with enough tool calls
gets one auxiliary call that may propose a skill, kept as a draft nobody is offered until it
is approved; short, failed or declined runs leave nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermes_core.events import (
    AgentEvent,
    ExitReason,
    MessageAdded,
    RunFinished,
    RunStarted,
    ToolStarted,
)
from hermes_core.messages import Message
from hermes_core.persistence import Store, sqlite_url
from hermes_core.providers.scripted import ScriptedProvider
from hermes_core.usage import Usage
from server.runs.manager import RunInfo
from server.skills.extraction import Learner, SkillExtractor, propose_skill, run_record
from server.skills.library import StoredSkills

PROPOSAL = json.dumps(
    {
        "name": "rotate-logs",
        "description": "Rotate a service's logs safely. Use when a disk fills with logs.",
        "body": "1. Run `logrotate -f`.\n2. Check `df -h`.",
    }
)
RUN: list[Message] = [
    {"role": "user", "content": "The disk is full of logs, fix it."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "shell", "arguments": '{"command": "logrotate -f"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "rotated 3 files"},
    {"role": "assistant", "content": "Done: logs rotated."},
]


@pytest.fixture
async def library(tmp_path: Path) -> AsyncIterator[StoredSkills]:
    store = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=True)
    try:
        yield StoredSkills(store.skills, tmp_path / "cache")
    finally:
        await store.close()


async def test_a_proposal_is_kept_as_a_draft_no_run_is_offered(library: StoredSkills) -> None:
    provider = ScriptedProvider(PROPOSAL)

    entry = await propose_skill(library, "alice", provider, RUN)

    assert entry is not None
    assert entry.name == "rotate-logs"
    assert await library.offered("alice") == []
    assert "logrotate -f" in str(provider.requests[0].messages[-1]["content"])


async def test_a_declined_or_malformed_proposal_keeps_nothing(library: StoredSkills) -> None:
    for reply in ('{"skip": "a one-off lookup"}', "no JSON here", '{"name": "Bad Name!"}'):
        assert await propose_skill(library, "alice", ScriptedProvider(reply), RUN) is None
    assert await library.store.page("alice", after=None, limit=10, newest_first=True) == []


def _events(run_id: str, tool_calls: int, ending: ExitReason) -> list[AgentEvent]:
    started = RunStarted(run_id, 0, task_id="t", model="m", provider="p", budget=9)
    events: list[AgentEvent] = [started]
    events += [MessageAdded(run_id, 1 + i, index=i, message=m) for i, m in enumerate(RUN)]
    events += [
        ToolStarted(run_id, 10 + i, call_id=f"c{i}", name="shell", arguments={}, summary="")
        for i in range(tool_calls)
    ]
    events.append(
        RunFinished(
            run_id,
            99,
            exit_reason=ending,
            final_text="Done",
            iterations=2,
            usage=Usage(),
            model_calls=2,
        )
    )
    return events


async def test_only_completed_runs_with_enough_tool_calls_of_a_learning_profile_are_read(
    library: StoredSkills,
) -> None:
    provider = ScriptedProvider(PROPOSAL, PROPOSAL, PROPOSAL)
    drafts: list[str] = []
    extractor = SkillExtractor(
        library,
        lambda profile: (
            Learner(provider=provider, min_tool_calls=2) if profile == "learning" else None
        ),
        on_draft=lambda profile, entry: drafts.append(entry.name),
    )
    cases = [
        ("learning", 1, ExitReason.COMPLETED),  # too few tool calls
        ("learning", 2, ExitReason.INTERRUPTED),  # not a clean success
        ("plain", 5, ExitReason.COMPLETED),  # its profile does not learn
        ("learning", 2, ExitReason.COMPLETED),  # the one read
    ]
    for number, (profile, tool_calls, ending) in enumerate(cases):
        info = RunInfo(id=f"run_{number}", owner="alice", endpoint="responses", model=profile)
        for event in _events(info.id, tool_calls, ending):
            extractor.observe(info, event)
    await extractor.drain()

    assert len(provider.requests) == 1
    assert drafts == ["rotate-logs"]
    assert extractor._watched == {}


def test_the_record_of_a_run_shows_calls_and_results_and_cuts_the_middle() -> None:
    record = run_record(RUN)
    assert '[tool call] shell({"command": "logrotate -f"})' in record
    assert "[tool result] rotated 3 files" in record

    long_run = RUN * 400
    cut = run_record(long_run)
    assert len(cut) < 17_000
    assert "the middle of the run left out" in cut
