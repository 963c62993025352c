"""HTML pages are read by child processes the server can kill: a hostile page costs the server
process nothing, and work on it ends when its fetch gives up. Real children, real pages."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_core.tools.tenant import work_for
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


async def test_a_reader_that_died_idle_is_no_longer_counted() -> None:
    page_readers.close_idle_readers()
    await read_page(ARTICLE, "http://example.test/tides", "utf-8")
    (pid,) = reader_pids()
    os.kill(pid, signal.SIGKILL)
    await _until(lambda: _zombie(pid), "the kill")
    assert reader_pids() == set()


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


def _status(pid: int) -> str:
    return Path(f"/proc/{pid}/status").read_text()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


async def test_calling_off_a_read_that_has_ended_leaves_its_reader_to_the_next_page() -> None:
    # The run's cancel can arrive just after the child answered: the reader is idle again by
    # then, or already reading another tenant's page, and must not be killed under it.
    page_readers.close_idle_readers()
    job = page_readers._Job(ARTICLE, "http://example.test/tides", "utf-8", 10.0)
    await asyncio.wrap_future(page_readers._threads.submit("", job.run))
    (pid,) = reader_pids()
    job.call_off()
    _title, text = await read_page(ARTICLE, "http://example.test/tides", "utf-8")
    assert "4.2 metres" in text
    assert reader_pids() == {pid}


async def test_a_charset_python_decodes_no_text_with_is_read_as_utf8() -> None:
    # codecs.lookup knows "base64", "rot13", "undefined"…: a page may declare any of them.
    for charset in ("base64", "rot-13", "undefined", "idna"):
        title, text = await read_page(ARTICLE, "http://example.test/tides", charset)
        assert (title, "4.2 metres" in text) == ("Tides", True), charset


def _readers_run(source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers from here on run ``source`` instead of the real reader (none is left idle)."""
    page_readers.close_idle_readers()
    script = tmp_path / "reader.py"
    script.write_text(source)
    monkeypatch.setattr(page_readers, "_SCRIPT", script)


async def test_a_reader_answering_garbage_is_an_error_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a child taken over by its page (or printing by mistake) could send back.
    for garbage in ('"not an answer"', '{"title": 1}', "not json at all"):
        source = (
            "import json, sys\n"
            "head = json.loads(sys.stdin.buffer.readline())\n"
            "sys.stdin.buffer.read(head['size'])\n"
            f"print({garbage!r}, flush=True)\n"
            "sys.stdin.buffer.read()\n"
        )
        _readers_run(source, tmp_path, monkeypatch)
        with pytest.raises(PageUnreadable, match="answered something other than a page"):
            await read_page(ARTICLE, "http://example.test/tides", "utf-8")
        assert reader_pids() == set()


async def test_a_reader_that_takes_no_page_is_given_up_within_the_time_a_page_may_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stopped, or starved behind busy cores: the page's bytes fill the pipe and wait there.
    _readers_run("import time\ntime.sleep(120)\n", tmp_path, monkeypatch)
    async with asyncio.timeout(60):
        with pytest.raises(PageUnreadable, match=r"took longer than the 0\.5 s a page may take"):
            await read_page(b"<p>" * 1024**2, "http://example.test/big", "utf-8", seconds=0.5)
    assert reader_pids() == set()


async def test_a_reader_flooding_its_answer_is_killed_at_the_answer_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _readers_run(
        "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", tmp_path, monkeypatch
    )
    monkeypatch.setattr(page_readers, "ANSWER_BYTES", 1024**2)
    with pytest.raises(PageUnreadable, match=r"an answer longer than 1 MB"):
        await read_page(ARTICLE, "http://example.test/tides", "utf-8", seconds=60)
    assert reader_pids() == set()


async def test_a_page_needing_more_memory_than_a_reader_has_is_an_error_and_the_reader_reads_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page_readers.close_idle_readers()
    monkeypatch.setattr(page_readers, "MEMORY_BYTES", 150 * 1024**2)
    big = b"<html><body>" + b"<div><p>word <a href='/x'>link</a> <b>x</b></p></div>" * 40_000
    with pytest.raises(PageUnreadable, match="needed more than 150 MB"):
        await read_page(big, "http://example.test/big", "utf-8", seconds=60)
    (pid,) = reader_pids()
    _title, text = await read_page(ARTICLE, "http://example.test/tides", "utf-8")
    assert "4.2 metres" in text
    assert reader_pids() == {pid}


async def test_a_reader_that_cannot_be_started_is_an_error_for_the_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page_readers.close_idle_readers()
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")  # as fork or exec failing
    with pytest.raises(PageUnreadable, match="no process could be started to read it"):
        await read_page(ARTICLE, "http://example.test/tides", "utf-8")


async def test_a_long_answer_is_read_whole() -> None:
    # Several MB of JSON on the pipe (every character escaped), many reads of it.
    paragraphs = "".join(f"<p>{n}: " + "Ébène à l’été — ✓ " * 50 + "</p>" for n in range(1200))
    page = f"<html><body><article>{paragraphs}</article></body></html>".encode()
    _title, text = await read_page(page, "http://example.test/long", "utf-8", seconds=60)
    assert len(text) > 1_000_000
    assert text.count("✓") == 50 * 1200


