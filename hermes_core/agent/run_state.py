"""What every step of one run shares: its state, its one way into the transcript, its one exit.

The loop (``loop.py``) is a few kinds of step — a model call, a reply's tool calls, a text
reply, the limits — each in a module of its own. They all read and change the same run, so
the run lives here, apart from all of them: :class:`RunState` (what the run accumulates),
:class:`LoopOwner` (what it needs of its agent) and :class:`ActiveRun`, which holds the two
and offers :meth:`ActiveRun.append` and :meth:`ActiveRun.finish`, the only ways a step records
a message or ends the run.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hermes_core.agent.budget import IterationBudget
from hermes_core.agent.config import AgentConfig, AgentRequest, SpendLimit
from hermes_core.agent.emitter import Emitter
from hermes_core.agent.run_tools import RunTools
from hermes_core.agent.structured import format_instructions
from hermes_core.context.hooks import ContextHooks
from hermes_core.events import (
    CallRecord,
    ExitReason,
    InterruptSource,
    MessageAdded,
    RunFinished,
    Steered,
    TextDelta,
)
from hermes_core.messages import Message, text_of
from hermes_core.providers.base import Provider
from hermes_core.stores import TodoStore
from hermes_core.tools.registry import ApprovalCallback
from hermes_core.usage import Usage

STEP_BREAK = "\n\n"
"""Shown between the text of two model steps of one run (and before a notice after them)."""
SPENT_NOTICE = "The agent reached a spending limit before finishing."
"""How the answer of a run stopped by a spending limit with nothing to say begins; the limit's
own reason follows."""


@dataclass(slots=True)
class RunState:
    """Everything a run accumulates; the transcript is the record of the conversation."""

    transcript: list[Message]
    iterations: int = 0
    model_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    calls: list[CallRecord] = field(default_factory=list)
    """Every model call the run paid for: its own, its summariser's and its sub-agents'."""
    cost_usd: float = 0.0
    """The sum of ``calls``' costs, kept as they are counted (checked before every call)."""
    invalid_json_retries: int = 0
    unknown_tool_turns: int = 0
    nudged: bool = False
    reshaped: bool = False
    """The answer was asked for again once, for not having the requested shape."""
    shown_text: bool = False
    """Some answer text of this run has been shown: a later step's text starts on a new
    paragraph (not "Let me check.Found it.")."""
    tool_calls: int = 0
    """Server tool calls executed so far (for ``max_tool_calls``)."""
    plan_calls: int = 0
    """Model calls the planner made: they are not the run's steps (the first step, which a
    client's ``tool_choice`` is for, is the first call that is not a plan's)."""
    last_prompt_tokens: int | None = None
    warned: set[str] = field(default_factory=set)


class Steering:
    """Messages steered into a run from any task or thread (``Agent.steer``), waiting for the
    loop to append them before its next model call.

    Closed when the run ends, under the same lock as every offer, so a steer is either taken
    by a model call still to come or refused: none is accepted and silently lost. Only a run
    that ends otherwise (stopped, failed, out of budget) with a steer taken but not yet
    applied leaves one behind, and it says so (``Steered(applied=False)``).
    """

    __slots__ = ("_closed", "_lock", "_waiting")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[str] = []
        self._closed = False

    def offer(self, text: str) -> bool:
        """Queue ``text`` for the next model call; False when the run has ended."""
        with self._lock:
            if self._closed:
                return False
            self._waiting.append(text)
            return True

    def take(self) -> list[str]:
        """The messages waiting, in the order they came; the queue is left empty."""
        with self._lock:
            taken, self._waiting = self._waiting, []
            return taken

    def waiting(self) -> bool:
        with self._lock:
            return bool(self._waiting)

    def close(self) -> list[str]:
        """Refuse every later offer; what was offered and never taken."""
        with self._lock:
            self._closed = True
            left, self._waiting = self._waiting, []
            return left


class LoopOwner(Protocol):
    """What the loop needs of the agent that runs it (``Agent``, seen without importing it)."""

    @property
    def config(self) -> AgentConfig: ...
    @property
    def context(self) -> ContextHooks: ...
    @property
    def todo_store(self) -> TodoStore: ...
    @property
    def checkpoint(self) -> Callable[[], Awaitable[None]] | None: ...
    @property
    def approval_callback(self) -> ApprovalCallback | None: ...
    @property
    def interrupt_event(self) -> asyncio.Event: ...
    @property
    def interrupt_reason(self) -> str | None: ...
    @property
    def interrupt_source(self) -> InterruptSource | None: ...
    @property
    def steering(self) -> Steering: ...


