"""Reading fetched HTML pages in child processes, so a hostile page costs the server nothing.

trafilatura spends seconds of CPU (8.9 s on 2 MB of links) and hundreds of MB on a hostile
page. On threads of the server it held the GIL the event loop needs (every tenant's requests
slowed by a third while two such pages were read) and ran on after its fetch gave up, with no
memory bound. Here each page is read by one of :data:`READER_PROCESSES` long-lived children
(``page_reader_process.py``: niced, memory-capped, no secrets in its environment, no sockets
nor programs, ended with the server): a read that takes longer than :data:`READ_SECONDS`, or
whose fetch gives up (the run interrupted, the fetch's own time limit), kills its child, and
the next page starts a new one. A page waiting for a free child holds no child, and one whose
fetch gave up meanwhile is never read.

Each child is driven by a thread of a small pool of our own, blocked on the child's pipe (no
GIL held), so the reading works the same from any event loop. The pool takes the tenants (API
keys: ``tools/tenant.py``) in turn, so one tenant's queue of hostile pages delays another's
page by one read at most, not by the whole queue.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

from hermes_core.tools.fair_threads import FairThreads
from hermes_core.tools.tenant import current_tenant

READER_PROCESSES = 2
"""Children reading pages at once, for the whole server (each ~60 MB once trafilatura is
loaded); more pages wait for one to be free."""
READ_SECONDS = 10.0
"""How long one page may take to read (an ordinary page takes well under a second)."""
MEMORY_BYTES = 1024**3
"""Address space a child may use: a page that needs more is answered with an error."""
ANSWER_BYTES = 64 * 1024**2
"""The longest answer taken from a child. A 2 MB page answers a few MB of JSON (links made
absolute and characters escaped grow it a few times); more is a child gone wrong, which would
otherwise fill the server's memory."""
_SCRIPT = Path(__file__).with_name("page_reader_process.py")
_ENVIRONMENT = {"PATH": os.defpath, "LC_ALL": "C.UTF-8"}
"""All a child is given: the server's environment holds its keys."""


class PageUnreadable(Exception):
    """The page's HTML could not be read; the message says why, in the model's words."""


class _Refused(PageUnreadable):
    """The child answered that it could not read the page (it is fine for the next one)."""


