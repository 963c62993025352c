"""The Responses ``shell`` tool with ``environment.skills``: a skill attached to one request.

A real ``hermes-server serve`` process in front of the simulator, driven through the official
SDK: the skills a request's shell tool attaches (uploaded ones by ``skill_reference``, ``inline``
zips) are listed in that request's system prompt and their scripts run through the agent's own
shell at ``/skills/<name>``; the next request without the tool does not have them. What cannot
be served is a 400 naming ``tools``: a model without a shell, a client-run environment, a skill
the key does not have (another key's included).
"""

from __future__ import annotations

import base64
import io
import zipfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest

from hermes_core.tools.toolsets import sandbox_missing
from server.simulator import SimulatorServer
from tests.server.served import Served, answer, call, script, sdk_client, serving, tool_results_of

pytestmark = pytest.mark.slow

UPSTREAM = "shell-skills-agent"
KEY = "sk-skills-alice-0123456789"
KEY_BOB = "sk-skills-bob-0123456789"
MODEL = "hermes-agent"
NO_SHELL_MODEL = "files-agent"
"""A profile whose agent has files but no shell."""

CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {key}, principal: alice}}
    - {{key: {key_bob}, principal: bob}}
providers:
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
    tools: [files, shell, code]
    approvals: {{shell: never, code: never}}
    sandbox: {{timeout_seconds: 60, max_processes: 64, cpu_seconds: 30, sandbox_memory_mb: 512}}
  - id: {no_shell_model}
    providers: [sim]
    tools: [files]
"""

needs_sandbox = pytest.mark.skipif(
    sandbox_missing() is not None, reason=f"no sandbox here: {sandbox_missing()}"
)
"""Without the sandbox the shell toolset is off: every shell tool is a model without one."""


@pytest.fixture(scope="module")
def skill_server(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("shell-skills")
    config = CONFIG.format(
        data=data,
        key=KEY,
        key_bob=KEY_BOB,
        upstream=UPSTREAM,
        simulator=_simulator_server.base_url,
        model=MODEL,
        no_shell_model=NO_SHELL_MODEL,
    )
    with serving(data, config) as server:
        yield server


@pytest.fixture
async def alice(skill_server: Served) -> AsyncIterator[openai.AsyncOpenAI]:
    async with sdk_client(skill_server.base_url, KEY) as client:
        yield client


@pytest.fixture
async def bob(skill_server: Served) -> AsyncIterator[openai.AsyncOpenAI]:
    async with sdk_client(skill_server.base_url, KEY_BOB) as client:
        yield client


def skill_md(name: str, description: str) -> bytes:
    return f"---\nname: {name}\ndescription: {description}\n---\n\nRun scripts/run.sh.\n".encode()


def run_script(says: str) -> bytes:
    return f"#!/bin/bash\necho {says}\n".encode()


def skill_files(name: str, description: str, says: str) -> list[tuple[str, bytes, str]]:
    """A skill folder as an upload's files: its SKILL.md and a script that prints ``says``."""
    return [
        (f"{name}/SKILL.md", skill_md(name, description), "text/markdown"),
        (f"{name}/scripts/run.sh", run_script(says), "text/x-shellscript"),
    ]


