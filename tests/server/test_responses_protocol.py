"""The request side of POST /v1/responses: parsing, input items → AgentRequest, the shell."""

from __future__ import annotations

import base64
import json
import zlib
from importlib.resources import files
from typing import Any

import jsonschema
import pytest
from openai.types.responses import Response
from pydantic import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from hermes_core.messages import Message
from hermes_core.providers.base import ForcedTool, ToolSchema
from server.errors import APIError
from server.protocol import response_input
from server.protocol.response_input import decode_compaction, encode_compaction
from server.protocol.responses import ResponseCreateRequest

LOOKUP: dict[str, Any] = {
    "type": "function",
    "name": "lookup",
    "description": "Look a word up.",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    "strict": True,
}
SHELL_KEYS = {
    "id", "object", "created_at", "completed_at", "status", "incomplete_details", "model",
    "previous_response_id", "instructions", "output", "error", "tools", "tool_choice",
    "truncation", "parallel_tool_calls", "text", "top_p", "presence_penalty",
    "frequency_penalty", "temperature", "top_logprobs", "reasoning", "usage",
    "max_output_tokens", "max_tool_calls", "store", "background", "service_tier", "metadata",
    "safety_identifier", "prompt_cache_key",
}  # fmt: skip


def request(**fields: Any) -> ResponseCreateRequest:
    return ResponseCreateRequest.model_validate({"model": "hermes-agent", **fields})


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def refused(param: str, **fields: Any) -> APIError:
    """The 400 a request is refused with, whether at parsing or at conversion."""
    with pytest.raises(APIError) as caught:
        request(**fields).to_agent_request()
    assert (caught.value.status, caught.value.param) == (400, param)
    return caught.value


# --- input → AgentRequest ---------------------------------------------------------------------


def test_a_string_input_is_the_new_user_message() -> None:
    agent_request = request(input="hello").to_agent_request()
    assert agent_request.user_message == "hello"
    assert list(agent_request.history) == []
    assert agent_request.system_message is None


def test_an_empty_input_continues_the_history_without_a_user_message() -> None:
    agent_request = request(previous_response_id="resp_1").to_agent_request()
    assert agent_request.user_message is None
    assert request().input_items() == []


def test_instructions_system_and_developer_messages_layer_into_the_system_message() -> None:
    agent_request = request(
        instructions="Be brief.",
        input=[
            {"role": "system", "content": "You are terse."},
            {"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "Answer in English."},
            ]},
            user("hi"),
        ],
    ).to_agent_request()  # fmt: skip
    assert agent_request.system_message == "Be brief.\n\nYou are terse.\n\nAnswer in English."
    assert agent_request.user_message == "hi"


def test_assistant_turns_become_history_and_phase_is_ignored() -> None:
    agent_request = request(
        input=[
            user("Name a colour."),
            {"role": "assistant", "content": "Blue.", "phase": "final_answer"},
            user("Another?"),
            {"type": "message", "role": "assistant", "phase": "commentary", "content": [
                {"type": "output_text", "text": "Red", "annotations": []},
                {"type": "refusal", "refusal": " (no more)"},
            ]},
            user("Thanks."),
        ],
    ).to_agent_request()  # fmt: skip
    assert list(agent_request.history) == [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another?"},
        {"role": "assistant", "content": "Red (no more)"},
    ]
    assert agent_request.user_message == "Thanks."


def test_a_function_call_and_its_output_become_tool_calls_and_a_tool_message() -> None:
    agent_request = request(
        input=[
            user("Look up 'cat'."),
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup",
             "arguments": '{"word": "cat"}', "status": "completed"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a small feline"},
        ],
    ).to_agent_request()  # fmt: skip
    assert agent_request.user_message is None
    assert list(agent_request.history) == [
        {"role": "user", "content": "Look up 'cat'."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"word": "cat"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a small feline"},
    ]  # fmt: skip


def test_consecutive_function_calls_merge_with_the_preceding_assistant_text() -> None:
    history = (
        request(
            input=[
                user("Look up two words."),
                {"role": "assistant", "content": "Looking both up."},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "call_a", "name": "lookup", "arguments": "{}"},
                {"type": "function_call", "call_id": "call_b", "name": "lookup", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_a", "output": "A"},
                {"type": "function_call_output", "call_id": "call_b", "output": "B"},
            ],
        )
        .to_agent_request()
        .history
    )
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool"]
    assert history[1]["content"] == "Looking both up."
    assert [call["id"] for call in history[1]["tool_calls"]] == ["call_a", "call_b"]


def test_function_call_output_parts_are_joined_as_text() -> None:
    history = request(
        input=[
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": [
                {"type": "input_text", "text": "one, "},
                {"type": "input_image", "image_url": "https://example.com/x.png"},
                {"type": "input_text", "text": "two"},
            ]},
        ],
    ).to_agent_request().history  # fmt: skip
    assert history[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "one, two"}


