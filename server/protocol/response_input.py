"""Responses input items: normalised for storage, folded into the agent's messages, and the
compaction items ``POST /v1/responses/compact`` hands out and takes back.

Every problem with an item is an :class:`APIError` 400 naming ``input``, never a 500.
"""

from __future__ import annotations

import base64
import json
import secrets
import zlib
from typing import Any

from hermes_core.messages import Message, ToolCall
from server.errors import APIError

COMPACTION_PREFIX = "hermes.v1."
"""Marks the ``encrypted_content`` of compaction items made by this server."""
MAX_INFLATED_BYTES = 4 * 1024 * 1024
"""What all the compaction items of one request may inflate to, together. A compaction holds a
conversation compacted to fit a context window (well under a megabyte of text), so this is
generous; a zip bomb, or a request carrying many, is a 400 after a few milliseconds of work
instead of hundreds of megabytes and seconds of a blocked event loop."""
_ID_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
    "compaction": "cmp",
    "item_reference": "ref",
    "mcp_approval_response": "mcpr",
}
_ROLES = ("system", "user", "assistant", "tool")
_TEXT_KEYS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
"""Content parts that carry text, and the key that holds it."""


# --- compaction items ---------------------------------------------------------------------------


def encode_compaction(messages: list[Message]) -> str:
    """The ``encrypted_content`` of a compaction item: the messages, compressed.

    Not encrypted: the client holds its own conversation and may read it back.
    """
    data = json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode()
    return COMPACTION_PREFIX + base64.urlsafe_b64encode(zlib.compress(data)).decode("ascii")


def decode_compaction(text: str, *, budget: int = MAX_INFLATED_BYTES) -> list[Message]:
    """The messages of a compaction item; a 400 (param ``input``) if it is not ours, damaged,
    or inflates past ``budget`` bytes."""
    return _decoded(text, budget)[0]


def _decoded(text: str, budget: int) -> tuple[list[Message], int]:
    """The messages of a compaction item and the bytes they inflated to."""
    if not text.startswith(COMPACTION_PREFIX):
        raise _input_error("Invalid compaction item: it was not made by this server.")
    try:
        packed = base64.urlsafe_b64decode(text.removeprefix(COMPACTION_PREFIX).encode("ascii"))
        inflater = zlib.decompressobj()
        data = inflater.decompress(packed, max(budget, 0) + 1)
    except (ValueError, zlib.error) as exc:
        raise _input_error("Invalid compaction item: its encrypted_content is damaged.") from exc
    if len(data) > budget or inflater.unconsumed_tail:
        raise _input_error(
            f"The compaction items of this request inflate past {MAX_INFLATED_BYTES} bytes."
        )
    try:
        if not inflater.eof:
            raise ValueError("truncated")
        messages = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise _input_error("Invalid compaction item: its encrypted_content is damaged.") from exc
    if not isinstance(messages, list) or not all(_is_message(m) for m in messages):
        raise _input_error("Invalid compaction item: it holds no valid messages.")
    return messages, len(data)


def _is_message(value: object) -> bool:
    return (
        isinstance(value, dict)
        and value.get("role") in _ROLES
        and isinstance(value.get("content", ""), str | list | None)
    )


# --- input items → internal messages -------------------------------------------------------------


def normalised_item(raw: dict[str, Any]) -> dict[str, Any]:
    """A copy of an input item with its ``type`` and ``id`` filled in, string content as parts."""
    kind = raw.get("type") or ("message" if "role" in raw else "item_reference")
    prefix = _ID_PREFIXES.get(kind, "item") if isinstance(kind, str) else "item"
    rest = {key: value for key, value in raw.items() if key not in ("type", "id")}
    item = {"type": kind, "id": raw.get("id") or f"{prefix}_{secrets.token_hex(12)}", **rest}
    if kind == "message" and isinstance(item.get("content"), str):
        text = item["content"]
        item["content"] = (
            [{"type": "output_text", "text": text, "annotations": []}]
            if item.get("role") == "assistant"
            else [{"type": "input_text", "text": text}]
        )
    return item


