"""Agent events as Chat Completions: a stream of ``chat.completion.chunk``s, or one completion.

Text goes to ``delta.content``; model reasoning and one human-readable line per tool step go to
``delta.reasoning_content`` (never into ``content``: UIs store it and the model learns to imitate
it); structured tool progress rides in ``delta.hermes``. In Open WebUI mode, server-run tools
also appear as Responses-style ``function_call`` / ``function_call_output`` items (Open WebUI's
tool cards) and status lines as ``{"event": {"type": "status"}}`` frames.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, assert_never, cast

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
    ToolProgress,
    ToolStarted,
)
from hermes_core.messages import ToolCall
from hermes_core.usage import Usage
from server.errors import run_failed
from server.views.chat_stop import StopCut, cut_at_stop
from server.views.chat_wire import (
    CardItemAdded,
    ChatCompletion,
    ChatFrame,
    ChatUsage,
    Chunk,
    CompletionMessage,
    Delta,
    HermesSummary,
    SourceFrame,
    StatusFrame,
    ThoughtDelta,
    ToolCallDelta,
)
from server.views.citations import SourceList
from server.views.file_citations import FileAnnouncer
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

# Open WebUI appends items with a huge output_index instead of inserting them before the last.
OPENWEBUI_OUTPUT_INDEX = 1_000_000


def finish_reason_for(end: RunFinished) -> str:
    """``stop`` only for a clean completion; ``content_filter`` for an answer the upstream's
    filter stopped; every other unfinished ending says ``length``."""
    exit_reason = end.exit_reason
    if end.content_filtered:
        return "content_filter"
    if exit_reason in (ExitReason.COMPLETED, ExitReason.AWAITING_APPROVAL):
        # Awaiting approval, the answer is a question to the user: hermes.exit_reason says so.
        return "stop"
    if exit_reason is ExitReason.AWAITING_CLIENT_TOOLS:
        return "tool_calls"
    return "length"


def chat_usage(usage: Usage) -> ChatUsage:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def hermes_summary(end: RunFinished) -> HermesSummary:
    """The ``hermes`` extension object: how the run really ended, and in which session."""
    return {
        "run_id": end.run_id,
        "session_id": end.session_id,
        "exit_reason": end.exit_reason.value,
        "iterations": end.iterations,
        "model_calls": end.model_calls,
        "cost_usd": end.cost_usd,
        "error": end.error,
    }


def _tool_calls_delta(calls: list[ToolCall]) -> list[ToolCallDelta]:
    return [
        {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
            },
        }
        for index, call in enumerate(calls)
    ]


@dataclass(slots=True, kw_only=True)
class ChatStreamView:
    """Turns one run's events into chunk payloads (dicts); the route encodes and sends them."""

    completion_id: str
    model: str
    created: int
    include_usage: bool = False
    openwebui: bool = False
    client_tool_names: frozenset[str] = frozenset()
    """Tools the client declared (Open WebUI sends its own with every request): a server
    tool's card by the same name would be taken for the client's, so it is renamed."""
    files: FileAnnouncer | None = None
    """How the answer announces the files the run made; None: it has no lasting workspace."""
    stop: StopCut | None = None
    """The client's ``stop`` sequences: the answer shown ends before the first of them."""
    _open_cards: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Open WebUI tool cards shown as running: call id → the card's ``function_call`` item."""
    _status: OpenWebUIStatus = field(default_factory=OpenWebUIStatus)
    """Open WebUI's status lines (every one done; see ``openwebui_status.py``)."""
    _sources: SourceList = field(default_factory=SourceList)
    _text: list[str] = field(default_factory=list)
    """The answer so far, kept once a tool found sources: citations point into it."""
    _answered: bool = False
    """Open WebUI: text or a card was sent. Open WebUI then adds ``reasoning_content`` to the
    Thought block it already has (a chat completion has one), above the text: a later step's
    reasoning is sent as a Thought block of its own, after what the earlier steps showed."""
    _thought: dict[str, Any] | None = None
    """The later step's Thought block being sent (a Responses-style reasoning item)."""
    _thought_started: float = 0.0
    _thoughts: int = 0

    def chunk(self, delta: Delta, finish_reason: str | None = None) -> Chunk:
        payload: Chunk = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if self.include_usage:
            payload["usage"] = None
        return payload

    # One branch per event kind is exhaustiveness, not complexity: hence the noqa.
    def handle(self, event: AgentEvent) -> list[ChatFrame]:  # noqa: C901
        match event:
            case RunStarted():
                return [self.chunk({"role": "assistant", "content": ""})]
            case TextDelta():
                text = event.text if self.stop is None else self.stop.feed(event.text)
                if not text:
                    return []
                self._text.append(text)
                frames = self._end_thought()
                self._answered = self.openwebui
                return [*frames, self.chunk({"content": text})]
            case ReasoningDelta():
                if self._answered:
                    return self._later_thought(event.text)
                return [self.chunk({"reasoning_content": event.text})]
            case ToolStarted():
                return self._tool_started(event, prefix="")
            case SourcesFound():
                return self._sources_found(event)
            case ToolFinished():
                return self._tool_finished(event, prefix="")
            case ToolProgress():
                return self._tool_progress(event)
            case SubagentEvent():
                return self._subagent(event)
            case ClientToolCallsPending():
                return [self.chunk({"tool_calls": _tool_calls_delta(event.tool_calls)})]
            case RunFinished():
                return self._finished(event)
            case FallbackActivated():
                if self.openwebui:
                    return _status_frames(self._status.step(event))
                return [self.chunk({"reasoning_content": fallback_line(event)})]
            case RetryScheduled() | BudgetWarning() | CompressionPerformed():
                if self.openwebui:  # once, as a status line: not also in the Thought block
                    return _status_frames(self._status.step(event))
                return [self.chunk({"reasoning_content": status_line(event)})]
            case ApprovalRequested() | ApprovalResolved():
                return self._approval(event)
            case PlanMade():
                return self._plan(event)
            case (
                ModelCallStarted()
                | ToolCallGenerating()
                | MessageAdded()
                | Steered()
                | StepFinished()
                | ImagePartial()
            ):  # LINELESS_EVENTS, below, names these too
                return []
            case _:
                assert_never(event)

    def _tool_started(self, event: ToolStarted, *, prefix: str) -> list[ChatFrame]:
        hermes = {"type": "tool", **tool_progress(event)}
        if not self.openwebui:
            line = tool_started_line(event, prefix=prefix)
            return [self.chunk({"reasoning_content": line, "hermes": hermes})]
        # Open WebUI shows each step once: as a tool card with status lines (a sub-agent's
        # step: status lines alone), never also as lines in the model's "Thought" block.
        frames: list[ChatFrame] = [*self._end_thought(), self.chunk({"hermes": hermes})]
        if not prefix:
            self._answered = True
            refused = self._status.refused(event.call_id)
            card = self._card_call(event, refused=refused)
            self._open_cards[event.call_id] = card["item"]
            frames.append(card)
        return frames + _status_frames(self._status.tool_started(event, prefix=prefix))

    def _tool_finished(self, event: ToolFinished, *, prefix: str) -> list[ChatFrame]:
        hermes = {"type": "tool", **tool_progress(event)}
        if not self.openwebui:
            line = tool_finished_line(event, prefix=prefix)
            return [self.chunk({"reasoning_content": line, "hermes": hermes})]
        frames: list[ChatFrame] = [self.chunk({"hermes": hermes})]
        card = self._open_cards.pop(event.call_id, None)
        if card is not None:
            if failed_command(event) is not None:
                # The same item again, failed: Open WebUI replaces the running card by its id
                # and draws it red (it reads "failed" as done; no other status it knows is red).
                frames.append(self._item_added({**card, "status": "failed"}))
            frames.append(self._card_output(event.call_id, card_output_text(event)))
        return frames + _status_frames(self._status.tool_finished(event, prefix=prefix))

    def _tool_progress(self, event: ToolProgress) -> list[ChatFrame]:
        frames: list[ChatFrame] = [self.chunk({"hermes": {"type": "tool", **tool_progress(event)}})]
        if self.openwebui and event.call_id in self._open_cards:
            frames += _status_frames(self._status.tool_progress(event))
        return frames

    def _sources_found(self, event: SourcesFound) -> list[ChatFrame]:
        new = self._sources.add(event)
        if not (self.openwebui and event.read):
            return []
        # Pages the agent read are its sources whether or not the answer names them: Open
        # WebUI shows them as chips at once. Search hits wait until the answer cites them.
        return [_source_frame(s.url, s.title, s.snippet) for s in new]

    def _citations(self, end: RunFinished) -> list[ChatFrame]:
        """The answer's citations: ``delta.annotations`` (pages and files), or in Open WebUI
        mode the files as Markdown and a source chip for each cited page not already shown."""
        if not self.openwebui:
            text = "".join(self._text)
            annotations = [c.chat_annotation() for c in self._sources.cite(text)]
            annotations += self._files_cited(end)
            return [self.chunk({"annotations": annotations})] if annotations else []
        frames = self._files_shown(end)
        if not self._sources:
            return frames
        shown = set()
        for citation in self._sources.cite("".join(self._text)):
            if self._sources.was_read(citation.url) or citation.url in shown:
                continue
            shown.add(citation.url)
            frames.append(_source_frame(citation.url, citation.title, ""))
        return frames

    def _files_cited(self, end: RunFinished) -> list[dict[str, Any]]:
        if self.files is None or not end.files:
            return []
        return self.files.chat_annotations("".join(self._text), end.files)

    def _files_shown(self, end: RunFinished) -> list[ChatFrame]:
        """Open WebUI: the files as Markdown at the end of the answer (images inline)."""
        if self.files is None or not end.files:
            return []
        shown = self.files.markdown(end.files, after="".join(self._text))
        if not shown:
            return []
        self._text.append(shown)
        return [self.chunk({"content": shown})]

    def _subagent(self, event: SubagentEvent) -> list[ChatFrame]:
        inner = event.event
        prefix = subagent_prefix(event.child_index)
        if isinstance(inner, ToolStarted):
            return self._tool_started(inner, prefix=prefix)
        if isinstance(inner, ToolFinished):
            return self._tool_finished(inner, prefix=prefix)
        if isinstance(inner, SourcesFound):  # the answer may cite a sub-agent's pages
            return self._sources_found(inner)
        return []

    def _approval(self, event: ApprovalRequested | ApprovalResolved) -> list[ChatFrame]:
        hermes = {"type": "approval", **approval_progress(event)}
        if not self.openwebui:
            return [self.chunk({"reasoning_content": approval_line(event), "hermes": hermes})]
        # The question is the answer's text and a status line; not again in the Thought block.
        return [self.chunk({"hermes": hermes}), *_status_frames(self._status.approval(event))]

    def _plan(self, event: PlanMade) -> list[ChatFrame]:
        hermes = {"type": "plan", **plan_progress(event)}
        if not self.openwebui:
            return [self.chunk({"reasoning_content": plan_lines(event), "hermes": hermes})]
        return [self.chunk({"hermes": hermes}), *_status_frames(self._status.plan(event))]

    def _later_thought(self, text: str) -> list[ChatFrame]:
        """A later step's reasoning: a Thought block of its own, opened at its first delta."""
        frames: list[ChatFrame] = []
        if self._thought is None:
            self._thoughts += 1
            self._thought_started = time.monotonic()
            self._thought = {
                "type": "reasoning",
                "id": f"rs_{self.completion_id}_{self._thoughts}",
                "status": "in_progress",
                "attributes": {"type": "reasoning_content"},
                "content": [{"type": "output_text", "text": ""}],
                "summary": None,
                "started_at": time.time(),
            }
            frames.append(self._item_added(self._thought))
        self._thought["content"][0]["text"] += text
        delta: ThoughtDelta = {
            "type": "response.reasoning_text.delta",
            "item_id": self._thought["id"],
            "delta": text,
        }
        return [*frames, delta]

    def _end_thought(self) -> list[ChatFrame]:
        """The later step's Thought block, whole and finished (it replaces the one sent), before
        what follows it: Open WebUI shows an unfinished one as still thinking."""
        if self._thought is None:
            return []
        thought, self._thought = self._thought, None
        thought["status"] = "completed"
        thought["ended_at"] = time.time()
        thought["duration"] = round(time.monotonic() - self._thought_started)
        return [self._item_added(thought)]

    def _finished(self, event: RunFinished) -> list[ChatFrame]:
        held = self.stop.flush() if self.stop is not None else ""
        if held:  # the answer's end, held back in case a stop sequence began there
            self._text.append(held)
        frames: list[ChatFrame] = self._end_thought()
        if held:
            frames.append(self.chunk({"content": held}))
        # Every tool card must get its output, or Open WebUI runs the tool itself.
        for call_id in list(self._open_cards):
            frames.append(self._card_output(call_id, UNFINISHED_TOOL_OUTPUT))
        self._open_cards.clear()
        if self.openwebui:
            # The last status line stays on screen: it must say how the run ended (not
            # "retrying in 1.8 s" after a failure).
            frames += _status_frames(self._status.ending(event))
        if event.exit_reason is ExitReason.FAILED and not event.content_filtered:
            frames.append({"error": run_failed(event.error, retry_after=event.retry_after)})
            return frames
        frames += self._citations(event)
        if event.refusal:
            frames.append(self.chunk({"refusal": event.refusal}))
        final = self.chunk({}, finish_reason_for(event))
        final["hermes"] = hermes_summary(event)
        frames.append(final)
        if self.include_usage:
            frames.append(
                {
                    "id": self.completion_id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": chat_usage(event.usage),
                }
            )
        return frames

    def _card_call(self, event: ToolStarted, *, refused: bool = False) -> CardItemAdded:
        name = event.name
        if name in self.client_tool_names:
            name = f"hermes_{name}"
        item = {
            "type": "function_call",
            "id": f"fc_{event.call_id}",
            "call_id": event.call_id,
            "name": name,
            "arguments": json.dumps(card_arguments(event.name, event.arguments)),
            # "rejected": Open WebUI draws the card as "Denied <name>".
            "status": "rejected" if refused else "completed",
        }
        return self._item_added(item)

    def _card_output(self, call_id: str, output: str) -> CardItemAdded:
        item = {
            "type": "function_call_output",
            "id": f"fco_{call_id}",
            "call_id": call_id,
            "status": "completed",
            "output": [{"type": "input_text", "text": output}],
        }
        return self._item_added(item)

    @staticmethod
    def _item_added(item: dict[str, Any]) -> CardItemAdded:
        return {
            "type": "response.output_item.added",
            "output_index": OPENWEBUI_OUTPUT_INDEX,
            # A copy: a Thought block still growing must not change the frame already made.
            "item": json.loads(json.dumps(item)),
        }