def test_reasoning_items_are_dropped() -> None:
    agent_request = request(
        input=[
            user("hi"),
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "…"}],
             "encrypted_content": "opaque"},
            {"role": "assistant", "content": "hello"},
            user("bye"),
        ],
    ).to_agent_request()  # fmt: skip
    assert list(agent_request.history) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]


def test_a_base64_image_data_url_becomes_an_image_url_part() -> None:
    data_url = "data:image/jpeg;base64,/9j/4AAQSkZJRg=="
    agent_request = request(
        input=[{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": data_url, "detail": "auto"},
        ]}],
    ).to_agent_request()  # fmt: skip
    assert agent_request.user_message == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": data_url}},
    ]


def test_an_input_file_becomes_the_file_part_the_server_places_in_the_workspace() -> None:
    pdf = "data:application/pdf;base64," + base64.b64encode(b"%PDF-1.4 tiny").decode()
    agent_request = request(
        input=[{"role": "user", "content": [
            {"type": "input_file", "filename": "tiny.pdf", "file_data": pdf},
            {"type": "input_file", "file_id": "file-123"},
            {"type": "input_file", "file_url": "https://example.com/a.pdf"},
            {"type": "input_text", "text": "Summarise."},
        ]}],
    ).to_agent_request()  # fmt: skip
    assert agent_request.user_message == [
        {"type": "file", "file": {"file_data": pdf, "filename": "tiny.pdf"}},
        {"type": "file", "file": {"file_id": "file-123"}},
        {"type": "text", "text": "[file (unnamed) at https://example.com/a.pdf: not fetched]"},
        {"type": "text", "text": "Summarise."},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ({"type": "item_reference", "id": "msg_1"}, "use previous_response_id"),
        ({"id": "msg_1"}, "item_reference"),
        ({"type": "file_search_call", "id": "fs_1"}, "file_search_call"),
        ({"role": "tool", "content": "x"}, "'tool'"),
        ({"role": "user", "content": [{"type": "input_image"}]}, "image_url or a file_id"),
        ({"role": "user", "content": [{"type": "input_audio"}]}, "input_audio"),
        ({"role": "user", "content": None}, "needs content"),
        ({"role": "system", "content": [{"type": "input_image", "image_url": "u"}]}, "only"),
        ({"type": "function_call", "name": "lookup", "arguments": "{}"}, "call_id"),
        ({"type": "function_call_output", "output": "x"}, "call_id"),
    ],
)
def test_unsupported_input_is_a_400_naming_input(item: dict[str, Any], says: str) -> None:
    assert says in refused("input", input=[item]).message


# --- compaction items ---------------------------------------------------------------------------


def test_compaction_items_splice_their_messages_into_the_history() -> None:
    summary: list[Message] = [
        {"role": "user", "content": "Summary of our talk so far: cats, in détail."},
        {"role": "assistant", "content": "Understood."},
    ]
    encoded = encode_compaction(summary)
    assert encoded.startswith("hermes.v1.")
    assert decode_compaction(encoded) == summary
    agent_request = request(
        input=[
            {"type": "compaction", "id": "cmp_1", "encrypted_content": encoded},
            user("And dogs?"),
        ],
    ).to_agent_request()
    assert list(agent_request.history) == summary
    assert agent_request.user_message == "And dogs?"


def _packed(data: bytes) -> str:
    return "hermes.v1." + base64.urlsafe_b64encode(zlib.compress(data)).decode()


