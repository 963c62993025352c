"""``/v1/crons`` against a real ``serve`` process, with plain HTTP (no SDK has crons): a key
makes, lists, reads, changes, pauses, resumes and deletes its crons; another key sees none of
them; a bad expression or time zone is a 400; an every-second cron fires runs that
``GET /v1/runs`` lists with the cron's id, whose webhook the official SDK verifies; and after
a restart, the times missed while the server was down are fired once, for the latest."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from hermes_core.persistence import Store, sqlite_url
from server.crons.scheduler import CRON_ID_KEY
from server.simulator import SimulatorServer
from tests.processes import free_port, hermes_command
from tests.server.served import answer, http_client, script, until
from tests.server.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.slow

KEY = "sk-crons-0123456789abcdef"
OTHER_KEY = "sk-crons-other-0123456789"
MODEL = "crons-upstream"
SECRET = "whsec_" + base64.b64encode(b"the cron's own secret, 32 bytes.").decode()


class Served:
    def __init__(self, process: Any, base: str, log: Path) -> None:
        self.process, self.base, self.log = process, base, log

    def alive(self) -> bool:
        return bool(self.process.poll() is None)


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("crons")
    (directory / "hermes.yaml").write_text(_config(_simulator_server))
    with _serve(directory) as running:
        yield running


def _config(simulator: SimulatorServer) -> str:
    return f"""
server:
  api_keys: [{{principal: alice, key: {KEY}}}, {{principal: bob, key: {OTHER_KEY}}}]
web:
  allow: ["127.0.0.1"]
providers:
  - name: sim
    model: {MODEL}
    base_url: "{simulator.base_url}/v1"
    api_mode: chat_completions
profiles:
  - {{id: hermes-agent, providers: [sim]}}