def _status_frames(descriptions: list[str]) -> list[ChatFrame]:
    """Open WebUI status lines, each done (see ``openwebui_status.py``)."""
    frames: list[ChatFrame] = []
    for description in descriptions:
        status: StatusFrame = {
            "event": {"type": "status", "data": {"description": description, "done": True}}
        }
        frames.append(status)
    return frames


def _source_frame(url: str, title: str, snippet: str) -> SourceFrame:
    """Open WebUI's source chip for one web page."""
    name = title or url
    data = {
        "source": {"name": name, "url": url},
        "document": [snippet or name],
        "metadata": [{"source": url, "name": name}],
    }
    return {"event": {"type": "source", "data": data}}


LINELESS_EVENTS = (
    RunStarted,
    RunFinished,
    ModelCallStarted,
    ToolCallGenerating,
    MessageAdded,
    Steered,
    StepFinished,
    ImagePartial,
)
"""The events a stream shows no ``reasoning_content`` line of: the run's start and end (the
answer is built of them otherwise), and those :meth:`ChatStreamView.handle` shows nothing
of. The non-streamed answer passes the view none of them."""


@dataclass(slots=True, kw_only=True)
class ChatCompletionBuilder:
    """Collects a run's events into one non-streaming ``chat.completion``."""

    completion_id: str
    model: str
    created: int
    files: FileAnnouncer | None = None
    """How the answer announces the files the run made (see :class:`ChatStreamView`)."""
    stop: tuple[str, ...] = ()
    """The client's ``stop`` sequences: the answer ends before the first of them."""
    _text: list[str] = field(default_factory=list)
    _reasoning: list[str] = field(default_factory=list)
    _client_calls: list[ToolCall] = field(default_factory=list)
    _sources: SourceList = field(default_factory=SourceList)
    _lines: ChatStreamView | None = None
    """What a stream of the run shows in ``reasoning_content`` (the model's reasoning, the
    plan, one line per tool step or status change) is made by the stream's own view: the
    answer reads the same either way. Made at the first event that may show a line (a plain
    answer's run has none: #27)."""

    def add(self, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            self._text.append(event.text)
            return
        if isinstance(event, SourcesFound):
            self._sources.add(event)
        elif isinstance(event, SubagentEvent) and isinstance(event.event, SourcesFound):
            self._sources.add(event.event)
        elif isinstance(event, ClientToolCallsPending):
            self._client_calls = list(event.tool_calls)
        elif not isinstance(event, LINELESS_EVENTS):
            if self._lines is None:
                self._lines = ChatStreamView(completion_id="", model="", created=0)
            for frame in self._lines.handle(event):
                if "choices" not in frame:  # only a chunk has them (the view's are plain)
                    continue
                for choice in cast(Chunk, frame)["choices"]:
                    line = choice["delta"].get("reasoning_content")
                    if line:
                        self._reasoning.append(line)

    def build(self, end: RunFinished) -> ChatCompletion:
        # The text a stream of the run shows, every step's: the same answer either way. Not
        # end.final_text: with a structured answer asked for, a step's text is held back
        # until checked, and a run ending on the client's tool calls has none to show.
        text = "".join(self._text)
        if self.stop and text:
            text = cut_at_stop(text, self.stop)[0]
        annotations = [c.chat_annotation() for c in self._sources.cite(text or "")]
        if self.files is not None and end.files:
            if self.files.openwebui:
                text += self.files.markdown(end.files, after=text)
            else:
                annotations += self.files.chat_annotations(text, end.files)
        message: CompletionMessage = {
            "role": "assistant",
            "content": text if text or not (self._client_calls or end.refusal) else None,
            "refusal": end.refusal,
            "annotations": annotations,
        }
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._client_calls:
            message["tool_calls"] = _tool_calls_delta(self._client_calls)
            for call in message["tool_calls"]:
                del call["index"]
        return {
            "id": self.completion_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish_reason_for(end),
                }
            ],
            "usage": chat_usage(end.usage),
            "hermes": hermes_summary(end),
        }
