"""One MCP server, kept connected: started, listed, watched, restarted.

A connection is owned by one supervisor task, because the SDK's client must be entered and left
in the same task (anyio task groups). Runs call tools through it from their own tasks. When the
server goes away (a stdio process that crashed, an HTTP server that stopped answering) the call
in flight fails with a clear error, the supervisor tears the session down and connects again,
backing off while it keeps failing; calls made meanwhile wait for it (up to the connect timeout)
or fail fast with the reason the server is down. A dead server only ever costs its own calls.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TextIO

from hermes_core.tools.mcp.spec import McpServerSpec

if TYPE_CHECKING:
    # The SDK itself is loaded by load_sdk(), off the event loop; code that runs once a
    # session exists names it through hermes_core.tools.mcp.sdk, at function level.
    import httpx2
    import mcp_types
    from mcp import Client
    from mcp.shared.dispatcher import ProgressFnT

log = logging.getLogger("hermes.mcp")

_STOP_GRACE_SECONDS = 2.0
"""How long :meth:`McpConnection.stop` lets the session close itself before it kills a stdio
server's processes: the SDK's own shutdown can wait on a server that never answers."""
_KILL_GRACE_SECONDS = 1.0
"""Between SIGTERM and SIGKILL."""
_CLOSE_GRACE_SECONDS = 3.0
"""After :meth:`McpConnection.stop` killed a stdio server, how long the SDK's shutdown gets to
hear its exit and close the process (it gives itself 2 s for that)."""
_REAP_GRACE_SECONDS = 5.0
"""After a stdio server exited, how long to wait for the SDK's watcher to reap it (generous:
it is a thread, and a loaded machine may not run it at once; it returns as soon as it did)."""
_SPAWN_MARK = "HERMES_MCP_SPAWN"
"""Set in a stdio server's environment, unique per attempt, to find its pid: the SDK spawns
the process (in a session of its own) but does not tell us which it is."""


async def load_sdk() -> None:
    """Import the MCP SDK (:mod:`hermes_core.tools.mcp.sdk`, ~0.35 s) on a worker thread, once:
    a server with MCP servers answers /health without it, and an import on the event loop
    would hold up every request meanwhile."""
    if "hermes_core.tools.mcp.sdk" not in sys.modules:
        await asyncio.to_thread(importlib.import_module, "hermes_core.tools.mcp.sdk")


class McpUnavailable(Exception):
    """The server cannot take calls now; the message says why (for the model and /ready)."""


class McpConnection:
    """A supervised session with one MCP server."""

    def __init__(
        self,
        spec: McpServerSpec,
        *,
        on_tools_changed: Callable[[], None] = lambda: None,
        errlog: TextIO | None = None,
    ) -> None:
        self.spec = spec
        self.tools: list[mcp_types.Tool] = []
        """The server's tools as last listed (filtered). Kept while it is down, so that the
        model is told a call failed because the server is down, not that no such tool exists."""
        self.down_since: float | None = time.monotonic()
        self.error: str | None = "not connected yet"
        """Why the server is down, or None while it is up."""
        self._on_tools_changed = on_tools_changed
        self._errlog = errlog
        self._client: Client | None = None
        self._up = asyncio.Event()
        self._settled = asyncio.Event()
        """Set once the first attempt to connect has ended, either way: runs that started
        before it wait for it (:meth:`until_settled`), later ones take the tools as they are."""
        self._broken = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._relist: asyncio.Task[None] | None = None
        self._child: int | None = None
        """The pid of this attempt's stdio server (its process group's leader), once known."""
        self._killers: set[asyncio.Task[None]] = set()
        """Kills the handshake's watchdog started (held so that they are not collected)."""
        self._handshake: asyncio.Timeout | None = None
        """The connect timeout of the handshake in progress, if one is."""
        self._closing = False
        """The SDK is closing a session: see :meth:`_interrupt`."""

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.spec.name}")
            # Runs wait for the first attempt for no longer than the connect timeout, even if
            # the attempt itself never ends (a stdio server that never answers can leave the
            # SDK's client stuck until the process exits): later runs do not wait at all.
            loop = asyncio.get_running_loop()
            loop.call_later(self.spec.connect_timeout_seconds, self._settled.set)

    async def stop(self) -> None:
        """Stop the supervisor, in bounded time: a session that does not close within a short
        grace (a stdio server that never answered keeps the SDK waiting on it) has its server
        killed, and one that still does not end is abandoned rather than waited for, so that a
        reload's clean-up and a shutdown drain are never held up by one server."""
        self._stopping = True
        self._settled.set()  # nothing is coming: let no run wait for it
        self._broken.set()
        task, self._task = self._task, None
        if task is None:
            return
        self._interrupt(task)
        done, _ = await asyncio.wait({task}, timeout=_STOP_GRACE_SECONDS)
        if not done:
            await self._kill_child()
            done, _ = await asyncio.wait({task}, timeout=_CLOSE_GRACE_SECONDS)
        if done:
            await asyncio.gather(task, return_exceptions=True)
        else:
            log.warning("MCP server %s did not close in time; abandoning it", self.spec.name)
        await self._kill_child()  # whatever the SDK left running

    def _interrupt(self, task: asyncio.Task[None]) -> None:
        """Cancel the supervisor, but never the SDK's shutdown of a session: that waits (bounded)
        for a stdio server's exit to be heard and then closes its process, and a cancellation
        cuts it short, leaving a process object "still running" and its transport open once
        the loop is gone (a ResourceWarning at collection). So a stdio session already closing
        (a lost server, a timed-out handshake) is left to end by itself (``_stopping`` then
        ends the supervisor), and the handshake's connect timeout, which would cancel the
        shutdown a stop started, is disarmed first. An HTTP session has no process to leave
        behind: it is cancelled wherever it is."""
        handshake = self._handshake
        if self.spec.command:
            if self._closing or (handshake is not None and handshake.expired()):
                return
            if handshake is not None:
                handshake.reschedule(None)
        task.cancel()

    @property
    def settled(self) -> bool:
        """The first attempt to connect has ended (connected, or failed)."""
        return self._settled.is_set()

    async def until_settled(self) -> bool:
        """Wait for the first attempt to connect to end, for up to the connect timeout;
        True once it has ended, whatever came of it."""
        if self._settled.is_set():
            return True
        try:
            async with asyncio.timeout(self.spec.connect_timeout_seconds):
                await self._settled.wait()
        except TimeoutError:
            return False
        return True

    async def wait_up(self, seconds: float) -> bool:
        try:
            async with asyncio.timeout(seconds):
                await self._up.wait()
        except TimeoutError:
            return False
        return True

    async def call(
        self, tool: str, arguments: dict[str, Any], progress: ProgressFnT | None = None
    ) -> mcp_types.CallToolResult:
        """Call ``tool``; raises :class:`McpUnavailable` when the server cannot answer,
        ``TimeoutError`` beyond the per-call timeout (the call is cancelled on the server)."""
        client = await self._ready_client()
        try:
            async with asyncio.timeout(self.spec.timeout_seconds):
                return await client.call_tool(tool, arguments, progress_callback=progress)
        except (TimeoutError, asyncio.CancelledError):
            raise
        except Exception as error:
            if _connection_lost(error):
                self._lost(f"the connection was lost during a call ({_describe(error)})")
                raise McpUnavailable(f"MCP server {self.spec.name!r} went away mid-call") from None
            raise

    async def _ready_client(self) -> Client:
        if self._client is None or self.error is not None:
            # A server that just went away is probably restarting: wait for it. One that has
            # been down for longer than a connect takes fails the call at once.
            down_for = time.monotonic() - (self.down_since or 0.0)
            patience = (
                self.spec.connect_timeout_seconds
                if down_for < 2 * self.spec.connect_timeout_seconds
                else 0.0
            )
            if not await self.wait_up(patience):
                raise McpUnavailable(f"MCP server {self.spec.name!r} is down: {self.error}")
        assert self._client is not None
        return self._client

    # --- the supervisor ---------------------------------------------------------------------

    async def _supervise(self) -> None:
        try:
            await load_sdk()
        except Exception as error:  # a broken install: this server stays down, and says why
            self._lost(f"the MCP SDK failed to load ({type(error).__name__}: {error})")
            self._settled.set()
            log.error("MCP server %s: %s", self.spec.name, self.error)
            return
        delay = 0.25
        while True:
            started = time.monotonic()
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except FileNotFoundError:
                self._lost(f"command not found: {self.spec.command}")
            except BaseException as error:  # an anyio group may wrap what went wrong
                self._lost(_describe(error))
            self._settled.set()
            if self._stopping:
                return
            # Keep retrying a dead server, more slowly the longer it stays dead.
            delay = 0.25 if time.monotonic() - started > 30 else min(delay * 2, 30.0)
            log.warning(
                "MCP server %s is down (%s); reconnecting in %.1f s",
                self.spec.name,
                self.error,
                delay,
            )
            await asyncio.sleep(delay)

    async def _session(self) -> None:
        from hermes_core.tools.mcp.sdk import Client, mcp_types

        self._broken.clear()
        self._child = None
        # A handshake that times out is cancelled, but the SDK then closes the server's stdin
        # and waits for it to exit: kill a server that never answered at the same moment, so
        # the half-open connection is gone when the next attempt starts.
        loop = asyncio.get_running_loop()
        watchdog = loop.call_later(
            self.spec.connect_timeout_seconds,
            lambda: self._killers.add(loop.create_task(self._kill_child())),
        )
        self._handshake = asyncio.timeout(self.spec.connect_timeout_seconds)
        try:
            async with self._handshake:
                client = Client(
                    self._transport(),
                    message_handler=self._message,
                    client_info=mcp_types.Implementation(name="hermes-server", version="0.1.0"),
                )
                await client.__aenter__()
        finally:
            self._handshake = None
            watchdog.cancel()
            self._killers = {task for task in self._killers if not task.done()}
        try:
            async with asyncio.timeout(self.spec.connect_timeout_seconds):
                self.tools = await self._list(client)
            self._client, self.error, self.down_since = client, None, None
            self._up.set()
            self._settled.set()
            self._on_tools_changed()
            log.info(
                "MCP server %s connected (%s): %d tools",
                self.spec.name,
                self.spec.transport,
                len(self.tools),
            )
            listener = asyncio.create_task(self._listen(client))
            try:
                await self._broken.wait()
            finally:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)
        finally:
            self._up.clear()
            self._client = None
            self.down_since = time.monotonic()
            self._closing = True
            try:
                await client.__aexit__(None, None, None)
            except BaseException as error:
                if isinstance(error, asyncio.CancelledError):
                    raise
                log.debug("closing MCP server %s: %s", self.spec.name, _describe(error))
            finally:
                self._closing = False
            await self._kill_child()  # a server that outlived the SDK's shutdown

    async def _kill_child(self) -> None:
        """SIGTERM this attempt's stdio server and its process group, SIGKILL after a grace."""
        pid = self._child
        if pid is None or not _in_process_table(pid):
            self._child = None
            return  # never started, or exited and reaped: its process object has heard
        if _alive(pid):
            log.info("MCP server %s: terminating process %d", self.spec.name, pid)
            _signal_group(pid, signal.SIGTERM)
            if not await _gone(pid, _KILL_GRACE_SECONDS):
                _signal_group(pid, signal.SIGKILL)
                await _gone(pid, _KILL_GRACE_SECONDS)
        # Exited (by us or by the SDK's own kill) but maybe not yet reaped: the SDK's process
        # watcher, a thread blocked in waitpid, reaps it and then tells its process object
        # through a callback on this loop. On a busy machine that thread may not have run yet,
        # and a process object that never heard is "still running" when collected (a
        # ResourceWarning, an error under pytest). So wait until the pid is reaped, then give
        # the callback its turn.
        await _reaped(pid, _REAP_GRACE_SECONDS)
        await asyncio.sleep(0.05)
        # Forgotten only now: a stop can cancel the supervisor in the middle of this (a
        # cancellation the SDK's shutdown swallowed comes back at the next await), and the
        # stop's own call must then find the pid still to see to.
        if self._child == pid:
            self._child = None

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        from hermes_core.tools.mcp.sdk import (
            StdioServerParameters,
            guarded_http_client,
            httpx2,
            stdio_client,
            streamable_http_client,
        )

        spec = self.spec
        if spec.command:
            mark = uuid.uuid4().hex
            params = StdioServerParameters(
                command=spec.command,
                args=list(spec.args),
                env={**spec.env, _SPAWN_MARK: mark},
                cwd=spec.cwd,
            )
            return _Tracked(stdio_client(params, errlog=self._errlog or sys.stderr), mark, self)
        assert spec.url is not None
        timeout = spec.timeout_seconds + 5
        http = (
            guarded_http_client(spec.policy, headers=spec.headers, timeout=timeout)
            if spec.policy is not None
            else httpx2.AsyncClient(headers=spec.headers, timeout=timeout)
        )
        return _closing(streamable_http_client(spec.url, http_client=http), http)

    async def _list(self, client: Client) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
            tools += [t for t in page.tools if self.spec.wants(t)]
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def _listen(self, client: Client) -> None:
        """Relist the tools whenever the server says they changed. A 2026-07-28 server says so
        on a ``subscriptions/listen`` stream; older ones send ``notifications/tools/
        list_changed`` on the session (see :meth:`_message`)."""
        from hermes_core.tools.mcp.sdk import MODERN_PROTOCOL_VERSIONS, ListenNotSupportedError

        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    await self._refresh_tools()
        except asyncio.CancelledError:
            raise
        except (ListenNotSupportedError, Exception) as error:
            # Without the stream the tools stay as listed; the next reconnect relists them.
            log.info("MCP server %s: no tool-change stream (%s)", self.spec.name, _describe(error))

    async def _message(self, message: Any) -> None:
        from hermes_core.tools.mcp.sdk import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._schedule_relist()
        elif isinstance(message, Exception) and _connection_lost(message):
            self._lost(_describe(message))

    def _schedule_relist(self) -> None:
        if self._relist is None or self._relist.done():
            self._relist = asyncio.create_task(self._refresh_tools())

    async def _refresh_tools(self) -> None:
        client = self._client
        if client is None:
            return
        try:
            self.tools = await self._list(client)
        except Exception as error:
            log.warning("MCP server %s: relisting tools failed: %s", self.spec.name, error)
            return
        log.info("MCP server %s: tool list changed (%d tools)", self.spec.name, len(self.tools))
        self._on_tools_changed()

    def _lost(self, why: str) -> None:
        self.error = why
        self._broken.set()


