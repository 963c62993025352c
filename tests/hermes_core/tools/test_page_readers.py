"""HTML pages are read by child processes the server can kill: a hostile page costs the server
process nothing, and work on it ends when its fetch gives up. Real children, real pages."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from hermes_core.tools.web import page_readers
from hermes_core.tools.web.fetch import FetchFailed, FetchLimits, WebFetcher
from hermes_core.tools.web.guard import AddressPolicy
from hermes_core.tools.web.page_readers import PageUnreadable, read_page, reader_pids
from tests.web_site import served_page

ARTICLE = (
    b"<html><head><title>Tides</title></head><body><nav>Log in</nav><article>"
    + b"<p>The spring tide at Brightwater rose 4.2 metres on the equinox.</p>" * 20
    + b"</article></body></html>"
)
HOSTILE = b"<html><body>" + b"<p>word <a href='/x'>link</a></p>" * 20_000
"""Seconds of trafilatura's CPU for 700 kB of links."""
LOOPBACK = AddressPolicy.allowing(["127.0.0.1"])


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


async def _until(condition: object, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"still waiting for: {what}"
        await asyncio.sleep(0.02)


async def test_a_page_is_read_in_a_child_process_not_in_the_server() -> None:
    title, text = await read_page(ARTICLE, "http://example.test/tides", "utf-8")
    assert title == "Tides"
    assert "4.2 metres" in text
    pids = reader_pids()
    assert pids
    assert os.getpid() not in pids


async def test_a_page_taking_longer_than_a_page_may_is_an_error_and_its_reader_killed() -> None:
    with pytest.raises(PageUnreadable, match=r"took longer than the 0\.3 s a page may take"):
        await read_page(HOSTILE, "http://example.test/links", "utf-8", seconds=0.3)
    # The next page gets a reader of its own, and is read.
    _title, text = await read_page(ARTICLE, "http://example.test/tides", "utf-8")
    assert "4.2 metres" in text


async def test_the_reader_of_a_page_whose_fetch_gave_up_is_killed() -> None:
    # On the server's threads, trafilatura read on for seconds after its fetch gave up.
    page_readers.close_idle_readers()
    async with served_page(HOSTILE, "text/html") as url:
        fetch = asyncio.create_task(WebFetcher(LOOPBACK, FetchLimits()).fetch(url))
        await _until(lambda: reader_pids(), "a child reading the page")
        reading = reader_pids()
        fetch.cancel()  # the run was interrupted
        with pytest.raises(asyncio.CancelledError):
            await fetch
    await _until(lambda: all(_gone(pid) for pid in reading), "the reader to be gone")


async def test_a_fetch_that_runs_out_of_time_while_its_page_is_read_says_so() -> None:
    async with served_page(HOSTILE, "text/html") as url:
        with pytest.raises(FetchFailed, match=r"did not answer within 0\.5 seconds"):
            await WebFetcher(LOOPBACK, FetchLimits(timeout_seconds=0.5)).fetch(url)


async def test_a_reader_that_died_is_replaced_for_the_next_page() -> None:
    await read_page(ARTICLE, "http://example.test/tides", "utf-8")
    for pid in reader_pids():
        os.kill(pid, signal.SIGKILL)  # the kernel's OOM killer, or an operator
    await _until(lambda: all(_gone(pid) or _zombie(pid) for pid in reader_pids()), "the kill")
    _title, text = await read_page(ARTICLE, "http://example.test/tides", "utf-8")
    assert "4.2 metres" in text


async def test_readers_see_none_of_the_servers_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-in-a-reader")
    page_readers.close_idle_readers()  # so the next page starts a reader under this environment
    await read_page(ARTICLE, "http://example.test/tides", "utf-8")
    for pid in reader_pids():
        environment = _environment(pid)
        assert b"sk-never-in-a-reader" not in environment
        assert b"OPENAI_API_KEY" not in environment


def _environment(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True
