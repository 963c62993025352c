"""The simulator's OpenAI Responses endpoint (``POST /v1/responses``).

It behaves like OpenAI's own endpoint, not like our server: the stream ends after the terminal
``response.*`` event without ``data: [DONE]``, and an in-stream error is OpenAI's flat ``error``
event (which the SDK yields as an event instead of raising), so adapters are tested against what
they will really meet. Where OpenAI and Open Responses agree on a stricter shape (integer
``created_at``, all 31 ``ResponseResource`` keys, ``strict`` on echoed tools) we follow it.

This module reads the request (validation, the policy's view, prompt-cache segments);
:mod:`server.simulator.openai_responses_reply` builds the response object and its events.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from starlette.responses import Response

from server.simulator.cache import Segment
from server.simulator.images import responses_output_problem
from server.simulator.openai_responses_reply import (
    error_frame,
    output_items,
    response_object,
    stream_frames,
)
from server.simulator.policy import ConversationView, OfferedTool, ViewMessage, default_reply
from server.simulator.scenario import Reply
from server.simulator.state import CallPlan, SimulatorState
from server.simulator.tokens import canonical, estimate_tokens, parts_text
from server.simulator.wire import error_response, json_reply, preflight, stream_response

_ROLES = ("user", "assistant", "system", "developer")
# Item types the real API accepts that carry nothing the simulator needs to read.
_IGNORED_ITEM_TYPES = ("reasoning", "item_reference")


async def respond(state: SimulatorState, plan: CallPlan, body: dict[str, Any]) -> Response:
    refusal = await preflight(state, plan)
    if refusal is not None:
        return refusal
    problem = validate(body)
    if problem is not None:
        return error_response(state, plan, 400, problem)
    reply = plan.step.reply if plan.step and plan.step.reply else default_reply(to_view(body))
    cache = state.cache.account(segments(body), report_writes=False)
    usage = _usage(cache.input_tokens, cache.cache_read_tokens, reply)
    seq = plan.record.seq
    created_at = int(time.time())
    items = output_items(reply, seq)
    final = response_object(
        body, f"resp_sim{seq}", created_at, reply=reply, output=items, usage=usage
    )
    if not body.get("stream"):

        def frame_count() -> int:
            return len(stream_frames(body, final, reply))

        return await json_reply(state, plan, final, frame_count=frame_count)
    frames = stream_frames(body, final, reply)
    fault = plan.step.fault if plan.step else None
    # stream_response injects the error in place of frame number ``disconnect_after`` (default
    # 1); frame n carries sequence_number n, so the error event continues the numbering.
    error_at = fault.disconnect_after if fault and fault.disconnect_after is not None else 1
    numbered_error_frame = functools.partial(error_frame, sequence_number=error_at)
    return stream_response(state, plan, frames, error_frame=numbered_error_frame)


# --- request -------------------------------------------------------------------------------------


def validate(body: dict[str, Any]) -> str | None:
    """The checks the real API makes that a buggy adapter or agent loop would trip."""
    if not body.get("model"):
        return "Missing required parameter: 'model'."
    raw = body.get("input")
    if raw is not None and not isinstance(raw, str | list):
        return "Invalid type for 'input': expected a string or an array of input items."
    return _validate_tools(body.get("tools")) or _validate_items(_input_items(body))


def _validate_tools(tools: Any) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "Invalid type for 'tools': expected an array."
    for n, tool in enumerate(tools):
        if not isinstance(tool, dict) or not tool.get("type"):
            return f"Missing required parameter: 'tools[{n}].type'."
        # A Chat-style tool ({"type": "function", "function": {...}}) fails here, as upstream.
        if tool["type"] == "function" and not tool.get("name"):
            return f"Missing required parameter: 'tools[{n}].name'."
    return None


def _validate_items(items: list[Any]) -> str | None:
    calls: list[str] = []
    answered: set[str] = set()
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            return f"Invalid type for 'input[{n}]': expected an object."
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in _ROLES:
                return (
                    f"Invalid value: {item.get('role')!r}. Supported values are: "
                    "'assistant', 'system', 'developer', and 'user'."
                )
        elif kind == "function_call":
            calls.append(str(item.get("call_id")))
        elif kind == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id not in calls:
                return f"No tool call found for function call output with call_id {call_id}."
            problem = responses_output_problem(n, item.get("output"))
            if problem is not None:
                return problem
            answered.add(call_id)
        elif kind not in _IGNORED_ITEM_TYPES:
            return f"Invalid value: {kind!r} for 'input[{n}].type'."
    unanswered = [call_id for call_id in calls if call_id not in answered]
    if unanswered:
        return f"No tool output found for function call {unanswered[0]}."
    return None


def _input_items(body: dict[str, Any]) -> list[Any]:
    """The input as items; a string input is one user message."""
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    return raw if isinstance(raw, list) else []


def to_view(body: dict[str, Any]) -> ConversationView:
    messages: list[ViewMessage] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append(ViewMessage(role="system", text=instructions))
    for item in _input_items(body):
        kind = item.get("type", "message")
        if kind == "message":
            role = "system" if item.get("role") == "developer" else str(item.get("role"))
            messages.append(ViewMessage(role=role, text=parts_text(item.get("content"))))
        elif kind == "function_call":
            messages.append(ViewMessage(role="assistant", text=""))
        elif kind == "function_call_output":
            messages.append(ViewMessage(role="tool", text=parts_text(item.get("output"))))
    tools = [
        OfferedTool(name=tool["name"], parameters=tool.get("parameters") or {})
        for tool in body.get("tools") or []
        if tool.get("type") == "function"
    ]
    choice = body.get("tool_choice") or "auto"
    forced = None
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        allowed = {t.get("name") for t in choice.get("tools") or [] if isinstance(t, dict)}
        tools = [tool for tool in tools if tool.name in allowed]
        choice = choice.get("mode", "auto")
    elif isinstance(choice, dict):
        forced = choice.get("name")
        choice = "required"
    return ConversationView(
        model=str(body.get("model", "")),
        messages=messages,
        tools=tools,
        tool_choice=str(choice),
        forced_tool=forced,
        wanted=_wanted((body.get("text") or {}).get("format")),
    )


def _wanted(text_format: Any) -> dict[str, Any] | None:
    if not isinstance(text_format, dict):
        return None
    if text_format.get("type") == "json_object":
        return {}
    if text_format.get("type") == "json_schema":
        return dict(text_format.get("schema") or {})
    return None


def segments(body: dict[str, Any]) -> list[Segment]:
    """Instructions, tools, then every input item; each item boundary is a cache breakpoint."""
    out: list[Segment] = []
    instructions = body.get("instructions")
    if instructions:
        text = canonical(instructions)
        out.append(Segment(text, estimate_tokens(text)))
    for tool in body.get("tools") or []:
        text = canonical(tool)
        out.append(Segment(text, estimate_tokens(text)))
    for item in _input_items(body):
        text = canonical(item)
        out.append(Segment(text, estimate_tokens(text), breakpoint=True))
    return out


# --- usage ---------------------------------------------------------------------------------------


def _usage(input_tokens: int, cached: int, reply: Reply) -> dict[str, Any]:
    reasoning = reply.reasoning_tokens
    output_tokens = reply.total_output_tokens
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }
