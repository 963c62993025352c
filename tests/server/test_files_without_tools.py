"""Files a message refers to, on a profile whose agent has no file tools: an id that is not one
of the key's uploads is a 404 (streaming or not, chat or Responses), and the model is given
the file itself — a PDF's text (extracted in the sandbox), a CSV's text, an image."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from hermes_core.persistence import sqlite_url
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.simulator import SimulatorServer
from tests.documents import pdf, require_data_python
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL, make_services

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def files_server(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    data = tmp_path_factory.mktemp("no-tools")
    services = make_services(
        _simulator_server, database_url=sqlite_url(data / "hermes.db"), files_dir=data / "files"
    )
    with ThreadedServer(create_app(services)) as server:
        yield server


async def _client(server: ThreadedServer, key: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=server.base_url + "/v1",
        api_key=key,
        max_retries=0,
    ) as sdk:
        yield sdk


@pytest.fixture
async def alice(files_server: ThreadedServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async for sdk in _client(files_server, KEY_ALICE):
        yield sdk


@pytest.fixture
async def bob(files_server: ThreadedServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async for sdk in _client(files_server, KEY_BOB):
        yield sdk


def _asking_about(file: dict[str, Any]) -> list[Any]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What does it say?"},
                {"type": "file", "file": file},
            ],
        }
    ]


def _upstream_calls(simulator: SimulatorServer) -> list[Any]:
    return [r for r in simulator.state.requests() if r.model == UPSTREAM_MODEL]


def _user_parts_seen(simulator: SimulatorServer) -> list[dict[str, Any]]:
    """The content parts of the user's last message, as the upstream received them."""
    body = _upstream_calls(simulator)[-1].body
    content: Any = next(m for m in reversed(body["messages"]) if m["role"] == "user")["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _text_seen(simulator: SimulatorServer) -> str:
    return "".join(part.get("text", "") for part in _user_parts_seen(simulator))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_unknown_file_id_is_a_404_before_anything_runs(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer, stream: bool
) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await alice.chat.completions.create(
            model="hermes-agent",
            messages=_asking_about({"file_id": "file-000000000000000000000000"}),
            stream=stream,
        )

    assert caught.value.code == "file_not_found"
    assert _upstream_calls(simulator) == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_another_keys_file_is_a_404_in_chat_and_responses(
    alice: openai.AsyncOpenAI, bob: openai.AsyncOpenAI, simulator: SimulatorServer, stream: bool
) -> None:
    bobs = await bob.files.create(file=("notes.txt", b"bob's secret"), purpose="user_data")

    with pytest.raises(openai.NotFoundError) as in_chat:
        await alice.chat.completions.create(
            model="hermes-agent", messages=_asking_about({"file_id": bobs.id}), stream=stream
        )
    with pytest.raises(openai.NotFoundError) as in_responses:
        await alice.responses.create(
            model="hermes-agent",
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Read it."},
                        {"type": "input_file", "file_id": bobs.id},
                    ],
                }
            ],
            stream=stream,
        )

    assert in_chat.value.code == in_responses.value.code == "file_not_found"
    assert _upstream_calls(simulator) == []


async def test_an_uploaded_pdfs_text_reaches_the_model(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    require_data_python()
    uploaded = await alice.files.create(
        file=("minutes.pdf", pdf(["Budget approved", "Next meeting Friday"])), purpose="user_data"
    )

    await alice.chat.completions.create(
        model="hermes-agent", messages=_asking_about({"file_id": uploaded.id})
    )

    seen = _text_seen(simulator)
    assert f"[The user attached minutes.pdf ({uploaded.id}); its text follows.]" in seen
    assert "--- page 1 ---\nBudget approved\n--- page 2 ---\nNext meeting Friday" in seen
    assert "no tools to read files" not in seen


async def test_an_inline_csv_reaches_the_model_as_text(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    data = base64.b64encode(b"region,total\nnorth,12\n").decode()

    await alice.chat.completions.create(
        model="hermes-agent",
        messages=_asking_about({"filename": "sales.csv", "file_data": data}),
    )

    assert "region,total\nnorth,12\n[End of sales.csv.]" in _text_seen(simulator)


async def test_an_uploaded_image_reaches_the_model_as_an_image(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    uploaded = await alice.files.create(file=("dot.png", PNG), purpose="vision")

    await alice.chat.completions.create(
        model="hermes-agent", messages=_asking_about({"file_id": uploaded.id})
    )

    images = [p for p in _user_parts_seen(simulator) if p["type"] == "image_url"]
    url = f"data:image/png;base64,{base64.b64encode(PNG).decode()}"
    assert [image["image_url"]["url"] for image in images] == [url]


async def test_a_pdf_that_cannot_be_read_reaches_the_model_as_a_note_saying_why(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer, tmp_path: Path
) -> None:
    require_data_python()
    uploaded = await alice.files.create(
        file=("broken.pdf", b"%PDF-1.4\nnothing here\n"), purpose="user_data"
    )

    await alice.chat.completions.create(
        model="hermes-agent", messages=_asking_about({"file_id": uploaded.id})
    )

    seen = _text_seen(simulator)
    assert f"[The user attached broken.pdf ({uploaded.id}); it could not be read here: " in seen
    assert "it is not a readable PDF" in seen
