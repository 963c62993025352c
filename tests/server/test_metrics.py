"""/metrics and /ready: runs against the simulator show up in the Prometheus exposition; the
event observer is also checked on literal events."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from pydantic import SecretStr
from starlette.routing import NoMatchFound

from hermes_core.agent import AgentConfig
from hermes_core.context import CachingContext
from hermes_core.events import (
    AgentEvent,
    BudgetWarning,
    ExitReason,
    FallbackActivated,
    InterruptSource,
    ModelCallStarted,
    RetryScheduled,
    RunFinished,
    RunStarted,
    StepFinished,
    SubagentEvent,
    TextDelta,
    ToolFinished,
    ToolOutcome,
)
from hermes_core.providers import ProviderConfig, create_provider
from hermes_core.providers.base import ApiMode, ModelRequest, Provider, ProviderEvent
from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.retry import Cooldowns, RetryPolicy
from hermes_core.tools.registry import ToolContext, ToolRegistry
from hermes_core.usage import Usage
from server.app import create_app
from server.http.auth import KeyRing
from server.http.threaded import ThreadedServer
from server.metrics import Metrics, RequestMetrics, path_endpoint
from server.profiles import Profile
from server.routes import metrics as metrics_routes
from server.runs.manager import RunInfo, RunManager
from server.services import Services
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED

KEY = "sk-metrics-0123456789abcdef"
AUTH = {"authorization": f"Bearer {KEY}"}
HELLO = [{"role": "user", "content": "hello"}]
CHAT = "chat_completions"


# --- a server with four profiles, metrics wired ---------------------------------------------


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        description="Look a word up.",
        parameters={"type": "object", "properties": {"word": {"type": "string"}}},
    )
    async def lookup(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return f"definition of {arguments.get('word', '?')}: " + "a fine word " * 20

    @registry.tool(description="Always fails.", parameters={"type": "object", "properties": {}})
    async def broken(arguments: dict[str, Any], ctx: ToolContext) -> str:
        raise RuntimeError("broken on purpose")

    @registry.tool(
        description="Delete a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
        needs_approval=lambda arguments: "deletes a file",
    )
    async def delete_file(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "deleted"

    return registry


def _provider(simulator: SimulatorServer, name: str, model: str, api_mode: ApiMode) -> Provider:
    # The Anthropic SDK appends /v1 itself; the OpenAI SDK wants it in the base URL.
    suffix = "" if api_mode == "anthropic_messages" else "/v1"
    return create_provider(
        ProviderConfig(
            name=name,
            model=model,
            api_mode=api_mode,
            base_url=simulator.base_url + suffix,
            api_key=SecretStr("upstream-key"),
            timeout=10,
        )
    )


def _chain(*providers: Provider) -> FallbackChain:
    retry = RetryPolicy(base_delay=0.01, max_attempts=2, jitter=False)
    return FallbackChain(list(providers), retry=retry, cooldowns=Cooldowns())


def _services(simulator: SimulatorServer) -> Services:
    def chat(name: str, model: str) -> Provider:
        return _provider(simulator, name, model, "chat_completions")

    tools = _tools()
    profiles = [
        Profile(id="plain-agent", provider=_chain(chat("plain", "sim-plain")), tools=tools),
        Profile(
            id="fallback-agent",
            provider=_chain(chat("primary", "sim-primary"), chat("backup", "sim-backup")),
        ),
        Profile(
            id="budget-agent",
            provider=_chain(chat("budget", "sim-budget")),
            tools=tools,
            config=AgentConfig(max_iterations=2),
        ),
        Profile(
            id="cache-agent",
            provider=_chain(_provider(simulator, "claude", "claude-cache", "anthropic_messages")),
            tools=tools,
            context=CachingContext(),
        ),
    ]
    return Services(profiles=profiles, keyring=KeyRing({KEY: "alice"}), runs=RunManager())


def with_metrics(app: FastAPI, services: Services) -> Metrics:
    """Wire metrics into ``app`` unless ``create_app`` already did; returns the live instance."""
    metrics: Metrics | None = getattr(app.state, "metrics", None)
    if metrics is None:
        metrics = app.state.metrics = Metrics()
    if metrics.observe not in services.runs.observers:
        services.runs.observers.append(metrics.observe)
    installed: list[object] = [middleware.cls for middleware in app.user_middleware]
    if RequestMetrics not in installed:
        app.add_middleware(RequestMetrics, metrics=metrics)
    try:
        app.url_path_for("metrics")
    except NoMatchFound:
        app.include_router(metrics_routes.router)
    return metrics


@pytest.fixture
def server(simulator: SimulatorServer) -> Iterator[ThreadedServer]:
    services = _services(simulator)
    app = create_app(services)
    with_metrics(app, services)
    with ThreadedServer(app) as running:
        yield running


@pytest.fixture
async def http(server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=10) as client:
        yield client


class Scrape:
    """One parsed ``/metrics`` exposition."""

    def __init__(self, text: str) -> None:
        self.samples: list[Sample] = [
            sample for family in text_string_to_metric_families(text) for sample in family.samples
        ]

    def value(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels`` (0 when none)."""
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )


