"""The ``codex_responses`` adapter: the OpenAI Responses API (OpenAI, ChatGPT Codex, xAI).

Internal (Chat-style) messages become Responses input items at the edge: leading system text
becomes ``instructions``, tool calls and results become ``function_call`` /
``function_call_output`` items, and reasoning items this adapter produced earlier are replayed
verbatim. Streams are read by :class:`ResponsesStreamAccumulator`, a pure state object (stream
events in, provider events out), so the parsing is testable without a network.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import openai
from openai import AsyncStream
from openai.types import responses as wire

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.messages import Message, ToolCall, text_of
from hermes_core.providers._configured import ConfiguredProvider
from hermes_core.providers._sdk_errors import sdk_errors
from hermes_core.providers._wire_errors import redact
from hermes_core.providers.base import (
    ApiMode,
    FinishReason,
    ForcedTool,
    ModelReasoningDelta,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    OutputFormat,
    ProviderEvent,
    ToolCallDelta,
    ToolSchema,
)
from hermes_core.providers.config import ProviderConfig
from hermes_core.providers.images import images_for_model, offers_vision_tool
from hermes_core.providers.sdk_tls import upstream_tls_context
from hermes_core.usage import Usage

API_MODE: ApiMode = "codex_responses"
_INCOMPLETE_FINISH: dict[str, FinishReason] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}
# Codes of ``error`` events and ``response.error``; anything unknown is the upstream's fault.
_ERROR_KINDS = {
    "rate_limit_exceeded": ErrorKind.RATE_LIMIT,
    "rate_limit_error": ErrorKind.RATE_LIMIT,
    "context_length_exceeded": ErrorKind.CONTEXT_OVERFLOW,
    "invalid_prompt": ErrorKind.INVALID_REQUEST,
}
_PARAGRAPH = "\n\n"


# --- request conversion -------------------------------------------------------------------------


def to_input(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """Internal messages → (``instructions``, input items); the input is never mutated."""
    leading = 0
    while leading < len(messages) and messages[leading]["role"] == "system":
        leading += 1
    system = [text_of(m.get("content")) for m in messages[:leading]]
    instructions = _PARAGRAPH.join(text for text in system if text) or None
    items: list[dict[str, Any]] = []
    for message in messages[leading:]:
        items += _items_of(message)
    return instructions, items


def _items_of(message: Message) -> list[dict[str, Any]]:
    role = message["role"]
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id", ""),
                "output": _tool_output(message.get("content")),
            }
        ]
    if role == "assistant":
        return _assistant_items(message)
    # user, and system text that is not at the start (Responses accepts it as an item)
    return [{"type": "message", "role": role, "content": _input_content(message.get("content"))}]


def _assistant_items(message: Message) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    replay = message.get("reasoning_replay")
    # Reasoning items (and their encrypted content) are only valid where they were issued.
    if replay is not None and replay["api_mode"] == API_MODE:
        items += [dict(item) for item in replay["items"]]
    text = text_of(message.get("content"))
    if text:
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    items += [
        {
            "type": "function_call",
            "call_id": call["id"],
            "name": call["function"]["name"],
            "arguments": call["function"]["arguments"],
        }
        for call in message.get("tool_calls") or []
    ]
    return items


def _input_content(content: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]]:
    if content is None or isinstance(content, str):
        return content or ""
    return [_input_part(part) for part in content]


def _tool_output(content: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]]:
    # Plain text stays a string; a result with images keeps its parts.
    if isinstance(content, list) and any(p.get("type") != "text" for p in content):
        return [_input_part(part) for part in content]
    if isinstance(content, list):  # text parts (an image's placeholder among them): lines
        return "\n".join(str(p.get("text", "")) for p in content if p.get("text"))
    return text_of(content)


def _input_part(part: dict[str, Any]) -> dict[str, Any]:
    if part.get("type") == "text":
        return {"type": "input_text", "text": str(part.get("text", ""))}
    if part.get("type") == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        detail = image.get("detail") if isinstance(image, dict) else None
        return {"type": "input_image", "image_url": url, "detail": detail or "auto"}
    return dict(part)  # already a Responses part (input_file, ...): pass it through


def to_wire_tools(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    # strict=False: our schemas are not written for strict mode (optional properties, no
    # additionalProperties:false), and OpenAI would otherwise default strict to true.
    return [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": dict(tool.parameters),
            "strict": False,
        }
        for tool in tools
    ]


def wire_text_format(output: OutputFormat) -> dict[str, Any]:
    """``text.format`` as the Responses API takes it."""
    if output.kind == "json_object":
        return {"type": "json_object"}
    wire: dict[str, Any] = {
        "type": "json_schema",
        "name": output.name,
        "schema": dict(output.schema or {}),
    }
    if output.strict:
        wire["strict"] = True
    if output.description:
        wire["description"] = output.description
    return wire


def build_kwargs(request: ModelRequest, *, model: str, vision: bool = True) -> dict[str, Any]:
    """The ``responses.create`` arguments for one call (streamed unless ``request.stream`` is
    False); ``vision`` False sends no images (a text-only model)."""
    messages = images_for_model(
        request.messages, vision=vision, vision_tool=offers_vision_tool(request)
    )
    instructions, items = to_input(messages)
    # store=False: the conversation lives in our own store, never on the vendor's.
    kwargs: dict[str, Any] = {"model": model, "input": items, "store": False}
    if request.stream:
        kwargs["stream"] = True
    if instructions is not None:
        kwargs["instructions"] = instructions
    if request.tools:
        kwargs["tools"] = to_wire_tools(request.tools)
        choice = request.tool_choice
        kwargs["tool_choice"] = (
            {"type": "function", "name": choice.name} if isinstance(choice, ForcedTool) else choice
        )
        if request.parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = request.parallel_tool_calls
    if request.max_tokens is not None:
        kwargs["max_output_tokens"] = request.max_tokens
    if request.temperature is not None:
        kwargs["temperature"] = request.temperature
    if request.reasoning_effort is not None:
        kwargs["reasoning"] = {"effort": request.reasoning_effort, "summary": "auto"}
        # With store=False a replayed reasoning item is only accepted with its encrypted
        # content. Asked for only when reasoning is on: some non-reasoning models refuse it.
        kwargs["include"] = ["reasoning.encrypted_content"]
    if request.output_format is not None:
        kwargs["text"] = {"format": wire_text_format(request.output_format)}
    if request.extra_headers:
        kwargs["extra_headers"] = dict(request.extra_headers)
    return kwargs


# --- stream accumulation ------------------------------------------------------------------------


@dataclass(slots=True)
class _PartialCall:
    call_id: str
    name: str
    arguments: str = ""


class ResponsesStreamAccumulator:
    """Assembles a streamed response; knows nothing of I/O.

    Deltas are authoritative as they arrive; ``.done`` events and finished items only add what
    the deltas missed, so servers that skip deltas still yield the whole text.
    """

    def __init__(self, *, provider: str) -> None:
        self._provider = provider
        self._text: dict[tuple[str, int], str] = {}
        self._reasoning: dict[tuple[str, str, int], str] = {}
        self._calls: list[_PartialCall] = []
        self._call_by_item: dict[str, int] = {}
        self._call_by_output: dict[int, int] = {}
        self._replay: list[dict[str, Any]] = []
        self._final: wire.Response | None = None
        self.model: str | None = None
        self._refusal: list[str] = []

    def feed(self, event: wire.ResponseStreamEvent) -> list[ProviderEvent]:
        """Take one stream event; return the provider events it carries."""
        if isinstance(event, wire.ResponseTextDeltaEvent):
            return self._say((event.item_id, event.content_index), event.delta)
        if isinstance(event, wire.ResponseTextDoneEvent):
            return self._say((event.item_id, event.content_index), event.text, full=True)
        if isinstance(
            event,
            wire.ResponseReasoningSummaryTextDeltaEvent | wire.ResponseReasoningTextDeltaEvent,
        ):
            return self._think(_reasoning_key(event), event.delta)
        if isinstance(
            event, wire.ResponseReasoningSummaryTextDoneEvent | wire.ResponseReasoningTextDoneEvent
        ):
            return self._think(_reasoning_key(event), event.text, full=True)
        if isinstance(event, wire.ResponseOutputItemAddedEvent):
            if isinstance(event.item, wire.ResponseFunctionToolCall):
                return self._start_call(event.output_index, event.item)
            return []
        if isinstance(event, wire.ResponseFunctionCallArgumentsDeltaEvent):
            return self._extend_call(event.item_id, event.output_index, event.delta)
        if isinstance(event, wire.ResponseFunctionCallArgumentsDoneEvent):
            return self._extend_call(event.item_id, event.output_index, event.arguments, full=True)
        if isinstance(event, wire.ResponseOutputItemDoneEvent):
            return self._finish_item(event.output_index, event.item)
        self._lifecycle(event)
        return []

    def feed_response(self, response: wire.Response) -> list[ProviderEvent]:
        """Take a whole response (a call made without ``stream``): each output item is read as
        an item that arrived finished, and the response as the stream's terminal event."""
        if response.status == "failed":
            error = response.error
            raise self._error(error.code if error else None, error.message if error else None)
        events: list[ProviderEvent] = []
        for output_index, item in enumerate(response.output):
            events += self._finish_item(output_index, item)
        self._final = response
        self.model = response.model
        return events

    def finish(self, *, model: str) -> ModelResponse:
        """The assembled response; raises if the stream never reached a terminal event."""
        if self._final is None:
            raise ProviderError(
                f"{self._provider}: the stream ended before the response was completed",
                kind=ErrorKind.CONNECTION,
                provider=self._provider,
            )
        message: Message = {"role": "assistant", "content": "".join(self._text.values()) or None}
        calls: list[ToolCall] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in self._calls
        ]
        if calls:
            message["tool_calls"] = calls
        reasoning = _PARAGRAPH.join(text for text in self._reasoning.values() if text)
        if reasoning:
            message["reasoning"] = reasoning
        if self._replay:
            message["reasoning_replay"] = {"api_mode": API_MODE, "items": self._replay}
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        details = self._final.incomplete_details
        finish: FinishReason = "tool_calls" if calls else "stop"
        # Truncation outranks tool calls: the last call's arguments may be cut off.
        if self._final.status == "incomplete" and details is not None and details.reason:
            finish = _INCOMPLETE_FINISH.get(details.reason, finish)
        return ModelResponse(
            message=message,
            finish_reason=finish,
            usage=_usage(self._final.usage),
            provider=self._provider,
            model=self.model or model,
        )

    # --- handlers ---------------------------------------------------------------------------

    def _lifecycle(self, event: wire.ResponseStreamEvent) -> None:
        if isinstance(event, wire.ResponseCreatedEvent | wire.ResponseInProgressEvent):
            self.model = event.response.model
        elif isinstance(event, wire.ResponseCompletedEvent | wire.ResponseIncompleteEvent):
            self._final = event.response
            self.model = event.response.model
        elif isinstance(event, wire.ResponseFailedEvent):
            error = event.response.error
            raise self._error(error.code if error else None, error.message if error else None)
        elif isinstance(event, wire.ResponseErrorEvent):
            raise self._error(event.code, event.message)

    def _say(self, key: tuple[str, int], text: str, *, full: bool = False) -> list[ProviderEvent]:
        piece = _missing(self._text.get(key, ""), text) if full else text
        if not piece:
            return []
        self._text[key] = self._text.get(key, "") + piece
        return [ModelTextDelta(text=piece)]

    def _think(
        self, key: tuple[str, str, int], text: str, *, full: bool = False
    ) -> list[ProviderEvent]:
        so_far = self._reasoning.get(key)
        piece = _missing(so_far or "", text) if full else text
        if not piece:
            return []
        self._reasoning[key] = (so_far or "") + piece
        # A new summary part reads as a new paragraph, in the deltas as in the final text.
        earlier = any(seen for k, seen in self._reasoning.items() if k != key)
        lead = _PARAGRAPH if so_far is None and earlier else ""
        return [ModelReasoningDelta(text=lead + piece)]

    def _start_call(
        self, output_index: int, item: wire.ResponseFunctionToolCall
    ) -> list[ProviderEvent]:
        index = len(self._calls)
        self._calls.append(_PartialCall(item.call_id, item.name, item.arguments or ""))
        self._call_by_output[output_index] = index
        if item.id:
            self._call_by_item[item.id] = index
        return [
            ToolCallDelta(index=index, id=item.call_id, name=item.name, arguments=item.arguments)
        ]

    def _extend_call(
        self, item_id: str, output_index: int, text: str, *, full: bool = False
    ) -> list[ProviderEvent]:
        index = self._call_by_item.get(item_id, self._call_by_output.get(output_index))
        if index is None:
            return []  # arguments for a call that was never announced: nothing to attach to
        call = self._calls[index]
        piece = _missing(call.arguments, text) if full else text
        if not piece:
            return []
        call.arguments += piece
        return [ToolCallDelta(index=index, arguments=piece)]

    def _finish_item(self, output_index: int, item: wire.ResponseOutputItem) -> list[ProviderEvent]:
        if isinstance(item, wire.ResponseFunctionToolCall):
            if output_index not in self._call_by_output:
                return self._start_call(output_index, item)
            return self._extend_call(item.id or "", output_index, item.arguments, full=True)
        if isinstance(item, wire.ResponseReasoningItem):
            # Verbatim (only the fields the server sent): the next call replays it as input.
            self._replay.append(item.to_dict(mode="json"))
            events: list[ProviderEvent] = []
            for n, part in enumerate(item.summary):
                events += self._think((item.id, "summary", n), part.text, full=True)
            return events
        if isinstance(item, wire.ResponseOutputMessage):
            events = []
            for n, content in enumerate(item.content):
                if content.type == "output_text":
                    events += self._say((item.id, n), content.text, full=True)
                elif content.type == "refusal":
                    self._refusal.append(content.refusal)
            return events
        return []

    def _error(self, code: str | None, message: str | None) -> ProviderError:
        kind = _ERROR_KINDS.get(code or "", ErrorKind.SERVER_ERROR)
        return ProviderError(
            f"{self._provider}: upstream stream error {code or 'unknown'}: "
            f"{redact(message or 'no message')}",
            kind=kind,
            provider=self._provider,
        )


