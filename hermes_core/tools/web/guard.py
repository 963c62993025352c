"""Where tools that reach the network may go: public addresses only, unless allow-listed.

A URL a model (or a client) hands us may point at the server's own neighbourhood: loopback,
the private network, a cloud metadata service. :class:`AddressPolicy` refuses every address
that is not globally routable — loopback, private, link-local (169.254.169.254 among them),
multicast, reserved, unspecified, shared (CGNAT), IPv6 site-local — and the same addresses
written as IPv6 (IPv4-mapped ``::ffff:127.0.0.1``, 6to4, Teredo), and the server's own
listening port on any address of this machine, unless the operator allow-listed the host or a
range holding the address — on every port, or on the one port the entry names (``localhost:8080``).

:class:`~hermes_core.tools.web.guarded_resolver.GuardedResolver` is where the check happens:
aiohttp asks it for a host's addresses,
it resolves once, checks every answer, and hands back only checked addresses, which is what the
connection then uses. There is no second lookup an attacker's DNS could answer differently.
aiohttp does not ask the resolver about IP literals, so :meth:`AddressPolicy.check_url` checks
those before a request (and before every redirect hop). The sandbox's egress proxy
(``tools/egress``) holds commands to the same checks.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Lookup = Callable[[str, int], Awaitable[list[IPAddress]]]
"""Resolve a host name (with a port, for getaddrinfo) to its addresses."""

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2")
)
"""Cloud metadata services (AWS/GCP/Azure, AWS IPv6, ECS task credentials)."""


class AddressRefused(OSError):
    """A request to a place the policy keeps tools away from. The message says why, in words
    the model (and the user) can act on; it names the host, never credentials."""


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which hosts and addresses tools may connect to.

    Allow-list entries carry an optional port: ``localhost:8080`` opens that one port,
    ``localhost`` every port. Entries are ``(what, port)`` pairs, ``None`` meaning any port.
    """

    allowed_networks: tuple[tuple[IPNetwork, int | None], ...] = ()
    allowed_hosts: frozenset[tuple[str, int | None]] = frozenset()
    """Exact host names, or ``*.suffix`` for a domain and its subdomains."""
    schemes: frozenset[str] = field(default_factory=lambda: frozenset({"http", "https"}))
    own_ports: frozenset[int] = frozenset()
    """Ports this server listens on: refused on every address of this machine (a public
    interface included) unless allow-listed, so a tool cannot call the server's own API."""

    @classmethod
    def allowing(cls, entries: Iterable[str], *, own_ports: Iterable[int] = ()) -> AddressPolicy:
        """A policy from allow-list entries: addresses or CIDR ranges, host names,
        ``*.domain`` patterns, each optionally with ``:port`` (``[v6]:port`` for IPv6).
        Raises ``ValueError`` for an entry that is none of these."""
        networks: list[tuple[IPNetwork, int | None]] = []
        hosts: set[tuple[str, int | None]] = set()
        for entry in entries:
            if not entry.strip():
                continue
            what, port = parse_allow_entry(entry)
            if isinstance(what, str):
                hosts.add((what, port))
            else:
                networks.append((what, port))
        return cls(tuple(networks), frozenset(hosts), own_ports=frozenset(own_ports))

    def host_allowed(self, host: str, port: int | None = None) -> bool:
        """``host`` (a name) is allow-listed for ``port``; an entry with a port matches only
        that port, so an unknown port (None) matches only entries without one."""
        host = host.lower().rstrip(".")
        return any(
            (allowed is None or allowed == port) and host_matches(pattern, host)
            for pattern, allowed in self.allowed_hosts
        )

    def refusal(self, address: IPAddress, port: int | None = None) -> str | None:
        """Why tools may not connect to ``address`` (on ``port``), or None when they may."""
        if any(
            address in network and (allowed is None or allowed == port)
            for network, allowed in self.allowed_networks
        ):
            return None
        if port is not None and port in self.own_ports and is_local_address(address):
            return "this server's own address"
        if isinstance(address, ipaddress.IPv6Address):
            embedded = address.ipv4_mapped or address.sixtofour
            if embedded is None and address.teredo is not None:
                embedded = address.teredo[1]
            if embedded is not None:
                inner = self.refusal(embedded, port)
                return f"{inner} (written as IPv6)" if inner else None
        if address in METADATA_ADDRESSES:
            return "a cloud metadata address"
        for kind, flag in (
            ("a loopback address", address.is_loopback),
            ("an unspecified address", address.is_unspecified),
            ("a link-local address", address.is_link_local),
            ("a multicast address", address.is_multicast),
            ("a private address", address.is_private),
            # fec0::/10, deprecated but still IPv6's private range on older networks;
            # ipaddress counts it neither private nor reserved.
            ("a site-local address", getattr(address, "is_site_local", False)),
            ("a reserved address", address.is_reserved),
        ):
            if flag:
                return kind
        if not address.is_global:
            return "a non-public address"
        return None

    def check_url(self, url: str) -> str:
        """The URL's host, when the URL may be requested as far as can be told before a lookup
        (scheme, literal addresses); raises :class:`AddressRefused` otherwise."""
        parts = urlsplit(url)
        if parts.scheme.lower() not in self.schemes:
            allowed = " or ".join(sorted(self.schemes))
            raise AddressRefused(f"only {allowed} URLs can be fetched, not {parts.scheme!r}")
        host = parts.hostname
        if not host:
            raise AddressRefused("the URL names no host")
        if parts.username or parts.password:
            raise AddressRefused("URLs with credentials in them are refused")
        literal = _literal_address(host)
        if literal is None:
            return host
        try:
            port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        except ValueError:
            raise AddressRefused("the URL's port is not a number from 0 to 65535") from None
        reason = None if self.host_allowed(host, port) else self.refusal(literal, port)
        if reason:
            raise AddressRefused(refused_text(host, literal, reason))
        return host


