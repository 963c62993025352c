"""What a hermes-server configuration holds, and the rules a valid one obeys.

The models are the single source of truth for the YAML file (``docs/configuration.md``
documents them field by field). Cross-references — a profile naming a provider, unique names
and ids — are checked on :class:`HermesConfig` so that an invalid configuration cannot be
built by any route, file or code. Every secret is a ``SecretStr``: a ``repr`` or a log line of
any of these models never shows one.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from hermes_core.agent.budget import DEFAULT_MAX_ITERATIONS
from hermes_core.agent.config import AgentConfig
from hermes_core.errors import ConfigurationError
from hermes_core.providers.config import ProviderConfig
from hermes_core.providers.retry import RetryPolicy
from hermes_core.tools.agent_tools import ALWAYS_ON_TOOLS
from hermes_core.tools.cgroups import CgroupLimits
from hermes_core.tools.egress.policy import EgressPolicy
from hermes_core.tools.isolation import default_total
from hermes_core.tools.mcp.spec import McpServerSpec
from hermes_core.tools.quota import WorkspaceQuota
from hermes_core.tools.sandbox import SandboxLimits, SandboxPolicy
from hermes_core.tools.toolsets import TOOLSETS, ApprovalPolicy, ToolsetOptions
from hermes_core.tools.web.fetch import FetchLimits
from hermes_core.tools.web.guard import AddressPolicy, parse_allow_entry
from hermes_core.tools.web.search import SearchBackendName, SearchSettings
from hermes_core.tools.web.tools import WebOptions
from server.webhooks.events import EVENT_TYPES, WebhookEventType
from server.webhooks.signing import secret_key

CacheTTL = Literal["5m", "1h"]
SessionBusyMode = Literal["wait", "reject", "refuse", "interrupt", "enqueue", "steer"]
"""What a turn does when its named session is running another (``refuse``: ``reject``)."""

DEFAULT_PROFILE_ID = "hermes-agent"
SIMULATOR_PROVIDER = "simulator"
"""Reserved provider name: the built-in upstream simulator, started in-process by ``serve``
when its ``base_url`` is not given."""
SIMULATOR_MODEL = "hermes-simulator"


_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$"
_PRINCIPAL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"
PATTERN_HINTS = {
    _NAME_PATTERN: "must start with a letter or digit and hold only letters, digits and ._:/@- "
    "(at most 128 characters)",
    _PRINCIPAL_PATTERN: "must start with a letter or digit and hold only letters, digits and "
    "._@- (at most 64 characters)",
}
"""Readable versions of the patterns above, for validation messages."""


DATABASE_SCHEMES = ("sqlite+aiosqlite", "postgresql+asyncpg")
"""The database URLs the server can open: its drivers are asyncio ones."""
DATABASE_HINTS = {
    "postgres": "postgresql+asyncpg://",
    "postgresql": "postgresql+asyncpg://",
    "sqlite": "sqlite+aiosqlite:///",
}
"""A usual URL's scheme → what to write instead (``postgres://`` is what hosted databases
hand out)."""
REDIS_SCHEMES = ("redis", "rediss", "unix")


def _check_url(url: str, schemes: tuple[str, ...], hints: dict[str, str]) -> None:
    """Raise ``ValueError`` unless ``url`` has one of ``schemes`` and a numeric port (if any).
    The message names the scheme at most, never the URL: it may hold a password."""
    parts = urlsplit(url.strip())
    names = [f"{scheme}://" for scheme in schemes]
    expected = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        base = scheme.partition("+")[0]
        if base in hints:
            raise ValueError(f"{scheme}:// names no driver this server has: write {hints[base]}…")
        if "://" not in url or not re.fullmatch(r"[a-z][a-z0-9+.-]{0,40}", scheme):
            raise ValueError(f"not a URL: it must start with {expected}")
        raise ValueError(f"{scheme}:// is not supported: the URL must start with {expected}")
    try:
        parts.port  # noqa: B018 (a property that raises on a port that is not a number)
    except ValueError:
        raise ValueError("its port is not a number from 0 to 65535") from None


def _provider_problems(index: int, provider: ProviderConfig) -> list[str]:
    """What makes a provider unusable though each field is valid on its own: found now, not
    by a traceback when it is built or an error on every run of its profiles."""
    problems = _key_command_problems(index, provider.api_key_command)
    base_url = provider.base_url
    if base_url and not re.match(r"(?i)https?://[^/\s]", base_url):
        # aiohttp's InvalidUrlClientError, otherwise.
        problems.append(
            f"providers[{index}].base_url: must be an http:// or https:// URL "
            "(e.g. https://api.example.com/v1)"
        )
    elif base_url and urlsplit(base_url).netloc.rpartition("@")[1]:
        # Never sent as such (the client's bearer key and URL credentials conflict: every
        # call failed), and an address is logged where a key never is.
        problems.append(
            f"providers[{index}].base_url: must not hold credentials (user:password@); "
            "give the key as api_key, api_key_env, api_key_file or api_key_command"
        )
    return problems


def _key_command_problems(index: int, command: str | None) -> list[str]:
    """A key command that cannot be run as written, found now rather than by a traceback when
    its provider is built. Never quotes the command: its line may hold a secret."""
    if command is None:
        return []
    where = f"providers[{index}].api_key_command"
    try:
        words = shlex.split(command)
    except ValueError as error:  # its message says what is unbalanced, not what is written
        return [f"{where}: not a valid command line ({str(error).lower()})"]
    return [] if words else [f"{where}: must not be empty"]


class _Model(BaseModel):
    # extra="forbid": a misspelt option must be an error, not silently ignored.
    model_config = ConfigDict(frozen=True, extra="forbid")


def derived_principal(key: str) -> str:
    """The principal of a key given without one: stable across restarts and key order, and
    revealing nothing useful about the key (8 hex digits of its SHA-256)."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]


