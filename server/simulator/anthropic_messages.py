"""The simulator's Anthropic Messages endpoint (``POST /v1/messages``).

Faithful where an agent loop can go wrong against the real API: ``tool_use`` / ``tool_result``
pairing, at most four ``cache_control`` breakpoints, thinking signatures that must come back
verbatim, and prompt-cache usage reported the Anthropic way (``input_tokens`` excludes cache
reads and writes).

One deliberate limit: a non-streaming reply cannot carry malformed tool arguments, because the
wire format has only the parsed ``input`` object; a scripted ``raw_arguments`` that is not a JSON
object becomes ``input: {}`` there. Only a streamed reply delivers the raw text
(``input_json_delta``), exactly as the real API would stream it.

This module reads the request (validation, prompt-cache accounting, the policy's view);
:mod:`server.simulator.anthropic_messages_reply` builds the reply and its SSE frames.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from starlette.responses import Response

from server.simulator.anthropic_messages_reply import (
    error_frame,
    message_object,
    stream_frames,
    thinking_signature,
)
from server.simulator.cache import CacheResult, Segment
from server.simulator.images import anthropic_problem
from server.simulator.policy import ConversationView, OfferedTool, ViewMessage, default_reply
from server.simulator.scenario import Reply
from server.simulator.state import CallPlan, SimulatorState
from server.simulator.tokens import canonical, estimate_tokens
from server.simulator.wire import error_response, json_reply, preflight, stream_response

MAX_CACHE_BREAKPOINTS = 4
MIN_THINKING_BUDGET = 1024
# What the default policy "thinks" when a request enables thinking but the policy had no thought.
_DEFAULT_THINKING = "Let me think about what the user asked and how to answer it."


async def respond(state: SimulatorState, plan: CallPlan, body: dict[str, Any]) -> Response:
    refusal = await preflight(state, plan)
    if refusal is not None:
        return refusal
    problem = validate(body)
    if problem is not None:
        return error_response(state, plan, 400, problem)
    reply = plan.step.reply if plan.step and plan.step.reply else _default_reply(body)
    prompt = segments(body)
    cache = state.cache.account(prompt, report_writes=True)
    writes = write_split(prompt, cache, min_tokens=state.cache.min_cacheable_tokens)
    usage = _usage(cache, writes, reply)
    message_id = f"msg_sim{plan.record.seq}"
    model = str(body.get("model", ""))

    def frames() -> list[str]:
        return stream_frames(message_id, model, reply, usage, plan.record.seq)

    if body.get("stream"):
        return stream_response(state, plan, frames(), error_frame=error_frame)
    payload = message_object(message_id, model, reply, usage, plan.record.seq)
    return await json_reply(state, plan, payload, frame_count=lambda: len(frames()))


# --- validation -------------------------------------------------------------------------------


def validate(body: dict[str, Any]) -> str | None:
    """The checks the real API makes that a buggy agent loop would trip (400 messages)."""
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        return "max_tokens: Field required"
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Input should be a valid integer greater than or equal to 1"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    return (
        _check_roles(messages)
        or _check_thinking_config(body, max_tokens)
        or _check_tool_pairing(messages)
        or anthropic_problem(messages)
        or _check_signatures(messages)
        or _check_breakpoint_count(body)
    )


def _check_roles(messages: list[Any]) -> str | None:
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        if not isinstance(content, str | list):
            return f"messages.{i}.content: Field required"
    return None


def _check_thinking_config(body: dict[str, Any], max_tokens: int) -> str | None:
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "adaptive"):
        return None
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        return "Thinking may not be enabled when tool_choice forces tool use."
    if thinking.get("type") == "adaptive":
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
        return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    if budget >= max_tokens:
        return "`max_tokens` must be greater than `thinking.budget_tokens`."
    return None


def _check_tool_pairing(messages: list[dict[str, Any]]) -> str | None:
    for i, current in enumerate(messages):
        previous = messages[i - 1] if i else None
        offered = _tool_use_ids(previous) if previous and previous["role"] == "assistant" else []
        answered: list[str] = []
        if current["role"] == "user":
            for j, block in enumerate(blocks_of(current.get("content"))):
                if block.get("type") != "tool_result":
                    continue
                result_id = str(block.get("tool_use_id"))
                if result_id not in offered:
                    return (
                        f"messages.{i}.content.{j}: unexpected tool_use_id found in tool_result "
                        f"blocks: {result_id}. Each tool_result block must have a corresponding "
                        "tool_use block in the previous message."
                    )
                answered.append(result_id)
        missing = [call_id for call_id in offered if call_id not in answered]
        if missing:
            return _unanswered(i - 1, missing)
    last = messages[-1]
    if last["role"] == "assistant" and _tool_use_ids(last):
        return _unanswered(len(messages) - 1, _tool_use_ids(last))
    return None


def _unanswered(index: int, ids: list[str]) -> str:
    return (
        f"messages.{index}: tool_use ids were found without tool_result blocks immediately "
        f"after: {', '.join(ids)}. Each tool_use block must have a corresponding tool_result "
        "block in the next message."
    )


def _check_signatures(messages: list[dict[str, Any]]) -> str | None:
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        for j, block in enumerate(blocks_of(message.get("content"))):
            if block.get("type") != "thinking":
                continue
            expected = thinking_signature(str(block.get("thinking", "")))
            if block.get("signature") != expected:
                return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
    return None


def _check_breakpoint_count(body: dict[str, Any]) -> str | None:
    # Automatic caching (a top-level cache_control) takes one of the four slots.
    found = sum(segment.breakpoint for segment in segments(body))
    if found > MAX_CACHE_BREAKPOINTS:
        return (
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )
    return None


def _tool_use_ids(message: dict[str, Any]) -> list[str]:
    return [
        str(block.get("id"))
        for block in blocks_of(message.get("content"))
        if block.get("type") == "tool_use"
    ]


def blocks_of(content: Any) -> list[dict[str, Any]]:
    """Content as blocks: a string is one text block, as the real API treats it."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [block for block in content if isinstance(block, dict)]
    return []


