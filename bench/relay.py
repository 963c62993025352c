"""The thinnest Python relay: aiohttp in, aiohttp out, a stream passed through as it arrives.

The yardstick of issue #27 (``bench/relay_compare.py``): what a proxy that does nothing but
forward costs per request, so hermes-server's own work can be stated as a multiple of it.

    python -m bench.relay --upstream http://127.0.0.1:9100 --port 8124
"""

from __future__ import annotations

import argparse

import aiohttp
from aiohttp import web

FORWARDED = ("content-type",)


async def _health(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def _app(upstream: str) -> web.Application:
    app = web.Application()
    client: dict[str, aiohttp.ClientSession] = {}

    async def start(_: web.Application) -> None:
        client["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def stop(_: web.Application) -> None:
        await client["session"].close()

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"content-type": "application/json", "authorization": "Bearer relay"}
        url = upstream + request.path
        async with client["session"].post(url, data=body, headers=headers) as reply:
            out_headers = {k: v for k, v in reply.headers.items() if k.lower() in FORWARDED}
            if not reply.headers.get("content-type", "").startswith("text/event-stream"):
                return web.Response(
                    body=await reply.read(), status=reply.status, headers=out_headers
                )
            response = web.StreamResponse(status=reply.status, headers=out_headers)
            await response.prepare(request)
            async for chunk in reply.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_get("/health", _health)
    app.router.add_post("/v1/chat/completions", relay)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="base URL, without /v1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    try:
        import uvloop  # the same event loop hermes-server serves on

        uvloop.install()
    except ImportError:
        pass
    web.run_app(_app(args.upstream), host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
