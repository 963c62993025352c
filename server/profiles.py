"""An agent profile as served: one model ``GET /v1/models`` lists, the provider chains and
tools behind it, and how it makes the agent of each run (``Profile.new_agent``) or of a side
task (``Profile.plain_agent``, through :class:`ToolCallsDropped`). Built from the configuration
by ``server/bootstrap.py``; held by :class:`server.services.Services`."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from hermes_core.agent import Agent, AgentConfig, ContextHooks
from hermes_core.memory_stores import InMemoryMemoryStore, InMemoryTodoStore
from hermes_core.messages import Message, text_of
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
from hermes_core.skills.library import SkillLibrary
from hermes_core.skills.shelf import DirectorySkills, SkillShelf
from hermes_core.stores import MemoryStore, SessionSearchStore, TodoStore
from hermes_core.tools.agent_tools import ALWAYS_ON_TOOLS
from hermes_core.tools.egress import EgressPolicy
from hermes_core.tools.quota import WorkspaceQuota
from hermes_core.tools.registry import Tool, ToolRegistry
from hermes_core.tools.toolsets import WORKSPACE_TOOLSETS
from server.runs.mcp_waiting import McpWaitingAgent
from server.sessions.service import BusyMode

if TYPE_CHECKING:
    from hermes_core.providers.images_api import ImageChain
    from hermes_core.tools.mcp.toolset import McpToolset


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
