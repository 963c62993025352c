"""A provider with no wire: each model call answers from a script, in process.

For tests of what the loop does with replies — budgets, tool dispatch, self-correction,
interrupts — where no protocol is under test. Anything that touches a wire is tested over real
HTTP against the upstream simulator instead (``server/simulator``).

    provider = ScriptedProvider(
        ScriptedReply(tool_calls=[("lookup", {"word": "agent"})]),
        lambda request: ScriptedReply(text=f"{len(request.messages)} messages seen"),
    )
    result = await Agent(provider, tools=registry).run_conversation("look it up")
    provider.requests  # what the loop sent, call by call

A step is a :class:`ScriptedReply`, a plain string (a text reply), or a function of the
:class:`~hermes_core.providers.base.ModelRequest` returning one. A call past the end of the
script fails the run with a ``ProviderError`` that says so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.messages import Message, ToolCall
from hermes_core.providers.base import (
    ApiMode,
    FinishReason,
    ModelReasoningDelta,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    ProviderEvent,
    ToolCallDelta,
)
from hermes_core.usage import Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedReply:
    """One model reply."""

    text: str = ""
    reasoning: str = ""
    tool_calls: Sequence[tuple[str, dict[str, Any] | str]] = ()
    """(name, arguments): a dict is sent as JSON, a string verbatim (malformed JSON too)."""
    finish_reason: FinishReason | None = None
    """Overrides the natural one (``tool_calls`` with calls, else ``stop``)."""
    usage: Usage | None = None
    """Default: one token per four characters in and out."""
    delay_s: float = 0.0
    """Seconds before the reply starts (for interrupt tests)."""
    refusal: str = ""
    """The model declines to answer, saying this."""


Step = ScriptedReply | str | Callable[[ModelRequest], ScriptedReply]


class ScriptedProvider:
    """A :class:`~hermes_core.providers.base.Provider` answering from ``steps`` in order."""

    def __init__(
        self,
        *steps: Step,
        name: str = "scripted",
        model: str = "scripted-model",
        context_window: int = 128_000,
    ) -> None:
        self._steps = list(steps)
        self._name = name
        self._model = model
        self._context_window = context_window
        self.requests: list[ModelRequest] = []
        """Every request the provider was given, in order."""

    @property
    def name(self) -> str:
        return self._name

    @property
    def api_mode(self) -> ApiMode:
        return "chat_completions"

    @property
    def model(self) -> str:
        return self._model

    @property
    def context_window(self) -> int:
        return self._context_window

    async def refresh_credentials(self) -> bool:
        return False

    async def aclose(self) -> None:
        return None

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        return self._answer(request)

    async def _answer(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        index = len(self.requests)
        self.requests.append(request)
        if index >= len(self._steps):
            raise ProviderError(
                f"{self._name}: the script has no reply for model call {index + 1}",
                kind=ErrorKind.INVALID_REQUEST,
                provider=self._name,
            )
        reply = _reply(self._steps[index], request)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.reasoning:
            yield ModelReasoningDelta(text=reply.reasoning)
        if reply.text:
            yield ModelTextDelta(text=reply.text)
        calls: list[ToolCall] = []
        for position, (name, arguments) in enumerate(reply.tool_calls):
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            call_id = f"call_{index}_{position}"
            yield ToolCallDelta(index=position, id=call_id, name=name, arguments=text)
            calls.append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
            )
        message: Message = {"role": "assistant", "content": reply.text or None}
        if calls:
            message["tool_calls"] = calls
        if reply.reasoning:
            message["reasoning"] = reply.reasoning
        if reply.refusal:
            message["refusal"] = reply.refusal
        yield ModelResponse(
            message=message,
            finish_reason=reply.finish_reason or ("tool_calls" if calls else "stop"),
            usage=reply.usage or _estimate(request, reply),
            provider=self._name,
            model=self._model,
        )


def _reply(step: Step, request: ModelRequest) -> ScriptedReply:
    if isinstance(step, str):
        return ScriptedReply(text=step)
    if isinstance(step, ScriptedReply):
        return step
    return step(request)


def _estimate(request: ModelRequest, reply: ScriptedReply) -> Usage:
    sent = sum(len(str(message.get("content") or "")) for message in request.messages)
    said = len(reply.text) + len(reply.reasoning)
    said += sum(len(str(arguments)) for _, arguments in reply.tool_calls)
    return Usage(input_tokens=max(1, sent // 4), output_tokens=max(1, said // 4))
