"""What one slow or hostile client may hold of the server before the app sees its request.

uvicorn bounds the idle time between a connection's requests (``timeout_keep_alive``), but
not the time a client takes to send a request's head, nor the head's size, nor a body that
stops arriving: 600 slow-loris connections were all still open after 60 s, and a 50 MB header
was accepted. :func:`guarded_protocol` makes uvicorn's own HTTP protocol (httptools) enforce,
per connection:

- a head deadline: the request line and headers must all arrive within ``head_timeout``
  seconds of the connection (or, on a kept-alive connection, of the request's first byte);
  a client that is slower gets a 408 and is disconnected (within 1.5 × the timeout);
- a head size: a head of more than ``max_head_bytes`` is a 431 and a disconnect, whether it
  trickles in or arrives in one write (the app never sees that request);
- a body that stops: while the app waits for more of a request's body, ``body_idle_timeout``
  seconds without a byte disconnect the client (the app sees a disconnect, as when a client
  leaves);
- a body that crawls: once a body has been arriving for ``body_idle_timeout`` seconds, it must
  have averaged ``body_min_bytes_per_second`` or the client is disconnected the same way (one
  byte every few seconds never trips the idle timer, but would hold a connection for hours).

Whatever is refused here, or by uvicorn's parser (a malformed request line, header or chunk,
a URL over 64 KiB: ``send_400_response``), or in a WebSocket handshake, is answered with the
OpenAI error envelope (server/http/protocol_errors.py) and a closed connection.

A request only stamps a few attributes; one watchdog timer per connection, every few seconds,
acts on them. It builds on uvicorn's ``HttpToolsProtocol`` (the protocol
``uvicorn`` picks when httptools is installed, as it is here); ``tests/server/
test_http_limits.py`` fails if a uvicorn release changes what it relies on.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from typing import Any

from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from server.http.protocol_errors import (
    Refusal,
    enveloping_websockets,
    parser_refusal,
    refusal,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpLimits:
    head_timeout: float = 20.0
    """Seconds a client has to send a request's line and headers."""
    max_head_bytes: int = 64 * 1024
    """Bytes of request line and headers at most (a 431 beyond)."""
    body_idle_timeout: float = 60.0
    """Seconds a request body may pause while the app waits for it."""
    body_min_bytes_per_second: int = 1024
    """Average rate a body must keep once it has been arriving ``body_idle_timeout`` seconds;
    0: none."""


