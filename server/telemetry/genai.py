"""The OpenTelemetry GenAI semantic conventions, as far as hermes-server speaks them: the
attribute names, the providers' names, and messages in the conventions' content form.

The names are spelled here rather than imported: the ``opentelemetry-semantic-conventions``
package marks its GenAI constants deprecated (they moved to a repository of their own), and
this server's tests turn warnings into errors.
"""

from __future__ import annotations

from typing import Any

import orjson

from hermes_core.messages import Message, text_of

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
CONVERSATION = "gen_ai.conversation.id"
AGENT_NAME = "gen_ai.agent.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"
OTHER_ERROR = "_OTHER"
"""``error.type`` when nothing more precise is known (the conventions' own fallback)."""

CHAT = "chat"
EXECUTE_TOOL = "execute_tool"
INVOKE_AGENT = "invoke_agent"

PROVIDER_OF_API_MODE = {"anthropic_messages": "anthropic"}
"""``gen_ai.provider.name`` by the wire protocol a provider speaks; every other mode is
OpenAI's API (the conventions name a provider by the API its client speaks when it knows no
better: an OpenAI-compatible upstream is ``openai``)."""
OPENAI = "openai"

_OUTPUT_FINISH = {"tool_calls": "tool_call", "interrupted": "error"}
"""Our finish reasons (OpenAI's words) in the conventions' output-message vocabulary."""


def message_json(messages: list[Message]) -> str:
    """``gen_ai.input.messages``: the messages as role and parts."""
    return orjson.dumps([_message(m) for m in messages]).decode()


def output_json(message: Message | None, finish_reason: str, text: str = "") -> str:
    """``gen_ai.output.messages``: one assistant message (or ``text`` when there is none)."""
    body = _message(message) if message is not None else _text_message("assistant", text)
    body["finish_reason"] = _OUTPUT_FINISH.get(finish_reason, finish_reason)
    return orjson.dumps([body]).decode()


def _text_message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}] if text else []}


def _message(message: Message) -> dict[str, Any]:
    role = message["role"]
    parts: list[dict[str, Any]] = []
    if message.get("reasoning"):
        parts.append({"type": "reasoning", "content": message["reasoning"]})
    text = text_of(message.get("content"))
    if role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": message.get("tool_call_id"), "response": text}
        )
    elif text:
        parts.append({"type": "text", "content": text})
    content = message.get("content")
    if isinstance(content, list):
        # Images are named, never inlined: a span is no place for megabytes of base64.
        parts.extend({"type": str(p.get("type"))} for p in content if p.get("type") != "text")
    for call in message.get("tool_calls") or ():
        parts.append(
            {
                "type": "tool_call",
                "id": call["id"],
                "name": call["function"]["name"],
                "arguments": _arguments(call["function"]["arguments"]),
            }
        )
    if message.get("refusal"):
        parts.append({"type": "refusal", "content": message["refusal"]})
    return {"role": role, "parts": parts}


def _arguments(raw: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw  # as the model wrote it, malformed
