"""Fixtures for driving the agent loop against the simulator, over real HTTP."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import AgentEvent, MessageAdded, RunFinished
from hermes_core.messages import Message
from hermes_core.providers import Provider, ProviderConfig, create_provider
from hermes_core.providers.base import ApiMode
from server.simulator import RecordedRequest, Scenario, SimulatorServer, Step, ToolCallSpec

API_MODES: tuple[ApiMode, ...] = ("chat_completions", "codex_responses", "anthropic_messages")

ProviderFor = Callable[..., Provider]


@pytest.fixture(params=API_MODES)
def api_mode(request: pytest.FixtureRequest) -> ApiMode:
    mode: ApiMode = request.param
    return mode


@pytest.fixture
async def provider_for(simulator: SimulatorServer) -> AsyncIterator[ProviderFor]:
    made: list[Provider] = []

    def factory(api_mode: ApiMode, model: str, **overrides: Any) -> Provider:
        suffix = "" if api_mode == "anthropic_messages" else "/v1"
        settings: dict[str, Any] = {
            "name": f"sim-{api_mode}",
            "model": model,
            "api_mode": api_mode,
            "base_url": simulator.base_url + suffix,
            "api_key": SecretStr("test-key"),
            "timeout": 10.0,
        }
        settings.update(overrides)
        provider = create_provider(ProviderConfig(**settings))
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


@pytest.fixture(autouse=True)
def _every_request_is_well_formed(request: pytest.FixtureRequest) -> Iterator[None]:
    """Role alternation must hold in every request the loop sends, in every test using the
    simulator."""
    simulator: SimulatorServer | None = (
        request.getfixturevalue("simulator") if "simulator" in request.fixturenames else None
    )
    yield
    for record in simulator.state.requests() if simulator is not None else ():
        assert_alternation(record)


def script(simulator: SimulatorServer, model: str, *steps: Step) -> None:
    simulator.state.script(model, Scenario(steps=list(steps)))


def call(name: str, **arguments: Any) -> ToolCallSpec:
    return ToolCallSpec(name=name, arguments=arguments)


async def run_events(agent: Agent, request: AgentRequest) -> list[AgentEvent]:
    return [event async for event in agent.run(request)]


def transcript_of(events: list[AgentEvent]) -> list[Message]:
    """The messages a run added to its transcript, in order."""
    return [e.message for e in events if isinstance(e, MessageAdded)]


def finished(events: list[AgentEvent]) -> RunFinished:
    last = events[-1]
    assert isinstance(last, RunFinished)
    return last


def sent(simulator: SimulatorServer, model: str) -> list[dict[str, Any]]:
    """The bodies of the requests the simulator received for ``model``, in order."""
    return [r.body for r in simulator.state.requests(scenario=model)]


def body_text(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


def offered_tools(body: dict[str, Any]) -> list[str]:
    """Tool names a request offered, whatever its wire format."""
    names = []
    for tool in body.get("tools") or []:
        names.append(tool.get("name") or tool.get("function", {}).get("name"))
    return names


def conversation_roles(record: RecordedRequest) -> list[str]:
    """A request's conversation as chat roles (system, user, assistant, tool)."""
    body = record.body
    roles: list[str] = []
    if record.api == "chat_completions":
        return [m["role"] for m in body["messages"]]
    if record.api == "anthropic_messages":
        for message in body["messages"]:
            blocks = message["content"] if isinstance(message["content"], list) else []
            results = [b for b in blocks if b.get("type") == "tool_result"]
            if message["role"] == "user" and results:
                roles += ["tool"] * len(results)
                if len(results) < len(blocks):
                    roles.append("user")
            else:
                roles.append(message["role"])
        return roles
    items = body["input"] if isinstance(body["input"], list) else [{"role": "user"}]
    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call_output":
            roles.append("tool")
        elif kind in ("function_call", "reasoning"):
            if not roles or roles[-1] != "assistant":
                roles.append("assistant")
        else:
            role = {"developer": "system"}.get(item["role"], item["role"])
            if not (role == "assistant" and roles and roles[-1] == "assistant"):
                roles.append(role)
    return roles


def assert_alternation(record: RecordedRequest) -> None:
    roles = [r for r in conversation_roles(record) if r != "system"]
    assert roles, f"request {record.seq} has no conversation"
    assert roles[0] == "user", f"request {record.seq} starts with {roles[0]}"
    for previous, current in itertools.pairwise(roles):
        assert not (previous == current == "user"), f"two users in a row: {roles}"
        assert not (previous == current == "assistant"), f"two assistants in a row: {roles}"
        if current == "tool":
            assert previous in ("assistant", "tool"), f"a tool result out of place: {roles}"
