"""Images in tool results, as each API mode sends them: over real HTTP to the simulator,
which refuses the shapes the real APIs refuse; and the placeholders of images already shown
or that the model cannot see."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from hermes_core.messages import Message
from hermes_core.providers import ModelRequest, ToolSchema
from hermes_core.providers.base import API_MODES, ApiMode
from hermes_core.providers.chat_completions import to_wire_messages
from hermes_core.providers.images import images_for_model
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.hermes_core.providers.conftest import ProviderFactory, collect, final
from tests.pictures import PNG

each_mode = pytest.mark.parametrize("api_mode", API_MODES)

PNG_B64 = base64.b64encode(PNG).decode()
DATA_URL = f"data:image/png;base64,{PNG_B64}"


def _call(call_id: str, name: str = "chart") -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
        ],
    }


def _image_result(call_id: str, text: str = "the chart") -> Message:
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": [
            {"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": DATA_URL}},
        ],
    }


def _sent(simulator: SimulatorServer, model: str) -> dict[str, Any]:
    [record] = simulator.state.requests(scenario=model)
    assert record.status == 200, record.body
    return record.body


def _script(simulator: SimulatorServer, model: str) -> None:
    simulator.state.script(model, Scenario(steps=[Step(reply=Reply(text="I see a dot."))]))


def _images_sent(api_mode: ApiMode, body: dict[str, Any]) -> list[str]:
    """The image data (base64) a request carried, wherever its protocol put it."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if value.get("type") == "image_url":
                found.append(value["image_url"]["url"].partition(",")[2])
            elif value.get("type") == "input_image":
                found.append(value["image_url"].partition(",")[2])
            elif value.get("type") == "image":
                found.append(value["source"]["data"])
            else:
                for inner in value.values():
                    walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(body.get("messages") if api_mode != "codex_responses" else body.get("input"))
    return found


@each_mode
async def test_a_tool_result_image_reaches_the_upstream_as_an_image_part(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    _script(simulator, "looker")
    messages: list[Message] = [
        {"role": "user", "content": "draw and check"},
        _call("call_1"),
        _image_result("call_1"),
    ]
    events = await collect(make_provider(api_mode, "looker"), ModelRequest(messages=messages))
    assert final(events).message["content"] == "I see a dot."
    body = _sent(simulator, "looker")
    assert _images_sent(api_mode, body) == [PNG_B64]
    if api_mode == "chat_completions":
        # A tool message is text; the image follows in a user message, after the results.
        tool, images = body["messages"][-2:]
        assert tool["role"] == "tool"
        assert tool["content"] == "the chart\n[1 image attached in the next message]"
        assert images["role"] == "user"
        assert images["content"][0] == {
            "type": "text",
            "text": "Image(s) returned by tool call call_1:",
        }
    elif api_mode == "codex_responses":
        output = body["input"][-1]
        assert output["type"] == "function_call_output"
        assert output["output"] == [
            {"type": "input_text", "text": "the chart"},
            {"type": "input_image", "image_url": DATA_URL, "detail": "auto"},
        ]
    else:
        [result] = body["messages"][-1]["content"]
        assert result["type"] == "tool_result"
        assert result["content"] == [
            {"type": "text", "text": "the chart"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
            },
        ]


@each_mode
async def test_an_image_shown_earlier_is_sent_as_a_placeholder(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    _script(simulator, "later")
    messages: list[Message] = [
        {"role": "user", "content": "draw and check"},
        _call("call_1"),
        _image_result("call_1"),
        _call("call_2", "lookup"),
        {"role": "tool", "tool_call_id": "call_2", "content": "42"},
    ]
    await collect(make_provider(api_mode, "later"), ModelRequest(messages=messages))
    body = _sent(simulator, "later")
    assert _images_sent(api_mode, body) == []
    text = json.dumps(body)
    assert PNG_B64 not in text
    assert "[image: image/png, 70 bytes; shown to you when the tool returned it" in text


@each_mode
async def test_a_model_that_cannot_see_gets_no_image_parts(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    _script(simulator, "blind")
    messages: list[Message] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": DATA_URL}},
            ],
        },
        _call("call_1"),
        _image_result("call_1"),
    ]
    request = ModelRequest(messages=messages, tools=[ToolSchema(name="vision_analyze")])
    await collect(make_provider(api_mode, "blind", vision=False), request)
    body = _sent(simulator, "blind")
    assert _images_sent(api_mode, body) == []
    text = json.dumps(body)
    assert PNG_B64 not in text
    # The tool's image can be looked at for the model; the user's only described.
    assert "you cannot see images: call vision_analyze with a question" in text
    assert text.count("you cannot see images") == 2


def test_placeholders_leave_the_transcript_untouched() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "go"},
        _call("call_1"),
        _image_result("call_1"),
        {"role": "assistant", "content": "done"},
    ]
    shown = images_for_model(messages, vision=True)
    assert messages[2] == _image_result("call_1")
    assert shown[2]["content"] == [
        {"type": "text", "text": "the chart"},
        {
            "type": "text",
            "text": "[image: image/png, 70 bytes; shown to you when the tool returned it; "
            "not repeated]",
        },
    ]
    assert shown[0] is messages[0]  # what does not change is not copied


def test_chat_images_ride_on_a_closing_user_message_rather_than_a_second_one() -> None:
    wire = to_wire_messages(
        [
            {"role": "user", "content": "go"},
            _call("call_1"),
            _image_result("call_1"),
            {"role": "user", "content": "Reply now."},
        ]
    )
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "user"]
    assert wire[-1]["content"][-1] == {"type": "text", "text": "Reply now."}
    assert wire[-1]["content"][1]["type"] == "image_url"


def test_chat_images_of_parallel_calls_follow_the_whole_block_of_results() -> None:
    calls = _call("a")
    calls["tool_calls"] = [*_call("a")["tool_calls"], *_call("b")["tool_calls"]]
    wire = to_wire_messages(
        [{"role": "user", "content": "go"}, calls, _image_result("a"), _image_result("b")]
    )
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "tool", "user"]
    intros = [p["text"] for p in wire[-1]["content"] if p["type"] == "text"]
    assert intros == ["Image(s) returned by tool call a:", "Image(s) returned by tool call b:"]
