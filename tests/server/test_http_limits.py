"""What a slow or hostile client may hold of the server (server/http/connection_limits.py), over raw
sockets against a real uvicorn server with small limits."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from server.http.connection_limits import HttpLimits
from server.http.threaded import ThreadedServer

LIMITS = HttpLimits(
    head_timeout=0.5, max_head_bytes=4096, body_idle_timeout=0.5, body_min_bytes_per_second=1024
)
FULL_SIZE = HttpLimits(head_timeout=5.0, body_idle_timeout=5.0)
"""The documented head size (64 KiB), for heads near it."""
PATIENCE = 15.0
"""How long a test waits for the server to act (generous: the machine may be busy)."""


async def _echo_length(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(len(await request.body())))


async def _hello(_: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


SEEN: list[str] = []
"""Paths of the requests the apps got, in order."""


async def _seen(request: Request) -> PlainTextResponse:
    SEEN.append(request.url.path)
    return PlainTextResponse("seen")


def _app() -> Starlette:
    return Starlette(
        routes=[
            Route("/", _hello),
            Route("/seen", _seen),
            Route("/upload", _echo_length, methods=["POST"]),
        ]
    )


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadedServer]:
    with ThreadedServer(_app(), limits=LIMITS) as running:
        yield running


@pytest.fixture(scope="module")
def full_size_server() -> Iterator[ThreadedServer]:
    with ThreadedServer(_app(), limits=FULL_SIZE) as running:
        yield running


def _connect(server: ThreadedServer) -> socket.socket:
    connection = socket.create_connection((server.host, server.port), timeout=PATIENCE)
    return connection


def _read_until_closed(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (fails after PATIENCE)."""
    received = b""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        piece = connection.recv(65536)
        if not piece:
            return received
        received += piece
    pytest.fail(f"the server kept the connection open; it sent {received!r}")


def test_a_client_that_sends_nothing_is_cut_off(server: ThreadedServer) -> None:
    with _connect(server) as idle:
        assert _read_until_closed(idle).startswith(b"HTTP/1.1 408")


def test_slow_loris_connections_are_cut_off_however_many(server: ThreadedServer) -> None:
    connections = [_connect(server) for _ in range(50)]
    try:
        for connection in connections:
            connection.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        # Each keeps sending a header line now and then, never the end of the head.
        for connection in connections:
            connection.sendall(b"X-Slow: 1\r\n")
        answers = [_read_until_closed(connection) for connection in connections]
    finally:
        for connection in connections:
            connection.close()
    assert all(answer.startswith(b"HTTP/1.1 408") for answer in answers)


def test_a_head_larger_than_the_limit_is_a_431(server: ThreadedServer) -> None:
    with _connect(server) as connection:
        connection.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10_000 + b"\r\n")
        assert _read_until_closed(connection).startswith(b"HTTP/1.1 431")


def test_a_large_body_sent_with_its_head_in_one_piece_is_no_large_head(
    server: ThreadedServer,
) -> None:
    body = b"x" * 200_000
    head = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    with _connect(server) as connection:
        connection.sendall(head + body)
        answer = connection.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"200000")


def test_a_body_that_stops_arriving_is_cut_off(server: ThreadedServer) -> None:
    head = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
    with _connect(server) as connection:
        connection.sendall(head + b"only ten b")
        assert _read_until_closed(connection) == b""


def test_a_kept_alive_connection_serves_request_after_request(server: ThreadedServer) -> None:
    with _connect(server) as connection:
        for _ in range(3):
            connection.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = connection.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200")
            assert answer.endswith(b"hello")
            time.sleep(0.7)  # longer than the head timeout: idle between requests is not slow


def _big_head(path: bytes, header_bytes: int) -> bytes:
    return b"GET %s HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n" % (path, b"a" * header_bytes)


def test_a_100_kb_head_sent_in_one_write_is_a_431_and_never_reaches_the_app(
    full_size_server: ThreadedServer,
) -> None:
    SEEN.clear()
    with _connect(full_size_server) as connection:
        connection.sendall(_big_head(b"/seen", 100_000))
        assert _read_until_closed(connection).startswith(b"HTTP/1.1 431")
    assert SEEN == []


def test_a_60_kb_head_sent_in_one_write_is_served(full_size_server: ThreadedServer) -> None:
    with _connect(full_size_server) as connection:
        connection.sendall(_big_head(b"/", 60_000))
        answer = connection.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"hello")


def test_a_small_head_and_a_1_mb_body_in_one_write_are_served(
    full_size_server: ThreadedServer,
) -> None:
    body = b"x" * 1_000_000
    head = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    with _connect(full_size_server) as connection:
        connection.sendall(head + body)
        answer = connection.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"1000000")


def test_an_oversized_head_on_a_kept_alive_connection_is_a_431(
    full_size_server: ThreadedServer,
) -> None:
    with _connect(full_size_server) as connection:
        connection.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert connection.recv(65536).endswith(b"hello")
        connection.sendall(_big_head(b"/", 100_000))
        assert _read_until_closed(connection).startswith(b"HTTP/1.1 431")


def test_a_body_dripped_a_byte_at_a_time_is_cut_off_though_it_never_pauses_long(
    server: ThreadedServer,
) -> None:
    head = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
    with _connect(server) as connection:
        connection.sendall(head)
        # A byte every 0.2 s: well within the 0.5 s idle timeout, far below 1 KiB/s.
        connection.settimeout(0.2)
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            try:
                connection.sendall(b"x")
                if connection.recv(65536) == b"":
                    return
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                return
        pytest.fail("a body dripping at 5 bytes/s was never cut off")


def test_a_body_arriving_steadily_past_the_grace_is_served(server: ThreadedServer) -> None:
    pieces = 20
    head = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (pieces * 1000)
    with _connect(server) as connection:
        connection.sendall(head)
        # 1000 bytes every 0.1 s for 2 s (four times the grace): ~10 KB/s, above 1 KiB/s even
        # on a machine ten times slower than planned.
        for _ in range(pieces):
            connection.sendall(b"x" * 1000)
            time.sleep(0.1)
        answer = connection.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"20000")
