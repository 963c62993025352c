"""The two processes the browser drives: ``hermes-server serve`` in front of the simulator, and
Open WebUI in front of it with two connections (Chat Completions and Responses)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from server.files.workspaces import conversation_workspace
from tests.e2e.openwebui.environment import openwebui_program
from tests.processes import free_port, wait_until_healthy
from tests.server.served import pid_alive

UPSTREAM = "openwebui-e2e"
"""The upstream model the server's provider calls: what tests script the simulator under."""
KEY = "sk-openwebui-e2e-0123456789"
"""The API key Open WebUI's connections send."""
PRINCIPAL = "webui"
MODEL = "hermes-agent"
"""The profile's id: the model of the Chat Completions connection, as Open WebUI lists it."""
PLANNER_MODEL = "hermes-planner"
"""A profile that writes a plan before a task's first action (``planner: true``)."""
LIMITED_MODEL = "hermes-limited"
"""A profile with a budget of two model calls, falling back to ``FALLBACK_UPSTREAM`` when
``UPSTREAM`` fails (one attempt each, no wait)."""
FALLBACK_UPSTREAM = "openwebui-e2e-fallback"
RESPONSES_PREFIX = "responses"
RESPONSES_MODEL = f"{RESPONSES_PREFIX}.{MODEL}"
"""The same profile through the Responses connection: Open WebUI prefixes its model ids with
the connection's ``prefix_id`` and a dot."""

HERMES_CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {key}, principal: {principal}, trusted_front_end: true}}
  approval_timeout_seconds: 120
providers:
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
  - name: sim-fallback
    model: {fallback}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
    tools: [files, shell, code]
    approvals: {{shell: dangerous, code: dangerous}}
    sandbox: {{timeout_seconds: 60, max_processes: 64, cpu_seconds: 30, sandbox_memory_mb: 1024}}
  - id: {planner_model}
    providers: [sim]
    tools: [shell]
    planner: true
    sandbox: {{timeout_seconds: 60, max_processes: 64, cpu_seconds: 30, sandbox_memory_mb: 1024}}
  - id: {limited_model}
    providers: [sim, sim-fallback]
    tools: [shell]
    max_iterations: 2
    retry: {{max_attempts: 1, base_delay: 0}}
    sandbox: {{timeout_seconds: 60, max_processes: 64, cpu_seconds: 30, sandbox_memory_mb: 1024}}
