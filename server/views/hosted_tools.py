"""The agent's own tools shown as OpenAI's hosted tool items, when the request named the
hosted tool they serve (``tools: [{"type": "web_search"}]`` and the like):

- ``web_search`` / ``web_fetch`` → ``web_search_call`` (action ``search`` with its query, and
  its sources when ``include`` asks; ``open_page`` with its URL), events
  ``response.web_search_call.in_progress`` / ``.searching`` / ``.completed``;
- ``code`` → ``code_interpreter_call`` (its code; its output as ``logs``, then an ``image``
  output per image the call made, ``ToolFinished.images``, whose URL is the file's content in
  the conversation's container, or a ``data:`` URL when the run had no lasting workspace; that
  container), events ``…in_progress``,
  ``response.code_interpreter_call_code.delta`` / ``.done``, ``…interpreting``, ``…completed``;
- ``shell`` → a ``shell_call`` item (its command, the ``shell_call_command.*`` events) and,
  once it ran, a ``shell_call_output`` item (its output and outcome: exit code or timeout);
- ``generate_image`` → ``image_generation_call`` (its final image, base64, as ``result``),
  events ``…in_progress``, ``…generating``, one ``…partial_image`` per partial image the
  upstream streamed, ``…completed``.

A request that did not name the hosted tool sees these calls as before (progress lines): an
agent SDK must never be shown a call it did not ask the server to make. Which tools were
named is read from the Response's own ``tools``, so a replay renders the same items.

An item opens when its call starts and closes with the call's result (the tool message); a
call the run ended during closes ``incomplete``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_core.events import (
    CallImage,
    ImagePartial,
    Source,
    ToolFinished,
    ToolOutcome,
    ToolStarted,
)
from server.files.links import file_id

Frame = dict[str, Any]

_WEB_SEARCH_TYPES = frozenset(
    {"web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11"}
)
_RENDERED_BY = {
    "web_search": "web_search",
    "web_fetch": "web_search",
    "code": "code_interpreter",
    "shell": "shell",
    "generate_image": "image_generation",
}
"""The agent's tool → the hosted type whose items show its calls."""
_ENDING = re.compile(
    r"^\[(?:exit code (?P<code>-?\d+)|killed by signal (?P<signal>\d+)|(?P<timeout>timed out)"
    r"[^;\]]*|(?P<stopped>stopped)[^;\]]*); [\d.]+ s\]\n?"
)
"""The first line of a ``shell`` / ``code`` result (``tools/commands.py``'s
``describe_result``): how the command ended."""
_NO_OUTPUT = "[no output]"


def hosted_types(tools: Sequence[dict[str, Any]]) -> frozenset[str]:
    """The hosted tool types a Response's ``tools`` name (any web search name as
    ``web_search``)."""
    kinds = set()
    for tool in tools:
        kind = tool.get("type")
        if kind in _WEB_SEARCH_TYPES:
            kinds.add("web_search")
        elif kind in ("code_interpreter", "shell", "image_generation"):
            kinds.add(kind)
    return frozenset(kinds)


@dataclass(slots=True)
class HostedCall:
    """One call shown as a hosted tool item, as the view follows it."""

    kind: str
    """``web_search``, ``code_interpreter``, ``shell`` or ``image_generation``."""
    index: int
    """Its item's output index."""
    outcome: ToolOutcome | None = None
    sources: list[Source] = field(default_factory=list)
    output_index: int | None = None
    """A shell call's ``shell_call_output`` item, open while the command runs."""
    streamed: bool = False
    """Some of a shell command's output was sent as it ran."""
    image: str | None = None
    """An image call's final image (base64), once its result came."""
    images: list[CallImage] = field(default_factory=list)
    """The images a code call made, once it ended."""


