"""``serve --log-format json``: a real server process whose every output line is a JSON object,
whose lines about a run carry its run, session, principal and trace ids, and whose log holds
no secret: not the client's key, not the upstream's (even when the upstream echoes it in an
error), not a refused key."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.simulator import Fault, Scenario, SimulatorServer, Step
from server.telemetry import json_logs
from server.telemetry.json_logs import JsonFormatter, Redactor, TextFormatter
from server.telemetry.run_context import bind_run, current_run
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command
from tests.server.otlp_receiver import OtlpReceiver
from tests.server.served import answer, pid_alive, until

CLIENT_KEY = "client-key-Hx7Pq9Lm2RtY"
UPSTREAM_KEY = "upstream-key-Vb3Nc8Kw1Zy"
REFUSED_KEY = "refused-key-Qw4Er5Ty6Ui"
UPSTREAM = "logged-upstream"
MODEL = "hermes-agent"
ECHOED_KEY = Fault(status=401, message=f"Incorrect API key: {UPSTREAM_KEY}")
"""An upstream refusing its key and echoing it, as some do."""


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


class Served:
    def __init__(self, pid: int, log: Path) -> None:
        self.pid, self.log = pid, log

    def alive(self) -> bool:
        return pid_alive(self.pid)


def _lines(log: Path) -> list[dict[str, Any]]:
    """Every line of the log, each of which must be one JSON object."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _traced_runs(receiver: OtlpReceiver) -> dict[str, str]:
    """Run id → trace id of the runs whose span the receiver has."""
    return {
        str(s.attributes["hermes.run.id"]): s.trace_id
        for s in receiver.spans()
        if s.name.startswith("invoke_agent")
    }


@pytest.mark.slow
async def test_json_lines_about_a_run_carry_its_ids_and_no_secret(
    simulator: SimulatorServer, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    config = tmp_path / "hermes.yaml"
    config.write_text(
        f"""
server:
  data_dir: {tmp_path / "data"}
  api_keys: [{{principal: alice, key: {CLIENT_KEY}}}]
providers:
  - {{name: sim, model: {UPSTREAM}, base_url: "{simulator.base_url}/v1",
      api_mode: chat_completions, api_key: {UPSTREAM_KEY}}}
profiles:
  - {{id: {MODEL}, providers: [sim]}}
"""
    )
    simulator.state.script(
        UPSTREAM,
        Scenario(
            steps=[
                answer("Logged."),
                Step(fault=ECHOED_KEY, repeat=5),
            ]
        ),
    )
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    port, log = free_port(), tmp_path / "server.log"
    args = ["--log-level", "info", "serve", "--config", str(config), "--log-format", "json"]
    with hermes_command(*args, "--access-log", port=port, env=env, log=log) as process:
        auth = {"authorization": f"Bearer {CLIENT_KEY}", "x-hermes-session-id": "logbook"}
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}
        async with httpx.AsyncClient(
            verify=TLS_UNUSED, base_url=f"http://127.0.0.1:{port}", timeout=60
        ) as http:
            answered = await http.post("/v1/chat/completions", json=body, headers=auth)
            assert answered.status_code == 200, answered.text
            failed = await http.post("/v1/chat/completions", json=body, headers=auth)
            refused = await http.post(
                "/v1/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {REFUSED_KEY}"},
            )
            assert refused.status_code == 401
        ok_run, failed_run = answered.headers["x-hermes-run-id"], failed.headers["x-hermes-run-id"]

        def failure_logged_and_traced() -> bool:
            logged = any(line.get("level") == "warning" and line.get("run_id") == failed_run
                         for line in _lines(log))  # fmt: skip
            return logged and failed_run in _traced_runs(receiver)

        served = Served(process.pid, log)
        assert await until(failure_logged_and_traced, server=served), log.read_text()

    text = log.read_text()
    for secret in (CLIENT_KEY, UPSTREAM_KEY, REFUSED_KEY):
        assert secret not in text
    lines = _lines(log)
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    assert any(line["logger"].startswith("uvicorn") for line in lines)
    about_runs = [line for line in lines if "run_id" in line]
    assert {line["run_id"] for line in about_runs} == {ok_run, failed_run}
    for line in about_runs:
        assert line["principal"] == "alice"
        assert line["session_id"].startswith("sess_")
        assert re.fullmatch(r"[0-9a-f]{32}", line["trace_id"])
        assert re.fullmatch(r"[0-9a-f]{16}", line["span_id"])
    (access,) = [line for line in about_runs if line["run_id"] == ok_run]
    assert access["logger"] == "uvicorn.access"
    assert "POST /v1/chat/completions" in access["message"]
    (failure,) = [
        line for line in about_runs if line["run_id"] == failed_run and line["level"] == "warning"
    ]
    assert failure["message"].startswith("run failed:")
    assert "***" in failure["message"]  # the echoed key, masked
    assert failure["trace_id"] == _traced_runs(receiver)[failed_run]
    (failed_span,) = [s for s in receiver.spans(failure["trace_id"]) if s.name.startswith("invoke")]
    assert failed_span.status_message.endswith("Incorrect API key: ***")
    assert UPSTREAM_KEY not in repr(receiver.spans())


