"""What an agent is configured with, and what one run is asked to do."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hermes_core.agent.budget import DEFAULT_MAX_ITERATIONS, BudgetPressure
from hermes_core.events import ApprovalDecision, CallRecord
from hermes_core.messages import Message
from hermes_core.pricing import PriceTable
from hermes_core.providers.base import OutputFormat, ToolChoice, ToolSchema
from hermes_core.providers.retry import RetryPolicy
from hermes_core.records import record
from hermes_core.skills.library import AttachedSkill

CORE_INSTRUCTIONS = (
    "You are Hermes, an agent that completes the user's task by reasoning and by calling the "
    "tools you are given. Call tools when they help; call several at once when they are "
    "independent. When the task is done, answer the user directly and concisely. Never claim "
    "to have done something you did not do."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentConfig:
    """Settings of an agent (a profile); shared by all its runs."""

    core_instructions: str = CORE_INSTRUCTIONS
    instructions: str = ""
    """The profile's own instructions, layered after the core ones."""
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    """Model calls per run (children of a run draw from the same pool)."""
    budget_pressure: BudgetPressure = field(default_factory=BudgetPressure)
    max_tool_concurrency: int = 8
    max_tool_result_chars: int = 100_000
    """Tool results longer than this are cut in the model's view (not in the transcript)."""
    max_invalid_json_retries: int = 3
    max_unknown_tool_turns: int = 3
    max_delegate_children: int = 3
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retries of a provider that is not already a FallbackChain (a chain has its own)."""
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning_effort: str | None = None
    memory_char_limit: int = 2200
    user_profile_char_limit: int = 1375
    planner: bool = False
    """Plan a complex task before its first action, and plan again when too many of the
    tool calls since the last plan failed (``agent/planner.py``)."""
    inject_episodes: int = 0
    """At the start of a turn, add this many snippets of the owner's past sessions that
    match the new message to the context (0: none; ``agent/episodes.py``)."""
    prices: PriceTable | None = None
    """What model calls cost: each call's ``CallRecord.cost_usd``, the run's ``cost_usd``.
    None: calls are counted in tokens only (they cost 0)."""
    max_cost_usd: float | None = None
    """A run's cost at most: reaching it ends the run ``budget_exhausted`` before its next
    model call. None: no cap."""


class SpendLimit(Protocol):
    """What a run's spending is held to besides its own cost cap: its key's and end user's
    budgets, what is left of them when the run started (``server/budgets/``)."""

    def exceeded(self, calls: Sequence[CallRecord]) -> str | None:
        """Why the run must end now, having made ``calls`` so far (each with its tokens and
        cost); None while it may go on. Asked before every model call after the first."""
        ...


CallHook = Callable[[CallRecord], None]
"""``AgentRequest.on_call``: told of each model call a run pays for, as the run counts it."""


def chained(first: CallHook | None, then: CallHook | None) -> CallHook | None:
    """One ``on_call`` that tells ``first``, then ``then`` (either may be None)."""
    if first is None or then is None:
        return first or then

    def both(call: CallRecord) -> None:
        first(call)
        then(call)

    return both


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalAnswer:
    """The answer to a call that an earlier run left awaiting approval: the run that carries
    it first makes the call again (or tells the model it was refused), then goes on."""

    approval_id: str
    name: str
    """The tool."""
    arguments: dict[str, Any]
    reason: str
    """Why it needed approval."""
    decision: ApprovalDecision


@record  # not frozen at run time: a run's request is copied several times on the hot path
class AgentRequest:
    """One run: the new user message (if any) on top of a history."""

    user_message: str | list[dict[str, Any]] | None = None
    """Appended to the history; None continues the history as it is (e.g. after client tool
    results were appended)."""
    user_name: str | None = None
    """Who of several participants says ``user_message`` (chat's ``name``): kept on it, so an
    upstream that reads names (Chat Completions) tells the speakers apart."""
    history: Sequence[Message] = ()
    system_message: str | None = None
    """The client's system message, layered over the agent's own prompt."""
    task_id: str | None = None
    """Generated when omitted."""
    session_id: str | None = None
    """The session the run continues: it keys the todo list and the compression lineage.
    The task id when omitted."""
    run_id: str | None = None
    """Generated when omitted."""
    client_tools: Sequence[ToolSchema] = ()
    """Tools the client declared and runs itself; calling one ends the run with
    ``awaiting_client_tools``."""
    tool_choice: ToolChoice = "auto"
    """Applies to the run's first model call only: forcing a tool on every call would never
    let the model answer."""
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning_effort: str | None = None
    parallel_tool_calls: bool | None = None
    """Passed to the model (None: the provider's default)."""
    output_format: OutputFormat | None = None
    """The shape the final answer must take (structured outputs); see ``agent/structured.py``."""
    max_tool_calls: int | None = None
    """Server tool calls this run may make. Calls beyond it are answered with an error, and
    once it is used up the model is asked to answer without tools."""
    workspace: Path | None = None
    """The conversation's working directory, where file, shell and code tools act."""
    approvals: Sequence[ApprovalAnswer] = ()
    """Answers to the calls the conversation's last run left awaiting approval: handled
    before the first model call."""
    offer_tools: bool = True
    """False: the model is offered no tools at all, server's or client's (a plain completion
    that still runs as a run: usage, metrics and stop as for any other)."""
    recalled: str | None = None
    """What the owner's earlier sessions say about the new message (``agent/episodes.py``):
    recorded as a system note just after it, so the model reads it with the message."""
    skills: Sequence[AttachedSkill] = ()
    """Skills this request attaches to its run, besides those its agent offers anyway."""
    spend_limit: SpendLimit | None = None
    """The budgets the run is held to (None: none but the profile's ``max_cost_usd``)."""
    on_call: CallHook | None = None
    """Called synchronously with each model call the run pays for, priced, as the run counts
    it: its own calls, a compression's summariser's, and a sub-agent's once the sub-agent
    ends (when they are counted into this run). Every call exactly once, in the order of
    ``RunFinished.calls``, and always before ``RunFinished``: a server records usage as it is
    spent, not only when the run ends. Runs on the event loop, inside the loop's step: it
    must be quick and must not raise. Sub-agents' requests do not inherit it."""
    stream_model_replies: bool = True
    """Someone follows the answer as it is generated (a streaming client). False lets each
    model reply come from upstream in one piece (cheaper for the server); the run's events
    then carry a reply's text only once the reply is complete."""

    def new_message(self) -> Message | None:
        """The new user message as the transcript keeps it (None: there is none)."""
        if self.user_message is None:
            return None
        message: Message = {"role": "user", "content": self.user_message}
        if self.user_name is not None:
            message["name"] = self.user_name
        return message

    def conversation(self) -> list[Message]:
        """The history with the new user message on top."""
        new = self.new_message()
        return [*self.history, new] if new is not None else list(self.history)
