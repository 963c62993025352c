"""Continuing a response: the one ``previous_response_id`` names, the session a turn joins
after it, and (for a connection's ``store: false`` turns) the transcript it continues."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import AgentEvent, CompressionPerformed, MessageAdded
from hermes_core.messages import Message
from hermes_core.persistence import StoredResponse
from server.errors import APIError
from server.http.auth import Principal
from server.protocol.responses import ResponseCreateRequest
from server.services import Services
from server.serving.end_users import sees
from server.serving.turn import Joined, JoinSession, join_by_name
from server.sessions.service import SessionPoint, SessionService


async def previous_response(
    services: Services,
    body: ResponseCreateRequest,
    principal: Principal,
    *,
    end_user: str | None = None,
) -> StoredResponse | None:
    """The response ``previous_response_id`` names (None: it names none), if it has ended
    and is ``end_user``'s (docs/end-users.md)."""
    if body.previous_response_id is None:
        return None
    store = services.store
    found = (
        await store.responses.get(principal.name, body.previous_response_id)
        if store is not None
        else None
    )
    if found is None or not sees(end_user, found.end_user):
        raise previous_not_found(
            f"Previous response with id '{body.previous_response_id}' not found."
        )
    if found.status in ("queued", "in_progress"):
        raise APIError(
            409,
            f"Response '{found.id}' is still in progress; continue it once it has ended.",
            param="previous_response_id",
            code="previous_response_in_progress",
        )
    _check_call_outputs(body.input_items(), found)
    return found


def previous_not_found(message: str) -> APIError:
    """``previous_response_id`` names nothing this key (and end user) may continue: a 400
    ``invalid_request_error``, as on OpenAI (whose SDK users catch ``BadRequestError`` for
    it), not a 404: the request names a bad parameter. A ``store: false`` response, another
    key's or end user's, and one whose session was deleted all get this one answer."""
    return APIError(
        400,
        message,
        param="previous_response_id",
        code="previous_response_not_found",
    )


def _check_call_outputs(items: Sequence[dict[str, Any]], previous: StoredResponse) -> None:
    """A 400 for a ``function_call_output`` that answers none of the calls the client was
    asked for (the previous response's ``function_call`` items, or the input's own), as on
    OpenAI: the run would drop it unseen and tell the model that no result was recorded."""
    if any(item.get("type") == "item_reference" for item in items):
        return  # a reference may stand for a call: checked no further
    output = previous.body.get("output")
    asked = {
        item.get("call_id")
        for item in [*(output if isinstance(output, list) else ()), *items]
        if isinstance(item, dict) and item.get("type") == "function_call"
    }
    for item in items:
        if item.get("type") == "function_call_output" and item.get("call_id") not in asked:
            raise APIError(
                400,
                f"No tool call found for function call output with call_id "
                f"{str(item.get('call_id'))[:100]!r}.",
                param="input",
            )


def joining(previous: StoredResponse | None, *, store: bool) -> JoinSession:
    """How a turn joins its session: after ``previous`` (the response it continues), forking
    the session when that was not its last; with none, the session the client names, as a
    chat turn would (its input is the visible history), or a new one. A turn of
    ``store: false`` keeps nothing: it reads the session it continues (or the named one's
    branch its input matches), and joins none.
    A response of a conversation is continued apart from it: the turn names no
    conversation, so it is none of the conversation's items, as on OpenAI."""
    apart = previous is not None and previous.body.get("conversation") is not None
    after = (
        SessionPoint(previous.session_id, previous.transcript_length)
        if previous is not None and previous.session_id is not None
        else None
    )

    async def join(
        sessions: SessionService,
        agent: Agent,
        request: AgentRequest,
        *,
        owner: str,
        profile: str,
        run_id: str,
        name: str | None,
    ) -> Joined:
        try:
            if after is None and name is not None and not store:
                peeked = await sessions.peek_named(agent, request, owner=owner, name=name)
                # None: no such conversation, and this turn starts none (nor its workspace).
                return Joined(request) if peeked is None else Joined(peeked, None, name)
            if after is None and name is not None:
                return await join_by_name(
                    sessions,
                    agent,
                    request,
                    owner=owner,
                    profile=profile,
                    run_id=run_id,
                    name=name,
                    whole_history=True,  # a stateless client's input: all it holds
                )
            if not store:
                if after is None:
                    return Joined(request)
                peeked, conversation = await sessions.peek_after(
                    agent, request, owner=owner, after=after
                )
                return Joined(peeked, None, conversation)
            turn = await sessions.begin_after(
                agent,
                request,
                owner=owner,
                profile=profile,
                run_id=run_id,
                after=after,
                apart=apart,
            )
        except LookupError as exc:
            gone = "The session of the previous response no longer exists."
            raise previous_not_found(gone) from exc
        forked = turn.forked_from is not None
        return Joined(turn.request, turn.session_id, turn.conversation, forked, turn.fresh)

    return join


async def conversation_of(
    services: Services,
    body: ResponseCreateRequest,
    principal: Principal,
    *,
    end_user: str | None = None,
) -> str | None:
    """The id of the conversation ``conversation`` names (None: it names none), if it is the
    key's and ``end_user`` sees it (theirs, or the key's own): another key's or end user's,
    or a deleted one, is a 404 as if it never existed."""
    conversation_id = body.conversation_id()
    if conversation_id is None:
        return None
    store = services.store
    found = (
        await store.conversations.get(principal.name, conversation_id)
        if store is not None
        else None
    )
    if found is None or not sees(end_user, found.end_user, shared=True):
        raise APIError(
            404,
            f"Conversation with id '{conversation_id[:80]}' not found.",
            param="conversation",
            code="conversation_not_found",
        )
    return found.id


def in_conversation(conversation_id: str) -> JoinSession:
    """How a turn of a conversation joins its session: the key's session named by the
    conversation's id, appended to as it stands (its workspace, open approvals and turn lock
    are that name's, as a named session's are). A run naming a session joins it so too: its
    input is only what it adds, as a conversation turn's is."""

    async def join(
        sessions: SessionService,
        agent: Agent,
        request: AgentRequest,
        *,
        owner: str,
        profile: str,
        run_id: str,
        name: str | None,
    ) -> Joined:
        turn = await sessions.begin_latest(
            agent, request, owner=owner, profile=profile, run_id=run_id, name=conversation_id
        )
        forked = turn.forked_from is not None
        return Joined(turn.request, turn.session_id, turn.conversation, forked, turn.fresh)

    return join


MAX_UNSTORED = 64
"""``store: false`` responses one WebSocket connection keeps to continue from, at most."""


def transcript_of(history: Sequence[Message], events: Sequence[AgentEvent]) -> list[Message]:
    """A run's transcript at its end: ``history`` and the messages the run added (a
    compression's result replacing what it compressed)."""
    transcript = list(history)
    for event in events:
        if isinstance(event, MessageAdded):
            if event.index < len(transcript):
                transcript[event.index] = event.message
            else:
                transcript.append(event.message)
        elif isinstance(event, CompressionPerformed):
            transcript = list(event.messages)
    return transcript
