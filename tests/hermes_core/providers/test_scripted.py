"""The scripted in-process provider: replies in order, tool calls the loop runs, requests
recorded, and a run that outlives its script failing with a message that says so."""

from __future__ import annotations

from typing import Any

from hermes_core.agent import Agent
from hermes_core.providers import ModelRequest, ScriptedProvider, ScriptedReply
from hermes_core.tools.registry import ToolContext, ToolRegistry


def _lookup_tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        description="Look a word up.",
        parameters={"type": "object", "properties": {"word": {"type": "string"}}},
    )
    async def lookup(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return f"{arguments['word']}: one who acts"

    return registry


async def test_a_scripted_tool_call_runs_and_its_result_reaches_the_next_reply() -> None:
    def summarise(request: ModelRequest) -> ScriptedReply:
        result = next(m for m in request.messages if m["role"] == "tool")
        return ScriptedReply(text=f"Found it. {result['content']}", reasoning="easy")

    provider = ScriptedProvider(
        ScriptedReply(tool_calls=[("lookup", {"word": "agent"})]), summarise
    )
    result = await Agent(provider, tools=_lookup_tools()).run_conversation("define agent")

    assert result["final_response"] == "Found it. agent: one who acts"
    assert result["exit_reason"] == "completed"
    assert len(provider.requests) == 2
    assert "lookup" in [tool.name for tool in provider.requests[0].tools]


async def test_a_run_past_the_end_of_its_script_fails_and_says_why() -> None:
    provider = ScriptedProvider(ScriptedReply(tool_calls=[("lookup", {"word": "x"})]))
    result = await Agent(provider, tools=_lookup_tools()).run_conversation("define x")

    assert result["exit_reason"] == "failed"
    assert "no reply for model call 2" in str(result["error"])


async def test_malformed_arguments_are_sent_verbatim_and_the_loop_asks_again() -> None:
    provider = ScriptedProvider(
        ScriptedReply(tool_calls=[("lookup", '{"word": agent}')]),
        "gave up",
    )
    result = await Agent(provider, tools=_lookup_tools()).run_conversation("define agent")

    assert len(provider.requests) == 2
    assert result["final_response"] == "gave up"
    assert not any(m.get("tool_calls") for m in result["messages"])
