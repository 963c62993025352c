"""``GET /v1/usage`` in-process, on a ledger written beforehand: a key reads its own usage (the
last 30 days by day unless asked otherwise), grouped and filtered as asked; only an admin key
reads another key's, or every key's; malformed parameters are 400 envelopes."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from hermes_core.persistence import Store, UsageEntry, sqlite_url
from hermes_core.usage import Usage
from server.app import create_app
from server.http.auth import KeyRing, Principal
from server.http.threaded import ThreadedServer
from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, make_services

KEY_ADMIN = "sk-admin-0123456789abcdef"
TODAY = datetime.datetime.now(datetime.UTC).date()


def _day(days_ago: int) -> str:
    return (TODAY - datetime.timedelta(days=days_ago)).isoformat()


def _entry(owner: str, *, days_ago: int = 0, tokens: int = 100, **changes: Any) -> UsageEntry:
    values: dict[str, Any] = {
        "day": _day(days_ago),
        "owner": owner,
        "end_user": "",
        "profile": "hermes-agent",
        "provider": "sim",
        "model": "gpt-4o",
        "calls": 1,
        "usage": Usage(
            input_tokens=tokens,
            cache_read_tokens=tokens // 2,
            cache_write_tokens=tokens // 4,
            output_tokens=tokens // 10,
            reasoning_tokens=tokens // 20,
        ),
        "cost_usd": tokens / 1000,
        **changes,
    }
    return UsageEntry(**values)


LEDGER = [
    _entry("alice", end_user="ann"),
    _entry("alice", end_user="ann", days_ago=1, tokens=200),
    _entry("alice", end_user="ben", model="claude", provider="backup", tokens=1000),
    _entry("alice", tokens=20),
    _entry("alice", days_ago=40, tokens=5000),  # past the default 30 days
    _entry("bob", end_user="ann", profile="other", tokens=300),
]


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    url = sqlite_url(tmp_path_factory.mktemp("usage") / "hermes.db")

    async def write_ledger() -> None:
        store = await Store.open(url)
        store.usage.add(LEDGER)
        await store.close()

    asyncio.run(write_ledger())
    keyring = KeyRing(
        {
            KEY_ALICE: Principal("alice", trusted_front_end=True),
            KEY_BOB: "bob",
            KEY_ADMIN: Principal("root", admin=True),
        }
    )
    services = make_services(_simulator_server, database_url=url, keyring=keyring)
    with ThreadedServer(create_app(services)) as server:
        yield server


@pytest.fixture
async def http(served: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=served.base_url, timeout=30) as client:
        yield client


async def usage(http: httpx.AsyncClient, api_key: str = KEY_ALICE, **params: str) -> dict[str, Any]:
    response = await http.get(
        "/v1/usage", params=params, headers={"authorization": f"Bearer {api_key}"}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _tokens(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each line's grouped fields (in order), then its total tokens."""
    groups = report["group_by"]
    return [(*(line[name] for name in groups), line["total_tokens"]) for line in report["data"]]


async def test_a_key_reads_its_own_last_30_days_by_day(http: httpx.AsyncClient) -> None:
    report = await usage(http)

    assert report["group_by"] == ["day"]
    assert (report["start_day"], report["end_day"]) == (_day(29), _day(0))
    assert _tokens(report) == [(_day(1), 220), (_day(0), 110 + 1100 + 22)]
    assert report["totals"] == {
        "calls": 4,
        "input_tokens": 1320,
        "cache_read_tokens": 660,
        "cache_write_tokens": 330,
        "output_tokens": 132,
        "reasoning_tokens": 66,
        "total_tokens": 1452,
        "cost_usd": pytest.approx(1.32),
    }
    assert report["has_more"] is False


async def test_usage_is_grouped_and_filtered_as_asked(http: httpx.AsyncClient) -> None:
    by_user = await usage(http, group_by="end_user,provider,model")
    ann = await usage(http, end_user="ann", group_by="day")
    own = await usage(http, end_user="", group_by="")
    claude = await usage(http, model="claude", **{"from": _day(0), "to": _day(0)})
    everything = await usage(http, group_by="end_user", **{"from": _day(60)})

    assert _tokens(by_user) == [
        (None, "sim", "gpt-4o", 22),
        ("ann", "sim", "gpt-4o", 330),
        ("ben", "backup", "claude", 1100),
    ]
    assert _tokens(ann) == [(_day(1), 220), (_day(0), 110)]
    assert [line["total_tokens"] for line in own["data"]] == [22]
    assert own["totals"]["total_tokens"] == 22
    assert _tokens(claude) == [(_day(0), 1100)]
    assert _tokens(everything) == [(None, 5500 + 22), ("ann", 330), ("ben", 1100)]


async def test_only_an_admin_key_reads_another_keys_usage(http: httpx.AsyncClient) -> None:
    refused = await http.get(
        "/v1/usage", params={"key": "alice"}, headers={"authorization": f"Bearer {KEY_BOB}"}
    )
    own = await usage(http, KEY_BOB, key="bob")
    every_key = await usage(http, KEY_ADMIN, group_by="key,profile")
    alice = await usage(http, KEY_ADMIN, key="alice", group_by="")

    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "admin_key_required"
    assert own["totals"]["total_tokens"] == 330
    assert _tokens(every_key) == [("alice", "hermes-agent", 1452), ("bob", "other", 330)]
    assert alice["totals"]["total_tokens"] == 1452


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"from": "2026-13-01"}, "from"),
        ({"from": "2026-02-30"}, "from"),
        ({"to": "yesterday"}, "to"),
        ({"from": "٢٠٢٦-٠١-٠١"}, "from"),
        ({"from": "2026-01-01T00:00"}, "from"),
        ({"from": _day(0), "to": _day(1)}, "from"),
        ({"group_by": "day,week"}, "group_by"),
        ({"group_by": "x" * 5000}, "group_by"),
        ({"end_user": "u" * 300}, "end_user"),
    ],
)
async def test_malformed_parameters_are_400_envelopes(
    http: httpx.AsyncClient, params: dict[str, str], param: str
) -> None:
    response = await http.get(
        "/v1/usage", params=params, headers={"authorization": f"Bearer {KEY_ALICE}"}
    )

    assert response.status_code == 400, response.text
    # The framework's own checks (a length) name it as FastAPI does: ``query.<name>``.
    assert response.json()["error"]["param"] in {param, f"query.{param}"}


async def test_a_caller_without_a_key_is_refused(http: httpx.AsyncClient) -> None:
    response = await http.get("/v1/usage")

    assert response.status_code == 401


async def test_a_to_day_near_the_calendars_start_is_answered_not_a_500(
    http: httpx.AsyncClient,
) -> None:
    # The default 'from' is 29 days before 'to': before year 1 it was an OverflowError.
    response = await http.get(
        "/v1/usage", params={"to": "0001-01-05"}, headers={"authorization": f"Bearer {KEY_ALICE}"}
    )

    assert response.status_code == 200, response.text
    answered = response.json()
    assert (answered["start_day"], answered["end_day"], answered["data"]) == (
        "0001-01-01",
        "0001-01-05",
        [],
    )
