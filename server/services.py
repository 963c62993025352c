"""What the HTTP layer serves: agent profiles, the run manager, keys and limits — built once
by ``create_app`` and shared by every route through ``app.state.services``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hermes_core.agent import Agent, AgentConfig, ContextHooks
from hermes_core.memory_stores import InMemoryMemoryStore, InMemorySessionIndex, InMemoryTodoStore
from hermes_core.providers.base import Provider
from hermes_core.stores import MemoryStore, SessionSearchStore, TodoStore
from hermes_core.tools.registry import ToolRegistry
from server.auth import KeyRing
from server.metrics import Metrics
from server.runs.manager import RunManager


@dataclass(slots=True, kw_only=True)
class Profile:
    """One agent model offered to clients (listed by ``GET /v1/models``)."""

    id: str
    provider: Provider
    """Usually a FallbackChain; any Provider works."""
    config: AgentConfig = field(default_factory=AgentConfig)
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    context: ContextHooks = field(default_factory=ContextHooks)
    openwebui: bool = False
    """Always use Open WebUI's extras, even without X-OpenWebUI-* headers."""
    description: str = ""

    def new_agent(self, *, owner: str, stores: Stores) -> Agent:
        return Agent(
            self.provider,
            tools=self.tools,
            config=self.config,
            owner=owner,
            context=self.context,
            memory_store=stores.memory,
            todo_store=stores.todos,
            session_search=stores.sessions,
        )


@dataclass(slots=True, kw_only=True)
class Stores:
    """State the agents of every request share, per owner. In memory until the SQL store
    lands: it survives requests, not restarts."""

    memory: MemoryStore = field(default_factory=InMemoryMemoryStore)
    todos: TodoStore = field(default_factory=InMemoryTodoStore)
    sessions: SessionSearchStore = field(default_factory=InMemorySessionIndex)


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
    """Quiet time after which a stream gets a ``: keep-alive`` comment (tools running)."""
    max_body_bytes: int = 4 * 1024 * 1024

    def profile(self, model: str) -> Profile | None:
        return next((p for p in self.profiles if p.id == model), None)

    async def close(self) -> None:
        """Release upstream connections (profiles may share providers)."""
        closed: set[int] = set()
        for profile in self.profiles:
            if id(profile.provider) not in closed:
                closed.add(id(profile.provider))
                await profile.provider.aclose()