async def test_many_pages_at_once_some_called_off_leave_no_stray_reader() -> None:
    async def read(page: bytes) -> str:
        return (await read_page(page, "http://example.test/p", "utf-8"))[1]

    reads = [asyncio.create_task(read(HOSTILE if n % 3 == 0 else ARTICLE)) for n in range(20)]
    await _until(lambda: len(reader_pids()) == page_readers.READER_PROCESSES, "busy readers")
    for n, task in enumerate(reads):
        if n % 3 == 0:  # some reading, some still waiting for a reader
            task.cancel()
    results = await asyncio.gather(*reads, return_exceptions=True)
    for n, result in enumerate(results):
        if n % 3 == 0:
            assert isinstance(result, asyncio.CancelledError), n
        else:
            assert isinstance(result, str), (n, result)
            assert "4.2 metres" in result
    pids = reader_pids()
    assert 0 < len(pids) <= page_readers.READER_PROCESSES
    assert not any(_gone(pid) or _zombie(pid) for pid in pids)


def test_a_reader_ends_with_the_server_even_one_stuck_on_a_page() -> None:
    # SIGKILLed, the server closes no pipe in order: a reader mid-page (here stopped, so it
    # would never see its input close) must not run on as an orphan.
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import asyncio, sys\n"
            "from hermes_core.tools.web.page_readers import read_page, reader_pids\n"
            f"asyncio.run(read_page({ARTICLE!r}, 'http://example.test/tides', 'utf-8'))\n"
            "print(*reader_pids(), flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[3],
    )
    assert server.stdout is not None
    with server:
        (reader,) = (int(pid) for pid in server.stdout.readline().split())
        try:
            os.kill(reader, signal.SIGSTOP)
            server.kill()
            server.wait()
            deadline = time.monotonic() + 30
            while not (_gone(reader) or _zombie(reader)):
                assert time.monotonic() < deadline, "the reader outlived the server"
                time.sleep(0.05)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(reader, signal.SIGKILL)


async def test_a_confined_reader_opens_no_socket_and_runs_no_program() -> None:
    # What a page exploiting the HTML parser would do next, as the server's user.
    page_readers.close_idle_readers()
    await read_page(ARTICLE, "http://example.test/tides", "utf-8")  # read under the filter
    for pid in reader_pids():
        assert "Seccomp:\t2\n" in _status(pid)  # 2: a filter
    attempts = "(lambda: socket.socket(), lambda: subprocess.run(['/bin/true']))"
    outcomes, errors = await _tried_when_confined(attempts, imports="socket, subprocess")
    assert outcomes == ["refused", "refused"], errors


async def _tried_when_confined(attempts: str, *, imports: str = "os") -> tuple[list[str], str]:
    """What each of ``attempts`` (a tuple of callables, as Python source) met in a process
    confined as a reader confines itself: "allowed" or "refused"; and what it wrote to stderr."""
    script = Path(page_readers.__file__).with_name("page_reader_process.py")
    probe = (
        f"import runpy, {imports}\n"
        f"runpy.run_path({str(script)!r})['confine'](1024**3)\n"
        f"for attempt in {attempts}:\n"
        "    try:\n"
        "        attempt()\n"
        "        print('allowed')\n"
        "    except PermissionError:\n"
        "        print('refused')\n"
    )
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-I", "-c", probe], capture_output=True, text=True
    )
    return done.stdout.split(), done.stderr


def _landlock() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.syscall(444, None, ctypes.c_size_t(0), 1)) >= 1


@pytest.mark.skipif(not _landlock(), reason="this kernel has no Landlock")
async def test_a_confined_reader_opens_no_file(tmp_path: Path) -> None:
    # A page exploiting the parser would next read what the server's user may: the data
    # directory, the configuration, the server's /proc entries.
    secret = tmp_path / "hermes.db"
    secret.write_text("every tenant's conversations")
    environ = "'/proc/%d/environ' % os.getppid()"
    attempts = f"(lambda: open({str(secret)!r}, 'rb').read(), lambda: open({environ}, 'rb').read())"
    outcomes, errors = await _tried_when_confined(attempts)
    assert outcomes == ["refused", "refused"], errors


async def test_a_page_in_a_charset_other_than_utf8_is_read_by_a_confined_reader() -> None:
    # The child opens no file once confined, and Python loads a codec on its first use.
    page = "<html><head><title>潮</title></head><body><article><p>{}</p></article></body></html>"
    body = page.format("春の大潮は4.2メートルに達した。" * 20).encode("shift_jis")
    page_readers.close_idle_readers()
    title, text = await read_page(body, "http://example.test/tides", "shift_jis")
    assert title == "潮"
    assert "4.2メートル" in text


async def test_one_tenants_queue_of_hostile_pages_waits_behind_anothers_page() -> None:
    # Two readers for the whole server, once taken in order of coming: a tenant's queue of
    # hostile pages (each read until its limit) stood in front of every other tenant's page.
    async def read_as(tenant: str, body: bytes, seconds: float) -> str:
        work_for(tenant)
        try:
            return (await read_page(body, "http://example.test/", "utf-8", seconds=seconds))[1]
        except PageUnreadable:
            return "unreadable"

    attack = [asyncio.create_task(read_as("mallory", HOSTILE, 1.5)) for _ in range(6)]
    await _until(lambda: page_readers._threads.waiting().get("mallory") == 4, "both readers busy")
    article = await read_as("alice", ARTICLE, 10.0)
    assert "4.2 metres" in article
    assert page_readers._threads.waiting().get("mallory", 0) >= 2  # read before mallory's queue
    for task in attack:
        task.cancel()
    await asyncio.gather(*attack, return_exceptions=True)
