"""The ``anthropic_messages`` adapter: Anthropic's Messages API, streamed.

Streams are read by :class:`AnthropicStreamAccumulator`, a pure state object (raw stream events
in, provider events out; at the end the assistant message, finish reason and usage), so parsing
is testable with literal events. :class:`AnthropicMessagesProvider` is the thin I/O shell around
it. Request building lives in ``_anthropic_convert``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
from anthropic.types import (
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
    RedactedThinkingBlock,
    SignatureDelta,
    TextBlock,
    ThinkingBlock,
    ThinkingDelta,
    ToolUseBlock,
)
from anthropic.types import Message as AnthropicMessage
from anthropic.types import TextDelta as WireTextDelta

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.messages import Message, ToolCall
from hermes_core.providers._anthropic_convert import (
    API_MODE,
    CacheMarkers,
    build_kwargs,
    no_cache_markers,
)
from hermes_core.providers._configured import ConfiguredProvider
from hermes_core.providers._sdk_errors import sdk_errors
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
from hermes_core.providers.cache_markers import system_and_last_3
from hermes_core.providers.config import ProviderConfig
from hermes_core.providers.sdk_tls import upstream_tls_context
from hermes_core.usage import Usage

_FINISH_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
CHARS_PER_TOKEN = 4
REFUSED = "The model declined to answer."
"""The refusal of a reply Anthropic stopped for ``refusal`` without a word of its own."""


@dataclass(slots=True)
class _Block:
    """One content block as it streams in."""

    type: str
    text: list[str] = field(default_factory=list)
    """Text of a ``text`` block, or thinking of a ``thinking`` block."""
    signature: str = ""
    data: str = ""
    """Opaque payload of a ``redacted_thinking`` block."""
    tool_index: int = -1
    """Position among this message's tool_use blocks."""
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    """Raw JSON text of a tool_use block's input, exactly as streamed."""


