"""A background response's webhook names the ending its Response has: an answer the
upstream's content filter stopped is ``incomplete`` (``incomplete_details.reason:
content_filter``), so its event is ``response.incomplete``, not ``response.failed`` — a
receiver subscribed to the one, or reading the response on the other, would be misled."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from server.simulator import Reply, SimulatorServer, Step
from tests.server.served import Served, script, sdk_client, serving, simulated_provider, until
from tests.server.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.slow

KEY = "sk-webhook-endings-0123456789ab"
UPSTREAM = "webhook-endings-upstream"
SECRET = "whsec_" + base64.b64encode(b"a shared secret, 32 bytes long!!").decode()


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer,
    receiver: WebhookReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    data: Path = tmp_path_factory.mktemp("webhook-endings")
    config = (
        f"server:\n  api_keys: [{{principal: alice, key: {KEY}}}]\n"
        'web:\n  allow: ["127.0.0.1"]\n'
        f"providers:\n{simulated_provider(_simulator_server, UPSTREAM)}"
        "profiles:\n  - {id: hermes-agent, providers: [sim]}\n"
        f'webhooks:\n  - url: "{receiver.url("endings")}"\n    secret: "{SECRET}"\n'
    )
    with serving(data, config) as running:
        yield running


async def test_a_filtered_background_response_is_announced_incomplete(
    served: Served, receiver: WebhookReceiver, simulator: SimulatorServer
) -> None:
    script(
        simulator,
        UPSTREAM,
        Step(reply=Reply(text="Here is how to", finish_reason="content_filter")),
    )
    async with sdk_client(served.base_url, KEY) as client:
        created = await client.responses.create(
            model="hermes-agent", input="hello", background=True
        )

        def announced() -> list[str]:
            hits = receiver.delivered("endings")
            return [h.event["type"] for h in hits if h.event["data"]["id"] == created.id]

        assert await until(lambda: bool(announced()), server=served)
        stored = await client.responses.retrieve(created.id)

    assert stored.status == "incomplete"
    assert stored.incomplete_details is not None
    assert stored.incomplete_details.reason == "content_filter"
    (hit,) = [h for h in receiver.delivered("endings") if h.event["data"]["id"] == created.id]
    event = OpenAI(api_key="unused").webhooks.unwrap(hit.body, hit.headers, secret=SECRET)
    assert event.type == "response.incomplete"