class _Tracked:
    """A stdio transport that, once the server is spawned, tells its connection the pid."""

    def __init__(
        self, inner: AbstractAsyncContextManager[Any], mark: str, owner: McpConnection
    ) -> None:
        self._inner, self._mark, self._owner = inner, mark, owner

    async def __aenter__(self) -> Any:
        streams = await self._inner.__aenter__()
        self._owner._child = _child_marked(self._mark)
        return streams

    async def __aexit__(self, *exc: Any) -> None:
        await self._inner.__aexit__(*exc)


def _child_marked(mark: str) -> int | None:
    """Our child process whose environment carries ``mark`` (Linux /proc; None elsewhere)."""
    me = os.getpid()
    wanted = f"{_SPAWN_MARK}={mark}".encode()
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                # The parent pid is the second field after the ")" that ends the command name.
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
            if parent != me:
                continue
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if wanted in environ.read().split(b"\0"):
                    return pid
        except (OSError, ValueError, IndexError):
            continue
    return None


def _alive(pid: int) -> bool:
    """Still running: not gone, and not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _signal_group(pid: int, signum: signal.Signals) -> None:
    """Signal the server's process group (the SDK starts it in a session of its own, so that
    is the server and its children), or the server alone if it is not a group leader."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except OSError:
        pass  # gone already


