"""The shapes of ``/v1/runs``: a run, a stop, and the native event stream."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from hermes_core.events import ExitReason
from server.protocol.json_depth import refuse_deep
from server.protocol.schemas.common import Open, Shape
from server.runs.manager import RunStatus

# --- native runs ----------------------------------------------------------------------------------


class RunUsage(Open):
    """Tokens summed over every model call of the run."""

    input_tokens: int
    """The whole prompt, cache reads and writes included."""
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    """Generated tokens, reasoning included."""
    reasoning_tokens: int


class Approval(Shape):
    """A tool call that asked a person (``hermes.approval``)."""

    id: str
    object: Literal["hermes.approval"]
    run_id: str
    """The run that asked."""
    call_id: str
    tool: str
    toolset: str
    arguments: dict[str, Any]
    """What the call would run with: what the person judges."""
    reason: str
    """Why it needs approval."""
    status: Literal["pending", "approved", "denied", "expired"]
    scope: Literal["once", "session"]
    """``session``: later calls of the tool in the conversation run without asking."""
    created_at: int
    expires_at: int
    """Unanswered by then, it is a denial."""
    decided_at: int | None


class ApprovalAnswer(Shape):
    """The answer to an approval: ``{"approve": true}`` or ``{"approve": false}``."""

    # Built with the class, as FastAPI's adapter of it as a request body then is: built later,
    # that adapter warns of the alias FastAPI gives a body parameter (errors under tests).
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=False)

    approve: bool
    scope: Literal["once", "session"] = "once"
    """``session`` approves the tool for the rest of the conversation."""


class WebhookDelivery(Shape):
    """One event on its way to one webhook endpoint (``hermes.webhook_delivery``)."""

    id: str
    """The ``webhook-id`` header of every attempt (``wh_…``)."""
    object: Literal["hermes.webhook_delivery"]
    event_id: str
    """The event's ``id`` (``evt_…``), the same for every endpoint it goes to."""
    type: str
    """``run.completed``, ``response.completed``, ``approval.requested``, …"""
    run_id: str | None
    source: Literal["config", "request"]
    """``config``: an endpoint of the server's configuration (its address not shown);
    ``request``: the run's own ``webhook``."""
    url: str | None
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    next_attempt_at: int | None
    """When a pending delivery is tried next."""
    last_status_code: int | None
    last_error: str | None
    created_at: int
    delivered_at: int | None


class WebhookDeliveryList(Shape):
    object: Literal["list"]
    data: list[WebhookDelivery]
    first_id: str | None
    last_id: str | None
    has_more: bool


class RunSummary(Shape):
    """An agent run, live or (after a restart) from the database."""

    id: str
    object: Literal["hermes.run"]
    endpoint: Literal["chat.completions", "responses", "runs"]
    """``runs``: started by ``POST /v1/runs``."""
    model: str
    end_user: str | None = None
    """The end user the run was for (docs/end-users.md), when its key named one."""
    completion_id: str | None
    """The ``chatcmpl-…`` or ``resp_…`` id the run answers."""
    session_id: str | None
    status: RunStatus
    exit_reason: ExitReason | None
    error: str | None
    created_at: int
    ended_at: int | None
    iterations: int | None
    usage: RunUsage | None
    """Once the run has ended."""
    cost_usd: float | None = None
    """What its model calls cost in US dollars at the configured prices (``prices``; 0 when
    unpriced), once the run has ended."""
    events: int
    """Events in the replayable log (0 for a run known only from the database)."""
    metadata: dict[str, str] | None = None
    """What ``POST /v1/runs`` was given (None for runs of other endpoints)."""


class RunObject(RunSummary):
    """An agent run with the approvals it asked for and its webhook deliveries."""

    approvals: list[Approval]
    """The approvals the run asked for (pending ones wait for an answer)."""
    webhooks: list[WebhookDelivery] = Field(default_factory=list)
    """The webhook events about this run and how their delivery goes."""


class RunList(Shape):
    """``GET /v1/runs``: the key's runs, newest first."""

    object: Literal["list"]
    data: list[RunSummary]
    first_id: str | None
    last_id: str | None
    has_more: bool
    """More runs follow: ask again with ``after`` = ``last_id``."""


class RunWebhook(Shape):
    """Where this run's events (``run.completed``, ``run.failed``, ``run.cancelled``,
    ``approval.requested``) are sent, signed with ``secret``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: str = Field(min_length=1, max_length=2048)
    """``http(s)://``, held to the server's address policy (no internal address unless the
    operator allows it in ``web.allow``)."""
    secret: str | None = Field(default=None, max_length=512)
    """``whsec_`` then base64 (at least 16 bytes): required."""


class RunCreateRequest(Shape):
    """``POST /v1/runs``: a run that goes on without its client."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=False)

    model: str = Field(min_length=1)
    """The profile."""
    input: str | list[dict[str, Any]]
    """Text, or Responses input items."""
    instructions: str | None = None
    session: str | None = Field(default=None, min_length=1, max_length=256)
    """A session name (as ``X-Hermes-Session-Id``): the run continues it."""
    conversation: str | None = Field(default=None, min_length=1, max_length=256)
    """A ``conv_…`` id: the run is a turn of that conversation."""
    metadata: dict[str, str] | None = None
    """At most 16 pairs; keys up to 64 characters, values up to 512."""
    webhook: RunWebhook | None = None
    session_busy: Literal["wait", "reject", "refuse", "interrupt", "enqueue", "steer"] | None = None
    """What the run does when its session is running another turn (as the
    ``X-Hermes-Session-Busy`` header); default: the profile's, else ``server.session_busy``."""

    @field_validator("input")
    @classmethod
    def _shallow(cls, value: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
        # A cron keeps its runs' input and shows it again: too deep, every listing failed.
        refuse_deep(value, "input")
        return value


class RunSteerRequest(Shape):
    """``POST /v1/runs/{id}/steer``: a message for the running turn's next model call."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=False)

    input: str = Field(min_length=1, max_length=100_000)


class RunSteered(Shape):
    """The run took the message: its next model call sees it, and its answer answers it."""

    id: str
    object: Literal["hermes.run"]
    status: RunStatus
    steered: Literal[True]


class RunStopped(Shape):
    """The stop was requested; the run ends as ``interrupted`` shortly."""

    id: str
    object: Literal["hermes.run"]
    status: RunStatus


AgentEventKind = Literal[
    "run_started",
    "model_call_started",
    "reasoning_delta",
    "text_delta",
    "tool_call_generating",
    "tool_started",
    "tool_progress",
    "sources_found",
    "image_partial",
    "tool_finished",
    "approval_requested",
    "approval_resolved",
    "plan",
    "budget_warning",
    "retry",
    "fallback",
    "compression",
    "message_added",
    "steered",
    "step_finished",
    "client_tool_calls",
    "run_finished",
    "subagent",
]


class RunEvent(Open):
    """One native agent event (``hermes_core.events``), sent as ``id: <seq>``,
    ``event: <kind>`` and ``data: <json>``; the stream closes after ``run_finished``. Resume
    with ``after`` or ``Last-Event-ID``."""

    run_id: str
    seq: int
    """Position in the run's event log: 0, 1, 2, … without gaps."""
    kind: AgentEventKind
