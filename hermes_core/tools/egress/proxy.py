"""The egress proxy: an HTTP proxy on a Unix socket through which sandboxed commands reach
the network, every target checked the way ``web_fetch``'s are.

It speaks the two forms clients use: ``CONNECT host:port`` (a byte tunnel; HTTPS, pip) and
plain HTTP with an absolute URI (``GET http://host/path``), forwarded over a fresh connection
with ``Connection: close``. Each target passes the host allow-list (restricted mode), then is
resolved once and every address checked by the guard; the proxy connects to a checked address,
so a DNS answer that changes later (rebinding) cannot steer the connection. Refusals are 403s
whose body says why, logged at INFO with host and port only (never a path or header).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from urllib.parse import urlsplit

from hermes_core.tools.egress.network import BRIDGE_NAME, SOCKET_NAME, SandboxNetwork
from hermes_core.tools.egress.policy import EgressPolicy
from hermes_core.tools.web.guard import AddressRefused, Lookup, checked_addresses, system_lookup

log = logging.getLogger("hermes.egress")

_BRIDGE_SOURCE = Path(__file__).with_name("bridge.py")
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    }
)
_CHUNK = 65536
_LINGER_SECONDS = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyLimits:
    max_header_bytes: int = 32 * 1024
    """Request line and headers at most; a 431 beyond."""
    head_timeout_seconds: float = 15.0
    """Time a client has to send its request line and headers."""
    connect_timeout_seconds: float = 10.0
    """Time to connect to one address of the target."""
    idle_timeout_seconds: float = 120.0
    """A tunnel or forwarded request with no byte either way for this long is cut."""
    max_connections: int = 64
    """Connections (tunnels) open at once through this proxy; a 503 beyond."""


class _Refused(Exception):
    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class _Target:
    host: str
    port: int
    tunnel: bool
    head: bytes
    """What to send upstream first (the rewritten request), empty for a tunnel."""
    body_bytes: int | None
    """The request body's length to forward; None: until the client stops (chunked)."""


class EgressProxy:
    """One proxy for one :class:`EgressPolicy`, listening on ``directory/egress.sock``.

    ``directory`` holds only the socket and a copy of the bridge, so that the sandbox can
    bind-mount it whole (a directory mount survives the socket being re-created; a file
    mount would not) and any uid can use both.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        directory: Path,
        *,
        limits: ProxyLimits | None = None,
        lookup: Lookup = system_lookup,
    ) -> None:
        self.policy = policy
        self.directory = directory
        self.limits = limits or ProxyLimits()
        self._lookup = lookup
        self._server: asyncio.AbstractServer | None = None
        self._starting = asyncio.Lock()
        self._handlers: set[asyncio.Task[None]] = set()
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def socket_path(self) -> Path:
        return self.directory / SOCKET_NAME

    @property
    def connections(self) -> int:
        """Connections open now (for tests and metrics)."""
        return len(self._handlers)

    async def start(self) -> None:
        """Listen, unless already listening."""
        async with self._starting:
            if self._server is not None:
                return
            await asyncio.to_thread(self._prepare_directory)
            self._server = await asyncio.start_unix_server(
                self._accept, path=str(self.socket_path), limit=self.limits.max_header_bytes
            )
            # Commands run as unprivileged uids of their own: any of them may connect.
            os.chmod(self.socket_path, 0o666)
            self.loop = asyncio.get_running_loop()
            log.info("egress proxy (%s) listening on %s", self.policy.mode, self.socket_path)

    def _prepare_directory(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o755)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        bridge = self.directory / BRIDGE_NAME
        shutil.copyfile(_BRIDGE_SOURCE, bridge)
        os.chmod(bridge, 0o644)

    async def sandbox_network(self) -> SandboxNetwork:
        """What a sandbox needs to reach the network through this proxy (started if needed)."""
        await self.start()
        return SandboxNetwork.through(self.directory)

    async def close(self) -> None:
        """Stop listening and cut every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await server.wait_closed()
        for name in (SOCKET_NAME, BRIDGE_NAME):
            with contextlib.suppress(FileNotFoundError):
                (self.directory / name).unlink()
        with contextlib.suppress(OSError):
            self.directory.rmdir()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            if len(self._handlers) >= self.limits.max_connections:
                log.info("egress refused a connection: %d open", len(self._handlers))
                await _answer(
                    reader, writer, HTTPStatus.SERVICE_UNAVAILABLE, "too many connections"
                )
                return
            self._handlers.add(task)
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() cancels handlers; asyncio's stream callback would log a cancelled
            # handler task as an error, so it ends normally instead.
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(self.limits.head_timeout_seconds):
                head = await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            return
        except (asyncio.LimitOverrunError, ValueError):
            await _answer(
                reader, writer, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "headers too large"
            )
            return
        try:
            target = _parse(head)
            upstream = await self._connect(target)
        except _Refused as refused:
            await _answer(reader, writer, refused.status, refused.reason)
            return
        up_reader, up_writer = upstream
        try:
            if target.tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(target.head)
            await self._relay(reader, writer, up_reader, up_writer, target)
        finally:
            up_writer.close()
            with contextlib.suppress(Exception):
                await up_writer.wait_closed()

    async def _connect(self, target: _Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        where = f"{target.host}:{target.port}"
        reason = self.policy.host_refusal(target.host, target.port)
        if reason is not None:
            log.info("egress refused %s: not an allowed host", where)
            raise _Refused(HTTPStatus.FORBIDDEN, reason)
        try:
            addresses = await checked_addresses(
                self.policy.address_policy, self._lookup, target.host, target.port
            )
        except AddressRefused as refused:
            log.info("egress refused %s: %s", where, refused)
            raise _Refused(HTTPStatus.FORBIDDEN, str(refused)) from None
        except OSError as error:
            raise _Refused(HTTPStatus.BAD_GATEWAY, str(error)) from None
        failure = "no address"
        for address in addresses:
            try:
                async with asyncio.timeout(self.limits.connect_timeout_seconds):
                    return await asyncio.open_connection(str(address), target.port)
            except TimeoutError:
                failure = f"{address}: timed out"
            except OSError as error:
                failure = f"{address}: {error.strerror or error}"
        raise _Refused(HTTPStatus.BAD_GATEWAY, f"cannot connect to {where} ({failure})")

    async def _relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        target: _Target,
    ) -> None:
        """Copy bytes both ways until both sides are done (a tunnel) or the response ended
        (forwarded HTTP), or nothing moved either way for the idle timeout."""
        clock = _Activity(self.limits.idle_timeout_seconds)
        outbound = asyncio.create_task(
            _pipe(reader, up_writer, clock, target.body_bytes if not target.tunnel else None)
        )
        inbound = asyncio.create_task(_pipe(up_reader, writer, clock, None))
        try:
            if target.tunnel:
                await asyncio.gather(outbound, inbound)
            else:
                await inbound
        finally:
            for task in (outbound, inbound):
                task.cancel()
            await asyncio.gather(outbound, inbound, return_exceptions=True)


