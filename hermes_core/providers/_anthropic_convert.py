"""Internal messages → an Anthropic Messages request, as pure functions.

Anthropic differs from the internal (OpenAI Chat-style) format in ways that bite:

- the system prompt is a top-level ``system`` field, not a message;
- roles must alternate user/assistant, so consecutive same-role turns are merged, and the
  results of parallel tool calls travel as ``tool_result`` blocks in one user turn;
- thinking blocks must come back verbatim, signatures intact, or the API rejects the request;
- ``max_tokens`` is required.

Prompt-cache markers are placed by a :data:`CacheMarkers` hook on the finished request body, so
the strategy (and its limit of four breakpoints) lives apart from the conversion.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

from hermes_core.messages import Message, text_of
from hermes_core.providers.base import ForcedTool, ModelRequest, ToolChoice, ToolSchema
from hermes_core.providers.images import images_for_model, offers_vision_tool

API_MODE = "anthropic_messages"

Block = dict[str, Any]
WireMessage = dict[str, Any]

CacheMarkers = Callable[[dict[str, Any]], dict[str, Any]]
"""Takes the request body (``system`` / ``tools`` / ``messages`` as blocks) and returns it with
``cache_control`` breakpoints placed; must not mutate its argument."""

THINKING_BUDGETS = {"low": 1024, "medium": 4096, "high": 16384}
"""``reasoning_effort`` → ``thinking.budget_tokens`` (1024 is the API's minimum)."""


def no_cache_markers(body: dict[str, Any]) -> dict[str, Any]:
    """The default :data:`CacheMarkers` hook: no breakpoints."""
    return body


def build_kwargs(
    request: ModelRequest,
    *,
    model: str,
    default_max_tokens: int,
    cache_markers: CacheMarkers = no_cache_markers,
    vision: bool = True,
) -> dict[str, Any]:
    """The ``messages.create`` arguments for one streaming call; ``vision`` False sends no
    images (a text-only model)."""
    shown = images_for_model(
        request.messages, vision=vision, vision_tool=offers_vision_tool(request)
    )
    system, messages = to_wire_messages(shown)
    body: dict[str, Any] = {"messages": messages}
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = to_wire_tools(request.tools)
        body["tool_choice"] = to_wire_tool_choice(request.tool_choice, request.parallel_tool_calls)
    body = cache_markers(body)
    max_tokens = request.max_tokens or default_max_tokens
    kwargs: dict[str, Any] = {"model": model, "max_tokens": max_tokens, **body}
    budget = THINKING_BUDGETS.get(request.reasoning_effort or "")
    # The API refuses thinking together with a tool_choice that forces a call; the forced call
    # matters more to the loop than the thinking does.
    forces_tool = bool(request.tools) and request.tool_choice not in ("auto", "none")
    if budget is not None and not forces_tool:
        kwargs["thinking"] = {"type": "enabled", "budget_tokens": budget}
        # The budget is part of max_tokens: keep the answer's own allowance on top of it.
        if max_tokens <= budget:
            kwargs["max_tokens"] = budget + max_tokens
    elif request.temperature is not None:
        # Sent only without thinking: with it, the API accepts no temperature but the default.
        kwargs["temperature"] = request.temperature
    output = request.output_format
    if output is not None and output.kind == "json_schema" and output.schema is not None:
        # Anthropic's native structured outputs. A bare json_object has no schema to give:
        # the instructions ask for JSON, and the agent checks the answer.
        kwargs["output_config"] = {"format": {"type": "json_schema", "schema": dict(output.schema)}}
    if request.extra_headers:
        kwargs["extra_headers"] = dict(request.extra_headers)
    return kwargs


def to_wire_tools(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    return [
        {"name": tool.name, "description": tool.description, "input_schema": dict(tool.parameters)}
        for tool in tools
    ]


def to_wire_tool_choice(choice: ToolChoice, parallel_tool_calls: bool | None) -> dict[str, Any]:
    if isinstance(choice, ForcedTool):
        wire: dict[str, Any] = {"type": "tool", "name": choice.name}
    else:
        wire = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
    # Anthropic puts the parallel switch inside tool_choice; "none" cannot carry it.
    if parallel_tool_calls is False and wire["type"] != "none":
        wire["disable_parallel_tool_use"] = True
    return wire


def to_wire_messages(messages: Sequence[Message]) -> tuple[list[Block], list[WireMessage]]:
    """(``system`` blocks, alternating user/assistant messages); the input is never mutated.

    Leading system messages become ``system``. A later system message stays where it was, as
    user text: hoisting it would change the cached system prefix on every call.
    """
    index = 0
    system: list[Block] = []
    while index < len(messages) and messages[index]["role"] == "system":
        system += _text_blocks(text_of(messages[index].get("content")))
        index += 1
    turns: list[WireMessage] = []
    for message in messages[index:]:
        role = message["role"]
        if role == "assistant":
            _append(turns, "assistant", _assistant_blocks(message))
        elif role == "tool":
            _append(turns, "user", [_tool_result(message)])
        elif role == "system":
            _append(turns, "user", _text_blocks(text_of(message.get("content"))))
        else:
            _append(turns, "user", user_blocks(message.get("content")))
    for turn in turns:
        if turn["role"] == "user":
            # The API wants a turn's tool_result blocks before anything else in it.
            turn["content"].sort(key=lambda block: block.get("type") != "tool_result")
    return system, turns


def _append(turns: list[WireMessage], role: str, blocks: list[Block]) -> None:
    """Add a turn, merging it into the previous one of the same role (roles must alternate)."""
    if not blocks:
        return  # the API rejects empty turns; dropping one lets its neighbours merge
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})


