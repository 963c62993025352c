"""What the HTTP layer serves: agent profiles, the run manager, keys and limits — built once
by ``create_app`` and shared by every route through ``app.state.services``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from hermes_core.agent import Agent, AgentConfig, ContextHooks
from hermes_core.events import AgentEvent, InterruptSource, RunFinished
from hermes_core.memory_stores import InMemoryMemoryStore, InMemoryTodoStore
from hermes_core.messages import Message, text_of
from hermes_core.persistence import Store
from hermes_core.persistence.runs import LIVE_STATUSES
from hermes_core.providers.base import (
    ApiMode,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    Provider,
    ProviderEvent,
    ToolCallDelta,
)
from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.retry import PROCESS_COOLDOWNS
from hermes_core.skills.library import SkillLibrary
from hermes_core.skills.shelf import DirectorySkills, SkillShelf
from hermes_core.stores import MemoryStore, SessionSearchStore, TodoStore
from hermes_core.tools.agent_tools import ALWAYS_ON_TOOLS
from hermes_core.tools.egress import EgressPolicy, close_egress_proxies
from hermes_core.tools.quota import WorkspaceQuota
from hermes_core.tools.registry import Tool, ToolRegistry
from hermes_core.tools.toolsets import WORKSPACE_TOOLSETS
from hermes_core.tools.web.guard import AddressPolicy
from server.budgets.admission import Budgets
from server.errors import RedisUnavailable, RunLimitExceeded
from server.files.links import FileLinks
from server.files.uploads import FileLimits, FileVault
from server.files.workspace_changes import WorkspaceWatch
from server.files.workspaces import conversation_workspace
from server.http.auth import KeyRing
from server.http.idempotency import Idempotency
from server.metrics import Metrics
from server.protocol.remote_mcp import CONNECT_SECONDS
from server.retention.policy import RetentionPolicy
from server.retention.sweeper import Sweeper
from server.runs.approvals import ApprovalDesk, close_questions_of
from server.runs.manager import Run, RunInfo, RunManager, RunStatus, end_user_limit_message
from server.runs.mcp_waiting import McpWaitingAgent
from server.runs.observers import observes
from server.sessions.service import BusyMode, SessionService, SessionSettings
from server.skills.extraction import Learner, SkillExtractor
from server.skills.library import StoredSkills
from server.usage.ledger import UsageLedger
from server.webhooks.service import Webhooks

if TYPE_CHECKING:
    from hermes_core.providers.images_api import ImageChain
    from hermes_core.tools.mcp.toolset import McpToolset
    from server.replicas.cluster import Cluster

log = logging.getLogger("hermes.services")


@dataclass(slots=True, kw_only=True)
class Profile:
    """One agent model offered to clients (listed by ``GET /v1/models``)."""

    id: str
    provider: Provider
    """Usually a FallbackChain; any Provider works."""
    auxiliary: Provider | None = None
    """The chain for side work such as summarising (context compression, ``/compact``);
    None uses ``provider``."""
    vision: Provider | None = None
    """The chain ``vision_analyze`` looks at images with (None: the profile has none). The
    tool only calls it; the profile holds it so that its clients are closed with the
    others' (see :attr:`chains`)."""
    config: AgentConfig = field(default_factory=AgentConfig)
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    context: ContextHooks = field(default_factory=ContextHooks)
    openwebui: bool = False
    """Always use Open WebUI's extras, even without X-OpenWebUI-* headers."""
    description: str = ""
    session_busy: BusyMode | None = None
    """What a turn of its busy session does (None: ``server.session_busy``)."""
    toolsets: list[str] = field(default_factory=lambda: list(ALWAYS_ON_TOOLS))
    """The toolsets this profile's runs have (``GET /v1/models/{id}`` shows them)."""
    unavailable_toolsets: dict[str, str] = field(default_factory=dict)
    """Toolsets the configuration asked for that cannot work here, and why."""
    mcp: McpToolset | None = None
    """The profile's MCP servers, whose tools join ``tools`` when a run starts."""
    workspace_quota: WorkspaceQuota = field(default_factory=WorkspaceQuota)
    """What its workspaces may hold: files a request's messages place there are held to it,
    as the tools' writes are."""
    egress: EgressPolicy | None = None
    """The policy its sandboxed commands reach the network under, through the process's
    egress proxy for it (None: they have no network); a reload closes the proxies no live
    profile's policy names any more."""
    skills: DirectorySkills | None = None
    """Its directory skills (``skills.dirs``), read when it was built; None: the profile
    offers no skills at all (``skills.enabled: false``), not even a key's own."""
    skills_approval: bool = True
    """``skill_manage`` waits for a person's approval (``approvals.skills``, default always)."""
    skills_mounted: bool = True
    """Its commands see skills at ``/skills/<name>`` (False: unsandboxed, at host paths)."""
    images: ImageChain | None = None
    """The image models behind its ``generate_image`` tool (``image_providers``)."""
    learn_after: int | None = None
    """Tool calls after which a completed run is read for a draft skill
    (``learning.extract_skills``; ``server/skills/extraction.py``); None: it is not."""
    provider_models: dict[str, str] = field(init=False)
    """Configured name → model of every provider this profile's runs may call."""
    asks_approval: bool = field(init=False)
    """Some of its tools may wait for a person's approval (read per request: kept, not
    recomputed)."""
    uses_workspace: bool = field(init=False)
    """Its runs have tools that act on a conversation's files."""
    _run_tools: tuple[int, ToolRegistry] = field(init=False)
    """The registry runs get, with the MCP tools version it was built for."""
    side_task_provider: Provider = field(init=False)
    """The summariser chain without retries: a side task (a chat title) is not worth
    retrying against a failing upstream; the next provider, or nothing, will do. Its members
    are offered no tools and drop any tool call a model makes anyway (:class:`ToolCallsDropped`)."""

    @property
    def summariser(self) -> Provider:
        return self.auxiliary if self.auxiliary is not None else self.provider

    @property
    def chains(self) -> tuple[Provider, ...]:
        """Every provider chain whose HTTP clients this profile holds: what closing it (at
        shutdown, or once a reload replaced it and its runs ended) must close."""
        return tuple(
            chain for chain in (self.provider, self.auxiliary, self.vision) if chain is not None
        )

    @property
    def clients(self) -> tuple[Provider | ImageChain, ...]:
        """Everything holding upstream HTTP clients, its image models' chain included: what
        closing this profile closes."""
        return self.chains if self.images is None else (*self.chains, self.images)

    @property
    def chain_names(self) -> list[str]:
        """The provider names of the main fallback chain, in order."""
        chain = self.provider
        return [p.name for p in (chain.providers if isinstance(chain, FallbackChain) else [chain])]

    def __post_init__(self) -> None:
        chains = [self.provider] if self.auxiliary is None else [self.provider, self.auxiliary]
        self.provider_models = {
            member.name: member.model
            for chain in chains
            for member in (chain.providers if isinstance(chain, FallbackChain) else [chain])
        }
        self.asks_approval = any(tool.needs_approval is not None for tool in self.tools.tools())
        if self.mcp is not None:
            self.asks_approval |= any(
                c.spec.approval != "never" for c in self.mcp.connections.values()
            )
        # skill_manage is agent-level, not in the registry: its approval counts here.
        self.asks_approval |= self.skills is not None and self.skills_approval
        self._run_tools = (-1, self.tools)
        summariser = self.summariser
        self.side_task_provider = (
            FallbackChain(
                [ToolCallsDropped(member) for member in summariser.providers],
                retry=dataclasses.replace(summariser.retry, max_attempts=1),
                cooldowns=summariser.cooldowns,
                sleep=summariser.sleep,
            )
            if isinstance(summariser, FallbackChain)
            else ToolCallsDropped(summariser)
        )
        self.uses_workspace = bool(WORKSPACE_TOOLSETS & set(self.toolsets))

    def run_tools(self) -> ToolRegistry:
        """The tools a run starting now gets: the profile's, and its MCP servers' as listed
        now (rebuilt only when an MCP server's tools changed)."""
        if self.mcp is None:
            return self.tools
        version, registry = self._run_tools
        if version != self.mcp.version:
            registry = ToolRegistry([*self.tools.tools(), *self.mcp.tools()])
            registry.pre_hooks = list(self.tools.pre_hooks)
            registry.post_hooks = list(self.tools.post_hooks)
            self._run_tools = (self.mcp.version, registry)
        return registry

    def shelf(
        self, library: SkillLibrary | None, owner: str, key: str | None = None
    ) -> SkillShelf | None:
        """The skills this profile's agents acting for ``owner`` are offered (None: off):
        ``owner``'s own (where the agent writes), then ``key``'s (the API key's, when
        ``owner`` is an end user behind it), then the profile's."""
        if self.skills is None:
            return None
        return SkillShelf(
            directory=self.skills.skills,
            library=library,
            owner=owner,
            key_owner=key,
            manage_approval=self.skills_approval,
            mounted=self.skills_mounted,
        )

    def plain_agent(self, *, owner: str) -> Agent:
        """An agent for one plain model call on the client's own messages: no instructions,
        no memory, no tools, one iteration (Open WebUI's title, tag and follow-up tasks). It
        uses the auxiliary chain, the one meant for cheap side work, whose replies never hold
        a tool call: the loop runs the calls of any reply, offered tools or not, and its
        agent-level tools (memory, todo, delegate_task) are always there."""
        config = AgentConfig(
            core_instructions="", max_iterations=1, max_tokens=self.config.max_tokens
        )
        return Agent(self.side_task_provider, config=config, owner=owner, system_prompt="")

    def new_agent(
        self,
        *,
        owner: str,
        stores: Stores,
        memory_owner: str | None = None,
        checkpoint: Callable[[], Awaitable[None]] | None = None,
        extra_tools: Sequence[Tool] = (),
        skill_library: SkillLibrary | None = None,
        skills_owner: str | None = None,
    ) -> Agent:
        """``extra_tools``: the request's own (its MCP servers'), beside the profile's. While
        one of the profile's MCP servers is still connecting for the first time, the agent's
        run waits for it and then takes the tools listed by then. ``skill_library``: the
        keys' own skills, of which the agent writes ``owner``'s (the key's, or its end
        user's) and sees those and ``skills_owner``'s (the API key's principal)."""

        def tools_now() -> ToolRegistry:
            tools = self.run_tools()
            if extra_tools:
                tools = ToolRegistry([*tools.tools(), *extra_tools])
                tools.pre_hooks, tools.post_hooks = self.tools.pre_hooks, self.tools.post_hooks
            return tools

        connecting = self.mcp if self.mcp is not None and self.mcp.connecting else None
        agent = (Agent if connecting is None else McpWaitingAgent)(
            self.provider,
            tools=tools_now(),
            config=self.config,
            owner=owner,
            memory_owner=memory_owner,
            context=self.context,
            memory_store=stores.memory,
            todo_store=stores.todos,
            session_search=stores.sessions,
            checkpoint=checkpoint,
            skills=self.shelf(skill_library, owner, skills_owner),
        )
        if isinstance(agent, McpWaitingAgent) and connecting is not None:
            agent.waits_for(connecting, tools_now)
        return agent


