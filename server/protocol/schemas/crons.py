"""The shapes of ``/v1/crons``: schedules whose firings are ``POST /v1/runs`` runs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from server.protocol.schemas.common import Shape
from server.protocol.schemas.runs import RunWebhook


class CronCreateRequest(Shape):
    """``POST /v1/crons``: what to run, and when."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=False)

    schedule: str = Field(min_length=1, max_length=256)
    """A cron expression: 5 fields (minute hour day month weekday), or 6 with seconds first;
    ``@daily`` and the like."""
    timezone: str = Field(default="UTC", min_length=1, max_length=64)
    """The IANA time zone the expression is read in (``Europe/Paris``)."""
    model: str = Field(min_length=1)
    """The profile each run uses."""
    input: str | list[dict[str, Any]]
    """Text, or Responses input items, given to every run."""
    instructions: str | None = None
    session: str | None = Field(default=None, min_length=1, max_length=256)
    """A session name every run continues; none: each run starts a new session."""
    metadata: dict[str, str] | None = None
    """At most 15 pairs, shown on the cron and on every run (with ``hermes_cron_id``)."""
    webhook: RunWebhook | None = None
    """Where every run's events are sent, as on ``POST /v1/runs``."""
    paused: bool = False


class CronUpdateRequest(Shape):
    """``POST /v1/crons/{id}``: the fields to change (``session: null`` goes back to a new
    session per run; ``webhook: null`` removes it)."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=False)

    schedule: str | None = Field(default=None, min_length=1, max_length=256)
    timezone: str | None = Field(default=None, min_length=1, max_length=64)
    model: str | None = Field(default=None, min_length=1)
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    session: str | None = Field(default=None, min_length=1, max_length=256)
    metadata: dict[str, str] | None = None
    webhook: RunWebhook | None = None
    paused: bool | None = None


class CronWebhook(Shape):
    url: str
    """Its secret is kept, never shown."""


class CronError(Shape):
    """Why a firing started no run: the code and message ``POST /v1/runs`` would have
    answered the cron's key (``session_busy``, ``quota_exceeded``, ``rate_limit_exceeded``,
    ``model_not_found``, ``key_not_configured``, ``server_error``, …)."""

    code: str
    message: str


class CronObject(Shape):
    """A schedule (``hermes.cron``)."""

    id: str
    object: Literal["hermes.cron"]
    schedule: str
    timezone: str
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None
    session: str | None
    metadata: dict[str, str]
    webhook: CronWebhook | None
    paused: bool
    next_fire_at: int | None
    """UNIX seconds of the next firing (None while paused)."""
    created_at: int
    updated_at: int
    last_fired_at: int | None
    """UNIX seconds of the time its latest firing fired for (None: never fired)."""
    last_status: Literal["starting", "started", "steered", "failed"] | None
    """What its latest firing came to: its run still ``starting`` (waiting for its busy
    session), ``started``, ``steered`` into its session's running run, or ``failed`` to
    start one (``last_error`` says why)."""
    last_run_id: str | None
    """The run its latest firing started, or steered into (None when it started none, or
    that run was deleted since)."""
    last_error: CronError | None
    """Why its latest firing started no run; None once a firing started one."""


class CronList(Shape):
    """``GET /v1/crons``: the key's crons, newest first."""

    object: Literal["list"]
    data: list[CronObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class CronDeleted(Shape):
    id: str
    object: Literal["hermes.cron.deleted"]
    deleted: Literal[True]