class Budget(_Model):
    """What a key, or one end user behind it, may spend (docs/budgets.md). Days and months
    are UTC calendar ones: a day's tokens reset at 00:00 UTC, a month's cost on the 1st."""

    tokens_per_day: int | None = Field(default=None, ge=1)
    """Model tokens (input and output, every model call) per UTC day; None: no limit."""
    cost_per_month_usd: float | None = Field(default=None, gt=0)
    """Cost (the ``prices`` table) per UTC calendar month; None: no limit."""


class ApiKey(_Model):
    """A client API key and the principal (owner of sessions, memory, runs) it stands for."""

    key: SecretStr
    principal: str = Field(default="", pattern=_PRINCIPAL_PATTERN)
    """Derived from the key when omitted (see :func:`derived_principal`)."""
    profiles: list[str] | None = None
    """The profile ids this key may use; None (the default) allows every profile."""
    trusted_front_end: bool = False
    """Its callers may name the end user a request is for (Open WebUI's
    ``X-OpenWebUI-User-Id``, ``X-Hermes-Memory-Scope``, the ``user`` / ``safety_identifier``
    fields): each end user then has their own memory, sessions, files and limits
    (docs/end-users.md). A front end that signs its users in (Open WebUI) is one."""
    admin: bool = False
    """May use the admin routes (every key's usage, erasing an end user); no key is one
    unless it says so."""
    budget: Budget | None = None
    """This key's own budget; None: ``limits.budget``."""
    end_user_budget: Budget | None = None
    """The budget of each end user behind this key; None: ``limits.end_user_budget``."""

    @model_validator(mode="before")
    @classmethod
    def _derive_principal(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("principal"):
            key = data.get("key")
            if isinstance(key, str) and key.strip():
                return {**data, "principal": derived_principal(key.strip())}
        return data

    @field_validator("key")
    @classmethod
    def _strip_key(cls, key: SecretStr) -> SecretStr:
        value = key.get_secret_value().strip()
        if not value:
            raise ValueError("an API key must not be empty")
        return SecretStr(value)


class FilesConfig(_Model):
    """Uploads (``POST /v1/files``) and what one key may keep."""

    dir: Path | None = None
    """Where uploaded files' bytes live; ``files/`` in ``server.shared_dir`` (or
    ``data_dir``) when omitted."""
    max_file_mb: float = Field(default=100.0, gt=0, le=100 * 1024)
    """The largest file one upload may be (a 413 beyond)."""
    quota_mb: float = Field(default=1024.0, gt=0)
    """Megabytes of files one API key may keep in all (a 413 beyond)."""
    max_files: int = Field(default=1000, ge=1)
    """Files one API key may keep (a 413 beyond)."""

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * 1024 * 1024)

    @property
    def quota_bytes(self) -> int:
        return int(self.quota_mb * 1024 * 1024)


class SandboxesConfig(_Model):
    """All sandboxes of this server together (cgroups only; see ``docs/isolation.md``)."""

    memory_mb: int | None = Field(default=None, ge=64)
    """Memory of every command at once; half the machine's when omitted."""
    max_processes: int = Field(default=4096, ge=16)
    cpus: float | None = Field(default=None, gt=0)
    """Cores every command at once may use; the machine's less half a core when omitted."""

    def total(self) -> CgroupLimits:
        default = default_total()
        return CgroupLimits(
            memory_bytes=(self.memory_mb * 1024 * 1024 if self.memory_mb else default.memory_bytes),
            max_processes=self.max_processes,
            cpus=self.cpus or default.cpus,
        )


class LimitsConfig(_Model):
    """What each key and each end user may run and spend (``limits:``; docs/budgets.md)."""

    runs_per_user: int = Field(default=4, ge=1)
    """Runs one end user may have in progress at once, inside their key's
    ``server.max_concurrent_runs_per_key``."""
    budget: Budget | None = None
    """Every key's budget, unless the key names its own."""
    end_user_budget: Budget | None = None
    """Every end user's budget, unless their key names its own."""
    crons_per_key: int = Field(default=100, ge=1, le=100_000)
    """Schedules (``/v1/crons``) one key may keep: each holds up to a request's worth of input,
    so, unbounded, a key could fill the database's disk with them."""
    budget_refresh_seconds: float = Field(default=2.0, ge=0.2, le=60)
    """With replicas (``server.redis_url``): how often a replica reads the usage ledger again
    for a budget its running runs are held to, so that they stop for what runs on other
    replicas spend; reloadable. A server alone never does."""


