"""What reading hostile HTML pages costs the server's event loop: the work of other tenants'
requests, stood in for by ~0.5 ms of Python per loop turn, done alone and while pages of
nothing but links are read two at a time — by trafilatura on threads of the server process (as
``web_fetch`` did before session 18) and by the child processes of
``hermes_core/tools/web/page_readers.py`` (as it does now).

    .venv/bin/python -m bench.page_reading [--seconds 5] [--busy N]

``--busy N`` keeps N other processes spinning throughout (a busy machine: the cores are
shared with other work, as on CI's two).

Prints, for each, the loop turns done and their median / 99th-percentile / worst length.
Wall-clock figures: run it on an otherwise quiet machine, and compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from hermes_core.tools.web import page_readers

PAGE = b"<html><body>" + b"<p>word <a href='/x'>link</a></p>" * 20_000
URL = "http://example.test/links"


def _request_work() -> int:
    total = 0
    for number in range(20_000):
        total += number
    return total


async def _victim(seconds: float) -> tuple[int, float, float, float]:
    turns: list[float] = []
    last = time.monotonic()
    end = last + seconds
    while last < end:
        _request_work()
        await asyncio.sleep(0)
        now = time.monotonic()
        turns.append(now - last)
        last = now
    turns.sort()
    return len(turns), turns[len(turns) // 2], turns[int(len(turns) * 0.99)], turns[-1]


def _read_in_this_process(body: bytes) -> None:
    import trafilatura

    trafilatura.extract(body.decode(), url=URL, output_format="markdown", favor_recall=True)


async def _attacked(
    seconds: float, read: Callable[[], Awaitable[object]]
) -> tuple[int, float, float, float]:
    async def keep_reading() -> None:
        while True:
            with contextlib.suppress(page_readers.PageUnreadable):
                await read()

    readers = [asyncio.create_task(keep_reading()) for _ in range(2)]
    await asyncio.sleep(0.5)  # both reading
    try:
        return await _victim(seconds)
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)


async def main(seconds: float) -> None:
    threads = ThreadPoolExecutor(2)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(threads, _read_in_this_process, b"<p>warm</p>")
    await page_readers.read_page(b"<p>warm</p>", URL, "utf-8")
    rows = {
        "alone": await _victim(seconds),
        "pages read on threads of the server": await _attacked(
            seconds, lambda: loop.run_in_executor(threads, _read_in_this_process, PAGE)
        ),
        "pages read by child processes": await _attacked(
            seconds, lambda: page_readers.read_page(PAGE, URL, "utf-8", seconds=60)
        ),
    }
    threads.shutdown(wait=True, cancel_futures=True)
    print(f"{'the event loop, while':<40} {'turns':>7} {'p50 ms':>8} {'p99 ms':>8} {'worst ms':>9}")
    for name, (turns, median, p99, worst) in rows.items():
        print(f"{name:<40} {turns:>7} {median * 1e3:>8.2f} {p99 * 1e3:>8.2f} {worst * 1e3:>9.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--busy", type=int, default=0)
    arguments = parser.parse_args()
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(arguments.busy)
    ]
    try:
        asyncio.run(main(arguments.seconds))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
