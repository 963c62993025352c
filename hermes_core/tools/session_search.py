"""The ``session_search`` tool: full-text search over the owner's earlier sessions.

The factory closes over a :class:`~hermes_core.stores.SessionSearchStore` and one owner, so the
model can never search another owner's sessions. Bad arguments come back as an ``Error: …``
string instead of an exception: the model reads it as the tool result and can correct its next
call.
"""

from __future__ import annotations

import json
from typing import Any

from hermes_core.messages import Message, text_of
from hermes_core.stores import SessionSearchStore
from hermes_core.tools.registry import Tool, ToolContext, ToolHandler, unbound

SEARCH_MESSAGE_CHARS = 600
"""Each message in a search result is cut to this, so a few hits cannot flood the context."""


def _error(message: str) -> str:
    return f"Error: {message}"


SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": (
                "Words to look for. A session matches when it contains every word "
                "(case-insensitive, whole words), in messages, tool calls or tool results."
            ),
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10,
            "default": 3,
            "description": "How many sessions to return, newest first.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}

SEARCH_DESCRIPTION = (
    "Search your earlier conversations with this user. Use it when the user refers to past "
    "work ('like last time', 'the deploy we fixed') or when an earlier session may hold the "
    "answer. Returns, newest first, each matching session's id, title, a snippet around the "
    "match and the messages around it."
)


def session_search_tool(
    store: SessionSearchStore, owner: str, *, session_id: str | None = None
) -> Tool:
    """The ``session_search`` tool over one owner's past sessions, except ``session_id`` (the
    one searching, which would always match the words of its own call)."""
    return SESSION_SEARCH_TOOL.with_handler(_search_handler(store, owner, session_id))


def _search_handler(store: SessionSearchStore, owner: str, session_id: str | None) -> ToolHandler:
    async def handle(args: dict[str, Any], ctx: ToolContext) -> str:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return _error("query must be a non-empty string of words to search for.")
        limit = args.get("limit", 3)
        if isinstance(limit, bool) or not isinstance(limit, int):
            return _error("limit must be an integer from 1 to 10.")
        hits = await store.search(
            owner, query.strip(), limit=min(max(limit, 1), 10), exclude=session_id
        )
        if not hits:
            return f"No sessions matched {query.strip()!r}. Try fewer or different words."
        results = [
            {
                "session_id": hit.session_id,
                "title": hit.title,
                "snippet": hit.snippet,
                "messages": [_render_message(m) for m in hit.messages],
            }
            for hit in hits
        ]
        return json.dumps(results, ensure_ascii=False)

    return handle


def _render_message(message: Message) -> dict[str, str]:
    # Tool calls are folded into the text: a match may sit in their arguments, and the
    # model should see it there.
    parts = [text_of(message.get("content"))]
    for call in message.get("tool_calls", []):
        function = call.get("function", {})
        parts.append(f"[called {function.get('name', '?')}({function.get('arguments', '')})]")
    content = "\n".join(part for part in parts if part)
    if len(content) > SEARCH_MESSAGE_CHARS:
        content = content[:SEARCH_MESSAGE_CHARS] + "…"
    return {"role": message["role"], "content": content}


def _summarize_search(args: dict[str, Any]) -> str:
    query = args.get("query")
    return f"session_search '{query[:60]}'" if isinstance(query, str) else "session_search"


SESSION_SEARCH_TOOL = Tool(
    name="session_search",
    description=SEARCH_DESCRIPTION,
    parameters=SEARCH_PARAMETERS,
    handler=unbound,
    concurrent_safe=True,
    summarize=_summarize_search,
)
"""The ``session_search`` tool without its owner: what the model is shown
(:func:`session_search_tool` binds it to an owner's sessions)."""
