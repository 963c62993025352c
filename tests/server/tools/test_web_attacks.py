"""A tenant's ``web_fetch`` of hostile pages, through a real server: another tenant's uploads
(which wait on the same worker threads as lookups and workspace snapshots) must not notice.

The page is 2 MB of nothing but links: trafilatura takes seconds of CPU per copy. Eight fetched
at once held every thread of the loop's default pool, and another key's upload waited for them
(measured 10-31 s before HTML got its own pool; it is now read by child processes,
``hermes_core/tools/web/page_readers.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from server.simulator import SimulatorServer
from tests.server.served import serving
from tests.server.tools.conftest import KEY, KEY_BOB, UPSTREAM, answer, calls, script

pytestmark = pytest.mark.slow  # starts a server process

MODEL = "web-agent"
HOSTILE = (b"<html><body>" + b"<p>word <a href='/x'>link</a></p>" * 60_000)[: 2 * 1024 * 1024]
FETCHES = 8
UPLOAD_BOUND_S = 3.0
"""Another tenant's upload while the pages are read: it took 10-31 s when they held the
shared threads; loose, for a busy machine."""

CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {key}, principal: alice}}
    - {{key: {key_bob}, principal: bob}}
providers:
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
    tools: [web]
web:
  allow: ["127.0.0.1:{site_port}"]
  timeout_seconds: 3
"""


@pytest.fixture
async def hostile_site() -> AsyncIterator[int]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(body=HOSTILE, content_type="text/html")

    app = web.Application()
    app.router.add_get("/page", page)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


@pytest.fixture
def web_server(
    _simulator_server: SimulatorServer, hostile_site: int, tmp_path: Path
) -> Iterator[str]:
    config = CONFIG.format(
        data=tmp_path,
        key=KEY,
        key_bob=KEY_BOB,
        upstream=UPSTREAM,
        simulator=_simulator_server.base_url,
        model=MODEL,
        site_port=hostile_site,
    )
    with serving(tmp_path, config) as served:
        yield served.base_url


async def _upload(client: httpx.AsyncClient) -> float:
    started = time.monotonic()
    response = await client.post(
        "/v1/files",
        headers={"authorization": f"Bearer {KEY_BOB}"},
        files={"file": ("notes.txt", b"victim notes\n", "text/plain")},
        data={"purpose": "user_data"},
    )
    assert response.status_code == 200, response.text
    return time.monotonic() - started


async def test_hostile_pages_fetched_at_once_leave_other_tenants_uploads_prompt(
    web_server: str, hostile_site: int, simulator: SimulatorServer
) -> None:
    url = f"http://127.0.0.1:{hostile_site}/page"
    script(simulator, calls(*[("web_fetch", {"url": url})] * FETCHES), answer("done"))
    async with httpx.AsyncClient(base_url=web_server, timeout=120) as client:
        quiet = max([await _upload(client) for _ in range(3)])
        attack = asyncio.create_task(
            client.post(
                "/v1/chat/completions",
                headers={"authorization": f"Bearer {KEY}"},
                json={"model": MODEL, "messages": [{"role": "user", "content": "read it"}]},
            )
        )
        attacked: list[float] = []
        while not attack.done():
            attacked.append(await _upload(client))
        response = await attack
        for _ in range(3):  # and just after, as their readers are killed
            attacked.append(await _upload(client))
    print(f"\nupload worst: quiet {quiet * 1000:.0f} ms, attacked {max(attacked) * 1000:.0f} ms")
    assert response.status_code == 200, response.text
    assert max(attacked) < UPLOAD_BOUND_S, attacked
