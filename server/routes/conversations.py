"""``/v1/conversations``: OpenAI's Conversations API over the key's sessions.

A conversation ``conv_…`` is a row (its owner and metadata) and the key's session named by
its id (see :mod:`hermes_core.persistence.conversations`). Its items are that session's
transcript rendered as Responses items: user, system and assistant ``message`` items, and a
tool call's ``function_call`` and ``function_call_output``. Reasoning is not listed. An item's
id is derived from the stored message it renders (its row), so it does not change as the
conversation grows.

- Adding items (at creation, or ``POST …/items``) appends them to the session as the client's
  messages; the next turn's model sees them.
- Deleting an item removes the stored message it renders, so the model no longer sees it; a
  tool call goes with its results (and a result with its call and the call's other results):
  a transcript holding half an exchange is one no model accepts. A message a compression has
  already summarised stays in the summary the model sees.
- Deleting a conversation deletes its row, its sessions and its workspace. Anything that
  changes the transcript takes the conversation's turn lock: while a response of the
  conversation is in progress, it is a 409 (cancel the response, or retry once it has ended).
  A response holds the lock until it is saved, a moment after its run ends: it says where in
  the transcript it ended, so a change made before that save would be undone by it.

Another key's conversation is a 404, as if it did not exist. With ``X-Hermes-Memory-Scope``
the items are those of the scope's session, as for any named session.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Query, Request
from pydantic import ValidationError

from hermes_core.messages import Message
from hermes_core.persistence import ConversationMessage, ConversationRecord, Store, StoredMessage
from server.errors import APIError
from server.http.auth import Principal, require_principal
from server.http.input_text import StrictJSONRoute
from server.http.openapi import errors
from server.protocol.pages import list_page
from server.protocol.response_input import Transcript, normalised_item
from server.protocol.schemas.conversations import (
    ConversationCreate,
    ConversationDeleted,
    ConversationItemList,
    ConversationItemsCreate,
    ConversationObject,
    ConversationUpdate,
)
from server.services import Services
from server.serving.common import conversation_owner
from server.serving.end_users import end_user_id, scoped_owner, sees
from server.sessions.removal import remove_conversation, turn_lock

router = APIRouter(prefix="/v1/conversations", tags=["conversations"], route_class=StrictJSONRoute)

Owner = Annotated[Principal, Depends(require_principal)]
_Body = TypeVar("_Body", ConversationCreate, ConversationUpdate, ConversationItemsCreate)


def _body(model: type[Any]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


def _store(request: Request) -> Store:
    store: Store | None = request.app.state.services.store
    if store is None:
        raise APIError(404, "This server keeps no conversations (it runs without a database).")
    return store


async def _parsed(request: Request, model: type[_Body], what: str) -> _Body:
    # Read by hand rather than as a body parameter (as the skills routes do): a bad body is
    # a 400 naming what is wrong, never FastAPI's 422.
    raw = await request.body()
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or None
        raise APIError(400, f"Invalid body: {what} ({first['msg']}).", param=where) from None


async def _conversation(
    store: Store,
    principal: Principal,
    conversation_id: str,
    request: Request,
    *,
    changing: bool = False,
) -> ConversationRecord:
    """The key's conversation ``conversation_id``, if the request's end user sees it: their
    own or the key's (each end user's items in it are theirs), the key's own only for a
    request naming none (docs/end-users.md); a 404 otherwise. ``changing`` it (its metadata,
    or deleting it) is for its own end user only, or the key for its own."""
    found = await store.conversations.get(principal.name, conversation_id)
    end_user = end_user_id(request, principal)
    if found is None or not sees(end_user, found.end_user, shared=not changing):
        raise _no_conversation(conversation_id)
    return found


def _no_conversation(conversation_id: str) -> APIError:
    return APIError(
        404,
        f"Conversation with id '{conversation_id[:80]}' not found.",
        param="conversation_id",
        code="conversation_not_found",
    )


def _shown(record: ConversationRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "conversation",
        "created_at": int(record.created_at),
        "metadata": record.metadata,
    }


def _turn_lock(
    store: Store, owner: str, conversation_id: str
) -> contextlib.AbstractAsyncContextManager[None]:
    """The conversation's turn lock, for a change to its transcript; a 409 while a response
    of the conversation holds it."""
    busy = APIError(
        409,
        "A response of this conversation is in progress; retry once it has ended.",
        param="conversation_id",
        code="conversation_busy",
    )
    return turn_lock(store, owner, conversation_id, busy=busy)


def _messages_of(items: list[dict[str, Any]]) -> list[Message]:
    """Input items as the session's messages (a 400 naming ``items`` for one it cannot take)."""
    transcript = Transcript()
    try:
        for item in items:
            transcript.add(normalised_item(item))
    except APIError as exc:
        raise APIError(400, exc.message, param="items") from None
    system: list[Message] = [{"role": "system", "content": text} for text in transcript.system]
    return [*system, *transcript.messages]