def skill_zip(name: str, description: str, says: str) -> str:
    """The same folder zipped, as base64: an inline skill's data."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("SKILL.md", skill_md(name, description))
        archive.writestr("scripts/run.sh", run_script(says))
    return base64.b64encode(buffer.getvalue()).decode()


def shell_tool(*skills: dict[str, Any]) -> Any:
    return {"type": "shell", "environment": {"type": "container_auto", "skills": list(skills)}}


def inline(name: str, description: str, says: str) -> dict[str, Any]:
    source = {
        "type": "base64",
        "media_type": "application/zip",
        "data": skill_zip(name, description, says),
    }
    return {"type": "inline", "name": name, "description": description, "source": source}


def system_prompts(simulator: SimulatorServer) -> list[str]:
    """The system text of each upstream call, in order."""
    texts = []
    for request in simulator.state.requests(scenario=UPSTREAM):
        parts = [
            m.get("content") for m in request.body.get("messages", []) if m.get("role") == "system"
        ]
        texts.append("\n".join(p if isinstance(p, str) else str(p) for p in parts))
    return texts


async def refused(client: openai.AsyncOpenAI, *, model: str = MODEL, tools: Any) -> str:
    """The message of the 400 a request with ``tools`` gets (its param must be ``tools``)."""
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(model=model, input="hello", tools=tools)
    error = caught.value.body
    assert isinstance(error, dict)
    assert error.get("param") == "tools", error
    return str(error.get("message"))


# --- what is refused ------------------------------------------------------------------------------


async def test_a_shell_tool_on_a_model_without_shell_is_refused(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    message = await refused(alice, model=NO_SHELL_MODEL, tools=[shell_tool()])
    assert "has no shell" in message
    assert simulator.state.requests(scenario=UPSTREAM) == []


async def test_a_local_shell_environment_is_refused(alice: openai.AsyncOpenAI) -> None:
    local = {"type": "shell", "environment": {"type": "local"}}
    message = await refused(alice, tools=[local])
    assert "local" in message
    assert "not supported" in message


async def test_a_container_reference_environment_is_refused(alice: openai.AsyncOpenAI) -> None:
    reference = {
        "type": "shell",
        "environment": {"type": "container_reference", "container_id": "cntr_0"},
    }
    message = await refused(alice, tools=[reference])
    assert "container_reference" in message
    assert "not supported" in message


@needs_sandbox
async def test_an_unknown_skill_id_is_refused(alice: openai.AsyncOpenAI) -> None:
    unknown = {"type": "skill_reference", "skill_id": "skill_0123456789abcdef"}
    message = await refused(alice, tools=[shell_tool(unknown)])
    assert "No such skill" in message


@needs_sandbox
async def test_another_keys_skill_id_is_refused_as_unknown(
    alice: openai.AsyncOpenAI, bob: openai.AsyncOpenAI
) -> None:
    bobs = await bob.skills.create(files=skill_files("bobs-skill", "Bob's own skill.", "bob"))
    theirs = {"type": "skill_reference", "skill_id": bobs.id}
    message = await refused(alice, tools=[shell_tool(theirs)])
    assert message == f"No such skill: '{bobs.id}'."


@needs_sandbox
async def test_an_inline_skill_that_is_no_skill_is_refused_with_why(
    alice: openai.AsyncOpenAI,
) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README.md", b"no SKILL.md here")
    source = {
        "type": "base64",
        "media_type": "application/zip",
        "data": base64.b64encode(buffer.getvalue()).decode(),
    }
    skill = {"type": "inline", "name": "empty", "description": "Nothing.", "source": source}
    message = await refused(alice, tools=[shell_tool(skill)])
    assert "SKILL.md" in message


@needs_sandbox
async def test_the_response_echoes_the_shell_tool_as_given(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, UPSTREAM, answer("hi"))
    tool = shell_tool()
    created = await alice.responses.create(model=MODEL, input="hello", tools=[tool])
    stored = await alice.responses.retrieve(created.id)
    assert [t.model_dump(exclude_none=True) for t in stored.tools] == [tool]


async def test_forcing_the_shell_without_a_shell_tool_is_refused(
    alice: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await alice.responses.create(model=MODEL, input="hello", tool_choice={"type": "shell"})
    error = caught.value.body
    assert isinstance(error, dict)
    assert error.get("param") == "tool_choice"


@needs_sandbox
async def test_tool_choice_shell_forces_the_agents_shell(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, UPSTREAM, answer("hi"))
    await alice.responses.create(
        model=MODEL, input="hello", tools=[shell_tool()], tool_choice={"type": "shell"}
    )
    (request,) = simulator.state.requests(scenario=UPSTREAM)
    assert request.body.get("tool_choice") == {"type": "function", "function": {"name": "shell"}}


# --- what a run with attached skills does ---------------------------------------------------------


@needs_sandbox
async def test_a_skill_attached_by_reference_is_listed_and_runs_for_that_request_only(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    # Version 1 is the key's default (offered to every run); version 2, attached by reference,
    # is what this one request sees.
    skill = await alice.skills.create(
        files=skill_files("pinned-skill", "Version one of the pinned skill.", "v1-ran")
    )
    await alice.skills.versions.create(
        skill.id,
        default=False,
        files=skill_files("pinned-skill", "Version two, attached by reference.", "v2-ran"),
    )
    reference = {"type": "skill_reference", "skill_id": skill.id, "version": "2"}
    script(
        simulator,
        UPSTREAM,
        call("shell", command="bash /skills/pinned-skill/scripts/run.sh"),
        answer("ok"),
    )
    first = await alice.responses.create(model=MODEL, input="run it", tools=[shell_tool(reference)])
    assert "Version two, attached by reference." in system_prompts(simulator)[0]
    assert any("v2-ran" in result for result in tool_results_of(simulator, UPSTREAM))

    simulator.state.reset()
    script(simulator, UPSTREAM, answer("plain"))
    await alice.responses.create(model=MODEL, input="and now?", previous_response_id=first.id)
    (prompt,) = system_prompts(simulator)
    assert "Version two, attached by reference." not in prompt
    assert "Version one of the pinned skill." in prompt


@needs_sandbox
async def test_an_inline_skill_is_listed_and_runs_for_that_request_only(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    skill = inline("inline-helper", "Helps inline, for one request only.", "inline-ran")
    script(
        simulator,
        UPSTREAM,
        call("shell", command="bash /skills/inline-helper/scripts/run.sh"),
        answer("ok"),
    )
    first = await alice.responses.create(model=MODEL, input="run it", tools=[shell_tool(skill)])
    assert "Helps inline, for one request only." in system_prompts(simulator)[0]
    assert any("inline-ran" in result for result in tool_results_of(simulator, UPSTREAM))

    simulator.state.reset()
    script(simulator, UPSTREAM, answer("plain"))
    await alice.responses.create(model=MODEL, input="and now?", previous_response_id=first.id)
    (prompt,) = system_prompts(simulator)
    assert "Helps inline, for one request only." not in prompt


@needs_sandbox
async def test_the_same_inline_skill_is_written_once(
    alice: openai.AsyncOpenAI, simulator: SimulatorServer, skill_server: Served
) -> None:
    skill = inline("written-once", "Sent with two requests.", "once")
    cache = skill_server.data_dir / "skills-cache" / "inline"

    def folders() -> dict[str, int]:
        """The folders holding this skill, by name, with their inode numbers."""
        return {
            folder.name: folder.stat().st_ino
            for folder in cache.iterdir()
            if "written-once" in (folder / "SKILL.md").read_text()
        }

    seen = []
    for _ in range(2):
        script(simulator, UPSTREAM, answer("ok"))
        await alice.responses.create(model=MODEL, input="hi", tools=[shell_tool(skill)])
        seen.append(folders())
    assert len(seen[0]) == 1
    assert seen[1] == seen[0]  # the same folder, not written again
    assert not [d for d in cache.iterdir() if d.name.startswith(".")]  # no staging left


@needs_sandbox
async def test_an_inline_skill_named_otherwise_than_its_skill_md_is_refused(
    alice: openai.AsyncOpenAI,
) -> None:
    skill = inline("what-it-says", "Misnamed.", "x")
    skill["name"] = "another-name"
    message = await refused(alice, tools=[shell_tool(skill)])
    assert "what-it-says" in message


@needs_sandbox
async def test_two_skills_of_one_name_are_refused(alice: openai.AsyncOpenAI) -> None:
    twice = inline("twin", "One of two.", "x")
    message = await refused(alice, tools=[shell_tool(twice, inline("twin", "The other.", "y"))])
    assert "twin" in message
