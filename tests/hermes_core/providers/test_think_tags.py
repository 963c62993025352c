"""<think> blocks at the start of a reply are reasoning, however the stream splits them."""

from __future__ import annotations

import pytest

from hermes_core.providers.chat_completions import ChatStreamAccumulator
from hermes_core.providers.think_tags import ThinkTags


def _split(*chunks: str) -> tuple[str, str]:
    """(reasoning, answer) of a reply that arrived in ``chunks``."""
    tags = ThinkTags()
    pieces = [piece for chunk in chunks for piece in tags.feed(chunk)] + tags.flush()
    reasoning = "".join(text for is_reasoning, text in pieces if is_reasoning)
    answer = "".join(text for is_reasoning, text in pieces if not is_reasoning)
    return reasoning, answer


@pytest.mark.parametrize(
    "chunks",
    [
        ("<think>Plan it.</think>\n\nThe answer.",),
        ("<thi", "nk>Plan", " it.</th", "ink>", "\n\n", "The answer."),
        ("  \n<think>", "Plan it.<", "/think>The answer."),
        ("<thinking>Plan it.</thinking>The answer.",),
    ],
)
def test_a_think_block_at_the_start_is_reasoning_wherever_the_chunks_split(
    chunks: tuple[str, ...],
) -> None:
    assert _split(*chunks) == ("Plan it.", "The answer.")


@pytest.mark.parametrize(
    "chunks",
    [("Use <think> in HTML.",), ("<", "b>bold</b>"), ("<",), ("x <think>y</think>",)],
)
def test_text_that_does_not_open_with_a_think_block_is_left_alone(
    chunks: tuple[str, ...],
) -> None:
    assert _split(*chunks) == ("", "".join(chunks))


def test_an_unclosed_think_block_is_all_reasoning() -> None:
    assert _split("<think>still thinking", " when cut") == ("still thinking when cut", "")


def test_the_chat_accumulator_keeps_think_blocks_out_of_the_answer() -> None:
    accumulator = ChatStreamAccumulator()
    for piece in ("<think>Hm", "m.</think>", "Hello."):
        accumulator.feed({"choices": [{"index": 0, "delta": {"content": piece}}]})
    accumulator.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    accumulator.flush()

    response = accumulator.finish(provider="p", model="m")

    assert response.message["content"] == "Hello."
    assert response.message.get("reasoning") == "Hmm."
