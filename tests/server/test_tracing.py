"""Traces end to end: a real ``hermes-server serve`` process exporting over OTLP/HTTP to a real
receiver (the collector protocol decoded), a run with a tool call and a sub-agent continuing
the client's ``traceparent``; and no tracing at all when no ``OTEL_*`` variable asks."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry import trace

from server.simulator import Scenario, SimulatorServer
from server.telemetry.tracing import install_tracing
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command
from tests.server.conftest import make_services
from tests.server.otlp_receiver import STATUS_ERROR, OtlpReceiver, ReceivedSpan
from tests.server.served import answer, call, pid_alive, until

KEY = "sk-tracing-0123456789abcdef"
UPSTREAM = "traced-upstream"
MODEL = "hermes-agent"
PROMPT = "Count the sheep, privately."
OTLP_CLIENT_KIND = 3
"""OTLP's ``SPAN_KIND_CLIENT``: a model call is a call to the upstream."""


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


class Served:
    def __init__(self, pid: int, log: Path) -> None:
        self.pid, self.log = pid, log

    def alive(self) -> bool:
        return pid_alive(self.pid)


def _config(directory: Path, simulator: SimulatorServer) -> Path:
    config = directory / "hermes.yaml"
    config.write_text(
        f"""
server:
  data_dir: {directory / "data"}
  api_keys: [{{principal: alice, key: {KEY}}}]
providers:
  - {{name: sim, model: {UPSTREAM}, base_url: "{simulator.base_url}/v1",
      api_mode: chat_completions}}
profiles:
  - {{id: {MODEL}, providers: [sim]}}
"""
    )
    return config


def _otel_env(receiver: OtlpReceiver, **extra: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_SERVICE_NAME": "hermes-under-test",
        **extra,
    }


async def _traced_run(
    simulator: SimulatorServer, tmp_path: Path, receiver: OtlpReceiver, env: dict[str, str]
) -> tuple[str, str, list[ReceivedSpan]]:
    """One chat completion through a served process; its trace id, the client's span id and
    the spans of the trace once its run's span arrived."""
    trace_id, parent_span = secrets.token_hex(16), secrets.token_hex(8)
    port, log = free_port(), tmp_path / "server.log"
    with hermes_command(
        "serve", "--config", str(_config(tmp_path, simulator)), port=port, env=env, log=log
    ) as process:
        async with httpx.AsyncClient(
            verify=TLS_UNUSED, base_url=f"http://127.0.0.1:{port}", timeout=60
        ) as http:
            answered = await http.post(
                "/v1/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": PROMPT}]},
                headers={
                    "authorization": f"Bearer {KEY}",
                    "traceparent": f"00-{trace_id}-{parent_span}-01",
                    "x-hermes-session-id": "flock",
                },
            )
            assert answered.status_code == 200, answered.text

        def run_span_arrived() -> bool:
            return any(
                s.name == f"invoke_agent {MODEL}" and s.parent_span_id == parent_span
                for s in receiver.spans(trace_id)
            )

        assert await until(run_span_arrived, server=Served(process.pid, log)), log.read_text()
    return trace_id, parent_span, receiver.spans(trace_id)


