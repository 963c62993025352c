"""``/v1/files`` as the official SDK uses it: upload, list, retrieve, download, delete; each
key sees its own files only, and a key's size limit and quotas are held with a clear 413; a
file uploaded with ``expires_after`` is gone for its owner once it expires, and the sweeper
removes it."""

from __future__ import annotations

import base64
import io
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select, update

from hermes_core.persistence import Store, sqlite_url
from hermes_core.persistence.files import FILES
from server.app import create_app
from server.files.uploads import FileLimits, FileVault
from server.http.threaded import ThreadedServer
from server.retention.policy import RetentionPolicy
from server.retention.sweeper import Sweeper
from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, make_services

LIMITS = FileLimits(max_file_bytes=64 * 1024, quota_bytes=100 * 1024, max_files=4)


@pytest.fixture
def files_server(_simulator_server: SimulatorServer, tmp_path: Path) -> Iterator[ThreadedServer]:
    services = make_services(
        _simulator_server,
        database_url=sqlite_url(tmp_path / "hermes.db"),
        files_dir=tmp_path / "files",
        file_limits=LIMITS,
    )
    with ThreadedServer(create_app(services)) as server:
        yield server


@pytest.fixture
async def alice(files_server: ThreadedServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=files_server.base_url + "/v1",
        api_key=KEY_ALICE,
        max_retries=0,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk


@pytest.fixture
async def raw(files_server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"authorization": f"Bearer {KEY_ALICE}"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=files_server.base_url, headers=headers
    ) as c:
        yield c


async def test_an_uploaded_file_is_listed_retrieved_downloaded_and_deleted(
    alice: openai.AsyncOpenAI, tmp_path: Path
) -> None:
    uploaded = await alice.files.create(
        file=("sales.csv", b"region,total\nnorth,12\nsouth,30\n"), purpose="user_data"
    )

    assert uploaded.id.startswith("file-")
    assert uploaded.filename == "sales.csv"
    assert uploaded.bytes == 31
    assert uploaded.purpose == "user_data"
    assert uploaded.status == "processed"
    assert [f.id async for f in alice.files.list()] == [uploaded.id]
    assert (await alice.files.retrieve(uploaded.id)).bytes == 31
    content = await alice.files.content(uploaded.id)
    assert content.content == b"region,total\nnorth,12\nsouth,30\n"

    deleted = await alice.files.delete(uploaded.id)
    assert deleted.deleted is True
    assert [f async for f in alice.files.list()] == []
    assert not list((tmp_path / "files").rglob("file-*"))
    with pytest.raises(openai.NotFoundError):
        await alice.files.retrieve(uploaded.id)


async def test_a_key_never_sees_another_keys_files(
    alice: openai.AsyncOpenAI, files_server: ThreadedServer
) -> None:
    mine = await alice.files.create(file=("mine.txt", b"secret"), purpose="user_data")
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=files_server.base_url + "/v1",
        api_key=KEY_BOB,
        max_retries=0,
    ) as bob:
        assert [f async for f in bob.files.list()] == []
        with pytest.raises(openai.NotFoundError):
            await bob.files.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            await bob.files.content(mine.id)
        with pytest.raises(openai.NotFoundError):
            await bob.files.delete(mine.id)
    assert (await alice.files.retrieve(mine.id)).id == mine.id


async def test_files_are_listed_newest_first_in_pages(alice: openai.AsyncOpenAI) -> None:
    made = [
        (await alice.files.create(file=(f"{n}.txt", b"x"), purpose="user_data")).id
        for n in range(3)
    ]

    first = await alice.files.list(limit=2)
    assert [f.id for f in first.data] == made[:0:-1]
    assert first.has_more is True
    rest = await alice.files.list(limit=2, after=first.data[-1].id)
    assert [f.id for f in rest.data] == [made[0]]
    assert rest.has_more is False
    oldest_first = await alice.files.list(order="asc")
    assert [f.id for f in oldest_first.data] == made


