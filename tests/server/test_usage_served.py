"""The usage ledger against a real ``serve`` process, on SQLite and on PostgreSQL: after runs of
two keys, two end users of one (named by ``X-Hermes-Memory-Scope``), two provider models and
both endpoints, ``GET /v1/usage`` totals per key, end user, model and day equal the sums of the
runs' ``usage`` (and ``cost_usd``) as ``GET /v1/runs/{id}`` reports them; each answer's
``hermes.cost_usd`` is its run's."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.databases import ENGINES, fresh_database
from tests.server.served import Served, http_client, serving, simulated_provider

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

UPSTREAM_A = f"hermes-simulator-a-{uuid.uuid4().hex[:8]}"
UPSTREAM_B = f"hermes-simulator-b-{uuid.uuid4().hex[:8]}"
"""Priced by the ``hermes-simulator`` prefix; new per test session (the simulator scripts by
model)."""
KEY_TEAM = f"sk-usage-team-{uuid.uuid4().hex}"
KEY_SOLO = f"sk-usage-solo-{uuid.uuid4().hex}"
KEY_ADMIN = f"sk-usage-admin-{uuid.uuid4().hex}"
TOKENS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
)

CONFIG = """\
server:
  data_dir: {data}
  database_url: "{database}"
  api_keys:
    - {{key: {team}, principal: team, trusted_front_end: true}}
    - {{key: {solo}, principal: solo}}
    - {{key: {admin}, principal: root, admin: true}}
providers:
{provider_a}{provider_b}prices:
  hermes-simulator: {{input: 1, output: 2}}
profiles:
  - {{id: agent-a, providers: [sim-a]}}
  - {{id: agent-b, providers: [sim-b]}}
"""


@pytest.fixture(params=ENGINES)
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def served(simulator: SimulatorServer, database: str, tmp_path: Path) -> Iterator[Served]:
    data = tmp_path / "data"
    data.mkdir()
    config = CONFIG.format(
        data=data,
        database=database,
        team=KEY_TEAM,
        solo=KEY_SOLO,
        admin=KEY_ADMIN,
        provider_a=simulated_provider(simulator, UPSTREAM_A, name="sim-a"),
        provider_b=simulated_provider(simulator, UPSTREAM_B, name="sim-b"),
    )
    if not database.startswith("sqlite"):  # migrated on start on SQLite only
        path = tmp_path / "upgrade.yaml"
        path.write_text(config)
        upgrade = [sys.executable, "-m", "server.cli", "db", "upgrade", "--config", str(path)]
        subprocess.run(upgrade, env={**os.environ}, check=True, capture_output=True)
    for upstream, words in ((UPSTREAM_A, 30), (UPSTREAM_B, 70)):
        reply = Reply(text="Done. " * words, output_tokens=words)
        simulator.state.script(upstream, Scenario(steps=[Step(reply=reply, repeat=100)]))
    with serving(data, config) as server:
        yield server


RUNS = [
    # (key, end user, profile, endpoint)
    (KEY_TEAM, "ann", "agent-a", "chat"),
    (KEY_TEAM, "ann", "agent-b", "responses"),
    (KEY_TEAM, "ann", "agent-a", "chat"),
    (KEY_TEAM, "ben", "agent-b", "chat"),
    (KEY_TEAM, None, "agent-a", "responses"),
    (KEY_SOLO, None, "agent-b", "chat"),
]


async def _run(
    base_url: str, key: str, end_user: str | None, profile: str, endpoint: str, n: int
) -> dict[str, Any]:
    """One run; what ``GET /v1/runs/{id}`` says of it, and its answer's ``hermes``."""
    headers = {"x-hermes-memory-scope": end_user} if end_user else {}
    text = f"Question {n}: " + "tell me more " * n  # prompts of different lengths
    async with http_client(base_url, key) as http:
        if endpoint == "chat":
            body: dict[str, Any] = {
                "model": profile,
                "messages": [{"role": "user", "content": text}],
            }
            answer = await http.post("/v1/chat/completions", json=body, headers=headers)
        else:
            body = {"model": profile, "input": text}
            answer = await http.post("/v1/responses", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        hermes = answer.json()["hermes"]
        run = await http.get(f"/v1/runs/{hermes['run_id']}")
        assert run.status_code == 200, run.text
    return {**run.json(), "answer_cost_usd": hermes["cost_usd"]}


async def _usage(base_url: str, key: str, **params: str) -> dict[str, Any]:
    async with http_client(base_url, key) as http:
        response = await http.get("/v1/usage", params=params)
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


def _sums(runs: list[dict[str, Any]], group: Any) -> dict[Any, Counter[str]]:
    sums: dict[Any, Counter[str]] = defaultdict(Counter)
    for run in runs:
        for name in TOKENS:
            sums[group(run)][name] += run["usage"][name]
    return dict(sums)


def _ledger(report: dict[str, Any], *fields: str) -> dict[Any, Counter[str]]:
    return {
        tuple(line[f] for f in fields) if len(fields) > 1 else line[fields[0]]: Counter(
            {name: line[name] for name in TOKENS}
        )
        for line in report["data"]
    }


async def test_usage_totals_per_key_end_user_model_and_day_match_the_runs(
    served: Served,
) -> None:
    runs = [
        (key, await _run(served.base_url, key, user, profile, endpoint, n))
        for n, (key, user, profile, endpoint) in enumerate(RUNS)
    ]
    team = [run for key, run in runs if key == KEY_TEAM]
    solo = [run for key, run in runs if key == KEY_SOLO]

    for _key, run in runs:
        assert run["status"] == "completed"
        assert run["cost_usd"] > 0
        assert run["cost_usd"] == pytest.approx(
            (run["usage"]["input_tokens"] + 2 * run["usage"]["output_tokens"]) / 1e6
        )
        assert run["answer_cost_usd"] == run["cost_usd"]
    assert [run["end_user"] for run in team] == ["ann", "ann", "ann", "ben", None]

    by_user_model = await _usage(served.base_url, KEY_TEAM, group_by="end_user,profile,model")
    by_day = await _usage(served.base_url, KEY_TEAM, group_by="day")
    by_key = await _usage(served.base_url, KEY_ADMIN, group_by="key")
    ann = await _usage(served.base_url, KEY_TEAM, end_user="ann", group_by="")
    solo_own = await _usage(served.base_url, KEY_SOLO, group_by="model")
    model = {"agent-a": UPSTREAM_A, "agent-b": UPSTREAM_B}

    assert _ledger(by_user_model, "end_user", "profile", "model") == _sums(
        team, lambda run: (run["end_user"], run["model"], model[run["model"]])
    )
    assert _ledger(by_day, "day") == _sums(
        team, lambda run: by_day["data"][0]["day"]
    )  # every run ended today (UTC), unless the test straddled midnight
    assert _ledger(by_key, "key") == _sums(
        [run for _key, run in runs], lambda run: "team" if run in team else "solo"
    )
    assert {"ann": Counter({name: ann["totals"][name] for name in TOKENS})} == _sums(
        [run for run in team if run["end_user"] == "ann"], lambda run: run["end_user"]
    )
    assert _ledger(solo_own, "model") == _sums(solo, lambda run: UPSTREAM_B)
    assert by_key["totals"]["calls"] == len(RUNS)
    assert by_key["totals"]["cost_usd"] == pytest.approx(sum(run["cost_usd"] for _k, run in runs))
    assert by_user_model["totals"]["cost_usd"] == pytest.approx(
        sum(run["cost_usd"] for run in team)
    )