class HostedItems:
    """Builds the hosted items and their events; the view places them (ids, indexes,
    sequence numbers)."""

    def __init__(
        self, types: frozenset[str], *, container_id: str, sources: bool, base_url: str = ""
    ) -> None:
        self.types = types
        self.container_id = container_id
        self.base_url = base_url
        """Where clients reach the server: a code call's image URLs are absolute against it."""
        self.sources = sources
        self.calls: dict[str, HostedCall] = {}

    def renders(self, tool: str) -> str | None:
        """The hosted type that shows calls of the agent's ``tool`` (None: not shown so)."""
        kind = _RENDERED_BY.get(tool)
        return kind if kind in self.types else None

    # --- items ------------------------------------------------------------------------------

    def opened(self, kind: str, item_id: str, event: ToolStarted) -> dict[str, Any]:
        """The item as it opens (``in_progress``)."""
        arguments = event.arguments
        if kind == "web_search":
            if event.name == "web_fetch":
                action = {"type": "open_page", "url": str(arguments.get("url", ""))}
            else:
                action = {"type": "search", "query": str(arguments.get("query", ""))}
            return {
                "type": "web_search_call",
                "id": item_id,
                "status": "in_progress",
                "action": action,
            }
        if kind == "image_generation":
            return {
                "type": "image_generation_call",
                "id": item_id,
                "status": "in_progress",
                "result": None,
            }
        if kind == "code_interpreter":
            return {
                "type": "code_interpreter_call",
                "id": item_id,
                "status": "in_progress",
                "code": "",
                "container_id": self.container_id,
                "outputs": None,
            }
        timeout = arguments.get("timeout")
        return {
            "type": "shell_call",
            "id": item_id,
            "call_id": event.call_id,
            "action": {
                "commands": [str(arguments.get("command", ""))],
                "timeout_ms": int(timeout * 1000) if isinstance(timeout, int | float) else None,
                "max_output_length": None,
            },
            "status": "in_progress",
            "environment": (
                {"type": "container_reference", "container_id": self.container_id}
                if self.container_id
                else None
            ),
        }

    def opening_events(self, item: dict[str, Any], where: Frame, event: ToolStarted) -> list[Frame]:
        """What follows ``output_item.added``: the call under way."""
        kind = item["type"]
        if kind == "web_search_call":
            return [
                {"type": "response.web_search_call.in_progress", **where},
                {"type": "response.web_search_call.searching", **where},
            ]
        if kind == "image_generation_call":
            return [
                {"type": "response.image_generation_call.in_progress", **where},
                {"type": "response.image_generation_call.generating", **where},
            ]
        if kind == "code_interpreter_call":
            code = str(event.arguments.get("code", ""))
            item["code"] = code
            return [
                {"type": "response.code_interpreter_call.in_progress", **where},
                {"type": "response.code_interpreter_call_code.delta", **where, "delta": code},
                {"type": "response.code_interpreter_call_code.done", **where, "code": code},
                {"type": "response.code_interpreter_call.interpreting", **where},
            ]
        (command,) = item["action"]["commands"]
        placed = {"command_index": 0, "output_index": where["output_index"]}
        return [
            {"type": "response.shell_call_command.added", **placed, "command": ""},
            {"type": "response.shell_call_command.delta", **placed, "delta": command},
            {"type": "response.shell_call_command.done", **placed, "command": command},
        ]

    def finished(self, event: ToolFinished) -> None:
        call = self.calls.get(event.call_id)
        if call is not None:
            call.outcome = event.outcome
            call.images = list(event.images)

    def closing(
        self, call: HostedCall, item: dict[str, Any], where: Frame, result: str | None
    ) -> tuple[str, list[Frame]]:
        """Fill ``item`` with the call's result (None: the run ended first); its final
        status and the events before its ``output_item.done``."""
        ran = result is not None and call.outcome is not ToolOutcome.CANCELLED
        kind = item["type"]
        if kind == "web_search_call":
            action = item["action"]
            if action["type"] == "search" and self.sources:
                action["sources"] = [{"type": "url", "url": s.url} for s in call.sources]
            status = "completed" if ran else "incomplete"
            if ran and call.outcome is not ToolOutcome.SUCCESS:
                status = "failed"
            return status, [{"type": "response.web_search_call.completed", **where}]
        if kind == "image_generation_call":
            if not ran or call.image is None:  # the SDK knows no "incomplete" image call
                return "failed", []
            item["result"] = call.image
            return "completed", [{"type": "response.image_generation_call.completed", **where}]
        if kind == "code_interpreter_call":
            if not ran:
                return "incomplete", []
            assert result is not None
            item["outputs"] = [
                {"type": "logs", "logs": command_output(result)[0]},
                *({"type": "image", "url": url} for url in map(self.image_url, call.images) if url),
            ]
            status = "completed" if call.outcome is ToolOutcome.SUCCESS else "failed"
            return status, [{"type": "response.code_interpreter_call.completed", **where}]
        return ("completed" if ran else "incomplete"), []

    def image_url(self, image: CallImage) -> str | None:
        """Where a client fetches an image a code call made: its file's content in the
        conversation's container (``/v1/containers``, with the key), else the image itself as a
        ``data:`` URL (the run's workspace is gone); None when it has neither."""
        if image.data is not None:
            return f"data:{image.media_type};base64,{image.data}"
        if not self.container_id:
            return None
        where = f"/v1/containers/{self.container_id}/files/{file_id(image.path)}/content"
        return self.base_url + where

    @staticmethod
    def partial_image(where: Frame, event: ImagePartial) -> Frame:
        """One partial image of an image call, as the upstream streamed it."""
        return {
            "type": "response.image_generation_call.partial_image",
            **where,
            "partial_image_index": event.index,
            "partial_image_b64": event.image_b64,
        }

    @staticmethod
    def shell_output_item(call_id: str, item_id: str) -> dict[str, Any]:
        """A shell call's ``shell_call_output`` item as it opens: no output yet."""
        return {
            "type": "shell_call_output",
            "id": item_id,
            "call_id": call_id,
            "output": [],
            "max_output_length": None,
            "status": "in_progress",
        }

    @staticmethod
    def shell_outputs(call: HostedCall, result: str | None) -> list[dict[str, Any]]:
        """The item's ``output``: what the command printed and how it ended (none when it
        never ran)."""
        if result is None:
            return []
        stdout, outcome = command_output(result)
        if call.outcome is ToolOutcome.TIMEOUT:  # the executor's own limit, not the sandbox's
            return [{"stdout": stdout, "stderr": "", "outcome": {"type": "timeout"}}]
        if outcome is None:  # not the command's own report: the call failed before it ran
            return [{"stdout": "", "stderr": result, "outcome": _exit(1)}]
        return [{"stdout": stdout, "stderr": "", "outcome": outcome}]

    @staticmethod
    def shell_progress(call: HostedCall, where: Frame, output: str) -> Frame:
        """Output of a running command, as it comes (the sandbox reports stdout and stderr
        together: as stdout)."""
        call.streamed = True
        delta = {"stdout": output, "stderr": ""}
        placed = {**where, "command_index": 0}
        return {"type": "response.shell_call_output_content.delta", **placed, "delta": delta}

    @staticmethod
    def shell_output_events(call: HostedCall, item: dict[str, Any], where: Frame) -> list[Frame]:
        """What closes a ``shell_call_output`` item's content: its output in one delta if none
        was sent as the command ran, then the whole of it."""
        placed = {**where, "command_index": 0}
        frames: list[Frame] = []
        if not call.streamed:
            for chunk in item["output"]:
                delta = {"stdout": chunk["stdout"], "stderr": chunk["stderr"]}
                frames.append(
                    {"type": "response.shell_call_output_content.delta", **placed, "delta": delta}
                )
        frames.append(
            {"type": "response.shell_call_output_content.done", **placed, "output": item["output"]}
        )
        return frames