async def test_a_file_larger_than_the_limit_is_a_413_and_leaves_nothing(
    raw: httpx.AsyncClient, tmp_path: Path
) -> None:
    big = io.BytesIO(os.urandom(LIMITS.max_file_bytes + 1))
    response = await raw.post(
        "/v1/files", files={"file": ("big.bin", big)}, data={"purpose": "user_data"}
    )

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "file_too_large"
    assert (await raw.get("/v1/files")).json()["data"] == []
    assert not [p for p in (tmp_path / "files").rglob("*") if p.is_file()]


async def test_a_key_past_its_byte_quota_gets_a_413(raw: httpx.AsyncClient) -> None:
    chunk = os.urandom(60 * 1024)
    first = await raw.post(
        "/v1/files", files={"file": ("a.bin", chunk)}, data={"purpose": "user_data"}
    )
    assert first.status_code == 200

    second = await raw.post(
        "/v1/files", files={"file": ("b.bin", chunk)}, data={"purpose": "user_data"}
    )

    assert second.status_code == 413
    assert second.json()["error"]["code"] == "file_quota_exceeded"
    assert len((await raw.get("/v1/files")).json()["data"]) == 1


async def test_a_key_past_its_file_count_gets_a_413(raw: httpx.AsyncClient) -> None:
    for n in range(LIMITS.max_files):
        made = await raw.post(
            "/v1/files", files={"file": (f"{n}.txt", b"x")}, data={"purpose": "user_data"}
        )
        assert made.status_code == 200

    refused = await raw.post(
        "/v1/files", files={"file": ("one-more.txt", b"x")}, data={"purpose": "user_data"}
    )

    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "too_many_files"


@pytest.mark.parametrize(
    ("files", "data", "param"),
    [
        ({"file": ("a.txt", b"x")}, {"purpose": "nonsense"}, "purpose"),
        ({"file": ("a.txt", b"x")}, {}, None),
        (None, {"purpose": "user_data"}, None),
    ],
)
async def test_a_malformed_upload_is_a_400(
    raw: httpx.AsyncClient, files: dict[str, object] | None, data: dict[str, str], param: str | None
) -> None:
    response = await raw.post("/v1/files", files=files, data=data)  # type: ignore[arg-type]

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param


async def test_a_file_name_is_kept_without_its_path(raw: httpx.AsyncClient) -> None:
    response = await raw.post(
        "/v1/files",
        files={"file": ("..\\..\\etc/passwd", b"x")},
        data={"purpose": "user_data"},
    )

    assert response.status_code == 200
    assert response.json()["filename"] == "passwd"


async def test_a_file_name_sent_as_mime_encoded_words_is_kept_decoded(
    raw: httpx.AsyncClient,
) -> None:
    # As .NET's HttpClient (and its OpenAI SDK) sends a name that is not ASCII.
    body = (
        b"--b\r\n"
        b'Content-Disposition: form-data; name=file; filename="=?utf-8?B?csOpc3Vtw6kucGRm?="; '
        b"filename*=utf-8''r%C3%A9sum%C3%A9.pdf\r\n"
        b"Content-Type: application/pdf\r\n\r\n"
        b"%PDF-1.4\r\n"
        b"--b\r\n"
        b"Content-Disposition: form-data; name=purpose\r\n\r\n"
        b"user_data\r\n"
        b"--b--\r\n"
    )
    response = await raw.post(
        "/v1/files", content=body, headers={"content-type": "multipart/form-data; boundary=b"}
    )

    assert response.status_code == 200, response.text
    assert response.json()["filename"] == "r\u00e9sum\u00e9.pdf"


async def test_a_file_name_that_only_looks_encoded_is_kept_as_it_came(
    raw: httpx.AsyncClient,
) -> None:
    response = await raw.post(
        "/v1/files",
        files={"file": ("=?nonesuch?B?csOp?=", b"x")},
        data={"purpose": "user_data"},
    )

    assert response.status_code == 200
    assert response.json()["filename"] == "=?nonesuch?B?csOp?="


