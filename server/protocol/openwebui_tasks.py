"""Which requests are Open WebUI's side tasks (a chat's title, tags, follow-ups, search
queries, autocompletion...): answered by one plain model call, outside the conversation.

The reliable signal is the task's name in a header: Open WebUI fills a connection's custom
header ``X-OpenWebUI-Task: {{TASK}}`` with it on side tasks, and sends it empty on the
conversation's own turns. Without that header, a side task is recognised by its prompt: one
user message that starts with ``### Task:``. Open WebUI's RAG template starts so too, with a
file's or a knowledge base's sources in a ``<context>`` block and the user's query after it; its
task templates quote the chat in a ``<chat_history>`` block instead. So a ``### Task:`` prompt
whose first such block is ``<context>`` is a turn of the conversation, not a side task.
"""

from __future__ import annotations

from collections.abc import Mapping

TASK_HEADER = "x-openwebui-task"
TASK_PREFIX = "### Task:"


def is_task_prompt(text: str) -> bool:
    """``text`` (the last user message) is one of Open WebUI's side-task prompts."""
    prompt = text.lstrip()
    if not prompt.startswith(TASK_PREFIX):
        return False
    context = prompt.find("<context>")
    if context < 0:
        return True
    history = prompt.find("<chat_history>")
    return 0 <= history < context


def is_side_task(headers: Mapping[str, str], *, prompt_says: bool) -> bool:
    """The header's word when the client sends it (a task's name, or empty on a turn of the
    conversation), else what the prompt says (``prompt_says``)."""
    named = headers.get(TASK_HEADER)
    if named is None:
        return prompt_says
    return bool(named.strip())
