"""Learning from runs (``learning.extract_skills``): after a run that took enough tool calls,
one auxiliary model call reads what the run did and may propose a skill — the procedure that
worked, written down. The proposal is kept as a draft in the key's library: no run is offered
it until someone approves it (``POST /v1/skills/{id}/approve``), because a procedure the agent
wrote about itself is exactly the kind of instruction a person should read first.

The extractor is a run observer: it keeps the messages of the runs whose profile learns (and
nothing for the others), and once such a run completed, asks in a task of its own, so neither
the run nor its client waits for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hermes_core.events import (
    AgentEvent,
    CallRecord,
    ExitReason,
    MessageAdded,
    RunFinished,
    RunStarted,
    ToolStarted,
)
from hermes_core.messages import Message, text_of
from hermes_core.pricing import PriceTable
from hermes_core.providers.base import ModelRequest, ModelResponse, Provider
from hermes_core.skills.format import SkillError, bundle_from_files, skill_markdown
from hermes_core.skills.library import SKILL_FILE, SkillEntry, SkillLibrary
from server.runs.manager import RunInfo
from server.runs.observers import observes

log = logging.getLogger("hermes.skills")

MAX_TRANSCRIPT_CHARS = 16_000
"""What the extracting model reads of a run at most (its start and its end)."""
PART_CHARS = 400
"""Each tool call's arguments and each tool result are cut to this."""
MAX_REPLY_TOKENS = 2_000

INSTRUCTIONS = """\
You read the record of a task an AI agent just completed with tools, and decide whether it \
shows a reusable procedure worth keeping as a skill: steps that would help with similar tasks \
later (which tools or commands to use, in what order, what to check, what went wrong and how \
it was fixed). One-off facts, chit-chat and trivial lookups are not skills.

Reply with one JSON object and nothing else:
- to keep a skill: {"name": "...", "description": "...", "body": "..."} where name is 1-64 \
lowercase letters, digits and hyphens; description (at most 300 characters) says what the \
skill does and when to use it; body is Markdown: the procedure as numbered steps, with the \
commands or tool calls that worked, and the pitfalls;
- otherwise: {"skip": "why"}."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Learner:
    """How one profile learns: the model that writes proposals and when it is asked."""

    provider: Provider
    min_tool_calls: int
    prices: PriceTable | None = None
    """What the proposing call costs (the profile's prices; None: unpriced)."""


@dataclass(slots=True)
class _Watched:
    messages: list[Message] = field(default_factory=list)
    tool_calls: int = 0


class SkillExtractor:
    """Proposes draft skills from completed runs; ``observe`` is a run manager observer."""

    def __init__(
        self,
        library: SkillLibrary,
        learner_of: Callable[[str], Learner | None],
        *,
        on_draft: Callable[[str, SkillEntry], None] | None = None,
        on_call: Callable[[RunInfo, CallRecord], None] | None = None,
    ) -> None:
        """``learner_of(profile_id)``: how that profile learns, or None when it does not.
        ``on_draft(profile_id, entry)`` hears of each draft kept (metrics). ``on_call(run,
        call)`` hears of each proposing call, paid for as a call of ``run`` (the usage
        ledger: the key's budget must see what learning from its runs costs)."""
        self.library = library
        self.learner_of = learner_of
        self.on_draft = on_draft
        self.on_call = on_call
        self._watched: dict[str, _Watched] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @observes(RunStarted, MessageAdded, ToolStarted, RunFinished)
    def observe(self, info: RunInfo, event: AgentEvent) -> None:
        if isinstance(event, RunStarted):
            if self.learner_of(info.model) is not None:
                self._watched[info.id] = _Watched()
            return
        watched = self._watched.get(info.id)
        if watched is None:
            return
        if isinstance(event, MessageAdded):
            watched.messages.append(event.message)
        elif isinstance(event, ToolStarted):
            watched.tool_calls += 1
        elif isinstance(event, RunFinished):
            del self._watched[info.id]
            learner = self.learner_of(info.model)
            if (
                learner is not None
                and event.exit_reason is ExitReason.COMPLETED
                and watched.tool_calls >= learner.min_tool_calls
            ):
                task = asyncio.create_task(
                    self._extract(info, learner, watched.messages),
                    name=f"hermes-learn-{info.id}",
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the proposals being written (tests; a shutdown cancels them instead)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _extract(self, info: RunInfo, learner: Learner, messages: list[Message]) -> None:
        def paid(response: ModelResponse) -> None:
            if self.on_call is not None:
                prices = learner.prices
                cost = prices.cost(response.model, response.usage) if prices else 0.0
                call = CallRecord(
                    provider=response.provider,
                    model=response.model,
                    usage=response.usage,
                    cost_usd=cost,
                )
                self.on_call(info, call)

        try:
            entry = await propose_skill(
                self.library, info.owner, learner.provider, messages, on_response=paid
            )
        except Exception:  # learning is a side task: it must never disturb serving
            log.exception("run %s: proposing a skill failed", info.id)
            return
        if entry is not None:
            log.info("run %s: kept the draft skill %r for approval", info.id, entry.name)
            if self.on_draft is not None:
                self.on_draft(info.model, entry)


async def propose_skill(
    library: SkillLibrary,
    owner: str,
    provider: Provider,
    messages: list[Message],
    *,
    on_response: Callable[[ModelResponse], None] | None = None,
) -> SkillEntry | None:
    """Ask ``provider`` for a skill from the run ``messages``; the draft kept in ``owner``'s
    library, or None when the model saw none or wrote one that breaks the format.
    ``on_response`` hears of the call's answer (what it cost), whatever it proposes."""
    request = ModelRequest(
        messages=[
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": run_record(messages)},
        ],
        max_tokens=MAX_REPLY_TOKENS,
        stream=False,
    )
    response: ModelResponse | None = None
    stream = provider.stream(request)
    try:
        async for event in stream:
            if isinstance(event, ModelResponse):
                response = event
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    if response is None:
        return None
    if on_response is not None:
        on_response(response)
    proposal = _json_object(text_of(response.message.get("content")))
    if proposal is None or "skip" in proposal:
        return None
    try:
        name, description = str(proposal["name"]), str(proposal["description"])
        text = skill_markdown(name, description, str(proposal["body"]))
        bundle = bundle_from_files([(SKILL_FILE, text.encode("utf-8"))])
    except (KeyError, SkillError) as exc:
        log.info("a proposed skill was not kept: %s", exc)
        return None
    return await library.write(owner, bundle, origin="agent", draft=True)


def run_record(messages: list[Message]) -> str:
    """The run as the extracting model reads it: who said and did what, long parts cut, and
    the middle of a very long run left out."""
    lines: list[str] = []
    for message in messages:
        role = message["role"]
        text = text_of(message.get("content")).strip()
        if role == "tool":
            lines.append(f"[tool result] {_cut(text)}")
            continue
        if role == "system":
            continue  # the server's own notes (recalled episodes): not what the run did
        if text:
            lines.append(f"[{role}] {text if role == 'user' else _cut(text, 2 * PART_CHARS)}")
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            lines.append(f"[tool call] {function.get('name')}({_cut(function.get('arguments'))})")
    record = "\n".join(lines)
    if len(record) > MAX_TRANSCRIPT_CHARS:
        half = MAX_TRANSCRIPT_CHARS // 2
        record = f"{record[:half]}\n[… the middle of the run left out …]\n{record[-half:]}"
    return record


def _cut(text: object, limit: int = PART_CHARS) -> str:
    shown = " ".join(str(text or "").split())
    return shown if len(shown) <= limit else shown[:limit] + "…"


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(_FENCE.sub("", text.strip()))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
