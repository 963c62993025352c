"""The gauges ``/metrics`` reads at scrape time (server/metrics/live.py): the oldest live run's
age, approvals pending, providers cooling down, MCP servers up."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest
from pydantic import SecretStr

from hermes_core.events import (
    AgentEvent,
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    ExitReason,
    RunFinished,
    RunStarted,
)
from hermes_core.providers import ProviderConfig, create_provider
from hermes_core.providers.base import Provider
from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.retry import Cooldowns, RetryPolicy
from hermes_core.providers.scripted import ScriptedProvider
from hermes_core.tools.mcp.toolset import McpToolset
from hermes_core.usage import Usage
from server.app import create_app
from server.http.auth import KeyRing
from server.http.threaded import ThreadedServer
from server.metrics import Metrics
from server.profiles import Profile
from server.routes.metrics import live_state
from server.runs.manager import RunInfo, RunManager
from server.services import Services
from server.simulator import Fault, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED

KEY = "sk-live-metrics-0123456789abcdef"
AUTH = {"authorization": f"Bearer {KEY}"}
E = TypeVar("E", bound=AgentEvent)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(time, "monotonic", clock)  # the metrics' clock; the test is sync
    return clock


def _events(run_id: str) -> Callable[..., Any]:
    seq = itertools.count()

    def make(kind: type[E], **fields: Any) -> E:
        return kind(run_id=run_id, seq=next(seq), **fields)

    return make


def _info(run_id: str) -> RunInfo:
    return RunInfo(id=run_id, owner="alice", endpoint="chat.completions", model="m")


def _finished(make: Callable[..., Any]) -> RunFinished:
    finished: RunFinished = make(
        RunFinished,
        exit_reason=ExitReason.COMPLETED,
        final_text="done",
        iterations=1,
        usage=Usage(),
        model_calls=1,
    )
    return finished


def test_the_oldest_runs_age_and_pending_approvals_follow_the_runs(clock: Clock) -> None:
    metrics = Metrics(runtime_metrics=False)

    def value(name: str) -> float | None:
        return metrics.registry.get_sample_value(name)

    assert value("hermes_oldest_run_age_seconds") == 0
    assert value("hermes_approvals_pending") == 0

    first, second = _events("run_1"), _events("run_2")
    start = {"task_id": "t", "model": "m", "provider": "p", "budget": 4}
    metrics.observe(_info("run_1"), first(RunStarted, **start))
    clock.now += 30
    metrics.observe(_info("run_2"), second(RunStarted, **start))
    asked = {"approval_id": "ap_1", "call_id": "c1", "name": "delete_file", "arguments": {}}
    metrics.observe(_info("run_1"), first(ApprovalRequested, **asked, reason="deletes"))
    clock.now += 15
    assert value("hermes_oldest_run_age_seconds") == 45
    assert value("hermes_approvals_pending") == 1

    resolved = {"approval_id": "ap_1", "call_id": "c1", "name": "delete_file"}
    metrics.observe(
        _info("run_1"), first(ApprovalResolved, **resolved, decision=ApprovalDecision.APPROVED)
    )
    assert value("hermes_approvals_pending") == 0
    metrics.observe(_info("run_2"), second(ApprovalRequested, **asked, reason="deletes"))
    metrics.observe(_info("run_1"), _finished(first))
    assert value("hermes_oldest_run_age_seconds") == 15  # run_2's
    # A run that ends while an approval waits takes the approval with it.
    metrics.observe(_info("run_2"), _finished(second))
    assert value("hermes_oldest_run_age_seconds") == 0
    assert value("hermes_approvals_pending") == 0


class McpServers(McpToolset):
    """A profile's MCP servers in a given state: ``/ready`` and ``/metrics`` read status()."""

    def __init__(self, status: dict[str, str | None]) -> None:
        super().__init__([])
        self._status = status

    def status(self) -> dict[str, str | None]:
        return dict(self._status)


def test_each_configured_mcp_server_is_up_or_down_by_profile() -> None:
    servers = McpServers({"search": None, "github": "connection refused"})
    profiles = [
        Profile(id="with-mcp", provider=ScriptedProvider("hi"), mcp=servers),
        Profile(id="without", provider=ScriptedProvider("hi")),
    ]
    services = Services(profiles=profiles)
    metrics = Metrics(runtime_metrics=False)
    metrics.watch(lambda: live_state(services))

    def up(server: str) -> float | None:
        labels = {"profile": "with-mcp", "server": server}
        return metrics.registry.get_sample_value("hermes_mcp_server_up", labels)

    assert (up("search"), up("github")) == (1, 0)
    servers._status["github"] = None  # reconnected
    assert up("github") == 1


# --- cooldowns, over HTTP ----------------------------------------------------------------------


def _chain(simulator: SimulatorServer, *names: str) -> FallbackChain:
    providers: list[Provider] = [
        create_provider(
            ProviderConfig(
                name=name,
                model=f"sim-{name}",
                api_mode="chat_completions",
                base_url=simulator.base_url + "/v1",
                api_key=SecretStr("upstream-key"),
                timeout=10,
            )
        )
        for name in names
    ]
    retry = RetryPolicy(base_delay=0.01, max_attempts=2, jitter=False)
    return FallbackChain(providers, retry=retry, cooldowns=Cooldowns())


@pytest.fixture
def server(simulator: SimulatorServer) -> Iterator[ThreadedServer]:
    profiles = [Profile(id="agent", provider=_chain(simulator, "primary", "backup"))]
    services = Services(profiles=profiles, keyring=KeyRing({KEY: "alice"}), runs=RunManager())
    with ThreadedServer(create_app(services)) as running:
        yield running


async def test_a_rate_limited_provider_reads_cooling_down(
    simulator: SimulatorServer, server: ThreadedServer
) -> None:
    async def cooling(http: httpx.AsyncClient) -> dict[str, float]:
        scrape = await http.get("/metrics")
        found: dict[str, float] = {}
        for line in scrape.text.splitlines():
            if line.startswith("hermes_provider_cooling_down{"):
                labels, value = line.rsplit(" ", 1)
                found[labels.split('"')[1]] = float(value)
        return found

    async def ask(http: httpx.AsyncClient) -> None:
        body = {"model": "agent", "messages": [{"role": "user", "content": "hi"}]}
        answer = await http.post("/v1/chat/completions", headers=AUTH, json=body)
        assert answer.status_code == 200, answer.text

    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=10) as http:
        assert await cooling(http) == {"primary": 0, "backup": 0}
        limited = Step(fault=Fault(status=429, retry_after=600), repeat=10)
        simulator.state.script("sim-primary", Scenario(steps=[limited]))
        await ask(http)  # answered by the backup
        assert await cooling(http) == {"primary": 1, "backup": 0}
