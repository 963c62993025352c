"""A reload of the file the replicas share that would serve nothing (no upstream, no profile)
is refused by every replica, which goes on serving the configuration it has (#28, point 6: it
used to be applied, and every replica answered 502 within 2 s with only a warning logged)."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.plain_http import TLS_UNUSED
from tests.server.served import until
from tests.server.test_replicas import (  # noqa: F401 (fixtures)
    AUTH,
    KEY,
    OWNER,
    Replica,
    postgres,
    replicas,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


async def test_a_file_that_serves_nothing_is_refused_by_every_replica(
    replicas: dict[str, Replica],  # noqa: F811
    tmp_path: Path,
) -> None:
    config = tmp_path / "hermes.yaml"  # the file all three replicas serve
    config.write_text(f"server:\n  api_keys: [{{principal: {OWNER}, key: {KEY}}}]\n")
    for replica in replicas.values():
        replica.process.send_signal(signal.SIGHUP)  # at once, not at the next 2 s look

    for replica in replicas.values():

        def refused(replica: Replica = replica) -> bool:
            said = replica.log.read_text()
            return "config reload refused" in said and "configures no upstream model" in said

        assert await until(refused, server=replica), replica.name

    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "still there?"}]}
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=AUTH, timeout=60) as http:
        for replica in replicas.values():
            answer = await http.post(f"{replica.base_url}/v1/chat/completions", json=body)
            assert answer.status_code == 200, (replica.name, answer.text)
            assert answer.json()["choices"][0]["message"]["content"]
