"""Requests refused below the app — by uvicorn's HTTP parser or by the connection limits — sent
over raw sockets to a real ``serve`` process: each gets the OpenAI error envelope (not uvicorn's
plain text) with a 4xx and a closed connection, and the server serves the next client."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from server.simulator import SimulatorServer
from tests.server.served import Served, serving, simulated_provider

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

KEY = "sk-protocol-errors-0123456789"
MODEL = "hermes-agent"
HEAD_TIMEOUT = 2
CONFIG = """\
server:
  data_dir: {data}
  api_keys: [{{key: {key}, principal: alice}}]
  head_timeout_seconds: {head_timeout}
providers:
{provider}profiles:
  - {{id: {model}, providers: [sim]}}
"""
PATIENCE = 30.0
"""How long a test waits for the server to answer (generous: the machine may be busy)."""


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("protocol-errors")
    provider = simulated_provider(_simulator_server, "protocol-errors-upstream")
    config = CONFIG.format(
        data=data, key=KEY, provider=provider, model=MODEL, head_timeout=HEAD_TIMEOUT
    )
    with serving(data, config) as running:
        yield running


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> dict[str, Any]:
        assert self.headers["content-type"] == "application/json", self
        assert int(self.headers["content-length"]) == len(self.body)
        envelope = json.loads(self.body)
        assert set(envelope) == {"error"}
        error: dict[str, Any] = envelope["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error"
        assert error["param"] is None
        assert error["message"]
        return error


def _connect(served: Served) -> socket.socket:
    address = urlsplit(served.base_url)
    assert address.hostname is not None
    assert address.port is not None
    return socket.create_connection((address.hostname, address.port), timeout=PATIENCE)


def _answer_then_close(connection: socket.socket) -> Answer:
    """The one response the server sends before it closes the connection."""
    received = b""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        try:
            piece = connection.recv(65536)
        except ConnectionResetError:  # closed with our unread bytes still queued
            break
        if not piece:
            break
        received += piece
    else:
        pytest.fail(f"the server kept the connection open; it sent {received!r}")
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    assert headers.get("connection") == "close", received
    return Answer(int(status_line.split(" ")[1]), headers, body)


def _send(served: Served, request: bytes) -> Answer:
    with _connect(served) as connection:
        # Refused before it was all sent, the answer may still be there to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.sendall(request)
        return _answer_then_close(connection)


def _still_serves(served: Served) -> None:
    auth = {"authorization": f"Bearer {KEY}"}
    response = httpx.get(f"{served.base_url}/v1/models", headers=auth, timeout=PATIENCE)
    assert response.status_code == 200, response.text


MALFORMED = {
    "invalid request line": b"GARBAGE\r\n\r\n",
    "request line without a version": b"GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n",
    "invalid method token": b"G(T /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
    "malformed header name": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
    "header without a colon": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n",
    "control character in a header": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n",
    "invalid chunk size": (
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"ZZ\r\nabc\r\n0\r\n\r\n"
    ),
    "content-length and transfer-encoding": (
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    ),
    "two content-lengths": (
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
        b"Content-Length: 3\r\n\r\n{}"
    ),
    "URL with a space": b"GET /v1/mo dels HTTP/1.1\r\nHost: x\r\n\r\n",
    "HTTP/2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
}


@pytest.mark.parametrize("request_bytes", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_is_a_400_in_the_envelope(served: Served, request_bytes: bytes) -> None:
    answer = _send(served, request_bytes)
    assert answer.status == 400, answer
    assert answer.error()["code"] == "invalid_http_request"
    _still_serves(served)


def test_a_url_over_64_kib_is_a_414_in_the_envelope(served: Served) -> None:
    answer = _send(served, b"GET /v1/models?q=" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.status == 414, answer
    assert answer.error()["code"] == "url_too_long"
    _still_serves(served)


def test_headers_over_64_kib_are_a_431_in_the_envelope(served: Served) -> None:
    big = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    answer = _send(served, big)
    assert answer.status == 431, answer
    assert answer.error()["code"] == "headers_too_large"
    _still_serves(served)


def test_a_head_that_never_ends_is_a_408_in_the_envelope(served: Served) -> None:
    with _connect(served) as connection:
        connection.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
        answer = _answer_then_close(connection)
    assert answer.status == 408, answer
    assert answer.error()["code"] == "request_timeout"
    _still_serves(served)


def test_a_post_asking_to_upgrade_to_a_websocket_is_served_as_http(served: Served) -> None:
    # Handed to the WebSocket protocol, a request other than a GET was never answered.
    upgrade = (
        b"POST /v1/models HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, close\r\n"
        b"Authorization: Bearer " + KEY.encode() + b"\r\n"
        b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nContent-Length: 0\r\n\r\n"
    )
    answer = _send(served, upgrade)
    assert answer.status == 405, answer
    answer.error()


def _websocket_handshake(path: bytes, *headers: bytes) -> bytes:
    return b"\r\n".join(
        [
            b"GET %s HTTP/1.1" % path,
            b"Host: x",
            b"Connection: Upgrade",
            b"Upgrade: websocket",
            b"Authorization: Bearer " + KEY.encode(),
            *headers,
            b"",
            b"",
        ]
    )


def test_a_websocket_handshake_without_its_key_is_a_400_in_the_envelope(served: Served) -> None:
    answer = _send(served, _websocket_handshake(b"/v1/responses", b"Sec-WebSocket-Version: 13"))
    assert answer.status == 400, answer
    error = answer.error()
    assert error["code"] == "invalid_websocket_handshake"
    assert "Sec-WebSocket-Key" in error["message"]
    _still_serves(served)


def test_a_websocket_the_app_refuses_is_a_403_in_the_envelope(served: Served) -> None:
    handshake = _websocket_handshake(
        b"/v1/models", b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
    )
    answer = _send(served, handshake)
    assert answer.status == 403, answer
    assert answer.headers["content-type"] == "application/json"
    assert json.loads(answer.body)["error"]["type"] == "permission_error"
