"""The ``chat_completions`` adapter: OpenAI Chat Completions and every server that copies it.

The internal message format already is Chat Completions, so conversion only strips our private
keys. Streams are read by :class:`ChatStreamAccumulator`, a pure state object (chunks in,
provider events out), so the parsing is testable without a network.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from hermes_core import json_codec
from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.messages import Message, ToolCall
from hermes_core.providers._configured import ConfiguredProvider
from hermes_core.providers._wire_errors import (
    error_from_status,
    error_from_stream_frame,
    unreadable_response,
)
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
    coalesce,
)
from hermes_core.providers.cache_markers import mark_chat_messages
from hermes_core.providers.config import ProviderConfig
from hermes_core.providers.images import images_for_model, is_image_part, offers_vision_tool
from hermes_core.providers.think_tags import ThinkTags
from hermes_core.providers.upstream_http import SseData, UpstreamSession, transport_errors
from hermes_core.usage import Usage

# Keys of the internal format that no Chat Completions server accepts.
_PRIVATE_KEYS = ("reasoning", "reasoning_replay")
_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


def to_wire_messages(messages: list[Message] | tuple[Message, ...]) -> list[dict[str, Any]]:
    """Internal messages → Chat Completions messages (a copy; the input is never mutated).

    A tool message takes text only (the API refuses an image part outside a user message), so
    the images of a block of tool results follow it in one user message, each introduced by
    the call it came from: after the block, because the assistant's calls must be answered
    by tool messages with nothing between them.
    """
    wire: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for message in messages:
        out = {key: value for key, value in message.items() if key not in _PRIVATE_KEYS}
        if images and out.get("role") == "user":
            # A user message follows anyway (a closing note): it carries the images, and
            # users still alternate with assistants.
            out["content"] = images + _as_parts(out.get("content"))
            images = []
        elif images and out.get("role") != "tool":
            wire.append({"role": "user", "content": images})
            images = []
        if out.get("role") == "assistant" and out.get("tool_calls") and not out.get("content"):
            out["content"] = None
        if out.get("role") == "tool" and isinstance(out.get("content"), list):
            out["content"], shown = _tool_text_and_images(out)
            images += shown
        wire.append(out)
    if images:
        wire.append({"role": "user", "content": images})
    return wire


def _as_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return list(content)
    return [{"type": "text", "text": content}] if content else []


def _tool_text_and_images(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    parts = message["content"]
    pictures = [part for part in parts if is_image_part(part)]
    lines = [str(part.get("text", "")) for part in parts if part.get("type") == "text"]
    if pictures:
        many = "s" if len(pictures) > 1 else ""
        lines.append(f"[{len(pictures)} image{many} attached in the next message]")
    text = "\n".join(line for line in lines if line)
    if not pictures:
        return text, []
    call_id = message.get("tool_call_id", "")
    intro = {"type": "text", "text": f"Image(s) returned by tool call {call_id}:"}
    return text, [intro, *pictures]


def to_wire_tools(tools: tuple[ToolSchema, ...] | list[ToolSchema]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.parameters),
            },
        }
        for tool in tools
    ]


_ENCODED_TOOLS: dict[int, tuple[tuple[ToolSchema, ...], orjson.Fragment]] = {}
"""The JSON of tool lists, by the tuple's id (the tuple kept with it, so an id is never
mistaken for a later tuple's): a run's model calls all send the same tuple, and encoding its
schemas was a few percent of a request's CPU."""
MAX_ENCODED_TOOLS = 256


def encoded_tools(tools: tuple[ToolSchema, ...]) -> orjson.Fragment:
    """``tools`` as Chat Completions takes them, already JSON: encoded once per tuple."""
    kept = _ENCODED_TOOLS.get(id(tools))
    if kept is None or kept[0] is not tools:
        if len(_ENCODED_TOOLS) >= MAX_ENCODED_TOOLS:  # many registries (MCP churn): start over
            _ENCODED_TOOLS.clear()
        fragment = orjson.Fragment(json_codec.dumps(to_wire_tools(tools)))
        kept = _ENCODED_TOOLS[id(tools)] = (tools, fragment)
    return kept[1]


def request_body(kwargs: dict[str, Any], tools: Sequence[ToolSchema]) -> bytes:
    """The JSON body of ``kwargs``, its tools spliced in already encoded when they are a
    tuple (the registry's, the same object call after call)."""
    plain = kwargs.get("tools")
    if plain is not None and isinstance(tools, tuple):
        kwargs["tools"] = encoded_tools(tools)
        try:
            return orjson.dumps(kwargs)
        except TypeError:  # something orjson refuses elsewhere: the standard library's way
            kwargs["tools"] = plain
    return json_codec.dumps(kwargs)


def wire_response_format(output: OutputFormat) -> dict[str, Any]:
    """``response_format`` as Chat Completions takes it."""
    if output.kind == "json_object":
        return {"type": "json_object"}
    spec: dict[str, Any] = {"name": output.name, "schema": dict(output.schema or {})}
    if output.strict:
        spec["strict"] = True
    if output.description:
        spec["description"] = output.description
    return {"type": "json_schema", "json_schema": spec}