SIDE_TASK_NO_ANSWER = "{}"
"""A side task's answer when its model replied with tool calls alone: Open WebUI reads every
side task's answer as JSON, and on an empty object keeps its defaults (no title, no tags)."""


class ToolCallsDropped:
    """A provider for side tasks: the call is offered no tools, and a reply's tool calls are
    dropped (their deltas too), so no tool runs, whatever the model says. A reply that held
    nothing else becomes :data:`SIDE_TASK_NO_ANSWER`."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    @property
    def name(self) -> str:
        return self.provider.name

    @property
    def api_mode(self) -> ApiMode:
        return self.provider.api_mode

    @property
    def model(self) -> str:
        return self.provider.model

    @property
    def context_window(self) -> int:
        return self.provider.context_window

    async def refresh_credentials(self) -> bool:
        return await self.provider.refresh_credentials()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        bare = dataclasses.replace(request, tools=(), tool_choice="auto", parallel_tool_calls=None)
        events = self.provider.stream(bare)
        try:
            async for event in events:
                if isinstance(event, ToolCallDelta):
                    continue
                if isinstance(event, ModelResponse) and event.message.get("tool_calls"):
                    message = cast(
                        Message,
                        {key: value for key, value in event.message.items() if key != "tool_calls"},
                    )
                    if not text_of(message.get("content")).strip():
                        message["content"] = SIDE_TASK_NO_ANSWER
                        yield ModelTextDelta(text=SIDE_TASK_NO_ANSWER)
                    event = dataclasses.replace(event, message=message, finish_reason="stop")
                yield event
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()

    async def aclose(self) -> None:
        """Nothing of its own: the provider it wraps is closed with its profile's chains."""


