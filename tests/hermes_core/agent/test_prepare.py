"""prepare_messages: the model's view of a transcript, well-formed and cleaned, never mutated."""

from __future__ import annotations

import copy

from hermes_core.agent.prepare import (
    CONTINUE_PLACEHOLDER,
    MISSING_RESULT,
    prepare_messages,
    truncate_result,
)
from hermes_core.messages import Message, ToolCall


def _call(call_id: str, name: str = "read_file") -> ToolCall:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def _prepare(
    transcript: list[Message],
    *,
    system_prompt: str | None = None,
    max_tool_result_chars: int = 1000,
    tool_result_limits: dict[str, int] | None = None,
    last_tool_note: str | None = None,
    closing_user_note: str | None = None,
) -> list[Message]:
    return prepare_messages(
        transcript,
        system_prompt=system_prompt,
        max_tool_result_chars=max_tool_result_chars,
        tool_result_limits=tool_result_limits,
        last_tool_note=last_tool_note,
        closing_user_note=closing_user_note,
    )


def test_the_system_prompt_comes_first_and_a_history_system_message_keeps_its_place() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "system", "content": "Answer in French from now on."},
        {"role": "user", "content": "How are you?"},
    ]

    messages = _prepare(transcript, system_prompt="You are Hermes.  \r\n")

    assert messages == [
        {"role": "system", "content": "You are Hermes."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello."},
        {
            "role": "user",
            "content": "[System instruction] Answer in French from now on.\n\nHow are you?",
        },
    ]


def test_an_empty_transcript_without_a_system_prompt_gives_no_messages() -> None:
    assert _prepare([]) == []


def test_two_users_in_a_row_are_merged() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
    ]

    assert _prepare(transcript) == [{"role": "user", "content": "first\n\nsecond"}]


def test_two_assistants_in_a_row_are_merged_and_keep_the_later_tool_calls() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "thinking out loud"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "file text"},
    ]

    assert _prepare(transcript) == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "thinking out loud", "tool_calls": [_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "file text"},
    ]


def test_an_assistant_after_an_empty_tool_calls_list_is_merged_into_it() -> None:
    # Clients replaying OpenAI history often send an assistant message with "tool_calls": [].
    transcript: list[Message] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "one", "tool_calls": []},
        {"role": "assistant", "content": "two"},
    ]

    roles = [m["role"] for m in _prepare(transcript)]

    assert roles == ["user", "assistant"]


def test_an_assistant_first_gets_a_placeholder_user_before_it() -> None:
    transcript: list[Message] = [{"role": "assistant", "content": "hello again"}]

    assert _prepare(transcript) == [
        {"role": "user", "content": CONTINUE_PLACEHOLDER},
        {"role": "assistant", "content": "hello again"},
    ]


def test_tool_results_follow_their_calls_in_call_order() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "read both"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
    ]

    assert _prepare(transcript)[2:] == [
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
    ]


def test_a_call_without_a_result_gets_a_placeholder_result() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "read both"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "user", "content": "where is a?"},
    ]

    assert _prepare(transcript) == [
        {"role": "user", "content": "read both"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": MISSING_RESULT},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "user", "content": "where is a?"},
    ]


def test_an_interrupted_step_at_the_end_gets_placeholder_results() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a")]},
    ]

    assert _prepare(transcript)[-1] == {
        "role": "tool",
        "tool_call_id": "a",
        "content": MISSING_RESULT,
    }


def test_a_tool_result_without_its_call_is_dropped() -> None:
    transcript: list[Message] = [
        {"role": "tool", "tool_call_id": "ghost", "content": "lost"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "tool", "tool_call_id": "ghost", "content": "lost again"},
    ]

    assert _prepare(transcript) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]


def test_a_second_result_for_the_same_call_is_dropped() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "first"},
        {"role": "tool", "tool_call_id": "a", "content": "second"},
    ]

    assert _prepare(transcript)[2:] == [{"role": "tool", "tool_call_id": "a", "content": "first"}]


def test_a_result_after_the_next_user_message_is_dropped() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a")]},
        {"role": "user", "content": "never mind"},
        {"role": "tool", "tool_call_id": "a", "content": "late"},
    ]

    assert _prepare(transcript)[2:] == [
        {"role": "tool", "tool_call_id": "a", "content": MISSING_RESULT},
        {"role": "user", "content": "never mind"},
    ]


