"""The process's egress proxies: one per distinct policy, started on first use, all closed
when the server stops.

Profiles (and the profiles of a reloaded configuration) with equal policies share a proxy. A
reload closes the proxies of the policies no profile uses any more, once the runs on the
replaced profiles have ended (:func:`close_unused_egress_proxies`).
Sockets live in a private temporary directory: a Unix socket path must stay under ~100 bytes,
which a ``data_dir`` deep in a volume may not.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from hermes_core.tools.egress.network import SandboxNetwork
from hermes_core.tools.egress.policy import EgressPolicy
from hermes_core.tools.egress.proxy import EgressProxy, ProxyLimits


class EgressProxies:
    def __init__(self, root: Path | None = None, limits: ProxyLimits | None = None) -> None:
        self._root = root
        self._made_root = False
        self._limits = limits
        self._proxies: dict[EgressPolicy, EgressProxy] = {}
        self._count = 0

    def proxy(self, policy: EgressPolicy) -> EgressProxy:
        """The proxy for ``policy`` (not started yet, if new)."""
        proxy = self._proxies.get(policy)
        running = asyncio.get_running_loop()
        if proxy is not None and proxy.loop is not None and proxy.loop is not running:
            # Started on an event loop that is gone (a test's, an earlier app's): a new one.
            proxy = None
        if proxy is None:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="hermes-egress-"))
                self._made_root = True
            self._count += 1
            directory = self._root / f"p{self._count}"
            proxy = EgressProxy(policy, directory, limits=self._limits)
            self._proxies[policy] = proxy
        return proxy

    async def sandbox_network(self, policy: EgressPolicy) -> SandboxNetwork:
        return await self.proxy(policy).sandbox_network()

    async def close_unused(self, in_use: Iterable[EgressPolicy]) -> None:
        """Close the proxies of every policy but ``in_use``'s; a later use of a closed one's
        policy starts a new proxy."""
        keep = set(in_use)
        unused = [policy for policy in self._proxies if policy not in keep]
        await self._close([self._proxies.pop(policy) for policy in unused])

    async def close(self) -> None:
        proxies = list(self._proxies.values())
        self._proxies.clear()
        await self._close(proxies)
        if self._made_root and self._root is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self._root)
            self._root, self._made_root = None, False

    @staticmethod
    async def _close(proxies: list[EgressProxy]) -> None:
        running = asyncio.get_running_loop()
        for proxy in proxies:
            # One started on another event loop (gone, see :meth:`proxy`) cannot be awaited
            # here: it is only forgotten.
            if proxy.loop is None or proxy.loop is running:
                await proxy.close()


_PROCESS = EgressProxies()


async def sandbox_network(policy: EgressPolicy) -> SandboxNetwork:
    """Network for one sandboxed command under ``policy``, through this process's proxy for
    it (started on first use)."""
    return await _PROCESS.sandbox_network(policy)


async def close_egress_proxies() -> None:
    """Stop this process's proxies (when the server stops); a later use starts them anew."""
    await _PROCESS.close()


async def close_unused_egress_proxies(in_use: Iterable[EgressPolicy]) -> None:
    """Stop this process's proxies for policies other than ``in_use`` (those of the profiles
    still live), after a reload: a dropped policy's proxy would otherwise run until the server
    stops."""
    await _PROCESS.close_unused(in_use)
