"""Who sees what on the later routes, against a real ``serve`` process: another key's objects
answer exactly as unknown ids do, on every route and as a pagination cursor, and are left as
they were; and behind one trusted key, an end user neither reads nor changes the key's
schedules, changes none of the skills it shares, and learns nothing of another end user's
usage, webhook deliveries or answers (under the same Idempotency-Key) (docs/end-users.md)."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from server.http.idempotency import END_USER_HEADERS
from server.serving.end_users import OPENWEBUI_USER_HEADER, SCOPE_HEADER
from server.simulator import SimulatorServer
from tests.processes import free_port
from tests.server.served import (
    Served,
    answer,
    call,
    http_client,
    script,
    serving,
    simulated_provider,
    until,
)

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

UPSTREAM = "isolation-upstream"
ALICE = "sk-isolation-alice-0123456789"
BOB = "sk-isolation-bob-0123456789"
MODEL = "hermes-agent"
ANN = {"x-openwebui-user-id": "ann"}
BEN = {"x-openwebui-user-id": "ben"}
SECRET = "whsec_" + base64.b64encode(b"an end user's own secret, 32 b.").decode()
SKILL = b"---\nname: alices-skill\ndescription: Alice's own.\n---\nDo it.\n"

CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {alice}, principal: alice, trusted_front_end: true}}
    - {{key: {bob}, principal: bob}}
web:
  allow: ["127.0.0.1"]
providers:
{provider}profiles:
  - {{id: {model}, providers: [sim], tools: [files]}}
"""
NIGHTLY = {"schedule": "0 3 * * *", "timezone": "UTC", "model": MODEL, "input": "report"}


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("isolation")
    config = CONFIG.format(
        data=data,
        alice=ALICE,
        bob=BOB,
        provider=simulated_provider(_simulator_server, UPSTREAM),
        model=MODEL,
    )
    with serving(data, config) as server:
        yield server