def _reasoning_key(
    event: wire.ResponseReasoningSummaryTextDeltaEvent
    | wire.ResponseReasoningSummaryTextDoneEvent
    | wire.ResponseReasoningTextDeltaEvent
    | wire.ResponseReasoningTextDoneEvent,
) -> tuple[str, str, int]:
    if isinstance(
        event,
        wire.ResponseReasoningSummaryTextDeltaEvent | wire.ResponseReasoningSummaryTextDoneEvent,
    ):
        return (event.item_id, "summary", event.summary_index)
    return (event.item_id, "content", event.content_index)


def _missing(so_far: str, full: str) -> str:
    """What a complete text adds to the deltas already seen ("" when the deltas disagree)."""
    return full[len(so_far) :] if full.startswith(so_far) else ""


def _usage(usage: Any) -> Usage:
    # getattr throughout: Responses-compatible servers often omit the detail objects.
    if usage is None:
        return Usage()
    input_details = getattr(usage, "input_tokens_details", None)
    output_details = getattr(usage, "output_tokens_details", None)
    return Usage(
        input_tokens=getattr(usage, "input_tokens", 0) or 0,
        cache_read_tokens=getattr(input_details, "cached_tokens", 0) or 0,
        cache_write_tokens=getattr(input_details, "cache_write_tokens", 0) or 0,
        output_tokens=getattr(usage, "output_tokens", 0) or 0,
        reasoning_tokens=getattr(output_details, "reasoning_tokens", 0) or 0,
    )


