"""A TCP proxy between one replica and Redis that can cut that replica's subscriptions (the
pub/sub connection it hears stops on) and keep it from subscribing again until told, while its
other connections (its lease, its writes) go on: a link lost and not yet back, held open for as
long as a test needs to act in the gap."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    subscribes: bool = False


@dataclass(eq=False)
class SubscriptionCutter:
    """Listens on its own thread and loop, so that a test blocking its own loop (a sync wait
    for a process) does not stall the replica behind it."""

    upstream: str
    refusing: bool = False
    _links: set[_Link] = field(default_factory=set)
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _port: int = 0

    def __enter__(self) -> SubscriptionCutter:
        started = threading.Event()

        async def serve() -> None:
            server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
            self._port = server.sockets[0].getsockname()[1]
            started.set()
            async with server:
                await server.serve_forever()

        def run() -> None:
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                self._loop.run_until_complete(serve())

        self._thread = threading.Thread(target=run, name="redis-cut", daemon=True)
        self._thread.start()
        assert started.wait(10), "the proxy did not start"
        return self

    def __exit__(self, *_: object) -> None:
        for task in asyncio.all_tasks(self._loop):
            self._loop.call_soon_threadsafe(task.cancel)
        self._thread.join(10)
        self._loop.close()

    @property
    def url(self) -> str:
        """Redis's URL, through the proxy."""
        parts = urlsplit(self.upstream)
        return parts._replace(netloc=f"127.0.0.1:{self._port}").geturl()

    def cut(self) -> None:
        """Close the connections that subscribed, and close any that subscribes from now on."""

        def cut_here() -> None:
            self.refusing = True
            for link in list(self._links):
                if link.subscribes:
                    link.client.close()
                    link.server.close()

        self._loop.call_soon_threadsafe(cut_here)

    def restore(self) -> None:
        """Let the replica subscribe again."""
        self._loop.call_soon_threadsafe(setattr, self, "refusing", False)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = urlsplit(self.upstream)
        try:
            up_reader, up_writer = await asyncio.open_connection(target.hostname, target.port)
        except OSError:
            writer.close()
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, link, outbound=True),
                self._pipe(up_reader, writer, link, outbound=False),
                return_exceptions=True,
            )
        finally:
            self._links.discard(link)
            writer.close()
            up_writer.close()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: _Link,
        *,
        outbound: bool,
    ) -> None:
        try:
            while chunk := await reader.read(65536):
                if outbound and b"SUBSCRIBE" in chunk.upper():
                    link.subscribes = True
                    if self.refusing:
                        break
                writer.write(chunk)
                await writer.drain()
        finally:
            link.client.close()
            link.server.close()
