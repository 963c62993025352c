"""The aiohttp resolver of the tools and webhooks that reach the network: it hands out only
addresses :class:`~hermes_core.tools.web.guard.AddressPolicy` allows.

Apart from the policy, which the sandbox's egress proxy and the configuration also use at
start, so that importing the policy does not load aiohttp (~0.1 s of a start).
"""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult

from hermes_core.tools.web.guard import (
    AddressPolicy,
    IPAddress,
    Lookup,
    checked_addresses,
    system_lookup,
)


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that hands out only addresses the policy allows.

    Every address a name resolves to must pass: a name with one internal answer among public
    ones is refused as a whole (it is how rebinding services hedge).
    """

    def __init__(self, policy: AddressPolicy, lookup: Lookup = system_lookup) -> None:
        self._policy = policy
        self._lookup = lookup

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await checked_addresses(self._policy, self._lookup, host, port)
        return [_result(host, port, address) for address in addresses]

    async def close(self) -> None:
        return None


def _result(host: str, port: int, address: IPAddress) -> ResolveResult:
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    return ResolveResult(
        hostname=host,
        host=str(address),
        port=port,
        family=family,
        proto=0,
        flags=socket.AI_NUMERICHOST,
    )