@dataclass(slots=True, kw_only=True)
class Stores:
    """State the agents of every request share, per owner: in memory by default (it survives
    requests, not restarts), the SQL store's once :meth:`Services.open` connected it."""

    memory: MemoryStore = field(default_factory=InMemoryMemoryStore)
    todos: TodoStore = field(default_factory=InMemoryTodoStore)
    sessions: SessionSearchStore | None = None
    """None until the SQL store is open: without a store there is no past to search."""


class Background(Protocol):
    """Work a replica does on its own once open (firing schedules), stopped at close."""

    async def close(self) -> None: ...


@dataclass(slots=True, kw_only=True)
class Services:
    profiles: Sequence[Profile]
    keyring: KeyRing = field(default_factory=KeyRing)
    runs: RunManager = field(default_factory=RunManager)
    stores: Stores = field(default_factory=Stores)
    metrics: Metrics = field(default_factory=Metrics)
    """Prometheus metrics; ``create_app`` registers their observer with ``runs``."""
    stop_on_disconnect: bool = True
    keepalive_seconds: float = 15.0
    startup_hooks: list[Callable[[], None]] = field(default_factory=list)
    """Called once the services are open, on the event loop (e.g. the config reloader)."""
    drain_seconds: float = 30.0
    """On SIGTERM, how long runs in progress may go on before the shutdown cuts them."""
    address_policy: AddressPolicy = field(default_factory=AddressPolicy)
    remote_mcp_connect_seconds: float = CONNECT_SECONDS
    """How long a Responses request's own ``mcp`` server may take to answer
    (``web.mcp_connect_timeout_seconds``) before the request is a 424."""
    """Where tools that reach the network may go (``web.allow``): a client's MCP server URL
    is held to it too."""
    """Quiet time after which a stream gets a ``: keep-alive`` comment (tools running)."""
    max_body_bytes: int = 4 * 1024 * 1024
    max_crons_per_key: int = 100
    """Schedules one key may keep (``limits.crons_per_key``)."""
    database_url: str | None = None
    """Where durable state lives; None keeps everything in memory (library use, some tests)."""
    workspaces_dir: Path | None = None
    """Where conversations' working directories live; None: runs have no workspace (file,
    shell and code tools then refuse to act)."""
    files_dir: Path | None = None
    """Where uploaded files' bytes live; None: no Files API (nor without a database)."""
    file_links: FileLinks = field(default_factory=FileLinks)
    """How answers link to workspace files (signed links, ``server.public_url``)."""
    file_limits: FileLimits = field(
        default_factory=lambda: FileLimits(
            max_file_bytes=100 * 1024 * 1024, quota_bytes=1024 * 1024 * 1024, max_files=1000
        )
    )
    instance: str | None = None
    """This server's name among the processes sharing the database
    (see server/replicas/instance.py); None: the host name."""
    migrate_on_start: bool | None = None
    """Apply schema migrations at start; None: only on SQLite (PostgreSQL schemas are
    upgraded deliberately, with ``hermes-server db upgrade``)."""
    session_settings: SessionSettings = field(default_factory=SessionSettings)
    approvals: ApprovalDesk = field(default_factory=ApprovalDesk)
    responses_max_count: int | None = None
    responses_max_age_seconds: float | None = None
    """Stored responses are pruned beyond these (at start, then every ``PRUNE_SECONDS``)."""
    cluster: Cluster | None = None
    """The other replicas (``server.redis_url``): cross-replica stops and dead-replica
    recovery. None: this process is alone."""
    store: Store | None = None
    idempotency: Idempotency = field(default_factory=Idempotency)
    """``Idempotency-Key`` requests, answered once (kept in ``store`` once it is open)."""
    files: FileVault | None = None
    """Uploaded files; set by :meth:`open` when there is a database and a ``files_dir``."""
    skills: SkillLibrary | None = None
    extractor: SkillExtractor | None = None
    """Reads the runs of learning profiles for draft skills (see :meth:`watch_learning`)."""
    """The keys' own skills (``/v1/skills``, the agent's); set by :meth:`open` when there is
    a database."""
    sessions: SessionService | None = None
    ledger: UsageLedger | None = None
    """The usage ledger; set by :meth:`open` when there is a database (``server/usage/``)."""
    budgets: Budgets = field(default_factory=Budgets)
    """Keys' and end users' budgets, held as each run starts (``server/budgets/``)."""
    webhooks: Webhooks = field(default_factory=Webhooks)
    """Where events of runs and background responses are sent (delivering once open)."""
    schedules: Callable[[Services, Store], Background | None] = lambda _services, _store: None
    """Starts firing the schedules (``/v1/crons``) once the store is open; set by
    ``create_app``, since the scheduler starts runs as the routes do (above this module)."""
    scheduler: Background | None = None
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    """How long sessions, runs, files and approvals are kept (reloadable)."""
    sweeper: Sweeper | None = None
    """Deletes what is past ``retention`` (one replica at a time); set by :meth:`open`."""
    _pruning: asyncio.Task[None] | None = None
    _releasing: set[asyncio.Task[None]] = field(default_factory=set)
    """Named conversations and transcripts; set by :meth:`open` when there is a database."""

    async def open(self) -> None:
        """Start connecting MCP servers; connect the database, switch the agents' stores to
        it, and close what a previous life of this instance left open (runs marked
        ``interrupted``)."""
        for profile in self.profiles:
            if profile.mcp is not None:
                profile.mcp.start()
        # The file-link secret is made on the first start, not by the first answer's link.
        await asyncio.to_thread(self.file_links.signer)
        if self.database_url is None or self.store is not None:
            return
        db_url = self.database_url
        migrate = self.migrate_on_start
        if migrate is None:
            migrate = db_url.startswith("sqlite")
        store = await Store.open(
            db_url,
            migrate=migrate,
            instance=self.instance,
            responses_max_count=self.responses_max_count,
            responses_max_age_seconds=self.responses_max_age_seconds,
        )
        self.store = store
        self.idempotency.store = store.idempotency
        self.idempotency.runs = store.runs
        self.stores = Stores(memory=store.memory, todos=store.todos, sessions=store.search)
        self.sessions = SessionService(store, self.session_settings)
        self.runs.observers.append(self.sessions.journal)
        self.ledger = UsageLedger(store.usage)
        self.runs.observers.append(self.ledger.observe)
        self.budgets.store = store.usage  # budgets read what the ledger recorded
        self.runs.settle = store.db.writer.flush
        if self.files_dir is not None:
            self.files = FileVault(self.files_dir, store, self.file_limits)
        data_dir = self.file_links.settings.data_dir
        skills_cache = data_dir / "skills-cache" if data_dir is not None else None
        self.skills = StoredSkills(store.skills, skills_cache)
        self.watch_learning()
        self.webhooks.open(store, instance=store.runs.instance, policy=lambda: self.address_policy)
        self.runs.observers.append(self.webhooks.observe)
        await self._join_replicas()
        recovered = await self.sessions.recover()
        if recovered:
            log.warning("marked %d run(s) of a previous start interrupted", len(recovered))
            await close_questions_of(store, recovered)
            await self.webhooks.recovered(recovered)
        if self.cluster is not None:
            sessions = self.sessions
            webhooks = self.webhooks
            cluster = self.cluster

            async def recover(instance: str) -> int:
                runs = await sessions.recover(instance)
                await close_questions_of(store, runs)
                await webhooks.recovered(runs)
                for run in runs:
                    # Streams resumed elsewhere must end too, and the key's limit let go.
                    await cluster.close_log(run.id, "The replica running this run stopped.")
                    await cluster.release(run.owner, run.id, run.end_user)
                return len(runs)

            await self.cluster.start(
                on_stop=self._stop_requested,
                recover=recover,
                live_instances=self.sessions.live_instances,
                live_runs=self.runs.live_run_keys,
                cooldowns=PROCESS_COOLDOWNS,
                lapsed=self.runs.lost_lease,
                on_steer=self._steer_requested,
                on_forget=self.runs.forget,
            )
            for run in recovered:  # this replica's previous life, as another would recover it
                await cluster.close_log(run.id, "The replica running this run stopped.")
                await cluster.release(run.owner, run.id, run.end_user)
            self.runs.observers.append(self._release_reservation)
            self.runs.observers.append(lambda _info, event: cluster.record(event))
        responses = (
            self.responses_max_count is not None or self.responses_max_age_seconds is not None
        )
        if responses:
            await store.responses.prune()
        self._pruning = asyncio.create_task(
            _prune_forever(store, responses=responses), name="hermes-prune"
        )
        self.scheduler = self.schedules(self, store)
        self.sweeper = Sweeper(
            store,
            lambda: self.retention,
            instance=store.runs.instance,
            workspaces_dir=self.workspaces_dir,
            file_path=self.files.path if self.files is not None else None,
            skills_cache=skills_cache,
        )
        self.sweeper.start()

    async def _join_replicas(self) -> None:
        """With replicas, take this replica's lease before recovering its previous life's runs
        (a live replica of the same name keeps its runs: ``InstanceTaken``), and have webhooks
        watch the lease: only once it was lost can a run of this replica's have been taken
        over."""
        if self.cluster is not None:
            await self.cluster.claim()
            self.webhooks.lease_losses = self.cluster.lease_losses

    def workspace(self, owner: str, conversation: str) -> Path | None:
        """The working directory of ``owner``'s conversation ``conversation`` (a session
        name), or None when this server keeps no workspaces."""
        if self.workspaces_dir is None:
            return None
        return conversation_workspace(self.workspaces_dir, owner, conversation)

    def profile(self, model: str) -> Profile | None:
        return next((p for p in self.profiles if p.id == model), None)

    def watch_learning(self) -> None:
        """Read runs for draft skills once a profile learns (called at open, and after a
        reload, which may have turned learning on): only then does every run's event pass
        the extractor too."""
        if self.skills is None or self.extractor is not None:
            return
        if not any(p.learn_after is not None and p.skills is not None for p in self.profiles):
            return
        metrics = self.metrics
        self.extractor = SkillExtractor(
            self.skills,
            self._learner,
            on_draft=lambda profile, _entry: metrics.skills_created.labels(
                profile, "extracted"
            ).inc(),
        )
        self.runs.observers.append(self.extractor.observe)

    def _learner(self, model: str) -> Learner | None:
        profile = self.profile(model)
        if profile is None or profile.learn_after is None or profile.skills is None:
            return None
        return Learner(provider=profile.side_task_provider, min_tool_calls=profile.learn_after)

    async def reserve_run(
        self, owner: str, run_id: str, alias: str = "", end_user: str | None = None
    ) -> None:
        """Count a run about to start against ``owner``'s limit on every replica, and its
        ``end_user``'s (``limits.runs_per_user``) when it names one (this replica's own count
        is checked by ``RunManager.admit``); 429 beyond either, 503 while Redis is out of
        reach. ``alias``: its completion's id, by which a stop finds it too."""
        if self.cluster is None:
            return
        limit = self.runs.max_runs_per_owner
        refused: str | None
        with redis_needed():
            if end_user is None:
                reserved = await self.cluster.reserve(owner, run_id, limit, alias)
                refused = None if reserved else "key"
            else:
                user_limit = self.runs.max_runs_per_user
                refused = await self.cluster.reserve_for_user(
                    owner, end_user, run_id, limit=limit, user_limit=user_limit, alias=alias
                )
                if refused == "user":
                    raise RunLimitExceeded(end_user_limit_message(user_limit), retry_after=5)
        if refused is not None:
            raise RunLimitExceeded(
                f"This API key already has {limit} runs in progress.", retry_after=5
            )

    async def release_run(self, owner: str, run_id: str, end_user: str | None = None) -> None:
        """Let go of the reservation :meth:`reserve_run` made for a run that did not start
        after all (refused by this replica: draining, or at its own limit). Kept, it would
        count against ``owner``'s limit on every replica until it lapsed, a lease later."""
        if self.cluster is not None:
            await self.cluster.release(owner, run_id, end_user)

    @observes(RunFinished)
    def _release_reservation(self, info: RunInfo, event: AgentEvent) -> None:
        if isinstance(event, RunFinished) and self.cluster is not None:
            task = asyncio.create_task(self.cluster.release(info.owner, info.id, info.end_user))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)

    def _stop_requested(self, run_id: str, owner: str, source: str) -> None:
        """Another replica was asked to stop a run: stop it if it is one of ours."""
        run = self.runs.get(run_id, owner=owner)
        if run is None or run.status.finished:
            return
        try:
            reason = InterruptSource(source)
        except ValueError:
            reason = InterruptSource.STOP_API
        self.runs.stop(run, reason)

    async def stop_anywhere(self, run_id: str, owner: str, source: InterruptSource) -> str | None:
        """Stop ``owner``'s live run (by run or completion id) on whichever replica runs it;
        its run id, or None when no replica runs it (it ended, or never was)."""
        run = self.runs.get(run_id, owner=owner)
        if run is not None:
            if run.status.finished:
                return None
            self.runs.stop(run, source)
            return run.id
        if self.cluster is None or self.store is None:
            return None
        record = await self.store.runs.get(owner, run_id)
        with redis_needed():
            if record is None:
                # Its row may not be written yet (in its first milliseconds): its reservation is.
                found = await self.cluster.reserved_run(owner, run_id)
                if found is not None:
                    await self.cluster.request_stop(found, owner, source.value)
                return found
            if record.status not in LIVE_STATUSES:
                return None
            await self.cluster.request_stop(record.id, owner, source.value)
            return record.id

    async def forget_runs(self, run_ids: list[str]) -> None:
        """Erased runs: this replica drops their events, and with replicas every other one
        does too (their Redis logs go)."""
        if not run_ids:
            return
        self.runs.forget(run_ids)
        if self.cluster is not None:
            await self.cluster.forget_runs(run_ids)

    def _steer_requested(self, run_id: str, owner: str, text: str) -> bool | None:
        """Another replica was asked to steer a run: steer it if it is one of ours."""
        run = self.runs.get(run_id, owner=owner)
        if run is None:
            return None
        return steer_run(run, text)

    async def steer_anywhere(self, run_id: str, owner: str, text: str) -> bool | None:
        """Give ``owner``'s live run ``run_id`` the message ``text`` before its next model call,
        on whichever replica runs it: whether the run took it (False: it has made its last
        model call), or None when no replica runs it."""
        run = self.runs.get(run_id, owner=owner)
        if run is not None:
            return steer_run(run, text)
        if self.cluster is None or self.store is None:
            return None
        record = await self.store.runs.get(owner, run_id)
        with redis_needed():
            if record is None:
                found = await self.cluster.reserved_run(owner, run_id)  # in its first moments
                if found is None:
                    return None
                run_id = found
            elif record.status not in LIVE_STATUSES:
                return None
            else:
                run_id = record.id
            return await self.cluster.request_steer(run_id, owner, text)

    async def close(self) -> None:
        """Release upstream connections (profiles may share providers) and the database."""
        await close_egress_proxies()  # sandboxes' network: started by their first command
        if self.cluster is not None:
            await self.cluster.close()
        if self.extractor is not None:
            await self.extractor.close()
        if self.scheduler is not None:
            await self.scheduler.close()
        if self.sweeper is not None:
            await self.sweeper.close()
        await self.budgets.close()  # its reads of the ledger, before the store closes
        await self.webhooks.close()
        if self._pruning is not None:
            self._pruning.cancel()
            await asyncio.gather(self._pruning, return_exceptions=True)
        if self.store is not None:
            await self.store.close()
        for profile in self.profiles:
            if profile.mcp is not None:
                await profile.mcp.stop()
        closed: set[int] = set()
        for profile in self.profiles:
            for client in profile.clients:
                if id(client) not in closed:
                    closed.add(id(client))
                    await client.aclose()


