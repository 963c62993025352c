"""RunManager bookkeeping: admission caps, forgetting old runs, replaying a run's events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import (
    AgentEvent,
    ExitReason,
    InterruptSource,
    MessageAdded,
    RunFinished,
    RunStarted,
    TextDelta,
)
from hermes_core.messages import Message
from hermes_core.providers import base as p
from hermes_core.providers.base import ApiMode, ModelRequest
from hermes_core.usage import Usage
from server.errors import RunLimitExceeded
from server.runs.manager import Run, RunInfo, RunManager, RunStatus
from server.runs.observers import observes


class _Gate:
    """A provider that answers once its gate opens."""

    name = "gate"
    api_mode: ApiMode = "chat_completions"
    model = "gate-model"
    context_window = 10_000

    def __init__(self) -> None:
        self.open = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[p.ProviderEvent]:
        await self.open.wait()
        yield p.ModelTextDelta(text="ok")
        yield p.ModelResponse(
            message={"role": "assistant", "content": "ok"},
            finish_reason="stop",
            usage=Usage(),
            provider=self.name,
            model=self.model,
        )

    async def refresh_credentials(self) -> bool:
        return False

    async def aclose(self) -> None:
        return None


def _start(manager: RunManager, gate: _Gate, owner: str) -> Run:
    return manager.start(
        Agent(gate), AgentRequest(user_message="hi"), owner=owner, endpoint="test", model="m"
    )


async def test_a_key_over_its_cap_is_refused_until_one_of_its_runs_ends() -> None:
    gate = _Gate()
    manager = RunManager(max_runs=10, max_runs_per_owner=2)
    runs = [_start(manager, gate, "alice") for _ in range(2)]
    with pytest.raises(RunLimitExceeded):
        _start(manager, gate, "alice")
    _start(manager, gate, "bob")  # another key is not affected
    gate.open.set()
    await asyncio.gather(*(r.task for r in runs if r.task is not None))
    _start(manager, gate, "alice")


async def test_finished_runs_beyond_the_retention_are_forgotten_oldest_first() -> None:
    gate = _Gate()
    gate.open.set()
    manager = RunManager(keep_finished=2)
    runs = [_start(manager, gate, "alice") for _ in range(3)]
    await asyncio.gather(*(r.task for r in runs if r.task is not None))
    ids = [r.id for r in runs]
    assert manager.get(ids[0], owner="alice") is None
    assert manager.get(ids[2], owner="alice") is not None


async def test_a_follower_that_joins_late_replays_the_whole_run() -> None:
    gate = _Gate()
    manager = RunManager()
    run = manager.start(
        Agent(gate), AgentRequest(user_message="hi"), owner="a", endpoint="test", model="m"
    )
    gate.open.set()
    assert run.task is not None
    await run.task
    events = [event async for event in run.follow()]
    assert [e.seq for e in events] == list(range(len(events)))
    assert isinstance(events[-1], RunFinished)
    assert run.status is RunStatus.COMPLETED
    tail = [event async for event in run.follow(after=len(events) - 2)]
    assert tail == events[-1:]


async def test_a_follower_gets_what_was_logged_meanwhile_as_one_batch_ending_at_the_end() -> None:
    gate = _Gate()
    manager = RunManager()
    run = _start(manager, gate, "a")
    batches = run.follow_batches()
    first = await anext(batches)  # what was there when it started following
    gate.open.set()
    assert run.task is not None
    await run.task  # everything else is logged before the follower looks again
    rest = [batch async for batch in batches]
    assert len(rest) == 1
    events = first + rest[0]
    assert [e.seq for e in events] == list(range(len(events)))
    assert isinstance(events[-1], RunFinished)
    assert events == [event async for event in run.follow()]


async def test_waiting_for_the_ending_wakes_once_with_every_event_logged() -> None:
    gate = _Gate()
    manager = RunManager()
    run = _start(manager, gate, "a")
    ending = asyncio.create_task(run.until_finished())
    await asyncio.sleep(0)
    assert not ending.done()
    gate.open.set()
    finished = await ending
    assert finished is run.events[-1]
    assert [e.seq for e in run.events] == list(range(len(run.events)))
    assert await run.until_finished() is finished  # and at once once it is over


async def test_waiting_for_the_start_returns_once_the_run_has_said_something() -> None:
    gate = _Gate()  # never opened: the run starts, then waits for its upstream
    manager = RunManager()
    run = _start(manager, gate, "a")
    assert run.events == []
    await asyncio.wait_for(run.until_started(), timeout=5)
    assert run.events[0].kind == "run_started"
    assert run.finished is None
    gate.open.set()
    await run.until_finished()


async def test_followers_hear_of_the_ending_only_after_it_is_settled() -> None:
    gate = _Gate()
    gate.open.set()
    settled = asyncio.Event()
    heard: list[bool] = []

    async def settle() -> None:
        await asyncio.sleep(0.01)
        settled.set()

    manager = RunManager(settle=settle)
    run = _start(manager, gate, "a")
    async for _ in run.follow():
        heard.append(settled.is_set())
    assert isinstance(run.events[-1], RunFinished)
    assert heard[-1] is True  # the ending
    assert heard[0] is False  # earlier events stream without waiting for the store


class _Broken(_Gate):
    async def stream(self, request: ModelRequest) -> AsyncIterator[p.ProviderEvent]:
        if request.messages:  # always: fail before the first event
            raise RuntimeError("a bug, not an upstream failure")
        yield p.ModelTextDelta(text="never")


async def test_a_run_that_crashes_still_ends_with_a_failed_ending_for_everyone() -> None:
    seen: list[str] = []
    manager = RunManager(observers=[lambda run, event: seen.append(event.kind)])
    agent = Agent(_Broken())
    # A crash inside the agent's own driver: the agent reports it as a failed run.
    run = manager.start(agent, AgentRequest(user_message="hi"), owner="a", endpoint="t", model="m")
    assert run.task is not None
    await run.task
    assert run.status is RunStatus.FAILED
    assert seen[-1] == "run_finished"
    assert [e.kind async for e in run.follow()][-1] == "run_finished"


async def test_an_observer_is_handed_only_the_event_kinds_it_says_it_reads() -> None:
    seen: dict[str, list[type[AgentEvent]]] = {"endings": [], "all": [], "object": []}

    @observes(RunFinished)
    def endings(_info: RunInfo, event: AgentEvent) -> None:
        seen["endings"].append(type(event))

    class Starts:
        observed_kinds = frozenset({RunStarted})

        def __call__(self, _info: RunInfo, event: AgentEvent) -> None:
            seen["object"].append(type(event))

    gate = _Gate()
    gate.open.set()
    manager = RunManager(observers=[endings, Starts()])
    first = _start(manager, gate, "alice")
    await first.until_finished()
    # Added after events were handed out: it gets every kind from the next run on.
    manager.observers.append(lambda _info, event: seen["all"].append(type(event)))
    second = _start(manager, gate, "alice")
    await second.until_finished()

    assert seen["endings"] == [RunFinished, RunFinished]
    assert seen["object"] == [RunStarted, RunStarted]
    assert seen["all"][0] is RunStarted
    assert seen["all"][-1] is RunFinished
    assert TextDelta in seen["all"]


class _RaisesAfterAMessage:
    """A runner that adds the turn's user message to a three-message transcript, then raises
    (a bug: the agent itself turns its failures into an ending)."""

    async def execute(self, request: AgentRequest, deliver: Callable[[AgentEvent], object]) -> None:
        deliver(MessageAdded(run_id="", seq=0, index=3, message={"role": "user", "content": "hi"}))
        raise RuntimeError("a bug")

    def interrupt(
        self, reason: str = "", *, source: InterruptSource = InterruptSource.OTHER
    ) -> None:
        return None


async def test_a_crashed_runs_ending_says_how_long_its_transcript_was() -> None:
    # A Response whose run ended so is continued from that length: 0 lost every earlier turn.
    manager = RunManager()
    history: list[Message] = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
    ]
    request = AgentRequest(user_message="hi", history=history)
    run = manager.start(
        _RaisesAfterAMessage(), request, owner="a", endpoint="t", model="m", session_id="s1"
    )
    assert run.task is not None
    await run.task

    ending = run.finished
    assert ending is not None
    assert (ending.exit_reason, ending.session_id, ending.transcript_length) == (
        ExitReason.FAILED,
        "s1",
        4,
    )
    assert run.transcript_length == 4
