"""The address guard (``guard.py``) for httpx2, the HTTP client of the ``mcp`` SDK: only MCP
servers reached over HTTP need it, so neither httpx2 nor httpcore2 is imported at start."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import httpcore2
import httpx2

from hermes_core.tools.web.guard import AddressPolicy, Lookup, checked_addresses, system_lookup


class GuardedNetworkBackend(httpcore2.AsyncNetworkBackend):
    """The same guard for httpx2 (the HTTP client of the ``mcp`` SDK): every TCP connection
    goes to an address checked by :func:`checked_addresses`; TLS still verifies the name."""

    def __init__(self, policy: AddressPolicy, lookup: Lookup = system_lookup) -> None:
        self._policy = policy
        self._lookup = lookup
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        addresses = await checked_addresses(self._policy, self._lookup, host, port)
        error: OSError | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except httpcore2.ConnectError as failed:
                error = OSError(str(failed))
        raise httpcore2.ConnectError(f"cannot connect to {host}:{port}: {error}")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_http_client(
    policy: AddressPolicy,
    *,
    headers: Mapping[str, str],
    timeout: float,
    lookup: Lookup = system_lookup,
) -> httpx2.AsyncClient:
    """An httpx2 client that reaches only what ``policy`` allows (no proxy from the
    environment either: the check must see the real target)."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    # httpx2 builds its connection pool without a way to pass a network backend: swap in an
    # equal pool that has ours (tests/hermes_core/tools/test_web_guard.py proves it holds).
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(trust_env=False),
        network_backend=GuardedNetworkBackend(policy, lookup),
    )
    return httpx2.AsyncClient(
        transport=transport, headers=dict(headers), timeout=timeout, trust_env=False
    )
