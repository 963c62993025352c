"""The simulator's OpenAI Chat Completions endpoint (``POST /v1/chat/completions``)."""

from __future__ import annotations

import time
from typing import Any

from starlette.responses import Response

from server.simulator.cache import Segment
from server.simulator.images import chat_problem
from server.simulator.policy import ConversationView, OfferedTool, ViewMessage, default_reply
from server.simulator.scenario import Reply
from server.simulator.state import CallPlan, SimulatorState
from server.simulator.tokens import canonical, estimate_tokens, parts_text
from server.simulator.wire import (
    error_body,
    error_response,
    json_reply,
    preflight,
    split_text,
    sse,
    stream_response,
)


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
    completion_id = f"chatcmpl-sim{plan.record.seq}"
    model = str(body.get("model", ""))
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def frames() -> list[str]:
        return stream_frames(completion_id, model, reply, usage if include_usage else None)

    if body.get("stream"):
        return stream_response(state, plan, frames(), error_frame=_error_frame)
    payload = completion(completion_id, model, reply, usage, plan.record.seq)
    return await json_reply(state, plan, payload, frame_count=lambda: len(frames()))


def validate(body: dict[str, Any]) -> str | None:
    """The checks the real API makes that a buggy agent loop would trip."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array."
    image_problem = chat_problem(messages)
    if image_problem is not None:
        return image_problem
    pending: list[str] = []
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceding message with 'tool_calls'."
                )
            pending.remove(call_id)
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(pending)}"
            )
        if role not in ("system", "developer", "user", "assistant"):
            return f"Invalid value for 'role': {role!r}."
        if role == "assistant":
            pending = [call["id"] for call in message.get("tool_calls") or []]
    if pending:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages "
            f"responding to each 'tool_call_id'. Missing: {', '.join(pending)}"
        )
    return None


def to_view(body: dict[str, Any]) -> ConversationView:
    messages = []
    for message in body.get("messages") or []:
        role = {"developer": "system"}.get(message.get("role"), message.get("role"))
        messages.append(ViewMessage(role=role, text=parts_text(message.get("content"))))
    tools = [
        OfferedTool(
            name=tool["function"]["name"], parameters=tool["function"].get("parameters") or {}
        )
        for tool in body.get("tools") or []
        if tool.get("type") == "function"
    ]
    choice = body.get("tool_choice") or "auto"
    forced = None
    if isinstance(choice, dict):
        forced = (choice.get("function") or {}).get("name")
        choice = "required"
    return ConversationView(
        model=str(body.get("model", "")),
        messages=messages,
        tools=tools,
        tool_choice=str(choice),
        forced_tool=forced,
        wanted=_wanted(body.get("response_format")),
    )


def _wanted(response_format: Any) -> dict[str, Any] | None:
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_object":
        return {}
    if response_format.get("type") == "json_schema":
        return dict((response_format.get("json_schema") or {}).get("schema") or {})
    return None


def segments(body: dict[str, Any]) -> list[Segment]:
    """Tools, then every message; each message boundary is an automatic-cache breakpoint."""
    out = [
        Segment(canonical(tool), estimate_tokens(canonical(tool))) for tool in body.get("tools", [])
    ]
    for message in body.get("messages") or []:
        text = canonical(message)
        out.append(Segment(text, estimate_tokens(text), breakpoint=True))
    return out


def _usage(prompt_tokens: int, cached: int, reply: Reply) -> dict[str, Any]:
    reasoning = reply.reasoning_tokens
    completion_tokens = reply.total_output_tokens
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _call_id(reply: Reply, index: int, seq: int) -> str:
    return reply.tool_calls[index].id or f"call_sim{seq}_{index}"


def completion(
    completion_id: str, model: str, reply: Reply, usage: dict[str, Any], seq: int
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text if reply.text or not (reply.tool_calls or reply.refusal) else None,
        "refusal": reply.refusal or None,
        "annotations": [],
    }
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id(reply, i, seq),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_text},
            }
            for i, call in enumerate(reply.tool_calls)
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.resolved_finish_reason,
            }
        ],
        "usage": usage,
        "system_fingerprint": None,
    }


def stream_frames(
    completion_id: str, model: str, reply: Reply, usage: dict[str, Any] | None
) -> list[str]:
    created = int(time.time())
    seq = int(completion_id.removeprefix("chatcmpl-sim") or 0)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        frame: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if usage is not None:
            frame["usage"] = None
        return sse(frame)

    frames = [chunk({"role": "assistant", "content": "", "refusal": None})]
    frames += [chunk({"reasoning_content": piece}) for piece in split_text(reply.reasoning, None)]
    frames += [chunk({"content": piece}) for piece in split_text(reply.text, reply.chunk_count)]
    frames += [chunk({"refusal": piece}) for piece in split_text(reply.refusal, None)]
    for index, call in enumerate(reply.tool_calls):
        head = {
            "index": index,
            "id": _call_id(reply, index, seq),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        frames.append(chunk({"tool_calls": [head]}))
        for piece in split_text(call.arguments_text, None):
            frames.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    frames.append(chunk({}, reply.resolved_finish_reason))
    if usage is not None:
        frames.append(
            sse(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        )
    frames.append("data: [DONE]\n\n")
    return frames


def _error_frame(kind: str, message: str) -> str:
    body = error_body("chat_completions", 500, message)
    body["error"]["type"] = kind
    return sse(body)
