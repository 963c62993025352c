"""Steering: a message given to the running turn (``Agent.steer``) reaches its next model call,
is kept in its transcript, and is refused (or reported unapplied) when no call is left."""

from __future__ import annotations

from typing import Any

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import ExitReason, MessageAdded, Steered
from hermes_core.providers import ScriptedProvider, ScriptedReply
from hermes_core.providers.base import ModelRequest
from hermes_core.tools.registry import ToolContext, ToolRegistry
from tests.hermes_core.agent.conftest import finished, run_events

STEER = "Also name the colour of the sky."


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(description="Look.", parameters={"type": "object"})
    async def look(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "seen"

    return registry


def _users(request: ModelRequest) -> list[Any]:
    return [m.get("content") for m in request.messages if m["role"] == "user"]


async def test_a_steer_during_a_step_reaches_the_next_model_call_and_the_transcript() -> None:
    agent: Agent

    def first(request: ModelRequest) -> ScriptedReply:
        assert agent.steer(STEER)  # while the model call is in flight
        return ScriptedReply(tool_calls=[("look", {})])

    provider = ScriptedProvider(first, "Blue, and seen.")
    agent = Agent(provider, tools=_tools())
    events = await run_events(agent, AgentRequest(user_message="look"))

    assert _users(provider.requests[1]) == ["look", STEER]
    assert provider.requests[1].messages[-1] == {"role": "user", "content": STEER}
    added = [e.message for e in events if isinstance(e, MessageAdded)]
    assert {"role": "user", "content": STEER} in added
    assert [(e.text, e.applied) for e in events if isinstance(e, Steered)] == [(STEER, True)]
    assert finished(events).final_text == "Blue, and seen."


async def test_a_steer_during_the_final_reply_goes_round_again_for_one_answer_to_both() -> None:
    agent: Agent

    def first(request: ModelRequest) -> ScriptedReply:
        assert agent.steer(STEER)
        return ScriptedReply(text="Hello.")

    provider = ScriptedProvider(first, "Hello, and the sky is blue.")
    agent = Agent(provider)
    events = await run_events(agent, AgentRequest(user_message="hi"))

    assert len(provider.requests) == 2
    roles = [m["role"] for m in provider.requests[1].messages if m["role"] != "system"]
    assert roles == ["user", "assistant", "user"]
    end = finished(events)
    assert end.exit_reason is ExitReason.COMPLETED
    assert end.final_text == "Hello, and the sky is blue."


async def test_a_steer_with_no_run_going_on_is_refused() -> None:
    agent = Agent(ScriptedProvider("Hello."))

    assert not agent.steer(STEER)  # before any run
    await run_events(agent, AgentRequest(user_message="hi"))
    assert not agent.steer(STEER)  # after it ended


async def test_a_steer_taken_by_a_run_that_is_stopped_is_reported_unapplied() -> None:
    agent: Agent

    def first(request: ModelRequest) -> ScriptedReply:
        assert agent.steer(STEER)
        agent.interrupt("stop")
        return ScriptedReply(tool_calls=[("look", {})])

    provider = ScriptedProvider(first, "never asked")
    agent = Agent(provider, tools=_tools())
    events = await run_events(agent, AgentRequest(user_message="look"))

    end = finished(events)
    assert end.exit_reason is ExitReason.INTERRUPTED
    assert end.final_text == ""  # the user's steer is never taken for the model's answer
    assert [(e.text, e.applied) for e in events if isinstance(e, Steered)] == [(STEER, False)]
    added = [e.message for e in events if isinstance(e, MessageAdded)]
    assert {"role": "user", "content": STEER} not in added
