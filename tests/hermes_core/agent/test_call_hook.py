"""A request's ``on_call`` hook: told of each model call the run pays for as the run counts it
(``ActiveRun.count``): its own, a compression's summariser's, and a sub-agent's once the
sub-agent ends; each exactly once, in the order of ``RunFinished.calls``."""

from __future__ import annotations

from typing import Any

from hermes_core.agent import Agent, AgentConfig, AgentRequest
from hermes_core.context.hooks import CallContext, Compaction, ContextHooks
from hermes_core.events import CallRecord, ExitReason
from hermes_core.pricing import Price, PriceTable
from hermes_core.providers import ScriptedProvider, ScriptedReply
from hermes_core.tools.registry import ToolContext, ToolRegistry
from hermes_core.usage import Usage
from tests.hermes_core.agent.conftest import finished, run_events

MODEL = "test-model-2026"
PRICES = PriceTable({"test-model": Price(input=1.0, output=4.0)})


def _usage(tokens: int) -> Usage:
    return Usage(input_tokens=tokens, output_tokens=tokens // 10)


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(description="Do a small step.", parameters={"type": "object"})
    async def step(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "step done"

    return registry


class _SummarisesOnce(ContextHooks):
    """Compresses before the run's first call, with a summary a model call wrote."""

    def __init__(self) -> None:
        self.done = False

    async def before_call(self, context: CallContext) -> Compaction | None:
        if self.done:
            return None
        self.done = True
        return Compaction(
            tokens_before=100,
            tokens_after=10,
            messages_before=1,
            session_id="s.1",
            parent_session_id=context.session_id,
            summarised=True,
            summariser_call=CallRecord(
                provider="summariser", model=MODEL, usage=_usage(7_000), cost_usd=0.0
            ),
        )


async def test_the_hook_hears_each_call_once_in_the_order_the_run_counts_them() -> None:
    # The summariser's call, the parent's delegating call, the sub-agent's two, the answer.
    delegate = ScriptedReply(tool_calls=[("delegate_task", {"goal": "step"})], usage=_usage(1_000))
    provider = ScriptedProvider(
        delegate,
        ScriptedReply(tool_calls=[("step", {})], usage=_usage(2_000)),
        ScriptedReply(text="child done", usage=_usage(3_000)),
        ScriptedReply(text="all done", usage=_usage(4_000)),
        model=MODEL,
    )
    agent = Agent(
        provider, tools=_tools(), config=AgentConfig(prices=PRICES), context=_SummarisesOnce()
    )
    heard: list[CallRecord] = []

    end = finished(await run_events(agent, AgentRequest(user_message="go", on_call=heard.append)))

    assert end.exit_reason is ExitReason.COMPLETED
    assert [call.usage.input_tokens for call in heard] == [7_000, 1_000, 2_000, 3_000, 4_000]
    assert len(end.calls) == len(heard)
    assert all(a is b for a, b in zip(heard, end.calls, strict=True))
    assert heard[1].cost_usd > 0  # priced when heard


async def test_the_hook_hears_a_call_before_the_next_one_is_made() -> None:
    provider = ScriptedProvider(
        ScriptedReply(tool_calls=[("step", {})], usage=_usage(1_000)),
        ScriptedReply(text="done", usage=_usage(2_000)),
        model=MODEL,
    )
    requests_made: list[int] = []

    def on_call(call: CallRecord) -> None:
        requests_made.append(len(provider.requests))

    await run_events(
        Agent(provider, tools=_tools()), AgentRequest(user_message="go", on_call=on_call)
    )

    assert requests_made == [1, 2]


async def test_a_sub_agents_calls_are_heard_only_when_it_ends() -> None:
    delegate = ScriptedReply(tool_calls=[("delegate_task", {"goal": "step"})], usage=_usage(1_000))
    provider = ScriptedProvider(
        delegate,
        ScriptedReply(tool_calls=[("step", {})], usage=_usage(2_000)),
        ScriptedReply(text="child done", usage=_usage(3_000)),
        ScriptedReply(text="all done", usage=_usage(4_000)),
        model=MODEL,
    )
    requests_made: list[int] = []

    def on_call(call: CallRecord) -> None:
        requests_made.append(len(provider.requests))

    await run_events(
        Agent(provider, tools=_tools()), AgentRequest(user_message="go", on_call=on_call)
    )

    assert requests_made == [1, 3, 3, 4]  # the child's two, together, after its last call