async def test_files_need_a_key(files_server: ThreadedServer) -> None:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=files_server.base_url) as anonymous:
        assert (await anonymous.get("/v1/files")).status_code == 401


async def test_an_uploaded_image_named_by_file_id_reaches_the_model_inline(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    image = await alice.files.create(file=("dot.png", png), purpose="vision")
    notes = await alice.files.create(file=("notes.txt", b"words"), purpose="user_data")

    await alice.responses.create(
        model="hermes-agent",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "file_id": image.id, "detail": "auto"},
                ],
            }
        ],
    )
    (sent,) = simulator.state.requests()
    parts = sent.body["messages"][-1]["content"]
    urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert urls == ["data:image/png;base64," + base64.b64encode(png).decode()]

    with pytest.raises(openai.BadRequestError):
        await alice.responses.create(
            model="hermes-agent",
            input=[
                {
                    "role": "user",
                    "content": [{"type": "input_image", "file_id": notes.id, "detail": "auto"}],
                }
            ],
        )


async def test_a_conversation_item_naming_a_file_not_the_callers_is_a_404_and_not_kept(
    alice: openai.AsyncOpenAI, files_server: ThreadedServer
) -> None:
    mine = await alice.files.create(file=("mine.txt", b"my notes"), purpose="user_data")
    conversation = await alice.conversations.create()

    def item(file_id: str) -> Any:
        part = {"type": "input_file", "file_id": file_id}
        return {"type": "message", "role": "user", "content": [part]}

    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=files_server.base_url + "/v1",
        api_key=KEY_BOB,
        max_retries=0,
    ) as bob:
        bobs = await bob.files.create(file=("bob.txt", b"bob's notes"), purpose="user_data")
    for file_id in (bobs.id, "file-does-not-exist"):
        with pytest.raises(openai.NotFoundError) as refused:
            await alice.conversations.items.create(conversation.id, items=[item(file_id)])
        assert refused.value.code == "file_not_found"
        with pytest.raises(openai.NotFoundError):
            await alice.conversations.create(items=[item(file_id)])
    assert [i async for i in alice.conversations.items.list(conversation.id)] == []

    added = await alice.conversations.items.create(conversation.id, items=[item(mine.id)])
    assert len(added.data) == 1


HOUR = 3600
EXPIRES_AFTER: Any = {"anchor": "created_at", "seconds": HOUR}


@pytest.fixture
async def store(files_server: ThreadedServer, tmp_path: Path) -> AsyncIterator[Store]:
    """The files server's database, opened beside it (as another replica would)."""
    opened = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=False)
    yield opened
    await opened.close()


async def expire(store: Store, file_id: str) -> None:
    """Make ``file_id`` expired now (its ``expires_after`` ran out a moment ago)."""
    async with store.db.engine.begin() as conn:
        await conn.execute(
            update(FILES).where(FILES.c.id == file_id).values(expires_at=time.time() - 1)
        )


async def test_a_file_uploaded_with_expires_after_has_its_expires_at(
    alice: openai.AsyncOpenAI,
) -> None:
    uploaded = await alice.files.create(
        file=("brief.txt", b"for an hour"), purpose="user_data", expires_after=EXPIRES_AFTER
    )
    kept = await alice.files.create(file=("kept.txt", b"for good"), purpose="user_data")

    assert uploaded.expires_at == uploaded.created_at + HOUR
    assert (await alice.files.retrieve(uploaded.id)).expires_at == uploaded.expires_at
    listed = {f.id: f.expires_at async for f in alice.files.list()}
    assert listed == {uploaded.id: uploaded.created_at + HOUR, kept.id: None}