PRUNE_SECONDS = 600.0


@contextlib.contextmanager
def redis_needed() -> Iterator[None]:
    """Redis out of reach inside (refused, cut, timed out; this replica's link to it closed)
    is a :class:`RedisUnavailable`, a 503 to retry soon: the client's request was fine, and
    Redis is normally back within seconds. Any other error goes on as it was."""
    try:
        yield
    except Exception as error:
        if _unreachable(error):
            raise RedisUnavailable() from error
        raise


def _unreachable(error: BaseException) -> bool:
    if isinstance(error, OSError | TimeoutError):  # ConnectionError is an OSError
        return True
    # redis-py's own ConnectionError and TimeoutError are not the built-in ones. Looked up,
    # not imported: only replicas load redis, and only they get here.
    exceptions = sys.modules.get("redis.exceptions")
    return exceptions is not None and isinstance(
        error, exceptions.ConnectionError | exceptions.TimeoutError
    )


def steer_run(run: Run, text: str) -> bool | None:
    """Steer one of this replica's runs (``Agent.steer``): whether it took ``text``; None when
    it is not an agent's run going on (ended, or a job that takes no messages)."""
    agent = run.agent
    while isinstance(agent, WorkspaceWatch):
        agent = agent.inner
    if run.status.finished or run.status is RunStatus.STOPPING or not isinstance(agent, Agent):
        return None
    return agent.steer(text)


async def _prune_forever(store: Store, *, responses: bool) -> None:
    """Keep stored responses within their retention limits (when they have any), and forget
    idempotency keys past their 24 hours."""
    while True:
        await asyncio.sleep(PRUNE_SECONDS)
        if responses:
            try:
                removed = await store.responses.prune()
            except Exception:  # a failed prune must not stop the next one
                log.exception("pruning stored responses failed")
            else:
                if removed:
                    log.info("pruned %d stored response(s)", removed)
        try:
            await store.idempotency.prune(time.time())
        except Exception:
            log.exception("pruning idempotency keys failed")