async def _append(
    store: Store, owner: str, conversation_id: str, items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Append ``items`` to the conversation (under its lock); the items as stored."""
    messages = _messages_of(items)
    if not messages:
        raise APIError(
            400,
            "None of these items is one a conversation keeps (messages, function calls and "
            "their outputs).",
            param="items",
        )
    async with _turn_lock(store, owner, conversation_id):
        session_id = await store.conversations.session(owner, conversation_id)
        if session_id is None:
            session_id = await store.conversations.start_session(owner, conversation_id)
        start = await store.conversations.append(
            session_id, [StoredMessage(message, "client") for message in messages]
        )
        added = [
            held
            for held in await store.conversations.messages(session_id)
            if held.session_id == session_id and held.position >= start
        ]
    return [item for held in added for item in rendered(conversation_id, held)]


async def _refuse_unknown_files(
    request: Request, principal: Principal, messages: list[Message]
) -> None:
    """A 404 for an item naming a file that is not the caller's to name (not an upload of the
    key's, or of another end user's), as ``/v1/responses`` answers the same input: kept, a
    later turn would only tell the model the file "has been deleted since"."""
    services: Services = request.app.state.services
    vault = services.files.as_end_user(end_user_id(request, principal)) if services.files else None
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image_file":
                file_id = part.get("file_id")
            elif kind == "file":
                file_id = (part.get("file") or {}).get("file_id")
            else:
                continue
            if file_id is None:
                continue
            if vault is None:
                raise APIError(
                    404, f"No file '{str(file_id)[:80]}'.", param="file_id", code="file_not_found"
                )
            await vault.get(principal.name, str(file_id))


async def _items(store: Store, owner: str, conversation_id: str) -> list[dict[str, Any]]:
    held = await _held(store, owner, conversation_id)
    return [item for message in held for item in rendered(conversation_id, message)]


async def _held(store: Store, owner: str, conversation_id: str) -> list[ConversationMessage]:
    session_id = await store.conversations.session(owner, conversation_id)
    return [] if session_id is None else await store.conversations.messages(session_id)


# --- rendering ----------------------------------------------------------------------------------


def item_id(conversation_id: str, row_id: int, index: int, prefix: str) -> str:
    """An item's id: the conversation, the stored message's row and the item's place among
    that message's items; not guessable, and the same at every reading."""
    digest = hashlib.sha256(f"{conversation_id}/{row_id}/{index}".encode()).hexdigest()
    return f"{prefix}_{digest[:40]}"


def rendered(conversation_id: str, held: ConversationMessage) -> list[dict[str, Any]]:
    """The Responses items one stored message stands for (none for a reasoning-only one)."""
    message = held.stored.message
    role = message.get("role")
    items: list[dict[str, Any]] = []

    def add(prefix: str, item: dict[str, Any]) -> None:
        the_id = item_id(conversation_id, held.row_id, len(items), prefix)
        items.append({"id": the_id, **item, "status": "completed"})

    if role == "tool":
        add(
            "fco",
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id"),
                "output": _text(message.get("content")),
            },
        )
        return items
    if role == "assistant":
        text = _text(message.get("content"))
        if text:
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            add("msg", {"type": "message", "role": "assistant", "content": [part]})
        for call in message.get("tool_calls") or ():
            function = call["function"]
            add(
                "fc",
                {
                    "type": "function_call",
                    "call_id": call.get("id"),
                    "name": function.get("name", ""),
                    "arguments": function.get("arguments") or "{}",
                },
            )
        return items
    shown_role = role if role in ("user", "system", "developer") else "user"
    add("msg", {"type": "message", "role": shown_role, "content": _input_parts(message)})
    return items


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else json.dumps(content)