async def scrape(http: httpx.AsyncClient) -> Scrape:
    response = await http.get("/metrics")
    assert response.status_code == 200
    return Scrape(response.text)


def script(simulator: SimulatorServer, model: str, *steps: Step) -> None:
    simulator.state.script(model, Scenario(steps=list(steps)))


def lookup(word: str) -> ToolCallSpec:
    return ToolCallSpec(name="lookup", arguments={"word": word})


async def chat(http: httpx.AsyncClient, model: str) -> dict[str, Any]:
    response = await http.post(
        "/v1/chat/completions", headers=AUTH, json={"model": model, "messages": HELLO}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# --- the endpoints ----------------------------------------------------------------------------


async def test_metrics_are_prometheus_text_and_need_no_key(http: httpx.AsyncClient) -> None:
    response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    assert "# TYPE hermes_runs_finished_total counter" in response.text
    assert "# TYPE hermes_tool_duration_seconds histogram" in response.text
    assert "python_info" in response.text  # runtime collectors, in our own registry


async def test_the_series_alerts_need_exist_at_zero_before_any_traffic(
    http: httpx.AsyncClient,
) -> None:
    seen = await scrape(http)

    def present(name: str, **labels: str) -> bool:
        return any(
            s.name == name and s.value == 0 and all(s.labels.get(k) == v for k, v in labels.items())
            for s in seen.samples
        )

    for source in InterruptSource:
        assert present("hermes_interrupts_total", endpoint=CHAT, source=source.value)
    assert present("hermes_budget_exhausted_total", endpoint="responses")
    assert present("hermes_runs_finished_total", endpoint=CHAT, exit_reason="failed")
    fallback = {"from_provider": "primary", "to_provider": "backup", "reason": "rate_limit"}
    assert present("hermes_llm_fallbacks_total", **fallback)
    assert present("hermes_llm_requests_total", provider="backup", model="sim-backup")
    assert present("hermes_approvals_total", tool="delete_file", outcome="denied")


async def test_ready_names_the_profiles(http: httpx.AsyncClient) -> None:
    response = await http.get("/ready")
    assert response.status_code == 200
    ready = response.json()
    # Cooldowns are the process's (other tests in this process may have left some).
    assert isinstance(ready.pop("cooling_providers"), list)
    assert ready == {"status": "ready", "profiles": 4, "mcp_servers": [], "sandboxes": None}
    assert (await http.get("/health")).status_code == 200


async def test_not_ready_without_profiles() -> None:
    services = Services(profiles=())
    app = create_app(services)
    with_metrics(app, services)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, transport=transport, base_url="http://hermes"
    ) as http:
        response = await http.get("/ready")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "not_ready"
    assert response.json()["error"]["type"] == "server_error"


# --- runs against the simulator ---------------------------------------------------------------


async def test_a_fallback_is_counted_by_provider_and_reason(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, "sim-primary", Step(fault=Fault(status=503), repeat=10))
    script(simulator, "sim-backup", Step(reply=Reply(text="From the backup.")))
    answer = await chat(http, "fallback-agent")
    assert answer["choices"][0]["message"]["content"] == "From the backup."
    seen = await scrape(http)
    fallback = {"from_provider": "primary", "to_provider": "backup", "reason": "server_error"}
    assert seen.value("hermes_llm_fallbacks_total", **fallback) == 1
    assert seen.value("hermes_llm_retries_total", provider="primary", reason="server_error") == 1
    primary = {"provider": "primary", "model": "sim-primary"}
    assert seen.value("hermes_llm_requests_total", **primary, outcome="error") == 2
    backup = {"provider": "backup", "model": "sim-backup"}
    assert seen.value("hermes_llm_requests_total", **backup, outcome="success") == 1
    assert seen.value("hermes_llm_input_tokens_total", **backup) > 0
    assert seen.value("hermes_llm_output_tokens_total", **backup) > 0
    assert seen.value("hermes_runs_finished_total", endpoint=CHAT, exit_reason="completed") == 1
    assert seen.value("hermes_requests_total", endpoint=CHAT, status="200") == 1
    assert seen.value("hermes_request_duration_seconds_count", endpoint=CHAT) == 1
    assert seen.value("hermes_runs_active", endpoint=CHAT) == 0