def guarded_protocol(limits: HttpLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol class, enforcing ``limits`` (pass it as ``http=``)."""
    return type("GuardedHttpToolsProtocol", (_Guarded,), {"limits": limits})


class _Guarded(HttpToolsProtocol):
    limits: HttpLimits = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ws_protocol_class = enveloping_websockets(self.ws_protocol_class)
        # One watchdog per connection looks at these now and then; a request only stamps
        # them (a timer armed and cancelled per request cost ~1 % of a short run's CPU).
        self._head_since: float | None = None
        """When the head now being read began to arrive; None once it is complete."""
        self._head_bytes = 0
        self._body_since: float | None = None
        """When the app last got a byte of the body it waits for; None when it waits for none."""
        self._body_began = 0.0
        self._body_bytes = 0
        """Since when, and how much of, the body now awaited has arrived (its average rate)."""
        self._reading = False
        self._head_in_read = False
        """Whether the read being parsed carries (part of) a request head."""
        self._body_in_read = 0
        self._deferred: list[tuple[RequestResponseCycle, ASGI3Application]] = []
        """Requests whose head ended in the read being parsed: started once it is measured."""
        self._watchdog: asyncio.TimerHandle | None = None
        self._interval = min(self.limits.head_timeout, self.limits.body_idle_timeout) / 2

    # --- what a request stamps ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_since = self.loop.time()  # a connection that sends nothing is a slow head
        self._watchdog = self.loop.call_later(self._interval, self._watch)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._head_in_read = True
        if self._head_since is None:  # the next request on a kept-alive connection
            self._head_since = self.loop.time()

    def on_headers_complete(self) -> None:
        self._head_since = None
        super().on_headers_complete()
        if self._waiting_for_body():
            self._body_since = self._body_began = self.loop.time()
            self._body_bytes = 0

    def on_body(self, body: bytes) -> None:
        self._body_in_read += len(body)
        super().on_body(body)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        if self._reading:  # the head that just ended may yet prove too large
            self._deferred.append((cycle, app))
        else:
            super()._start_asgi_task(cycle, app)

    def data_received(self, data: bytes) -> None:
        self._head_in_read = self._head_since is not None
        self._body_in_read = 0
        self._reading = True
        try:
            super().data_received(data)
        finally:
            self._reading = False
        deferred, self._deferred = self._deferred, []
        if self.transport.is_closing():
            return
        if self._head_in_read:
            # What of this read is not body is head: a read that ends a head may carry a
            # large body after it, and a head sent in one write must count as much as one
            # that trickles in.
            self._head_bytes += len(data) - self._body_in_read
            if self._head_bytes > self.limits.max_head_bytes:
                self._refuse(
                    Refusal(
                        431,
                        f"The request's line and headers exceed {self.limits.max_head_bytes} "
                        "bytes.",
                        "headers_too_large",
                    )
                )
                return
        if self._body_since is not None:
            self._body_since = self.loop.time()
            self._body_bytes += self._body_in_read
        for cycle, app in deferred:
            super()._start_asgi_task(cycle, app)

    def on_message_complete(self) -> None:
        self._body_since = None
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        super().connection_lost(exc)

    # --- the watchdog -------------------------------------------------------------------------

    def _waiting_for_body(self) -> bool:
        cycle = self.cycle
        return cycle is not None and cycle.more_body and not cycle.response_complete

    def _watch(self) -> None:
        self._watchdog = None
        if self.transport.is_closing():
            return
        now, limits = self.loop.time(), self.limits
        if self._head_since is not None and now - self._head_since > limits.head_timeout:
            if self.cycle is None or self.cycle.response_complete:
                self._refuse(
                    Refusal(
                        408,
                        "The request's line and headers did not arrive within "
                        f"{self.limits.head_timeout:g} seconds.",
                        "request_timeout",
                    )
                )
            else:  # a response is still being written: a 408 would corrupt it
                self.transport.close()
            return
        if (
            self._body_since is not None
            and self._waiting_for_body()
            and (now - self._body_since > limits.body_idle_timeout or self._body_crawls(now))
        ):
            self.transport.close()  # the app's receive() then says http.disconnect
            return
        self._watchdog = self.loop.call_later(self._interval, self._watch)

    def _body_crawls(self, now: float) -> bool:
        """Whether the awaited body, past its grace, arrives slower than the minimum rate."""
        if self.flow.read_paused:
            # The app is not reading what came: the client cannot send, so time from here on
            # is measured afresh rather than held against it.
            self._body_began, self._body_bytes = now, 0
            return False
        elapsed = now - self._body_began
        minimum = self.limits.body_min_bytes_per_second
        return elapsed > self.limits.body_idle_timeout and self._body_bytes < minimum * elapsed

    def _should_upgrade(self) -> bool:
        # Only a GET opens a WebSocket: the WebSocket protocol, handed any other request,
        # never answers it (a POST with "Upgrade: websocket" hung); that one is served as HTTP.
        return self.scope.get("method") == "GET" and super()._should_upgrade()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request its parser rejected, in the error envelope."""
        # uvicorn calls this while it handles the parser's error: that error says what was wrong.
        error = sys.exc_info()[1]
        if self.pipeline or (
            self.cycle is not None
            and self.cycle.response_started
            and not self.cycle.response_complete
        ):
            # An earlier request's response is under way or due first: an answer now would
            # corrupt it, or answer the wrong request.
            self.transport.close()
            return
        self._refuse(parser_refusal(error))

    def _refuse(self, refused: Refusal) -> None:
        self.transport.write(refusal(refused, self.server_state.default_headers))
        self.transport.close()