BAD_EXPIRES_AFTER = [
    ({"expires_after[anchor]": "last_active_at", "expires_after[seconds]": "3600"}, "anchor"),
    ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "3599"}, "seconds"),
    ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "2592001"}, "seconds"),
    ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "soon"}, "seconds"),
    ({"expires_after[anchor]": "created_at"}, "seconds"),
    ({"expires_after[seconds]": "3600"}, "anchor"),
    ({"expires_after[anchor]": "created_at", "expires_after[seconds]": " 3600"}, "seconds"),
    ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "3_600"}, "seconds"),
    ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "٣٦٠٠"}, "seconds"),
    ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "9" * 5000}, "seconds"),
    ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600.0"}, "seconds"),
    ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "-3600"}, "seconds"),
    ({"expires_after[anchor]": "created_at", "expires_after[seconds]": ""}, "seconds"),
    ({"expires_after[anchor]": "", "expires_after[seconds]": "3600"}, "anchor"),
    ({"expires_after[anchor]": "CREATED_AT", "expires_after[seconds]": "3600"}, "anchor"),
]
"""Upload fields of an ``expires_after`` OpenAI refuses, and which half of it is wrong."""


@pytest.mark.parametrize(("fields", "param"), BAD_EXPIRES_AFTER)
async def test_a_bad_expires_after_is_a_400_naming_its_param(
    raw: httpx.AsyncClient, fields: dict[str, str], param: str
) -> None:
    response = await raw.post(
        "/v1/files", files={"file": ("a.txt", b"x")}, data={"purpose": "user_data", **fields}
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == f"expires_after.{param}"
    assert (await raw.get("/v1/files")).json()["data"] == []


async def test_an_expires_after_sent_whole_rather_than_by_its_fields_is_a_400(
    raw: httpx.AsyncClient,
) -> None:
    """A client that sends the object as one field (JSON) asked for an expiry: it must not get
    a file kept for ever without being told."""
    whole = '{"anchor": "created_at", "seconds": 3600}'
    response = await raw.post(
        "/v1/files",
        files={"file": ("a.txt", b"x")},
        data={"purpose": "user_data", "expires_after": whole},
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "expires_after"
    assert "expires_after[seconds]" in error["message"]
    assert (await raw.get("/v1/files")).json()["data"] == []


async def test_an_expired_file_is_gone_for_its_owner(
    alice: openai.AsyncOpenAI, store: Store
) -> None:
    brief = await alice.files.create(
        file=("brief.txt", b"gone soon"), purpose="user_data", expires_after=EXPIRES_AFTER
    )
    kept = await alice.files.create(file=("kept.txt", b"kept"), purpose="user_data")
    await expire(store, brief.id)

    assert [f.id async for f in alice.files.list()] == [kept.id]
    with pytest.raises(openai.NotFoundError):
        await alice.files.retrieve(brief.id)
    with pytest.raises(openai.NotFoundError):
        await alice.files.content(brief.id)
    with pytest.raises(openai.NotFoundError):
        await alice.files.delete(brief.id)


async def test_an_expired_file_cannot_be_attached_to_a_message(
    alice: openai.AsyncOpenAI, store: Store
) -> None:
    brief = await alice.files.create(
        file=("brief.txt", b"gone soon"), purpose="user_data", expires_after=EXPIRES_AFTER
    )
    await expire(store, brief.id)

    with pytest.raises(openai.NotFoundError) as refused:
        await alice.responses.create(
            model="hermes-agent",
            input=[
                {"role": "user", "content": [{"type": "input_file", "file_id": brief.id}]},
            ],
        )
    assert refused.value.code == "file_not_found"
    with pytest.raises(openai.NotFoundError):
        await alice.chat.completions.create(
            model="hermes-agent",
            messages=[
                {"role": "user", "content": [{"type": "file", "file": {"file_id": brief.id}}]}
            ],
        )


async def test_an_expired_file_counts_against_no_quota(
    alice: openai.AsyncOpenAI, store: Store
) -> None:
    brief = await alice.files.create(
        file=("brief.bin", os.urandom(60 * 1024)), purpose="user_data", expires_after=EXPIRES_AFTER
    )
    for n in range(LIMITS.max_files - 1):
        await alice.files.create(file=(f"{n}.txt", b"x"), purpose="user_data")
    await expire(store, brief.id)

    # Past the count (4 files) and the bytes (100 KiB) it took, were it still counted.
    after = await alice.files.create(file=("big.bin", os.urandom(60 * 1024)), purpose="user_data")
    assert after.bytes == 60 * 1024


async def test_an_upload_retried_with_another_expiry_is_not_the_same_request(
    alice: openai.AsyncOpenAI,
) -> None:
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = await alice.files.create(
        file=("notes.txt", b"n"),
        purpose="user_data",
        expires_after=EXPIRES_AFTER,
        extra_headers=key,
    )
    again = await alice.files.create(
        file=("notes.txt", b"n"),
        purpose="user_data",
        expires_after=EXPIRES_AFTER,
        extra_headers=key,
    )
    assert again.id == first.id

    with pytest.raises(openai.UnprocessableEntityError):
        await alice.files.create(
            file=("notes.txt", b"n"),
            purpose="user_data",
            expires_after={"anchor": "created_at", "seconds": 2 * HOUR},
            extra_headers=key,
        )
    with pytest.raises(openai.UnprocessableEntityError):
        await alice.files.create(file=("notes.txt", b"n"), purpose="user_data", extra_headers=key)


async def test_the_sweeper_removes_an_expired_files_record_and_bytes(
    alice: openai.AsyncOpenAI, store: Store, tmp_path: Path
) -> None:
    brief = await alice.files.create(
        file=("brief.txt", b"gone soon"), purpose="user_data", expires_after=EXPIRES_AFTER
    )
    kept = await alice.files.create(file=("kept.txt", b"kept"), purpose="user_data")
    await expire(store, brief.id)
    vault = FileVault(tmp_path / "files", store, LIMITS)
    # Without any retention configured: an expiry is the client's, not the policy's.
    sweeper = Sweeper(store, RetentionPolicy, instance="sweeper", file_path=vault.path)

    assert await sweeper.sweep() == {"files": 1}

    assert {p.name for p in (tmp_path / "files").rglob("file-*")} == {kept.id}
    async with store.db.engine.connect() as conn:
        assert list((await conn.execute(select(FILES.c.id))).scalars()) == [kept.id]
    assert (await alice.files.content(kept.id)).content == b"kept"


@pytest.mark.parametrize(
    "name",
    [
        "=?utf-8?B?b?=",  # one base64 character: no byte at all
        "=?utf-8?B?YWJjZ?=",  # a base64 length no padding makes whole
    ],
)
async def test_a_file_name_of_encoded_words_whose_base64_is_broken_is_kept_as_it_came(
    raw: httpx.AsyncClient, name: str
) -> None:
    for headers in ({}, {"Idempotency-Key": str(uuid.uuid4())}):
        response = await raw.post(
            "/v1/files",
            files={"file": (name, b"x")},
            data={"purpose": "user_data"},
            headers=headers,
        )

        assert response.status_code == 200, response.text
        assert response.json()["filename"] == name


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("=?utf-8?B?Li4vLi4vZXRjL3Bhc3N3ZA==?=", "passwd"),  # ../../etc/passwd
        ("=?utf-8?Q?..=5C..=5Cboot.ini?=", "boot.ini"),  # ..\..\boot.ini
        ("=?utf-8?Q?a=00b=0A=1B=E2=80=AEc.txt?=", "abc.txt"),  # NUL, LF, ESC, RTL override
        ("=?utf-8?Q?=2E=2E?=", "upload"),
        ("=?utf-16?B?/v8AYQBi?=", "ab"),  # another charset than UTF-8
        ("=?unknown-8bit?B?Yf9i?=", "a\ufffdb"),  # bytes of no known charset
        ("=?utf-8?B?" + base64.b64encode(b"n" * 3_000).decode() + "?=", "n" * 255),
    ],
)
async def test_a_file_name_decoded_from_encoded_words_is_kept_without_path_or_control_characters(
    raw: httpx.AsyncClient, name: str, kept: str, tmp_path: Path
) -> None:
    response = await raw.post(
        "/v1/files", files={"file": (name, b"x")}, data={"purpose": "user_data"}
    )

    assert response.status_code == 200, response.text
    assert response.json()["filename"] == kept
    assert [p.name for p in (tmp_path / "files").rglob("*") if p.is_file()] == [
        response.json()["id"]
    ]


