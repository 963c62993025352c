"""Sandboxed commands reach the network only through the egress proxy: every target passes
the host allow-list (restricted mode) and the web tools' address guard, and the proxy connects
to the address it checked. The proxy is driven over its real Unix socket; the bridge runs
under the system's python3; the end-to-end tests start real bubblewrap sandboxes."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import ipaddress
import logging
import os
import shutil
import socket
import stat
import tempfile
import threading
import urllib.error
import urllib.request
import zipfile
from collections.abc import AsyncIterator, Callable, Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hermes_core.tools.egress import (
    EgressPolicy,
    EgressProxies,
    EgressProxy,
    ProxyLimits,
    SandboxNetwork,
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


async def test_the_allowed_host_on_another_port_is_refused_and_logged_without_the_path(
    site: WebSite, other_site: WebSite, short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hermes.egress")
    where = f"127.0.0.1:{site.port}"
    policy = EgressPolicy("restricted", (where,), only("127.0.0.1"))
    before = len(other_site.requests)
    async with running(policy, short_dir) as proxy:
        status, body = await tunnel_get(proxy, f"127.0.0.1:{other_site.port}", "/notes.txt")
        plain, _ = await exchange(
            proxy, f"GET {other_site.url('/notes.txt')} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
    assert (status, plain) == (403, 403)
    assert b"not in this sandbox's allowed hosts" in body
    assert len(other_site.requests) == before
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusals == [f"egress refused 127.0.0.1:{other_site.port}: not an allowed host"] * 2
    assert "notes" not in caplog.text


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


# --- the bridge, under the system's python3 -----------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def refuses_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def fetch_through(proxy_url: str, url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy_url}))
    with opener.open(url, timeout=DEADLINE) as response:
        return str(response.read().decode())


@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="no system python3")
async def test_the_bridge_relays_to_the_proxy_and_leaves_with_its_command(
    site: WebSite, short_dir: Path
) -> None:
    where = f"127.0.0.1:{site.port}"
    policy = EgressPolicy("restricted", (where,), only(where))
    async with running(policy, short_dir) as proxy:
        command = await asyncio.create_subprocess_exec("sleep", "600")
        port = free_port()
        bridge = await asyncio.create_subprocess_exec(
            SYSTEM_PYTHON,
            "-I",
            str(proxy.directory / "bridge.py"),
            str(proxy.socket_path),
            str(port),
            str(command.pid),
        )
        try:
            # The bridge returns once it listens: no waiting for it to come up.
            assert await asyncio.wait_for(bridge.wait(), DEADLINE) == 0
            proxy_url = f"http://127.0.0.1:{port}"
            text = await asyncio.to_thread(fetch_through, proxy_url, site.url("/notes.txt"))
            assert text.startswith("Plain notes")
            with pytest.raises(urllib.error.HTTPError) as refused:
                await asyncio.to_thread(fetch_through, proxy_url, "http://127.0.0.1:1/")
            assert refused.value.code == 403
            refused.value.close()  # an HTTPError holds the response's connection
        finally:
            command.kill()
            await command.wait()
        await until(lambda: refuses_connections(port))


# --- end to end: a bubblewrap sandbox with no network but the proxy ------------------------

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="needs bubblewrap and a system python3",
)


async def in_sandbox(network: SandboxNetwork, script: str) -> tuple[int, str]:
    """Run ``script`` with /bin/sh in a sandbox that has its own network namespace (loopback
    only), as the sandbox does: as ``nobody`` when we are root."""
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    argv += [
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/run",
        "--unshare-net",
        "--unshare-pid",
    ]
    argv += ["--die-with-parent", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin"]
    argv += ["--setenv", "HOME", "/tmp", *network.bwrap_args]
    for name, value in network.env.items():
        argv += ["--setenv", name, value]
    argv.append("--")
    if os.geteuid() == 0:
        argv += ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    process = await asyncio.create_subprocess_exec(
        *argv,
        *network.wrap(["/bin/sh", "-c", script], SYSTEM_PYTHON),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


@needs_bwrap
async def test_curl_and_urllib_in_a_sandbox_reach_an_allowed_port_and_nothing_else(
    site: WebSite, other_site: WebSite, short_dir: Path
) -> None:
    where = f"127.0.0.1:{site.port}"
    policy = EgressPolicy("restricted", (where,), only("127.0.0.1"))
    allowed, refused = site.url("/notes.txt"), other_site.url("/notes.txt")
    script = f"""