def test_lone_surrogates_are_removed() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "bad \ud800char"},
        {"role": "assistant", "content": [{"type": "text", "text": "\udfffpart"}]},
    ]

    assert _prepare(transcript, system_prompt="sys\udc00tem") == [
        {"role": "system", "content": "system"},
        {"role": "user", "content": "bad char"},
        {"role": "assistant", "content": [{"type": "text", "text": "part"}]},
    ]


def test_line_endings_are_normalised_and_trailing_whitespace_trimmed() -> None:
    transcript: list[Message] = [{"role": "user", "content": "  line one\r\nline two \t\n\n"}]

    assert _prepare(transcript) == [{"role": "user", "content": "  line one\nline two"}]


def test_text_parts_are_cleaned_and_other_parts_kept() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    transcript: list[Message] = [
        {"role": "user", "content": [{"type": "text", "text": "look\r\n "}, image]},
    ]

    assert _prepare(transcript) == [
        {"role": "user", "content": [{"type": "text", "text": "look"}, image]},
    ]


def test_merging_parts_with_text_gives_parts() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    transcript: list[Message] = [
        {"role": "user", "content": "what is this?"},
        {"role": "user", "content": [image]},
    ]

    assert _prepare(transcript) == [
        {"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]},
    ]


def test_an_oversize_tool_result_is_truncated_with_a_note() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "abcdefghij"},
    ]

    assert _prepare(transcript, max_tool_result_chars=4)[-1] == {
        "role": "tool",
        "tool_call_id": "a",
        "content": "abcd\n[Output truncated; original was 10 chars]",
    }


def test_a_tool_result_at_the_limit_is_kept_whole() -> None:
    assert truncate_result("abcd", 4) == "abcd"


def test_a_per_call_limit_overrides_the_default() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "0123456789"},
        {"role": "tool", "tool_call_id": "b", "content": "0123456789"},
    ]

    messages = _prepare(transcript, max_tool_result_chars=100, tool_result_limits={"b": 3})

    assert [m["content"] for m in messages[2:]] == [
        "0123456789",
        "012\n[Output truncated; original was 10 chars]",
    ]


def test_the_budget_note_is_appended_to_the_last_tool_result() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
    ]

    messages = _prepare(transcript, last_tool_note="[BUDGET: low]")

    assert [m["content"] for m in messages[2:]] == ["A", "B\n\n[BUDGET: low]"]


def test_the_budget_note_is_not_added_when_the_last_message_is_not_a_tool_result() -> None:
    transcript: list[Message] = [{"role": "user", "content": "go"}]

    assert _prepare(transcript, last_tool_note="[BUDGET: low]") == [
        {"role": "user", "content": "go"},
    ]


def test_the_closing_user_note_is_added_as_a_last_user_message() -> None:
    transcript: list[Message] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
    ]

    messages = _prepare(transcript, closing_user_note="Answer now.")

    assert messages[-1] == {"role": "user", "content": "Answer now."}
    assert len(messages) == 4


def test_the_closing_user_note_is_merged_into_a_trailing_user_message() -> None:
    transcript: list[Message] = [{"role": "user", "content": "go"}]

    assert _prepare(transcript, closing_user_note="Answer now.") == [
        {"role": "user", "content": "go\n\nAnswer now."},
    ]


def test_the_transcript_is_never_mutated() -> None:
    transcript: list[Message] = [
        {"role": "system", "content": "old"},
        {"role": "user", "content": "first \r\n"},
        {"role": "user", "content": [{"type": "text", "text": "second\ud800 "}]},
        {"role": "assistant", "content": "a"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "x" * 50},
        {"role": "tool", "tool_call_id": "orphan", "content": "o"},
    ]
    before = copy.deepcopy(transcript)

    messages = _prepare(
        transcript,
        system_prompt="sys",
        max_tool_result_chars=10,
        last_tool_note="note",
        closing_user_note="close",
    )

    assert transcript == before
    originals = {id(m) for m in transcript}
    assert not any(id(m) in originals for m in messages)