class ModelPrice(_Model):
    """List prices of one model, in US dollars per million tokens."""

    input: float = Field(ge=0)
    """Prompt tokens neither read from nor written to a prompt cache."""
    output: float = Field(ge=0)
    """Generated tokens, reasoning included."""
    cached_input: float | None = Field(default=None, ge=0)
    """Prompt tokens read from the prompt cache; None: ``input``."""
    cache_write: float | None = Field(default=None, ge=0)
    """Prompt tokens written to the prompt cache (Anthropic); None: ``input``."""


class RetentionConfig(_Model):
    """How long things are kept (``retention:``, or a profile's own); None keeps them forever.
    A sweeper on one replica at a time deletes what is older (docs/retention.md)."""

    sessions_days: float | None = Field(default=None, gt=0)
    """Sessions not updated for this long, with their transcripts and workspaces."""
    runs_days: float | None = Field(default=None, gt=0)
    """Records of runs that ended this long ago."""
    files_days: float | None = Field(default=None, gt=0)
    """Uploaded files (rows and bytes) this old."""
    approvals_days: float | None = Field(default=None, gt=0)
    """Approval requests created this long ago (answered or not)."""


class ServerConfig(_Model):
    """Settings of the HTTP server itself, shared by every profile."""

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    api_keys: list[ApiKey] = Field(default_factory=list)
    """Keys clients must send as ``Authorization: Bearer``; none means no authentication."""
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    max_concurrent_runs: int = Field(default=64, ge=1)
    """Agent runs in progress at once, over all keys."""
    max_concurrent_runs_per_key: int = Field(default=8, ge=1)
    stop_on_disconnect: bool = True
    """Interrupt a streaming run when its client disconnects."""
    data_dir: Path = Path("data")
    """Where the server keeps its files (the SQLite database by default). Relative paths are
    relative to the working directory."""
    database_url: SecretStr | None = None
    """SQLAlchemy URL of the database; a SQLite file in ``data_dir`` when omitted. A secret
    because it may embed a password."""
    shared_dir: Path | None = None
    """The volume the replicas of one deployment share (see docs/deployment.md): uploaded
    files (``files/``) and conversations' workspaces (``workspaces/``) live there, so that any
    replica serves any conversation. A replica (``redis_url`` set) refuses to start when it is
    not the volume the other replicas use. None: ``data_dir``."""
    workspaces_dir: Path | None = None
    """Where each conversation's working directory lives (the files its tools read and
    write); ``workspaces/`` in ``shared_dir`` (or ``data_dir``) when omitted."""
    workspace_key_mb: int = Field(default=4096, ge=1)
    """Megabytes all of one key's workspaces may hold together (each is also held to its
    profile's ``sandbox.workspace_mb``)."""
    public_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    """The address browsers reach this server at (e.g. ``https://hermes.example.com``), for
    the signed file links answers carry; None: each request's own base URL."""
    file_link_seconds: int = Field(default=7 * 24 * 3600, ge=1, le=365 * 24 * 3600)
    """How long a signed file link in an answer stays good."""

    head_timeout_seconds: float = Field(default=20.0, gt=0, le=600)
    """Seconds a client has to send a request's line and headers (slow clients are cut off)."""
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    """Bytes of request line and headers at most; a 431 beyond."""
    body_idle_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    """Seconds a request body may pause while it is read; the client is cut off beyond."""
    body_min_bytes_per_second: int = Field(default=1024, ge=0)
    """Average rate a request body must keep once it has been arriving for
    ``body_idle_timeout_seconds``; slower, the client is cut off (a body dripped a byte at a
    time never pauses long). 0: no minimum."""
    keep_alive_seconds: float = Field(default=5.0, gt=0, le=3600)
    """Seconds an idle kept-alive connection is kept open."""
    instance: str | None = Field(default=None, pattern=_NAME_PATTERN)
    """This server's name among the processes sharing the database: at start it closes the
    runs it left live. Default: an id kept in ``data_dir`` (made on the first start), so that
    a recreated container with the same data volume recovers its own runs."""

    drain_seconds: float = Field(default=30.0, ge=0, le=3600)
    """On SIGTERM: ``/ready`` turns 503, new runs are refused, and the runs in progress have
    this long to finish before they are interrupted (a second SIGTERM cuts it short). Keep it
    below the orchestrator's grace period (Kubernetes: 30 s by default)."""
    redis_url: SecretStr | None = None
    """Redis shared by the replicas of one deployment: stops reach the replica running the
    run, and a replica that died has its runs closed by another. None: one process alone."""
    lease_seconds: float = Field(default=10.0, ge=1.0, le=600.0)
    """How long a replica that stopped renewing its lease (it died) keeps its runs: after
    this another replica marks them interrupted."""

    migrate_on_start: bool | None = None
    """Apply schema migrations at start. Default: yes on SQLite; on PostgreSQL run
    ``hermes-server db upgrade`` deliberately (several replicas must not race to migrate)."""
    files: FilesConfig = Field(default_factory=FilesConfig)
    sandboxes: SandboxesConfig = Field(default_factory=SandboxesConfig)
    approval_timeout_seconds: float = Field(default=900.0, gt=0, le=7 * 86400)
    """How long a tool call's approval request stays answerable; unanswered by then, it is
    a denial the model is told about. Also the longest a run may wait in place for one."""
    session_busy: SessionBusyMode = "wait"
    """What a turn of a named session that is already running a turn does: ``wait`` for it
    (up to ``session_wait_seconds``), ``reject`` (409 ``session_busy``; ``refuse`` is the
    same), ``interrupt`` it and then run, ``enqueue`` after it, or ``steer`` its message into
    it (docs/webhooks.md, "Busy sessions and steering"). A profile's own ``session_busy``, and
    a request's (``X-Hermes-Session-Busy``, a run's ``session_busy``), override it."""
    session_wait_seconds: float = Field(default=30.0, ge=0, le=3600)
    """How long a waiting turn waits before it too is refused."""
    responses_max_count: int | None = Field(default=None, ge=0)
    """Stored responses kept at most (the oldest go first); None: no limit."""
    responses_max_age_days: float | None = Field(default=None, gt=0)
    """Stored responses older than this are forgotten; None: no limit."""

    @field_validator("database_url", "redis_url", mode="before")
    @classmethod
    def _empty_url_is_default(cls, value: Any) -> Any:
        # `database_url: ${DATABASE_URL:-}` must mean "the default", not an empty URL.
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, url: SecretStr | None) -> SecretStr | None:
        # Checked here, not when the database is first opened: a URL the server cannot use
        # would otherwise pass check-config and stop `serve` with a traceback.
        if url is not None:
            _check_url(url.get_secret_value(), DATABASE_SCHEMES, DATABASE_HINTS)
        return url

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, url: SecretStr | None) -> SecretStr | None:
        if url is not None:
            _check_url(url.get_secret_value(), REDIS_SCHEMES, {})
        return url

    @property
    def loopback_only(self) -> bool:
        """The server listens on a loopback address only (it may then run without keys)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def resolved_shared_dir(self) -> Path:
        """Where uploads and workspaces live unless each is placed on its own."""
        return self.shared_dir or self.data_dir

    @property
    def resolved_workspaces_dir(self) -> Path:
        return self.workspaces_dir or self.resolved_shared_dir / "workspaces"

    @property
    def resolved_files_dir(self) -> Path:
        return self.files.dir or self.resolved_shared_dir / "files"

    @property
    def resolved_database_url(self) -> str:
        if self.database_url is not None:
            return self.database_url.get_secret_value()
        return f"sqlite+aiosqlite:///{(self.data_dir / 'hermes.db').as_posix()}"

    @model_validator(mode="after")
    def _check_keys(self) -> Self:
        seen: set[str] = set()
        for index, entry in enumerate(self.api_keys):
            value = entry.key.get_secret_value()
            if value in seen:
                # Never echo the key: the message may reach a log.
                raise ValueError(f"api_keys[{index}]: the same key is listed twice")
            seen.add(value)
        if self.max_concurrent_runs_per_key > self.max_concurrent_runs:
            raise ValueError(
                "max_concurrent_runs_per_key: must not exceed max_concurrent_runs "
                f"({self.max_concurrent_runs_per_key} > {self.max_concurrent_runs})"
            )
        return self


class RetrySettings(_Model):
    """Retries of one provider before the chain falls back to the next one."""

    max_attempts: int = Field(default=3, ge=1, le=10)
    base_delay: float = Field(default=1.0, ge=0)
    max_delay: float = Field(default=30.0, ge=0)
    max_retry_after: float = Field(default=60.0, ge=0)
    """A Retry-After longer than this is not waited for: the chain fails over (on its last
    provider, it waits this long)."""
    first_byte_timeout: float | None = Field(default=120.0, gt=0)
    """Seconds a streamed call may take to start answering before the chain fails over;
    null: only the provider's ``timeout``. Raise it for models that think silently for long."""

    def to_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.max_attempts,
            base_delay=self.base_delay,
            max_delay=self.max_delay,
            max_retry_after=self.max_retry_after,
            first_byte_timeout=self.first_byte_timeout,
        )