def host_matches(pattern: str, host: str) -> bool:
    """``host`` is ``pattern``, or ``pattern`` is ``*.domain`` and ``host`` is that domain or
    one of its subdomains (both lower case, without a trailing dot)."""
    if pattern.startswith("*."):
        return host == pattern[2:] or host.endswith(pattern[1:])
    return host == pattern


def parse_allow_entry(entry: str) -> tuple[str | IPNetwork, int | None]:
    """One allow-list entry as ``(host name or pattern | network, port or None)``:
    ``localhost``, ``localhost:8080``, ``10.0.0.0/8:5432``, ``::1``, ``[::1]:9000``,
    ``*.corp.example:443``. Raises ``ValueError`` with a readable reason."""
    text = entry.strip().lower()
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"not a host, address or range: {entry!r}")
    port: int | None = None
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"not an [IPv6 address]:port: {entry!r}")
        what, port_text = inside, rest[1:] if rest else None
    elif text.count(":") == 1:
        what, port_text = text.split(":")
    else:
        what, port_text = text, None  # a name, IPv4, or an IPv6 address without a port
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"not a port from 1 to 65535 in {entry!r}")
        port = int(port_text)
    try:
        return ipaddress.ip_network(what, strict=False), port
    except ValueError:
        pass
    name = what.rstrip(".")
    label = name[2:] if name.startswith("*.") else name
    if (
        not label
        or text.startswith("[")
        or not all(
            part and all(c.isalnum() or c in "-_" for c in part) for part in label.split(".")
        )
    ):
        raise ValueError(f"not a host, address or range: {entry!r}")
    return name, port


def is_local_address(address: IPAddress) -> bool:
    """``address`` belongs to this machine (any interface): only then can a socket be bound
    to it. Loopback answers yes too."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


def _literal_address(host: str) -> IPAddress | None:
    """The address ``host`` spells, including the legacy IPv4 forms resolvers still accept
    (``2130706433``, ``0x7f.1``, ``127.1``), or None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def refused_text(host: str, address: IPAddress, reason: str) -> str:
    where = host if host == str(address) else f"{host} ({address})"
    return (
        f"refused to connect to {where}: {reason}. Tools may only reach public addresses; an "
        "operator can allow-list hosts or ranges, with or without a port (web.allow in the "
        "configuration)"
    )


async def system_lookup(host: str, port: int) -> list[IPAddress]:
    """The host's addresses from the system resolver (getaddrinfo), off the event loop."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        # Scope ids (fe80::1%eth0) are dropped: the address alone is what the policy judges.
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


async def checked_addresses(
    policy: AddressPolicy, lookup: Lookup, host: str, port: int
) -> list[IPAddress]:
    """``host``'s addresses, every one allowed by ``policy``; raises :class:`AddressRefused`
    (or ``OSError`` when the name does not resolve). A literal address is checked as is."""
    literal = _literal_address(host.strip("[]"))
    if literal is not None:
        addresses = [literal]
    else:
        try:
            addresses = await lookup(host, port)
        except OSError as error:
            raise OSError(f"cannot resolve {host}: {error.strerror or error}") from None
        if not addresses:
            raise OSError(f"cannot resolve {host}: no addresses")
    if not policy.host_allowed(host, port):
        for address in addresses:
            reason = policy.refusal(address, port)
            if reason:
                raise AddressRefused(refused_text(host, address, reason))
    return addresses
