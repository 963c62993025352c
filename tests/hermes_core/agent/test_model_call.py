"""A model call reads its provider's stream to the end, in the call."""

from __future__ import annotations

from collections.abc import AsyncIterator

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import AgentEvent
from hermes_core.providers import ScriptedProvider
from hermes_core.providers.base import ModelRequest, ProviderEvent


class _Logged(ScriptedProvider):
    """Says in ``log`` when its stream's generator has finished."""

    def __init__(self, log: list[str], *replies: str) -> None:
        super().__init__(*replies)
        self.log = log

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        try:
            async for event in super().stream(request):
                yield event
        finally:
            self.log.append("stream finished")


async def test_the_providers_stream_has_finished_when_the_step_is_counted() -> None:
    # Left suspended at its final response, a generator (and each one it reads from) would be
    # finished later by the event loop, at the cost of a task and a loop wake-up each.
    log: list[str] = []

    def deliver(event: AgentEvent) -> None:
        log.append(event.kind)

    agent = Agent(_Logged(log, "Hello."))
    await agent.execute(AgentRequest(user_message="hi"), deliver)

    assert log.index("stream finished") < log.index("step_finished")
    assert log[-1] == "run_finished"