"""


ACCESS_LOG = "uvicorn.protocols.http"
"""Open WebUI logs every request the page makes; a failure message leaves those out."""


def tail(path: Path, lines: int = 40) -> str:
    """The end of a log, for a failure message (without Open WebUI's access log)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} unreadable)"
    kept = [line for line in text.splitlines() if ACCESS_LOG not in line]
    return "\n".join(kept[-lines:])


@dataclass(frozen=True, slots=True)
class Process:
    """A process under test: where it answers, its pid and its log."""

    name: str
    base_url: str
    pid: int
    log: Path

    def alive(self) -> bool:
        return pid_alive(self.pid) and not _zombie(self.pid)

    def died(self) -> str | None:
        """A failure message with the log's tail if the process is gone, else None."""
        if self.alive():
            return None
        return f"{self.name} died; the end of {self.log}:\n{tail(self.log)}"


@dataclass(frozen=True, slots=True)
class Hermes(Process):
    data_dir: Path

    def workspace(self, conversation: str) -> Path:
        """The workspace of an Open WebUI chat: its chat id names the session, and its user
        (the key is a trusted front end: docs/end-users.md) the owner behind the key. Open
        WebUI has one user here, whose id it makes up: the chat's directory under any owner."""
        root = self.data_dir / "workspaces"
        keyed = conversation_workspace(root, PRINCIPAL, conversation)
        found = sorted(root.glob(f"*/{keyed.name}"))
        return found[0] if len(found) == 1 else keyed


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def hermes_config(data: Path, simulator_url: str) -> str:
    return HERMES_CONFIG.format(
        data=data,
        key=KEY,
        principal=PRINCIPAL,
        upstream=UPSTREAM,
        simulator=simulator_url,
        model=MODEL,
        planner_model=PLANNER_MODEL,
        limited_model=LIMITED_MODEL,
        fallback=FALLBACK_UPSTREAM,
    )


def openwebui_environment(data: Path, hermes_url: str) -> dict[str, str]:
    """Open WebUI offline, without login, with both connections to ``hermes_url``, and the
    settings docs/openwebui.md recommends."""
    base = f"{hermes_url}/v1"
    return {
        "DATA_DIR": str(data),
        "WEBUI_AUTH": "False",
        "WEBUI_SECRET_KEY": "openwebui-e2e-secret",
        "OFFLINE_MODE": "true",
        "HF_HUB_OFFLINE": "1",
        "ENABLE_OLLAMA_API": "false",
        "ENABLE_OPENAI_API": "true",
        "OPENAI_API_BASE_URLS": f"{base};{base}",
        "OPENAI_API_KEYS": f"{KEY};{KEY}",
        "OPENAI_API_CONFIGS": json.dumps(
            {"1": {"api_type": "responses", "prefix_id": RESPONSES_PREFIX}}
        ),
        "DEFAULT_MODELS": MODEL,
        # Embeddings (of attached files) through the OpenAI API, not a local model; and at
        # this server, not the default api.openai.com: nothing may leave the machine (the
        # server has no embeddings endpoint, so Open WebUI's own retrieval finds nothing).
        "RAG_EMBEDDING_ENGINE": "openai",
        "RAG_OPENAI_API_BASE_URL": base,
        "RAG_OPENAI_API_KEY": KEY,
        "ENABLE_PERSISTENT_CONFIG": "False",
        "DEFAULT_MODEL_METADATA": json.dumps(
            {"capabilities": {"builtin_tools": False, "usage": True}}
        ),
        "ENABLE_TITLE_GENERATION": "False",
        "ENABLE_FOLLOW_UP_GENERATION": "False",
        "ENABLE_TAGS_GENERATION": "False",
        "ENABLE_AUTOCOMPLETE_GENERATION": "False",
        "ENABLE_FORWARD_USER_INFO_HEADERS": "true",
        "ANONYMIZED_TELEMETRY": "false",
        "SCARF_NO_ANALYTICS": "true",
        "DO_NOT_TRACK": "true",
    }


@contextmanager
def openwebui(
    port: int, data: Path, hermes_url: str, extra_env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``open-webui serve`` on 127.0.0.1:``port`` until the block ends; output in
    ``data/openwebui.log``. Returns at once: the caller waits for ``/health``."""
    data.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **openwebui_environment(data, hermes_url), **(extra_env or {})}
    # Its own Python, not ours: Open WebUI lives in a virtual environment of its own.
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    with (data / "openwebui.log").open("ab") as log:
        process = subprocess.Popen(
            [str(openwebui_program()), "serve", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=data,
            env=env,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


OPENWEBUI_START_SECONDS = 240
"""Open WebUI takes ~18 s to start on an idle machine (database migrations, heavy imports)."""


@contextmanager
def running_openwebui(
    data: Path, hermes_url: str, extra_env: Mapping[str, str] | None = None
) -> Iterator[Process]:
    """Open WebUI in front of ``hermes_url``, answering ``/health``, until the block ends (a
    start that fails says why, with the end of its log)."""
    port = free_port()
    with openwebui(port, data, hermes_url, extra_env) as process:
        served = Process(
            "Open WebUI", f"http://127.0.0.1:{port}", process.pid, data / "openwebui.log"
        )
        try:
            wait_until_healthy(served.base_url, timeout=OPENWEBUI_START_SECONDS, process=process)
        except RuntimeError as error:
            raise RuntimeError(f"{error}; the end of {served.log}:\n{tail(served.log)}") from None
        yield served
