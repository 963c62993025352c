"""The messages the loop writes about tool calls: the assistant's reply as recorded, and the
question a run awaiting approval ends with.

Pure functions of what they are given (no run, no events), kept apart from the tool-call step
so the wording can be read, and tested, on its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hermes_core.messages import Message, ToolCall
from hermes_core.tools.registry import ApprovalAsk


def normalised_assistant(message: Message, calls: list[ToolCall]) -> Message:
    """The assistant message as recorded: empty argument strings become ``{}``."""
    out: Message = dict(message)  # type: ignore[assignment]
    out["tool_calls"] = [
        {
            **call,
            "function": {
                **call["function"],
                "arguments": call["function"]["arguments"].strip() or "{}",
            },
        }
        for call in calls
    ]
    return out


def approval_notice(waiting: Sequence[ApprovalAsk]) -> str:
    """The question a run awaiting approval ends with, for a person to read and answer."""
    lines = ["I need your approval before I go on:"]
    for ask in waiting:
        lines.append(f"- `{ask.call.name}`: {_shown(ask.call.arguments)} ({ask.reason})")
    names = ", ".join(dict.fromkeys(f"`{ask.call.name}`" for ask in waiting))
    lines.append(
        f"Reply **approve** to let it run, **approve for this session** to allow {names} "
        "for the rest of this conversation, or **deny**."
    )
    return "\n".join(lines)


def _shown(arguments: dict[str, Any]) -> str:
    """A call's arguments in one readable line: the command or code itself when that is all."""
    values = [v for v in arguments.values() if isinstance(v, str)]
    text = values[0] if len(arguments) == 1 and values else json.dumps(arguments)
    text = " ".join(text.split())
    return f"`{text[:300]}{'…' if len(text) > 300 else ''}`"
