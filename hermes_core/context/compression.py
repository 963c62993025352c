"""Context compression: keep a long conversation inside the model's context window.

Before each model call :class:`CompressingContext` measures the prompt. Over a threshold of the
model's window it asks :class:`Compressor` for a smaller transcript, in two stages:

1. **prune** — old tool outputs (everything before the protected tail) are replaced by a short
   placeholder; when that alone brings the prompt under the threshold, it stops there;
2. **summarise** — the messages between a protected head and a token-budgeted tail are replaced
   by one summary message written by an auxiliary model, or, when that model fails, by a
   deterministic digest, so a broken summariser never fails the run.

Every cut falls just before a message that is not a tool result, so an assistant's tool calls
and their results always stay on the same side. Each compression starts a child session whose
parent is the compressed one, and is announced with a ``CompressionPerformed`` event.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from hermes_core.context.hooks import CallContext, Compaction, ContextHooks
from hermes_core.context.summary import (
    clip_block,
    fallback_summary,
    summariser_prompt,
    summary_message,
)
from hermes_core.errors import ProviderError
from hermes_core.events import CallRecord
from hermes_core.messages import Message, text_of
from hermes_core.providers.base import ModelRequest, ModelResponse, Provider

logger = logging.getLogger(__name__)

PRUNED_TOOL_OUTPUT = "[Old tool output cleared to save context space]"

_CHARS_PER_TOKEN = 4
_MESSAGE_OVERHEAD = 4
"""Tokens every message costs beyond its text (role, separators), roughly as providers count."""
_PART_TOKENS = 85
"""A non-text content part (an image) at OpenAI's low-detail price: a guess, but not zero."""


def estimate_tokens(messages: Iterable[Message]) -> int:
    """A deterministic estimate of the prompt tokens of ``messages`` (about 4 chars a token)."""
    return sum(_message_tokens(message) for message in messages)