def command_output(result: str) -> tuple[str, dict[str, Any] | None]:
    """A ``shell`` / ``code`` result as what the command printed and how it ended (None:
    the result is not a command's report, e.g. an error before it ran)."""
    ending = _ENDING.match(result)
    if ending is None:
        return result, None
    output = result[ending.end() :]
    if output.startswith(_NO_OUTPUT):
        output = output[len(_NO_OUTPUT) :].lstrip("\n")
    if ending["code"] is not None:
        outcome = _exit(int(ending["code"]))
    elif ending["signal"] is not None:
        outcome = _exit(128 + int(ending["signal"]))
    elif ending["timeout"] is not None:
        outcome = {"type": "timeout"}
    else:
        outcome = _exit(130)  # stopped: as a shell reports an interrupted command
    return output, outcome


def command_failure(result: str) -> str | None:
    """How a command that did not succeed ended, in words (``exit code 2``, ``killed by
    signal 9``, ``timed out``); None when it exited 0, was stopped with its run, or the result
    is not a command's report."""
    ending = _ENDING.match(result)
    if ending is None or ending["stopped"] is not None or ending["code"] == "0":
        return None
    if ending["code"] is not None:
        return f"exit code {ending['code']}"
    if ending["signal"] is not None:
        return f"killed by signal {ending['signal']}"
    return "timed out"


def result_image(content: object) -> str | None:
    """The base64 of the first image a tool result carries (an ``image_url`` part with a
    ``data:`` URL), or None."""
    for part in content if isinstance(content, list) else ():
        url = (part.get("image_url") or {}).get("url") if isinstance(part, dict) else None
        if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
            return url.split(";base64,", 1)[1]
    return None


def _exit(code: int) -> dict[str, Any]:
    return {"type": "exit", "exit_code": code}