curl -sS -m 30 {allowed}; echo
curl -sS -m 30 --proxytunnel {allowed}; echo
curl -sS -m 30 -o /dev/null -w 'other port: %{{http_code}}\\n' {refused}
curl -sS -m 30 --noproxy '*' {allowed} >/dev/null 2>&1 || echo 'direct: no route'
python3 -c 'import urllib.request as u; print(u.urlopen("{allowed}", timeout=30).read().decode())'
"""
    before = len(other_site.requests)
    async with running(policy, short_dir) as proxy:
        code, output = await in_sandbox(await proxy.sandbox_network(), script)
    assert code == 0, output
    lines = output.splitlines()
    assert lines == [
        "Plain notes: the lamp burned whale oil.",
        "Plain notes: the lamp burned whale oil.",
        "other port: 403",
        "direct: no route",
        "Plain notes: the lamp burned whale oil.",
    ], output
    assert len(other_site.requests) == before


@needs_bwrap
async def test_an_open_sandbox_reaches_no_internal_address_nor_the_servers_port(
    site: WebSite, short_dir: Path
) -> None:
    """``network: true``: any public host, through the same guard; loopback stays shut (the
    sandbox's own namespace has no route there, and the proxy refuses it)."""
    policy = EgressPolicy("open", (), AddressPolicy.allowing([], own_ports=[site.port]))
    script = f"""
curl -sS -m 30 {site.url("/notes.txt")}
curl -sS -m 30 http://169.254.169.254/latest/meta-data/
"""
    async with running(policy, short_dir) as proxy:
        code, output = await in_sandbox(await proxy.sandbox_network(), script)
    assert code == 0, output
    assert output.count("hermes egress proxy: refused to connect") == 2, output
    assert "this server's own address" in output
    assert "a cloud metadata address" in output


def make_wheel(directory: Path) -> Path:
    """A one-module pure-Python wheel, built by hand (a wheel is a zip with metadata)."""
    files = {
        "hermes_egress_demo/__init__.py": b'GREETING = "installed through the egress proxy"\n',
        "hermes_egress_demo-0.1.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: hermes-egress-demo\nVersion: 0.1\n"
        ),
        "hermes_egress_demo-0.1.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: hermes-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = [f"{name},sha256={digest(data)},{len(data)}" for name, data in files.items()] + [
        "hermes_egress_demo-0.1.dist-info/RECORD,,"
    ]
    files["hermes_egress_demo-0.1.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = directory / "hermes_egress_demo-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@contextlib.contextmanager
def package_index(root: Path) -> Iterator[tuple[int, list[str]]]:
    """A PEP 503 simple index on loopback serving one wheel; its port and the paths asked."""
    wheel = make_wheel(root)
    project = root / "simple" / "hermes-egress-demo"
    project.mkdir(parents=True)
    link = f"../../{wheel.name}#sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}"
    (project / "index.html").write_text(
        f'<html><body><a href="{link}">{wheel.name}</a></body></html>'
    )
    asked: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            asked.append(self.path)

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1]), asked
    finally:
        server.shutdown()
        server.server_close()


@needs_bwrap
async def test_pip_installs_from_an_allow_listed_index_through_the_proxy(
    short_dir: Path,
) -> None:
    index_root = short_dir / "index"
    index_root.mkdir()
    with package_index(index_root) as (port, asked):
        where = f"127.0.0.1:{port}"
        policy = EgressPolicy("restricted", (where,), only(where))
        pip = f"{SYSTEM_PYTHON} -m pip"
        options = (
            f"--disable-pip-version-check --no-cache-dir --no-deps --retries 0 --timeout 30"
            f" --index-url http://{where}/simple/ hermes-egress-demo"
        )
        script = f"""set -e
{pip} download -d /tmp/dl {options}
ls /tmp/dl
{pip} install --target /tmp/site {options}
PYTHONPATH=/tmp/site python3 -c 'import hermes_egress_demo as d; print(d.GREETING)'
"""
        async with running(policy, short_dir) as proxy:
            code, output = await in_sandbox(await proxy.sandbox_network(), script)
    assert code == 0, output
    assert "hermes_egress_demo-0.1-py3-none-any.whl" in output
    assert output.rstrip().endswith("installed through the egress proxy"), output
    assert "/simple/hermes-egress-demo/" in asked


# --- configuration ------------------------------------------------------------------------


def test_sandbox_network_settings_become_an_egress_policy() -> None:
    from server.config.schema import ProfileConfig, SandboxSettings, WebConfig

    web = WebConfig(allow=["10.0.0.0/8:3128"]).options(own_ports=[8000])
    restricted = ProfileConfig(
        id="p",
        providers=["x"],
        sandbox=SandboxSettings(network="restricted", allowed_hosts=["pypi.org", "*.org:443"]),
    ).toolset_options(web)
    assert restricted.policy.network
    assert restricted.policy.egress == EgressPolicy(
        "restricted", ("pypi.org", "*.org:443"), web.policy
    )
    assert restricted.policy.egress.address_policy.own_ports == {8000}
    open_policy = SandboxSettings(network=True).policy()
    assert open_policy.network
    assert open_policy.egress == EgressPolicy("open", (), AddressPolicy())
    closed = SandboxSettings().policy()
    assert (closed.network, closed.egress) == (False, None)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"network": True, "allowed_hosts": ["pypi.org"]}, "only applies with network: restricted"),
        ({"network": "restricted"}, "needs allowed_hosts"),
        ({"network": "restricted", "allowed_hosts": ["pypi.org:https"]}, "not a port"),
        ({"network": "everything"}, "network"),
    ],
)
def test_sandbox_network_settings_are_validated(settings: dict[str, Any], message: str) -> None:
    from pydantic import ValidationError

    from server.config.schema import SandboxSettings

    with pytest.raises(ValidationError, match=message):
        SandboxSettings(**settings)
