"""is_task_prompt(): Open WebUI 0.12.4's side-task prompts against its RAG template, both of
which start with ``### Task:`` (the templates abridged from ``open_webui/config.py``)."""

from __future__ import annotations

import pytest

from server.protocol.openwebui_tasks import is_side_task, is_task_prompt

HISTORY = "<chat_history>\nUSER: hello\nASSISTANT: hi\n</chat_history>"
TASKS = {
    "title": "### Task:\nGenerate a concise title summarizing the chat history.\n"
    f'### Output:\nJSON format: {{ "title": "…" }}\n### Chat History:\n{HISTORY}',
    "tags": "### Task:\nGenerate 1-3 broad tags categorizing the main themes of the chat "
    f"history.\n\n### Chat History:\n{HISTORY}",
    "follow-ups": "### Task:\nPredict 3-5 useful messages this user might naturally send "
    f"next.\n### Chat History:\n{HISTORY}",
    "queries": "### Task:\nAnalyze the chat history to determine the necessity of generating "
    f"search queries.\n\n### Chat History:\n{HISTORY}\n",
    "autocomplete": "### Task:\nYou are an autocompletion system.\n---\n### Context:\n"
    f"{HISTORY}\n<type>General</type>\n<text>The sun</text>\n#### Output:\n",
    # A chat that quoted a RAG context is still a title task: its history comes first.
    "title of a chat about RAG": "### Task:\nGenerate a concise title.\n### Chat History:\n"
    "<chat_history>\nUSER: what does <context> mean in a prompt?\n</chat_history>",
    "a custom task with no chat history": "### Task:\nName this chat.",
}
RAG = (
    "### Task:\nRespond to the user query using the provided context, incorporating inline "
    "citations in the format [id] **only when the <source> tag includes an explicit id "
    'attribute** (e.g., <source id="1">).\n\n### Output:\nProvide a clear and direct '
    'response.\n\n<context>\n<source id="1" name="notes.md">{body}</source>\n</context>\n\n'
    "{query}"
)


@pytest.mark.parametrize("prompt", TASKS.values(), ids=TASKS.keys())
def test_open_webuis_task_prompts_are_side_tasks(prompt: str) -> None:
    assert is_task_prompt(prompt)


def test_the_rag_template_with_the_users_query_is_no_side_task() -> None:
    assert not is_task_prompt(RAG.format(body="Sales rose.", query="What rose?"))


def test_a_rag_source_that_quotes_a_chat_history_is_no_side_task() -> None:
    body = "<chat_history>\nUSER: old chat\n</chat_history>"
    assert not is_task_prompt(RAG.format(body=body, query="Summarise the notes."))


def test_a_plain_message_is_no_side_task() -> None:
    assert not is_task_prompt("What is a ### Task: heading?")


@pytest.mark.parametrize(
    ("headers", "prompt_says", "side_task"),
    [
        ({}, True, True),
        ({}, False, False),
        ({"x-openwebui-task": "title_generation"}, False, True),
        ({"x-openwebui-task": ""}, True, False),
        ({"x-openwebui-task": " "}, True, False),
    ],
)
def test_the_task_header_decides_when_it_is_sent(
    headers: dict[str, str], prompt_says: bool, side_task: bool
) -> None:
    assert is_side_task(headers, prompt_says=prompt_says) is side_task
