"""The tables of the store, as sqlmodel classes.

Times are UNIX seconds (floats): the same type on every engine, cheap to compare, and what the
OpenAI objects carry anyway. Message bodies and other nested data are JSON columns, so a
message round-trips exactly (content parts, tool calls, reasoning replay) without a table per
shape. Changing anything here needs a migration in ``migrations/versions``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Float,
    Index,
    LargeBinary,
    Text,
    UniqueConstraint,
    text,
)
from sqlmodel import Field, SQLModel


class SessionRow(SQLModel, table=True):
    """A conversation: one owner's transcript, with its lineage.

    A fork (the client edited or regenerated history) and a compression both start a child
    session; ``parent_id`` records where it came from. A compression child begins with a
    compacted rendering of its parent (messages flagged ``compacted``); ``base_id`` names the
    session whose messages that rendering stands for, so the full history can be rebuilt.
    """

    __tablename__ = "sessions"
    __table_args__ = (
        Index("ix_sessions_owner_name", "owner", "name"),
        Index("ix_sessions_updated_at", "updated_at"),
    )

    id: str = Field(primary_key=True)
    owner: str  # indexed by ix_sessions_owner_name, of which it is the prefix
    name: str | None = None
    """The client's name for the conversation (X-Hermes-Session-Id, Open WebUI's chat id)."""
    profile: str
    title: str = ""
    system_prompt: str = ""
    """Frozen when the session starts (instructions + memory snapshot): the prompt cache holds."""
    parent_id: str | None = None
    origin: str | None = None
    """How it started from its parent: ``fork`` or ``compression``."""
    base_id: str | None = None
    created_at: float
    updated_at: float
    ended_at: float | None = None
    end_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0


class SessionLockRow(SQLModel, table=True):
    """Who holds a named conversation's turn: two turns of one conversation never interleave.

    Keyed by the conversation's name rather than a session, because the turn decides which
    session (branch) it continues; that decision must see the previous turn's outcome.
    """

    __tablename__ = "session_locks"

    owner: str = Field(primary_key=True)
    name: str = Field(primary_key=True)
    run_id: str
    lease_until: float
    """A lock past this time is free again (its holder is gone)."""
    instance: str | None = None
    """The replica whose run holds it: recovering a dead replica frees its locks even when its
    run's row was never written (it died in the run's first moments)."""


class MessageRow(SQLModel, table=True):
    __tablename__ = "messages"
    __table_args__ = (UniqueConstraint("session_id", "position"),)

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(foreign_key="sessions.id", ondelete="CASCADE")
    position: int
    role: str
    content: Any = Field(default=None, sa_column=Column(JSON))
    tool_calls: Any = Field(default=None, sa_column=Column(JSON))
    tool_call_id: str | None = None
    reasoning: str | None = None
    extra: Any = Field(default=None, sa_column=Column(JSON))
    """Any other keys of the message (``name``, ``reasoning_replay``)."""
    source: str = "agent"
    """``client``: it arrived in a request. ``agent``: the agent produced it."""
    compacted: bool = False
    """Part of a compression child's compacted rendering of earlier history."""
    search_text: str = ""
    """What full-text search sees: content, tool names and arguments, results."""
    created_at: float


class RunRow(SQLModel, table=True):
    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_owner_end_user", "owner", "end_user"),
        Index("ix_runs_ended_at", "ended_at"),
    )

    id: str = Field(primary_key=True)
    owner: str
    """The key's principal (a run is found by its id or completion id, then its owner is
    checked)."""
    end_user: str | None = None
    """The end user the run was for (docs/end-users.md), if its key named one."""
    session_id: str | None = None
    endpoint: str
    model: str
    completion_id: str | None = Field(default=None, index=True)
    status: str = Field(index=True)
    exit_reason: str | None = None
    iterations: int = 0
    model_calls: int = 0
    usage: Any = Field(default=None, sa_column=Column(JSON))
    cost_usd: float = Field(
        default=0.0, sa_column=Column(Float, nullable=False, server_default=text("0"))
    )
    """What its model calls cost (the configuration's ``prices``)."""
    error: str | None = None
    instance: str
    """The server instance that runs it (crash recovery closes only its own runs)."""
    created_at: float
    ended_at: float | None = None