class Transcript:
    """Input items folded, in order, into the client's system layer and internal messages."""

    def __init__(self) -> None:
        self.system: list[str] = []
        self.messages: list[Message] = []
        self._inflatable = MAX_INFLATED_BYTES
        """What this request's compaction items may still inflate to."""

    def add(self, item: dict[str, Any]) -> None:
        match item.get("type"):
            case "message":
                self._message(item)
            case "function_call":
                self._function_call(item)
            case "function_call_output":
                self.messages.append(_tool_result(item))
            case "reasoning" | "mcp_approval_request" | "mcp_list_tools":
                pass  # our own output, replayed by the client: the session already has it
            case (
                "web_search_call"
                | "code_interpreter_call"
                | "shell_call"
                | "shell_call_output"
                | "image_generation_call"
            ):
                pass  # hosted tool calls the server made: shown to the client, not its to replay
            case "mcp_call":
                self._mcp_call(item)
            case "mcp_approval_response":
                pass  # an answer, not a message: see approval_answers()
            case "compaction":
                content = item.get("encrypted_content")
                text = content if isinstance(content, str) else ""
                messages, inflated = _decoded(text, self._inflatable)
                self._inflatable -= inflated
                self.messages.extend(messages)
            case "item_reference":
                raise _input_error("item_reference is not supported; use previous_response_id.")
            case other:
                raise _input_error(f"Unsupported input item type: {other!r}.")

    def _message(self, item: dict[str, Any]) -> None:
        role, content = item.get("role"), item.get("content")
        if role in ("system", "developer"):
            text = _joined_text(content, where=f"A {role} message")
            if text and not self.messages:
                self.system.append(text)
            elif text:
                # Mid-conversation it applies from here on: it keeps its place.
                self.messages.append({"role": "system", "content": text})
        elif role == "user":
            self.messages.append({"role": "user", "content": _user_content(content)})
        elif role == "assistant":  # ``phase`` (commentary / final_answer) needs no translation
            text = _joined_text(content, where="An assistant message")
            self.messages.append({"role": "assistant", "content": text})
        else:
            raise _input_error(f"Unsupported message role: {role!r}.")

    def _mcp_call(self, item: dict[str, Any]) -> None:
        """A call of a request's MCP tool, replayed by a client that keeps its own history:
        the call and its result, as the model saw them (``<server_label>__<name>``)."""
        label, name, call_id = item.get("server_label"), item.get("name"), item.get("id")
        if not (isinstance(label, str) and isinstance(name, str) and isinstance(call_id, str)):
            raise _input_error("An mcp_call item needs an id, a server_label and a name.")
        self._function_call(
            {"call_id": call_id, "name": f"{label}__{name}", "arguments": item.get("arguments")}
        )
        output, error = item.get("output"), item.get("error")
        text = output if isinstance(output, str) else f"Error: {json.dumps(error)}"
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def _function_call(self, item: dict[str, Any]) -> None:
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
            raise _input_error("A function_call item needs a call_id and a name.")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        call: ToolCall = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        last = self.messages[-1] if self.messages else None
        # One assistant turn: its text and all its calls, as Chat Completions carries it.
        if last is not None and last["role"] == "assistant":
            last["tool_calls"] = [*last.get("tool_calls", []), call]
        else:
            self.messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def approval_answers(items: list[dict[str, Any]]) -> dict[str, bool]:
    """The ``mcp_approval_response`` items of a request: approval id → approved."""
    answers: dict[str, bool] = {}
    for item in items:
        if item.get("type") != "mcp_approval_response":
            continue
        approval_id, approve = item.get("approval_request_id"), item.get("approve")
        if not (isinstance(approval_id, str) and approval_id and isinstance(approve, bool)):
            raise _input_error(
                "An mcp_approval_response item needs an approval_request_id (string) and "
                "approve (true or false)."
            )
        answers[approval_id] = approve
    return answers


def _tool_result(item: dict[str, Any]) -> Message:
    call_id, output = item.get("call_id"), item.get("output", "")
    if not (isinstance(call_id, str) and call_id):
        raise _input_error("A function_call_output item needs a call_id.")
    if isinstance(output, list):
        # Image and file parts of a tool's output are not shown to the model.
        output = "".join(
            str(part.get(_TEXT_KEYS[part["type"]]) or "")
            for part in output
            if isinstance(part, dict) and part.get("type") in _TEXT_KEYS
        )
    elif not isinstance(output, str):
        raise _input_error("A function_call_output's output must be a string or content parts.")
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def _parts(content: object, *, where: str) -> list[dict[str, Any]]:
    if not isinstance(content, list) or not all(isinstance(part, dict) for part in content):
        raise _input_error(f"{where} needs content: a string or a list of content parts.")
    return content


def _joined_text(content: object, *, where: str) -> str:
    texts: list[str] = []
    for part in _parts(content, where=where):
        key = _TEXT_KEYS.get(str(part.get("type")))
        if key is None:
            raise _input_error(f"{where} may only hold text, not {part.get('type')!r} parts.")
        texts.append(str(part.get(key) or ""))
    return "".join(texts)


def _user_content(content: object) -> str | list[dict[str, Any]]:
    parts = [_user_part(part) for part in _parts(content, where="A user message")]
    if not parts:
        return ""
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _user_part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "input_text":
        return {"type": "text", "text": str(part.get("text") or "")}
    if kind == "input_file":
        return _file_part(part)
    if kind != "input_image":
        raise _input_error(f"Unsupported content part in a user message: {kind!r}.")
    url = part.get("image_url")
    if isinstance(url, str) and url:
        return {"type": "image_url", "image_url": {"url": url}}
    file_id = part.get("file_id")
    if isinstance(file_id, str) and file_id:
        # An uploaded image (``POST /v1/files``): the server inlines it before the run.
        return {"type": "image_file", "file_id": file_id}
    raise _input_error("An input_image part needs an image_url or a file_id.")


def _file_part(part: dict[str, Any]) -> dict[str, Any]:
    """An ``input_file`` as the chat ``file`` part it is to the server (which puts the file in
    the run's workspace); a file only at a URL is a note: this server fetches none."""
    file = {k: part[k] for k in ("file_id", "file_data", "filename") if part.get(k)}
    if "file_id" in file or "file_data" in file:
        return {"type": "file", "file": file}
    if part.get("file_url"):
        name = part.get("filename") or "(unnamed)"
        return {"type": "text", "text": f"[file {name} at {part['file_url']}: not fetched]"}
    raise _input_error("An input_file part needs a file_id or file_data.")


def _input_error(message: str) -> APIError:
    return APIError(400, message, param="input")
