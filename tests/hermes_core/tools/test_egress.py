"""Sandboxed commands reach the network only through the egress proxy: every target passes
the host allow-list (restricted mode) and the web tools' address guard, and the proxy connects
to the address it checked. The proxy is driven over its real Unix socket; the bridge runs
under the system's python3; the end-to-end tests start real bubblewrap sandboxes."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from hermes_core.tools.egress import (
    EgressPolicy,
    EgressProxies,
    EgressProxy,
    ProxyLimits,
)
from hermes_core.tools.egress.network import MOUNT
from hermes_core.tools.web.guard import AddressPolicy, IPAddress, Lookup, system_lookup
from tests.web_site import WebSite, web_site

SYSTEM_PYTHON = "/usr/bin/python3"
DEADLINE = 60.0


@pytest.fixture(scope="module")
def site() -> Iterator[WebSite]:
    with web_site("127.0.0.1") as served:
        yield served


@pytest.fixture(scope="module")
def other_site() -> Iterator[WebSite]:
    """The same host as ``site`` on another port: the one a command must not reach."""
    with web_site("127.0.0.1") as served:
        yield served


@pytest.fixture(scope="module")
def secret_site(site: WebSite) -> Iterator[WebSite]:
    """Another loopback address on ``site``'s port: where a rebinding answer points."""
    with web_site("127.0.0.2", site.port) as served:
        yield served


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # A Unix socket's path must stay under ~100 bytes: pytest's tmp_path may be longer.
    path = Path(tempfile.mkdtemp(prefix="eg-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def only(*entries: str) -> AddressPolicy:
    return AddressPolicy.allowing(entries)


@contextlib.asynccontextmanager
async def running(
    policy: EgressPolicy,
    directory: Path,
    *,
    limits: ProxyLimits | None = None,
    lookup: Lookup = system_lookup,
) -> AsyncIterator[EgressProxy]:
    proxy = EgressProxy(policy, directory / "proxy", limits=limits, lookup=lookup)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


async def exchange(proxy: EgressProxy, request: bytes) -> tuple[int, bytes]:
    """Send one request to the proxy; its status and everything after the head."""
    reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
    try:
        writer.write(request)
        async with asyncio.timeout(DEADLINE):
            data = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


async def tunnel_get(proxy: EgressProxy, authority: str, path: str) -> tuple[int, bytes]:
    """CONNECT to ``authority``, then a plain GET through the tunnel; the proxy's status
    and, when the tunnel opened, the response that came through it."""
    reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
    try:
        writer.write(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        async with asyncio.timeout(DEADLINE):
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ")[1])
            if status != 200:
                return status, await reader.read()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            return status, await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` to hold (polled; a generous deadline for busy CI)."""
    async with asyncio.timeout(DEADLINE):
        while True:
            if condition():
                return
            await asyncio.sleep(0.02)


# --- the proxy ----------------------------------------------------------------------------


async def test_a_tunnel_to_an_allow_listed_host_and_port_carries_the_exchange(
    site: WebSite, short_dir: Path
) -> None:
    where = f"127.0.0.1:{site.port}"
    policy = EgressPolicy("restricted", (where,), only(where))
    async with running(policy, short_dir) as proxy:
        status, response = await tunnel_get(proxy, where, "/notes.txt")
    assert status == 200
    assert b"200 OK" in response
    assert response.endswith(b"Plain notes: the lamp burned whale oil.")


async def test_the_allowed_host_on_another_port_is_refused(
    site: WebSite, other_site: WebSite, short_dir: Path
) -> None:
    where = f"127.0.0.1:{site.port}"
    policy = EgressPolicy("restricted", (where,), only("127.0.0.1"))
    async with running(policy, short_dir) as proxy:
        status, body = await tunnel_get(proxy, f"127.0.0.1:{other_site.port}", "/notes.txt")
        plain, _ = await exchange(
            proxy, f"GET {other_site.url('/notes.txt')} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
    assert (status, plain) == (403, 403)
    assert b"not in this sandbox's allowed hosts" in body
    assert other_site.requests == []


async def test_a_host_outside_the_allow_list_is_refused_before_any_lookup(
    short_dir: Path,
) -> None:
    looked_up: list[str] = []

    async def lookup(host: str, port: int) -> list[IPAddress]:
        looked_up.append(host)
        return [ipaddress.ip_address("93.184.215.14")]

    policy = EgressPolicy("restricted", ("pypi.org", "*.pythonhosted.org:443"))
    async with running(policy, short_dir, lookup=lookup) as proxy:
        for authority in ("evil.example:443", "files.pythonhosted.org:80", "pypi.org.evil:443"):
            status, body = await tunnel_get(proxy, authority, "/")
            assert status == 403, authority
            assert authority.encode() in body
    assert looked_up == []


@pytest.mark.parametrize(
    "authority", ["127.0.0.1:{port}", "[::1]:{port}", "169.254.169.254:80", "10.1.2.3:{port}"]
)
async def test_internal_addresses_are_refused_in_open_mode(
    site: WebSite, short_dir: Path, authority: str
) -> None:
    async with running(EgressPolicy("open"), short_dir) as proxy:
        status, body = await tunnel_get(proxy, authority.format(port=site.port), "/notes.txt")
    assert status == 403
    assert b"refused to connect" in body


async def test_the_host_allow_list_does_not_open_an_internal_address(
    site: WebSite, short_dir: Path
) -> None:
    """``allowed_hosts`` narrows what the guard allows; only ``web.allow`` widens it."""
    where = f"127.0.0.1:{site.port}"
    async with running(EgressPolicy("restricted", (where,)), short_dir) as proxy:
        status, body = await tunnel_get(proxy, where, "/notes.txt")
    assert status == 403
    assert b"a loopback address" in body


async def test_the_servers_own_port_is_refused_unless_allow_listed_with_it(
    site: WebSite, other_site: WebSite, short_dir: Path
) -> None:
    """The server's own port is refused on every address of this machine; allow-listing
    another port of the same address does not open it (an entry without a port would)."""
    addresses = AddressPolicy.allowing([f"127.0.0.1:{other_site.port}"], own_ports=[site.port])
    async with running(EgressPolicy("open", (), addresses), short_dir) as proxy:
        status, body = await tunnel_get(proxy, f"127.0.0.1:{site.port}", "/notes.txt")
        opened, _ = await tunnel_get(proxy, f"127.0.0.1:{other_site.port}", "/notes.txt")
    assert (status, opened) == (403, 200)
    assert b"this server's own address" in body


async def test_a_plain_http_request_is_forwarded_without_its_proxy_headers(
    site: WebSite, short_dir: Path
) -> None:
    where = f"127.0.0.1:{site.port}"
    policy = EgressPolicy("restricted", (where,), only(where))
    request = (
        f"POST http://{where}/notes.txt?x=1 HTTP/1.1\r\nHost: {where}\r\n"
        "Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n"
        "Content-Length: 5\r\n\r\nhello"
    ).encode()
    async with running(policy, short_dir) as proxy:
        status, body = await exchange(proxy, request)
    assert status == 200
    assert body == b"Plain notes: the lamp burned whale oil."
    seen = site.requests[-1]
    assert (seen.method, seen.path, seen.query, seen.body) == (
        "POST",
        "/notes.txt",
        {"x": ["1"]},
        b"hello",
    )
    assert "Proxy-Authorization" not in seen.headers
    assert seen.headers["Connection"] == "close"


async def test_a_rebinding_answer_cannot_redirect_the_connection(
    site: WebSite, secret_site: WebSite, short_dir: Path
) -> None:
    """One lookup per connection, and the connection goes to the checked answer: the first
    answer (allowed) is used; the next, pointing elsewhere inside, is refused."""
    answers = iter([["127.0.0.1"], ["127.0.0.2"]])

    async def rebinding(host: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address(a) for a in next(answers)]

    policy = EgressPolicy("open", (), only("127.0.0.1"))
    async with running(policy, short_dir, lookup=rebinding) as proxy:
        status, response = await tunnel_get(proxy, f"rebind.example:{site.port}", "/notes.txt")
        assert status == 200
        assert response.endswith(b"whale oil.")
        status, body = await tunnel_get(proxy, f"rebind.example:{site.port}", "/notes.txt")
    assert status == 403
    assert b"rebind.example (127.0.0.2)" in body
    assert secret_site.requests == []


async def test_oversized_headers_get_431(short_dir: Path) -> None:
    limits = ProxyLimits(max_header_bytes=1024)
    async with running(EgressPolicy("open"), short_dir, limits=limits) as proxy:
        status, _ = await exchange(
            proxy, b"GET http://example.com/ HTTP/1.1\r\nX: " + b"a" * 4096 + b"\r\n\r\n"
        )
    assert status == 431


async def test_connections_beyond_the_cap_get_503(site: WebSite, short_dir: Path) -> None:
    where = f"127.0.0.1:{site.port}"
    policy = EgressPolicy("restricted", (where,), only(where))
    async with running(policy, short_dir, limits=ProxyLimits(max_connections=2)) as proxy:
        held = []
        for _ in range(2):
            reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
            writer.write(f"CONNECT {where} HTTP/1.1\r\n\r\n".encode())
            assert b" 200 " in await reader.readuntil(b"\r\n\r\n")
            held.append(writer)
        status, body = await exchange(proxy, f"CONNECT {where} HTTP/1.1\r\n\r\n".encode())
        for writer in held:
            writer.close()
            await writer.wait_closed()
    assert status == 503
    assert b"too many connections" in body


async def test_an_idle_tunnel_is_cut(site: WebSite, short_dir: Path) -> None:
    where = f"127.0.0.1:{site.port}"
    policy = EgressPolicy("restricted", (where,), only(where))
    limits = ProxyLimits(idle_timeout_seconds=0.3)
    async with running(policy, short_dir, limits=limits) as proxy:
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.write(f"CONNECT {where} HTTP/1.1\r\n\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        async with asyncio.timeout(DEADLINE):
            assert await reader.read() == b""  # the proxy closed the quiet tunnel
        writer.close()
        await writer.wait_closed()
        await until(lambda: proxy.connections == 0)


async def test_the_socket_is_open_to_every_uid_and_start_is_idempotent(short_dir: Path) -> None:
    proxy = EgressProxy(EgressPolicy("open"), short_dir / "p")
    await proxy.start()
    await proxy.start()
    try:
        assert stat.S_IMODE(proxy.socket_path.stat().st_mode) == 0o666
        assert stat.S_IMODE(proxy.directory.stat().st_mode) == 0o755
        assert stat.S_IMODE((proxy.directory / "bridge.py").stat().st_mode) == 0o644
    finally:
        await proxy.close()
    assert not proxy.socket_path.exists()


async def test_equal_policies_share_one_proxy_and_close_stops_them(
    short_dir: Path,
) -> None:
    proxies = EgressProxies(short_dir)
    first = await proxies.sandbox_network(EgressPolicy("restricted", ("pypi.org",)))
    again = await proxies.sandbox_network(EgressPolicy("restricted", ("pypi.org",)))
    other = await proxies.sandbox_network(EgressPolicy("open"))
    assert first == again
    assert first.bwrap_args != other.bwrap_args
    assert first.bwrap_args[::2] == ["--ro-bind", MOUNT]
    socket_path = Path(first.bwrap_args[1]) / "egress.sock"
    assert socket_path.exists()
    await proxies.close()
    assert not socket_path.exists()


def test_a_policy_with_a_malformed_or_misplaced_host_is_rejected() -> None:
    with pytest.raises(ValueError, match="port"):
        EgressPolicy("restricted", ("pypi.org:http",))
    with pytest.raises(ValueError, match="restricted"):
        EgressPolicy("open", ("pypi.org",))