def _message_tokens(message: Message) -> int:
    content = message.get("content")
    parts = 0
    if isinstance(content, str):  # most messages: no parts to look through
        chars = len(content)
    else:
        chars = len(text_of(content))
        if content is not None:
            parts = sum(_PART_TOKENS for part in content if part.get("type") != "text")
    for call in message.get("tool_calls") or ():
        chars += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return _MESSAGE_OVERHEAD + parts + -(-chars // _CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressionSettings:
    """When to compress and how much to keep. Ratios are fractions of the context window."""

    threshold: float = 0.50
    """Compress before a call when the prompt is estimated above this share of the window."""
    between_turns_threshold: float = 0.85
    """The threshold for the first call of a turn."""
    target_ratio: float = 0.50
    """A summarising compression aims at this share of the threshold, so that the next few
    calls do not compress again at once."""
    protect_first_n: int = 3
    """Messages at the start kept verbatim (the original task), extended to whole tool rounds."""
    protect_last_n: int = 20
    """At most this many recent messages are kept verbatim ..."""
    tail_token_ratio: float = 0.20
    """... within this share of the window (and at most half the target) ..."""
    min_tail_messages: int = 4
    """... but never fewer than this many, whatever they cost."""
    summary_max_tokens: int = 2000
    summary_min_tokens: int = 200
    summary_timeout_s: float = 120.0
    summary_input_max_chars: int = 120_000
    """The serialised middle sent to the summariser is cut to about this size."""
    summary_chars_per_message: int = 2000
    prune_min_tokens: int = 50
    """Tool outputs smaller than this are not worth replacing by a placeholder."""
    pruned_placeholder: str = PRUNED_TOOL_OUTPUT

    def __post_init__(self) -> None:
        for name in ("threshold", "between_turns_threshold", "target_ratio", "tail_token_ratio"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in (0, 1]")


@dataclass(frozen=True, slots=True)
class CompressionPlan:
    """Where the cuts go: ``messages[:head_end]`` and ``messages[tail_start:]`` are kept."""

    head_end: int
    tail_start: int

    @property
    def has_middle(self) -> bool:
        return self.head_end < self.tail_start


def plan(
    messages: Sequence[Message],
    *,
    protect_first_n: int,
    protect_last_n: int,
    tail_tokens: int,
    min_tail_messages: int = 1,
) -> CompressionPlan:
    """Choose the head and tail to keep around the middle that will be summarised.

    The tail grows backwards from the end while it has fewer than ``protect_last_n`` messages
    and fits ``tail_tokens`` (the first ``min_tail_messages`` always fit). No side of any cut
    starts with a tool result, so tool calls and their results are never separated.
    """
    count = len(messages)
    tail_start, used = count, 0
    while tail_start > 0 and count - tail_start < protect_last_n:
        cost = _message_tokens(messages[tail_start - 1])
        if count - tail_start >= min_tail_messages and used + cost > tail_tokens:
            break
        used += cost
        tail_start -= 1
    # Keep the newest tool results with the call that asked for them: they are what the model
    # is about to read, so the tail grows rather than losing them to the summary.
    while 0 < tail_start < count and messages[tail_start]["role"] == "tool":
        tail_start -= 1
    head_end = _past_tool_results(messages, min(protect_first_n, tail_start))
    # The summary is a user message; a head ending on one would put two users side by side.
    while 0 < head_end < tail_start and messages[head_end - 1]["role"] == "user":
        head_end = _past_tool_results(messages, head_end + 1)
    return CompressionPlan(head_end=head_end, tail_start=tail_start)


def _past_tool_results(messages: Sequence[Message], index: int) -> int:
    while index < len(messages) and messages[index]["role"] == "tool":
        index += 1
    return index


def prune_tool_outputs(
    messages: Sequence[Message], *, before: int, placeholder: str, min_tokens: int
) -> tuple[list[Message], int]:
    """Replace the larger tool outputs in ``messages[:before]`` by ``placeholder``.

    Returns the new list (untouched messages are shared, replaced ones are copies) and how many
    outputs were replaced.
    """
    out: list[Message] = []
    replaced = 0
    for index, message in enumerate(messages):
        content = message.get("content")
        if (
            index < before
            and message["role"] == "tool"
            and content != placeholder
            and _message_tokens(message) - _MESSAGE_OVERHEAD > min_tokens
        ):
            message = copy.copy(message)
            message["content"] = placeholder
            replaced += 1
        out.append(message)
    return out, replaced


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressionResult:
    messages: list[Message]
    """The compacted transcript."""
    tokens_before: int
    """Estimated tokens of the messages before (see :func:`estimate_tokens`)."""
    tokens_after: int
    pruned: int
    """Tool outputs replaced by the placeholder."""
    summarised: bool
    """False when pruning alone was enough (or nothing could be summarised)."""
    summariser_failed: bool = False
    """True when the summariser was tried and the deterministic digest was used instead."""
    summariser_call: CallRecord | None = None
    """The summariser's call, when it answered: its provider, model and usage."""

    @property
    def changed(self) -> bool:
        return self.tokens_after < self.tokens_before


class Compressor:
    """Makes a transcript smaller: prune old tool outputs, then summarise the middle."""

    def __init__(
        self, summariser: Provider | None = None, settings: CompressionSettings | None = None
    ) -> None:
        self.summariser = summariser
        """The auxiliary model; None always uses the deterministic digest."""
        self.settings = settings if settings is not None else CompressionSettings()

    def plan(
        self, messages: Sequence[Message], *, context_window: int, target_tokens: int
    ) -> CompressionPlan:
        s = self.settings
        tail_tokens = min(int(context_window * s.tail_token_ratio), max(target_tokens // 2, 0))
        return plan(
            messages,
            protect_first_n=s.protect_first_n,
            protect_last_n=s.protect_last_n,
            tail_tokens=tail_tokens,
            min_tail_messages=s.min_tail_messages,
        )

    async def compress(
        self,
        messages: Sequence[Message],
        *,
        context_window: int,
        target_tokens: int,
        prune_target_tokens: int | None = None,
    ) -> CompressionResult:
        """Compress ``messages`` towards ``target_tokens``.

        Pruning alone is enough when it reaches ``prune_target_tokens`` (default: the target);
        otherwise the middle is summarised.
        """
        before = estimate_tokens(messages)
        cuts = self.plan(messages, context_window=context_window, target_tokens=target_tokens)
        s = self.settings
        pruned, replaced = prune_tool_outputs(
            messages,
            before=cuts.tail_start,
            placeholder=s.pruned_placeholder,
            min_tokens=s.prune_min_tokens,
        )
        after_pruning = estimate_tokens(pruned)
        enough = target_tokens if prune_target_tokens is None else prune_target_tokens
        if after_pruning <= enough or not cuts.has_middle:
            return CompressionResult(
                messages=pruned,
                tokens_before=before,
                tokens_after=after_pruning,
                pruned=replaced,
                summarised=False,
            )
        budget = max(s.summary_min_tokens, min(s.summary_max_tokens, target_tokens // 4))
        # The summariser reads the original middle: the outputs pruned above are exactly the
        # details a good summary keeps.
        middle = messages[cuts.head_end : cuts.tail_start]
        summary, failed, call = await self._summarise(middle, budget)
        compacted = pruned[: cuts.head_end] + summary_message(summary, pruned[cuts.tail_start :])
        return CompressionResult(
            messages=compacted,
            tokens_before=before,
            tokens_after=estimate_tokens(compacted),
            pruned=sum(
                1
                for kept, original in zip(pruned[: cuts.head_end], messages, strict=False)
                if kept is not original
            ),
            summarised=True,
            summariser_failed=failed,
            summariser_call=call,
        )

    async def _summarise(
        self, middle: Sequence[Message], budget: int
    ) -> tuple[str, bool, CallRecord | None]:
        """The summary text, whether the summariser failed (the digest was used), and its
        call when it answered."""
        max_chars = budget * _CHARS_PER_TOKEN
        if self.summariser is None:
            return fallback_summary(middle, max_chars=max_chars), False, None
        response: ModelResponse | None = None
        try:
            async with asyncio.timeout(self.settings.summary_timeout_s):
                response = await self._ask_summariser(self.summariser, middle, budget)
        except (ProviderError, TimeoutError) as exc:
            logger.warning("summariser failed (%s); using a deterministic summary", exc)
        call = (
            CallRecord(provider=response.provider, model=response.model, usage=response.usage)
            if response is not None
            else None
        )
        text = text_of(response.message.get("content")) if response is not None else ""
        if not text.strip():
            return fallback_summary(middle, max_chars=max_chars), True, call
        return clip_block(text.strip(), max_chars), False, call

    async def _ask_summariser(
        self, summariser: Provider, middle: Sequence[Message], budget: int
    ) -> ModelResponse | None:
        s = self.settings
        max_chars = min(s.summary_input_max_chars, summariser.context_window * 2)
        request = ModelRequest(
            messages=summariser_prompt(
                middle, budget=budget, max_chars=max_chars, per_message=s.summary_chars_per_message
            ),
            max_tokens=budget,
            stream=False,  # only the finished summary is used
        )
        response: ModelResponse | None = None
        stream = summariser.stream(request)
        try:
            async for event in stream:
                if isinstance(event, ModelResponse):
                    response = event
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:  # a timeout left it open: close the upstream connection
                await aclose()
        return response


@dataclass(slots=True)
class _Lineage:
    """What the hook remembers about one session between model calls."""

    current: str
    """The session the conversation lives in now (the newest child)."""
    compressions: int = 0
    overhead: int = 0
    """Real prompt tokens minus our estimate of the messages: system prompt, tool schemas."""
    transcript_id: int | None = None
    """``id()`` of the transcript seen at the last call, to know the measurements match. Not
    the list itself: that would keep a finished run's whole transcript alive for as long as
    its session is remembered (~MBs per large request). A stale id cannot match: a run's
    second call compares its own live list with the id its first call recorded."""
    seen: int = 0
    """Its length then ..."""
    seen_tokens: int = 0
    """... and our estimate of it then."""


class CompressingContext(ContextHooks):
    """Context hooks that compress the transcript before a call when it grows too large.

    ``session_ids`` mints a child session id from its parent's; by default the n-th child of
    session ``s`` is ``s.c<n>``.
    """

    max_sessions = 1024
    """Sessions remembered (least recently used forgotten first)."""

    def __init__(
        self, compressor: Compressor, *, session_ids: Callable[[str], str] | None = None
    ) -> None:
        self.compressor = compressor
        self._session_ids = session_ids
        self._lineages: OrderedDict[str, _Lineage] = OrderedDict()

    def current_session(self, session_id: str) -> str:
        """The session that now continues ``session_id`` (itself until compressed)."""
        lineage = self._lineages.get(session_id)
        return lineage.current if lineage is not None else session_id

    async def before_call(self, context: CallContext) -> Compaction | None:
        lineage = self._lineage(context.session_id)
        transcript = context.transcript
        tokens, estimate = self._measure(lineage, context)
        settings = self.compressor.settings
        ratio = settings.between_turns_threshold if context.between_turns else settings.threshold
        window = context.provider.context_window
        limit = int(window * ratio)
        compaction = None
        if tokens > limit:
            # The peer flushes pending memory writes here, so nothing the model meant to keep is
            # lost with the summarised messages. Our memory tool saves every write at once, so
            # there is nothing to flush.
            compaction = await self._compress(lineage, context, tokens=tokens, limit=limit)
            if compaction is not None:
                estimate = estimate_tokens(transcript)
        lineage.transcript_id = id(transcript)
        lineage.seen = len(transcript)
        lineage.seen_tokens = estimate
        return compaction

    def _measure(self, lineage: _Lineage, context: CallContext) -> tuple[int, int]:
        """The prompt size: the previous call's real count plus what was added since, when
        that call saw this transcript; otherwise the estimate plus the learned overhead. And
        our estimate of the transcript's messages, from the same walk over them (the
        messages seen before were estimated then: a transcript only grows between calls)."""
        transcript = context.transcript
        real = context.last_prompt_tokens
        if (
            real is not None
            and lineage.transcript_id == id(transcript)
            and lineage.seen <= len(transcript)
        ):
            lineage.overhead = real - lineage.seen_tokens
            added = estimate_tokens(transcript[lineage.seen :])
            return real + added, lineage.seen_tokens + added
        estimate = estimate_tokens(transcript)
        return estimate + max(lineage.overhead, 0), estimate

    async def _compress(
        self, lineage: _Lineage, context: CallContext, *, tokens: int, limit: int
    ) -> Compaction | None:
        overhead = max(lineage.overhead, 0)
        target = int(limit * self.compressor.settings.target_ratio)
        floor = limit // 10  # a huge overhead must not leave the messages a budget of nothing
        result = await self.compressor.compress(
            list(context.transcript),
            context_window=context.provider.context_window,
            target_tokens=max(target - overhead, floor),
            prune_target_tokens=max(limit - overhead, floor),
        )
        if not result.changed:
            return None  # nothing left to compress: calling again would not help either
        messages_before = len(context.transcript)
        context.transcript[:] = result.messages
        parent = lineage.current
        lineage.compressions += 1
        if self._session_ids is not None:
            lineage.current = self._session_ids(parent)
        else:
            lineage.current = f"{context.session_id}.c{lineage.compressions}"
        return Compaction(
            tokens_before=tokens,
            tokens_after=result.tokens_after + overhead,
            messages_before=messages_before,
            session_id=lineage.current,
            parent_session_id=parent,
            summarised=result.summarised,
            summariser_call=result.summariser_call,
        )

    def _lineage(self, session_id: str) -> _Lineage:
        lineage = self._lineages.get(session_id)
        if lineage is None:
            lineage = self._lineages[session_id] = _Lineage(current=session_id)
            while len(self._lineages) > self.max_sessions:
                self._lineages.popitem(last=False)
        self._lineages.move_to_end(session_id)
        return lineage
