"""Secrets of the configuration never reach the log of a real ``serve``, also when they are the
reason something is refused: an OTLP headers variable written the HTTP way (``name: value``,
which the OpenTelemetry SDK quotes whole in its warning), and reloads refused for an invalid
webhook secret or client key."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.processes import free_port, hermes_command
from tests.server.served import until

pytestmark = pytest.mark.slow

OTLP_TOKEN = "otlp-token-never-logged-5521"
WEBHOOK_SECRET = "whsec_not-base64-never-logged-7730!"
CLIENT_KEY = "sk-client-never-logged-0193"

FILE = """\
server:
  api_keys: [{{principal: {principal}, key: {key}}}]
providers:
  - {{name: real, model: m, base_url: "http://127.0.0.1:9/v1"}}
{webhooks}
"""


class Process:
    def __init__(self, pid: int, log: Path) -> None:
        self.pid, self.log = pid, log

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True


async def test_refused_secrets_of_the_environment_and_of_reloads_stay_out_of_the_log(
    tmp_path: Path,
) -> None:
    config, log = tmp_path / "hermes.yaml", tmp_path / "server.log"
    config.write_text(FILE.format(principal="alice", key="sk-live-key-0123456789", webhooks=""))
    env = {
        "HERMES_DATA_DIR": str(tmp_path / "data"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "OTEL_EXPORTER_OTLP_HEADERS": f"x-api-key: {OTLP_TOKEN}",
    }
    port = free_port()
    with hermes_command("serve", "--config", str(config), port=port, env=env, log=log) as server:
        watched = Process(server.pid, log)
        assert "Header format invalid" in log.read_text()  # the SDK's warning, masked
        hook = f"webhooks: [{{url: 'https://hooks.example/x', secret: '{WEBHOOK_SECRET}'}}]"
        invalid = (
            FILE.format(principal="alice", key="sk-live-key-0123456789", webhooks=hook),
            FILE.format(principal="'not a principal'", key=CLIENT_KEY, webhooks=""),
        )
        for count, text in enumerate(invalid, start=1):
            config.write_text(text)
            server.send_signal(signal.SIGHUP)

            def refused(count: int = count) -> bool:
                return log.read_text().count("config reload refused") >= count

            assert await until(refused, server=watched, seconds=20)
    text = log.read_text()
    for secret in (OTLP_TOKEN, WEBHOOK_SECRET, "not-base64-never-logged", CLIENT_KEY):
        assert secret not in text
    assert "webhooks[0].secret" in text
    assert "server.api_keys[0].principal" in text