class ActiveRun:
    """One run in progress: what it was asked, what it has, and how it records and ends."""

    def __init__(
        self,
        agent: LoopOwner,
        request: AgentRequest,
        *,
        provider: Provider,
        emitter: Emitter,
        task_id: str,
        budget: IterationBudget,
        tools: RunTools,
        system_prompt: str,
    ) -> None:
        self.agent = agent
        self.provider = provider
        """This turn's provider: a fallback chain's view that remembers a switch."""
        self.request = request
        self.emitter = emitter
        self.emit = emitter.emit
        self.task_id = task_id
        self.budget = budget
        self.tools = tools
        self.output_format = request.output_format
        if self.output_format is not None:
            system_prompt = f"{system_prompt}\n\n{format_instructions(self.output_format)}"
        self.system_prompt = system_prompt
        self.state = RunState(transcript=list(request.history))
        self.session_id = request.session_id
        """The session the run is in now (a compression moves it to a child)."""
        self.client_tools = {tool.name: tool for tool in request.client_tools}
        self.on_call = request.on_call

    # --- transcript -------------------------------------------------------------------------

    def append(self, message: Message) -> None:
        self.state.transcript.append(message)
        self.emit(MessageAdded, index=len(self.state.transcript) - 1, message=message)

    def apply_steering(self) -> None:
        """Append the messages steered in since the last model call, as user messages: the
        next call sees them, and the session stores them (``MessageAdded``)."""
        for text in self.agent.steering.take():
            self.append({"role": "user", "content": text})
            self.emit(Steered, text=text, applied=True)

    def last_role(self) -> str | None:
        return self.state.transcript[-1]["role"] if self.state.transcript else None

    def last_answer(self) -> str:
        """The text of the run's last message when it is the model's answer, else nothing."""
        last = self.state.transcript[-1] if self.state.transcript else None
        return text_of(last.get("content")) if last and last["role"] == "assistant" else ""

    # --- spending ---------------------------------------------------------------------------

    def count(self, call: CallRecord) -> None:
        """Add a model call the run paid for (priced already) to its usage and cost, and tell
        the request's ``on_call`` of it: every call the run pays for passes here once."""
        state = self.state
        state.usage += call.usage
        state.cost_usd += call.cost_usd
        state.calls.append(call)
        on_call = self.on_call
        if on_call is not None:  # the hot path without a hook: this one check
            on_call(call)

    def overspent(self, more: Sequence[CallRecord] = ()) -> str | None:
        """Why the run may make no further model call, having paid for its calls (and
        ``more``: a sub-agent's, still running); None while it may go on. A cost cap is a
        hard stop: unlike the iteration budget, no grace call follows it."""
        state = self.state
        cap = self.agent.config.max_cost_usd
        if cap is not None:
            spent = state.cost_usd + sum(call.cost_usd for call in more)
            if spent >= cap:
                return (
                    f"The run's cost cap (max_cost_usd {cap:g} USD) is reached: "
                    f"it has spent {spent:.4f} USD."
                )
        limit = self.request.spend_limit
        if limit is None:
            return None
        return limit.exceeded([*state.calls, *more] if more else state.calls)

    def child_spend_limit(self) -> SpendLimit:
        """What a sub-agent of this run is held to: this run's caps, over what the run has
        spent with the sub-agent's calls added (its cost is the run's)."""
        return _ParentSpend(self)

    # --- endings ----------------------------------------------------------------------------

    def finish_interrupted(self, partial_text: str) -> None:
        reason = self.agent.interrupt_reason or "interrupted"
        self.finish(
            ExitReason.INTERRUPTED,
            partial_text,
            partial=bool(partial_text),
            error=f"Interrupted: {reason}",
        )

    def finish_overspent(self, why: str) -> None:
        """End a run that may make no further model call (``why``: :meth:`overspent`'s) on
        its last answer, or, having none (it stopped between a tool's result and the model's
        next word), on a notice saying why."""
        answer = self.last_answer()
        if answer:
            return self.finish(ExitReason.BUDGET_EXHAUSTED, answer, error=why)
        return self.finish_on_notice(
            ExitReason.BUDGET_EXHAUSTED, f"{SPENT_NOTICE} {why}", error=why
        )

    def finish_on_notice(self, reason: ExitReason, notice: str, *, error: str | None) -> None:
        """End a run stopped short with nothing of the model's to show on ``notice`` instead
        of an empty answer: shown as its answer (after a break from any text an earlier step
        showed) and kept in the transcript, so the conversation's next turn reads what the user
        read; ``RunFinished.notice`` tells it from the model's words."""
        self.emit(TextDelta, text=(STEP_BREAK if self.state.shown_text else "") + notice)
        self.state.shown_text = True
        self.append({"role": "assistant", "content": notice})
        self.finish(reason, notice, error=error, notice=True)

    def finish(
        self,
        reason: ExitReason,
        text: str,
        *,
        error: str | None = None,
        retry_after: float | None = None,
        content_filtered: bool = False,
        partial: bool = False,
        refusal: str | None = None,
        notice: bool = False,
    ) -> None:
        interrupted = reason is ExitReason.INTERRUPTED
        for steered in self.agent.steering.close():  # not ``text``: that is the answer
            self.emit(Steered, text=steered, applied=False)
        self.emit(
            RunFinished,
            exit_reason=reason,
            final_text=text,
            partial=partial,
            notice=notice,
            iterations=self.state.iterations,
            usage=self.state.usage,
            model_calls=self.state.model_calls,
            error=error,
            retry_after=retry_after,
            content_filtered=content_filtered,
            interrupt_source=(self.agent.interrupt_source or InterruptSource.OTHER)
            if interrupted
            else None,
            session_id=self.session_id,
            transcript_length=len(self.state.transcript),
            cost_usd=self.state.cost_usd,
            calls=list(self.state.calls),
            refusal=refusal,
        )


class _ParentSpend:
    """A sub-agent's spend limit: its parent run's, counting the parent's calls too."""

    __slots__ = ("parent",)

    def __init__(self, parent: ActiveRun) -> None:
        self.parent = parent

    def exceeded(self, calls: Sequence[CallRecord]) -> str | None:
        return self.parent.overspent(calls)
