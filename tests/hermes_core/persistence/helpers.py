"""Small builders shared by the store's tests."""

from __future__ import annotations

import secrets

from hermes_core.messages import Message
from hermes_core.persistence import FileRecord, SessionInfo, Source, Store, StoredMessage


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str) -> Message:
    return {"role": "assistant", "content": text}


def tool_call(call_id: str, name: str, arguments: str) -> Message:
    return {
        "role": "assistant",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


def tool_result(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def stored(
    *messages: Message, source: Source = "agent", compacted: bool = False
) -> list[StoredMessage]:
    return [StoredMessage(message, source, compacted=compacted) for message in messages]


async def new_session(
    store: Store,
    *messages: Message,
    owner: str = "alice",
    name: str | None = None,
    title: str = "",
    session_id: str | None = None,
) -> SessionInfo:
    """A committed session holding ``messages`` (as the agent's)."""
    session_id = store.sessions.create(
        owner=owner,
        profile="default",
        system_prompt="You help.",
        name=name,
        title=title,
        session_id=session_id,
    )
    store.sessions.add_messages(session_id, 0, stored(*messages))
    return await reload(store, session_id, owner=owner)


async def reload(store: Store, session_id: str, *, owner: str = "alice") -> SessionInfo:
    """The session as committed (flushes the write queue first)."""
    await store.db.writer.flush()
    info = await store.sessions.get(owner, session_id)
    assert info is not None
    return info


def uploaded(owner: str, size: int = 10, *, expires_at: float | None = None) -> FileRecord:
    """The record of an upload of ``size`` bytes by ``owner``, made long ago."""
    return FileRecord(
        id=f"file-{secrets.token_hex(8)}",
        owner=owner,
        filename="a.txt",
        purpose="user_data",
        bytes=size,
        created_at=0.0,
        expires_at=expires_at,
    )