class ResponseRow(SQLModel, table=True):
    """A stored Responses API object, for ``previous_response_id`` and retrieval."""

    __tablename__ = "responses"

    id: str = Field(primary_key=True)
    owner: str = Field(index=True)
    end_user: str | None = None
    """The end user it answered (docs/end-users.md), if its key named one."""
    session_id: str | None = None
    previous_id: str | None = None
    run_id: str | None = None
    status: str
    request: Any = Field(default=None, sa_column=Column(JSON))
    body: Any = Field(default=None, sa_column=Column(JSON))
    """The response object as last sent to the client."""
    transcript_length: int = 0
    """How many messages of the session this response's turn ended at (for forks)."""
    created_at: float = Field(index=True)
    updated_at: float


class MemoryRow(SQLModel, table=True):
    __tablename__ = "memory"

    scope: str = Field(primary_key=True)
    """The owner, or ``owner/scope`` for an explicit memory scope."""
    target: str = Field(primary_key=True)
    entries: Any = Field(default=None, sa_column=Column(JSON))
    updated_at: float


class TodoRow(SQLModel, table=True):
    __tablename__ = "todos"

    session_id: str = Field(primary_key=True)
    items: Any = Field(default=None, sa_column=Column(JSON))
    updated_at: float


class ApprovalRow(SQLModel, table=True):
    """A tool call that asked a human: pending until answered, expired when nobody did.

    ``scope = "session"`` on an approved row is a standing grant: later calls of that tool in
    the same conversation run without asking."""

    __tablename__ = "approvals"
    __table_args__ = (
        Index("ix_approvals_conversation", "conversation_owner", "conversation", "status"),
        Index("ix_approvals_run_id", "run_id"),
    )

    id: str = Field(primary_key=True)
    owner: str
    """The key's principal (who may answer it, as who may see its run)."""
    conversation_owner: str
    """The conversation's owner: the principal, or ``principal/scope``."""
    conversation: str
    """The conversation's name (its sessions' name)."""
    session_id: str | None = None
    """The session the waiting run ended in: the turn that answers it continues there."""
    run_id: str
    profile: str
    call_id: str
    tool: str
    toolset: str = ""
    arguments: Any = Field(default=None, sa_column=Column(JSON))
    reason: str
    status: str
    """``pending``, ``approved``, ``denied`` or ``expired``."""
    scope: str = "once"
    """``once``, or ``session``: every later call of the tool in the conversation too."""
    created_at: float
    expires_at: float
    decided_at: float | None = None
    resumed_by: str | None = None
    """The run that carried the answer on (None: the answer has not been acted on yet)."""


class FileRow(SQLModel, table=True):
    """A file a client uploaded (``POST /v1/files``); its bytes are on disk, not here."""

    __tablename__ = "files"
    __table_args__ = (Index("ix_files_owner_created", "owner", "created_at"),)

    id: str = Field(primary_key=True)
    owner: str
    """The key's principal: only it sees the file."""
    end_user: str | None = None
    """The end user who uploaded it, if its key named one: only requests naming that end
    user see it then."""
    filename: str
    purpose: str
    bytes: int = Field(sa_column=Column(BigInteger, nullable=False))
    created_at: float
    expires_at: float | None = None
    """When it expires (its upload's ``expires_after``); None: kept until deleted."""


class SkillRow(SQLModel, table=True):
    """A key's skill (``/v1/skills``, or one the agent wrote); its files are its versions'."""

    __tablename__ = "skills"
    __table_args__ = (
        UniqueConstraint("owner", "name", name="uq_skills_owner_name"),
        Index("ix_skills_owner_created", "owner", "created_at"),
    )

    id: str = Field(primary_key=True)
    owner: str
    """The key's principal: only it sees the skill."""
    name: str
    description: str
    """The default version's."""
    default_version: int
    latest_version: int
    """The newest version kept (a deleted newest one gives way to the one before)."""
    last_number: int
    """The highest version number ever given: numbers are never reused, so a version's
    files, once materialised somewhere under its number, are never stale."""
    origin: str
    """``uploaded`` or ``agent``."""
    draft: bool = False
    """Written by the agent and not yet approved: kept, not offered to runs."""
    created_at: float