def _input_parts(message: Message) -> list[dict[str, Any]]:
    """A user or system message's content as input parts (its text, images and files)."""
    content = message.get("content")
    if not isinstance(content, list):
        return [{"type": "input_text", "text": _text(content)}]
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "image_url":
            url = (part.get("image_url") or {}).get("url")
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        elif kind == "image_file":
            parts.append({"type": "input_image", "file_id": part.get("file_id"), "detail": "auto"})
        elif kind == "file":
            file = part.get("file") or {}
            shown = {k: file[k] for k in ("file_id", "filename") if file.get(k)}
            parts.append({"type": "input_file", **shown})
        elif isinstance(part, dict):
            parts.append({"type": "input_text", "text": str(part.get("text", ""))})
    return parts


def _exchange(held: list[ConversationMessage], target: ConversationMessage) -> list[int]:
    """The positions (in ``target``'s session) that go when ``target`` is deleted: the
    message itself, and for a tool call or result the whole exchange it belongs to."""
    same = [m for m in held if m.session_id == target.session_id]
    message = target.stored.message
    if message.get("role") == "tool":
        answered = message.get("tool_call_id")
        caller = next(
            (
                m
                for m in reversed(same)
                if m.position < target.position
                and any(c.get("id") == answered for c in m.stored.message.get("tool_calls") or ())
            ),
            None,
        )
        if caller is None:
            return [target.position]
        target, message = caller, caller.stored.message
    calls = {call.get("id") for call in message.get("tool_calls") or ()}
    results = [
        m.position
        for m in same
        if m.position > target.position
        and m.stored.message.get("role") == "tool"
        and m.stored.message.get("tool_call_id") in calls
    ]
    return [target.position, *results]


# --- the routes -----------------------------------------------------------------------------------


@router.post(
    "",
    response_model=ConversationObject,
    responses=errors(400, 401, 404),
    openapi_extra=_body(ConversationCreate),
)
async def create_conversation(request: Request, principal: Owner) -> dict[str, Any]:
    """Create a conversation, with the items it starts with and its metadata."""
    store = _store(request)
    body = await _parsed(request, ConversationCreate, "expected items and metadata")
    # A bad item is a 400 before anything is kept.
    kept = _messages_of(body.items) if body.items else []
    await _refuse_unknown_files(request, principal, kept)
    end_user = end_user_id(request, principal)
    owner = scoped_owner(principal, end_user)
    record = await store.conversations.create(
        principal.name, body.metadata or {}, end_user=end_user
    )
    if kept:
        await _append(store, owner, record.id, body.items or [])
    return _shown(record)


@router.get("/{conversation_id}", response_model=ConversationObject, responses=errors(401, 404))
async def retrieve_conversation(
    conversation_id: str, request: Request, principal: Owner
) -> dict[str, Any]:
    store = _store(request)
    return _shown(await _conversation(store, principal, conversation_id, request))


@router.post(
    "/{conversation_id}",
    response_model=ConversationObject,
    responses=errors(400, 401, 404),
    openapi_extra=_body(ConversationUpdate),
)
async def update_conversation(
    conversation_id: str, request: Request, principal: Owner
) -> dict[str, Any]:
    """Replace the conversation's metadata."""
    store = _store(request)
    body = await _parsed(request, ConversationUpdate, "expected metadata")
    await _conversation(store, principal, conversation_id, request, changing=True)
    updated = await store.conversations.update(principal.name, conversation_id, body.metadata)
    if updated is None:
        raise _no_conversation(conversation_id)
    return _shown(updated)


