"""A start on the embedded defaults imports nothing it does not use (#27: cold start ≤ 1 s),
and one with MCP servers loads the MCP SDK on a worker thread once it runs.

The heavy packages — the MCP SDK, trafilatura and lxml, alembic, the provider SDKs, jsonschema,
the Redis client, aiohttp — are loaded on first use (a profile's MCP servers, a page read, a
schema behind, a provider of that protocol, a structured answer, a replica set, a model call,
a web tool's or a webhook's request). One import placed at the top of a module again would
cost every start, silently: this test says where.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_core.persistence import Store
from server.config import load_config

REPO = Path(__file__).parents[2]
NOT_AT_START = (
    "aiohttp",
    "mcp",
    "mcp_types",
    "trafilatura",
    "lxml",
    "alembic",
    "anthropic",
    "openai",
    "jsonschema",
    "redis",
    "pandas",
    "numpy",
)
START_AS_SERVE_DOES = """
import asyncio, os, sys
from server.app import create_app
from server.bootstrap import build_services, upstreams
from server.config import load_config

with upstreams(load_config(None, os.environ)) as running:
    services = build_services(running)
    create_app(services)

    async def open_and_close():
        await services.open()
        await services.close()

    asyncio.run(open_and_close())
print(" ".join(sorted(sys.modules)))
"""
"""What ``hermes-server serve`` does before it answers (cli.py), less the listening socket."""


async def _create_schema(url: str) -> None:
    store = await Store.open(url)
    await store.close()


def _no_upstream_env() -> dict[str, str]:
    """This process's environment without what would configure an upstream (a start on its
    embedded defaults)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "OPENAI_"))}
    env.pop("ANTHROPIC_API_KEY", None)
    return env


def _probe(
    script: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``script`` run by a fresh Python in the repository: nothing imported before it."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_start_on_the_embedded_defaults_imports_no_heavy_package_it_does_not_use(
    tmp_path: Path,
) -> None:
    env = _no_upstream_env()
    env["HERMES_DATA_DIR"] = str(tmp_path / "data")
    # A restart: the database exists at the newest schema, so nothing is migrated.
    asyncio.run(_create_schema(load_config(None, env).server.resolved_database_url))

    started = _probe(START_AS_SERVE_DOES, env=env)

    assert started.returncode == 0, started.stderr[-3000:]
    loaded = set(started.stdout.split())
    assert "server.app" in loaded  # the probe did start the server
    assert [name for name in NOT_AT_START if name in loaded] == []


MCP_CONFIG = """\
server:
  data_dir: {data}
providers:
  - name: sim
    model: cold-start
    api_mode: chat_completions
    base_url: http://127.0.0.1:9/v1
    api_key: cold-start-key
profiles:
  - id: hermes-agent
    providers: [sim]
    tools: [files, shell, code, web]
    mcp_servers:
      - name: workshop
        command: {python}
        args: ["-m", "tests.mcp_servers.workshop", "stdio"]
        cwd: {repo}
"""
START_WITH_MCP_SERVERS = """
import asyncio, os, sys, threading
from pathlib import Path
from server.app import create_app
from server.bootstrap import build_services, upstreams
from server.config import load_config

class WhereTheSdkLoads:
    # Records the thread that imports the MCP SDK: on the event loop's, it would hold up
    # every request for as long as it takes.
    threads = []
    def find_spec(self, name, path=None, target=None):
        if name == "mcp":
            self.threads.append(threading.current_thread() is threading.main_thread())
        return None

sys.meta_path.insert(0, WhereTheSdkLoads())
with upstreams(load_config(Path(sys.argv[1]), os.environ)) as running:
    services = build_services(running)
    create_app(services)
    before_open = "mcp" in sys.modules or "mcp_types" in sys.modules

    async def open_connect_and_close():
        await services.open()
        mcp = services.profiles[0].mcp
        await mcp.until_settled()
        print(mcp.status())
        await services.close()

    asyncio.run(open_connect_and_close())
print(before_open, WhereTheSdkLoads.threads)
"""
"""Serve's start with a profile's MCP servers, then their first connect; the last line says
whether the SDK was loaded before the loop started and on which threads it was imported."""


@pytest.mark.slow  # a server process and its MCP server's
def test_a_start_with_mcp_servers_loads_the_mcp_sdk_off_the_event_loop_after_it_starts(
    tmp_path: Path,
) -> None:
    env = _no_upstream_env()
    config = tmp_path / "hermes.yaml"
    config.write_text(MCP_CONFIG.format(data=tmp_path / "data", python=sys.executable, repo=REPO))

    started = _probe(START_WITH_MCP_SERVERS, str(config), env=env)

    assert started.returncode == 0, started.stderr[-3000:]
    status, where = started.stdout.strip().splitlines()[-2:]
    assert status == "{'workshop': None}"  # it did connect, so the SDK was loaded
    assert where == "False [False]"  # not before the loop, and once, on a worker thread


def test_an_anthropic_provider_does_not_import_the_openai_sdk() -> None:
    # One module maps both SDKs' exceptions; it must not load the SDK nobody configured.
    probe = "import sys, hermes_core.providers.anthropic_messages; print('openai' in sys.modules)"
    started = _probe(probe)
    assert started.returncode == 0, started.stderr[-3000:]
    assert started.stdout.split() == ["False"]


def test_the_cli_module_imports_no_server_module_before_main_turns_the_collector_off() -> None:
    # main() turns the cyclic collector off before a command imports its modules (~0.1 s of
    # collections a start saves); a module imported at the top of cli.py would load before.
    probe = "import sys, server.cli; print(' '.join(sorted(sys.modules)))"
    started = _probe(probe)
    assert started.returncode == 0, started.stderr[-3000:]
    loaded = set(started.stdout.split())
    heavy = ("pydantic", "fastapi", "uvicorn", "sqlalchemy", "aiohttp", "server.config")
    assert [name for name in heavy if name in loaded] == []


def test_the_collector_is_on_again_after_a_command_and_once_serve_has_frozen_its_start(
    tmp_path: Path,
) -> None:
    env = _no_upstream_env()
    env["HERMES_DATA_DIR"] = str(tmp_path / "data")
    probe = (
        "import contextlib, gc, io, server.cli\n"
        "from server.process.runtime import tune_garbage_collector\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    server.cli.main(['check-config'])\n"
        "after_command = gc.isenabled()\n"
        "gc.disable()\n"
        "tune_garbage_collector()  # as serve does, its app built\n"
        "print(after_command, gc.isenabled(), gc.get_freeze_count() > 0)"
    )
    started = _probe(probe, env=env)
    assert started.returncode == 0, started.stderr[-3000:]
    assert started.stdout.split() == ["True", "True", "True"]
