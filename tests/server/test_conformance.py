"""Conformance: llm-comply's OpenAI Chat suite against a real `hermes-server serve` process.

The server runs as its own process, configured by a YAML file, in front of a simulator process:
exactly how a user would run it. One profile's id contains ``gpt-5`` so that llm-comply also
runs its reasoning test (it skips it for other model ids); that profile's upstream model is a
reasoning model of the simulator.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import free_port, hermes_command

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

KEY = "sk-conformance-0123456789"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    simulator_port, server_port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{simulator_port}/v1"
    config = tmp_path_factory.mktemp("conformance") / "hermes.yaml"
    config.write_text(
        f"""
server:
  api_keys: [{{principal: ci, key: {KEY}}}]
providers:
  - {{name: sim, model: sim-chat, base_url: "{upstream}", api_mode: chat_completions}}
  - {{name: reasoner, model: sim-reasoner, base_url: "{upstream}", api_mode: chat_completions}}
profiles:
  - {{id: hermes-agent, providers: [sim]}}
  - {{id: hermes-gpt-5, providers: [reasoner]}}
"""
    )
    data = {"HERMES_DATA_DIR": str(config.parent / "data")}
    with (
        hermes_command("simulate", "--min-cacheable-tokens", "0", port=simulator_port),
        hermes_command("serve", "--config", str(config), port=server_port, env=data),
    ):
        yield f"http://127.0.0.1:{server_port}/v1"


def _llm_comply() -> str:
    found = shutil.which("llm-comply", path=str(Path(sys.executable).parent))
    assert found, "llm-comply is a dev dependency; run `make test` to install it"
    return found


def test_llm_comply_openai_chat_suite_passes(served: str) -> None:
    completed = subprocess.run(
        [_llm_comply(), "--format", "openai-chat", "-u", served, "-k", KEY,
         "-m", "hermes-gpt-5", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    report = json.loads(completed.stdout)
    failures = [r for r in report["results"] if r.get("status") not in ("passed", "skipped")]
    assert report["summary"]["failed"] == 0, failures
    assert report["summary"]["skipped"] == 0  # the reasoning test ran too
    assert report["summary"]["passed"] == report["summary"]["total"]


def test_llm_comply_open_responses_suite_passes(served: str) -> None:
    completed = subprocess.run(
        [_llm_comply(), "-u", served, "-k", KEY, "-m", "hermes-gpt-5", "--json",
         # llm-comply 0.5.0 misnames the standard reasoning-summary events (it expects
         # response.reasoning_summary.delta); the official Open Responses CLI accepts ours.
         "-i", "unknown SSE event type: response.reasoning_summary_text"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )  # fmt: skip
    report = json.loads(completed.stdout)
    failures = [r for r in report["results"] if r.get("status") not in ("passed", "skipped")]
    assert report["summary"]["failed"] == 0, failures
    assert report["summary"]["skipped"] == 0  # the reasoning-summary tests ran too
    assert report["summary"]["passed"] == report["summary"]["total"]