class SkillVersionRow(SQLModel, table=True):
    """One version of a skill: its files as a zip, and what its ``SKILL.md`` says."""

    __tablename__ = "skill_versions"
    __table_args__ = (UniqueConstraint("skill_id", "version", name="uq_skill_versions_number"),)

    id: str = Field(primary_key=True)
    skill_id: str
    version: int
    name: str
    description: str
    body: str = Field(sa_column=Column(Text, nullable=False))
    """The ``SKILL.md`` after its front matter (what ``skill_view`` shows first)."""
    bundle: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    """All of its files: the deterministic zip ``hermes_core.skills.format.bundle_to_zip`` makes."""
    created_at: float


class ConversationRow(SQLModel, table=True):
    """A conversation (``/v1/conversations``): the key's session named by its id holds its
    items, its workspace and its memory scope are those of that name, as for any session."""

    __tablename__ = "conversations"
    __table_args__ = (Index("ix_conversations_owner_created", "owner", "created_at"),)

    id: str = Field(primary_key=True)
    owner: str
    """The key's principal: only it sees the conversation."""
    end_user: str | None = None
    """The end user whose request created it (docs/end-users.md), if its key named one."""
    meta: dict[str, Any] = Field(sa_column=Column("metadata", JSON, nullable=False))
    """The client's ``metadata`` (at most 16 string pairs, as OpenAI allows)."""
    created_at: float


class IdempotencyKeyRow(SQLModel, table=True):
    """A POST made with an ``Idempotency-Key``: what a retry with the same key gets instead of
    starting the work again (for 24 hours)."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index("ix_idempotency_keys_expires", "expires_at"),)

    owner: str = Field(primary_key=True)
    key: str = Field(primary_key=True)
    endpoint: str
    """The path the key was first used on."""
    fingerprint: str
    """A digest of the first request's body: the same key with another body is refused."""
    state: str
    """``running`` (the first request is being answered) or ``done``."""
    run_id: str | None = None
    """The run the first request started, which a retry may wait for or follow."""
    status_code: int | None = None
    content_type: str | None = None
    body: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))
    """The first answer, once it was whole (a stream's retry follows the run instead)."""
    headers: str | None = None
    """The first answer's own headers a replay carries again (``x-hermes-session-id``, …), as
    a JSON list of ``[name, value]`` pairs."""
    created_at: float
    expires_at: float
    instance: str | None = None
    """The replica whose request claimed the key."""
    life: str | None = None
    """Which start of that replica (a new one each start): a claim of an earlier start of this
    replica's is dead (its process was)."""
    claimed_until: float | None = None
    """The claim's lease, renewed while its request is answered: once it has run out, the
    request is dead (its process died), and a retry may take its key over."""


class WebhookDeliveryRow(SQLModel, table=True):
    """One event on its way to one webhook endpoint: sent at least once, under a stable id
    (``webhook-id``), retried with backoff until the endpoint answers 2xx or the attempts
    run out. A replica claims a row by a conditional update of ``claimed_until`` (a lease):
    one replica sends it at a time, and a dead replica's claims are taken over once their
    lease has run out."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_owner_created", "owner", "created_at"),
        Index("ix_webhook_deliveries_run", "run_id"),
    )

    id: str = Field(primary_key=True)
    """The ``webhook-id`` every attempt carries (``wh_…``)."""
    owner: str
    """The key whose run (or response) the event is about: only it sees the delivery."""
    run_id: str | None = None
    event_id: str
    """The event's own id (``evt_…``): the same for every endpoint it goes to."""
    event_type: str
    body: str = Field(sa_column=Column(Text, nullable=False))
    """The event as sent: the exact bytes each attempt signs."""
    url: str
    source: str
    """``config`` (the file's ``webhooks``: its secret is read from the configuration) or
    ``request`` (a run's own ``webhook``: its secret is kept here)."""
    secret: str | None = None
    status: str
    """``pending``, ``delivered`` or ``failed`` (attempts exhausted, or the endpoint gone)."""
    attempts: int = 0
    next_attempt_at: float
    claimed_by: str | None = None
    claimed_until: float | None = None
    last_status_code: int | None = None
    last_error: str | None = None
    created_at: float
    delivered_at: float | None = None


