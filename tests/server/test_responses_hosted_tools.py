"""Hosted tool types on ``/v1/responses``, served by the server's own toolsets.

A real ``hermes-server serve`` process in front of the simulator, with the web toolset (a
local site and a fake SearXNG on it) and the shell and code toolsets, driven through the
official SDK with strict response validation: ``web_search`` shows the agent's searches and
fetches as ``web_search_call`` items beside an annotated answer, ``code_interpreter`` its
Python runs as ``code_interpreter_call`` items in the conversation's container (whose files the
Containers API serves), ``shell`` its commands as ``shell_call`` / ``shell_call_output``
items; streamed, each with its documented events. What the server cannot serve is a 400
naming what is missing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI, DefaultAsyncHttpxClient

from hermes_core.tools.toolsets import sandbox_missing
from server.protocol.schemas.responses import ResponseObject, ResponseStreamEvent
from server.simulator import Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command
from tests.server.served import (
    answer,
    call,
    http_client,
    pid_alive,
    sse_data,
    tool_results_of,
    until,
)
from tests.web_site import WebSite, web_site

pytestmark = pytest.mark.slow

UPSTREAM = "hosted-tools-agent"
KEY = "sk-hosted-alice-0123456789"
MODEL = "hermes-agent"
FILES_MODEL = "files-agent"
"""A profile with files only: no web, no code, no shell."""
ASKING_MODEL = "asking-agent"
"""A profile whose shell asks a person before every command."""
# Typed Any: the SDK's TypedDicts for tools are not what a test's plain dicts infer as.
WEB_SEARCH: Any = {"type": "web_search"}
CODE_INTERPRETER: Any = {"type": "code_interpreter", "container": {"type": "auto"}}
SHELL: Any = {"type": "shell", "environment": {"type": "container_auto"}}
WEB_SEARCH_PREVIEW: Any = {"type": "web_search_preview"}
FORCE_WEB_SEARCH: Any = {"type": "web_search"}
"""A tool_choice the SDK's types do not list (they know ``web_search_preview``), but OpenAI
takes."""

CONFIG = """\
server:
  data_dir: {data}
  api_keys: [{{key: {key}, principal: alice}}]
web:
  allow: ["127.0.0.1"]
  search: {{backend: searxng, url: "{site}"}}
providers:
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
    tools: [web, files, shell, code]
    approvals: {{shell: never, code: never}}
    sandbox: {{timeout_seconds: 60, max_processes: 64, cpu_seconds: 30, sandbox_memory_mb: 512}}
  - id: {files_model}
    providers: [sim]
    tools: [files]
  - id: {asking_model}
    providers: [sim]
    tools: [shell]
    approvals: {{shell: always}}