class _Reader:
    """One child process, and its pipes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            # Its memory cap, and the server's process id (it ends with the server).
            [sys.executable, "-I", str(_SCRIPT), str(MEMORY_BYTES), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,  # both pipes are written and read by descriptor, within a deadline
            env=_ENVIRONMENT,
            # Not a session of its own: the kernel's autogroups would then share the cores
            # between it and the server as equals, whatever its nice value.
        )
        with _idle_lock:
            _live.add(self)

    def read(self, body: bytes, url: str, charset: str, seconds: float) -> tuple[str, str]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        # Decoded here, where every codec can still be loaded (the child opens no file once
        # confined, and Python loads a codec's module on its first use): it gets UTF-8.
        body = _as_utf8(body, charset)
        head = json.dumps({"url": url, "charset": "utf-8", "size": len(body)}).encode()
        deadline = time.monotonic() + seconds
        answer = None
        if self._send(self.process.stdin.fileno(), head + b"\n" + body, deadline):
            answer = self._answer(self.process.stdout.fileno(), deadline)
        if answer is None:
            late = time.monotonic() >= deadline
            raise PageUnreadable(self._ended(seconds if late else None))
        try:
            decoded = json.loads(answer)
        except ValueError:
            decoded = None
        match decoded:
            case {"error": str(error)}:
                raise _Refused(error)
            case {"title": str(title), "text": str(text)}:
                return title, text
        # Something printed by mistake, or a child taken over by its page: not to be trusted.
        raise PageUnreadable("the process reading its HTML answered something other than a page")

    @staticmethod
    def _send(descriptor: int, request: bytes, deadline: float) -> bool:
        """Whether the child took the whole request before the deadline (a stopped or starved
        child takes the pipe's 64 kB and no more, and would hold a blocking write forever)."""
        os.set_blocking(descriptor, False)
        poller = select.poll()
        poller.register(descriptor, select.POLLOUT)
        unsent = memoryview(request)
        while unsent:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return False
            try:
                unsent = unsent[os.write(descriptor, unsent) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:  # it ended
                return False
        return True

    def _answer(self, descriptor: int, deadline: float) -> bytes | None:
        """The child's answer line, or None when it ended or the deadline passed first."""
        parts: list[bytes] = []
        size = 0
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return None
            part = os.read(descriptor, 1 << 20)
            if not part:
                return None
            parts.append(part)
            size += len(part)
            if part.endswith(b"\n"):
                return b"".join(parts)
            if size > ANSWER_BYTES:
                raise PageUnreadable(
                    f"the process reading its HTML gave an answer longer than "
                    f"{ANSWER_BYTES // 1024**2} MB"
                )

    def _ended(self, seconds: float | None = None) -> str:
        """Why the child gave no answer (it is killed if it still runs): it ended by itself,
        or was still reading after ``seconds``."""
        self.kill()
        code = self.process.wait()
        if seconds is not None:
            return f"reading its HTML took longer than the {seconds:g} s a page may take"
        return f"the process reading its HTML ended (exit code {code})"

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    def discard(self) -> None:
        """Ends a child whatever it is doing (its state is unknown after a failed read)."""
        self.kill()
        self.process.wait()
        self._close_pipes()

    def close(self) -> None:
        """Ends an idle child: it exits when its input closes."""
        self._close_pipes()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.discard()

    def _close_pipes(self) -> None:
        with _idle_lock:
            _live.discard(self)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _as_utf8(body: bytes, charset: str) -> bytes:
    """The page's bytes in UTF-8 (from ``charset``, or as UTF-8 already when Python cannot
    decode text with it: a page may declare anything)."""
    if charset.replace("-", "").replace("_", "").lower() == "utf8":
        return body
    try:
        text = body.decode(charset, errors="replace")
    except (LookupError, UnicodeError):
        return body
    return text.encode("utf-8", errors="replace")


class _Job:
    """One page's read, which the awaiting side may call off at any moment."""

    def __init__(self, body: bytes, url: str, charset: str, seconds: float) -> None:
        self.page = (body, url, charset, seconds)
        self._lock = threading.Lock()
        self._called_off = threading.Event()
        self._reader: _Reader | None = None

    def run(self) -> tuple[str, str]:
        """In a pool thread: the page read by an idle child (or a new one)."""
        if self._called_off.is_set():  # before starting a child for it
            raise PageUnreadable("the read was called off")
        try:
            reader = _idle_reader() or _Reader()
        except OSError as error:  # no memory or processes left to start one
            raise PageUnreadable(f"no process could be started to read it ({error})") from None
        with self._lock:
            if self._called_off.is_set():
                _put_back(reader)
                raise PageUnreadable("the read was called off")
            self._reader = reader
        try:
            answer = reader.read(*self.page)
        except _Refused:
            self._give_back(reader)
            raise
        except BaseException:
            reader.discard()
            raise
        self._give_back(reader)
        return answer

    def _give_back(self, reader: _Reader) -> None:
        """The reader, done with this page, for the next one: unless it was killed as its
        answer came (the call-off is too late then, and must not reach a later page)."""
        with self._lock:
            self._reader = None
            killed = self._called_off.is_set()
        if killed:
            reader.discard()
        else:
            _put_back(reader)

    def call_off(self) -> None:
        """From the event loop: a read not started never starts, one started is killed."""
        with self._lock:
            self._called_off.set()
            if self._reader is not None:
                self._reader.kill()


_threads = FairThreads(READER_PROCESSES, name="hermes-page-reader")
_idle: list[_Reader] = []
_live: set[_Reader] = set()
_idle_lock = threading.Lock()


def _idle_reader() -> _Reader | None:
    """An idle child still alive (one killed while idle, say by the OOM killer, is let go)."""
    while True:
        with _idle_lock:
            if not _idle:
                return None
            reader = _idle.pop()
        if reader.process.poll() is None:
            return reader
        reader.close()


def _put_back(reader: _Reader) -> None:
    if reader.process.poll() is not None:
        reader.close()
        return
    with _idle_lock:
        _idle.append(reader)


async def read_page(
    body: bytes, url: str, charset: str, seconds: float = READ_SECONDS
) -> tuple[str, str]:
    """The page's title and its main content as Markdown, read by a child process within
    ``seconds``; :class:`PageUnreadable` when it cannot be. Cancelling the caller (its fetch
    gave up) kills the child reading the page."""
    job = _Job(body, url, charset, seconds)
    try:
        return await asyncio.wrap_future(_threads.submit(current_tenant(), job.run))
    except asyncio.CancelledError:
        job.call_off()
        raise


def reader_pids() -> set[int]:
    """The process ids of the children alive, idle or reading (for tests and diagnostics)."""
    with _idle_lock:
        readers = list(_live)
    # One that died while idle stays listed until a page would have it: not alive, though.
    return {reader.process.pid for reader in readers if reader.process.poll() is None}


@atexit.register
def close_idle_readers() -> None:
    """Ends the children not reading a page (the next page starts a new one)."""
    with _idle_lock:
        readers, _idle[:] = list(_idle), []
    for reader in readers:
        reader.close()
