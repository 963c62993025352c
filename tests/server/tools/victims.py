"""Another tenant, measured while an attack runs: what "one tenant's tool call must never hurt
another's" means in a test.

While the attacker's request runs, three victims keep going against the same server process:
``/health`` (every 50 ms), a plain chat of another key, and a ``shell`` ``echo`` in another
key's conversation (both on the victim profile, answered by the simulator's default policy, so
no test script is consumed). :func:`watch_victims` returns their latencies; the attack tests
assert generous bounds (CI has two shared cores), and ``bench/tool_attacks.py`` reports the
figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from tests.plain_http import TLS_UNUSED
from tests.server.served import until
from tests.server.tools.conftest import AUTH, KEY_BOB, MODEL, VICTIM_MODEL, ToolServer

T = TypeVar("T")

HEALTH_BOUND_S = 0.5
"""What the tests allow nine /health answers in ten during an attack (the issue's goal is
100 ms; the bound is loose for a busy CI machine, the bench reports the real figure)."""
HEALTH_WORST_S = 2.0
"""What they allow the slowest one: a frozen server stalls them all for longer; one answer
late by a scheduling hiccup of a shared CI machine (0.9 s once) is no freeze."""
VICTIM_BOUND_S = 5.0
"""What the tests allow a victim's chat or shell turn during an attack (goal: 1-2 s)."""


@dataclass(slots=True)
class VictimLatencies:
    """Seconds each victim request took while the attack ran."""

    health: list[float] = field(default_factory=list)
    chat: list[float] = field(default_factory=list)
    shell: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """What went wrong for a victim (a non-200, a missing echo, a transport error)."""

    def worst(self) -> dict[str, float]:
        return {
            name: max(values, default=0.0)
            for name, values in (
                ("health", self.health),
                ("chat", self.chat),
                ("shell", self.shell),
            )
        }

    def assert_unharmed(self) -> None:
        """Every victim answered, correctly, within the bounds, at least once each."""
        assert not self.failures, self.failures
        assert self.health, "/health was never asked"
        assert self.chat, "no victim chat finished"
        assert self.shell, "no victim shell turn finished"
        worst = self.worst()
        assert _ninth_decile(self.health) < HEALTH_BOUND_S, sorted(self.health)[-5:]
        assert worst["health"] < HEALTH_WORST_S, worst
        assert worst["chat"] < VICTIM_BOUND_S, worst
        assert worst["shell"] < VICTIM_BOUND_S, worst


def _ninth_decile(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else max(values)


async def _timed(latencies: list[float], work: Awaitable[Any]) -> Any:
    started = time.monotonic()
    result = await work
    latencies.append(time.monotonic() - started)
    return result


async def _health(client: httpx.AsyncClient, seen: VictimLatencies, stop: asyncio.Event) -> None:
    while not stop.is_set():
        response = await _timed(seen.health, client.get("/health"))
        if response.status_code != 200:
            seen.failures.append(f"/health answered {response.status_code}")
        await asyncio.sleep(0.05)


async def _chat(client: httpx.AsyncClient, seen: VictimLatencies, stop: asyncio.Event) -> None:
    while not stop.is_set():
        response = await _timed(
            seen.chat,
            client.post(
                "/v1/chat/completions",
                json={"model": VICTIM_MODEL, "messages": [{"role": "user", "content": "hi"}]},
            ),
        )
        if response.status_code != 200:
            seen.failures.append(f"chat answered {response.status_code}: {response.text[:200]}")
        await asyncio.sleep(0.1)


async def _shell(client: httpx.AsyncClient, seen: VictimLatencies, stop: asyncio.Event) -> None:
    conversation = f"victim-{uuid.uuid4().hex[:8]}"
    while not stop.is_set():
        marker = uuid.uuid4().hex[:8]
        response = await _timed(
            seen.shell,
            client.post(
                "/v1/chat/completions",
                headers={"x-hermes-session-id": conversation},
                json={
                    "model": VICTIM_MODEL,
                    "messages": [{"role": "user", "content": f"use shell 'echo ok-{marker}'"}],
                },
            ),
        )
        text = response.text
        if response.status_code != 200 or f"ok-{marker}" not in text:
            seen.failures.append(f"shell answered {response.status_code}: {text[:300]}")
        await asyncio.sleep(0.1)


async def watch_victims(server: ToolServer, attack: Awaitable[T]) -> tuple[T, VictimLatencies]:
    """Run ``attack`` while the victims keep asking; its result and what they saw."""
    seen = VictimLatencies()
    stop = asyncio.Event()
    headers = {"authorization": f"Bearer {KEY_BOB}"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=server.base_url, headers=headers, timeout=60
    ) as client:
        victims = [
            asyncio.create_task(victim(client, seen, stop)) for victim in (_health, _chat, _shell)
        ]
        try:
            result = await attack
            # Each victim gets at least one full turn in while the attack's effects last.
            await until(lambda: bool(seen.chat and seen.shell), server=server, seconds=30)
        finally:
            stop.set()
            outcomes = await asyncio.gather(*victims, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            seen.failures.append(f"a victim failed: {outcome!r}")
    _report(seen)
    return result, seen


def _report(seen: VictimLatencies) -> None:
    """With ``HERMES_VICTIMS_REPORT`` set (``bench/tool_attacks.py`` sets it), one JSON line
    per attack there: which test, and the victims' worst and median latencies."""
    path = os.environ.get("HERMES_VICTIMS_REPORT")
    if not path:
        return
    line = {
        "test": os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0],
        "worst_s": seen.worst(),
        "median_s": {
            name: statistics.median(values) if values else 0.0
            for name, values in (
                ("health", seen.health),
                ("chat", seen.chat),
                ("shell", seen.shell),
            )
        },
        "samples": {"health": len(seen.health), "chat": len(seen.chat), "shell": len(seen.shell)},
        "failures": seen.failures,
    }
    with open(path, "a", encoding="utf-8") as report:
        report.write(json.dumps(line) + "\n")


async def baseline(server: ToolServer) -> VictimLatencies:
    """The victims' latencies with no attack running (a couple of turns each)."""

    async def quiet() -> None:
        await asyncio.sleep(1.0)

    _, seen = await watch_victims(server, quiet())
    return seen


async def attacker_turn(http: httpx.AsyncClient, conversation: str) -> str:
    """One turn of the attacker's conversation (its script ends with ``answer("done")``);
    its run's id."""
    response = await http.post(
        "/v1/chat/completions",
        headers={"x-hermes-session-id": conversation},
        json={"model": MODEL, "messages": [{"role": "user", "content": "go"}]},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "done"
    return response.headers["x-hermes-run-id"]


async def assert_run_ended(http: httpx.AsyncClient, run_id: str) -> None:
    """The attacker's run is not left ``running``."""
    run = (await http.get(f"/v1/runs/{run_id}", headers=AUTH)).json()
    assert run["status"] != "running", run