class SandboxSettings(_Model):
    """How the ``shell`` and ``code`` tools of a profile run their commands."""

    network: bool | Literal["restricted"] = False
    """``false``: commands have no network. ``true``: any public host, ``restricted``: only
    ``allowed_hosts`` — both through the server's egress proxy, which holds them to the web
    tools' address guard (``web.allow``): never internal addresses nor this server's port."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """With ``network: restricted``: host names and ``*.domain`` patterns commands may reach,
    each with an optional ``:port`` (every port without one), e.g. ``pypi.org:443``."""
    timeout_seconds: float = Field(default=120.0, gt=0, le=3600)
    """Wall-clock time a command may take (the model may ask for less, never more)."""
    cpu_seconds: int = Field(default=120, ge=1, le=36_000)
    memory_mb: int = Field(default=2048, ge=64)
    """Address space per process."""
    max_processes: int = Field(default=128, ge=8, le=100_000)
    max_file_mb: int = Field(default=256, ge=1)
    """The largest file a command may write."""
    workspace_mb: int = Field(default=1024, ge=1)
    """Megabytes a conversation's workspace may hold; a command that takes it past this is
    killed, and commands and file writes are refused while it is over."""
    workspace_max_files: int = Field(default=100_000, ge=10)
    """Files (and directories) a conversation's workspace may hold."""
    max_output_kb: int = Field(default=200, ge=1, le=100_000)
    """Output of a command the model is shown; the rest is counted, not kept."""
    sandbox_memory_mb: int = Field(default=2048, ge=64)
    """Memory of one command's whole sandbox, every process and ``/tmp`` together (where the
    machine has cgroups; see ``docs/isolation.md``)."""
    cpus: float = Field(default=1.0, gt=0, le=1024)
    """CPU of one command's sandbox, in cores (cgroups only)."""
    tmp_mb: int = Field(default=256, ge=1)
    """Size of the sandbox's ``/tmp`` (memory: it counts towards ``sandbox_memory_mb``)."""
    python: str | None = Field(default=None, pattern=r"^/")
    """The Python environment directory commands run (a venv or a prefix with
    ``bin/python3``, mounted read-only; every file must be readable by all). None: the one
    ``make`` builds (``.sandbox-python``) or the image ships (``/opt/sandbox-python``)."""
    unsafe_no_sandbox: bool = False
    """Run commands WITHOUT bubblewrap (the limits still apply): they can then read and write
    whatever the server's user can. Only for a server that is itself a throwaway sandbox."""

    def limits(self) -> SandboxLimits:
        return SandboxLimits(
            timeout_seconds=self.timeout_seconds,
            cpu_seconds=self.cpu_seconds,
            memory_bytes=self.memory_mb * 1024 * 1024,
            max_processes=self.max_processes,
            max_file_bytes=self.max_file_mb * 1024 * 1024,
            max_output_bytes=self.max_output_kb * 1000,
            sandbox_memory_bytes=self.sandbox_memory_mb * 1024 * 1024,
            cpus=self.cpus,
            tmp_bytes=self.tmp_mb * 1024 * 1024,
        )

    @model_validator(mode="after")
    def _check_network(self) -> Self:
        for entry in self.allowed_hosts:
            try:
                parse_allow_entry(entry)
            except ValueError as error:
                raise ValueError(f"allowed_hosts: {error}") from None
        if self.allowed_hosts and self.network != "restricted":
            raise ValueError("allowed_hosts: only applies with network: restricted")
        if self.network == "restricted" and not self.allowed_hosts:
            raise ValueError("network: restricted needs allowed_hosts (the hosts it may reach)")
        return self

    def policy(self, addresses: AddressPolicy | None = None) -> SandboxPolicy:
        """The sandbox policy; ``addresses`` is the web tools' guard (``web.allow``), which
        holds commands' connections too."""
        egress = None
        if self.network is not False:
            egress = EgressPolicy(
                "restricted" if self.network == "restricted" else "open",
                tuple(self.allowed_hosts),
                addresses or AddressPolicy(),
            )
        return SandboxPolicy(
            network=self.network is not False,
            unsandboxed=self.unsafe_no_sandbox,
            egress=egress,
            python=Path(self.python) if self.python else None,
        )


