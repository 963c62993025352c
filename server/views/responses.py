"""Agent events as the Responses API: one Response object and its ``response.*`` stream events.

Items are streamed one after another in the canonical order (``output_item.added`` → parts and
deltas → ``…done`` → ``output_item.done``), ``output_index`` being the item's position in
``response.output``; one terminal event ends the stream and nothing follows it.

- Model text becomes ``message`` items. Model reasoning, and one human-readable line per server
  tool step, status change or fallback, become ``reasoning`` items' summary text: server-run
  tools never appear as ``function_call`` items by default (agent SDK clients would run them).
  Tools the client declared do appear as real ``function_call`` items.
- A server tool call left awaiting approval becomes a standard ``mcp_approval_request`` item
  (``server_label: "hermes"``), answered by an ``mcp_approval_response`` input item.
- ``progress="events"`` adds structured ``hermes:tool_progress`` and ``hermes:approval``
  events (same sequence counter);
  ``progress="openwebui"`` shows a run as Open WebUI does on its chat stream: a completed
  ``function_call`` item and its ``function_call_output`` item per server tool (its tool
  cards), and ``hermes:status`` events carrying Open WebUI's ``event`` (its status lines,
  the same lines as on the chat stream) instead of progress lines in reasoning items, so the
  model's own reasoning items hold only its reasoning.

The output is deterministic — the server resumes a stream by replaying a run's logged events
through a fresh view — so item ids derive from the response id and the item's position
(``msg_<suffix>_<n>``, ``rs_…``, ``fc_…``, ``fco_…``). The one clock read is ``completed_at``:
a replay passes the stored value as ``completed_at``; without it the view reads the clock when
the run ends, because no event carries a timestamp.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any, Literal, assert_never

from hermes_core.events import (
    AgentEvent,
    ApprovalRequested,
    ApprovalResolved,
    BudgetWarning,
    ClientToolCallsPending,
    CompressionPerformed,
    ExitReason,
    FallbackActivated,
    ImagePartial,
    InterruptSource,
    MessageAdded,
    ModelCallStarted,
    PlanMade,
    ReasoningDelta,
    RetryScheduled,
    RunFinished,
    RunStarted,
    SourcesFound,
    Steered,
    StepFinished,
    SubagentEvent,
    TextDelta,
    ToolCallGenerating,
    ToolFinished,
    ToolOutcome,
    ToolProgress,
    ToolStarted,
    WorkspaceFile,
)
from hermes_core.usage import Usage
from server.errors import ErrorBody, run_failed
from server.views.chat import hermes_summary
from server.views.citations import SourceList
from server.views.file_citations import FileAnnouncer
from server.views.hosted_tools import HostedCall, HostedItems, hosted_types, result_image
from server.views.openwebui_status import OpenWebUIStatus
from server.views.progress import (
    UNFINISHED_TOOL_OUTPUT,
    approval_line,
    approval_progress,
    card_arguments,
    card_output_text,
    failed_command,
    fallback_line,
    plan_lines,
    plan_progress,
    status_line,
    subagent_prefix,
    tool_finished_line,
    tool_progress,
    tool_started_line,
)
from server.views.response_items import MESSAGE, REASONING, Frame, OpenItem, StreamedKind
from server.views.response_mcp import McpCallState, RemoteMcpTools

Progress = Literal["reasoning", "events", "openwebui"]

APPROVAL_SERVER_LABEL = "hermes"
"""The ``server_label`` of approval requests for the server's own tools."""
SERVER_STOPPED = "The server running this response stopped before it finished."
"""A response its server cut (a drain's end, a replica that died) fails with this."""
_OPENING_EVENTS = 2
"""``opening()`` always takes sequence numbers 0 and 1; ``handle()`` continues from here."""


def response_usage(usage: Usage) -> dict[str, Any]:
    """``usage`` of a Response object (``cache_write_tokens`` always present: strict SDKs
    require it)."""
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