@pytest.mark.slow
async def test_a_run_is_one_trace_of_genai_spans_under_the_clients_traceparent(
    simulator: SimulatorServer, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    simulator.state.script(
        UPSTREAM,
        Scenario(
            steps=[
                call("delegate_task", goal="count the sheep"),
                call("todo", todos=[{"id": "1", "content": "count", "status": "in_progress"}]),
                answer("Forty-two sheep."),
                answer("There are forty-two sheep."),
            ]
        ),
    )
    trace_id, parent_span, spans = await _traced_run(
        simulator, tmp_path, receiver, _otel_env(receiver)
    )

    assert {s.trace_id for s in spans} == {trace_id}
    assert receiver.content_types == {"application/x-protobuf"}
    by_id = {s.span_id: s for s in spans}
    agents = [s for s in spans if s.name == f"invoke_agent {MODEL}"]
    (root,) = [s for s in agents if s.parent_span_id == parent_span]
    (delegate,) = [s for s in spans if s.name == "execute_tool delegate_task"]
    (child,) = [s for s in agents if s is not root]
    (todo,) = [s for s in spans if s.name == "execute_tool todo"]
    chats = [s for s in spans if s.name == f"chat {UPSTREAM}"]
    assert len(spans) == 2 + 2 + len(chats)
    assert len(chats) == 4
    # Parentage: the run under the client's span, its tool under it, the sub-agent under the
    # tool that spawned it, and each model call and tool call under the run that made it.
    assert delegate.parent_span_id == root.span_id
    assert child.parent_span_id == delegate.span_id
    assert todo.parent_span_id == child.span_id
    assert sorted(by_id[c.parent_span_id].span_id for c in chats) == sorted(
        [root.span_id, root.span_id, child.span_id, child.span_id]
    )
    for span in spans:
        assert root.start_ns <= span.start_ns <= span.end_ns <= root.end_ns
        assert span.status_code != STATUS_ERROR
        assert span.resource["service.name"] == "hermes-under-test"
        assert (
            span.attributes["gen_ai.conversation.id"] == root.attributes["gen_ai.conversation.id"]
        )
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == MODEL
    assert root.attributes["gen_ai.provider.name"] == "openai"
    assert root.attributes["gen_ai.request.model"] == UPSTREAM
    assert root.attributes["hermes.exit_reason"] == "completed"
    assert root.attributes["gen_ai.response.id"].startswith("chatcmpl-")
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == UPSTREAM
        assert chat.attributes["gen_ai.response.model"] == UPSTREAM
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert chat.kind == OTLP_CLIENT_KIND
    assert sorted(c.attributes["gen_ai.response.finish_reasons"][0] for c in chats) == [
        "stop",
        "stop",
        "tool_calls",
        "tool_calls",
    ]
    assert root.attributes["gen_ai.usage.input_tokens"] >= sum(
        c.attributes["gen_ai.usage.input_tokens"] for c in chats if c.parent_span_id == root.span_id
    )
    for tool, name in ((delegate, "delegate_task"), (todo, "todo")):
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["gen_ai.tool.name"] == name
        assert tool.attributes["gen_ai.tool.call.id"]
        assert tool.attributes["hermes.tool.outcome"] == "success"
    # No content unless asked for: neither the attributes nor the prompt anywhere.
    for span in spans:
        assert not {
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        } & set(span.attributes)
        assert PROMPT not in repr(span.attributes)


@pytest.mark.slow
async def test_message_content_is_exported_when_the_capture_variable_allows_it(
    simulator: SimulatorServer, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    simulator.state.script(UPSTREAM, Scenario(steps=[answer("Seven sheep.")]))
    env = _otel_env(receiver, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
    _, _, spans = await _traced_run(simulator, tmp_path, receiver, env)
    (chat,) = [s for s in spans if s.name == f"chat {UPSTREAM}"]
    assert PROMPT in chat.attributes["gen_ai.input.messages"]
    assert "Seven sheep." in chat.attributes["gen_ai.output.messages"]
    (root,) = [s for s in spans if s.name == f"invoke_agent {MODEL}"]
    assert PROMPT in root.attributes["gen_ai.input.messages"]
    assert "Seven sheep." in root.attributes["gen_ai.output.messages"]


def test_without_otel_variables_no_tracer_provider_is_installed(
    simulator: SimulatorServer,
) -> None:
    services = make_services(simulator)
    observers = list(services.runs.observers)
    assert install_tracing(services, environ={}) is None
    disabled = {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    assert install_tracing(services, environ=disabled) is None
    assert services.runs.observers == observers
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_serving_without_otel_variables_never_imports_the_sdk(tmp_path: Path) -> None:
    """The app of the default configuration, built in a fresh interpreter: the SDK and the
    exporter stay unimported (cold start), and no provider is set."""
    script = (
        "import sys\n"
        "from server.app import create_app\n"
        "from server.bootstrap import build_services, upstreams\n"
        "from server.config import load_config\n"
        "from opentelemetry import trace\n"
        f"config = load_config(None, {{'HERMES_DATA_DIR': {str(tmp_path)!r}}})\n"
        "with upstreams(config) as running:\n"
        "    create_app(build_services(running))\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk') "
        "or m.startswith('opentelemetry.exporter'))\n"
        "print(loaded, type(trace.get_tracer_provider()).__name__)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "ProxyTracerProvider"]
