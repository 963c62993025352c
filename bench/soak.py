"""A soak: minutes of mixed, hostile traffic, then a check that nothing was left behind.

Starts the upstream simulator and hermes-server (on SQLite, with a per-key limit low enough to
be hit) as separate processes, scripts the simulator with a random mix of answers and faults
(500s, 429s with Retry-After, slow streams, streams cut mid-way, in-stream errors), and runs
workers that stream and abandon streams, wait and give up, create background responses and
cancel them, stop runs through the API, and send bad requests (invalid JSON, NUL, lone
surrogates, unknown models, no key, huge headers, oversized bodies). Then it checks:

- every run it started is in a final state, with an honest exit reason;
- no request was answered with a 500 (a failed upstream is a 502, never a 500);
- every limit is released: no run is active, and a burst of as many runs as one key may have
  at once is served;
- the server's memory (RSS) is back near where it was after the warm-up.

    .venv/bin/python -m bench.soak [--seconds 180] [--concurrency 24] [--seed 7]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpx

from bench._serve import BENCH_MODEL
from bench.server_overhead import _free_port, _process

PER_KEY_LIMIT = 48
"""Runs one key may have at once: above the workers, so that abandoned runs still being
stopped make it bite now and then, not on every request."""
HELLO = [{"role": "user", "content": "Say something, slowly."}]
FINAL = {"completed", "incomplete", "failed", "interrupted"}


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _steps(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """The simulator's script: mostly answers, a good share of them faulty."""
    text = {"text": "word " * 30, "chunk_count": 15}
    kinds: list[tuple[float, dict[str, Any]]] = [
        (0.45, {"reply": text, "fault": {"chunk_delay": 0.02}}),
        (0.15, {"reply": text, "fault": {"chunk_delay": 0.2}}),  # slow: gets stopped/abandoned
        (0.10, {"fault": {"status": 500, "message": "upstream broke"}}),
        (0.08, {"fault": {"status": 429, "retry_after": 1}}),
        (0.08, {"reply": text, "fault": {"disconnect_after": 3}}),
        (0.07, {"reply": text, "fault": {"stream_error": "overloaded_error"}}),
        (0.07, {"reply": {"text": "Fine."}}),
    ]
    weights = [weight for weight, _ in kinds]
    return [rng.choices([step for _, step in kinds], weights)[0] for _ in range(count)]


class Soak:
    def __init__(self, server: str, rng: random.Random) -> None:
        self.server = server
        self.rng = rng
        self.statuses: collections.Counter[str] = collections.Counter()
        self.run_ids: set[str] = set()
        self.http: aiohttp.ClientSession

    def _count(self, action: str, status: int | str) -> None:
        self.statuses[f"{action} {status}"] += 1

    def _remember(self, response: aiohttp.ClientResponse) -> None:
        run_id = response.headers.get("x-hermes-run-id")
        if run_id:
            self.run_ids.add(run_id)

    async def chat_stream(self) -> None:
        body = {"model": "hermes-agent", "messages": HELLO, "stream": True}
        keep = self.rng.choice([1, 3, 8, 1000])  # chunks read before leaving (1000: to the end)
        async with self.http.post(f"{self.server}/v1/chat/completions", json=body) as response:
            self._remember(response)
            self._count("chat-stream", response.status)
            read = 0
            async for _ in response.content.iter_any():
                read += 1
                if read >= keep:
                    break  # leaves: the connection closes with the block

    async def chat_plain(self) -> None:
        body = {"model": "hermes-agent", "messages": HELLO}
        patience = self.rng.choice([0.2, 30.0])  # some give up and leave
        try:
            async with self.http.post(
                f"{self.server}/v1/chat/completions",
                json=body,
                timeout=aiohttp.ClientTimeout(total=patience),
            ) as response:
                self._remember(response)
                self._count("chat", response.status)
                await response.read()
        except TimeoutError:
            self._count("chat", "gave up")

    async def responses(self) -> None:
        stream = self.rng.random() < 0.5
        background = not stream and self.rng.random() < 0.4
        body = {"model": "hermes-agent", "input": "Say something.", "stream": stream,
                "background": background}  # fmt: skip
        async with self.http.post(f"{self.server}/v1/responses", json=body) as response:
            self._remember(response)
            self._count("responses", response.status)
            payload = await response.read()
        if background and response.status == 200 and self.rng.random() < 0.6:
            response_id = json.loads(payload)["id"]
            await asyncio.sleep(self.rng.random() * 0.5)
            async with self.http.post(f"{self.server}/v1/responses/{response_id}/cancel") as cancel:
                self._count("cancel", cancel.status)

    async def stop(self) -> None:
        body = {"model": "hermes-agent", "messages": HELLO, "stream": True}
        async with self.http.post(f"{self.server}/v1/chat/completions", json=body) as response:
            self._remember(response)
            run_id = response.headers.get("x-hermes-run-id")
            await response.content.readany()
            if run_id:
                async with self.http.post(f"{self.server}/v1/runs/{run_id}/stop") as stopped:
                    self._count("stop", stopped.status)
            await response.read()

    async def bad(self) -> None:
        url = f"{self.server}/v1/chat/completions"
        json_type = {"content-type": "application/json"}

        def chat(content: bytes, model: bytes = b"hermes-agent") -> bytes:
            return b'{"model":"%s","messages":[{"role":"user","content":"%s"}]}' % (model, content)

        kind, data, headers = self.rng.choice(
            [
                ("not-json", b"{not json", json_type),
                ("nul", chat(b"a\\u0000"), json_type),
                ("surrogate", chat(b"\\ud800"), json_type),
                ("unknown-model", chat(b"x", b"nope"), json_type),
                ("oversized", chat(b"x" * 5_000_000), json_type),
                ("huge-header", b"{}", {**json_type, "x-junk": "j" * 100_000}),
            ]
        )
        try:
            async with self.http.post(url, data=data, headers=headers) as response:
                await response.read()
                self._count(f"bad-{kind}", response.status)
        except aiohttp.ClientError as exc:  # the server may cut off a huge header at once
            self._count(f"bad-{kind}", type(exc).__name__)

    async def worker(self, until: float) -> None:
        actions: list[tuple[float, Callable[[], Awaitable[None]]]] = [
            (0.30, self.chat_stream),
            (0.20, self.chat_plain),
            (0.25, self.responses),
            (0.10, self.stop),
            (0.15, self.bad),
        ]
        weights = [weight for weight, _ in actions]
        while time.monotonic() < until:
            action = self.rng.choices([act for _, act in actions], weights)[0]
            try:
                await action()
            except aiohttp.ClientError as exc:
                self._count(action.__name__, type(exc).__name__)


