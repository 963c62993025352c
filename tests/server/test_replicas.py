"""Several replicas on one PostgreSQL and one Redis, as real ``serve`` processes: a stop sent to
any replica reaches the one running the run, and a replica killed mid-run has its runs closed
by another within its lease, as crash recovery would at its restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_core.persistence import Store
from server.sessions.service import INTERRUPTED_RESULT
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command, wait_until_healthy
from tests.redis_server import redis_url_or_skip
from tests.server.served import pid_alive, postgres_database, sse_data, until

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

UPSTREAM = "replica-upstream"
PRIMARY = f"primary-{uuid.uuid4().hex[:8]}"
"""The primary provider's upstream model: new per test session (the simulator scripts by model)."""
BACKUP = "backup-upstream"
LEASE_SECONDS = 2
MAX_FILES = 2
"""Files one key may keep here (small: uploads at once across replicas reach it)."""
KEYS = 32
"""API keys of the deployment: each test has one of its own (:func:`key`), so what Redis keeps
per key (live runs, against the limit of one) and the files a key keeps start empty in every
test, though the replicas serve several suites (starting three costs seconds)."""
_NAMES = uuid.uuid4().hex[:8]


@dataclass(frozen=True)
class Key:
    owner: str
    auth: dict[str, str]


_KEYS = [
    Key(f"alice-{_NAMES}-{n}", {"authorization": f"Bearer sk-replicas-{uuid.uuid4().hex}"})
    for n in range(KEYS)
]


@dataclass
class Replica:
    name: str
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return pid_alive(self.process.pid) and self.process.poll() is None


def _config(simulator: SimulatorServer, keys: list[tuple[str, str]]) -> str:
    """The deployment's YAML, with these API keys (principal, key)."""
    api_keys = ", ".join(f"{{principal: {owner}, key: {key}}}" for owner, key in keys)
    return f"""
server:
  api_keys: [{api_keys}]
  max_concurrent_runs_per_key: 1
  files: {{max_files: {MAX_FILES}}}
providers:
  - name: sim
    model: {UPSTREAM}
    base_url: "{simulator.base_url}/v1"
    api_mode: chat_completions
  - name: primary
    model: {PRIMARY}
    base_url: "{simulator.base_url}/v1"
    api_mode: chat_completions
  - name: backup
    model: {BACKUP}
    base_url: "{simulator.base_url}/v1"
    api_mode: chat_completions
profiles:
  - {{id: hermes-agent, providers: [sim]}}
  - id: hermes-fallback
    providers: [primary, backup]
    retry: {{max_attempts: 1}}
  - id: hermes-asks
    providers: [sim]
    tools: [files]
    approvals: {{files: always}}
"""


@dataclass
class Deployment:
    """Replicas A, B and C on one PostgreSQL, one Redis and one shared volume, for the replica
    suites. A test may kill a replica: the next test's :func:`deployed` starts one in its place."""

    directory: Path
    postgres: str
    config: Path
    env: dict[str, str]
    processes: ExitStack
    replicas: dict[str, Replica]
    started: int = 0
    data: dict[str, Path] = field(default_factory=dict)
    """Each replica's data directory (its instance), by name."""
    keys_used: int = 0
    """How many of the keys the module's tests were given (:func:`key`)."""

    def start(self, name: str, *, again: bool = False) -> Replica:
        """Replica ``name`` starting, with a data directory (so an instance) of its own; or,
        ``again``, with the one it had (back under its name, as after a restart)."""
        self.started += 1
        if not again:
            self.data[name] = self.directory / f"data-{self.started}"
        port, log = free_port(), self.directory / f"replica-{name}-{self.started}.log"
        env = {**self.env, "HERMES_DATA_DIR": str(self.data[name])}
        serve = ("serve", "--config", str(self.config))
        process = self.processes.enter_context(
            hermes_command(*serve, port=port, env=env, log=log, wait=False)
        )
        self.replicas[name] = Replica(name, f"http://127.0.0.1:{port}", process, log)
        return self.replicas[name]