async def test_a_run_the_upstreams_content_filter_stopped_is_not_counted_as_failed(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    """Its user asked for what the upstream will not say: no fault of the server's or the
    upstream's, so it is kept out of the failed runs the error-ratio alert reads."""
    script(simulator, "sim-plain", Step(reply=Reply(text="", finish_reason="content_filter")))
    answer = await chat(http, "plain-agent")
    assert answer["choices"][0]["finish_reason"] == "content_filter"

    seen = await scrape(http)
    finished = {"endpoint": CHAT}
    assert seen.value("hermes_runs_finished_total", **finished, exit_reason="failed") == 0
    assert seen.value("hermes_runs_finished_total", **finished, exit_reason="content_filter") == 1


async def test_time_to_first_token_is_measured_on_streamed_runs_only(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    # A non-streaming client's reply comes from upstream in one piece: its "first token" would
    # be its last, and would only blur what streaming clients wait for.
    script(simulator, "sim-primary", Step(reply=Reply(text="Hi there."), repeat=2))
    await chat(http, "fallback-agent")
    body = {"model": "fallback-agent", "messages": HELLO, "stream": True}
    async with http.stream("POST", "/v1/chat/completions", headers=AUTH, json=body) as streamed:
        assert streamed.status_code == 200
        await streamed.aread()
    seen = await scrape(http)
    assert seen.value("hermes_runs_finished_total", endpoint=CHAT, exit_reason="completed") == 2
    assert seen.value("hermes_time_to_first_token_seconds_count", endpoint=CHAT) == 1


async def test_budget_exhaustion_warning_and_grace_call(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(
        simulator,
        "sim-budget",
        Step(reply=Reply(tool_calls=[lookup("again")]), repeat=2),
        Step(reply=Reply(text="Out of budget; here is what I found.")),
    )
    answer = await chat(http, "budget-agent")
    assert answer["hermes"]["exit_reason"] == "budget_exhausted"
    seen = await scrape(http)
    assert seen.value("hermes_budget_exhausted_total", endpoint=CHAT) == 1
    assert seen.value("hermes_budget_grace_calls_total", outcome="answered") == 1
    assert seen.value("hermes_budget_warnings_total", tier="warning") == 1
    assert seen.value("hermes_budget_warnings_total", tier="caution") == 0
    finished = {"endpoint": CHAT, "exit_reason": "budget_exhausted"}
    assert seen.value("hermes_runs_finished_total", **finished) == 1
    assert seen.value("hermes_run_iterations_sum", endpoint=CHAT) == 2
    assert seen.value("hermes_run_budget_used_ratio_sum", endpoint=CHAT) == 1.0
    assert seen.value("hermes_run_budget_used_ratio_bucket", endpoint=CHAT, le="0.9") == 0
    assert seen.value("hermes_tool_calls_total", tool="lookup", outcome="success") == 2
    # Two budgeted calls and the grace call.
    assert seen.value("hermes_llm_requests_total", provider="budget", outcome="success") == 3


async def test_a_grace_reply_that_calls_a_tool_is_an_empty_grace_call(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    # Offered no tools, the grace call calls one anyway: the run ends on a notice naming it,
    # which is the server's text, not the grace reply's.
    script(simulator, "sim-budget", Step(reply=Reply(tool_calls=[lookup("again")]), repeat=3))
    answer = await chat(http, "budget-agent")
    assert answer["hermes"]["exit_reason"] == "budget_exhausted"
    assert answer["choices"][0]["message"]["content"].startswith(
        "The agent reached its step budget before finishing"
    )
    seen = await scrape(http)
    assert seen.value("hermes_budget_grace_calls_total", outcome="empty") == 1
    assert seen.value("hermes_budget_grace_calls_total", outcome="answered") == 0


async def test_prompt_cache_reads_and_writes_by_provider(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(
        simulator,
        "claude-cache",
        Step(reply=Reply(tool_calls=[lookup("cache")])),
        Step(reply=Reply(text="Done.")),
    )
    await chat(http, "cache-agent")
    seen = await scrape(http)
    claude = {"provider": "claude", "model": "claude-cache"}
    written = seen.value("hermes_llm_cache_write_input_tokens_total", **claude)
    read = seen.value("hermes_llm_cache_read_input_tokens_total", **claude)
    assert written > 0
    assert read > 0
    assert seen.value("hermes_llm_input_tokens_total", **claude) >= written + read
    assert seen.value("hermes_llm_prompt_cache_total", **claude, result="write_only") == 1
    assert seen.value("hermes_llm_prompt_cache_total", **claude, result="hit") == 1
    assert seen.value("hermes_llm_prompt_cache_total", **claude, result="miss") == 0


async def test_tool_calls_by_tool_and_outcome(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    made_up = ToolCallSpec(name="made_up_tool", arguments={})
    broken = ToolCallSpec(name="broken", arguments={})
    script(
        simulator,
        "sim-plain",
        Step(reply=Reply(tool_calls=[lookup("a"), broken, made_up])),
        Step(reply=Reply(text="Done.")),
    )
    await chat(http, "plain-agent")
    seen = await scrape(http)
    assert seen.value("hermes_tool_calls_total", tool="lookup", outcome="success") == 1
    assert seen.value("hermes_tool_calls_total", tool="broken", outcome="error") == 1
    # A hallucinated name never becomes a label value.
    assert seen.value("hermes_tool_calls_total", tool="other", outcome="not_found") == 1
    assert not any(s.labels.get("tool") == "made_up_tool" for s in seen.samples)
    duration = {"tool": "lookup", "outcome": "success"}
    assert seen.value("hermes_tool_duration_seconds_count", **duration) == 1


async def test_requests_by_endpoint_and_status(http: httpx.AsyncClient) -> None:
    assert (await http.get("/v1/models", headers=AUTH)).status_code == 200
    unknown = {"model": "nope", "messages": HELLO}
    assert (await http.post("/v1/chat/completions", headers=AUTH, json=unknown)).status_code == 404
    assert (await http.post("/v1/chat/completions", json=unknown)).status_code == 401
    assert (await http.get("/v1/runs/run_nope", headers=AUTH)).status_code == 404
    assert (await http.get("/nowhere")).status_code == 404
    await http.get("/health")
    seen = await scrape(http)
    assert seen.value("hermes_requests_total", endpoint="models", status="200") == 1
    assert seen.value("hermes_requests_total", endpoint=CHAT, status="404") == 1
    assert seen.value("hermes_requests_total", endpoint=CHAT, status="401") == 1
    assert seen.value("hermes_requests_total", endpoint="runs", status="404") == 1
    assert seen.value("hermes_requests_total", endpoint="other", status="404") == 1
    # Probes and scrapes are not traffic.
    assert seen.value("hermes_requests_total") == 5
    assert seen.value("hermes_request_duration_seconds_count") == 5


async def test_approvals_are_counted_by_tool_and_outcome(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    delete = ToolCallSpec(name="delete_file", arguments={"path": "a"})
    script(
        simulator, "sim-plain", Step(reply=Reply(tool_calls=[delete])), Step(reply=Reply(text="ok"))
    )
    await chat(http, "plain-agent")  # no approver is configured: denied
    seen = await scrape(http)
    assert seen.value("hermes_approvals_total", tool="delete_file", outcome="denied") == 1
    assert seen.value("hermes_tool_calls_total", tool="delete_file", outcome="denied") == 1


async def test_a_stop_through_the_api_is_an_interrupt_by_source(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    slow = Reply(text="slow " * 40, chunk_count=40)
    script(simulator, "sim-plain", Step(reply=slow, fault=Fault(chunk_delay=0.2)))
    body = {"model": "plain-agent", "messages": HELLO, "stream": True}
    async with http.stream("POST", "/v1/chat/completions", headers=AUTH, json=body) as response:
        run_id = response.headers["x-hermes-run-id"]
        stopped = False
        async for line in response.aiter_lines():
            if stopped or not line.startswith("data: {"):
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            if delta.get("content"):
                stop = await http.post(f"/v1/runs/{run_id}/stop", headers=AUTH)
                assert stop.status_code == 202
                stopped = True
    assert stopped
    seen = await scrape(http)
    assert seen.value("hermes_interrupts_total", endpoint=CHAT, source="stop_api") == 1
    assert seen.value("hermes_runs_finished_total", endpoint=CHAT, exit_reason="interrupted") == 1
    assert seen.value("hermes_llm_requests_total", provider="plain", outcome="cancelled") == 1
    assert seen.value("hermes_llm_requests_total", provider="plain", outcome="success") == 0
    # The cut-off call was paid for: an estimate of its tokens counts.
    assert seen.value("hermes_llm_input_tokens_total", provider="plain") > 0
    assert seen.value("hermes_llm_output_tokens_total", provider="plain") > 0
    assert seen.value("hermes_time_to_first_token_seconds_count", endpoint=CHAT) == 1
    assert seen.value("hermes_requests_total", endpoint="runs", status="202") == 1
    assert seen.value("hermes_requests_total", endpoint=CHAT, status="200") == 1
    assert seen.value("hermes_runs_active", endpoint=CHAT) == 0


@pytest.mark.parametrize(
    ("method", "suffix", "source"),
    [("POST", "/cancel", "cancel_api"), ("DELETE", "", "delete_api")],
    ids=["cancel", "delete"],
)
async def test_a_response_cancelled_or_deleted_is_an_interrupt_by_its_own_source(
    simulator: SimulatorServer, http: httpx.AsyncClient, method: str, suffix: str, source: str
) -> None:
    slow = Reply(text="slow " * 40, chunk_count=40)
    script(simulator, "sim-plain", Step(reply=slow, fault=Fault(chunk_delay=0.2)))
    body = {"model": "plain-agent", "input": "hello", "background": True}
    created = await http.post("/v1/responses", headers=AUTH, json=body)
    assert created.status_code == 200, created.text
    ended = await http.request(
        method, f"/v1/responses/{created.json()['id']}{suffix}", headers=AUTH
    )
    assert ended.status_code == 200, ended.text
    seen = await scrape(http)
    assert seen.value("hermes_interrupts_total", endpoint="responses", source=source) == 1
    assert seen.value("hermes_interrupts_total", source="other") == 0


# --- the observer on literal events -----------------------------------------------------------


class _Named:
    """A provider that is never called: the observer only reads its name and model."""

    api_mode: ApiMode = "chat_completions"
    context_window = 1000

    def __init__(self, name: str, model: str) -> None:
        self.name = name
        self.model = model

    async def refresh_credentials(self) -> bool:
        return False

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        raise AssertionError("metrics never call a model")

    async def aclose(self) -> None:
        return None


E = TypeVar("E", bound=AgentEvent)


def _events(run_id: str) -> Callable[..., Any]:
    seq = itertools.count()

    def make(kind: type[E], **fields: Any) -> E:
        return kind(run_id=run_id, seq=next(seq), **fields)

    return make


def _info() -> RunInfo:
    return RunInfo(
        id="run_1",
        owner="alice",
        endpoint="chat.completions",
        model="m",
        providers={"a": "model-a", "b": "model-b"},
    )


def _finished(
    make: Callable[..., Any],
    reason: ExitReason,
    text: str = "",
    *,
    source: InterruptSource = InterruptSource.CLIENT_DISCONNECT,
) -> RunFinished:
    finished: RunFinished = make(
        RunFinished,
        exit_reason=reason,
        final_text=text,
        iterations=4,
        usage=Usage(),
        model_calls=5,
        error="Interrupted: client disconnected" if reason is ExitReason.INTERRUPTED else None,
        interrupt_source=source if reason is ExitReason.INTERRUPTED else None,
    )
    return finished


async def test_observe_counts_a_whole_run_from_literal_events() -> None:
    metrics, run = Metrics(runtime_metrics=False), _info()
    metrics.name_toolsets({"lookup": "files"})
    make, child = _events("run_1"), _events("run_child")

    def sub(event: AgentEvent) -> SubagentEvent:
        wrapped: SubagentEvent = make(SubagentEvent, call_id="c9", child_index=0, event=event)
        return wrapped

    def value(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    usage = Usage(input_tokens=100, cache_read_tokens=80, output_tokens=20, reasoning_tokens=5)
    tool = {"call_id": "c1", "duration_s": 0.02, "result_preview": ""}
    events: list[AgentEvent] = [
        make(RunStarted, task_id="t", model="model-a", provider="a", budget=4),
        make(ModelCallStarted, iteration=1, provider="a", model="model-a"),
        make(RetryScheduled, provider="a", attempt=1, delay_s=0.1, reason="rate_limit"),
        make(FallbackActivated, from_provider="a", to_provider="b", reason="made-up reason"),
        make(TextDelta, text="Hel"),
        make(TextDelta, text="lo"),
        make(
            StepFinished,
            iteration=1,
            usage=usage,
            provider="b",
            model="model-b-2025",
            finish_reason="tool_calls",
        ),
        make(ToolFinished, name="lookup", outcome=ToolOutcome.SUCCESS, **tool),
        make(ToolFinished, name="lookup", outcome=ToolOutcome.TIMEOUT, error="timed out", **tool),
        make(ToolFinished, name="lookup", outcome=ToolOutcome.DENIED, error="Denied", **tool),
        make(ToolFinished, name="invented", outcome=ToolOutcome.NOT_FOUND, error="No", **tool),
        sub(child(RunStarted, task_id="t2", model="model-a", provider="a", budget=4)),
        sub(child(TextDelta, text="child text")),
        sub(
            child(
                StepFinished,
                iteration=2,
                usage=Usage(input_tokens=7),
                provider="a",
                model="model-a",
                finish_reason="stop",
            )
        ),
        sub(child(ToolFinished, name="lookup", outcome=ToolOutcome.CANCELLED, **tool)),
        sub(child(BudgetWarning, tier="caution", used=3, total=4)),
        sub(_finished(child, ExitReason.COMPLETED, "child answer")),
        make(BudgetWarning, tier="warning", used=4, total=4),
        make(ModelCallStarted, iteration=4, provider="b", model="model-b", grace=True),
    ]
    for event in events:
        metrics.observe(run, event)
    assert value("hermes_runs_active", endpoint=CHAT) == 1
    metrics.observe(run, _finished(make, ExitReason.INTERRUPTED))

    assert value("hermes_runs_active", endpoint=CHAT) == 0
    assert value("hermes_time_to_first_token_seconds_count", endpoint=CHAT) == 1
    assert value("hermes_llm_retries_total", provider="a", reason="rate_limit") == 1
    fallback = {"from_provider": "a", "to_provider": "b", "reason": "other"}
    assert value("hermes_llm_fallbacks_total", **fallback) == 1
    a, b = {"provider": "a", "model": "model-a"}, {"provider": "b", "model": "model-b"}
    assert value("hermes_llm_requests_total", **a, outcome="error") == 2
    assert value("hermes_llm_requests_total", **a, outcome="success") == 1  # the child's
    # The model label is the configured one, whatever the upstream reported.
    assert value("hermes_llm_requests_total", **b, outcome="success") == 1
    assert value("hermes_llm_requests_total", **b, outcome="cancelled") == 1  # the grace call
    assert value("hermes_llm_cache_read_input_tokens_total", **b) == 80
    assert value("hermes_llm_reasoning_output_tokens_total", **b) == 5
    assert value("hermes_llm_input_tokens_total", **a) == 7
    assert value("hermes_llm_prompt_cache_total", **b, result="hit") == 1
    assert value("hermes_llm_prompt_cache_total", **a, result="miss") == 1
    lookup = {"toolset": "files", "tool": "lookup"}
    for outcome in ("success", "timeout", "denied", "cancelled"):
        assert value("hermes_tool_calls_total", **lookup, outcome=outcome) == 1
    unknown = {"toolset": "other", "tool": "other", "outcome": "not_found"}
    assert value("hermes_tool_calls_total", **unknown) == 1
    assert value("hermes_tool_calls_total", toolset="files", tool="lookup", outcome="success") == 1
    assert value("hermes_tool_calls_total", toolset="files", tool="lookup", outcome="timeout") == 1
    assert value("hermes_tool_calls_total", toolset="files", tool="lookup", outcome="denied") == 1
    assert (
        value("hermes_tool_calls_total", toolset="files", tool="lookup", outcome="cancelled") == 1
    )
    assert value("hermes_tool_calls_total", toolset="other", tool="other", outcome="not_found") == 1
    # The child's run is part of the parent's: one run finished, the parent's warning only.
    assert value("hermes_runs_finished_total", endpoint=CHAT, exit_reason="completed") is None
    assert value("hermes_runs_finished_total", endpoint=CHAT, exit_reason="interrupted") == 1
    assert value("hermes_budget_warnings_total", tier="caution") is None
    assert value("hermes_budget_warnings_total", tier="warning") == 1
    assert value("hermes_budget_grace_calls_total", outcome="interrupted") == 1
    assert value("hermes_interrupts_total", endpoint=CHAT, source="client_disconnect") == 1
    assert value("hermes_run_budget_used_ratio_sum", endpoint=CHAT) == 1.0
    assert metrics._runs == {}  # no scratch state outlives its run


@pytest.mark.parametrize(
    ("text", "notice", "outcome"),
    [
        ("Here is what I found.", False, "answered"),
        ("  ", False, "empty"),
        # The grace reply called a tool (or said nothing): the run's answer is its notice.
        ("The agent reached its step budget before finishing.", True, "empty"),
    ],
)
async def test_a_grace_call_is_answered_or_empty(text: str, notice: bool, outcome: str) -> None:
    metrics, run = Metrics(runtime_metrics=False), _info()
    make = _events("run_1")
    metrics.observe(run, make(RunStarted, task_id="t", model="model-a", provider="a", budget=4))
    metrics.observe(
        run, make(ModelCallStarted, iteration=4, provider="a", model="model-a", grace=True)
    )
    step = make(StepFinished, iteration=4, usage=Usage(), provider="a", model="model-a",
                finish_reason="stop")  # fmt: skip
    metrics.observe(run, step)
    ended = dataclasses.replace(_finished(make, ExitReason.BUDGET_EXHAUSTED, text), notice=notice)
    metrics.observe(run, ended)
    grace = metrics.registry.get_sample_value(
        "hermes_budget_grace_calls_total", {"outcome": outcome}
    )
    assert grace == 1
    exhausted = metrics.registry.get_sample_value(
        "hermes_budget_exhausted_total", {"endpoint": CHAT}
    )
    assert exhausted == 1


async def test_a_failed_last_call_is_an_upstream_error() -> None:
    metrics, run = Metrics(runtime_metrics=False), _info()
    make = _events("run_1")
    for event in (
        make(RunStarted, task_id="t", model="model-a", provider="a", budget=4),
        make(ModelCallStarted, iteration=1, provider="a", model="model-a"),
        _finished(make, ExitReason.FAILED),
    ):
        metrics.observe(run, event)
    labels = {"provider": "a", "model": "model-a", "outcome": "error"}
    assert metrics.registry.get_sample_value("hermes_llm_requests_total", labels) == 1
    assert metrics.registry.get_sample_value("hermes_budget_grace_calls_total", {}) is None


@pytest.mark.parametrize("source", list(InterruptSource))
def test_an_interrupted_run_is_counted_by_its_source(source: InterruptSource) -> None:
    metrics, run = Metrics(runtime_metrics=False), _info()
    make = _events("run_1")
    metrics.observe(run, make(RunStarted, task_id="t", model="model-a", provider="a", budget=4))
    metrics.observe(run, _finished(make, ExitReason.INTERRUPTED, source=source))
    labels = {"endpoint": CHAT, "source": source.value}
    assert metrics.registry.get_sample_value("hermes_interrupts_total", labels) == 1


@pytest.mark.parametrize(
    ("path", "endpoint"),
    [
        ("/v1/chat/completions", "chat_completions"),
        ("/v1/responses", "responses"),
        ("/v1/responses/resp_1/cancel", "responses"),
        ("/v1/runs/run_1/stop", "runs"),
        ("/v1/models", "models"),
        ("/v1/chat", "other"),
        ("/v1/embeddings", "other"),
        ("/docs", "other"),
        ("/metrics", None),
        ("/health", None),
        ("/ready", None),
    ],
)
def test_path_endpoints_are_bounded(path: str, endpoint: str | None) -> None:
    assert path_endpoint(path) == endpoint


async def test_a_request_that_crashes_counts_as_a_500() -> None:
    async def crash(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    metrics = Metrics(runtime_metrics=False)
    transport = httpx.ASGITransport(app=RequestMetrics(crash, metrics=metrics))
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, transport=transport, base_url="http://hermes"
    ) as http:
        with pytest.raises(RuntimeError):
            await http.post("/v1/chat/completions")
    labels = {"endpoint": CHAT, "status": "500"}
    assert metrics.registry.get_sample_value("hermes_requests_total", labels) == 1
