"""A real hermes-server (uvicorn on a thread) in front of the upstream simulator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic import SecretStr

from hermes_core.agent import AgentConfig, ContextHooks
from hermes_core.persistence import Store, sqlite_url
from hermes_core.providers import ProviderConfig, create_provider
from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.retry import Cooldowns, RetryPolicy
from hermes_core.tools.registry import ToolContext, ToolRegistry
from server.app import create_app
from server.http.auth import KeyRing, Principal
from server.http.threaded import ThreadedServer
from server.profiles import Profile
from server.runs.manager import RunManager
from server.services import Services
from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.server.webhook_receiver import WebhookReceiver

UPSTREAM_MODEL = "upstream-agent"
"""The model id the agent profile sends upstream: tests script the simulator under it."""
KEY_ALICE = "sk-alice-0123456789abcdef"
KEY_BOB = "sk-bob-0123456789abcdef"
KEY_CAROL = "sk-carol-0123456789abcdef"
"""A key restricted to a profile other than hermes-agent."""


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A new SQLite store of this test's own (a module may define its own ``store``)."""
    opened = await Store.open(sqlite_url(tmp_path / "hermes.db"))
    try:
        yield opened
    finally:
        await opened.close()


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        description="Look a word up.",
        parameters={"type": "object", "properties": {"word": {"type": "string"}}},
    )
    async def lookup(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return f"definition of {arguments.get('word', '?')}: a fine word"

    @registry.tool(
        description="Wait a while.",
        parameters={"type": "object", "properties": {"seconds": {"type": "number"}}},
    )
    async def wait(arguments: dict[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(float(arguments.get("seconds", 0.1)))
        return "waited"

    @registry.tool(
        description="Wait until stopped.",
        parameters={"type": "object", "properties": {}},
        cancellable=True,
    )
    async def hold(arguments: dict[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(120)  # a run in progress until it is stopped (then cancelled)
        return "held"

    return registry


def make_services(
    simulator: SimulatorServer,
    *,
    context: ContextHooks | None = None,
    context_window: int = 128_000,
    **overrides: Any,
) -> Services:
    """The services of a test server: one agent profile on the simulator, three keys."""
    provider = create_provider(
        ProviderConfig(
            name="sim",
            model=UPSTREAM_MODEL,
            api_mode="chat_completions",
            base_url=simulator.base_url + "/v1",
            api_key=SecretStr("upstream-key"),
            timeout=30,
            context_window=context_window,
        )
    )
    chain = FallbackChain(
        [provider], retry=RetryPolicy(base_delay=0.01, max_attempts=1), cooldowns=Cooldowns()
    )
    settings: dict[str, Any] = {
        "profiles": [
            Profile(
                id="hermes-agent",
                provider=chain,
                tools=_tools(),
                config=AgentConfig(max_iterations=6),
                context=context or ContextHooks(),
                description="Hermes test agent",
            )
        ],
        "keyring": KeyRing(
            {
                KEY_ALICE: Principal("alice", trusted_front_end=True),
                KEY_BOB: "bob",
                KEY_CAROL: Principal("carol", frozenset({"hermes-other"})),
            }
        ),
        "runs": RunManager(max_runs=8, max_runs_per_owner=4),
        "max_body_bytes": 256 * 1024,
        "keepalive_seconds": 0.2,
    }
    settings.update(overrides)
    return Services(**settings)


@pytest.fixture(scope="module")
def receiver() -> Iterator[WebhookReceiver]:
    """A webhook endpoint the tests' servers post to (modules about OTLP have their own
    ``receiver``, a collector)."""
    with WebhookReceiver() as running:
        yield running


@pytest.fixture(scope="session")
def hermes(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    database = sqlite_url(tmp_path_factory.mktemp("hermes") / "hermes.db")
    services = make_services(_simulator_server, database_url=database)
    with ThreadedServer(create_app(services)) as server:
        yield server


@pytest.fixture
async def client(
    hermes: ThreadedServer, simulator: SimulatorServer
) -> AsyncIterator[openai.AsyncOpenAI]:
    """The official SDK, strict, as Alice."""
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=hermes.base_url + "/v1",
        api_key=KEY_ALICE,
        max_retries=0,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk
