"""The default policy: how the simulator answers a call no scenario scripted.

Good enough for an offline demo: it calls an offered tool when the user's message names it
(or when ``tool_choice`` demands one), summarises a tool result it was just given, and otherwise
answers plainly. Models whose id suggests a reasoning model also "think" first.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from server.simulator.scenario import Reply, ToolCallSpec
from server.simulator.shapes import example_of

_REASONING_MODEL_HINTS = ("reason", "think", "o1", "o3", "o4", "gpt-5", "deepseek-r")
_GENERIC_TOOL_WORDS = frozenset(
    {"get", "set", "fetch", "run", "do", "make", "list", "read", "tool"}
)


@dataclass(slots=True)
class ViewMessage:
    role: str
    """``system``, ``user``, ``assistant`` or ``tool``."""
    text: str


@dataclass(slots=True)
class OfferedTool:
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ConversationView:
    """A request reduced to what the policy needs, whatever protocol it came in."""

    model: str
    messages: list[ViewMessage] = field(default_factory=list)
    tools: list[OfferedTool] = field(default_factory=list)
    tool_choice: str = "auto"
    """``auto``, ``none`` or ``required``."""
    forced_tool: str | None = None
    wanted: dict[str, Any] | None = None
    """The JSON Schema a structured answer must match (``{}``: any JSON object); None for
    plain text."""


def default_reply(view: ConversationView) -> Reply:
    reasoning = _reasoning_for(view)
    last = view.messages[-1] if view.messages else ViewMessage("user", "")
    if last.role == "tool":
        if view.wanted is not None:
            return Reply(reasoning=reasoning, text=_structured(view.wanted))
        preview = last.text.strip().replace("\n", " ")[:200]
        return Reply(reasoning=reasoning, text=f"The tool returned: {preview}")
    tool = _tool_to_call(view, last.text if last.role == "user" else "")
    if tool is not None:
        return Reply(
            reasoning=reasoning,
            tool_calls=[ToolCallSpec(name=tool.name, arguments=_arguments_for(tool, last.text))],
        )
    if view.wanted is not None:
        return Reply(reasoning=reasoning, text=_structured(view.wanted))
    said = last.text.strip().replace("\n", " ")[:200]
    return Reply(
        reasoning=reasoning,
        text=f"Hello from the hermes-server upstream simulator. You said: {said}",
    )


def _structured(schema: dict[str, Any]) -> str:
    value = example_of(schema) if schema else {"answer": "simulated"}
    return json.dumps(value)


def _reasoning_for(view: ConversationView) -> str:
    model = view.model.lower()
    if any(hint in model for hint in _REASONING_MODEL_HINTS):
        return "Let me think about what the user asked and how to answer it."
    return ""


def _tool_to_call(view: ConversationView, user_text: str) -> OfferedTool | None:
    if not view.tools or view.tool_choice == "none":
        return None
    if view.forced_tool is not None:
        return next((t for t in view.tools if t.name == view.forced_tool), None)
    lowered = user_text.lower()
    words = set(re.findall(r"[a-z0-9]+", lowered))
    for tool in view.tools:
        spoken = tool.name.lower()
        if spoken in lowered or spoken.replace("_", " ") in lowered:
            return tool
    for tool in view.tools:
        # "What's the weather in Paris?" names get_weather by its distinctive word.
        distinctive = set(re.split(r"[_\-]", tool.name.lower())) - _GENERIC_TOOL_WORDS
        if any(len(word) >= 4 and word in words for word in distinctive):
            return tool
    if view.tool_choice == "required":
        return view.tools[0]
    return None


def _arguments_for(tool: OfferedTool, user_text: str) -> dict[str, Any]:
    """Fill the schema's required properties with plausible values from the user's text."""
    properties = tool.parameters.get("properties") or {}
    required = tool.parameters.get("required") or list(properties)[:1]
    quoted = re.findall(r"[\"'`]([^\"'`]+)[\"'`]", user_text)
    arguments: dict[str, Any] = {}
    for name in required:
        schema = properties.get(name) or {}
        kind = schema.get("type", "string")
        if schema.get("enum"):
            arguments[name] = schema["enum"][0]
        elif kind == "integer":
            arguments[name] = 1
        elif kind == "number":
            arguments[name] = 1.0
        elif kind == "boolean":
            arguments[name] = True
        elif kind == "array":
            arguments[name] = []
        elif kind == "object":
            arguments[name] = {}
        else:
            arguments[name] = quoted.pop(0) if quoted else user_text.strip()[:100]
    return arguments
