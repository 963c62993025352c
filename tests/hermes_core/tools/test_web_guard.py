"""The web tools reach public addresses only: every internal address, however written, is
refused — directly, through a redirect, or through a DNS answer that changes — unless the
operator allow-listed it. Fetches go to real pages served on loopback."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import httpx2
import pytest

from hermes_core.tools.web.fetch import WebFetcher
from hermes_core.tools.web.guard import (
    AddressPolicy,
    AddressRefused,
    IPAddress,
    is_local_address,
    parse_allow_entry,
)
from hermes_core.tools.web.guard_httpx import guarded_http_client
from tests.web_site import WebSite, web_site


@pytest.fixture(scope="module")
def site() -> Iterator[WebSite]:
    with web_site("127.0.0.1") as served:
        yield served


@pytest.fixture(scope="module")
def secret_site(site: WebSite) -> Iterator[WebSite]:
    """What an attacker wants the tool to reach: a service on another loopback address, on
    the same port as the allowed site (so only the address tells them apart)."""
    with web_site("127.0.0.2", site.port) as served:
        yield served


ALLOW_SITE = AddressPolicy.allowing(["127.0.0.1/32"])


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.10", "private"),
        ("172.16.5.5", "private"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "non-public"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "metadata"),
        ("2002:7f00:1::", "loopback"),  # 6to4 wrapping 127.0.0.1
        ("fc00::5", "private"),
        ("fec0::1", "site-local"),  # IPv6's old private range, still routed on some networks
    ],
)
def test_internal_addresses_are_refused_with_the_reason(address: str, reason: str) -> None:
    refusal = AddressPolicy().refusal(ipaddress.ip_address(address))
    assert refusal is not None
    assert reason in refusal


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"])
def test_public_addresses_pass(address: str) -> None:
    assert AddressPolicy().refusal(ipaddress.ip_address(address)) is None


def test_an_allow_list_opens_ranges_and_hosts_and_nothing_else() -> None:
    policy = AddressPolicy.allowing(["10.0.0.0/8", "intranet.example", "*.corp.example"])
    assert policy.refusal(ipaddress.ip_address("10.9.9.9")) is None
    assert policy.refusal(ipaddress.ip_address("192.168.1.1")) is not None
    assert policy.host_allowed("intranet.example")
    assert policy.host_allowed("wiki.corp.example")
    assert policy.host_allowed("corp.example")
    assert not policy.host_allowed("evilcorp.example")
    assert not policy.host_allowed("intranet.example.attacker.net")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/article",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:{port}/article",
        "http://0.0.0.0:{port}/article",
        "http://[::ffff:127.0.0.1]:{port}/article",
        "http://localhost:{port}/article",
        "http://2130706433:{port}/article",  # 127.0.0.1 as one decimal number
    ],
)
async def test_fetching_an_internal_address_is_refused(site: WebSite, url: str) -> None:
    before = len(site.requests)
    with pytest.raises(AddressRefused, match="refused to connect"):
        await WebFetcher(AddressPolicy()).fetch(url.format(port=site.port))
    assert len(site.requests) == before


async def test_an_allow_listed_loopback_page_is_fetched(site: WebSite) -> None:
    page = await WebFetcher(ALLOW_SITE).fetch(site.url("/article"))
    assert page.title == "The Lighthouse Keepers of Brightwater"
    assert "Elsa Marsh" in page.text


async def test_a_redirect_to_an_internal_address_is_refused_before_it_is_followed(
    site: WebSite, secret_site: WebSite
) -> None:
    for target in (secret_site.url("/article"), f"http://[::1]:{site.port}/article"):
        hop = site.url(f"/redirect?to={target}")
        with pytest.raises(AddressRefused):
            await WebFetcher(ALLOW_SITE).fetch(hop)
    assert secret_site.requests == []


async def test_a_name_redirecting_to_loopback_is_refused(
    site: WebSite, secret_site: WebSite
) -> None:
    """An allowed "public" name (here resolved by the test to the allow-listed site) whose page
    redirects to a name resolving to loopback."""
    names = {
        "public.example": [ipaddress.ip_address("127.0.0.1")],
        "sneaky.example": [ipaddress.ip_address("127.0.0.2")],
    }

    async def lookup(host: str, port: int) -> list[IPAddress]:
        return names[host]

    fetcher = WebFetcher(ALLOW_SITE, lookup=lookup)
    target = f"http://sneaky.example:{site.port}/article"
    with pytest.raises(AddressRefused, match=r"sneaky\.example \(127\.0\.0\.2\)"):
        await fetcher.fetch(f"http://public.example:{site.port}/redirect?to={target}")
    assert site.asked("/redirect")
    assert secret_site.requests == []


async def test_a_dns_answer_that_changes_between_checks_cannot_redirect_the_connection(
    site: WebSite, secret_site: WebSite
) -> None:
    """Rebinding: the first answer passes the check, later ones point inside. The connection
    uses the checked answer (one lookup per connection), and the next fetch is refused."""
    answers = iter([["127.0.0.1"], ["127.0.0.2"], ["127.0.0.2"]])
    lookups: list[str] = []

    async def rebinding(host: str, port: int) -> list[IPAddress]:
        lookups.append(host)
        return [ipaddress.ip_address(a) for a in next(answers)]

    fetcher = WebFetcher(ALLOW_SITE, lookup=rebinding)
    page = await fetcher.fetch(f"http://rebind.example:{site.port}/article")
    assert "Elsa Marsh" in page.text
    assert lookups == ["rebind.example"]
    with pytest.raises(AddressRefused, match="loopback"):
        await fetcher.fetch(f"http://rebind.example:{site.port}/article")
    assert secret_site.requests == []


async def test_a_name_with_one_internal_answer_among_public_ones_is_refused() -> None:
    async def hedged(host: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address("93.184.215.14"), ipaddress.ip_address("10.0.0.1")]

    with pytest.raises(AddressRefused, match="private"):
        await WebFetcher(AddressPolicy(), lookup=hedged).fetch("http://mixed.example/")


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/x", "http://user:pw@example.com/"]
)
async def test_other_schemes_and_credentials_in_urls_are_refused(url: str) -> None:
    with pytest.raises(AddressRefused):
        await WebFetcher(AddressPolicy()).fetch(url)


async def test_the_guarded_httpx_client_refuses_what_the_fetcher_refuses(
    site: WebSite, secret_site: WebSite
) -> None:
    """The client the MCP tools use (httpx2, inside the ``mcp`` SDK) is held to the same
    policy, rebinding included: one lookup per connection, and it connects to that answer."""
    answers = iter([["127.0.0.1"], ["127.0.0.2"]])

    async def rebinding(host: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address(a) for a in next(answers)]

    async with guarded_http_client(ALLOW_SITE, headers={}, timeout=10, lookup=rebinding) as http:
        # Connection: close, so that the next request needs a new connection (and a lookup).
        page = await http.get(
            f"http://rebind.example:{site.port}/notes.txt", headers={"Connection": "close"}
        )
        assert page.text.startswith("Plain notes")
        for url in (
            f"http://rebind.example:{site.port}/notes.txt",  # the answer changed: refused
            secret_site.url("/notes.txt"),
            f"http://[::ffff:127.0.0.2]:{site.port}/notes.txt",
            "http://169.254.169.254/latest/meta-data/",
        ):
            with pytest.raises(AddressRefused):
                await http.get(url)
    assert secret_site.requests == []
    assert isinstance(http, httpx2.AsyncClient)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("localhost", ("localhost", None)),
        ("LocalHost:8080", ("localhost", 8080)),
        ("*.corp.example:443", ("*.corp.example", 443)),
        ("10.0.0.0/8:5432", (ipaddress.ip_network("10.0.0.0/8"), 5432)),
        ("10.1.2.3", (ipaddress.ip_network("10.1.2.3/32"), None)),
        ("::1", (ipaddress.ip_network("::1/128"), None)),
        ("[::1]", (ipaddress.ip_network("::1/128"), None)),
        ("[::1]:9000", (ipaddress.ip_network("::1/128"), 9000)),
        ("[fd00::/8]:53", (ipaddress.ip_network("fd00::/8"), 53)),
    ],
)
def test_allow_entries_take_an_optional_port(
    entry: str, expected: tuple[object, int | None]
) -> None:
    assert parse_allow_entry(entry) == expected


@pytest.mark.parametrize(
    "entry",
    ["", "local host", "localhost:0", "localhost:http", "[::1", "[name]:80", "a..b", "h:1:2x"],
)
def test_malformed_allow_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match=r"not a|port"):
        parse_allow_entry(entry)


def test_an_entry_with_a_port_opens_that_port_only() -> None:
    policy = AddressPolicy.allowing(
        ["localhost:8080", "[::1]:9000", "10.0.0.0/8:5432", "*.corp.example:443", "db.example"]
    )
    loopback, v6, private = (ipaddress.ip_address(a) for a in ("127.0.0.1", "::1", "10.9.9.9"))
    assert policy.host_allowed("localhost", 8080)
    assert not policy.host_allowed("localhost", 8000)
    assert not policy.host_allowed("localhost")  # the port unknown: only portless entries
    assert policy.refusal(v6, 9000) is None
    assert policy.refusal(v6, 9001) is not None
    assert policy.refusal(private, 5432) is None
    assert policy.refusal(private, 22) is not None
    assert policy.host_allowed("wiki.corp.example", 443)
    assert not policy.host_allowed("wiki.corp.example", 80)
    assert policy.host_allowed("db.example", 5432)  # no port: every port
    assert policy.refusal(loopback, 8080) is not None  # a host entry opens the name only


def test_the_servers_own_port_is_refused_on_this_machines_addresses() -> None:
    policy = AddressPolicy.allowing(["127.0.0.1:9000"], own_ports=[8000])
    own = policy.refusal(ipaddress.ip_address("127.0.0.1"), 8000)
    assert own is not None
    assert "this server's own address" in own
    assert policy.refusal(ipaddress.ip_address("127.0.0.1"), 9000) is None
    # Elsewhere the port means nothing special.
    assert policy.refusal(ipaddress.ip_address("93.184.215.14"), 8000) is None
    assert is_local_address(ipaddress.ip_address("127.0.0.1"))
    assert not is_local_address(ipaddress.ip_address("93.184.215.14"))


async def test_fetching_an_allow_listed_address_on_another_port_is_refused(site: WebSite) -> None:
    allowed = AddressPolicy.allowing([f"127.0.0.1:{site.port}"])
    page = await WebFetcher(allowed).fetch(site.url("/notes.txt"))
    assert page.text.startswith("Plain notes")
    other = AddressPolicy.allowing([f"127.0.0.1:{site.port + 1}"])
    before = len(site.requests)
    with pytest.raises(AddressRefused, match="loopback"):
        await WebFetcher(other).fetch(site.url("/notes.txt"))
    assert len(site.requests) == before


def test_the_configuration_refuses_a_malformed_allow_entry() -> None:
    from pydantic import ValidationError

    from server.config.schema import WebConfig

    assert WebConfig(allow=["localhost:8080", "[::1]:9000"]).allow == [
        "localhost:8080",
        "[::1]:9000",
    ]
    with pytest.raises(ValidationError, match="not a port from 1 to 65535"):
        WebConfig(allow=["localhost:99999"])
