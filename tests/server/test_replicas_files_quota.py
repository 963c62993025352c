"""The Files API's per-key quota holds across replicas: uploads of one key landing on several
replicas at once cannot each pass the check and take the key past its quota."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest

from tests.plain_http import TLS_UNUSED
from tests.server.test_replicas import (  # noqa: F401 (fixtures)
    MAX_FILES,
    Deployment,
    Key,
    Replica,
    deployed,
    deployment,
    key,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

UPLOADS_PER_REPLICA = 4


async def test_uploads_at_once_on_three_replicas_keep_a_key_within_its_file_count(
    deployed: dict[str, Replica],  # noqa: F811 (the fixture)
    key: Key,  # noqa: F811 (the fixture)
    deployment: Deployment,  # noqa: F811 (the fixture)
) -> None:
    shared = deployment.directory / "shared"
    before = _stored(shared)  # the files other tests of the deployment keep
    data = os.urandom(256 * 1024)  # enough bytes that the check and the insert are apart
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:

        async def upload(replica: Replica, n: int) -> httpx.Response:
            return await http.post(
                f"{replica.base_url}/v1/files",
                files={"file": (f"part-{replica.name}-{n}.bin", data, "application/octet-stream")},
                data={"purpose": "user_data"},
            )

        sent = [upload(r, n) for n in range(UPLOADS_PER_REPLICA) for r in deployed.values()]
        answers = await asyncio.gather(*sent)
        statuses = sorted(answer.status_code for answer in answers)
        assert statuses == [200] * MAX_FILES + [413] * (len(sent) - MAX_FILES), [
            answer.text for answer in answers
        ]
        refused = [answer for answer in answers if answer.status_code == 413]
        assert {answer.json()["error"]["code"] for answer in refused} == {"too_many_files"}
        for replica in deployed.values():
            listed = await http.get(f"{replica.base_url}/v1/files")
            assert listed.status_code == 200, listed.text
            assert len(listed.json()["data"]) == MAX_FILES
    kept = _stored(shared) - before
    assert len(kept) == MAX_FILES, kept  # a refused upload leaves no bytes behind
    assert all(replica.alive() for replica in deployed.values())


def _stored(shared: Path) -> set[Path]:
    """The uploads' files on the shared volume."""
    return {path for path in shared.rglob("file-*") if path.is_file()}
