"""The HTTP client of adapters that read an upstream's SSE themselves: aiohttp, used directly.

The SDKs wrap aiohttp in an httpx-compatible layer (request building, header objects, URL
parsing, a cookie jar, line decoding), which cost more CPU per model call than the rest of the
server's work for it (bench/server_overhead.py). This module keeps what a streamed POST needs:
a pooled session per provider, the provider's timeout, and the proxy settings of the
environment, as the SDKs honour them.

aiohttp is imported at the first call (on a worker thread), not with this module: a server
starts without it (~0.1 s of CPU).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

from hermes_core.imports_off_loop import import_off_loop
from hermes_core.providers._wire_errors import connection_failed, timed_out

if TYPE_CHECKING:
    import aiohttp


class UpstreamSession:
    """One connection pool per provider. The aiohttp session belongs to an event loop, so it is
    opened on first use (providers are built before the server's loop runs)."""

    def __init__(self, *, timeout: float, max_connections: int = 1000) -> None:
        # Like the SDKs' ``timeout``: a bound on the wait for the answer and on each silence in
        # its body, none on the whole answer (a long stream is fine as long as it keeps coming).
        # The body's silences are watched by ReadWatchdog, not aiohttp's ``sock_read``, which
        # re-arms a timer for every chunk that arrives.
        self._wait_seconds = timeout
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[str, str | None] = {}

    async def _open(self) -> aiohttp.ClientSession:
        """The session, opened if there is none (the first call, or one after :meth:`aclose`)."""
        await import_off_loop("aiohttp")  # a server starts without it
        # Checked again after that wait: calls that came together open one session.
        if self._session is None or self._session.closed:
            import aiohttp

            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections),
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=self._wait_seconds, sock_read=None
                ),
                cookie_jar=aiohttp.DummyCookieJar(),  # an API upstream sets no cookies we want
                # Not trust_env: it reads the proxy settings again on every request (about
                # 1 ms of CPU); _proxy_for reads them once per URL.
                trust_env=False,
            )
        return self._session

    @asynccontextmanager
    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST ``body``; yields the response with its body unread. Leaving the block, however it
        happens, releases the connection: back to the pool once the body was read to its end,
        closed otherwise (an abandoned stream must not keep the upstream generating)."""
        session = self._session
        if session is None or session.closed:
            session = await self._open()
        sending = session.post(
            url, data=body, headers=headers, allow_redirects=False, proxy=self._proxy_for(url)
        )
        async with asyncio.timeout(self._wait_seconds):  # connecting, sending, the headers
            response = await sending
        watchdog = ReadWatchdog(response.content, self._wait_seconds)
        try:
            yield response
        finally:
            watchdog.stop()
            response.release()  # to the pool if the body was read to its end, else closed

    def _proxy_for(self, url: str) -> str | None:
        """The proxy the environment names for ``url`` (``HTTPS_PROXY``, ``NO_PROXY``, …), as
        the SDKs' own clients would use it."""
        if url not in self._proxies:
            parts = urlsplit(url)
            bypass = bool(parts.hostname) and proxy_bypass(parts.hostname or "")
            self._proxies[url] = None if bypass else getproxies().get(parts.scheme)
        return self._proxies[url]

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class ReadWatchdog:
    """Fails a body that stops arriving for ``seconds`` (between 1 and 1.5 times that, after
    the last byte): one timer, checked every half period, whatever the number of chunks."""

    def __init__(self, content: aiohttp.StreamReader, seconds: float) -> None:
        self._content = content
        self._seconds = seconds
        self._loop = asyncio.get_running_loop()
        self._seen = content.total_bytes
        self._quiet_since = self._loop.time()
        self._timer = self._loop.call_later(seconds / 2, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        if self._content.total_bytes != self._seen:
            self._seen, self._quiet_since = self._content.total_bytes, now
        elif now - self._quiet_since >= self._seconds:
            # The reader raises it at its next wait (or at once, if it is waiting).
            self._content.set_exception(TimeoutError("the upstream stopped sending"))
            return
        self._timer = self._loop.call_later(self._seconds / 2, self._check)

    def stop(self) -> None:
        self._timer.cancel()


class SseData:
    """Splits an SSE body, fed as it arrives (``response.content.iter_any()``), into the
    payload of each ``data:`` line, stripped. Comments, keep-alives and event names are
    skipped: the adapters read the JSON, which names its own type.

    A plain object the adapter's read loop calls, not an async generator around it: that
    would be one more suspension per upstream chunk. Whatever arrived at once is split at
    once, so a burst of twenty chunks is one loop turn, not twenty.
    """

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        """The start of a line whose end has not arrived yet."""

    def feed(self, piece: bytes) -> list[bytes]:
        if b"\n" not in piece:
            self._pending.append(piece)
            return []
        if self._pending:
            self._pending.append(piece)
            piece = b"".join(self._pending)
            self._pending.clear()
        *lines, rest = piece.split(b"\n")
        if rest:
            self._pending.append(rest)
        return [line[5:].strip() for line in lines if line.startswith(b"data:")]


@contextmanager
def transport_errors(provider: str) -> Iterator[None]:
    """Re-raise aiohttp's failures (no answer, a connection lost mid-stream, a timeout) as
    the ProviderError the fallback chain reasons about."""
    try:
        yield
    except TimeoutError as exc:  # aiohttp's timeouts are TimeoutErrors
        raise timed_out(provider) from exc
    except Exception as exc:
        import aiohttp  # loaded already: the failure came from its session

        if not isinstance(exc, aiohttp.ClientError):
            raise
        raise connection_failed(provider, exc) from exc
