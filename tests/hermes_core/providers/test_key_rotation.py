"""Key rotation, for every adapter: a key re-read after a refusal is the one the next call
sends, and the key is never held anywhere else (an SDK client made once keeps the old one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.providers.base import API_MODES, ApiMode, ModelRequest
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.hermes_core.providers.conftest import ProviderFactory, collect, final

HELLO = ModelRequest(messages=[{"role": "user", "content": "hi"}])


def _key_of(headers: dict[str, str]) -> str:
    # Anthropic's SDK sends x-api-key or a bearer token, depending on its version.
    return headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")


@pytest.mark.parametrize("api_mode", API_MODES)
async def test_a_rotated_key_is_sent_once_it_is_read_again(
    simulator: SimulatorServer, make_provider: ProviderFactory, tmp_path: Path, api_mode: ApiMode
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("old-key\n")
    scenario = Scenario(api_key="new-key", steps=[Step(reply=Reply(text="welcome back"))])
    simulator.state.script("rotated", scenario)
    provider = make_provider(api_mode, "rotated", api_key=None, api_key_file=str(key_file))

    with pytest.raises(ProviderError) as refused:
        await collect(provider, HELLO)
    assert refused.value.kind is ErrorKind.AUTH
    assert await provider.refresh_credentials() is False  # the file still holds the old key
    key_file.write_text("new-key\n")
    assert await provider.refresh_credentials() is True
    assert final(await collect(provider, HELLO)).message["content"] == "welcome back"

    sent = [_key_of(r.headers) for r in simulator.state.requests(scenario="rotated")]
    assert sent == ["old-key", "new-key"]