@pytest.mark.parametrize(
    "content",
    [
        "not-ours",
        "hermes.v1.!!!",
        "hermes.v1.é",
        encode_compaction([{"role": "user", "content": "hi"}])[:-6],
        _packed(b"not json"),
        _packed(b'{"role": "user"}'),
        _packed(b'[{"role": "wizard", "content": "x"}]'),
        _packed(b"[" * 100_000),
        12,
    ],
)
def test_a_damaged_compaction_item_is_a_400(content: object) -> None:
    refused("input", input=[{"type": "compaction", "encrypted_content": content}])


def test_an_oversized_compaction_item_is_a_400() -> None:
    encoded = encode_compaction([{"role": "user", "content": "x" * 1000}])
    with pytest.raises(APIError) as caught:
        decode_compaction(encoded, budget=100)
    assert caught.value.param == "input"


def test_compaction_items_may_not_inflate_past_one_budget_together() -> None:
    # Each item alone is under the budget (a zip bomb comes in pieces too): together, not.
    third = response_input.MAX_INFLATED_BYTES // 3
    bomb = encode_compaction([{"role": "user", "content": " " * third}])
    assert len(bomb) < 100_000  # a few kilobytes on the wire
    item = {"type": "compaction", "encrypted_content": bomb}
    refusal = refused("input", input=[item, item, item, item])
    assert "inflate past" in refusal.message


# --- tools and tool_choice ----------------------------------------------------------------------


def test_flat_function_tools_become_tool_schemas() -> None:
    bare = {"type": "function", "name": "now"}
    agent_request = request(input="hi", tools=[LOOKUP, bare]).to_agent_request()
    assert list(agent_request.client_tools) == [
        ToolSchema(name="lookup", description="Look a word up.", parameters=LOOKUP["parameters"]),
        ToolSchema(name="now"),
    ]


def test_without_client_tools_none_are_declared() -> None:
    agent_request = request(input="hi", tools=[LOOKUP]).to_agent_request(with_client_tools=False)
    assert agent_request.client_tools == ()


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "computer_use_preview"},
        {"type": "function", "function": {"name": "nested_like_chat"}},
        {"type": "function", "name": "has space"},
        {"type": "function", "name": "x" * 65},
        {"type": "function", "name": "lookup", "parameters": "not a schema"},
        {"type": "function", "name": "lookup", "strict": "yes"},
    ],
)
def test_tools_other_than_flat_functions_with_valid_names_are_refused(
    tool: dict[str, Any],
) -> None:
    refused("tools", tools=[tool])


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "auto"),
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ({"type": "function", "name": "lookup"}, ForcedTool(name="lookup")),
        ({"type": "allowed_tools", "mode": "required", "tools": []}, "required"),
    ],
)
def test_every_tool_choice_form_maps_to_the_agent(given: Any, expected: Any) -> None:
    agent_request = request(input="hi", tools=[LOOKUP], tool_choice=given).to_agent_request()
    assert agent_request.tool_choice == expected


def test_allowed_tools_restricts_the_client_tools() -> None:
    agent_request = request(
        input="hi",
        tools=[LOOKUP, {"type": "function", "name": "now"}],
        tool_choice={"type": "allowed_tools", "mode": "auto",
                     "tools": [{"type": "function", "name": "now"}]},
    ).to_agent_request()  # fmt: skip
    assert agent_request.tool_choice == "auto"
    assert [tool.name for tool in agent_request.client_tools] == ["now"]


@pytest.mark.parametrize(
    "given",
    [
        "sometimes",
        {"type": "function"},
        {"type": "web_search_preview"},
        {"type": "allowed_tools", "mode": "sometimes", "tools": []},
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "mcp", "server_label": "x"}]},
    ],
)
def test_an_invalid_tool_choice_is_a_400(given: Any) -> None:
    refused("tool_choice", tool_choice=given)


# --- request-level checks -----------------------------------------------------------------------


def test_generation_options_reach_the_agent_request() -> None:
    agent_request = request(
        input="hi", max_output_tokens=256, temperature=0.2, reasoning={"effort": "high"}
    ).to_agent_request()
    assert (agent_request.max_tokens, agent_request.temperature) == (256, 0.2)
    assert agent_request.reasoning_effort == "high"


