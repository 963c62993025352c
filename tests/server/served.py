"""What every suite driving a real ``hermes-server serve`` process needs: the process itself
on a YAML configuration, scripted model steps, what the model was shown, SSE frames, API
clients, and a wait on observable state that fails at once if the server process died."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import asyncpg  # type: ignore[import-untyped]
import httpx
from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from sqlalchemy.engine import make_url

from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.databases import drop_database, server_url_or_skip
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command


class ServedProcess(Protocol):
    """A server process under test: where its log is, and whether it still runs."""

    @property
    def log(self) -> Path: ...

    def alive(self) -> bool: ...


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def simulated_provider(simulator: SimulatorServer, upstream: str, name: str = "sim") -> str:
    """The YAML of a provider ``name`` sending model ``upstream`` to the simulator (an item of
    ``providers:``, indented as one)."""
    return (
        f"  - name: {name}\n"
        f"    model: {upstream}\n"
        "    api_mode: chat_completions\n"
        f"    base_url: {simulator.base_url}/v1\n"
        "    api_key: upstream-key\n"
    )


@dataclass(frozen=True, slots=True)
class Served:
    """A ``serve`` process under test: where it answers, its data directory and its log."""

    base_url: str
    data_dir: Path
    pid: int
    log: Path

    def alive(self) -> bool:
        return pid_alive(self.pid)


@contextmanager
def serving(data: Path, config: str) -> Iterator[Served]:
    """``hermes-server serve`` on ``config`` (YAML, written to ``data/hermes.yaml``) until the
    block ends, keeping its state in ``data`` (never the checkout's ``data/``); its log in
    ``data/server.log``."""
    path = data / "hermes.yaml"
    path.write_text(config)
    port, log = free_port(), data / "server.log"
    env = {"HERMES_DATA_DIR": str(data)}
    with hermes_command("serve", "--config", str(path), port=port, env=env, log=log) as process:
        yield Served(f"http://127.0.0.1:{port}", data, process.pid, log)


def script(simulator: SimulatorServer, upstream: str, *steps: Step) -> None:
    """The model ``upstream`` answers with ``steps``, in order."""
    simulator.state.script(upstream, Scenario(steps=list(steps)))


def last_messages(simulator: SimulatorServer, upstream: str) -> list[dict[str, Any]]:
    """The messages of the last model call of ``upstream`` the simulator received."""
    messages: list[dict[str, Any]] = simulator.state.requests(scenario=upstream)[-1].body[
        "messages"
    ]
    return messages


def system_prompt(simulator: SimulatorServer, upstream: str) -> str:
    """The system message of the last model call of ``upstream``."""
    first = last_messages(simulator, upstream)[0]
    assert first["role"] == "system"
    return str(first["content"])


def calls(*specs: tuple[str, dict[str, Any]]) -> Step:
    """A model reply calling these tools."""
    return Step(reply=Reply(tool_calls=[ToolCallSpec(name=n, arguments=a) for n, a in specs]))


def call(name: str, **arguments: Any) -> Step:
    return calls((name, arguments))


def answer(text: str) -> Step:
    return Step(reply=Reply(text=text))


def tool_results_of(simulator: SimulatorServer, upstream: str) -> list[str]:
    """The tool results the model ``upstream`` was shown in its last call."""
    requests = simulator.state.requests(scenario=upstream)
    messages = requests[-1].body.get("messages", []) if requests else []
    return [str(m.get("content")) for m in messages if m.get("role") == "tool"]


def sse_data(text: str) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE body (``[DONE]`` and comments left out)."""
    return [
        json.loads(line[6:])
        for line in text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


@asynccontextmanager
async def http_client(base_url: str, key: str) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=base_url, headers=headers, timeout=60
    ) as client:
        yield client


@asynccontextmanager
async def sdk_client(base_url: str, key: str) -> AsyncIterator[AsyncOpenAI]:
    """The official SDK pointed at the server, strict (no retries)."""
    async with AsyncOpenAI(
        http_client=DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=f"{base_url}/v1",
        api_key=key,
        max_retries=0,
        timeout=60,
    ) as client:
        yield client


async def until(
    predicate: Callable[[], Awaitable[bool] | bool],
    *,
    server: ServedProcess,
    seconds: float = 30,
) -> bool:
    """Poll ``predicate`` until it holds (True) or time runs out (False); fail at once if the
    server process died meanwhile."""
    deadline = time.monotonic() + seconds
    while True:
        held = predicate()
        if inspect.isawaitable(held):
            held = await held
        if held or time.monotonic() >= deadline:
            return bool(held)
        if not server.alive():
            raise AssertionError(f"the server process died; see {server.log}")
        await asyncio.sleep(0.05)


def _on_a_loop_of_its_own(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end on an event loop in another thread: the caller's thread may be
    between two tests' loops, and must not be left with one of its own."""
    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, work).result()


async def _create_database(admin_dsn: str, name: str) -> None:
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()


@contextmanager
def postgres_database() -> Iterator[str]:
    """The SQLAlchemy URL of a new, empty PostgreSQL database until the block ends (then
    dropped), for a fixture wider than one test (``tests.databases.fresh_database`` is async,
    and an async fixture is bound to one test's event loop): a module's replicas share it."""
    server = make_url(server_url_or_skip())
    name = f"t_{secrets.token_hex(6)}"
    admin_dsn = server.set(drivername="postgresql").render_as_string(hide_password=False)
    _on_a_loop_of_its_own(_create_database(admin_dsn, name))
    url = server.set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        _on_a_loop_of_its_own(drop_database(url))