# --- prompt caching ---------------------------------------------------------------------------


def segments(body: dict[str, Any]) -> list[Segment]:
    """The prompt in prefix order (tools → system → message blocks), one segment per block."""
    out = [_segment("tool", tool) for tool in body.get("tools") or [] if isinstance(tool, dict)]
    out += [_segment("system", block) for block in blocks_of(body.get("system"))]
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            role = str(message.get("role"))
            out += [_segment(role, block) for block in blocks_of(message.get("content"))]
    automatic = body.get("cache_control")
    if isinstance(automatic, dict) and out and not out[-1].breakpoint:
        out[-1] = dataclasses.replace(out[-1], breakpoint=True, ttl=_ttl(automatic))
    return out


def _segment(kind: str, block: dict[str, Any]) -> Segment:
    # The marker is not part of the identity: moving a breakpoint keeps the prefix cacheable.
    material = canonical([kind, {k: v for k, v in block.items() if k != "cache_control"}])
    marker = block.get("cache_control")
    return Segment(
        material,
        estimate_tokens(material),
        breakpoint=isinstance(marker, dict),
        ttl=_ttl(marker) if isinstance(marker, dict) else "5m",
    )


def _ttl(marker: dict[str, Any]) -> str:
    return "1h" if marker.get("ttl") == "1h" else "5m"


def write_split(prompt: list[Segment], cache: CacheResult, *, min_tokens: int) -> dict[str, int]:
    """Cache writes per TTL: each breakpoint owns the tokens between the previous one and it."""
    split = {"5m": 0, "1h": 0}
    if not cache.cache_write_tokens:
        return split
    covered, running = cache.cache_read_tokens, 0
    for segment in prompt:
        running += segment.tokens
        if segment.breakpoint and running >= min_tokens and running > covered:
            split[segment.ttl] += running - covered
            covered = running
    return split


def _usage(cache: CacheResult, writes: dict[str, int], reply: Reply) -> dict[str, Any]:
    output_tokens = reply.total_output_tokens
    return {
        "input_tokens": cache.input_tokens - cache.cache_read_tokens - cache.cache_write_tokens,
        "cache_creation_input_tokens": cache.cache_write_tokens,
        "cache_read_input_tokens": cache.cache_read_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": writes["5m"],
            "ephemeral_1h_input_tokens": writes["1h"],
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


# --- the policy's view --------------------------------------------------------------------------


def to_view(body: dict[str, Any]) -> ConversationView:
    messages: list[ViewMessage] = []
    system = _text(blocks_of(body.get("system")))
    if system:
        messages.append(ViewMessage(role="system", text=system))
    for message in body.get("messages") or []:
        blocks = blocks_of(message.get("content"))
        if message.get("role") == "assistant":
            messages.append(ViewMessage(role="assistant", text=_text(blocks)))
            continue
        results = [b for b in blocks if b.get("type") == "tool_result"]
        messages += [ViewMessage(role="tool", text=_result_text(b)) for b in results]
        text = _text(blocks)
        if text or not results:
            messages.append(ViewMessage(role="user", text=text))
    tools = [
        OfferedTool(name=str(tool["name"]), parameters=tool.get("input_schema") or {})
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and "name" in tool
    ]
    raw_choice = body.get("tool_choice")
    choice: dict[str, Any] = raw_choice if isinstance(raw_choice, dict) else {}
    kind = str(choice.get("type", "auto"))
    return ConversationView(
        model=str(body.get("model", "")),
        messages=messages,
        tools=tools,
        tool_choice={"any": "required", "tool": "required", "none": "none"}.get(kind, "auto"),
        forced_tool=str(choice.get("name")) if kind == "tool" else None,
        wanted=_wanted(body.get("output_config")),
    )


def _wanted(output_config: Any) -> dict[str, Any] | None:
    output_format = output_config.get("format") if isinstance(output_config, dict) else None
    if isinstance(output_format, dict) and output_format.get("type") == "json_schema":
        return dict(output_format.get("schema") or {})
    return None


def _text(blocks: list[dict[str, Any]]) -> str:
    return "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")


def _result_text(block: dict[str, Any]) -> str:
    return _text(blocks_of(block.get("content")))


def _default_reply(body: dict[str, Any]) -> Reply:
    reply = default_reply(to_view(body))
    thinking = body.get("thinking")
    enabled = isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
    if enabled and not reply.reasoning:
        return reply.model_copy(update={"reasoning": _DEFAULT_THINKING})
    return reply