"""

needs_sandbox = pytest.mark.skipif(
    sandbox_missing() is not None, reason=f"no sandbox here: {sandbox_missing()}"
)
"""Without the sandbox the shell and code toolsets are off."""


@dataclass(frozen=True, slots=True)
class HostedServer:
    base_url: str
    site: WebSite
    pid: int
    log: Path

    def alive(self) -> bool:
        return pid_alive(self.pid)


@pytest.fixture(scope="module")
def hosted_site() -> Iterator[WebSite]:
    with web_site() as served:
        yield served


@pytest.fixture(scope="module")
def hosted_server(
    _simulator_server: SimulatorServer,
    hosted_site: WebSite,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[HostedServer]:
    data = tmp_path_factory.mktemp("hosted-tools")
    config = data / "hermes.yaml"
    config.write_text(
        CONFIG.format(
            data=data,
            key=KEY,
            site=hosted_site.base_url,
            upstream=UPSTREAM,
            simulator=_simulator_server.base_url,
            model=MODEL,
            files_model=FILES_MODEL,
            asking_model=ASKING_MODEL,
        )
    )
    port, log = free_port(), data / "server.log"
    with hermes_command("serve", "--config", str(config), port=port, log=log) as process:
        yield HostedServer(f"http://127.0.0.1:{port}", hosted_site, process.pid, log)


@pytest.fixture
async def client(hosted_server: HostedServer) -> AsyncIterator[AsyncOpenAI]:
    """The official SDK, strict: every item and event must parse as its model."""
    async with AsyncOpenAI(
        http_client=DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=f"{hosted_server.base_url}/v1",
        api_key=KEY,
        max_retries=0,
        timeout=60,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM, Scenario(steps=list(steps)))


def of_type(response: Any, kind: str) -> list[Any]:
    return [item for item in response.output if item.type == kind]


def answer_parts(response: Any) -> list[Any]:
    return [part for item in of_type(response, "message") for part in item.content]


async def streamed(client: AsyncOpenAI, **fields: Any) -> tuple[list[Any], Any]:
    """The events of a streamed response (each parsed by the SDK) and its final object."""
    events = []
    async with client.responses.stream(model=MODEL, **fields) as stream:
        async for event in stream:
            events.append(event)
        final = await stream.get_final_response()
    return events, final


def of_item(events: list[Any], index: int) -> list[str]:
    """The types of the events about the item at ``index``, in order."""
    return [e.type for e in events if getattr(e, "output_index", None) == index]


def collapsed(types: list[str]) -> list[str]:
    """``types`` with runs of the same type as one."""
    return [kind for i, kind in enumerate(types) if i == 0 or types[i - 1] != kind]


# --- web_search -----------------------------------------------------------------------------------


async def test_web_search_returns_a_web_search_call_and_an_annotated_answer(
    client: AsyncOpenAI, simulator: SimulatorServer, hosted_server: HostedServer
) -> None:
    article = hosted_server.site.url("/article")
    script(
        simulator,
        call("web_search", query="brightwater lighthouse"),
        answer(f"The Marsh family kept it: [the keepers]({article})."),
    )
    response = await client.responses.create(
        model=MODEL,
        input="Who kept the Brightwater light?",
        tools=[WEB_SEARCH],
        include=["web_search_call.action.sources"],
    )
    [search] = of_type(response, "web_search_call")
    assert search.status == "completed"
    assert search.action.type == "search"
    assert search.action.query == "brightwater lighthouse"
    assert article in [source.url for source in search.action.sources or ()]
    [part] = answer_parts(response)
    [annotation] = part.annotations
    assert annotation.type == "url_citation"
    assert annotation.url == article
    assert of_type(response, "function_call") == []


async def test_a_search_lists_its_sources_only_when_include_asks(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, call("web_search", query="brightwater"), answer("Found it."))
    response = await client.responses.create(
        model=MODEL, input="Search brightwater.", tools=[WEB_SEARCH]
    )
    [search] = of_type(response, "web_search_call")
    assert search.action.sources is None


async def test_a_page_read_shows_as_an_open_page_action(
    client: AsyncOpenAI, simulator: SimulatorServer, hosted_server: HostedServer
) -> None:
    article = hosted_server.site.url("/article")
    script(simulator, call("web_fetch", url=article), answer("Read it."))
    response = await client.responses.create(
        model=MODEL, input="Read the article.", tools=[WEB_SEARCH_PREVIEW]
    )
    [read] = of_type(response, "web_search_call")
    assert read.action.type == "open_page"
    assert read.action.url == article


async def test_allowed_domains_keep_searches_and_fetches_to_them(
    client: AsyncOpenAI, simulator: SimulatorServer, hosted_server: HostedServer
) -> None:
    article = hosted_server.site.url("/article")
    script(
        simulator,
        call("web_search", query="brightwater"),
        call("web_fetch", url=article),
        answer("Nothing allowed."),
    )
    tool: Any = {"type": "web_search", "filters": {"allowed_domains": ["example.com"]}}
    reads = len(hosted_server.site.asked("/article"))
    await client.responses.create(model=MODEL, input="Search brightwater.", tools=[tool])
    searched, fetched = tool_results_of(simulator, UPSTREAM)
    assert searched.startswith("No results")
    assert "allows only pages of example.com" in fetched
    assert len(hosted_server.site.asked("/article")) == reads


async def test_streamed_web_search_emits_its_events_in_order(
    client: AsyncOpenAI, simulator: SimulatorServer, hosted_server: HostedServer
) -> None:
    article = hosted_server.site.url("/article")
    script(simulator, call("web_search", query="brightwater"), answer(f"See {article}."))
    events, final = await streamed(client, input="Search brightwater.", tools=[WEB_SEARCH])
    [search] = of_type(final, "web_search_call")
    index = final.output.index(search)
    assert of_item(events, index) == [
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.output_item.done",
    ]
    types = [e.type for e in events]
    assert types.index("response.output_text.annotation.added") > types.index(
        "response.web_search_call.completed"
    )
    assert types[-1] == "response.completed"


async def test_without_the_hosted_tool_web_calls_stay_progress_lines(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, call("web_search", query="brightwater"), answer("Found it."))
    response = await client.responses.create(model=MODEL, input="Search brightwater.")
    assert of_type(response, "web_search_call") == []
    summaries = [s.text for item in of_type(response, "reasoning") for s in item.summary]
    assert any("brightwater" in line for line in summaries)


async def test_a_background_response_is_stored_with_the_same_items(
    client: AsyncOpenAI, simulator: SimulatorServer, hosted_server: HostedServer
) -> None:
    script(simulator, call("web_search", query="brightwater"), answer("Found it."))
    begun = await client.responses.create(
        model=MODEL, input="Search brightwater.", tools=[WEB_SEARCH], background=True
    )

    async def finished() -> bool:
        stored = await client.responses.retrieve(begun.id)
        return stored.status == "completed"

    assert await until(finished, server=hosted_server)
    stored = await client.responses.retrieve(begun.id)
    [search] = of_type(stored, "web_search_call")
    assert search.action.query == "brightwater"


async def test_tool_choice_naming_web_search_forces_the_agents_search(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, call("web_search", query="brightwater"), answer("Found it."))
    await client.responses.create(
        model=MODEL,
        input="Search brightwater.",
        tools=[WEB_SEARCH],
        tool_choice=FORCE_WEB_SEARCH,
    )
    first = simulator.state.requests(scenario=UPSTREAM)[0].body
    assert first["tool_choice"] == {"type": "function", "function": {"name": "web_search"}}


# --- code_interpreter ----------------------------------------------------------------------------


@needs_sandbox
async def test_code_interpreter_returns_its_call_logs_and_a_downloadable_file(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    code = "open('report.txt', 'w').write('forty-two')\nprint('wrote the report')"
    script(simulator, call("code", code=code), answer("Wrote report.txt."))
    response = await client.responses.create(
        model=MODEL, input="Write the report.", tools=[CODE_INTERPRETER]
    )
    [run] = of_type(response, "code_interpreter_call")
    assert run.status == "completed"
    assert run.code == code
    assert [(o.type, getattr(o, "logs", "").strip()) for o in run.outputs or ()] == [
        ("logs", "wrote the report")
    ]
    assert run.container_id.startswith("cntr_")
    files = await client.containers.files.list(run.container_id)
    [made] = [f for f in files.data if f.path.endswith("report.txt")]
    content = await client.containers.files.content.retrieve(made.id, container_id=run.container_id)
    assert content.read() == b"forty-two"


@needs_sandbox
async def test_code_interpreter_continues_in_the_container_it_names(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, call("code", code="open('kept.txt', 'w').write('1')"), answer("Kept."))
    first = await client.responses.create(model=MODEL, input="Keep.", tools=[CODE_INTERPRETER])
    [run] = of_type(first, "code_interpreter_call")
    script(simulator, call("code", code="print(open('kept.txt').read())"), answer("1."))
    named: Any = {"type": "code_interpreter", "container": run.container_id}
    second = await client.responses.create(
        model=MODEL, input="Read it.", tools=[named], previous_response_id=first.id
    )
    [again] = of_type(second, "code_interpreter_call")
    assert again.container_id == run.container_id
    assert [getattr(o, "logs", "").strip() for o in again.outputs or ()] == ["1"]


@needs_sandbox
async def test_a_container_that_is_not_the_keys_is_a_400(client: AsyncOpenAI) -> None:
    made_up: Any = {"type": "code_interpreter", "container": "cntr_" + "0" * 32}
    error = await refusal(client, tools=[made_up])
    assert error.param == "tools"
    assert "No container found" in error.message


@needs_sandbox
async def test_streamed_code_interpreter_emits_its_events_in_order(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, call("code", code="print(6 * 7)"), answer("42."))
    events, final = await streamed(client, input="Compute.", tools=[CODE_INTERPRETER])
    [run] = of_type(final, "code_interpreter_call")
    assert of_item(events, final.output.index(run)) == [
        "response.output_item.added",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.output_item.done",
    ]
    [delta] = [e for e in events if e.type == "response.code_interpreter_call_code.delta"]
    assert delta.delta == "print(6 * 7)"


# --- shell ----------------------------------------------------------------------------------------


@needs_sandbox
async def test_shell_returns_its_call_and_output_with_the_exit_code(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, call("shell", command="echo hello; exit 3"), answer("It said hello."))
    response = await client.responses.create(model=MODEL, input="Say hello.", tools=[SHELL])
    [shell_call] = of_type(response, "shell_call")
    [output] = of_type(response, "shell_call_output")
    assert shell_call.action.commands == ["echo hello; exit 3"]
    assert output.call_id == shell_call.call_id
    [ran] = output.output
    assert ran.stdout.strip() == "hello"
    assert ran.outcome.type == "exit"
    assert ran.outcome.exit_code == 3


@needs_sandbox
async def test_a_shell_command_that_outruns_its_timeout_has_a_timeout_outcome(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, call("shell", command="sleep 30", timeout=1), answer("Too slow."))
    response = await client.responses.create(model=MODEL, input="Wait.", tools=[SHELL])
    [shell_call] = of_type(response, "shell_call")
    [output] = of_type(response, "shell_call_output")
    assert shell_call.action.timeout_ms == 1000
    [ran] = output.output
    assert ran.outcome.type == "timeout"


@needs_sandbox
async def test_streamed_shell_emits_its_events_in_order(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, call("shell", command="echo hi"), answer("Done."))
    events, final = await streamed(client, input="Say hi.", tools=[SHELL])
    [shell_call] = of_type(final, "shell_call")
    [output] = of_type(final, "shell_call_output")
    assert of_item(events, final.output.index(shell_call)) == [
        "response.output_item.added",
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
        "response.output_item.done",
    ]
    # The output streams as the command runs: one delta or more.
    assert collapsed(of_item(events, final.output.index(output))) == [
        "response.output_item.added",
        "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done",
        "response.output_item.done",
    ]


@needs_sandbox
async def test_a_shell_call_awaiting_approval_runs_once_approved(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, call("shell", command="echo approved"), answer("It ran."))
    asked = await client.responses.create(model=ASKING_MODEL, input="Run it.", tools=[SHELL])
    [request] = of_type(asked, "mcp_approval_request")
    [waiting] = of_type(asked, "shell_call_output")
    assert waiting.status == "incomplete"
    answered = await client.responses.create(
        model=ASKING_MODEL,
        previous_response_id=asked.id,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
        ],
        tools=[SHELL],
    )
    [ran] = of_type(answered, "shell_call_output")
    assert ran.output[0].stdout.strip() == "approved"
    assert ran.output[0].outcome.type == "exit"


@needs_sandbox
async def test_a_shell_commands_output_streams_as_it_runs(
    client: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, call("shell", command="echo first; sleep 1; echo second"), answer("Ok."))
    events, _ = await streamed(client, input="Run it.", tools=[SHELL])
    deltas = [e for e in events if e.type == "response.shell_call_output_content.delta"]
    assert len(deltas) >= 2
    assert "".join(d.delta.stdout or "" for d in deltas) == "first\nsecond\n"


# --- what cannot be served ------------------------------------------------------------------------


async def refusal(client: AsyncOpenAI, **fields: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(input="hi", **{"model": MODEL, **fields})
    return caught.value


@pytest.mark.parametrize(
    ("tool", "says"),
    [
        ({"type": "image_generation"}, "no images provider is configured"),
        ({"type": "file_search", "vector_store_ids": ["vs_1"]}, "file_search"),
    ],
)
async def test_hosted_tools_the_server_cannot_serve_are_a_400_naming_them(
    client: AsyncOpenAI, tool: dict[str, Any], says: str
) -> None:
    error = await refusal(client, tools=[tool])
    assert error.param == "tools"
    assert says in error.message


@pytest.mark.parametrize(
    ("tool", "toolset"), [(WEB_SEARCH, "web toolset"), (CODE_INTERPRETER, "code toolset")]
)
async def test_a_hosted_tool_whose_toolset_the_profile_lacks_is_a_400_naming_it(
    client: AsyncOpenAI, tool: dict[str, Any], toolset: str
) -> None:
    error = await refusal(client, model=FILES_MODEL, tools=[tool])
    assert error.param == "tools"
    assert toolset in error.message


NO_SEARCH_CONFIG = """\
server:
  data_dir: {data}
  api_keys: [{{key: {key}, principal: alice}}]