class ResponsesView:
    """Turns one run's events into Responses stream events (dicts) and keeps the Response.

    ``shell`` is the complete Response object before any output (status ``in_progress`` or
    ``queued``); the view works on its own copy. Call :meth:`opening` first, then
    :meth:`handle` for every event; sequence numbers continue from ``opening()``'s either way.
    """

    def __init__(
        self,
        shell: dict[str, Any],
        *,
        progress: Progress = "reasoning",
        completed_at: int | None = None,
        remote_mcp: RemoteMcpTools | None = None,
        files: FileAnnouncer | None = None,
        sources: bool = False,
    ) -> None:
        self._response: dict[str, Any] = copy.deepcopy(shell)
        self._files = files
        self._made: list[WorkspaceFile] = []
        """The files the run made, once it has ended: the last message part cites them."""
        self._progress = progress
        self.completed_at = completed_at
        """Used by the ending when set (a replay, or the recorder's value); else the clock."""
        self._id_suffix = str(shell["id"]).removeprefix("resp_")
        self._open: OpenItem | None = None
        self._cards: dict[str, int] = {}
        """Open WebUI mode: the server tool calls shown as cards awaiting their output: call id →
        the card's output index."""
        self._status = OpenWebUIStatus()
        """Open WebUI mode: its status lines (see ``openwebui_status.py``)."""
        self._next_sequence = _OPENING_EVENTS
        self._done = False
        self._asked: dict[str, ApprovalRequested] = {}
        """Approvals asked for, by call id: a call left awaiting one becomes an item."""
        self._sources = SourceList()
        """Web pages the run's tools found: a message part citing one is annotated."""
        self._remote = remote_mcp
        self._listed = remote_mcp is None
        self._mcp_calls: dict[str, McpCallState] = {}
        """Calls of the request's MCP tools, by call id."""
        self._hosted = HostedItems(
            # Open WebUI draws tool cards of its own instead.
            frozenset() if progress == "openwebui" else hosted_types(shell.get("tools") or ()),
            container_id=files.container_id if files is not None else "",
            sources=sources,
            base_url=files.base_url if files is not None else "",
        )
        """The hosted tools the request named, whose calls show as their items (``sources``:
        ``include`` asked for a search's sources)."""

    # --- public surface ---------------------------------------------------------------------

    def opening(self) -> list[Frame]:
        """``response.created``, then ``response.in_progress`` (or ``response.queued``)."""
        second = (
            "response.queued" if self._response["status"] == "queued" else "response.in_progress"
        )
        return [
            {"type": kind, "sequence_number": number, "response": self.response}
            for number, kind in enumerate(("response.created", second))
        ]

    def handle(self, event: AgentEvent) -> list[Frame]:
        """The stream events ``event`` causes, numbered; nothing once the run has ended."""
        if self._done:
            return []
        frames = self._leave_queue()
        if not self._listed:
            frames += self._mcp_listings()
        frames += self._frames_for(event)
        return self._numbered(frames)

    @property
    def response(self) -> dict[str, Any]:
        """A copy of the Response object as of now (final once the run has finished)."""
        return copy.deepcopy(self._response)

    @property
    def done(self) -> bool:
        """Whether the terminal event has been produced."""
        return self._done

    # --- events -----------------------------------------------------------------------------

    # One branch per event kind is exhaustiveness, not complexity: hence the noqa.
    def _frames_for(self, event: AgentEvent) -> list[Frame]:  # noqa: C901
        match event:
            case TextDelta():
                return self._streamed(MESSAGE, event.text)
            case ReasoningDelta():
                return self._streamed(REASONING, event.text)
            case ToolStarted():
                if self._remote is not None and event.name in self._remote.tools:
                    return self._mcp_started(event)
                if (hosted := self._hosted.renders(event.name)) is not None:
                    return self._hosted_started(event, hosted)
                return self._tool_started(event, prefix="")
            case ToolFinished():
                if event.call_id in self._mcp_calls:
                    return self._mcp_finished(event)
                if event.call_id in self._hosted.calls:
                    return self._hosted_finished(event)
                return self._tool_finished(event, prefix="")
            case SourcesFound():
                self._sources.add(event)
                if (call := self._hosted.calls.get(event.call_id)) is not None:
                    call.sources += event.sources
                return []
            case ImagePartial():
                return self._hosted_partial_image(event)
            case ToolProgress():
                frames = self._mcp_open(event.call_id) if event.call_id in self._mcp_calls else []
                frames += self._hosted_progress(event)
                if self._progress == "events":
                    frames.append({"type": "hermes:tool_progress", **tool_progress(event)})
                if self._openwebui and event.call_id in self._cards:
                    frames += _status_events(self._status.tool_progress(event))
                return frames
            case MessageAdded():
                return self._mcp_result(event) + self._hosted_result(event)
            case SubagentEvent():
                return self._subagent(event)
            case ClientToolCallsPending():
                return [
                    frame
                    for call in event.tool_calls
                    for frame in self._function_call(
                        call["id"], call["function"]["name"], call["function"]["arguments"]
                    )
                ]
            case FallbackActivated():
                if self._openwebui:
                    return _status_events(self._status.step(event))
                return self._line(fallback_line(event))
            case RetryScheduled() | BudgetWarning() | CompressionPerformed():
                if self._openwebui:
                    return _status_events(self._status.step(event))
                return self._line(status_line(event))
            case RunFinished():
                return self._finished(event)
            case ApprovalRequested() | ApprovalResolved():
                return self._approval(event)
            case PlanMade():
                if self._openwebui:
                    return _status_events(self._status.plan(event))
                frames = self._line(plan_lines(event))
                if self._progress == "events":
                    frames.append({"type": "hermes:plan", **plan_progress(event)})
                return frames
            case (
                RunStarted()
                | ModelCallStarted()
                | ToolCallGenerating()
                | StepFinished()
                | Steered()
            ):
                return []
            case _:
                assert_never(event)

    def _leave_queue(self) -> list[Frame]:
        """A queued response is in progress from the run's first event on."""
        if self._response["status"] != "queued":
            return []
        self._response["status"] = "in_progress"
        return [{"type": "response.in_progress", "response": self.response}]

    @property
    def _openwebui(self) -> bool:
        return self._progress == "openwebui"

    def _tool_started(self, event: ToolStarted, *, prefix: str) -> list[Frame]:
        if self._openwebui:
            frames: list[Frame] = []
            if not prefix:
                arguments = json.dumps(card_arguments(event.name, event.arguments))
                # "rejected": Open WebUI draws the card as "Denied <name>".
                refused = self._status.refused(event.call_id)
                status = "rejected" if refused else "completed"
                frames += self._function_call(event.call_id, event.name, arguments, status)
                self._cards[event.call_id] = len(self._response["output"]) - 1
            return frames + _status_events(self._status.tool_started(event, prefix=prefix))
        frames = self._line(tool_started_line(event, prefix=prefix))
        if self._progress == "events":
            frames.append({"type": "hermes:tool_progress", **tool_progress(event)})
        return frames

    def _approval(self, event: ApprovalRequested | ApprovalResolved) -> list[Frame]:
        if isinstance(event, ApprovalRequested):
            self._asked[event.call_id] = event
        if event.call_id in self._mcp_calls:
            # The item says it all: a request, then (approved) the call itself.
            approved = isinstance(event, ApprovalResolved) and event.approved
            return self._mcp_open(event.call_id) if approved else []
        if self._openwebui:
            return _status_events(self._status.approval(event))
        frames = self._line(approval_line(event))
        if self._progress == "events":
            frames.append({"type": "hermes:approval", **approval_progress(event)})
        return frames

    def _approval_request(
        self, ask: ApprovalRequested, server_label: str = APPROVAL_SERVER_LABEL, name: str = ""
    ) -> list[Frame]:
        """The standard item a client answers with ``mcp_approval_response`` (OpenAI's, for
        its MCP tool; also for the server's own tools): added and done at once."""
        frames = self._close_item()
        item = {
            "type": "mcp_approval_request",
            "id": ask.approval_id,
            "name": name or ask.name,
            "arguments": json.dumps(ask.arguments),
            "server_label": server_label,
        }
        added = self._add_item(item)
        done = {"type": "response.output_item.done", "output_index": added["output_index"]}
        return [*frames, added, {**done, "item": copy.deepcopy(item)}]

    def _tool_finished(self, event: ToolFinished, *, prefix: str) -> list[Frame]:
        frames: list[Frame] = []
        ask = self._asked.get(event.call_id)
        if event.outcome is ToolOutcome.AWAITING_APPROVAL and ask is not None and not prefix:
            frames += self._approval_request(ask)
        if self._openwebui:
            card = self._cards.pop(event.call_id, None) if not prefix else None
            if card is not None:
                if failed_command(event) is not None:
                    # Done again, failed: Open WebUI replaces the item at its index and draws
                    # it red (the Response keeps it so, and its next turn sends it back).
                    frames += [*self._close_item(), self._item_done(card, "failed")]
                frames += self._function_call_output(event.call_id, card_output_text(event))
            return frames + _status_events(self._status.tool_finished(event, prefix=prefix))
        frames += self._line(tool_finished_line(event, prefix=prefix))
        if self._progress == "events":
            frames.append({"type": "hermes:tool_progress", **tool_progress(event)})
        return frames

    def _subagent(self, event: SubagentEvent) -> list[Frame]:
        inner = event.event
        prefix = subagent_prefix(event.child_index)
        if isinstance(inner, ToolStarted):
            return self._tool_started(inner, prefix=prefix)
        if isinstance(inner, ToolFinished):
            return self._tool_finished(inner, prefix=prefix)
        if isinstance(inner, SourcesFound):  # the answer may cite a sub-agent's pages
            self._sources.add(inner)
        return []

    def _finished(self, end: RunFinished) -> list[Frame]:
        frames = self._files_made(end)
        frames += self._close_item()
        for call_id in list(self._mcp_calls):
            # A call the run ended during (a stop): it never finished.
            frames += self._mcp_close(call_id, status="incomplete", output=None)
        for call_id in list(self._hosted.calls):
            frames += self._hosted_close(call_id, None)
        if end.refusal:
            frames += self._refusal(end.refusal)
        # Every tool card must get its output, or Open WebUI runs the tool itself.
        for call_id in self._cards:
            frames += self._function_call_output(call_id, UNFINISHED_TOOL_OUTPUT)
        self._cards.clear()
        if self._openwebui:
            frames += _status_events(self._status.ending(end))
        self._response["usage"] = response_usage(end.usage)
        self._response["hermes"] = hermes_summary(end)
        terminal = self._settle(end)
        if terminal == "response.failed":
            error = self.response["error"]
            assert error is not None
            frames.append(_error_event(run_failed(error["message"], retry_after=end.retry_after)))
        frames.append({"type": terminal, "response": self.response})
        self._done = True
        return frames

    def _refusal(self, refusal: str) -> list[Frame]:
        """A message item whose one part is the model's refusal, in the standard events."""
        item = MESSAGE.new_item(self._item_id(MESSAGE.id_prefix))
        added = self._add_item(item)
        index = added["output_index"]
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        part = {"type": "refusal", "refusal": refusal}
        item["content"].append(part)
        return [
            added,
            {"type": "response.content_part.added", **where, "part": {**part, "refusal": ""}},
            {"type": "response.refusal.delta", **where, "delta": refusal},
            {"type": "response.refusal.done", **where, "refusal": refusal},
            {"type": "response.content_part.done", **where, "part": dict(part)},
            self._item_done(index),
        ]

    def _settle(self, end: RunFinished) -> str:
        """Set the final status (and its details); return the terminal event's type."""
        response = self._response
        match end.exit_reason:
            case (
                ExitReason.COMPLETED
                | ExitReason.AWAITING_CLIENT_TOOLS
                | ExitReason.AWAITING_APPROVAL
            ):
                response["status"] = "completed"
                response["completed_at"] = (
                    self.completed_at if self.completed_at is not None else int(time.time())
                )
                return "response.completed"
            case ExitReason.TRUNCATED | ExitReason.BUDGET_EXHAUSTED:
                # The SDK knows no "budget" reason; hermes.exit_reason says which it was.
                reason = (
                    "max_output_tokens"
                    if end.exit_reason is ExitReason.TRUNCATED
                    else "max_messages"
                )
                response["status"] = "incomplete"
                response["incomplete_details"] = {"reason": reason}
                return "response.incomplete"
            case ExitReason.INTERRUPTED if end.interrupt_source is InterruptSource.SHUTDOWN:
                # Its server stopped (a drain's end, a replica that died): no client asked,
                # so not "cancelled" but a failure, as the stored response says too.
                response["status"] = "failed"
                failure = run_failed(end.error or SERVER_STOPPED)
                response["error"] = {"code": failure["code"], "message": failure["message"]}
                return "response.failed"
            case ExitReason.INTERRUPTED:
                # The SDK's event union has no response.cancelled.
                response["status"] = "cancelled"
                return "response.incomplete"
            case ExitReason.FAILED if end.content_filtered:
                response["status"] = "incomplete"
                response["incomplete_details"] = {"reason": "content_filter"}
                return "response.incomplete"
            case ExitReason.FAILED:
                response["status"] = "failed"
                failure = run_failed(end.error, retry_after=end.retry_after)
                response["error"] = {"code": failure["code"], "message": failure["message"]}
                return "response.failed"
            case _:
                assert_never(end.exit_reason)

    # --- message and reasoning items --------------------------------------------------------

    def _streamed(self, kind: StreamedKind, text: str) -> list[Frame]:
        """A piece of model text or reasoning: continues the open item's part, or opens one."""
        if not text:
            return []
        frames, open_item = self._ensure_open(kind)
        return frames + open_item.append(text)

    def _line(self, line: str) -> list[Frame]:
        """One progress line, as a summary part of its own in a reasoning item."""
        frames, open_item = self._ensure_open(REASONING)
        return frames + open_item.close_part() + open_item.append(line) + open_item.close_part()

    def _ensure_open(self, kind: StreamedKind) -> tuple[list[Frame], OpenItem]:
        if self._open is not None and self._open.kind is kind:
            return [], self._open
        frames = self._close_item()
        item = kind.new_item(self._item_id(kind.id_prefix))
        added = self._add_item(item)
        self._open = OpenItem(kind, item, added["output_index"])
        return [*frames, added], self._open

    def _close_item(self) -> list[Frame]:
        open_item, self._open = self._open, None
        if open_item is None:
            return []
        return [*self._close_part(open_item), self._item_done(open_item.index)]

    def _close_part(self, open_item: OpenItem) -> list[Frame]:
        cites_files = bool(self._made) and self._files is not None and not self._files.openwebui
        if open_item.kind is not MESSAGE or open_item.part is None:
            return open_item.close_part()
        if not (self._sources or cites_files):
            return open_item.close_part()
        text = open_item.part["text"]
        annotations = [c.responses_annotation() for c in self._sources.cite(text)]
        if cites_files and self._files is not None:
            annotations += self._files.responses_annotations(text, self._made)
        return open_item.close_part(annotations)

    def _files_made(self, end: RunFinished) -> list[Frame]:
        """Announce the files the run made: cited by the answer's last part when it closes,
        or (Open WebUI) shown in it as Markdown."""
        if self._files is None or not end.files or end.exit_reason is ExitReason.FAILED:
            return []
        self._made = list(end.files)
        if not self._files.openwebui:
            return []
        open_item = self._open
        said = ""
        if open_item is not None and open_item.kind is MESSAGE and open_item.part is not None:
            said = open_item.part["text"]
        return self._streamed(MESSAGE, self._files.markdown(self._made, after=said))

    # --- function call items ----------------------------------------------------------------

    def _function_call(
        self, call_id: str, name: str, arguments: str, status: str = "completed"
    ) -> list[Frame]:
        """A complete ``function_call`` item: added, its arguments in one delta, done (with
        ``status``)."""
        frames = self._close_item()
        item = {
            "type": "function_call",
            "id": self._item_id("fc"),
            "call_id": call_id,
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        added = self._add_item(item)
        where = {"item_id": item["id"], "output_index": added["output_index"]}
        item["arguments"] = arguments
        return [
            *frames,
            added,
            {"type": "response.function_call_arguments.delta", **where, "delta": arguments},
            {"type": "response.function_call_arguments.done", **where, "arguments": arguments},
            self._item_done(added["output_index"], status),
        ]

    def _function_call_output(self, call_id: str, text: str) -> list[Frame]:
        """A tool card's output (Open WebUI mode): a ``function_call_output`` item."""
        frames = self._close_item()
        item = {
            "type": "function_call_output",
            "id": self._item_id("fco"),
            "call_id": call_id,
            "output": [{"type": "input_text", "text": text}],
            "status": "in_progress",
        }
        added = self._add_item(item)
        return [*frames, added, self._item_done(added["output_index"])]

    # --- the request's own MCP servers ------------------------------------------------------

    def _mcp_listings(self) -> list[Frame]:
        """One ``mcp_list_tools`` item per server, first in the output."""
        self._listed = True
        frames: list[Frame] = []
        for listing in self._remote.listings if self._remote is not None else ():
            item = {"type": "mcp_list_tools", "id": self._item_id("mcpl"), **listing}
            item["error"] = None
            added = self._add_item(item)
            where = {"item_id": item["id"], "output_index": added["output_index"]}
            frames += [
                added,
                {"type": "response.mcp_list_tools.in_progress", **where},
                {"type": "response.mcp_list_tools.completed", **where},
                self._item_done(added["output_index"]),
            ]
        return frames

    def _mcp_started(self, event: ToolStarted) -> list[Frame]:
        assert self._remote is not None
        tool = self._remote.tools[event.name]
        self._mcp_calls[event.call_id] = McpCallState(tool, json.dumps(event.arguments))
        # A call that may be asked about shows once it may run (or as the approval request).
        return [] if tool.asks else self._mcp_open(event.call_id)

    def _mcp_open(self, call_id: str) -> list[Frame]:
        call = self._mcp_calls[call_id]
        if call.index is not None:
            return []
        frames = self._close_item()
        item = {
            "type": "mcp_call",
            "id": self._item_id("mcp"),
            "server_label": call.tool.server_label,
            "name": call.tool.name,
            "arguments": "",
            "output": None,
            "error": None,
            "status": "in_progress",
        }
        added = self._add_item(item)
        call.index = added["output_index"]
        where = {"item_id": item["id"], "output_index": call.index}
        item["arguments"] = call.arguments
        return [
            *frames,
            added,
            {"type": "response.mcp_call.in_progress", **where},
            {"type": "response.mcp_call_arguments.delta", **where, "delta": call.arguments},
            {"type": "response.mcp_call_arguments.done", **where, "arguments": call.arguments},
        ]

    def _mcp_finished(self, event: ToolFinished) -> list[Frame]:
        call = self._mcp_calls[event.call_id]
        ask = self._asked.get(event.call_id)
        if event.outcome is ToolOutcome.AWAITING_APPROVAL and ask is not None:
            del self._mcp_calls[event.call_id]
            return self._approval_request(ask, call.tool.server_label, call.tool.name)
        call.failed = not event.ok
        # The item closes with the full result, which the tool's message brings next.
        return self._mcp_open(event.call_id)

    def _mcp_result(self, event: MessageAdded) -> list[Frame]:
        message = event.message
        call_id = message.get("tool_call_id") if message["role"] == "tool" else None
        if call_id is None or call_id not in self._mcp_calls:
            return []
        output = message.get("content")
        text = output if isinstance(output, str) else json.dumps(output)
        status = "failed" if self._mcp_calls[call_id].failed else "completed"
        return self._mcp_close(call_id, status=status, output=text)

    def _mcp_close(self, call_id: str, *, status: str, output: str | None) -> list[Frame]:
        frames = self._mcp_open(call_id)
        call = self._mcp_calls.pop(call_id)
        assert call.index is not None
        item = self._response["output"][call.index]
        if status == "failed":
            item["error"] = {"type": "mcp_tool_execution_error", "content": output}
        else:
            item["output"] = output
        where = {"item_id": item["id"], "output_index": call.index}
        ended = "completed" if status == "completed" else "failed"  # the SDK knows no other
        done = self._item_done(call.index)
        done["item"]["status"] = item["status"] = status
        return [*frames, {"type": f"response.mcp_call.{ended}", **where}, done]

    # --- hosted tools (web_search, code_interpreter, shell, image_generation) -----------------

    def _hosted_started(self, event: ToolStarted, kind: str) -> list[Frame]:
        frames = self._close_item()
        prefix = {
            "web_search": "ws",
            "code_interpreter": "ci",
            "shell": "sh",
            "image_generation": "ig",
        }[kind]
        item = self._hosted.opened(kind, self._item_id(prefix), event)
        added = self._add_item(item)
        index = added["output_index"]
        call = self._hosted.calls[event.call_id] = HostedCall(kind, index)
        where = {"item_id": item["id"], "output_index": index}
        frames += [added, *self._hosted.opening_events(item, where, event)]
        if kind == "shell":
            # The call is complete as asked; its output is an item of its own, open while the
            # command runs.
            frames.append(self._item_done(index))
            output = self._hosted.shell_output_item(event.call_id, self._item_id("sho"))
            opened = self._add_item(output)
            call.output_index = opened["output_index"]
            frames.append(opened)
        if self._progress == "events":
            frames.append({"type": "hermes:tool_progress", **tool_progress(event)})
        return frames

    def _hosted_progress(self, event: ToolProgress) -> list[Frame]:
        call = self._hosted.calls.get(event.call_id)
        if call is None or call.output_index is None or not event.output:
            return []
        output = self._response["output"][call.output_index]
        where = {"item_id": output["id"], "output_index": call.output_index}
        return [self._hosted.shell_progress(call, where, event.output)]

    def _hosted_partial_image(self, event: ImagePartial) -> list[Frame]:
        call = self._hosted.calls.get(event.call_id)
        if call is None:
            return []
        where = {"item_id": self._response["output"][call.index]["id"], "output_index": call.index}
        return [self._hosted.partial_image(where, event)]

    def _hosted_finished(self, event: ToolFinished) -> list[Frame]:
        self._hosted.finished(event)
        frames: list[Frame] = []
        ask = self._asked.get(event.call_id)
        if event.outcome is ToolOutcome.AWAITING_APPROVAL and ask is not None:
            # It did not run: the item ends, and the approval request says what waits.
            frames += self._hosted_close(event.call_id, None)
            frames += self._approval_request(ask)
        if self._progress == "events":
            frames.append({"type": "hermes:tool_progress", **tool_progress(event)})
        return frames

    def _hosted_result(self, event: MessageAdded) -> list[Frame]:
        message = event.message
        call_id = message.get("tool_call_id") if message["role"] == "tool" else None
        if call_id is None or call_id not in self._hosted.calls:
            return []
        content = message.get("content")
        call = self._hosted.calls[call_id]
        if call.kind == "image_generation":
            call.image = result_image(content)
        if not isinstance(content, str):  # text parts, and images the model alone needs
            parts = content if isinstance(content, list) else []
            content = "".join(
                str(p.get("text", "")) for p in parts if isinstance(p, dict) and "text" in p
            )
        return self._hosted_close(call_id, content)

    def _hosted_close(self, call_id: str, result: str | None) -> list[Frame]:
        """Close a hosted call's item with its result (None: it never gave one)."""
        call = self._hosted.calls.pop(call_id)
        item = self._response["output"][call.index]
        if call.output_index is not None:  # a shell call: its output item closes
            output = self._response["output"][call.output_index]
            output["output"] = self._hosted.shell_outputs(call, result)
            where = {"item_id": output["id"], "output_index": call.output_index}
            status = "completed" if result is not None else "incomplete"
            return [
                *self._hosted.shell_output_events(call, output, where),
                self._item_done(call.output_index, status),
            ]
        where = {"item_id": item["id"], "output_index": call.index}
        status, frames = self._hosted.closing(call, item, where, result)
        return [*frames, self._item_done(call.index, status)]

    # --- bookkeeping ------------------------------------------------------------------------

    def _item_id(self, prefix: str) -> str:
        """The id of the next item: deterministic, unique within the response."""
        return f"{prefix}_{self._id_suffix}_{len(self._response['output'])}"

    def _add_item(self, item: dict[str, Any]) -> Frame:
        output: list[dict[str, Any]] = self._response["output"]
        output.append(item)
        added = {"type": "response.output_item.added", "output_index": len(output) - 1}
        return {**added, "item": copy.deepcopy(item)}

    def _item_done(self, index: int, status: str = "completed") -> Frame:
        item = self._response["output"][index]
        if "status" in item:  # mcp_list_tools and mcp_approval_request items have none
            item["status"] = status
        return {
            "type": "response.output_item.done",
            "output_index": index,
            "item": copy.deepcopy(item),
        }

    def _numbered(self, frames: list[Frame]) -> list[Frame]:
        """Stamp each frame with the next sequence number, right after its ``type``."""
        numbered = []
        for frame in frames:
            numbered.append(
                {"type": frame.pop("type"), "sequence_number": self._next_sequence, **frame}
            )
            self._next_sequence += 1
        return numbered


def _status_events(descriptions: list[str]) -> list[Frame]:
    """Open WebUI's status lines on a Responses stream: it passes any line's ``event`` to its
    event emitter before looking at the ``type`` (every line done: see
    ``openwebui_status.py``)."""
    return [
        {
            "type": "hermes:status",
            "event": {"type": "status", "data": {"description": d, "done": True}},
        }
        for d in descriptions
    ]


def _error_event(error: ErrorBody) -> Frame:
    """Both shapes at once: OpenAI's top-level fields, and Open Responses' nested ``error``
    (which also makes the OpenAI SDKs raise at once instead of waiting for a completion)."""
    return {
        "type": "error",
        "code": error["code"],
        "message": error["message"],
        "param": error["param"],
        "error": error,
    }