def _text_blocks(text: str) -> list[Block]:
    # Empty text blocks are rejected by the API.
    return [{"type": "text", "text": text}] if text else []


def user_blocks(content: str | list[dict[str, Any]] | None) -> list[Block]:
    """User content (a string or OpenAI parts) → text and image blocks."""
    if content is None or isinstance(content, str):
        return _text_blocks(content or "")
    blocks: list[Block] = []
    for part in content:
        if part.get("type") == "text":
            blocks += _text_blocks(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            image = image_block(part.get("image_url"))
            if image is not None:
                blocks.append(image)
    return blocks


def image_block(image_url: Any) -> Block | None:
    """An OpenAI ``image_url`` (a data: URL or an http(s) URL) → an Anthropic image block."""
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str):
        return None
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        media_type = header.removeprefix("data:").split(";")[0] or "image/png"
        source = {"type": "base64", "media_type": media_type, "data": data}
        return {"type": "image", "source": source}
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    return None


def _assistant_blocks(message: Message) -> list[Block]:
    blocks: list[Block] = []
    replay = message.get("reasoning_replay")
    # A thinking signature is only valid where it was issued: other api_modes' data is dropped.
    if replay is not None and replay.get("api_mode") == API_MODE:
        blocks += [copy.deepcopy(item) for item in replay.get("items", [])]
    blocks += _text_blocks(text_of(message.get("content")))
    for call in message.get("tool_calls") or []:
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": parse_arguments(call["function"]["arguments"]),
            }
        )
    return blocks


def parse_arguments(arguments: str) -> dict[str, Any]:
    """Tool-call arguments as the ``input`` object; ``{}`` when the model produced bad JSON."""
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _tool_result(message: Message) -> Block:
    content = message.get("content")
    if isinstance(content, list):
        blocks = user_blocks(content)  # tool results may carry text and images
        return {
            "type": "tool_result",
            "tool_use_id": message.get("tool_call_id", ""),
            "content": blocks,
        }
    return {
        "type": "tool_result",
        "tool_use_id": message.get("tool_call_id", ""),
        "content": content or "",
    }
