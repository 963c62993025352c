"""Which toolsets a profile gets: named in its configuration, built only where they can work,
and shown as they are (``check-config``, ``GET /v1/models``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_core.tools.sandbox import SandboxPolicy
from hermes_core.tools.toolsets import ToolsetOptions, build_toolsets, sandbox_missing
from server.bootstrap import build_services
from server.config import load_config
from tests.server.config.test_config import check_config, run_check_config, write

TOOLED = """\
profiles:
  - id: builder
    providers: [simulator]
    tools: [files, shell, code]
    approvals: {shell: always}
"""


def test_named_toolsets_are_built_with_their_tools() -> None:
    built = build_toolsets(["files"], ToolsetOptions())
    assert built.active == ["files", "todo", "memory", "session_search", "delegate_task", "skills"]
    assert built.registry.names == [
        "edit_file",
        "list_files",
        "read_file",
        "search_files",
        "view_image",
        "write_file",
    ]
    assert built.unavailable == {}


def test_tools_that_write_are_never_run_concurrently() -> None:
    options = ToolsetOptions(policy=SandboxPolicy(unsandboxed=True))
    tools = {
        t.name: t for t in build_toolsets(["files", "shell", "code"], options).registry.tools()
    }
    writers = {"write_file", "edit_file", "shell", "code"}
    assert {name for name, tool in tools.items() if not tool.concurrent_safe} == writers


def test_an_unknown_toolset_cannot_be_built() -> None:
    with pytest.raises(KeyError):
        build_toolsets(["browser"], ToolsetOptions())


def test_a_sandboxed_toolset_stays_off_without_the_sandbox(tmp_path: Path) -> None:
    # A process of its own: the sandbox is probed once per process, and this one's has bwrap.
    result = run_check_config(write(tmp_path, TOOLED), PATH=str(tmp_path))  # no bwrap on it
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    tools = next(line for line in lines if line.strip().startswith("tools "))
    expected = ["files,", "todo,", "memory,", "session_search,", "delegate_task,", "skills"]
    assert tools.split()[1:] == expected
    for name in ("shell", "code"):
        off = next(line for line in lines if line.strip().startswith(name))
        assert "UNAVAILABLE, stays off: 'bwrap' is not installed" in off


@pytest.mark.skipif(sandbox_missing() is not None, reason="no sandbox on this machine")
def test_check_config_shows_the_toolsets_on_and_their_approval_policies(tmp_path: Path) -> None:
    result = check_config(write(tmp_path, TOOLED), PATH=os.environ["PATH"])
    assert result.returncode == 0, result.stderr
    assert "files, shell, code, todo, memory, session_search, delegate_task" in result.stdout
    assert "shell             approval: always" in result.stdout
    assert "code              approval: dangerous" in result.stdout
    assert "sandbox             bubblewrap, no network, 120 s per command" in result.stdout


def test_a_profile_is_served_with_the_toolsets_it_could_build(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, TOOLED.replace("shell, code", "code")), {})
    services = build_services(config)
    profile = services.profiles[0]
    assert profile.uses_workspace
    if sandbox_missing() is None:
        assert profile.toolsets[:2] == ["files", "code"]
        assert "code" in profile.tools
    else:
        assert profile.unavailable_toolsets.keys() == {"code"}
        assert "code" not in profile.tools


def test_the_web_toolset_offers_search_only_with_a_backend() -> None:
    from hermes_core.tools.web.search import SearchSettings
    from hermes_core.tools.web.tools import WebOptions

    fetch_only = build_toolsets(["web"], ToolsetOptions()).registry.names
    assert fetch_only == [*sorted(fetch_only)]
    assert "web_fetch" in fetch_only
    assert "web_search" not in fetch_only
    searxng = SearchSettings(backend="searxng", url="http://search.internal")
    options = ToolsetOptions(web=WebOptions(search=searxng))
    assert {"web_fetch", "web_search"} <= set(build_toolsets(["web"], options).registry.names)