def test_unknown_fields_are_accepted() -> None:
    assert request(input="hi", prompt_cache_retention="24h", moderation={}).input == "hi"


@pytest.mark.parametrize(
    "metadata",
    [
        {f"k{i}": "v" for i in range(17)},
        {"k" * 65: "v"},
        {"k": "v" * 513},
    ],
)
def test_metadata_beyond_openai_limits_is_a_validation_error(metadata: dict[str, str]) -> None:
    with pytest.raises(ValidationError) as caught:
        request(metadata=metadata)
    assert caught.value.errors()[0]["loc"] == ("metadata",)


def test_metadata_at_openai_limits_is_accepted() -> None:
    metadata = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    assert request(metadata=metadata).metadata == metadata


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"model": ""}, "model"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"truncation": "sometimes"}, "truncation"),
    ],
)
def test_out_of_range_fields_are_validation_errors(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(ValidationError) as caught:
        request(**fields)
    assert caught.value.errors()[0]["loc"] == (param,)


def test_a_conversation_is_an_id_or_an_object_and_not_with_previous_response_id() -> None:
    assert request(conversation="conv_1").conversation_id() == "conv_1"
    assert request(conversation={"id": "conv_1"}).conversation_id() == "conv_1"
    refused("conversation", conversation={"id": 5})
    both = refused("conversation", conversation="conv_1", previous_response_id="resp_1")
    assert "previous_response_id" in both.message
    refused("store", conversation="conv_1", store=False)


def test_a_background_response_must_be_stored() -> None:
    refused("background", background=True, store=False)
    assert request(background=True).background


@pytest.mark.parametrize(
    "text_format",
    [
        {"type": "yaml"},
        {"type": "json_schema", "schema": {"type": "object"}},
        {"type": "json_schema", "name": "x"},
        {"type": "json_schema", "name": "x", "schema": {"type": "nonsense"}},
    ],
)
def test_unknown_or_incomplete_text_formats_are_refused(text_format: dict[str, Any]) -> None:
    refused("text.format", text={"format": text_format})


def test_a_json_schema_text_format_becomes_the_runs_output_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    text = {"format": {"type": "json_schema", "name": "x", "schema": schema, "strict": True}}

    output = request(text=text).to_agent_request().output_format

    assert output is not None
    assert (output.kind, output.name, output.schema, output.strict) == (
        "json_schema",
        "x",
        schema,
        True,
    )
    assert request(text={"format": {"type": "text"}, "verbosity": "low"}).text
    assert request(text={"format": {"type": "text"}}).to_agent_request().output_format is None


# --- input_items --------------------------------------------------------------------------------


def test_input_items_assign_ids_keep_given_ones_and_are_stable() -> None:
    body = request(
        input=[
            user("hi"),
            {"type": "message", "id": "msg_given", "role": "assistant", "content": "hello"},
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "x"},
            {"type": "reasoning", "summary": []},
            {"type": "compaction", "encrypted_content": encode_compaction([])},
        ]
    )
    items = body.input_items()
    ids = [item["id"] for item in items]
    assert ids[1] == "msg_given"
    assert [i.split("_")[0] for i in ids] == ["msg", "msg", "fc", "fco", "rs", "cmp"]
    assert len(ids[0]) == len("msg_") + 24
    assert [item["id"] for item in body.input_items()] == ids


def test_input_items_normalise_messages_without_touching_the_request() -> None:
    body = request(input=[user("hi"), {"role": "assistant", "content": "hello"}])
    first, second = body.input_items()
    assert first == {
        "type": "message",
        "id": first["id"],
        "role": "user",
        "content": [{"type": "input_text", "text": "hi"}],
    }
    assert second["content"] == [{"type": "output_text", "text": "hello", "annotations": []}]
    assert body.input == [user("hi"), {"role": "assistant", "content": "hello"}]


def test_a_string_input_is_one_user_message_item() -> None:
    (item,) = request(input="hello").input_items()
    assert (item["type"], item["role"]) == ("message", "user")
    assert item["id"].startswith("msg_")
    assert item["content"] == [{"type": "input_text", "text": "hello"}]


# --- shell --------------------------------------------------------------------------------------