async def _soak(server: str, seconds: float, concurrency: int, seed: int) -> Soak:
    soak = Soak(server, random.Random(seed))
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        soak.http = http
        until = time.monotonic() + seconds
        await asyncio.gather(*(soak.worker(until) for _ in range(concurrency)))
    return soak


def _active_runs(server: str) -> float:
    text = httpx.get(f"{server}/metrics").text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("hermes_runs_active")
    )


def _wait_settled(server: str, timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _active_runs(server) == 0:
            return True
        time.sleep(0.5)
    return False


async def _burst(server: str, count: int) -> list[int]:
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as http:

        async def one() -> int:
            async with http.post(f"{server}/v1/chat/completions", json=body) as response:
                await response.read()
                return response.status

        return list(await asyncio.gather(*(one() for _ in range(count))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--warm-up", type=int, default=1200, help="runs before the baseline")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    sim_port, server_port = _free_port(), _free_port()
    upstream = f"http://127.0.0.1:{sim_port}"
    server = f"http://127.0.0.1:{server_port}"
    simulate = ["-m", "server.cli", "--log-level", "warning", "simulate", "--port", str(sim_port)]
    serve = ["-m", "bench._serve", "--upstream", upstream, "--port", str(server_port),
             "--max-runs-per-key", str(PER_KEY_LIMIT)]  # fmt: skip
    with _process(simulate, upstream + "/health"), _process(serve, server + "/health") as hermes:
        plain = {"steps": [{"reply": {"text": "Fine."}, "repeat": 10_000}]}
        httpx.put(f"{upstream}/_sim/scenarios/{BENCH_MODEL}", json=plain).raise_for_status()
        # Warm up past the finished runs the server keeps (1,000), so the baseline is steady.
        done = 0
        while done < args.warm_up:
            statuses = asyncio.run(_burst(server, PER_KEY_LIMIT))
            done += statuses.count(200)
        rss_start = _rss_mb(hermes.pid)
        script = {"steps": _steps(rng, 10_000)}
        httpx.put(f"{upstream}/_sim/scenarios/{BENCH_MODEL}", json=script).raise_for_status()
        print(f"soak: {args.seconds:.0f} s, {args.concurrency} workers, seed {args.seed}; "
              f"server RSS after warm-up {rss_start:.0f} MB")  # fmt: skip
        started = time.monotonic()
        soak = asyncio.run(_soak(server, args.seconds, args.concurrency, args.seed))
        elapsed = time.monotonic() - started
        rss_peak = _rss_mb(hermes.pid)
        settled = _wait_settled(server)
        final: collections.Counter[str] = collections.Counter()
        for run_id in soak.run_ids:
            record = httpx.get(f"{server}/v1/runs/{run_id}").json()
            final[f"{record.get('status')}/{record.get('exit_reason')}"] += 1
        httpx.put(f"{upstream}/_sim/scenarios/{BENCH_MODEL}", json=plain).raise_for_status()
        burst = asyncio.run(_burst(server, PER_KEY_LIMIT))
        httpx.post(f"{upstream}/_sim/reset").raise_for_status()
        rss_end = _rss_mb(hermes.pid)
    requests = sum(soak.statuses.values())
    print(f"{requests} requests in {elapsed:.0f} s ({requests / elapsed:.0f}/s)")
    for key, count in sorted(soak.statuses.items()):
        print(f"  {key:32s} {count}")
    print(f"runs started: {len(soak.run_ids)}, by final state:")
    for key, count in sorted(final.items()):
        print(f"  {key:32s} {count}")
    unfinished = sum(n for key, n in final.items() if key.split("/")[0] not in FINAL)
    server_errors = sum(n for key, n in soak.statuses.items() if key.endswith(" 500"))
    print(f"settled (no run active): {settled}; a burst of {PER_KEY_LIMIT} after: "
          f"{burst.count(200)} served")  # fmt: skip
    print(f"server RSS: {rss_start:.0f} MB after warm-up, {rss_peak:.0f} MB at the end of the "
          f"soak, {rss_end:.0f} MB after it settled ({rss_end - rss_start:+.0f} MB)")  # fmt: skip
    ok = (
        settled
        and unfinished == 0
        and server_errors == 0
        and burst.count(200) == PER_KEY_LIMIT
        and rss_end - rss_start < 100
    )
    print("soak passed" if ok else "soak FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