@router.delete(
    "/{conversation_id}", response_model=ConversationDeleted, responses=errors(401, 404, 409)
)
async def delete_conversation(
    conversation_id: str, request: Request, principal: Owner
) -> dict[str, Any]:
    """Delete the conversation and its items (its sessions, their task lists and approvals)
    and its workspace with its files; a 409 while one of its responses is in progress.
    Responses made in it stay retrievable."""
    store = _store(request)
    services: Services = request.app.state.services
    await _conversation(store, principal, conversation_id, request, changing=True)
    owners = {conversation_owner(request, principal)}
    owners |= set(await store.conversations.session_owners(principal.name, conversation_id))
    async with contextlib.AsyncExitStack() as locks:
        for owner in sorted(owners):  # its sessions of every memory scope
            await locks.enter_async_context(_turn_lock(store, owner, conversation_id))
        for owner in sorted(owners):
            await remove_conversation(
                store, owner, conversation_id, services.workspace(owner, conversation_id)
            )
        if not await store.conversations.delete(principal.name, conversation_id):
            raise _no_conversation(conversation_id)  # deleted meanwhile
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


@router.get(
    "/{conversation_id}/items",
    response_model=ConversationItemList,
    responses=errors(400, 401, 404),
)
async def list_items(
    conversation_id: str,
    request: Request,
    principal: Owner,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
    include: Annotated[list[str] | None, Query(alias="include[]")] = None,
) -> dict[str, Any]:
    """The conversation's items, a page at a time (``include`` adds nothing here: the items
    carry what they have)."""
    store = _store(request)
    await _conversation(store, principal, conversation_id, request)
    items = await _items(store, conversation_owner(request, principal), conversation_id)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise APIError(404, f"No item '{after[:80]}' in this conversation.", param="after")
        items = items[ids.index(after) + 1 :]
    return list_page(items[:limit], has_more=len(items) > limit)


@router.post(
    "/{conversation_id}/items",
    response_model=ConversationItemList,
    responses=errors(400, 401, 404, 409),
    openapi_extra=_body(ConversationItemsCreate),
)
async def create_items(conversation_id: str, request: Request, principal: Owner) -> dict[str, Any]:
    """Append items to the conversation (1 to 20): the next response's model sees them."""
    store = _store(request)
    body = await _parsed(request, ConversationItemsCreate, "expected 1 to 20 items")
    await _conversation(store, principal, conversation_id, request)
    await _refuse_unknown_files(request, principal, _messages_of(body.items))
    owner = conversation_owner(request, principal)
    added = await _append(store, owner, conversation_id, body.items)
    return list_page(added, has_more=False)


@router.get("/{conversation_id}/items/{item_id}", responses=errors(400, 401, 404))
async def retrieve_item(
    conversation_id: str,
    item_id: str,
    request: Request,
    principal: Owner,
    include: Annotated[list[str] | None, Query(alias="include[]")] = None,
) -> dict[str, Any]:
    store = _store(request)
    await _conversation(store, principal, conversation_id, request)
    items = await _items(store, conversation_owner(request, principal), conversation_id)
    found = next((item for item in items if item["id"] == item_id), None)
    if found is None:
        raise _no_item(item_id)
    return found


@router.delete(
    "/{conversation_id}/items/{item_id}",
    response_model=ConversationObject,
    responses=errors(401, 404, 409),
)
async def delete_item(
    conversation_id: str, item_id: str, request: Request, principal: Owner
) -> dict[str, Any]:
    """Delete an item: the stored message it renders (a tool call with its results) is
    removed, and the model no longer sees it. Answers the conversation."""
    store = _store(request)
    record = await _conversation(store, principal, conversation_id, request)
    owner = conversation_owner(request, principal)
    async with _turn_lock(store, owner, conversation_id):
        held = await _held(store, owner, conversation_id)
        target = next(
            (m for m in held for item in rendered(conversation_id, m) if item["id"] == item_id),
            None,
        )
        if target is None:
            raise _no_item(item_id)
        await store.conversations.remove(target.session_id, _exchange(held, target))
    return _shown(record)


def _no_item(item_id: str) -> APIError:
    return APIError(
        404, f"Item with id '{item_id[:80]}' not found.", param="item_id", code="item_not_found"
    )