def _rich() -> ResponseCreateRequest:
    return request(
        input="hi",
        instructions="Be brief.",
        tools=[LOOKUP, {"type": "function", "name": "now"}],
        tool_choice={"type": "function", "name": "lookup"},
        reasoning={"effort": "low", "summary": "auto"},
        metadata={"team": "blue"},
        text={"format": {"type": "text"}, "verbosity": "low"},
        max_output_tokens=512,
        temperature=0.5,
        user="u-1",
        previous_response_id="resp_0",
        prompt_cache_key="pk",
    )


def test_the_shell_has_exactly_the_31_response_resource_keys() -> None:
    shell = request(input="hi").shell(response_id="resp_1", created_at=1767000000, model="m")
    assert len(SHELL_KEYS) == 31
    assert set(shell) == SHELL_KEYS
    assert shell == {
        "id": "resp_1", "object": "response", "created_at": 1767000000, "completed_at": None,
        "status": "in_progress", "incomplete_details": None, "model": "m",
        "previous_response_id": None, "instructions": None, "output": [], "error": None,
        "tools": [], "tool_choice": "auto", "truncation": "disabled", "parallel_tool_calls": True,
        "text": {"format": {"type": "text"}}, "top_p": 1.0, "presence_penalty": 0.0,
        "frequency_penalty": 0.0, "temperature": 1.0, "top_logprobs": 0, "reasoning": None,
        "usage": None, "max_output_tokens": None, "max_tool_calls": None, "store": True,
        "background": False, "service_tier": "default", "metadata": {},
        "safety_identifier": None, "prompt_cache_key": None,
    }  # fmt: skip


def test_the_shell_echoes_the_request() -> None:
    shell = _rich().shell(response_id="resp_1", created_at=1767000000, model="m", status="queued")
    assert set(shell) == SHELL_KEYS | {"user"}
    assert isinstance(shell["created_at"], int)
    assert shell["status"] == "queued"
    assert shell["tools"] == [
        LOOKUP,
        {"type": "function", "name": "now", "description": None, "parameters": None,
         "strict": None},
    ]  # fmt: skip
    assert shell["tool_choice"] == {"type": "function", "name": "lookup"}
    assert shell["reasoning"] == {"effort": "low", "summary": "auto"}
    assert shell["text"] == {"format": {"type": "text"}, "verbosity": "low"}
    assert (shell["temperature"], shell["max_output_tokens"]) == (0.5, 512)
    assert (shell["instructions"], shell["previous_response_id"]) == ("Be brief.", "resp_0")
    assert (shell["metadata"], shell["user"], shell["prompt_cache_key"]) == (
        {"team": "blue"},
        "u-1",
        "pk",
    )


@pytest.mark.parametrize("body", [request(), _rich()], ids=["plain", "rich"])
def test_the_shell_validates_with_the_openai_sdk(body: ResponseCreateRequest) -> None:
    shell = body.shell(response_id="resp_1", created_at=1767000000, model="m")
    parsed = Response.model_validate(shell)
    assert (parsed.id, parsed.output) == ("resp_1", [])


@pytest.mark.parametrize("body", [request(), _rich()], ids=["plain", "rich"])
def test_the_shell_validates_against_the_open_responses_schema(
    body: ResponseCreateRequest,
) -> None:
    # The schema llm-comply validates every Response with (Open Responses 2026-04-24).
    spec = json.loads((files("llm_comply") / "specs" / "openresponses.json").read_text())
    registry = Registry().with_resource(
        "urn:open-responses", Resource.from_contents(spec, default_specification=DRAFT202012)
    )
    validator = jsonschema.Draft202012Validator(
        {"$ref": "urn:open-responses#/components/schemas/ResponseResource"}, registry=registry
    )
    shell = body.shell(response_id="resp_1", created_at=1767000000, model="m")
    assert [error.message for error in validator.iter_errors(shell)] == []


def test_a_developer_message_after_the_first_turn_keeps_its_place() -> None:
    agent_request = request(
        instructions="Be helpful.",
        input=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "developer", "content": "Answer in French from now on."},
            {"role": "user", "content": "How warm is it?"},
        ],
    ).to_agent_request()

    assert agent_request.system_message == "Be helpful."
    assert [m["role"] for m in agent_request.history] == ["user", "assistant", "system"]
