"""``serve --log-format json`` writes JSON from its first line: what loading the configuration
logs (the upstream variables a file with providers makes it ignore) came before the JSON
formatter was installed, as a plain-text line among the JSON ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.processes import free_port, hermes_command

pytestmark = pytest.mark.slow


def test_every_line_of_a_json_log_start_is_json(tmp_path: Path) -> None:
    config, log = tmp_path / "hermes.yaml", tmp_path / "server.log"
    config.write_text("providers:\n  - {name: p, model: m, base_url: 'http://127.0.0.1:9/v1'}\n")
    env = {"HERMES_DATA_DIR": str(tmp_path / "data"), "HERMES_UPSTREAM_MODEL": "ignored"}
    serve = ("serve", "--log-format", "json", "--config", str(config))
    with hermes_command(*serve, port=free_port(), env=env, log=log):
        pass
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert any("ignoring HERMES_UPSTREAM_MODEL" in line["message"] for line in lines)
