"""Episodic memory: at the start of a turn, what the owner's earlier sessions say about the new
message, recalled with the same search and scope as ``session_search`` (the owner's sessions,
less the current one) and handed to the loop as a note (``AgentRequest.recalled``).

The loop records the note in the transcript just after the user message, so it is part of the
conversation from then on: later turns' prompts keep the same prefix (and their provider cache),
and a stored session shows what the model was told.
"""

from __future__ import annotations

from typing import Any

from hermes_core.messages import Message, text_of
from hermes_core.stores import SessionHit, SessionSearchStore

RECALL_HEADER = (
    "Recalled from your earlier conversations with this user (it may help with the message "
    "above; it may be out of date):"
)
MESSAGE_CHARS = 400
"""Each recalled message is cut to this; a few episodes must not crowd out the turn."""
MAX_QUERY_CHARS = 2000
"""Only the start of a very long message is searched for."""


async def recall(
    search: SessionSearchStore,
    owner: str,
    user_message: str | list[dict[str, Any]] | None,
    *,
    limit: int,
    exclude: str | None,
) -> str | None:
    """The note of the ``limit`` past sessions of ``owner`` that best match ``user_message``
    (``exclude``: the current session), or None when nothing matches."""
    if limit <= 0 or user_message is None:
        return None
    query = text_of(user_message)[:MAX_QUERY_CHARS]
    if not query.strip():
        return None
    hits = await search.search(owner, query, limit=limit, exclude=exclude, every_word=False)
    if not hits:
        return None
    return "\n\n".join([RECALL_HEADER, *(_episode(hit) for hit in hits)])


def _episode(hit: SessionHit) -> str:
    title = f' "{hit.title}"' if hit.title else ""
    lines = [f"Session {hit.session_id}{title}:"]
    lines += [_line(message) for message in hit.messages if _line(message)]
    if len(lines) == 1:
        lines.append(f"  {hit.snippet}")
    return "\n".join(lines)


def _line(message: Message) -> str:
    if message["role"] not in ("user", "assistant"):
        return ""  # tool traffic and system notes: the conversation's words are the episode
    text = " ".join(text_of(message.get("content")).split())
    if not text:
        return ""
    if len(text) > MESSAGE_CHARS:
        text = text[:MESSAGE_CHARS] + "…"
    return f"  {message['role']}: {text}"
