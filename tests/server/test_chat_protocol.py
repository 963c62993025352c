"""How a chat request's messages become a run: the system layer, the history, the new turn."""

from __future__ import annotations

from server.protocol.chat import ChatCompletionRequest


def test_leading_system_messages_are_the_system_layer_and_later_ones_keep_their_place() -> None:
    body = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be helpful."},
                {"role": "developer", "content": "Use metric units."},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Hello."},
                {"role": "developer", "content": "Answer in French from now on."},
                {"role": "user", "content": "How warm is it?"},
            ],
        }
    )

    request = body.to_agent_request()

    assert request.system_message == "Be helpful.\n\nUse metric units."
    assert [(m["role"], m["content"]) for m in request.history] == [
        ("user", "hi"),
        ("assistant", "Hello."),
        ("system", "Answer in French from now on."),
    ]
    assert request.user_message == "How warm is it?"
