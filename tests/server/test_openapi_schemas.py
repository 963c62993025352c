"""The OpenAPI document: every route's real answer and errors, and real answers that fit it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, get_args

import pytest

from hermes_core.events import (
    AgentEvent,
    ClientToolCallsPending,
    ExitReason,
    ReasoningDelta,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolFinished,
    ToolOutcome,
    ToolStarted,
)
from hermes_core.messages import ToolCall
from hermes_core.usage import Usage
from server.app import create_app
from server.errors import error_envelope
from server.protocol.responses import ResponseCreateRequest
from server.protocol.schemas.chat import ChatCompletion, ChatCompletionChunk
from server.protocol.schemas.common import ErrorEnvelope
from server.protocol.schemas.responses import (
    FunctionCallItem,
    ResponseObject,
    ResponseStreamEvent,
)
from server.protocol.schemas.runs import AgentEventKind
from server.services import Services
from server.views.chat import ChatCompletionBuilder, ChatStreamView
from server.views.responses import ResponsesView

ENVELOPE = {"$ref": "#/components/schemas/ErrorEnvelope"}
NEEDS_NO_KEY = {"/health", "/ready", "/v1/workspaces/signed/{token}/{name}"}
RUN = "run_1"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return create_app(Services(profiles=())).openapi()


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


# --- the document ---------------------------------------------------------------------------


def test_every_route_documents_a_non_empty_success_schema(document: dict[str, Any]) -> None:
    for path, method, operation in operations(document):
        successes = {k: v for k, v in operation["responses"].items() if k.startswith("2")}
        assert successes, f"{method} {path}"
        for response in successes.values():
            schemas = [media.get("schema") for media in response.get("content", {}).values()]
            assert schemas, f"{method} {path}"
            assert all(schemas), f"{method} {path} documents an empty success schema"


def test_every_route_that_needs_a_key_documents_401_in_the_envelope(
    document: dict[str, Any],
) -> None:
    for path, method, operation in operations(document):
        if path in NEEDS_NO_KEY:
            continue
        unauthorised = operation["responses"].get("401", {})
        assert unauthorised.get("content") == {"application/json": {"schema": ENVELOPE}}, (
            f"{method} {path}"
        )


def test_no_route_documents_fastapi_422_which_is_never_sent(document: dict[str, Any]) -> None:
    for path, method, operation in operations(document):
        assert "422" not in operation["responses"], f"{method} {path}"
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_routes_that_validate_input_document_400_in_the_envelope(
    document: dict[str, Any],
) -> None:
    for path, method, operation in operations(document):
        if "requestBody" in operation or any(
            p["in"] == "query" for p in operation.get("parameters", ())
        ):
            bad_request = operation["responses"]["400"]["content"]["application/json"]
            assert bad_request == {"schema": ENVELOPE}, f"{method} {path}"


@pytest.mark.parametrize(
    ("method", "path", "model", "frame"),
    [
        ("post", "/v1/chat/completions", "ChatCompletion", "ChatCompletionChunk"),
        ("post", "/v1/responses", "ResponseObject", "ResponseStreamEvent"),
        ("get", "/v1/responses/{response_id}", "ResponseObject", "ResponseStreamEvent"),
    ],
)
def test_streaming_routes_document_json_and_sse(
    document: dict[str, Any], method: str, path: str, model: str, frame: str
) -> None:
    content = document["paths"][path][method]["responses"]["200"]["content"]
    assert content == {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{model}"}},
        "text/event-stream": {"schema": {"$ref": f"#/components/schemas/{frame}"}},
    }


def test_run_events_are_documented_as_sse_only(document: dict[str, Any]) -> None:
    content = document["paths"]["/v1/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]
    assert content == {"text/event-stream": {"schema": {"$ref": "#/components/schemas/RunEvent"}}}


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    prefix = "#/components/schemas/"
    for ref in set(refs(document)):
        assert ref.startswith(prefix), ref
        assert ref.removeprefix(prefix) in schemas, ref


# --- real answers fit the documented models -----------------------------------------------


def test_an_error_envelope_is_the_documented_one() -> None:
    envelope = error_envelope(404, "No run 'x'.", param="run_id", code="run_not_found")
    assert ErrorEnvelope.model_validate(envelope).model_dump() == envelope


def test_a_response_shell_has_exactly_the_documented_required_keys() -> None:
    shell = ResponseCreateRequest(model="m", input="hi").shell(
        response_id="resp_1", created_at=1, model="m"
    )
    ResponseObject.model_validate(shell)
    required = {name for name, field in ResponseObject.model_fields.items() if field.is_required()}
    assert required == set(shell)
    assert len(required) == 31


def run_events() -> list[AgentEvent]:
    """A run with reasoning, a server tool, text and a client tool call: one of each item."""
    call: ToolCall = {
        "id": "call_9",
        "type": "function",
        "function": {"name": "f", "arguments": "{}"},
    }
    return [
        RunStarted(run_id=RUN, seq=0, task_id="t", model="m", provider="p", budget=10),
        ReasoningDelta(run_id=RUN, seq=1, text="Let me look."),
        ToolStarted(
            run_id=RUN, seq=2, call_id="c1", name="lookup", arguments={"q": 1}, summary="lookup 1"
        ),
        ToolFinished(
            run_id=RUN,
            seq=3,
            call_id="c1",
            name="lookup",
            outcome=ToolOutcome.SUCCESS,
            duration_s=0.01,
            result_preview="one",
        ),
        TextDelta(run_id=RUN, seq=4, text="Hello"),
        ClientToolCallsPending(run_id=RUN, seq=5, tool_calls=[call]),
        finished(ExitReason.AWAITING_CLIENT_TOOLS),
    ]


def finished(reason: ExitReason, error: str | None = None) -> RunFinished:
    usage = Usage(input_tokens=10, cache_read_tokens=4, output_tokens=5, reasoning_tokens=2)
    return RunFinished(
        run_id=RUN,
        seq=6,
        exit_reason=reason,
        final_text="Hello",
        iterations=2,
        usage=usage,
        model_calls=2,
        error=error,
        session_id="s1",
    )


@pytest.mark.parametrize("progress", ["reasoning", "events", "openwebui"])
def test_a_responses_stream_fits_the_documented_events(progress: Any) -> None:
    shell = ResponseCreateRequest(model="m", input="hi", user="u").shell(
        response_id="resp_1", created_at=1, model="m"
    )
    view = ResponsesView(shell, progress=progress, completed_at=2)
    frames = view.opening() + [frame for event in run_events() for frame in view.handle(event)]
    for frame in frames:
        ResponseStreamEvent.model_validate(frame)
    final = ResponseObject.model_validate(view.response)
    assert final.hermes is not None
    assert {item.type for item in final.output} >= {"message", "reasoning", "function_call"}


def test_a_failed_responses_stream_fits_the_documented_events() -> None:
    shell = ResponseCreateRequest(model="m", input="hi").shell(
        response_id="resp_1", created_at=1, model="m"
    )
    view = ResponsesView(shell)
    frames = view.opening() + view.handle(finished(ExitReason.FAILED, "upstream down"))
    events = [ResponseStreamEvent.model_validate(frame) for frame in frames]
    assert [event.type for event in events[-2:]] == ["error", "response.failed"]


def test_a_chat_stream_and_completion_fit_the_documented_models() -> None:
    view = ChatStreamView(completion_id="chatcmpl-1", model="m", created=1, include_usage=True)
    builder = ChatCompletionBuilder(completion_id="chatcmpl-1", model="m", created=1)
    events = run_events()
    for event in events:
        for frame in view.handle(event):
            ChatCompletionChunk.model_validate(frame)
        builder.add(event)
    end = events[-1]
    assert isinstance(end, RunFinished)
    completion = ChatCompletion.model_validate(builder.build(end))
    assert completion.choices[0].message.tool_calls


def test_documented_run_event_kinds_are_the_agent_event_kinds() -> None:
    kinds = {field.default for kind in get_args(AgentEvent) for field in _kind_fields(kind)}
    assert set(get_args(AgentEventKind)) == kinds


def _kind_fields(event_type: type[Any]) -> list[dataclasses.Field[Any]]:
    return [field for field in dataclasses.fields(event_type) if field.name == "kind"]


def test_an_open_webui_stream_with_a_failed_command_fits_the_documented_events() -> None:
    shell = ResponseCreateRequest(model="m", input="hi").shell(
        response_id="resp_1", created_at=1, model="m"
    )
    view = ResponsesView(shell, progress="openwebui", completed_at=2)
    report = "[exit code 3; 0.0 s]\nhalf-done"
    ran = ToolFinished(
        run_id=RUN, seq=1, call_id="c1", name="shell", outcome=ToolOutcome.SUCCESS,
        duration_s=0.01, result_preview=report,
    )  # fmt: skip
    events: list[AgentEvent] = [
        ToolStarted(run_id=RUN, seq=0, call_id="c1", name="shell", arguments={}, summary="x"),
        ran,
        finished(ExitReason.COMPLETED),
    ]
    frames = view.opening() + [frame for event in events for frame in view.handle(event)]
    for frame in frames:
        ResponseStreamEvent.model_validate(frame)
    final = ResponseObject.model_validate(view.response)
    cards = [item for item in final.output if isinstance(item, FunctionCallItem)]
    assert [card.status for card in cards] == ["failed"]