class _closing:
    """A transport that also closes the HTTP client it was given."""

    def __init__(self, inner: AbstractAsyncContextManager[Any], http: httpx2.AsyncClient) -> None:
        self._inner, self._http = inner, http

    async def __aenter__(self) -> Any:
        try:
            return await self._inner.__aenter__()
        except BaseException:
            await self._http.aclose()
            raise

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self._inner.__aexit__(*exc)
        finally:
            await self._http.aclose()


def _connection_lost(error: BaseException) -> bool:
    """Whether ``error`` (from a session, so the SDK is loaded) means the server went away."""
    from hermes_core.tools.mcp.sdk import MCPError, anyio, httpx2, mcp_types

    lost = (
        anyio.ClosedResourceError,
        anyio.BrokenResourceError,
        anyio.EndOfStream,
        ConnectionError,
        httpx2.TransportError,
    )
    if isinstance(error, lost):
        return True
    if isinstance(error, MCPError):
        return error.code == mcp_types.CONNECTION_CLOSED
    if isinstance(error, BaseExceptionGroup):
        return any(_connection_lost(inner) for inner in error.exceptions)
    return False


def _describe(error: BaseException) -> str:
    """A short reason for logs, /ready and the model; never a header value."""
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return _describe(error.exceptions[0])
    if isinstance(error, TimeoutError):
        return "no answer in time"
    if _is_mcp_error(error):
        from hermes_core.tools.mcp.sdk import MCPError

        assert isinstance(error, MCPError)
        return f"MCP error {error.code}: {error.error.message}"[:200]
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}"[:200] if text else type(error).__name__


def _is_mcp_error(error: BaseException) -> bool:
    """An SDK error, told without importing the SDK: what failed may be its own import."""
    sdk = sys.modules.get("hermes_core.tools.mcp.sdk")
    return sdk is not None and isinstance(error, sdk.MCPError)


async def _reaped(pid: int, seconds: float) -> bool:
    """Whether ``pid`` is gone from the process table (exited *and* waited for) within
    ``seconds``: a zombie counts as gone for :func:`_gone`, not here."""
    for _ in range(int(seconds / 0.05)):
        if not _in_process_table(pid):
            return True
        await asyncio.sleep(0.05)
    return not _in_process_table(pid)


def _in_process_table(pid: int) -> bool:
    """Running or a zombie (not yet waited for). /proc is in memory: no I/O to move off the loop."""
    return os.path.exists(f"/proc/{pid}")


async def _gone(pid: int, seconds: float) -> bool:
    """Whether ``pid`` has exited (and been reaped) within ``seconds``. Polled: the process is
    the SDK's child, so there is nothing of ours to wait on."""
    for _ in range(int(seconds / 0.05)):
        if not _alive(pid):
            return True
        await asyncio.sleep(0.05)
    return not _alive(pid)