class _Activity:
    """When bytes last moved either way: a download must not time out its quiet upload."""

    def __init__(self, idle_seconds: float) -> None:
        self.idle_seconds = idle_seconds
        self.last = time.monotonic()

    def touch(self) -> None:
        self.last = time.monotonic()

    def remaining(self) -> float:
        return self.last + self.idle_seconds - time.monotonic()


async def _pipe(
    source: asyncio.StreamReader,
    sink: asyncio.StreamWriter,
    clock: _Activity,
    limit: int | None,
) -> None:
    """Copy ``source`` to ``sink`` (at most ``limit`` bytes), then half-close ``sink``."""
    left = limit
    while left is None or left > 0:
        chunk = await _read(source, clock, _CHUNK if left is None else min(_CHUNK, left))
        if not chunk:
            break
        clock.touch()
        sink.write(chunk)
        await sink.drain()
        if left is not None:
            left -= len(chunk)
    if sink.can_write_eof() and not sink.is_closing():
        with contextlib.suppress(OSError):
            sink.write_eof()


async def _read(source: asyncio.StreamReader, clock: _Activity, size: int) -> bytes:
    """The next bytes, or b"" at the end or once both ways were idle too long."""
    while True:
        remaining = clock.remaining()
        if remaining <= 0:
            return b""
        try:
            # Cancelling a StreamReader.read loses nothing: no byte was taken yet.
            return await asyncio.wait_for(source.read(size), remaining)
        except TimeoutError:
            continue


def _parse(head: bytes) -> _Target:
    """The target of a proxy request, and what to send upstream for a plain HTTP one."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise _Refused(HTTPStatus.BAD_REQUEST, "not an HTTP request line")
    method, uri, _version = parts
    if method.upper() == "CONNECT":
        host, port = _authority(uri)
        return _Target(host, port, tunnel=True, head=b"", body_bytes=None)
    url = urlsplit(uri)
    if url.scheme.lower() != "http" or not url.hostname:
        raise _Refused(
            HTTPStatus.BAD_REQUEST,
            "this proxy forwards absolute http:// URIs, and tunnels anything else with CONNECT",
        )
    try:
        port = url.port or 80
    except ValueError:
        raise _Refused(HTTPStatus.BAD_REQUEST, "not a port number") from None
    headers, body_bytes = _forwarded_headers(lines[1:], url.netloc.rpartition("@")[2])
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    request = f"{method} {path} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n"
    return _Target(
        url.hostname, port, tunnel=False, head=request.encode("latin-1"), body_bytes=body_bytes
    )


def _authority(text: str) -> tuple[str, int]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = text.rpartition(":")
    if not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise _Refused(HTTPStatus.BAD_REQUEST, f"CONNECT needs host:port, not {text[:100]!r}")
    return host, int(port_text)


def _forwarded_headers(lines: list[str], authority: str) -> tuple[str, int | None]:
    """The client's headers minus the hop-by-hop ones, with a Host; and the body's length
    (None when chunked: forwarded until the response ends)."""
    named: list[tuple[str, str]] = []
    for line in lines:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise _Refused(HTTPStatus.BAD_REQUEST, "a header line without a colon")
        named.append((name.strip(), value.strip()))
    listed = {
        token.strip().lower()
        for name, value in named
        if name.lower() == "connection"
        for token in value.split(",")
    }
    kept = [(n, v) for n, v in named if n.lower() not in _HOP_BY_HOP and n.lower() not in listed]
    if not any(n.lower() == "host" for n, _ in kept):
        kept.insert(0, ("Host", authority))
    body_bytes: int | None = 0
    for name, value in kept:
        if name.lower() == "transfer-encoding":
            body_bytes = None
            break
        if name.lower() == "content-length":
            if not value.isdigit():
                raise _Refused(HTTPStatus.BAD_REQUEST, "a Content-Length that is not a number")
            body_bytes = int(value)
    return "".join(f"{n}: {v}\r\n" for n, v in kept), body_bytes


async def _answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: HTTPStatus, reason: str
) -> None:
    """Answer with ``status`` and end the connection. What the client still sends is read
    and dropped for a moment: closing on unread bytes would reset the connection, and the
    client could lose the answer that says why."""
    body = f"hermes egress proxy: {reason}\n".encode()
    writer.write(
        f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError, OSError, TimeoutError):
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(_LINGER_SECONDS):
            while await reader.read(_CHUNK):
                pass