"""


@contextmanager
def _serve(directory: Path) -> Iterator[Served]:
    env = {"HERMES_DATA_DIR": str(directory / "data")}
    port, log = free_port(), directory / "serve.log"
    config = directory / "hermes.yaml"
    with hermes_command("serve", "--config", str(config), port=port, env=env, log=log) as process:
        yield Served(process, f"http://127.0.0.1:{port}", log)


NIGHTLY = {
    "schedule": "0 3 * * *",
    "timezone": "Europe/Paris",
    "model": "hermes-agent",
    "input": "Summarise the night's logs.",
    "metadata": {"job": "nightly"},
}


async def _create(http: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    made = await http.post("/v1/crons", json={**NIGHTLY, **body})
    assert made.status_code == 200, made.text
    cron: dict[str, Any] = made.json()
    return cron


async def test_a_key_makes_reads_changes_pauses_and_deletes_its_crons(served: Served) -> None:
    async with http_client(served.base, KEY) as http:
        cron = await _create(http)
        assert (cron["object"], cron["schedule"], cron["timezone"]) == (
            "hermes.cron",
            "0 3 * * *",
            "Europe/Paris",
        )
        assert (cron["session"], cron["paused"], cron["metadata"]) == (
            None,
            False,
            {"job": "nightly"},
        )
        assert cron["next_fire_at"] > cron["created_at"]
        assert (await http.get(f"/v1/crons/{cron['id']}")).json() == cron

        changed = (
            await http.post(
                f"/v1/crons/{cron['id']}", json={"schedule": "*/5 * * * *", "session": "ops"}
            )
        ).json()
        assert (changed["schedule"], changed["session"], changed["input"]) == (
            "*/5 * * * *",
            "ops",
            NIGHTLY["input"],
        )
        assert changed["next_fire_at"] % 300 == 0

        paused = (await http.post(f"/v1/crons/{cron['id']}/pause")).json()
        assert (paused["paused"], paused["next_fire_at"]) == (True, None)
        resumed = (await http.post(f"/v1/crons/{cron['id']}/resume")).json()
        assert resumed["paused"] is False
        assert resumed["next_fire_at"] is not None

        deleted = await http.delete(f"/v1/crons/{cron['id']}")
        assert deleted.json() == {
            "id": cron["id"],
            "object": "hermes.cron.deleted",
            "deleted": True,
        }
        assert (await http.get(f"/v1/crons/{cron['id']}")).status_code == 404


async def test_crons_are_listed_newest_first_a_page_at_a_time(served: Served) -> None:
    async with http_client(served.base, KEY) as http:
        made = [(await _create(http, input=f"job {n}"))["id"] for n in range(3)]
        first = (await http.get("/v1/crons", params={"limit": 2})).json()
        rest = (await http.get("/v1/crons", params={"limit": 2, "after": first["last_id"]})).json()
        listed = [c["id"] for c in first["data"] + rest["data"]]
        assert listed[:3] == made[::-1]
        assert first["has_more"] is True
        for cron_id in made:
            await http.delete(f"/v1/crons/{cron_id}")


async def test_another_key_sees_none_of_a_keys_crons(served: Served) -> None:
    async with http_client(served.base, KEY) as http:
        cron = await _create(http)
    async with http_client(served.base, OTHER_KEY) as other:
        for method, path in (
            ("GET", f"/v1/crons/{cron['id']}"),
            ("POST", f"/v1/crons/{cron['id']}/pause"),
            ("DELETE", f"/v1/crons/{cron['id']}"),
        ):
            answer_ = await other.request(method, path)
            assert answer_.status_code == 404, (method, path, answer_.text)
            assert answer_.json()["error"]["code"] == "cron_not_found"
        changed = await other.post(f"/v1/crons/{cron['id']}", json={"input": "mine now"})
        assert changed.status_code == 404
        assert all(c["id"] != cron["id"] for c in (await other.get("/v1/crons")).json()["data"])
    async with http_client(served.base, KEY) as http:
        assert (await http.delete(f"/v1/crons/{cron['id']}")).status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"schedule": "61 * * * *"}, "schedule"),
        ({"schedule": "every day"}, "schedule"),
        ({"schedule": "0 0 30 2 *"}, "schedule"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"timezone": "America"}, "timezone"),
        ({"schedule": "\u00b2 * * * *"}, "schedule"),
        ({"metadata": {CRON_ID_KEY: "x"}}, "metadata"),
        ({"webhook": {"url": "http://10.0.0.1/hook", "secret": SECRET}}, "webhook.url"),
    ],
)
async def test_a_bad_cron_is_refused_with_a_400_naming_its_field(
    served: Served, body: dict[str, Any], param: str
) -> None:
    async with http_client(served.base, KEY) as http:
        refused = await http.post("/v1/crons", json={**NIGHTLY, **body})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == param


async def test_an_every_second_cron_fires_runs_listed_with_its_id_and_its_webhook_verifies(
    served: Served, simulator: SimulatorServer, receiver: WebhookReceiver
) -> None:
    script(simulator, MODEL, *[answer("Logs read.") for _ in range(20)])
    async with http_client(served.base, KEY) as http:
        cron = await _create(
            http,
            schedule="* * * * * *",
            timezone="UTC",
            webhook={"url": receiver.url("cron"), "secret": SECRET},
        )

        async def fired() -> list[dict[str, Any]]:
            runs = (await http.get("/v1/runs", params={"limit": 100})).json()["data"]
            return [r for r in runs if (r["metadata"] or {}).get(CRON_ID_KEY) == cron["id"]]

        assert await until(lambda: _at_least(fired, 2), server=served)
        await http.post(f"/v1/crons/{cron['id']}/pause")
        runs = await fired()
        assert all(r["endpoint"] == "runs" and r["metadata"]["job"] == "nightly" for r in runs)
        assert len({r["session_id"] for r in runs}) == len(runs)  # a new session each time
        assert await until(lambda: bool(receiver.delivered("cron")), server=served)
    event = OpenAI(api_key="unused").webhooks.unwrap(
        receiver.delivered("cron")[0].body, receiver.delivered("cron")[0].headers, secret=SECRET
    )
    assert str(event.type) == "run.completed"
    assert str(getattr(event.data, "id", "")) in {r["id"] for r in runs}


async def _at_least(found: Any, count: int) -> bool:
    return len(await found()) >= count


async def test_times_missed_while_the_server_was_down_fire_once_for_the_latest(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    script(simulator, MODEL, *[answer("Tick.") for _ in range(40)])
    (tmp_path / "hermes.yaml").write_text(_config(simulator))
    with _serve(tmp_path) as first:
        async with http_client(first.base, KEY) as http:
            cron = await _create(http, schedule="* * * * * *", timezone="UTC")

            async def fired_once() -> bool:
                return bool(await _cron_runs(http, cron["id"]))

            assert await until(fired_once, server=first)
    stopped_at = time.time()
    store = await Store.open(sqlite_url(tmp_path / "data" / "hermes.db"), migrate=False)
    try:
        before = {f.scheduled_at for f in await store.crons.firings("alice", cron["id"])}
    finally:
        await store.close()
    # Down for a few seconds: several every-second times pass with no server to fire them.
    assert await until(lambda: time.time() > stopped_at + 4, server=_Alive())
    with _serve(tmp_path) as again:
        async with http_client(again.base, KEY) as http:

            async def fired_again() -> bool:
                return len(await _cron_runs(http, cron["id"])) > len(before)

            assert await until(fired_again, server=again)
            await http.post(f"/v1/crons/{cron['id']}/pause")
    store = await Store.open(sqlite_url(tmp_path / "data" / "hermes.db"), migrate=False)
    try:
        fired = await store.crons.firings("alice", cron["id"])
        new = [f for f in fired if f.scheduled_at not in before]
    finally:
        await store.close()
    back_at = min(f.created_at for f in new)  # the restarted server's first claim
    missed = [f.scheduled_at for f in new if f.scheduled_at <= back_at]
    # The times of the outage were not replayed: one firing, for the latest of them.
    assert len(missed) == 1
    assert missed[0] >= stopped_at + 3


class _Alive:
    """Nothing runs while the server is down: nothing to die meanwhile."""

    log = Path("/dev/null")

    def alive(self) -> bool:
        return True


async def _cron_runs(http: httpx.AsyncClient, cron_id: str) -> list[dict[str, Any]]:
    runs = (await http.get("/v1/runs", params={"limit": 100})).json()["data"]
    return [r for r in runs if (r["metadata"] or {}).get(CRON_ID_KEY) == cron_id]


async def test_a_key_keeps_at_most_its_cron_cap_and_may_make_more_once_some_are_deleted(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    (tmp_path / "hermes.yaml").write_text(_config(simulator) + "limits: {crons_per_key: 2}\n")
    with _serve(tmp_path) as capped:
        async with http_client(capped.base, KEY) as http:
            made = [await _create(http, input=f"job {n}") for n in range(2)]

            refused = await http.post("/v1/crons", json=NIGHTLY)
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["code"] == "too_many_crons"
            async with http_client(capped.base, OTHER_KEY) as other:  # a cap per key
                assert (await other.post("/v1/crons", json=NIGHTLY)).status_code == 200

            assert (await http.delete(f"/v1/crons/{made[0]['id']}")).status_code == 200
            assert (await http.post("/v1/crons", json=NIGHTLY)).status_code == 200
