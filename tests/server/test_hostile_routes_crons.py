"""Malformed and hostile requests to ``/v1/crons`` against a real ``serve`` process: each is a
4xx in the OpenAI envelope, and the key's schedules are as they were. A cron is refused for
anything its runs would be refused for: every firing would fail on it otherwise."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from server.simulator import SimulatorServer
from tests.server.served import Served, http_client, serving, simulated_provider

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

KEY = "sk-hostile-crons-0123456789"
MODEL = "hermes-agent"
CONFIG = """\
server:
  data_dir: {data}
  api_keys: [{{key: {key}, principal: alice}}]
providers:
{provider}profiles:
  - {{id: {model}, providers: [sim]}}
"""
NIGHTLY = {"schedule": "0 3 * * *", "timezone": "UTC", "model": MODEL, "input": "report"}


def nested(levels: int) -> list[Any]:
    made: list[Any] = []
    for _ in range(levels):
        made = [made]
    return made


REFUSED_BY_A_RUN: list[Any] = [
    [{"type": "nonsense"}],
    {"a": 1},
    None,
    # Kept, it made every listing of the key's crons a 500.
    [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "x", "x": nested(300)}],
        }
    ],
]
BAD_CREATES: list[Any] = [
    *({"input": refused} for refused in REFUSED_BY_A_RUN),
    {"schedule": 123},
    {"schedule": "* * * * * * * *"},
    {"schedule": "*/0 * * * *"},
    {"schedule": "0-99999999999999999999 * * * *"},
    {"schedule": "0 0 31 2 *"},
    {"timezone": "../../etc/passwd"},
    {"timezone": "x" * 5000},
    {"metadata": {"k" * 100: "v"}},
    {"metadata": {"hermes_cron_id": "cron_other"}},
    {"paused": "yes"},
    {"webhook": {"url": "file:///etc/passwd", "secret": "whsec_AAAA"}},
    {"model": "no-such-model"},
    {"surprise": 1},
]
BAD_RAW = [
    b"{not json",
    b"null",
    b"[]",
    b"1e309",
    b'{"schedule": "\\ud800 * * * *", "timezone": "UTC", "model": "hermes-agent", "input": "x"}',
    b'{"schedule": "0 3 * * *", "timezone": "UTC", "model": "hermes-agent", "input": "\\u0000"}',
    b'{"schedule": "0 3 * * *", "timezone": "UTC", "model": "hermes-agent", "input": "x", '
    b'"paused": 1e309}',
]
BAD_UPDATES: list[Any] = [
    *({"input": refused} for refused in REFUSED_BY_A_RUN),
    {"schedule": None},
    {"paused": None},
    {"timezone": "Nowhere/Never"},
    [],
    "x",
]


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("hostile-crons")
    provider = simulated_provider(_simulator_server, "hostile-crons-upstream")
    with serving(data, CONFIG.format(data=data, key=KEY, provider=provider, model=MODEL)) as s:
        yield s


@pytest.fixture
async def http(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(served.base_url, KEY) as client:
        yield client


@pytest.fixture
async def cron(http: httpx.AsyncClient) -> AsyncIterator[dict[str, Any]]:
    made = await http.post("/v1/crons", json=NIGHTLY)
    assert made.status_code == 200, made.text
    yield made.json()
    await http.delete(f"/v1/crons/{made.json()['id']}")


def refused_with_the_envelope(answer: httpx.Response) -> bool:
    body = answer.json()
    envelope = set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"])
    return 400 <= answer.status_code < 500 and envelope


async def _crons(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    listed = await http.get("/v1/crons?limit=100")
    assert listed.status_code == 200, listed.text
    crons: list[dict[str, Any]] = listed.json()["data"]
    return crons


@pytest.mark.parametrize("change", BAD_CREATES)
async def test_a_bad_cron_is_refused_and_nothing_is_scheduled(
    http: httpx.AsyncClient, change: Any
) -> None:
    before = await _crons(http)

    answer = await http.post("/v1/crons", json={**NIGHTLY, **change})

    assert refused_with_the_envelope(answer), (answer.status_code, answer.text)
    assert await _crons(http) == before


@pytest.mark.parametrize("body", BAD_RAW)
async def test_a_body_that_is_no_cron_is_refused_and_nothing_is_scheduled(
    http: httpx.AsyncClient, body: bytes
) -> None:
    before = await _crons(http)

    answer = await http.post(
        "/v1/crons", content=body, headers={"content-type": "application/json"}
    )

    assert refused_with_the_envelope(answer), (answer.status_code, answer.text)
    assert await _crons(http) == before


@pytest.mark.parametrize("body", BAD_UPDATES)
async def test_a_bad_change_is_refused_and_the_cron_is_as_it_was(
    http: httpx.AsyncClient, cron: dict[str, Any], body: Any
) -> None:
    answer = await http.post(f"/v1/crons/{cron['id']}", json=body)

    assert refused_with_the_envelope(answer), (answer.status_code, answer.text)
    assert (await http.get(f"/v1/crons/{cron['id']}")).json() == cron


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/crons?limit=0"),
        ("GET", "/v1/crons?limit=101"),
        ("GET", "/v1/crons?limit=-1"),
        ("GET", "/v1/crons?limit=1e309"),
        ("GET", "/v1/crons?limit=9223372036854775808"),
        ("GET", "/v1/crons?after=" + "x" * 100),
        ("GET", "/v1/crons?after=%00"),
        ("GET", "/v1/crons/%00"),
        ("GET", "/v1/crons/" + "x" * 5000),
        ("POST", "/v1/crons/cron_missing/pause"),
        ("DELETE", "/v1/crons/cron_missing"),
        ("PUT", "/v1/crons"),
        ("PATCH", "/v1/crons/cron_missing"),
    ],
)
async def test_a_bad_cron_url_is_a_4xx_with_the_envelope(
    http: httpx.AsyncClient, method: str, path: str
) -> None:
    answer = await http.request(method, path)

    assert refused_with_the_envelope(answer), (answer.status_code, answer.text)
