"""Where sandboxed commands may connect: the address guard, and in restricted mode a host
allow-list on top of it."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Literal

from hermes_core.tools.web.guard import AddressPolicy, host_matches, parse_allow_entry

EgressMode = Literal["restricted", "open"]
"""``restricted``: only ``allowed_hosts``; ``open``: any host the address guard allows."""


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """What the egress proxy of one profile's sandbox lets through. Hashable: proxies are
    shared by the profiles (and reloaded configurations) with an equal policy."""

    mode: EgressMode
    allowed_hosts: tuple[str, ...] = ()
    """``pypi.org``, ``*.pythonhosted.org``, each with an optional ``:port`` (every port
    without one); only in ``restricted`` mode."""
    address_policy: AddressPolicy = field(default_factory=AddressPolicy)
    """The web tools' guard (``web.allow``), applied to every address in both modes."""

    def __post_init__(self) -> None:
        for entry in self.allowed_hosts:
            parse_allow_entry(entry)  # raises ValueError for a malformed entry
        if self.mode == "open" and self.allowed_hosts:
            raise ValueError("allowed_hosts only applies to the restricted mode")

    def host_refusal(self, host: str, port: int) -> str | None:
        """Why the allow-list keeps commands from ``host:port``, or None when it does not."""
        if self.mode == "open":
            return None
        host = host.strip("[]").lower().rstrip(".")
        try:
            literal: ipaddress.IPv4Address | ipaddress.IPv6Address | None
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        for entry in self.allowed_hosts:
            what, allowed_port = parse_allow_entry(entry)
            if allowed_port is not None and allowed_port != port:
                continue
            if isinstance(what, str):
                if literal is None and host_matches(what, host):
                    return None
            elif literal is not None and literal in what:
                return None
        return (
            f"{host}:{port} is not in this sandbox's allowed hosts (sandbox.allowed_hosts in "
            "the configuration)"
        )