def build_kwargs(request: ModelRequest, *, model: str, vision: bool = True) -> dict[str, Any]:
    """The ``chat.completions.create`` arguments for one call (streamed unless
    ``request.stream`` is False); ``vision`` False sends no images (a text-only model)."""
    messages = images_for_model(
        request.messages, vision=vision, vision_tool=offers_vision_tool(request)
    )
    kwargs: dict[str, Any] = {"model": model, "messages": to_wire_messages(messages)}
    if request.stream:
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
    if request.prompt_cache is not None:
        # Only asked for Claude behind OpenAI-wire gateways, which read markers on content parts.
        kwargs["messages"] = mark_chat_messages(kwargs["messages"], ttl=request.prompt_cache.ttl)
    if request.tools:
        kwargs["tools"] = to_wire_tools(list(request.tools))
        choice = request.tool_choice
        kwargs["tool_choice"] = (
            {"type": "function", "function": {"name": choice.name}}
            if isinstance(choice, ForcedTool)
            else choice
        )
        if request.parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = request.parallel_tool_calls
    if request.max_tokens is not None:
        kwargs["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        kwargs["temperature"] = request.temperature
    if request.reasoning_effort is not None:
        kwargs["reasoning_effort"] = request.reasoning_effort
    if request.output_format is not None:
        kwargs["response_format"] = wire_response_format(request.output_format)
    if request.extra_headers:
        kwargs["extra_headers"] = dict(request.extra_headers)
    return kwargs


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


class ChatStreamAccumulator:
    """Assembles a streamed chat completion; knows nothing of I/O."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._finish_reason: str | None = None
        self._usage = Usage()
        self.model: str | None = None
        self._fresh = True
        """No answer text yet: the first may open a <think> block."""
        self._think: ThinkTags | None = None
        """Splits off the reply's <think> block, while one may be open (None: plain text)."""

    def feed(self, chunk: Mapping[str, Any]) -> list[ProviderEvent]:
        """Take one chunk (the decoded JSON of one SSE frame); return its provider events.

        Chunks stay plain dicts: building the SDK's typed models for every chunk cost more
        CPU than everything else the server does per token.
        """
        if self.model is None:
            self.model = chunk.get("model")
        usage = chunk.get("usage")
        if usage:
            self._usage = _normalise_usage(usage)
        events: list[ProviderEvent] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # we never ask for n > 1
            delta = choice.get("delta") or {}
            # DeepSeek-style servers say reasoning_content, vLLM/OpenRouter say reasoning.
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._reasoning.append(reasoning)
                events.append(ModelReasoningDelta(text=reasoning))
            content = delta.get("content")
            if content:
                if self._fresh:
                    self._first_text(content)
                if self._think is None:
                    self._text.append(content)
                    events.append(ModelTextDelta(text=content))
                else:
                    self._split(self._think.feed(content), events)
            refusal = delta.get("refusal")
            if refusal:
                self._refusal.append(refusal)
            for call in delta.get("tool_calls") or ():
                events.append(self._tool_call_delta(call))
            if choice.get("finish_reason") is not None:
                self._finish_reason = choice["finish_reason"]
        return events

    def _first_text(self, content: str) -> None:
        self._fresh = False
        # Most replies start with a letter: no splitter, no cost per chunk.
        if content.lstrip()[:1] in ("<", ""):
            self._think = ThinkTags()

    def _split(self, pieces: list[tuple[bool, str]], events: list[ProviderEvent]) -> None:
        for is_reasoning, piece in pieces:
            if is_reasoning:
                self._reasoning.append(piece)
                events.append(ModelReasoningDelta(text=piece))
            else:
                self._text.append(piece)
                events.append(ModelTextDelta(text=piece))
        if self._think is not None and self._think.settled:
            self._think = None

    def flush(self) -> list[ProviderEvent]:
        """Text still held back when the reply ends (a would-be ``<think>`` tag)."""
        events: list[ProviderEvent] = []
        if self._think is not None:
            self._split(self._think.flush(), events)
        return events

    def feed_completion(self, completion: Mapping[str, Any]) -> list[ProviderEvent]:
        """Take a whole completion (a call made without ``stream``): each choice's message is
        one delta of everything, so it is read like one last chunk."""
        choices = []
        for choice in completion.get("choices") or ():
            message = dict(choice.get("message") or {})
            calls = message.get("tool_calls") or ()
            message["tool_calls"] = [{**call, "index": i} for i, call in enumerate(calls)]
            delta = {"index": choice.get("index", 0), "delta": message}
            choices.append({**delta, "finish_reason": choice.get("finish_reason")})
        return self.feed({**completion, "choices": choices})

    def _tool_call_delta(self, call: Mapping[str, Any]) -> ToolCallDelta:
        index = int(call.get("index", 0))
        function = call.get("function") or {}
        name = function.get("name")
        arguments = function.get("arguments") or ""
        partial = self._calls.setdefault(index, _PartialCall())
        partial.id = partial.id or (call.get("id") or "")
        partial.name = partial.name or (name or "")
        partial.arguments += arguments
        return ToolCallDelta(index=index, id=call.get("id"), name=name, arguments=arguments)

    def finish(self, *, provider: str, model: str) -> ModelResponse:
        """The assembled response; raises if the stream never said why it stopped."""
        if self._finish_reason is None:
            raise ProviderError(
                f"{provider}: the stream ended before the model finished",
                kind=ErrorKind.CONNECTION,
                provider=provider,
            )
        message: Message = {"role": "assistant", "content": "".join(self._text) or None}
        calls: list[ToolCall] = [
            {
                "id": call.id or f"call_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for index, call in sorted(self._calls.items())
        ]
        if calls:
            message["tool_calls"] = calls
        if self._reasoning:
            message["reasoning"] = "".join(self._reasoning)
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        finish = _FINISH_REASONS.get(self._finish_reason, "stop")
        if calls and finish == "stop":
            finish = "tool_calls"  # some servers say "stop" after tool calls
        return ModelResponse(
            message=message,
            finish_reason=finish,
            usage=self._usage,
            provider=provider,
            model=self.model or model,
        )


def _normalise_usage(usage: Mapping[str, Any]) -> Usage:
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return Usage(
        input_tokens=usage.get("prompt_tokens") or 0,
        cache_read_tokens=prompt_details.get("cached_tokens") or 0,
        cache_write_tokens=prompt_details.get("cache_write_tokens") or 0,
        output_tokens=usage.get("completion_tokens") or 0,
        reasoning_tokens=completion_details.get("reasoning_tokens") or 0,
    )


OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Where calls go when no ``base_url`` is configured (nor ``OPENAI_BASE_URL``, as the SDKs)."""
USER_AGENT = "hermes-server"


class ChatCompletionsProvider(ConfiguredProvider):
    """A provider reached through ``POST {base_url}/chat/completions``, over aiohttp directly
    (see upstream_http.py for why not through the SDK)."""

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        base_url = config.base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._http = UpstreamSession(timeout=config.timeout)
        self._key_changed()

    def _key_changed(self) -> None:
        """(Re)build the request headers, which carry the key: one set per kind of answer."""
        self._headers = {
            "authorization": f"Bearer {self._key}",
            "content-type": "application/json",
            "accept": "text/event-stream",
            "user-agent": USER_AGENT,
        }
        self._json_headers = {**self._headers, "accept": "application/json"}

    @property
    def api_mode(self) -> ApiMode:
        return "chat_completions"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        accumulator = ChatStreamAccumulator()
        kwargs = build_kwargs(request, model=self.model, vision=self._config.vision)
        extra = kwargs.pop("extra_headers", None)
        headers = self._headers if request.stream else self._json_headers
        if extra:
            headers = {**headers, **extra}
        payload = request_body(kwargs, request.tools)
        # We read the SSE ourselves: the SDK's request building and per-chunk decoding cost
        # several milliseconds per call, more than everything else the server does for a
        # request (see bench/server_overhead.py).
        with transport_errors(self.name):
            async with self._http.post(self._url, payload, headers) as response:
                if response.status >= 400:
                    body = await response.read()
                    raise error_from_status(self.name, response.status, response.headers, body)
                if request.stream:
                    frames = SseData()
                    async for piece in response.content.iter_any():
                        events, error = self._events_of(frames.feed(piece), accumulator)
                        for event in events:
                            yield event
                        if error is not None:
                            raise error
                else:
                    for event in self._events_of_reply(await response.read(), accumulator):
                        yield event
        for event in accumulator.flush():
            yield event
        yield accumulator.finish(provider=self.name, model=self.model)

    def _events_of(
        self, frames: list[bytes], accumulator: ChatStreamAccumulator
    ) -> tuple[list[ProviderEvent], ProviderError | None]:
        """The events of the SSE frames that arrived in one read, bursts merged, and the
        in-stream error that ended them, if one did: what came before it in the same read is
        still passed on first, as it would have been had it arrived in a read of its own."""
        events: list[ProviderEvent] = []
        for data in frames:
            if data == b"[DONE]":
                # Keep reading to the end of the body rather than leave: a fully read response
                # returns its connection to the pool; an abandoned one is closed, and a new
                # upstream connection per call costs latency.
                continue
            try:
                chunk = json_codec.loads(data)
            except ValueError as exc:
                raise unreadable_response(self.name, "a stream frame is not JSON") from exc
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error"):
                return coalesce(events), error_from_stream_frame(self.name, chunk)
            events += accumulator.feed(chunk)
        return coalesce(events), None

    def _events_of_reply(
        self, body: bytes, accumulator: ChatStreamAccumulator
    ) -> list[ProviderEvent]:
        """The events of a reply that came in one piece (a call made without ``stream``)."""
        try:
            completion = json_codec.loads(body)
        except ValueError as exc:
            raise unreadable_response(self.name, "the reply is not JSON") from exc
        if not isinstance(completion, dict):
            raise unreadable_response(self.name, "the reply is not a JSON object")
        if completion.get("error"):
            raise error_from_stream_frame(self.name, completion)
        return accumulator.feed_completion(completion)

    async def aclose(self) -> None:
        await self._http.aclose()
