"""A reload of the file the replicas share that would serve nothing (no upstream, no profile)
is refused by every replica, which goes on serving the configuration it has (#28, point 6: it
used to be applied, and every replica answered 502 within 2 s with only a warning logged)."""

from __future__ import annotations

import signal

import httpx
import pytest

from tests.plain_http import TLS_UNUSED
from tests.server.served import until
from tests.server.test_replicas import (  # noqa: F401 (fixtures)
    Deployment,
    Key,
    Replica,
    deployed,
    deployment,
    key,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

LIVE = "live (was"
"""What a replica logs when a reload of its file is in force."""


async def test_a_file_that_serves_nothing_is_refused_by_every_replica(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    deployment: Deployment,  # noqa: F811
) -> None:
    config = deployment.config  # the file all three replicas serve
    serving = config.read_text()
    secret = key.auth["authorization"].removeprefix("Bearer ")
    config.write_text(f"server:\n  api_keys: [{{principal: {key.owner}, key: {secret}}}]\n")
    try:
        for replica in deployed.values():
            replica.process.send_signal(signal.SIGHUP)  # at once, not at the next 2 s look

        for replica in deployed.values():

            def refused(replica: Replica = replica) -> bool:
                said = replica.log.read_text()
                return "config reload refused" in said and "configures no upstream model" in said

            assert await until(refused, server=replica), replica.name

        # Still the file that serves nothing: each replica serves what it had.
        body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "still there?"}]}
        async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
            for replica in deployed.values():
                answer = await http.post(f"{replica.base_url}/v1/chat/completions", json=body)
                assert answer.status_code == 200, (replica.name, answer.text)
                assert answer.json()["choices"][0]["message"]["content"]
    finally:
        config.write_text(serving)  # what the deployment's other tests (and restarts) need
        await _taken_up_again(list(deployed.values()))


async def _taken_up_again(replicas: list[Replica]) -> None:
    """Each replica still running has the file back in force before the next test, rather
    than at its next look at the file (every 2 s), during that test."""
    running = [replica for replica in replicas if replica.alive()]
    seen = {replica.name: replica.log.read_text().count(LIVE) for replica in running}
    for replica in running:
        replica.process.send_signal(signal.SIGHUP)
    for replica in running:

        def live(replica: Replica = replica) -> bool:
            return replica.log.read_text().count(LIVE) > seen[replica.name]

        assert await until(live, server=replica), replica.name