# --- the provider -------------------------------------------------------------------------------


class ResponsesProvider(ConfiguredProvider):
    """A provider reached through ``POST {base_url}/responses``."""

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url,
            api_key=self._key,
            max_retries=0,  # retries and fallback belong to the agent, not the SDK
            timeout=config.timeout,
            http_client=openai.DefaultAsyncHttpxClient(verify=upstream_tls_context()),
        )

    def _key_changed(self) -> None:
        self._client = self._client.with_options(api_key=self._key)

    async def aclose(self) -> None:
        await self._client.close()

    @property
    def api_mode(self) -> ApiMode:
        return API_MODE

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        accumulator = ResponsesStreamAccumulator(provider=self.name)
        kwargs = build_kwargs(request, model=self.model, vision=self._config.vision)
        with sdk_errors(self.name):
            if not request.stream:  # nobody watches: the whole response, one body to read
                whole: wire.Response = await self._client.responses.create(**kwargs)
                for provider_event in accumulator.feed_response(whole):
                    yield provider_event
                yield accumulator.finish(model=self.model)
                return
            upstream: AsyncStream[wire.ResponseStreamEvent]
            upstream = await self._client.responses.create(**kwargs)
            try:
                async for event in upstream:
                    for provider_event in accumulator.feed(event):
                        yield provider_event
            finally:
                # Runs on normal end, on error, on aclose() and on task cancellation alike:
                # the upstream connection never outlives our interest in it.
                await upstream.close()
        yield accumulator.finish(model=self.model)