def test_a_line_outside_any_run_has_no_run_ids() -> None:
    record = logging.LogRecord("hermes.x", logging.INFO, __file__, 1, "%s", ("plain",), None)
    line = json.loads(JsonFormatter(Redactor()).format(record))
    assert line["message"] == "plain"
    assert "run_id" not in line
    assert "trace_id" not in line


def test_known_secrets_and_credentials_are_masked_in_both_formats() -> None:
    redact = Redactor(["hunter2-secret", "abc"])  # too short to mask: it would garble the log
    message = (
        "key hunter2-secret, header Authorization: Bearer tok_123, sk-live-abcdefgh, "
        "link /v1/workspaces/signed/payload.signature/report.pdf, abc"
    )
    record = logging.LogRecord("hermes.x", logging.WARNING, __file__, 1, message, None, None)
    token = current_run.set(None)
    try:
        bind_run("run_1", None, "alice")
        shown = json.loads(JsonFormatter(redact).format(record))
        text = TextFormatter(redact, "%(message)s").format(record)
    finally:
        current_run.reset(token)
    for masked in (shown["message"], text):
        assert masked == (
            "key ***, header Authorization: Bearer ***, sk-***, "
            "link /v1/workspaces/signed/***/report.pdf, abc"
        )
    assert shown["run_id"] == "run_1"
    assert "session_id" not in shown


def test_a_reloaded_configurations_new_key_is_masked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    redact = Redactor(["first-key-123456"])
    monkeypatch.setattr(json_logs, "_redactor", redact)
    json_logs.mask_secrets(["second-key-654321"])
    assert redact("first-key-123456 second-key-654321") == "*** ***"


async def test_a_failed_runs_answer_and_record_never_show_the_upstreams_key(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    config = tmp_path / "hermes.yaml"
    config.write_text(
        f"""
server:
  data_dir: {tmp_path / "data"}
  api_keys: [{{principal: alice, key: {CLIENT_KEY}}}]
providers:
  - {{name: sim, model: {UPSTREAM}, base_url: "{simulator.base_url}/v1",
      api_mode: chat_completions, api_key: {UPSTREAM_KEY}}}
profiles:
  - {{id: {MODEL}, providers: [sim]}}
"""
    )
    simulator.state.script(UPSTREAM, Scenario(steps=[Step(fault=ECHOED_KEY, repeat=10)]))
    port, log = free_port(), tmp_path / "server.log"
    with hermes_command("serve", "--config", str(config), port=port, log=log):
        auth = {"authorization": f"Bearer {CLIENT_KEY}"}
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}
        async with httpx.AsyncClient(
            verify=TLS_UNUSED, base_url=f"http://127.0.0.1:{port}", timeout=60
        ) as http:
            failed = await http.post("/v1/chat/completions", json=body, headers=auth)
            streamed = await http.post(
                "/v1/chat/completions", json={**body, "stream": True}, headers=auth
            )
            record = await http.get(f"/v1/runs/{failed.headers['x-hermes-run-id']}", headers=auth)
    assert failed.status_code == 502
    assert "Incorrect API key: ***" in failed.json()["error"]["message"]
    assert '"error"' in streamed.text
    assert record.status_code == 200, record.text
    for answer_text in (failed.text, streamed.text, record.text):
        assert UPSTREAM_KEY not in answer_text