providers:
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
    tools: [web]
"""
"""A server whose web toolset has no search backend (``web.search`` unset)."""


async def test_web_search_without_a_search_backend_is_a_400_naming_the_setting(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    config = tmp_path / "hermes.yaml"
    config.write_text(
        NO_SEARCH_CONFIG.format(
            data=tmp_path,
            key=KEY,
            upstream=UPSTREAM,
            simulator=simulator.base_url,
            model=MODEL,
        )
    )
    port, log = free_port(), tmp_path / "server.log"
    with hermes_command("serve", "--config", str(config), port=port, log=log):
        async with AsyncOpenAI(
            http_client=DefaultAsyncHttpxClient(verify=TLS_UNUSED),
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key=KEY,
            max_retries=0,
            _strict_response_validation=True,
        ) as client:
            error = await refusal(client, tools=[WEB_SEARCH])
    assert error.param == "tools"
    assert "web.search" in error.message


async def test_tool_choice_naming_a_hosted_tool_the_request_lacks_is_a_400(
    client: AsyncOpenAI,
) -> None:
    error = await refusal(client, tool_choice=FORCE_WEB_SEARCH)
    assert error.param == "tool_choice"
    assert json.dumps("web_search")[1:-1] in error.message


@needs_sandbox
async def test_hosted_items_and_events_fit_the_documented_models(
    simulator: SimulatorServer, hosted_server: HostedServer
) -> None:
    script(
        simulator,
        call("web_search", query="brightwater"),
        call("code", code="print(1)"),
        call("shell", command="echo 2"),
        answer("Done."),
    )
    body = {
        "model": MODEL,
        "input": "Do it all.",
        "tools": [WEB_SEARCH, CODE_INTERPRETER, SHELL],
        "include": ["web_search_call.action.sources"],
        "stream": True,
    }
    async with http_client(hosted_server.base_url, KEY) as http:
        answered = await http.post("/v1/responses", json=body)
    frames = sse_data(answered.text)
    for frame in frames:
        ResponseStreamEvent.model_validate(frame)
    final = ResponseObject.model_validate(frames[-1]["response"])
    assert [item.type for item in final.output if item.type != "reasoning"] == [
        "web_search_call",
        "code_interpreter_call",
        "shell_call",
        "shell_call_output",
        "message",
    ]