class AnthropicStreamAccumulator:
    """Assembles a streamed Messages API response; knows nothing of I/O."""

    def __init__(self) -> None:
        self._blocks: dict[int, _Block] = {}
        self._tool_count = 0
        self._stop_reason: str | None = None
        self._stopped = False
        self._input_tokens = 0
        self._cache_read = 0
        self._cache_write = 0
        self._output_tokens = 0
        self.model: str | None = None

    def feed(self, event: RawMessageStreamEvent) -> list[ProviderEvent]:
        """Take one raw stream event; return the provider events it carries."""
        if isinstance(event, RawMessageStartEvent):
            self.model = event.message.model
            usage = event.message.usage
            self._count(
                usage.input_tokens,
                usage.cache_read_input_tokens,
                usage.cache_creation_input_tokens,
                usage.output_tokens,
            )
        elif isinstance(event, RawContentBlockStartEvent):
            return self._start(event.index, event.content_block)
        elif isinstance(event, RawContentBlockDeltaEvent):
            return self._delta(event)
        elif isinstance(event, RawMessageDeltaEvent):
            self._stop_reason = event.delta.stop_reason or self._stop_reason
            usage_delta = event.usage
            self._count(
                usage_delta.input_tokens,
                usage_delta.cache_read_input_tokens,
                usage_delta.cache_creation_input_tokens,
                usage_delta.output_tokens,
            )
        elif isinstance(event, RawMessageStopEvent):
            self._stopped = True
        return []  # content_block_stop and events this adapter does not use

    def _count(
        self, input_tokens: int | None, read: int | None, write: int | None, output: int | None
    ) -> None:
        # Counts are cumulative; a message_delta omits those that did not change.
        self._input_tokens = self._input_tokens if input_tokens is None else input_tokens
        self._cache_read = self._cache_read if read is None else read
        self._cache_write = self._cache_write if write is None else write
        self._output_tokens = self._output_tokens if output is None else output

    def feed_message(self, message: AnthropicMessage) -> list[ProviderEvent]:
        """Take a whole message (a call made without ``stream``): each content block is read
        as a block that started complete, and the message's usage and stop reason end it."""
        self.model = message.model
        usage = message.usage
        self._count(
            usage.input_tokens,
            usage.cache_read_input_tokens,
            usage.cache_creation_input_tokens,
            usage.output_tokens,
        )
        events: list[ProviderEvent] = []
        for index, block in enumerate(message.content):
            events += self._start(index, block)
        self._stop_reason = message.stop_reason
        self._stopped = True
        return events

    def _start(self, index: int, start: object) -> list[ProviderEvent]:
        if isinstance(start, TextBlock):
            self._blocks[index] = _Block(type="text", text=[start.text])
            return [ModelTextDelta(text=start.text)] if start.text else []
        if isinstance(start, ThinkingBlock):
            block = _Block(type="thinking", text=[start.thinking], signature=start.signature)
            self._blocks[index] = block
            return [ModelReasoningDelta(text=start.thinking)] if start.thinking else []
        if isinstance(start, RedactedThinkingBlock):
            self._blocks[index] = _Block(type="redacted_thinking", data=start.data)
            return []
        if isinstance(start, ToolUseBlock):
            # Streams start tool_use with input {}; a non-empty one is already complete.
            initial = (
                json.dumps(start.input, ensure_ascii=False, separators=(",", ":"))
                if start.input
                else ""
            )
            block = _Block(
                type="tool_use",
                tool_index=self._tool_count,
                id=start.id,
                name=start.name,
                arguments=[initial],
            )
            self._blocks[index] = block
            self._tool_count += 1
            return [
                ToolCallDelta(
                    index=block.tool_index, id=start.id, name=start.name, arguments=initial
                )
            ]
        return []  # server-tool blocks: not ours to run or show

    def _delta(self, event: RawContentBlockDeltaEvent) -> list[ProviderEvent]:
        block = self._blocks.get(event.index)
        delta = event.delta
        if block is None:
            return []
        if isinstance(delta, WireTextDelta):
            block.text.append(delta.text)
            return [ModelTextDelta(text=delta.text)] if delta.text else []
        if isinstance(delta, ThinkingDelta):
            block.text.append(delta.thinking)
            return [ModelReasoningDelta(text=delta.thinking)] if delta.thinking else []
        if isinstance(delta, SignatureDelta):
            block.signature = delta.signature
        elif isinstance(delta, InputJSONDelta) and delta.partial_json:
            block.arguments.append(delta.partial_json)
            return [ToolCallDelta(index=block.tool_index, arguments=delta.partial_json)]
        return []

    def finish(self, *, provider: str, model: str) -> ModelResponse:
        """The assembled response; raises if the stream ended before ``message_stop``."""
        if not self._stopped:
            raise ProviderError(
                f"{provider}: the stream ended before the model finished",
                kind=ErrorKind.CONNECTION,
                provider=provider,
            )
        blocks = [self._blocks[index] for index in sorted(self._blocks)]
        text = "".join("".join(b.text) for b in blocks if b.type == "text")
        thinking = "".join("".join(b.text) for b in blocks if b.type == "thinking")
        message: Message = {"role": "assistant", "content": text or None}
        calls = [_tool_call(b) for b in blocks if b.type == "tool_use"]
        if calls:
            message["tool_calls"] = calls
        if thinking:
            message["reasoning"] = thinking
        replay = [_replay_item(b) for b in blocks if b.type in ("thinking", "redacted_thinking")]
        if replay:
            message["reasoning_replay"] = {"api_mode": API_MODE, "items": replay}
        if self._stop_reason == "refusal" and not text:
            message["refusal"] = REFUSED
        finish = _FINISH_REASONS.get(self._stop_reason or "end_turn", "stop")
        if calls and finish == "stop":
            finish = "tool_calls"
        return ModelResponse(
            message=message,
            finish_reason=finish,
            usage=self._usage(thinking),
            provider=provider,
            model=self.model or model,
        )

    def _usage(self, thinking: str) -> Usage:
        # Anthropic reports no reasoning token count: estimate it from the visible thinking text
        # (about four characters per token), never above what the call generated.
        reasoning_estimate = -(-len(thinking) // CHARS_PER_TOKEN)
        return Usage(
            # Anthropic's input_tokens exclude cache reads and writes; ours include both.
            input_tokens=self._input_tokens + self._cache_read + self._cache_write,
            cache_read_tokens=self._cache_read,
            cache_write_tokens=self._cache_write,
            output_tokens=self._output_tokens,
            reasoning_tokens=min(reasoning_estimate, self._output_tokens),
        )


def _tool_call(block: _Block) -> ToolCall:
    return {
        "id": block.id,
        "type": "function",
        "function": {"name": block.name, "arguments": "".join(block.arguments) or "{}"},
    }


def _replay_item(block: _Block) -> dict[str, Any]:
    if block.type == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return {"type": "thinking", "thinking": "".join(block.text), "signature": block.signature}


class AnthropicMessagesProvider(ConfiguredProvider):
    """A provider reached through ``POST {base_url}/v1/messages``.

    A request carrying a :class:`PromptCachePolicy` gets the "system and last 3" breakpoints
    with the policy's TTL; other requests go through ``cache_markers`` (default: none).
    """

    def __init__(
        self, config: ProviderConfig, *, cache_markers: CacheMarkers = no_cache_markers
    ) -> None:
        self._cache_markers = cache_markers
        super().__init__(config)
        self._client = anthropic.AsyncAnthropic(
            base_url=config.base_url,
            api_key=self._key,
            max_retries=0,  # retries and fallback belong to the agent, not the SDK
            timeout=config.timeout,
            http_client=anthropic.DefaultAsyncHttpxClient(verify=upstream_tls_context()),
        )

    def _key_changed(self) -> None:
        self._client = self._client.with_options(api_key=self._key)

    async def aclose(self) -> None:
        await self._client.close()

    @property
    def api_mode(self) -> ApiMode:
        return "anthropic_messages"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        accumulator = AnthropicStreamAccumulator()
        kwargs = build_kwargs(
            request,
            model=self.model,
            default_max_tokens=self._config.max_output_tokens,
            vision=self._config.vision,
            cache_markers=(
                system_and_last_3(request.prompt_cache.ttl)
                if request.prompt_cache is not None
                else self._cache_markers
            ),
        )
        with sdk_errors(self.name):
            if not request.stream:  # nobody watches: the whole message, one body to read
                message = await self._client.messages.create(**kwargs)
                for provider_event in accumulator.feed_message(message):
                    yield provider_event
                yield accumulator.finish(provider=self.name, model=self.model)
                return
            upstream = await self._client.messages.create(stream=True, **kwargs)
            try:
                async for event in upstream:
                    for provider_event in accumulator.feed(event):
                        yield provider_event
            finally:
                # Runs on normal end, on error, on aclose() and on task cancellation alike:
                # the upstream connection never outlives our interest in it.
                await upstream.close()
        yield accumulator.finish(provider=self.name, model=self.model)
