"""The simulator's OpenAI Responses endpoint (``POST /v1/responses``).

It behaves like OpenAI's own endpoint, not like our server: the stream ends after the terminal
``response.*`` event without ``data: [DONE]``, and an in-stream error is OpenAI's flat ``error``
event (which the SDK yields as an event instead of raising), so adapters are tested against what
they will really meet. Where OpenAI and Open Responses agree on a stricter shape (integer
``created_at``, all 31 ``ResponseResource`` keys, ``strict`` on echoed tools) we follow it.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from starlette.responses import Response

from server.simulator.cache import Segment
from server.simulator.policy import ConversationView, OfferedTool, ViewMessage, default_reply
from server.simulator.scenario import Reply
from server.simulator.state import CallPlan, SimulatorState
from server.simulator.tokens import canonical, estimate_tokens
from server.simulator.wire import (
    error_response,
    json_reply,
    preflight,
    split_text,
    sse,
    stream_response,
)

_ROLES = ("user", "assistant", "system", "developer")
# Item types the real API accepts that carry nothing the simulator needs to read.
_IGNORED_ITEM_TYPES = ("reasoning", "item_reference")
_INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


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
        return json_reply(state, plan, final)
    frames = stream_frames(body, final, reply)
    fault = plan.step.fault if plan.step else None
    # stream_response injects the error in place of frame number ``disconnect_after`` (default
    # 1); frame n carries sequence_number n, so the error event continues the numbering.
    error_at = fault.disconnect_after if fault and fault.disconnect_after is not None else 1
    error_frame = functools.partial(_error_frame, sequence_number=error_at)
    return stream_response(state, plan, frames, error_frame=error_frame)


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
            messages.append(ViewMessage(role=role, text=_text(item.get("content"))))
        elif kind == "function_call":
            messages.append(ViewMessage(role="assistant", text=""))
        elif kind == "function_call_output":
            messages.append(ViewMessage(role="tool", text=_text(item.get("output"))))
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
    )


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


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


# --- response ------------------------------------------------------------------------------------


def _usage(input_tokens: int, cached: int, reply: Reply) -> dict[str, Any]:
    reasoning = estimate_tokens(reply.reasoning)
    generated = reply.text + "".join(c.name + c.arguments_text for c in reply.tool_calls)
    output_tokens = (
        reply.output_tokens
        if reply.output_tokens is not None
        else estimate_tokens(generated) + reasoning
    )
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def output_items(reply: Reply, seq: int) -> list[dict[str, Any]]:
    """The final output items: reasoning, then the message, then one item per tool call."""
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        items.append(
            {
                "id": f"rs_sim{seq}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": reply.reasoning}],
            }
        )
    if reply.text:
        items.append(
            {
                "id": f"msg_sim{seq}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
                ],
            }
        )
    for index, call in enumerate(reply.tool_calls):
        items.append(
            {
                "id": f"fc_sim{seq}_{index}",
                "type": "function_call",
                "call_id": call.id or f"call_sim{seq}_{index}",
                "name": call.name,
                "arguments": call.arguments_text,
                "status": "completed",
            }
        )
    if items and reply.resolved_finish_reason in _INCOMPLETE_REASONS and "status" in items[-1]:
        # Open Responses: the item generation stopped in is the last one, and is incomplete.
        items[-1]["status"] = "incomplete"
    return items


def response_object(
    body: dict[str, Any],
    response_id: str,
    created_at: int,
    *,
    reply: Reply | None,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """All 31 keys of Open Responses' ``ResponseResource``; ``reply=None`` gives the in-progress
    snapshot that ``response.created`` and ``response.in_progress`` carry."""
    status, incomplete, completed_at = "in_progress", None, None
    if reply is not None:
        reason = _INCOMPLETE_REASONS.get(reply.resolved_finish_reason)
        if reason is None:
            status, completed_at = "completed", int(time.time())
        else:
            status, incomplete = "incomplete", {"reason": reason}
    reasoning = body.get("reasoning")
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "completed_at": completed_at,
        "status": status,
        "incomplete_details": incomplete,
        "model": str(body.get("model", "")),
        "previous_response_id": body.get("previous_response_id"),
        "instructions": body.get("instructions"),
        "output": output,
        "error": None,
        "tools": [_echo_tool(tool) for tool in body.get("tools") or []],
        "tool_choice": body.get("tool_choice") or "auto",
        "truncation": body.get("truncation") or "disabled",
        "parallel_tool_calls": _given(body, "parallel_tool_calls", True),
        "text": body.get("text") or {"format": {"type": "text"}},
        "top_p": _given(body, "top_p", 1.0),
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "temperature": _given(body, "temperature", 1.0),
        "top_logprobs": body.get("top_logprobs") or 0,
        "reasoning": (
            {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")}
            if isinstance(reasoning, dict)
            else None
        ),
        "usage": usage,
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "store": _given(body, "store", True),
        "background": False,
        "service_tier": "default",
        "metadata": body.get("metadata") or {},
        "safety_identifier": body.get("safety_identifier"),
        "prompt_cache_key": body.get("prompt_cache_key"),
    }


def _given(body: dict[str, Any], key: str, default: Any) -> Any:
    # An explicit null means "the default" in a request, but the echo must carry a value.
    value = body.get(key)
    return default if value is None else value


def _echo_tool(tool: dict[str, Any]) -> dict[str, Any]:
    # Validators reject an echoed function tool without ``strict``; OpenAI defaults it to true.
    if tool.get("type") != "function":
        return tool
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict", True),
    }


# --- stream --------------------------------------------------------------------------------------


def stream_frames(body: dict[str, Any], final: dict[str, Any], reply: Reply) -> list[str]:
    """The canonical event order; sequence numbers are stamped here and nowhere else."""
    snapshot = response_object(
        body, final["id"], final["created_at"], reply=None, output=[], usage=None
    )
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": snapshot},
        {"type": "response.in_progress", "response": snapshot},
    ]
    for index, item in enumerate(final["output"]):
        events += _item_events(index, item, reply.chunk_count)
    terminal = "response.completed" if final["status"] == "completed" else "response.incomplete"
    events.append({"type": terminal, "response": final})
    return [
        sse({"type": event["type"], "sequence_number": n, **event}, event=event["type"])
        for n, event in enumerate(events)
    ]


def _item_events(index: int, item: dict[str, Any], chunk_count: int | None) -> list[dict[str, Any]]:
    """``output_item.added``, the item's own part and delta events, ``output_item.done``."""
    if item["type"] == "reasoning":
        skeleton, body = {**item, "summary": []}, _reasoning_events(index, item)
    elif item["type"] == "message":
        skeleton = {**item, "status": "in_progress", "content": []}
        body = _message_events(index, item, chunk_count)
    else:
        # call_id is already on the added item: the SDK's stream helper checks that the done
        # item keeps the added item's identity.
        skeleton = {**item, "status": "in_progress", "arguments": ""}
        body = _function_call_events(index, item)
    return [
        {"type": "response.output_item.added", "output_index": index, "item": skeleton},
        *body,
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def _reasoning_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    summary = item["summary"][0]
    where = {"item_id": item["id"], "output_index": index, "summary_index": 0}
    return [
        {
            "type": "response.reasoning_summary_part.added",
            **where,
            "part": {"type": "summary_text", "text": ""},
        },
        *(
            {"type": "response.reasoning_summary_text.delta", **where, "delta": piece}
            for piece in split_text(summary["text"], None)
        ),
        {"type": "response.reasoning_summary_text.done", **where, "text": summary["text"]},
        {"type": "response.reasoning_summary_part.done", **where, "part": summary},
    ]


def _message_events(
    index: int, item: dict[str, Any], chunk_count: int | None
) -> list[dict[str, Any]]:
    part = item["content"][0]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    return [
        {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
        *(
            {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
            for piece in split_text(part["text"], chunk_count)
        ),
        {"type": "response.output_text.done", **where, "text": part["text"], "logprobs": []},
        {"type": "response.content_part.done", **where, "part": part},
    ]


def _function_call_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    where = {"item_id": item["id"], "output_index": index}
    return [
        *(
            {"type": "response.function_call_arguments.delta", **where, "delta": piece}
            for piece in split_text(item["arguments"], None)
        ),
        {"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]},
    ]


def _error_frame(kind: str, message: str, *, sequence_number: int) -> str:
    payload = {
        "type": "error",
        "code": kind,
        "message": message,
        "param": None,
        "sequence_number": sequence_number,
    }
    return sse(payload, event="error")
