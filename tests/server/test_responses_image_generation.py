"""The hosted ``image_generation`` tool on ``/v1/responses``, served by the agent's
``generate_image`` tool and the profile's image providers (``profiles[].image_providers``).

A real ``hermes-server serve`` process in front of the simulator (its chat endpoint is the
model, its images endpoint the image model), driven through the official SDK with strict
response validation: the agent's image calls show as ``image_generation_call`` items whose
``result`` is the image; streamed, with their partial images; a profile without image
providers refuses the tool naming the setting; a failing image provider gives way to the next.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI, DefaultAsyncHttpxClient

from server.simulator import Fault, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.served import Served, answer, call, script, serving, simulated_provider

pytestmark = pytest.mark.slow

UPSTREAM = "image-tools-agent"
FIRST_IMAGES, SECOND_IMAGES = "image-model-a", "image-model-b"
"""The image models of the two image providers: what tests script the simulator under."""
KEY = "sk-images-alice-0123456789"
MODEL = "hermes-agent"
PLAIN_MODEL = "plain-agent"
"""A profile without image providers."""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IMAGE_GENERATION: Any = {"type": "image_generation"}


@pytest.fixture(scope="module")
def image_server(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    sim, data = _simulator_server, tmp_path_factory.mktemp("image-generation")
    config = (
        f"server:\n  data_dir: {data}\n  api_keys: [{{key: {KEY}, principal: alice}}]\n"
        "providers:\n"
        + simulated_provider(sim, UPSTREAM)
        + simulated_provider(sim, FIRST_IMAGES, name="images-a")
        + simulated_provider(sim, SECOND_IMAGES, name="images-b")
        + "profiles:\n"
        f"  - {{id: {MODEL}, providers: [sim], image_providers: [images-a, images-b]}}\n"
        f"  - {{id: {PLAIN_MODEL}, providers: [sim], tools: [files]}}\n"
    )
    with serving(data, config) as served:
        yield served


@pytest.fixture
async def client(image_server: Served) -> AsyncIterator[AsyncOpenAI]:
    """The official SDK, strict: every item and event must parse as its model."""
    async with AsyncOpenAI(
        http_client=DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=f"{image_server.base_url}/v1",
        api_key=KEY,
        max_retries=0,
        timeout=60,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk


def image_calls(response: Any) -> list[Any]:
    return [item for item in response.output if item.type == "image_generation_call"]


def image_requests(simulator: SimulatorServer) -> list[str]:
    """The image models asked, in order."""
    return [r.model for r in simulator.state.requests() if r.path.endswith("/images/generations")]


async def test_image_generation_returns_an_image_generation_call_with_the_png(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(
        simulator,
        UPSTREAM,
        call("generate_image", prompt="a red fox in snow"),
        answer("Here it is."),
    )
    response = await client.responses.create(
        model=MODEL, input="Draw a red fox.", tools=[IMAGE_GENERATION]
    )
    [image] = image_calls(response)
    assert image.status == "completed"
    assert base64.b64decode(image.result or "").startswith(PNG_SIGNATURE)
    assert response.output_text == "Here it is."
    assert [item.type for item in response.output if item.type == "function_call"] == []
    assert image_requests(simulator) == [FIRST_IMAGES]


async def test_streamed_image_generation_emits_its_events_in_order(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, UPSTREAM, call("generate_image", prompt="a lighthouse"), answer("Done."))
    tool: Any = {"type": "image_generation", "partial_images": 2}
    events = []
    async with client.responses.stream(model=MODEL, input="Draw.", tools=[tool]) as stream:
        async for event in stream:
            events.append(event)
        final = await stream.get_final_response()
    [image] = image_calls(final)
    index = final.output.index(image)
    about = [e for e in events if getattr(e, "output_index", None) == index]
    assert [e.type for e in about] == [
        "response.output_item.added",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.generating",
        "response.image_generation_call.partial_image",
        "response.image_generation_call.partial_image",
        "response.image_generation_call.completed",
        "response.output_item.done",
    ]
    partials = [e for e in about if e.type == "response.image_generation_call.partial_image"]
    assert [e.partial_image_index for e in partials] == [0, 1]
    assert all(base64.b64decode(e.partial_image_b64).startswith(PNG_SIGNATURE) for e in partials)
    assert base64.b64decode(image.result or "").startswith(PNG_SIGNATURE)
    [sent] = [r for r in simulator.state.requests() if r.path.endswith("/images/generations")]
    assert sent.body["partial_images"] == 2


async def test_image_generation_without_image_providers_is_a_400_naming_the_setting(
    client: AsyncOpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(model=PLAIN_MODEL, input="hi", tools=[IMAGE_GENERATION])
    assert caught.value.param == "tools"
    assert "profiles[].image_providers" in caught.value.message


async def test_a_failing_first_images_provider_falls_back_to_the_second(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    simulator.state.script(FIRST_IMAGES, Scenario(steps=[Step(fault=Fault(status=503))]))
    script(simulator, UPSTREAM, call("generate_image", prompt="a red fox"), answer("Here."))
    response = await client.responses.create(
        model=MODEL, input="Draw a fox.", tools=[IMAGE_GENERATION]
    )
    [image] = image_calls(response)
    assert image.status == "completed"
    assert base64.b64decode(image.result or "").startswith(PNG_SIGNATURE)
    assert image_requests(simulator) == [FIRST_IMAGES, SECOND_IMAGES]


async def test_image_generation_options_out_of_range_are_a_400_naming_tools(
    client: AsyncOpenAI,
) -> None:
    tool: Any = {"type": "image_generation", "partial_images": 5}
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(model=MODEL, input="hi", tools=[tool])
    assert caught.value.param == "tools"
    assert "partial_images" in caught.value.message