class ApiRunRow(SQLModel, table=True):
    """What ``POST /v1/runs`` was given beside the run itself: its metadata and webhook
    address, so every replica's ``GET /v1/runs`` shows them."""

    __tablename__ = "api_runs"

    run_id: str = Field(primary_key=True)
    owner: str
    meta: dict[str, Any] = Field(sa_column=Column("metadata", JSON, nullable=False))
    webhook_url: str | None = None
    webhook_secret: str | None = None
    """Kept so that a replica recovering the run (its own died) can still tell its webhook."""
    created_at: float


class CronRow(SQLModel, table=True):
    """A schedule (``/v1/crons``): what to run, when. ``next_fire_at`` is the claim: a
    replica fires the cron by advancing it with a conditional update (from the value it read)
    in the same transaction that writes the firing, so one replica fires each time."""

    __tablename__ = "crons"
    __table_args__ = (
        Index("ix_crons_due", "paused", "next_fire_at"),
        Index("ix_crons_owner_created", "owner", "created_at"),
    )

    id: str = Field(primary_key=True)
    owner: str
    schedule: str
    timezone: str
    model: str
    body: dict[str, Any] = Field(sa_column=Column("body", JSON, nullable=False))
    """What each firing posts as ``POST /v1/runs`` would get: input, instructions, session,
    metadata, webhook (its secret included: a firing needs it)."""
    paused: bool = False
    next_fire_at: float | None = None
    """None while paused."""
    created_at: float
    updated_at: float


class CronFiringRow(SQLModel, table=True):
    """One firing of a cron: claimed by a replica (a lease), then its run's id once started.
    A claim whose lease ran out with no run is retaken; one with a run never fires again."""

    __tablename__ = "cron_firings"
    __table_args__ = (
        UniqueConstraint("cron_id", "scheduled_at", name="uq_cron_firings_time"),
        Index("ix_cron_firings_open", "status", "claimed_until"),
    )

    id: str = Field(primary_key=True)
    cron_id: str
    owner: str
    scheduled_at: float
    status: str
    """``claimed`` (its run not started yet), ``started``, ``steered`` (its input went into
    its session's running run, ``run_id``) or ``failed`` (no run started: ``error``)."""
    claimed_by: str | None = None
    claimed_until: float | None = None
    run_id: str | None = None
    error: str | None = None
    error_code: str | None = None
    """Why no run started, as an API error's code (``session_busy``, ``quota_exceeded``, …)."""
    created_at: float


class UsageDailyRow(SQLModel, table=True):
    """The usage ledger: what one key (and end user) spent on one model through one profile
    on one UTC day, summed over every model call. A run adds its calls when it ends, by an
    upsert that adds to the day's row (``persistence/usage.py``)."""

    __tablename__ = "usage_daily"
    __table_args__ = (Index("ix_usage_daily_owner_day", "owner", "day"),)

    day: str = Field(primary_key=True)
    """``YYYY-MM-DD``, UTC."""
    owner: str = Field(primary_key=True)
    """The key's principal."""
    end_user: str = Field(primary_key=True)
    """The end user, or ``""`` for the key's own runs (a key may name none)."""
    profile: str = Field(primary_key=True)
    provider: str = Field(primary_key=True)
    """The configured provider name that served the calls."""
    model: str = Field(primary_key=True)
    calls: int = Field(sa_column=Column(BigInteger, nullable=False))
    input_tokens: int = Field(sa_column=Column(BigInteger, nullable=False))
    cache_read_tokens: int = Field(sa_column=Column(BigInteger, nullable=False))
    cache_write_tokens: int = Field(sa_column=Column(BigInteger, nullable=False))
    output_tokens: int = Field(sa_column=Column(BigInteger, nullable=False))
    reasoning_tokens: int = Field(sa_column=Column(BigInteger, nullable=False))
    cost_usd: float


class LeaseRow(SQLModel, table=True):
    """Who does a job only one replica may do at a time (the retention sweeper): a replica
    takes the lease by a conditional update once ``lease_until`` has passed, and renews it
    while it works."""

    __tablename__ = "leases"

    name: str = Field(primary_key=True)
    holder: str
    lease_until: float