class SearchConfig(_Model):
    """The search backend of the ``web_search`` tool."""

    backend: SearchBackendName
    """``searxng`` (self-hosted, JSON API), ``brave`` (Brave Search API) or ``tavily``."""
    url: str | None = None
    """The backend's base URL: required for SearXNG; the vendor's API when omitted."""
    api_key: SecretStr | None = None
    """Required for Brave and Tavily; sent as a bearer token to SearXNG when given."""
    timeout_seconds: float = Field(default=15.0, gt=0, le=300)

    @model_validator(mode="after")
    def _check_backend(self) -> Self:
        # Named with the variables too: the backend may have come from the environment.
        if self.url and not re.match(r"(?i)https?://[^/\s]", self.url):
            raise ValueError("url: must be an http:// or https:// URL")
        if self.backend == "searxng" and not self.url:
            raise ValueError(
                "the searxng backend needs a url, your instance's address (web.search.url, or "
                "HERMES_SEARCH_URL or SEARXNG_URL)"
            )
        if self.backend in ("brave", "tavily") and self.api_key is None:
            vendor = "BRAVE_SEARCH_API_KEY" if self.backend == "brave" else "TAVILY_API_KEY"
            raise ValueError(
                f"the {self.backend} backend needs an api_key (web.search.api_key, or "
                f"HERMES_SEARCH_API_KEY or {vendor})"
            )
        return self

    def settings(self) -> SearchSettings:
        return SearchSettings(
            backend=self.backend,
            url=self.url,
            api_key=self.api_key.get_secret_value() if self.api_key else None,
            timeout_seconds=self.timeout_seconds,
        )