async def test_a_refused_expires_after_uses_up_no_idempotency_key(
    raw: httpx.AsyncClient,
) -> None:
    key = {"Idempotency-Key": str(uuid.uuid4())}
    bad = {"expires_after[anchor]": "created_at", "expires_after[seconds]": "9" * 5000}
    refused = await raw.post(
        "/v1/files",
        files={"file": ("a.txt", b"x")},
        data={"purpose": "user_data", **bad},
        headers=key,
    )

    assert refused.status_code == 400, refused.text
    good = {"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"}
    retried = await raw.post(
        "/v1/files",
        files={"file": ("a.txt", b"x")},
        data={"purpose": "user_data", **good},
        headers=key,
    )
    assert retried.status_code == 200, retried.text
    assert retried.json()["expires_at"] == retried.json()["created_at"] + 3600


async def test_an_expired_image_or_conversation_item_file_is_a_404_and_reaches_no_model(
    alice: openai.AsyncOpenAI, store: Store, simulator: SimulatorServer
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    image = await alice.files.create(
        file=("dot.png", png), purpose="vision", expires_after=EXPIRES_AFTER
    )
    await expire(store, image.id)
    conversation = await alice.conversations.create()
    file_part: Any = {"type": "input_file", "file_id": image.id}
    image_part: Any = {"type": "input_image", "file_id": image.id, "detail": "auto"}

    with pytest.raises(openai.NotFoundError) as refused:
        await alice.responses.create(
            model="hermes-agent", input=[{"role": "user", "content": [image_part]}]
        )
    assert refused.value.code == "file_not_found"
    for part in (file_part, image_part):
        item: Any = {"type": "message", "role": "user", "content": [part]}
        with pytest.raises(openai.NotFoundError) as refused:
            await alice.conversations.items.create(conversation.id, items=[item])
        assert refused.value.code == "file_not_found"
    assert [i async for i in alice.conversations.items.list(conversation.id)] == []
    assert simulator.state.requests() == []


async def test_an_upload_whose_bytes_are_gone_is_a_404_to_read_and_can_still_be_deleted(
    alice: openai.AsyncOpenAI, tmp_path: Path
) -> None:
    # As a sweep (of its expiry, on another replica) leaves it for a request that read its
    # record a moment before: its bytes are gone, and reading them is no 500.
    notes = await alice.files.create(file=("notes.txt", b"words"), purpose="user_data")
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    image = await alice.files.create(file=("dot.png", png), purpose="vision")
    for path in (tmp_path / "files").rglob("file-*"):
        path.unlink()

    with pytest.raises(openai.NotFoundError):
        await alice.files.content(notes.id)
    parts: list[Any] = [
        {"type": "input_file", "file_id": notes.id},
        {"type": "input_image", "file_id": image.id, "detail": "auto"},
    ]
    for part in parts:
        with pytest.raises(openai.NotFoundError) as refused:
            await alice.responses.create(
                model="hermes-agent", input=[{"role": "user", "content": [part]}]
            )
        assert refused.value.code == "file_not_found"
    with pytest.raises(openai.NotFoundError):
        await alice.chat.completions.create(
            model="hermes-agent",
            messages=[
                {"role": "user", "content": [{"type": "file", "file": {"file_id": notes.id}}]}
            ],
        )
    assert (await alice.files.delete(notes.id)).deleted is True
    assert [f.id async for f in alice.files.list()] == [image.id]
