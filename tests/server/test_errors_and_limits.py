"""Every error class answers in the OpenAI envelope with the right status; limits hold."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

import httpx
import openai
import pytest

from hermes_core.agent import Agent
from server.http.threaded import ThreadedServer
from server.profiles import Profile
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_CAROL, UPSTREAM_MODEL

HELLO = [{"role": "user", "content": "hello"}]
ALICE = {"authorization": f"Bearer {KEY_ALICE}"}


def _envelope(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


async def _post(hermes: ThreadedServer, body: Any, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        return await http.post(
            "/v1/chat/completions", headers=kwargs.pop("headers", ALICE), json=body, **kwargs
        )


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer wrong"}, {"authorization": "Basic abc"}],
    ids=["missing", "wrong", "not-bearer"],
)
async def test_a_missing_or_wrong_key_is_a_401(
    hermes: ThreadedServer, headers: dict[str, str]
) -> None:
    response = await _post(hermes, {"model": "hermes-agent", "messages": HELLO}, headers=headers)
    assert response.status_code == 401
    assert _envelope(response)["type"] == "authentication_error"


async def test_the_sdk_raises_authentication_error(hermes: ThreadedServer) -> None:
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=hermes.base_url + "/v1",
        api_key="nope",
        max_retries=0,
    ) as sdk:
        with pytest.raises(openai.AuthenticationError):
            await sdk.models.list()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "hermes-agent", "messages": HELLO, "temperature": 5}, "temperature"),
        ({"model": "hermes-agent", "messages": []}, "messages"),
        ({"model": "hermes-agent"}, "messages"),
        ({"messages": HELLO}, "model"),
        (
            {"model": "hermes-agent", "messages": [{"role": "wizard", "content": "x"}]},
            "messages.0.role",
        ),
        ({"model": "hermes-agent", "messages": HELLO, "n": 3}, "n"),
        ({"model": "hermes-agent", "messages": HELLO, "tool_choice": {"type": "x"}}, "tool_choice"),
        ({"model": "hermes-agent", "messages": [{"role": "tool", "content": "x"}]}, "messages"),
        ({"model": "hermes-agent", "messages": HELLO, "stream": "yes"}, "stream"),
        (
            {"model": "hermes-agent", "messages": HELLO, "stream_options": {"include_usage": True}},
            "stream_options",
        ),
    ],
    ids=[
        "temperature",
        "empty-messages",
        "no-messages",
        "no-model",
        "bad-role",
        "n",
        "tool-choice",
        "tool-without-id",
        "stream-not-a-boolean",
        "stream-options-without-stream",
    ],
)
async def test_invalid_requests_are_a_400_naming_the_param(
    hermes: ThreadedServer, body: dict[str, Any], param: str
) -> None:
    response = await _post(hermes, body)
    assert response.status_code == 400
    error = _envelope(response)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


async def test_a_body_that_is_not_json_is_a_400(hermes: ThreadedServer) -> None:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        response = await http.post(
            "/v1/chat/completions",
            headers={**ALICE, "content-type": "application/json"},
            content=b"{not json",
        )
    assert response.status_code == 400
    _envelope(response)


async def test_an_unknown_model_is_a_404_model_not_found(hermes: ThreadedServer) -> None:
    response = await _post(hermes, {"model": "gpt-unknown", "messages": HELLO})
    assert response.status_code == 404
    assert _envelope(response)["code"] == "model_not_found"


async def test_a_body_over_the_limit_is_a_413(hermes: ThreadedServer) -> None:
    huge = [{"role": "user", "content": "x" * 300_000}]
    response = await _post(hermes, {"model": "hermes-agent", "messages": huge})
    assert response.status_code == 413
    assert _envelope(response)["code"] == "body_too_large"


async def test_unknown_request_fields_are_ignored(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="fine"))]))
    body = {"model": "hermes-agent", "messages": HELLO, "frobnicate": True, "seed": 7}
    response = await _post(hermes, body)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "fine"


async def test_runs_over_the_per_key_cap_are_a_429_with_retry_after(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    slow = Step(reply=Reply(text="slow " * 20, chunk_count=20), fault=Fault(chunk_delay=0.1))
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[slow] * 8))
    streaming = {"model": "hermes-agent", "messages": HELLO, "stream": True}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url, timeout=30) as http:
        held = [
            await http.send(
                http.build_request("POST", "/v1/chat/completions", headers=ALICE, json=streaming),
                stream=True,
            )
            for _ in range(4)
        ]
        refused = await http.post("/v1/chat/completions", headers=ALICE, json=streaming)
        for response in held:
            await response.aclose()
    assert [r.status_code for r in held] == [200] * 4
    assert refused.status_code == 429
    assert refused.headers["retry-after"]
    assert _envelope(refused)["code"] == "rate_limit_exceeded"
    await asyncio.sleep(0.5)  # let the interrupted runs finish before the next test


async def test_stopping_an_unknown_run_is_a_404(hermes: ThreadedServer) -> None:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        response = await http.post("/v1/runs/run_nope/stop", headers=ALICE)
    assert response.status_code == 404
    assert _envelope(response)["code"] == "run_not_found"


async def test_a_key_restricted_to_other_models_gets_a_403_and_does_not_see_them(
    hermes: ThreadedServer,
) -> None:
    carol = {"authorization": f"Bearer {KEY_CAROL}"}
    response = await _post(hermes, {"model": "hermes-agent", "messages": HELLO}, headers=carol)
    assert response.status_code == 403
    error = _envelope(response)
    assert (error["type"], error["code"], error["param"]) == (
        "permission_error",
        "model_not_allowed",
        "model",
    )
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        listed = (await http.get("/v1/models", headers=carol)).json()["data"]
        single = await http.get("/v1/models/hermes-agent", headers=carol)
    assert listed == []
    assert single.status_code == 404


async def test_a_run_that_fails_because_the_disk_is_full_is_a_507_not_a_502(
    hermes: ThreadedServer, simulator: SimulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store cannot save the tool call before the tool runs: the run ends failed, and the
    # waiting client is told to retry later, not that an upstream failed.
    call = Reply(tool_calls=[ToolCallSpec(name="lookup", arguments={"word": "disk"})])
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=call)]))
    made = Profile.new_agent

    async def full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def agent_on_a_full_disk(self: Profile, **options: Any) -> Agent:
        agent = made(self, **options)
        agent.checkpoint = full
        return agent

    monkeypatch.setattr(Profile, "new_agent", agent_on_a_full_disk)
    response = await _post(hermes, {"model": "hermes-agent", "messages": HELLO})

    assert response.status_code == 507, response.text
    assert _envelope(response)["code"] == "insufficient_storage"
    assert response.headers["retry-after"] == "30"
    assert response.headers["x-hermes-run-id"].startswith("run_")