@contextmanager
def _deploying(simulator: SimulatorServer, directory: Path) -> Iterator[Deployment]:
    redis = redis_url_or_skip()
    config = directory / "hermes.yaml"
    keys = [(key.owner, key.auth["authorization"].removeprefix("Bearer ")) for key in _KEYS]
    config.write_text(_config(simulator, keys))
    with postgres_database() as postgres, ExitStack() as processes:
        common = {
            "DATABASE_URL": postgres,
            "REDIS_URL": redis,
            "HERMES_LEASE_SECONDS": str(LEASE_SECONDS),
            "HERMES_SESSION_BUSY": "refuse",  # a second turn at once is refused (deterministic)
            "HERMES_SHARED_DIR": str(directory / "shared"),  # uploads and workspaces, as deployed
        }
        upgrade = [sys.executable, "-m", "server.cli", "db", "upgrade", "--config", str(config)]
        subprocess.run(upgrade, env={**os.environ, **common}, check=True, capture_output=True)
        yield Deployment(directory, postgres, config, common, processes, {})


_shared: list[tuple[Deployment, ExitStack]] = []
"""The deployment the replica suites share while one is up (one module's fixture each, so the
module scope alone would start one per suite)."""


@pytest.fixture(scope="module")
def deployment(
    request: pytest.FixtureRequest,
    _simulator_server: SimulatorServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    """The replica suites' deployment: started by the first module that asks for it, stopped
    after the last one (no test after it asks for it), so those running one after another
    start three replicas once, not once per module. Their tests keep apart by keys (:func:`key`)
    and by sessions of their own."""
    if not _shared:
        stack = ExitStack()
        directory = tmp_path_factory.mktemp("replicas")
        _shared.append((stack.enter_context(_deploying(_simulator_server, directory)), stack))
        request.session.addfinalizer(_stop_shared)  # whatever happens before the last user
    yield _shared[0][0]
    if not _needed_after(request):
        _stop_shared()


def _stop_shared() -> None:
    if _shared:
        _, stack = _shared.pop()
        stack.close()


def _needed_after(request: pytest.FixtureRequest) -> bool:
    """Whether a test after this module's asks for the deployment."""
    items = request.session.items
    here = [n for n, item in enumerate(items) if item.path == request.path]
    later = items[max(here, default=len(items)) + 1 :]
    return any("deployment" in getattr(item, "fixturenames", ()) for item in later)


@pytest.fixture
def deployed(deployment: Deployment, simulator: SimulatorServer) -> dict[str, Replica]:
    """The deployment's replicas A, B and C, all up: those a test before killed (or none yet)
    started anew, and each one answering (a test may have started one it did not wait for)."""
    for name in "ABC":
        if not _up(deployment, name):
            deployment.start(name)
    for replica in deployment.replicas.values():  # started together: waited for together
        wait_until_healthy(replica.base_url, process=replica.process, timeout=60)
    return deployment.replicas


def _up(deployment: Deployment, name: str) -> bool:
    replica = deployment.replicas.get(name)
    return replica is not None and replica.alive()


@pytest.fixture
def key(deployment: Deployment) -> Key:
    """An API key no other test of the deployment uses."""
    assert deployment.keys_used < KEYS, f"more tests than keys: raise KEYS ({KEYS})"
    deployment.keys_used += 1
    return _KEYS[deployment.keys_used - 1]


def slow_answer(simulator: SimulatorServer, *then: Step) -> None:
    """The first model call streams for a minute (0.3 s between 200 chunks)."""
    slow = Step(reply=Reply(text="word " * 200, chunk_count=200), fault=Fault(chunk_delay=0.3))
    simulator.state.script(UPSTREAM, Scenario(steps=[slow, *then]))


async def first_text(lines: AsyncIterator[str]) -> None:
    async for line in lines:
        if line.startswith("data: ") and '"content":"word' in line.replace(" ", ""):
            return


async def test_a_streamed_run_on_one_replica_is_stopped_through_another(
    deployed: dict[str, Replica], key: Key, simulator: SimulatorServer
) -> None:
    slow_answer(simulator)
    a, b, c = deployed["A"], deployed["B"], deployed["C"]
    body = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        started = time.monotonic()
        async with http.stream("POST", f"{a.base_url}/v1/chat/completions", json=body) as stream:
            run_id = stream.headers["x-hermes-run-id"]
            lines = stream.aiter_lines()
            await first_text(lines)
            stopped = await http.post(f"{b.base_url}/v1/runs/{run_id}/stop")
            assert stopped.status_code == 202, stopped.text
            assert stopped.json() == {"id": run_id, "object": "hermes.run", "status": "stopping"}
            rest = sse_data("\n".join([line async for line in lines]))
        assert rest[-1]["hermes"]["exit_reason"] == "interrupted"
        assert time.monotonic() - started < 30, "the stop did not reach the run"

        async def recorded() -> bool:
            run: dict[str, Any] = (await http.get(f"{c.base_url}/v1/runs/{run_id}")).json()
            return run.get("status") == "interrupted"

        assert await until(recorded, server=c)


async def test_a_response_is_cancelled_through_another_replica(
    deployed: dict[str, Replica], key: Key, simulator: SimulatorServer
) -> None:
    slow_answer(simulator)
    a, b = deployed["A"], deployed["B"]
    body = {"model": "hermes-agent", "input": "go", "background": True}
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        queued = (await http.post(f"{a.base_url}/v1/responses", json=body)).json()

        async def running() -> bool:
            return len(simulator.state.requests(scenario=UPSTREAM)) >= 1

        assert await until(running, server=a)
        cancelled = await http.post(f"{b.base_url}/v1/responses/{queued['id']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"


async def test_a_replica_killed_mid_run_has_its_run_closed_by_another_within_its_lease(
    deployed: dict[str, Replica], key: Key, simulator: SimulatorServer, deployment: Deployment
) -> None:
    delegate = ToolCallSpec(name="delegate_task", arguments={"goal": "dig deeper"})
    simulator.state.script(
        UPSTREAM,
        Scenario(
            steps=[
                Step(reply=Reply(tool_calls=[delegate])),
                # The sub-agent's model call hangs: the replica dies while the tool runs.
                Step(reply=Reply(text="never sent"), fault=Fault(first_byte_delay=60)),
                Step(reply=Reply(text="Carrying on.")),
            ]
        ),
    )
    a, b, c = deployed["A"], deployed["B"], deployed["C"]
    session = {"x-hermes-session-id": "long-talk"}
    body = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        async with http.stream(
            "POST", f"{a.base_url}/v1/chat/completions", json=body, headers=session
        ) as stream:
            run_id = stream.headers["x-hermes-run-id"]

            def tool_running() -> bool:
                return len(simulator.state.requests(scenario=UPSTREAM)) >= 2

            assert await until(tool_running, server=a)
            a.process.send_signal(signal.SIGKILL)
            a.process.wait(timeout=10)
            killed_at = time.monotonic()

        async def interrupted() -> bool:
            run: dict[str, Any] = (await http.get(f"{c.base_url}/v1/runs/{run_id}")).json()
            return run.get("status") == "interrupted"

        assert await until(interrupted, server=c, seconds=30)
        # The lease (2 s) runs out, then the next look (every 2 s) finds it: well within 10 s.
        assert time.monotonic() - killed_at < 4 * LEASE_SECONDS + 2
        # Its transcript is closed: the cut tool call has a result, as after a crash.
        store = await Store.open(deployment.postgres, migrate=False)
        try:
            [tip] = await store.sessions.tips(key.owner, "long-talk")
            saved = [m.message for m in await store.sessions.messages(tip.id)]
        finally:
            await store.close()
        assert [m["role"] for m in saved] == ["user", "assistant", "tool"]
        assert saved[2]["content"] == INTERRUPTED_RESULT
        # Its session lock went with it: the conversation goes on, on another replica.
        again = await http.post(
            f"{b.base_url}/v1/chat/completions",
            json={**body, "stream": False},
            headers=session,
        )
        assert again.status_code == 200, again.text
        assert again.json()["choices"][0]["message"]["content"] == "Carrying on."
    assert b.alive()  # the other replicas are still fine
    assert c.alive()


async def test_the_per_key_limit_holds_across_replicas(
    deployed: dict[str, Replica], key: Key, simulator: SimulatorServer
) -> None:
    """One run per key at a time (this deployment's limit): a second run is refused on
    another replica while the first runs, and admitted once it ended."""
    slow_answer(simulator, Step(reply=Reply(text="Second.")))
    a, b = deployed["A"], deployed["B"]
    body = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    plain = {**body, "stream": False}
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        async with http.stream("POST", f"{a.base_url}/v1/chat/completions", json=body) as stream:
            run_id = stream.headers["x-hermes-run-id"]
            lines = stream.aiter_lines()  # kept: a dropped iterator would close the stream
            await first_text(lines)
            refused = await http.post(f"{b.base_url}/v1/chat/completions", json=plain)
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "rate_limit_exceeded"
            assert (await http.post(f"{a.base_url}/v1/runs/{run_id}/stop")).status_code == 202

        async def admitted() -> bool:
            response = await http.post(f"{b.base_url}/v1/chat/completions", json=plain)
            return response.status_code == 200

        assert await until(admitted, server=b)


async def test_two_turns_of_one_session_on_two_replicas_are_not_run_at_once(
    deployed: dict[str, Replica], key: Key, simulator: SimulatorServer
) -> None:
    slow_answer(simulator, Step(reply=Reply(text="Next turn.")))
    a, b = deployed["A"], deployed["B"]
    session = {"x-hermes-session-id": "one-conversation"}
    body = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    plain = {**body, "stream": False}
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        async with http.stream(
            "POST", f"{a.base_url}/v1/chat/completions", json=body, headers=session
        ) as stream:
            run_id = stream.headers["x-hermes-run-id"]
            lines = stream.aiter_lines()
            await first_text(lines)
            second = await http.post(
                f"{b.base_url}/v1/chat/completions", json=plain, headers=session
            )
            assert second.status_code == 409, second.text
            assert second.json()["error"]["code"] == "session_busy"
            assert (await http.post(f"{b.base_url}/v1/runs/{run_id}/stop")).status_code == 202
            async for _ in lines:  # to the run's end
                pass
        answers: list[str] = []

        async def next_turn_served() -> bool:  # once the ended turn has let go of the session
            after = await http.post(
                f"{b.base_url}/v1/chat/completions", json=plain, headers=session
            )
            if after.status_code == 200:
                answers.append(after.json()["choices"][0]["message"]["content"])
            return after.status_code == 200

        assert await until(next_turn_served, server=b)
        assert answers == ["Next turn."]


async def test_a_provider_cooled_down_on_one_replica_is_skipped_by_the_others(
    deployed: dict[str, Replica], key: Key, simulator: SimulatorServer
) -> None:
    limited = Step(fault=Fault(status=429, retry_after=120), repeat=100)
    simulator.state.script(PRIMARY, Scenario(steps=[limited]))
    simulator.state.script(
        BACKUP, Scenario(steps=[Step(reply=Reply(text="From backup."), repeat=100)])
    )
    a, b = deployed["A"], deployed["B"]
    body = {"model": "hermes-fallback", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        first = await http.post(f"{a.base_url}/v1/chat/completions", json=body)
        assert first.json()["choices"][0]["message"]["content"] == "From backup."
        assert len(simulator.state.requests(scenario=PRIMARY)) == 1

        async def cooling_on_b() -> bool:
            ready: dict[str, Any] = (await http.get(f"{b.base_url}/ready")).json()
            return "primary" in ready["cooling_providers"]

        assert await until(cooling_on_b, server=b)
        second = await http.post(f"{b.base_url}/v1/chat/completions", json=body)
        assert second.json()["choices"][0]["message"]["content"] == "From backup."
        assert len(simulator.state.requests(scenario=PRIMARY)) == 1  # B never asked it


async def test_a_response_resumes_on_another_replica_live_and_after_its_replica_died(
    deployed: dict[str, Replica], key: Key, simulator: SimulatorServer
) -> None:
    slow_answer(simulator)
    a, c = deployed["A"], deployed["C"]
    body = {"model": "hermes-agent", "input": "go", "stream": True, "background": True}
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        seen: list[dict[str, Any]] = []
        async with http.stream("POST", f"{a.base_url}/v1/responses", json=body) as stream:
            run_id = stream.headers["x-hermes-run-id"]
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1]["type"] == "response.output_text.delta" and len(seen) > 5:
                        break  # a background response goes on without its first reader
        response_id = seen[0]["response"]["id"]
        last = seen[-1]["sequence_number"]

        resumed: list[dict[str, Any]] = []
        url = f"{c.base_url}/v1/responses/{response_id}?stream=true&starting_after={last}"
        async with http.stream("GET", url) as stream:
            assert stream.status_code == 200
            async for line in stream.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                resumed.append(json.loads(line[6:]))
                if len(resumed) == 3:  # live on C while A still runs it: now A dies
                    a.process.send_signal(signal.SIGKILL)
                    a.process.wait(timeout=10)
        numbers = [event["sequence_number"] for event in resumed]
        assert numbers == list(range(last + 1, last + 1 + len(numbers)))  # gap-free
        assert resumed[0]["type"] == "response.output_text.delta"
        # Closed by another replica; a failure of the server, not the client's cancellation:
        # the replayed ending, the stored response and the run say the same (docs/deployment.md).
        assert resumed[-1]["type"] == "response.failed"
        assert resumed[-1]["response"]["status"] == "failed"
        assert resumed[-1]["response"]["error"]["code"] == "server_error"

        async def stored_failed() -> bool:
            stored = (await http.get(f"{c.base_url}/v1/responses/{response_id}")).json()
            return bool(stored["status"] == "failed")

        assert await until(stored_failed, server=c)
        run = (await http.get(f"{c.base_url}/v1/runs/{run_id}")).json()
        assert run["status"] == "interrupted"

        # The native log, from any replica, after the run ended.
        native = await http.get(f"{c.base_url}/v1/runs/{run_id}/events?after=2")
        kinds = [line[7:] for line in native.text.splitlines() if line.startswith("event: ")]
        assert kinds[-1] == "run_finished"
        ids = [int(line[4:]) for line in native.text.splitlines() if line.startswith("id: ")]
        assert ids[0] == 3
        assert ids == list(range(3, 3 + len(ids)))


async def test_a_file_uploaded_through_one_replica_is_read_through_the_others(
    deployed: dict[str, Replica],
    key: Key,
) -> None:
    data = os.urandom(64 * 1024)
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        uploaded = await http.post(
            f"{deployed['A'].base_url}/v1/files",
            files={"file": ("table.bin", data, "application/octet-stream")},
            data={"purpose": "user_data"},
        )
        assert uploaded.status_code == 200, uploaded.text
        file_id = uploaded.json()["id"]
        for name in "BC":
            content = await http.get(f"{deployed[name].base_url}/v1/files/{file_id}/content")
            assert content.status_code == 200, (name, content.text)
            assert content.content == data


async def test_a_replica_that_does_not_see_the_shared_volume_refuses_to_start(
    deployed: dict[str, Replica], deployment: Deployment, tmp_path: Path
) -> None:
    env = {
        "DATABASE_URL": deployment.postgres,
        "REDIS_URL": redis_url_or_skip(),
        "HERMES_DATA_DIR": str(tmp_path / "data-D"),
        "HERMES_SHARED_DIR": str(tmp_path / "data-D" / "its-own-disk"),
    }
    log = tmp_path / "replica-D.log"
    serve = ("serve", "--config", str(deployment.config))
    with hermes_command(*serve, port=free_port(), env=env, log=log, wait=False) as process:
        assert process.wait(timeout=60) == 2  # a configuration it cannot serve
    said = log.read_text()
    assert "hermes-server: server.shared_dir" in said
    assert "not the volume the other replicas use" in said
    assert "Traceback" not in said
    assert all(replica.alive() for replica in deployed.values())


async def test_a_replica_whose_shared_volume_goes_away_is_not_ready(
    deployed: dict[str, Replica], deployment: Deployment
) -> None:
    mark = deployment.directory / "shared" / ".hermes-volume"
    kept = mark.read_text()
    ready = f"{deployed['A'].base_url}/ready"
    async with httpx.AsyncClient(verify=TLS_UNUSED, timeout=60) as http:
        assert (await http.get(ready)).status_code == 200
        mark.unlink()  # as an unmounted network volume looks from here
        try:
            answer = await http.get(ready)
        finally:
            mark.write_text(kept)  # back for the module's other tests, whatever happened
        assert answer.status_code == 503
        assert "cannot be read" in answer.json()["error"]["message"]
        assert (await http.get(ready)).status_code == 200


async def test_a_skill_uploaded_through_one_replica_is_offered_by_the_others(
    deployed: dict[str, Replica], key: Key, simulator: SimulatorServer
) -> None:
    name = f"replica-skill-{uuid.uuid4().hex[:8]}"
    skill_md = f"---\nname: {name}\ndescription: Shared by every replica.\n---\n\nSay hi.\n"
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        uploaded = await http.post(
            f"{deployed['A'].base_url}/v1/skills",
            files=[("files", (f"{name}/SKILL.md", skill_md.encode()))],
        )
        assert uploaded.status_code == 200, uploaded.text

        async def offered_on_b() -> bool:
            answer = await http.post(
                f"{deployed['B'].base_url}/v1/chat/completions",
                json={"model": "hermes-agent", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert answer.status_code == 200, answer.text
            sent = [r for r in simulator.state.requests() if r.body.get("model") == UPSTREAM]
            system = sent[-1].body["messages"][0]
            return f"- {name}: Shared by every replica." in str(system["content"])

        # A replica may keep a key's skill list for a moment (see server/skills/library.py).
        assert await until(offered_on_b, server=deployed["B"], seconds=30)
        content = await http.get(
            f"{deployed['C'].base_url}/v1/skills/{uploaded.json()['id']}/content"
        )
        assert content.status_code == 200
        assert content.headers["content-type"] == "application/zip"
