"""Uploaded images, told by their bytes rather than their names: an image uploaded with no
name (the SDK sends raw bytes as ``upload``; a browser's pasted blob is ``blob``) reaches the
model as an image, by ``input_image`` and by a message's file part alike; a file named like an
image that is none is refused before anything runs (it was sent upstream as one). An image an
earlier message named, deleted since, leaves its conversation going on with a note."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest

from hermes_core.persistence import sqlite_url
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL, make_services

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


@pytest.fixture(scope="module")
def files_server(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    data = tmp_path_factory.mktemp("images")
    services = make_services(
        _simulator_server, database_url=sqlite_url(data / "hermes.db"), files_dir=data / "files"
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
    ) as sdk:
        yield sdk


def _calls(simulator: SimulatorServer) -> list[Any]:
    return [r for r in simulator.state.requests() if r.model == UPSTREAM_MODEL]


def _image_urls_seen(simulator: SimulatorServer) -> list[str]:
    body = _calls(simulator)[-1].body
    content: Any = next(m for m in reversed(body["messages"]) if m["role"] == "user")["content"]
    parts = content if isinstance(content, list) else []
    return [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]


async def test_an_image_uploaded_as_bare_bytes_reaches_the_model_by_input_image(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    image = await alice.files.create(file=PNG, purpose="vision")

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

    assert _image_urls_seen(simulator) == [PNG_URL]


async def test_a_pasted_blob_that_is_an_image_reaches_the_model_by_a_file_part(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    image = await alice.files.create(file=("blob", PNG), purpose="user_data")

    await alice.chat.completions.create(
        model="hermes-agent",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "file", "file": {"file_id": image.id}},
                ],
            }
        ],
    )

    assert _image_urls_seen(simulator) == [PNG_URL]


async def test_a_file_named_as_an_image_that_is_none_is_a_400_and_nothing_runs(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    fake = await alice.files.create(file=("photo.png", b"not an image"), purpose="vision")
    before = len(_calls(simulator))

    with pytest.raises(openai.BadRequestError, match="not an image"):
        await alice.responses.create(
            model="hermes-agent",
            input=[
                {
                    "role": "user",
                    "content": [{"type": "input_image", "file_id": fake.id, "detail": "auto"}],
                }
            ],
        )

    assert len(_calls(simulator)) == before


def _text_seen(simulator: SimulatorServer) -> str:
    messages = _calls(simulator)[-1].body["messages"]
    return "".join(
        m["content"]
        if isinstance(m["content"], str)
        else "".join(p.get("text", "") for p in m["content"])
        for m in messages
        if m["role"] == "user"
    )


def _looking_at(file_id: str) -> list[Any]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Look."},
                {"type": "input_image", "file_id": file_id, "detail": "auto"},
            ],
        }
    ]


async def test_a_conversation_whose_item_names_a_deleted_image_goes_on_with_a_note(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    image = await alice.files.create(file=("chart.png", PNG), purpose="vision")
    item: Any = {"type": "message", **_looking_at(image.id)[0]}
    conversation = await alice.conversations.create(items=[item])
    await alice.responses.create(
        model="hermes-agent", input="What is it?", conversation=conversation.id
    )
    await alice.files.delete(image.id)

    later = await alice.responses.create(
        model="hermes-agent", input="And now?", conversation=conversation.id
    )

    assert later.status == "completed"
    assert f"({image.id}); it could not be read here: it has been deleted since" in _text_seen(
        simulator
    )


async def test_a_response_chain_past_a_deleted_image_goes_on_with_a_note(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    image = await alice.files.create(file=("chart.png", PNG), purpose="vision")
    first = await alice.responses.create(model="hermes-agent", input=_looking_at(image.id))
    await alice.files.delete(image.id)

    later = await alice.responses.create(
        model="hermes-agent", input="And now?", previous_response_id=first.id
    )

    assert later.status == "completed"
    assert "it has been deleted since" in _text_seen(simulator)
    with pytest.raises(openai.NotFoundError):  # named by the new message: still a 404
        await alice.responses.create(
            model="hermes-agent", input=_looking_at(image.id), previous_response_id=first.id
        )
