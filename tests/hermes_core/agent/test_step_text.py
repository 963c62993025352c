"""The text of a run's model steps reads as paragraphs, not run together."""

from __future__ import annotations

from typing import Any

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import TextDelta
from hermes_core.providers import ScriptedProvider, ScriptedReply
from hermes_core.tools.registry import ToolContext, ToolRegistry
from tests.hermes_core.agent.conftest import finished, run_events


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(description="Look.", parameters={"type": "object"})
    async def look(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "seen"

    return registry


async def test_a_later_steps_text_starts_a_new_paragraph() -> None:
    provider = ScriptedProvider(
        ScriptedReply(text="Let me check.", tool_calls=[("look", {})]),
        ScriptedReply(tool_calls=[("look", {})]),  # a step without text adds no break
        "Found it.",
    )
    events = await run_events(Agent(provider, tools=_tools()), AgentRequest(user_message="go"))

    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert shown == "Let me check.\n\nFound it."
    assert finished(events).final_text == "Found it."


async def test_a_single_step_gets_no_break() -> None:
    events = await run_events(Agent(ScriptedProvider("Hello.")), AgentRequest(user_message="hi"))

    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hello."]


async def test_no_model_call_ends_on_an_assistant_turn() -> None:
    provider = ScriptedProvider("Go on then.")
    history: list[Any] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello."},
    ]

    await Agent(provider).run_conversation(None, conversation_history=history)

    assert provider.requests[0].messages[-1]["role"] == "user"