class WebConfig(_Model):
    """What the ``web`` toolset (and any tool reaching the network) may do, server-wide."""

    allow: list[str] = Field(default_factory=list)
    """Hosts (``intranet.example``, ``*.corp.example``), addresses or CIDR ranges tools may
    reach although they are not public, each with an optional port (``localhost:8080``,
    ``[::1]:9000``, ``10.0.0.0/8:5432``); without one, every port. Everything internal (and
    this server's own port) is refused otherwise."""
    max_page_kb: int = Field(default=2048, ge=1, le=100 * 1024)
    """Kilobytes of a page downloaded at most."""
    timeout_seconds: float = Field(default=20.0, gt=0, le=600)
    """For one fetch, redirects included."""
    max_redirects: int = Field(default=5, ge=0, le=20)
    mcp_connect_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    """How long the MCP server a Responses request brings (an ``mcp`` tool) may take to
    connect and list its tools before the request is answered 424."""
    search: SearchConfig | None = None
    """No backend: ``web_search`` is not offered (``web_fetch`` still is)."""

    @field_validator("allow")
    @classmethod
    def _check_allow(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            parse_allow_entry(entry)  # its ValueError says what is wrong with the entry
        return entries

    def options(self, own_ports: Iterable[int] = ()) -> WebOptions:
        """The web tools' options; ``own_ports``: the ports this server listens on, refused
        to tools on every address of this machine unless allow-listed."""
        return WebOptions(
            policy=AddressPolicy.allowing(self.allow, own_ports=own_ports),
            limits=FetchLimits(
                max_bytes=self.max_page_kb * 1024,
                timeout_seconds=self.timeout_seconds,
                max_redirects=self.max_redirects,
            ),
            search=self.search.settings() if self.search is not None else None,
        )


class WebhookConfig(_Model):
    """An endpoint every event of the listed kinds is sent to (``webhooks:``), signed with
    its ``secret`` the Standard Webhooks way (docs/webhooks.md)."""

    url: str = Field(pattern=r"^https?://[^\s]+$")
    """Held to the same address policy as ``web_fetch`` (``web.allow``)."""
    secret: SecretStr
    """``whsec_`` then base64 of at least 16 bytes (what OpenAI's dashboard hands out)."""
    events: list[WebhookEventType] = Field(default_factory=lambda: sorted(EVENT_TYPES))
    """The event types sent here; default: all of them."""

    @field_validator("secret")
    @classmethod
    def _check_secret(cls, secret: SecretStr) -> SecretStr:
        secret_key(secret.get_secret_value())  # its ValueError says what is wrong
        return secret


class McpServerConfig(_Model):
    """One MCP server whose tools a profile's agent may call: a command to start (stdio) or
    a URL (streamable HTTP). ``${VAR}`` in the file keeps secrets out of it."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
    """Prefixes its tools: ``<name>__<tool>``."""
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, SecretStr] = Field(default_factory=dict)
    """Variables the command gets besides a minimal safe set (PATH, HOME, …)."""
    cwd: Path | None = None
    url: str | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    include: list[str] = Field(default_factory=list)
    """Only these of its tools (all when empty)."""
    exclude: list[str] = Field(default_factory=list)
    approval: ApprovalPolicy = "never"
    """``dangerous``: ask before tools the server does not mark read-only
    (``readOnlyHint``) or harmless (``destructiveHint: false``)."""
    timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    """Per call; beyond it the call is cancelled on the server."""
    connect_timeout_seconds: float = Field(default=15.0, gt=0, le=600)

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if bool(self.command) == bool(self.url):
            raise ValueError("give either command (stdio) or url (streamable HTTP), not both")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must be an http or https URL")
        if self.url is None and (self.headers):
            raise ValueError("headers apply to a url server only")
        return self

    def spec(self) -> McpServerSpec:
        return McpServerSpec(
            name=self.name,
            command=self.command,
            args=tuple(self.args),
            env={k: v.get_secret_value() for k, v in self.env.items()},
            cwd=str(self.cwd) if self.cwd is not None else None,
            url=self.url,
            headers={k: v.get_secret_value() for k, v in self.headers.items()},
            include=tuple(self.include),
            exclude=tuple(self.exclude),
            approval=self.approval,
            timeout_seconds=self.timeout_seconds,
            connect_timeout_seconds=self.connect_timeout_seconds,
        )


class SkillsSettings(_Model):
    """Where a profile's agent finds skills (Agent Skills: a folder with a ``SKILL.md``)
    besides those its API key uploaded (``/v1/skills``) or its agent wrote
    (``skill_manage``); see ``docs/skills.md``."""

    dirs: list[Path] = Field(default_factory=list)
    """Directories of skill folders (each subfolder holding a ``SKILL.md`` is one skill),
    offered to every key using this profile, read-only."""
    enabled: bool = True
    """False: the profile's runs offer no skills at all (no listing, no skill tools)."""


class LearningSettings(_Model):
    """What a profile's agent learns from its own runs."""

    extract_skills: bool = False
    """After a run with at least ``min_tool_calls`` tool calls, an auxiliary model call
    proposes a skill from it, kept as a draft until someone approves it."""
    min_tool_calls: int = Field(default=5, ge=1, le=1000)


class MemorySettings(_Model):
    """How a profile's agent remembers past sessions."""

    inject_episodes: int = Field(default=0, ge=0, le=10)
    """At the start of a turn, add the k snippets of the key's past sessions that best match
    the new message to the context (scoped as ``session_search`` is). 0: none."""


class ProfileConfig(_Model):
    """One agent offered to clients as a model in ``GET /v1/models``."""

    id: str = Field(pattern=_NAME_PATTERN)
    """The model id clients send (``"model": "hermes-agent"``)."""
    description: str = ""
    session_busy: SessionBusyMode | None = None
    """What a turn of a busy session of this profile does (``server.session_busy``'s modes);
    None: as the server says."""
    providers: list[str] = Field(min_length=1)
    """Provider names in order of preference: the fallback chain."""
    auxiliary_providers: list[str] = Field(default_factory=list)
    """Chain for side tasks such as summarising during context compression; the main chain
    when empty. A cheaper, faster model fits here."""
    vision_providers: list[str] = Field(default_factory=list)
    """Chain of models that see images, behind the ``vision_analyze`` tool: offered when a
    provider of the main chain cannot see images (``vision: false``)."""
    image_providers: list[str] = Field(default_factory=list)
    """Chain of OpenAI-wire providers whose images API (``POST {base_url}/images/generations``,
    each with its own ``model``, e.g. ``gpt-image-1``) makes images: the ``generate_image``
    tool (toolset ``images``, on when this is set) and the Responses ``image_generation``
    tool."""
    instructions: str = ""
    """The profile's own instructions, layered after the core agent instructions."""
    tools: list[str] = Field(default_factory=list)
    """Toolsets enabled besides the always-on agent-level ones (``files``, ``shell``,
    ``code``; see ``hermes_core/tools/toolsets.py``). Off unless named, so a dangerous tool
    is never on by default."""
    approvals: dict[str, ApprovalPolicy] = Field(default_factory=dict)
    """Toolset → when its calls wait for a human (``never``, ``dangerous``, ``always``);
    ``shell`` and ``code`` default to ``dangerous``, ``files`` to ``never``."""
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    """MCP servers whose tools this profile's agent may call."""
    max_iterations: int = Field(default=DEFAULT_MAX_ITERATIONS, ge=1, le=10_000)
    """Model calls per run, sub-agents included: the run's budget."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Output tokens per model call when the client names none."""
    retry: RetrySettings = Field(default_factory=RetrySettings)
    openwebui: bool = False
    """Shape streams for Open WebUI (progress it renders, no vendor extras it would store)."""
    cache_ttl: CacheTTL = "5m"
    """Lifetime of Anthropic prompt-cache breakpoints; "1h" costs more to write, less to keep."""
    planner: bool = False
    """Plan a complex task before its first action (shown to clients), and plan again when
    more than 30% of the tool calls since the last plan failed."""
    skills: SkillsSettings = Field(default_factory=SkillsSettings)
    learning: LearningSettings = Field(default_factory=LearningSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    max_cost_usd: float | None = Field(default=None, gt=0)
    """A run's cost (``prices``) at most: a run that reaches it ends with ``exit_reason:
    budget_exhausted`` before its next model call. None: no cap."""
    retention: RetentionConfig | None = None
    """This profile's sessions, runs and approvals are kept as this says (files belong to
    no profile: ``retention.files_days`` only); None: the top-level ``retention``."""

    @field_validator("retention")
    @classmethod
    def _check_retention(cls, retention: RetentionConfig | None) -> RetentionConfig | None:
        if retention is not None and retention.files_days is not None:
            raise ValueError(
                "files_days: uploaded files belong to no profile (set it in the top-level "
                "retention)"
            )
        return retention

    @field_validator("tools")
    @classmethod
    def _check_tools(cls, tools: list[str]) -> list[str]:
        for name in tools:
            if name not in TOOLSETS:
                known = ", ".join(TOOLSETS)
                raise ValueError(f"unknown toolset {name!r} (known: {known})")
        # Naming an always-on toolset is harmless; keep the list to what it adds.
        return list(dict.fromkeys(t for t in tools if t not in ALWAYS_ON_TOOLS))

    @field_validator("approvals")
    @classmethod
    def _check_approvals(cls, approvals: dict[str, ApprovalPolicy]) -> dict[str, ApprovalPolicy]:
        for name in approvals:
            if name not in TOOLSETS or not TOOLSETS[name].approvable:
                known = ", ".join(n for n, t in TOOLSETS.items() if t.approvable)
                raise ValueError(f"unknown toolset {name!r} (approvals apply to: {known})")
        return approvals

    @field_validator("mcp_servers")
    @classmethod
    def _unique_servers(cls, servers: list[McpServerConfig]) -> list[McpServerConfig]:
        names = [server.name for server in servers]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"two MCP servers are named {name!r}")
        return servers

    @property
    def enabled_tools(self) -> tuple[str, ...]:
        """The toolsets this profile asks for (some may be unavailable on a machine)."""
        return (*ALWAYS_ON_TOOLS, *self.tools)

    def toolset_options(
        self, web: WebOptions | None = None, *, workspace_key_mb: int = 4096
    ) -> ToolsetOptions:
        return ToolsetOptions(
            limits=self.sandbox.limits(),
            policy=self.sandbox.policy(web.policy if web is not None else None),
            quota=WorkspaceQuota(
                workspace_bytes=self.sandbox.workspace_mb * 1024 * 1024,
                key_bytes=workspace_key_mb * 1024 * 1024,
                max_files=self.sandbox.workspace_max_files,
            ),
            approvals=dict(self.approvals),
            web=web or WebOptions(),
        )

    @property
    def auxiliary_chain(self) -> list[str]:
        return self.auxiliary_providers or self.providers

    def agent_config(self) -> AgentConfig:
        """The agent settings of this profile (its provider chain is built separately)."""
        return AgentConfig(
            instructions=self.instructions,
            max_iterations=self.max_iterations,
            max_tokens=self.max_tokens,
            retry=self.retry.to_policy(),
            planner=self.planner,
            inject_episodes=self.memory.inject_episodes,
        )


class HermesConfig(_Model):
    """A whole, validated configuration: server settings, upstreams and agent profiles."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    providers: list[ProviderConfig] = Field(min_length=1)
    profiles: list[ProfileConfig] = Field(min_length=1)
    webhooks: list[WebhookConfig] = Field(default_factory=list)
    """Endpoints told of runs and background responses (docs/webhooks.md)."""
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """Model name (or a prefix of it, the longest matching wins) → list prices, over the
    built-in table of common models' (``hermes_core/pricing.py``); a model matching neither
    costs nothing."""
    retention: RetentionConfig = Field(default_factory=RetentionConfig)

    @model_validator(mode="after")
    def _webhooks_reachable(self) -> Self:
        """An internal webhook address is refused here, as ``web_fetch`` would refuse it
        (names are checked again, resolved, at each delivery)."""
        policy = AddressPolicy.allowing(self.web.allow, own_ports=[self.server.port])
        for index, hook in enumerate(self.webhooks):
            try:
                policy.check_url(hook.url)
            except OSError as refused:
                raise ValueError(f"webhooks[{index}].url: {refused}") from None
        return self

    @property
    def uses_simulator(self) -> bool:
        """True when the built-in simulator stands in for an upstream."""
        return any(p.name == SIMULATOR_PROVIDER for p in self.providers)

    @property
    def model_ids(self) -> list[str]:
        return [profile.id for profile in self.profiles]

    def provider(self, name: str) -> ProviderConfig:
        for provider in self.providers:
            if provider.name == name:
                return provider
        raise KeyError(name)

    def profile(self, model_id: str) -> ProfileConfig | None:
        return next((p for p in self.profiles if p.id == model_id), None)

    def chain(self, profile: ProfileConfig, *, auxiliary: bool = False) -> list[ProviderConfig]:
        """The provider configurations of ``profile``'s main (or auxiliary) fallback chain."""
        names = profile.auxiliary_chain if auxiliary else profile.providers
        return [self.provider(name) for name in names]

    def with_simulator_base_url(self, root_url: str) -> HermesConfig:
        """This configuration with the embedded simulator's address filled in (at start-up)."""
        providers = [
            p.model_copy(update={"base_url": root_url.rstrip("/") + "/v1"})
            if p.name == SIMULATOR_PROVIDER and p.base_url is None
            else p
            for p in self.providers
        ]
        return self.model_copy(update={"providers": providers})

    @model_validator(mode="after")
    def _check_references(self) -> Self:
        # Collected rather than raised one by one: a user fixing a file wants every problem.
        # One problem per line, each starting with the field it is about (see loader.py).
        problems: list[str] = []
        names: set[str] = set()
        for index, provider in enumerate(self.providers):
            if not provider.name.strip():
                problems.append(f"providers[{index}].name: must not be empty")
            elif provider.name in names:
                problems.append(f"providers[{index}].name: duplicate provider {provider.name!r}")
            names.add(provider.name)
            problems += _provider_problems(index, provider)
        defined = ", ".join(sorted(names)) or "none"
        ids: set[str] = set()
        for index, profile in enumerate(self.profiles):
            if profile.id in ids:
                problems.append(f"profiles[{index}].id: duplicate profile id {profile.id!r}")
            ids.add(profile.id)
            for field in (
                "providers",
                "auxiliary_providers",
                "vision_providers",
                "image_providers",
            ):
                for position, name in enumerate(getattr(profile, field)):
                    if name not in names:
                        problems.append(
                            f"profiles[{index}].{field}[{position}]: profile {profile.id!r} "
                            f"names unknown provider {name!r} (defined: {defined})"
                        )
                if len(set(getattr(profile, field))) != len(getattr(profile, field)):
                    problems.append(
                        f"profiles[{index}].{field}: a provider appears twice in the chain"
                    )
        problems += self._image_provider_problems()
        problems += self._key_problems(ids)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _image_provider_problems(self) -> list[str]:
        """Image providers that cannot serve the images API: only OpenAI-wire providers with
        an address have ``/images/generations`` (the simulator gets its address at start)."""
        problems = []
        by_name = {provider.name: provider for provider in self.providers}
        for index, profile in enumerate(self.profiles):
            for position, name in enumerate(profile.image_providers):
                provider = by_name.get(name)
                if provider is None:
                    continue  # reported as unknown
                where = f"profiles[{index}].image_providers[{position}]"
                try:
                    mode = provider.resolved_api_mode
                except ConfigurationError:
                    continue  # reported with the provider
                if mode not in ("chat_completions", "codex_responses"):
                    problems.append(
                        f"{where}: provider {name!r} speaks {mode}, which has no images API "
                        "(use an OpenAI-wire provider: api_mode chat_completions or "
                        "codex_responses)"
                    )
                elif provider.base_url is None and name != SIMULATOR_PROVIDER:
                    problems.append(
                        f"{where}: provider {name!r} needs a base_url (its images API is "
                        "{base_url}/images/generations)"
                    )
        return problems

    def _key_problems(self, ids: set[str]) -> list[str]:
        """Keys restricted to profiles that do not exist."""
        return [
            f"server.api_keys[{index}].profiles[{position}]: unknown profile {profile_id!r} "
            f"(defined: {', '.join(sorted(ids))})"
            for index, entry in enumerate(self.server.api_keys)
            for position, profile_id in enumerate(entry.profiles or ())
            if profile_id not in ids
        ]
