"""The images API client against the simulator's ``/v1/images/generations``: one image in one
answer, partial images streamed before the final one, errors as ProviderError, and the chain
falling back to its next provider."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import SecretStr

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.providers import images_api
from hermes_core.providers.config import ProviderConfig
from hermes_core.providers.images_api import ImageChain, ImageRequest, ImagesProvider
from server.simulator import Fault, Scenario, SimulatorServer, Step

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

MakeImages = Callable[..., ImagesProvider]


@pytest.fixture
async def make_images(simulator: SimulatorServer) -> AsyncIterator[MakeImages]:
    made: list[ImagesProvider] = []

    def factory(model: str, name: str = "images") -> ImagesProvider:
        config = ProviderConfig(
            name=name,
            model=model,
            api_mode="chat_completions",
            base_url=simulator.base_url + "/v1",
            api_key=SecretStr("image-key"),
            timeout=10.0,
        )
        provider = ImagesProvider(config)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


def fail(simulator: SimulatorServer, model: str, status: int) -> None:
    simulator.state.script(model, Scenario(steps=[Step(fault=Fault(status=status))]))


async def test_an_image_comes_back_as_png_bytes(
    make_images: MakeImages, simulator: SimulatorServer
) -> None:
    image = await make_images("gpt-image-1").generate(
        ImageRequest(prompt="a red fox", size="1024x1024", quality="low")
    )
    assert image.data.startswith(PNG_SIGNATURE)
    assert image.mime == "image/png"
    [sent] = simulator.state.requests()
    assert sent.path == "/v1/images/generations"
    assert sent.headers["authorization"] == "Bearer image-key"
    assert sent.body == {
        "model": "gpt-image-1",
        "prompt": "a red fox",
        "n": 1,
        "size": "1024x1024",
        "quality": "low",
    }


async def test_partial_images_stream_in_order_before_the_final_image(
    make_images: MakeImages, simulator: SimulatorServer
) -> None:
    partials: list[tuple[int, str]] = []
    image = await make_images("gpt-image-1").generate(
        ImageRequest(prompt="a lighthouse", partial_images=2),
        lambda index, data: partials.append((index, data)),
    )
    assert [index for index, _ in partials] == [0, 1]
    assert image.data.startswith(PNG_SIGNATURE)
    [sent] = simulator.state.requests()
    assert sent.body["stream"] is True
    assert sent.body["partial_images"] == 2


async def test_dall_e_is_asked_for_base64(
    make_images: MakeImages, simulator: SimulatorServer
) -> None:
    await make_images("dall-e-3").generate(ImageRequest(prompt="a cat"))
    [sent] = simulator.state.requests()
    assert sent.body["response_format"] == "b64_json"


@pytest.mark.parametrize(
    ("status", "kind"), [(500, ErrorKind.SERVER_ERROR), (400, ErrorKind.INVALID_REQUEST)]
)
async def test_an_upstream_error_is_a_provider_error(
    make_images: MakeImages, simulator: SimulatorServer, status: int, kind: ErrorKind
) -> None:
    fail(simulator, "gpt-image-1", status)
    with pytest.raises(ProviderError) as raised:
        await make_images("gpt-image-1").generate(ImageRequest(prompt="a fox"))
    assert raised.value.kind is kind


async def test_a_failing_provider_gives_way_to_the_next(
    make_images: MakeImages, simulator: SimulatorServer
) -> None:
    fail(simulator, "image-a", 503)
    chain = ImageChain([make_images("image-a", "a"), make_images("image-b", "b")])
    image = await chain.generate(ImageRequest(prompt="a fox"))
    assert image.provider == "b"
    assert [r.model for r in simulator.state.requests()] == ["image-a", "image-b"]


async def test_a_refused_prompt_is_not_tried_elsewhere(
    make_images: MakeImages, simulator: SimulatorServer
) -> None:
    fail(simulator, "image-a", 400)
    chain = ImageChain([make_images("image-a", "a"), make_images("image-b", "b")])
    with pytest.raises(ProviderError):
        await chain.generate(ImageRequest(prompt="a fox"))
    assert [r.model for r in simulator.state.requests()] == ["image-a"]


async def test_a_stream_cut_before_the_final_image_is_an_error(
    make_images: MakeImages, simulator: SimulatorServer
) -> None:
    steps = [Step(fault=Fault(disconnect_after=1))]
    simulator.state.script("gpt-image-1", Scenario(steps=steps))
    seen: list[Any] = []
    with pytest.raises(ProviderError):
        await make_images("gpt-image-1").generate(
            ImageRequest(prompt="a fox", partial_images=2), lambda i, d: seen.append(i)
        )
    assert seen == [0]


@pytest.mark.parametrize("partial_images", [0, 2])
async def test_an_answer_larger_than_the_cap_is_refused_not_read_whole(
    make_images: MakeImages, monkeypatch: pytest.MonkeyPatch, partial_images: int
) -> None:
    monkeypatch.setattr(images_api, "MAX_ANSWER_BYTES", 64)  # any real image is past it

    with pytest.raises(ProviderError, match="larger than 64 bytes"):
        await make_images("gpt-image-1").generate(
            ImageRequest(prompt="a red fox", partial_images=partial_images)
        )