def _made(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code in (200, 202), answer.text
    made: dict[str, Any] = answer.json()
    return made


def _objects(simulator: SimulatorServer, served: Served, who: dict[str, str]) -> dict[str, str]:
    """One of each object a request ``who`` names makes, by kind, made through the key Alice."""
    auth = {"authorization": f"Bearer {ALICE}", **who}
    with httpx.Client(base_url=served.base_url, headers=auth, timeout=60) as http:
        script(simulator, UPSTREAM, call("write_file", path="a.txt", content="hi"), answer("ok"))
        response = _made(http.post("/v1/responses", json={"model": MODEL, "input": "write"}))
        [container] = http.get("/v1/containers").json()["data"]
        [cfile] = http.get(f"/v1/containers/{container['id']}/files").json()["data"]
        conversation = _made(
            http.post(
                "/v1/conversations",
                json={"items": [{"type": "message", "role": "user", "content": "hi"}]},
            )
        )
        [item] = http.get(f"/v1/conversations/{conversation['id']}/items").json()["data"]
        script(simulator, UPSTREAM, answer("ok"))
        session = "the-session-" + ("-".join(who.values()) or "key")
        run = _made(http.post("/v1/runs", json={"model": MODEL, "input": "hi", "session": session}))
        deadline = time.monotonic() + 30  # ended, so that reading it back twice reads the same
        while http.get(f"/v1/runs/{run['id']}").json()["status"] != "completed":
            assert time.monotonic() < deadline, "the run did not end"
            time.sleep(0.05)
        upload = _made(
            http.post(
                "/v1/files", files={"file": ("a.txt", b"data")}, data={"purpose": "user_data"}
            )
        )
        return {
            "response": response["id"],
            "container": container["id"],
            "cfile": cfile["id"],
            "conversation": conversation["id"],
            "item": item["id"],
            "run": run["id"],
            "session": session,
            "file": upload["id"],
        }


@pytest.fixture(scope="module")
def alices(_simulator_server: SimulatorServer, served: Served) -> dict[str, str]:
    """One of each of Alice's objects (her key's own, no end user named), by kind."""
    made = _objects(_simulator_server, served, {})
    auth = {"authorization": f"Bearer {ALICE}"}
    with httpx.Client(base_url=served.base_url, headers=auth, timeout=60) as http:
        made["cron"] = _made(http.post("/v1/crons", json=NIGHTLY))["id"]
        skill = [("files[]", ("alices-skill/SKILL.md", SKILL))]
        made["skill"] = _made(http.post("/v1/skills", files=skill))["id"]
    return made


@pytest.fixture(scope="module")
def anns(_simulator_server: SimulatorServer, served: Served) -> dict[str, str]:
    """One of each of the objects end user Ann has behind Alice's key, by kind."""
    return _objects(_simulator_server, served, ANN)


def unknown(ids: dict[str, str]) -> dict[str, str]:
    """Ids of the same shapes that name nothing."""
    return {
        kind: value[:-4] + ("AAAA" if kind == "cfile" else "0000") for kind, value in ids.items()
    }


@pytest.fixture
async def alice(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(served.base_url, ALICE) as client:
        yield client


@pytest.fixture
async def bob(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(served.base_url, BOB) as client:
        yield client


C = "/v1/containers/{container}"
CV = "/v1/conversations/{conversation}"
S = "/v1/skills/{skill}"
R = "/v1/runs/{run}"
ITEM = {"type": "message", "role": "user", "content": "x"}
# (method, path, body, where Alice reads the object the request aims at)
AIMED_AT: list[tuple[str, str, Any, str]] = [
    ("GET", C, None, C),
    ("DELETE", C, None, C),
    ("GET", C + "/files", None, C),
    ("GET", C + "/files/{cfile}", None, C + "/files/{cfile}"),
    ("GET", C + "/files/{cfile}/content", None, C + "/files/{cfile}"),
    ("DELETE", C + "/files/{cfile}", None, C + "/files/{cfile}"),
    ("GET", "/v1/containers?after={container}", None, C),
    ("GET", CV, None, CV),
    ("POST", CV, {"metadata": {"who": "bob"}}, CV),
    ("DELETE", CV, None, CV),
    ("GET", CV + "/items", None, CV + "/items"),
    ("POST", CV + "/items", {"items": [ITEM]}, CV + "/items"),
    ("GET", CV + "/items/{item}", None, CV + "/items"),
    ("DELETE", CV + "/items/{item}", None, CV + "/items"),
    ("GET", CV + "/items?after={item}", None, CV + "/items"),
    ("GET", "/v1/crons/{cron}", None, "/v1/crons/{cron}"),
    ("POST", "/v1/crons/{cron}", {"input": "bob's"}, "/v1/crons/{cron}"),
    ("POST", "/v1/crons/{cron}/pause", None, "/v1/crons/{cron}"),
    ("POST", "/v1/crons/{cron}/resume", None, "/v1/crons/{cron}"),
    ("DELETE", "/v1/crons/{cron}", None, "/v1/crons/{cron}"),
    ("GET", "/v1/crons?after={cron}", None, "/v1/crons/{cron}"),
    ("GET", "/v1/files/{file}", None, "/v1/files/{file}"),
    ("GET", "/v1/files/{file}/content", None, "/v1/files/{file}"),
    ("DELETE", "/v1/files/{file}", None, "/v1/files/{file}"),
    ("GET", "/v1/files?after={file}", None, "/v1/files/{file}"),
    ("GET", S, None, S),
    ("POST", S, {"default_version": "1"}, S),
    ("POST", S + "/approve", None, S),
    ("DELETE", S, None, S),
    ("GET", S + "/content", None, S),
    ("GET", S + "/versions", None, S),
    ("GET", S + "/versions/1", None, S),
    ("DELETE", S + "/versions/1", None, S),
    ("GET", S + "/versions/1/content", None, S),
    ("GET", "/v1/skills?after={skill}", None, S),
    ("GET", R, None, R),
    ("GET", R + "/events", None, R),
    ("POST", R + "/stop", None, R),
    ("POST", R + "/steer", {"input": "x"}, R),
    ("POST", R + "/approvals/appr_1", {"approve": True}, R),
    ("GET", "/v1/runs?after={run}", None, R),
    ("GET", "/v1/webhooks/deliveries?run_id={run}", None, R),
    ("GET", "/v1/runs?session={session}", None, "/v1/runs?session={session}"),
    ("DELETE", "/v1/sessions/{session}", None, "/v1/runs?session={session}"),
    ("GET", "/v1/responses/{response}", None, "/v1/responses/{response}"),
    ("GET", "/v1/responses/{response}/input_items", None, "/v1/responses/{response}"),
    ("POST", "/v1/responses/{response}/cancel", None, "/v1/responses/{response}"),
    ("DELETE", "/v1/responses/{response}", None, "/v1/responses/{response}"),
]


def _fields(row: tuple[str, str, Any, str]) -> list[str]:
    """The ids a row's paths name, as ``{kind}``."""
    return re.findall(r"\{\w+\}", row[1] + row[3])


@pytest.mark.parametrize(
    ("method", "path", "body", "read_back"), AIMED_AT, ids=[f"{m} {p}" for m, p, _, _ in AIMED_AT]
)
async def test_another_key_s_object_answers_as_an_unknown_id_and_is_left_as_it_was(
    alice: httpx.AsyncClient,
    bob: httpx.AsyncClient,
    alices: dict[str, str],
    method: str,
    path: str,
    body: Any,
    read_back: str,
) -> None:
    await _answers_as_unknown(alice, {}, bob, {}, alices, method, path, body, read_back)


# What an end user has of their own: schedules and uploaded skills are the key's alone.
THEIRS = [row for row in AIMED_AT if not {"{cron}", "{skill}"} & set(_fields(row))]


@pytest.mark.parametrize(
    ("method", "path", "body", "read_back"), THEIRS, ids=[f"{m} {p}" for m, p, _, _ in THEIRS]
)
async def test_another_end_user_s_object_answers_as_an_unknown_id_and_is_left_as_it_was(
    alice: httpx.AsyncClient,
    anns: dict[str, str],
    method: str,
    path: str,
    body: Any,
    read_back: str,
) -> None:
    await _answers_as_unknown(alice, ANN, alice, BEN, anns, method, path, body, read_back)


async def _answers_as_unknown(
    owner: httpx.AsyncClient,
    owner_headers: dict[str, str],
    other: httpx.AsyncClient,
    other_headers: dict[str, str],
    ids: dict[str, str],
    method: str,
    path: str,
    body: Any,
    read_back: str,
) -> None:
    """``other`` aiming at the owner's object gets what it gets for an unknown id, and the
    owner reads the object as it was."""
    before = await owner.get(read_back.format(**ids), headers=owner_headers)
    assert before.status_code == 200, before.text

    aimed = await other.request(method, path.format(**ids), json=body, headers=other_headers)
    missing = await other.request(
        method, path.format(**unknown(ids)), json=body, headers=other_headers
    )

    # A 404 where an id is in the path; where it is a cursor, whatever an unknown one gets.
    assert aimed.status_code == missing.status_code < 500, aimed.text
    assert _without_ids(aimed.json(), ids) == _without_ids(missing.json(), unknown(ids))
    after = await owner.get(read_back.format(**ids), headers=owner_headers)
    assert (after.status_code, after.content) == (200, before.content)


def _without_ids(body: Any, ids: dict[str, str]) -> str:
    text = str(body)
    for value in ids.values():
        text = text.replace(value, "<id>")
    return text


@pytest.mark.parametrize(
    "path",
    [
        "/v1/containers",
        "/v1/crons",
        "/v1/files",
        "/v1/skills",
        "/v1/runs",
        "/v1/webhooks/deliveries",
        "/v1/usage?group_by=key,end_user",
    ],
)
async def test_another_key_s_listings_name_none_of_its_objects(
    bob: httpx.AsyncClient, alices: dict[str, str], path: str
) -> None:
    listed = await bob.get(path)

    assert listed.status_code == 200, listed.text
    assert not [kind for kind, value in alices.items() if value in listed.text]
    assert "alice" not in listed.text


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/crons", None),
        ("POST", "/v1/crons", NIGHTLY),
        ("GET", "/v1/crons/{cron}", None),
        ("POST", "/v1/crons/{cron}", {"input": "ann's now", "session": "the key's"}),
        ("POST", "/v1/crons/{cron}/pause", None),
        ("POST", "/v1/crons/{cron}/resume", None),
        ("DELETE", "/v1/crons/{cron}", None),
    ],
)
async def test_an_end_user_neither_reads_nor_changes_the_key_s_schedules(
    alice: httpx.AsyncClient, alices: dict[str, str], method: str, path: str, body: Any
) -> None:
    crons = (await alice.get("/v1/crons")).json()

    refused = await alice.request(method, path.format(**alices), json=body, headers=ANN)

    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "end_user_not_allowed"
    assert (await alice.get("/v1/crons")).json() == crons


async def _turn(simulator: SimulatorServer, http: httpx.AsyncClient, who: dict[str, str]) -> None:
    script(simulator, UPSTREAM, answer("ok"))
    made = await http.post("/v1/responses", json={"model": MODEL, "input": "hi"}, headers=who)
    assert made.status_code == 200, made.text


async def test_an_end_user_reads_their_own_usage_and_never_another_s(
    served: Served, simulator: SimulatorServer, alice: httpx.AsyncClient
) -> None:
    await _turn(simulator, alice, ANN)
    await _turn(simulator, alice, BEN)

    async def key_sees_both() -> bool:
        lines = (await alice.get("/v1/usage?group_by=end_user")).json()["data"]
        return {"ann", "ben"} <= {line["end_user"] for line in lines}

    assert await until(key_sees_both, server=served)
    own = await alice.get("/v1/usage?group_by=end_user", headers=ANN)
    assert own.status_code == 200, own.text
    assert [line["end_user"] for line in own.json()["data"]] == ["ann"]
    for query in ("end_user=ben", "end_user=", "key=bob"):
        refused = await alice.get(f"/v1/usage?{query}", headers=ANN)
        assert refused.status_code == 403, (query, refused.text)
        assert refused.json()["error"]["code"] == "end_user_not_allowed"


async def test_an_end_user_lists_the_webhook_deliveries_of_their_own_runs_only(
    served: Served, simulator: SimulatorServer, alice: httpx.AsyncClient
) -> None:
    script(simulator, UPSTREAM, answer("ok"))
    hook = {"url": f"http://127.0.0.1:{free_port()}/hook?token=bens-own", "secret": SECRET}
    made = await alice.post(
        "/v1/runs", json={"model": MODEL, "input": "hi", "webhook": hook}, headers=BEN
    )
    run_id = _made(made)["id"]

    async def delivered() -> bool:
        listed = await alice.get(f"/v1/webhooks/deliveries?run_id={run_id}")
        return bool(listed.json()["data"])

    assert await until(delivered, server=served)
    ben = await alice.get(f"/v1/webhooks/deliveries?run_id={run_id}", headers=BEN)
    assert [d["run_id"] for d in ben.json()["data"]] == [run_id]
    ann = await alice.get(f"/v1/webhooks/deliveries?run_id={run_id}", headers=ANN)
    assert (ann.status_code, ann.json()["data"]) == (200, [])
    everything = await alice.get("/v1/webhooks/deliveries", headers=ANN)
    assert everything.status_code == 400, everything.text
    assert "bens-own" not in everything.text


ANNS_SKILL = b"---\nname: anns-skill\ndescription: Ann's own.\n---\nTell Ben nothing.\n"


@pytest.mark.parametrize(
    ("method", "path", "upload", "body"),
    [
        ("POST", "/v1/skills", True, None),
        ("POST", S, False, {"default_version": "1"}),
        ("POST", S + "/approve", False, None),
        ("DELETE", S, False, None),
        ("POST", S + "/versions", True, None),
        ("DELETE", S + "/versions/1", False, None),
    ],
)
async def test_an_end_user_reads_but_never_changes_the_skills_the_key_shares(
    alice: httpx.AsyncClient,
    alices: dict[str, str],
    method: str,
    path: str,
    upload: bool,
    body: Any,
) -> None:
    skills = (await alice.get("/v1/skills")).json()
    files = [("files[]", ("SKILL.md", ANNS_SKILL))] if upload else None

    refused = await alice.request(
        method, path.format(**alices), files=files, json=body, headers=ANN
    )

    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "end_user_not_allowed"
    assert (await alice.get("/v1/skills")).json() == skills
    assert (await alice.get("/v1/skills", headers=ANN)).json() == skills


async def test_two_end_users_sending_one_idempotency_key_never_get_each_other_s_answer(
    simulator: SimulatorServer, alice: httpx.AsyncClient
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "What is my secret?"}]}
    key = {"idempotency-key": "chat-1-turn-1"}  # a front end's keys, made from its chats
    script(simulator, UPSTREAM, answer("Ann, your secret is 42."))

    anns = await alice.post("/v1/chat/completions", json=body, headers=ANN | key)
    bens = await alice.post("/v1/chat/completions", json=body, headers=BEN | key)
    anns_retry = await alice.post("/v1/chat/completions", json=body, headers=ANN | key)

    assert anns.status_code == 200, anns.text
    assert bens.status_code == 422, bens.text
    assert bens.json()["error"]["code"] == "idempotency_key_reused"
    assert "42" not in bens.text
    assert anns_retry.headers.get("idempotent-replayed") == "true"
    assert anns_retry.json() == anns.json()


def test_the_idempotency_fingerprint_reads_every_header_that_names_an_end_user() -> None:
    named = {SCOPE_HEADER.encode(), OPENWEBUI_USER_HEADER.encode()}

    assert named == END_USER_HEADERS
