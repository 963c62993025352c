"""A real HTTP server on loopback with the pages the web tests fetch, and fake search backends
that answer in each vendor's documented shape (and record what they were asked)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from aiohttp import web

ARTICLE = """<!doctype html>
<html><head><title>The Lighthouse Keepers of Brightwater</title></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About</a> | <a href="/login">Log in</a></nav>
<article>
<h1>The Lighthouse Keepers of Brightwater</h1>
<p>The Brightwater lighthouse was kept by the Marsh family for 112 years, from 1851 until the
lamp was automated in 1963. Elsa Marsh, the last keeper, logged every passing ship by hand.</p>
<p>Her logbooks, 41 volumes in all, are now held by the county archive and were digitised in
2019, so that anyone can read how the light was tended through storms and war.</p>
</article>
<footer>Copyright the Brightwater Historical Society</footer>
</body></html>
"""

SEARCH_HITS = [
    {
        "title": "The Lighthouse Keepers of Brightwater",
        "path": "/article",
        "snippet": "The Marsh family kept the <strong>Brightwater</strong> light for 112 years.",
    },
    {
        "title": "Brightwater tide tables",
        "path": "/tides",
        "snippet": "High and low water at Brightwater harbour.",
    },
]


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class WebSite:
    """The server's address and what it has been asked."""

    host: str
    port: int
    requests: list[Recorded] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def asked(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == path]


def article(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    h._send(200, "text/html; charset=utf-8", ARTICLE.encode())


def data(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    h._send(200, "application/json", b'{"keeper":"Elsa Marsh","volumes":41}')


def notes(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    h._send(200, "text/plain; charset=utf-8", b"Plain notes: the lamp burned whale oil.")


def odd_charset(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    h._send(200, "text/plain; charset=x-no-such-charset", "caf\u00e9".encode())


def codec_charset(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    """UTF-8 text declared in a codec of Python's that is no text encoding (``?charset=``)."""
    kind = query.get("type", ["text/plain"])[0]
    h._send(200, f"{kind}; charset={query['charset'][0]}", '"caf\u00e9"'.encode())


def image(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    h._send(200, "image/png", b"\x89PNG\r\n\x1a\n" + b"\0" * 100)


def big(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    h._send(200, "text/plain", b"x" * 300_000)


def redirect(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    h._send(302, "text/plain", b"", {"Location": query["to"][0]})


def loop(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    h._send(302, "text/plain", b"", {"Location": "/loop"})


def slow(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    time.sleep(float(query.get("seconds", ["5"])[0]))
    h._send(200, "text/plain", b"finally")


def searxng(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    if query.get("format") != ["json"]:
        h._send(403, "text/plain", b"format not allowed")
        return
    results = [
        {"title": r["title"], "url": site.url(r["path"]), "content": r["snippet"]}
        for r in SEARCH_HITS
    ]
    h._send(200, "application/json", json.dumps({"results": results}).encode())


def brave(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    if h.headers.get("X-Subscription-Token") != "brave-test-key":
        h._send(401, "application/json", b'{"error":"bad token"}')
        return
    results = [
        {"title": r["title"], "url": site.url(r["path"]), "description": r["snippet"]}
        for r in SEARCH_HITS
    ]
    h._send(200, "application/json", json.dumps({"web": {"results": results}}).encode())


def tavily(h: Any, site: WebSite, query: dict[str, list[str]], body: bytes) -> None:
    if h.headers.get("Authorization") != "Bearer tvly-test-key":
        h._send(401, "application/json", b'{"detail":"bad key"}')
        return
    request = json.loads(body)
    results = [
        {"title": r["title"], "url": site.url(r["path"]), "content": r["snippet"], "score": 0.9}
        for r in SEARCH_HITS
    ][: request.get("max_results", 5)]
    answer = {"query": request["query"], "results": results, "response_time": 0.1}
    h._send(200, "application/json", json.dumps(answer).encode())


ROUTES = {
    "/article": article,
    "/data.json": data,
    "/notes.txt": notes,
    "/image.png": image,
    "/odd-charset": odd_charset,
    "/codec-charset": codec_charset,
    "/big": big,
    "/redirect": redirect,
    "/loop": loop,
    "/slow": slow,
    "/search": searxng,
    "/res/v1/web/search": brave,
    "/tavily/search": tavily,
}


def _handler(site: WebSite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            self._serve(b"")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._serve(self.rfile.read(length))

        def _serve(self, body: bytes) -> None:
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            site.requests.append(
                Recorded(self.command, parts.path, query, dict(self.headers.items()), body)
            )
            route = ROUTES.get(parts.path)
            if route is None:
                self._send(404, "text/plain", b"no such page")
                return
            route(self, site, query, body)

        def _send(
            self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

    return Handler


@contextmanager
def web_site(host: str = "127.0.0.1", port: int = 0) -> Iterator[WebSite]:
    """A site served on ``host`` (any free port, unless given) until the block ends."""

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        def handle_error(self, request: Any, client_address: Any) -> None:
            return  # a client hanging up early (a size or time cap) is what some tests do

    site = WebSite(host, 0)
    server = Server((host, port), _handler(site))
    site.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()


@contextlib.asynccontextmanager
async def served_page(
    body: bytes, content_type: str = "application/json", sent: Callable[[], None] = lambda: None
) -> AsyncIterator[str]:
    """A page on loopback (an aiohttp server, on the test's own loop) answering ``body`` as
    ``content_type``, calling ``sent`` after each answer: its URL."""

    async def handle(request: web.Request) -> web.Response:
        response = web.Response(body=body, content_type=content_type)
        await response.prepare(request)
        await response.write_eof()
        sent()
        return response

    app = web.Application()
    app.router.add_get("/page.json", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/page.json"
    finally:
        await runner.cleanup()
