"""``/v1/responses``: a request becomes a run; the run's events become Response objects and
``response.*`` stream events.

Every response, streamed or not, has one *recorder*: a task that follows its run through a
:class:`ResponsesView` from the first event to the last and saves the response as it starts
and as it ends (unless ``store`` is false). Whatever the client does — waits, streams, leaves,
or never waited (``background``) — the stored response ends up final, and the answer a
waiting client gets is the recorder's own final object.

A background response answers at once, ``queued``, even when its conversation (or session,
or the chain it continues) is busy with a turn still running: its run then waits for that
turn to end and joins the conversation after it (see :mod:`server.serving.queued_turn`),
retrievable, resumable and cancellable meanwhile.

``previous_response_id`` continues the session where that response ended (hidden server tool
calls included, so the prompt cache keeps hitting); continuing an older response of a chain
forks the session there. ``conversation`` appends the turn to the key's session named by the
conversation's id (see :mod:`hermes_core.persistence.conversations`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from fastapi import Request
from fastapi.responses import Response
from starlette.requests import HTTPConnection

from hermes_core.agent import AgentRequest
from hermes_core.messages import Message
from hermes_core.tools.image_generation import IMAGES_TOOLSET, image_options
from hermes_core.tools.web.domains import only_domains
from server.errors import APIError, run_failed_response
from server.http.auth import Principal
from server.http.json_response import FastJSONResponse
from server.http.sse import sse_response
from server.profiles import Profile
from server.protocol.openwebui_tasks import is_side_task
from server.protocol.response_input import approval_answers
from server.protocol.responses import HostedTools, ResponseCreateRequest
from server.runs.manager import Run, new_id
from server.services import Services
from server.serving.common import is_openwebui, resolve_profile, unless_client_leaves
from server.serving.end_users import end_user_id, scoped_owner, sees
from server.serving.item_references import resolve_item_references
from server.serving.remote_mcp import RemoteMcp
from server.serving.request_skills import check_hosted_tools, request_skills
from server.serving.response_chain import (
    MAX_UNSTORED,
    conversation_of,
    in_conversation,
    joining,
    previous_response,
    transcript_of,
)
from server.serving.response_compact import compact
from server.serving.response_live import Live, LiveResponses, Progress, record, response_frames
from server.serving.response_stored import StoredResponses
from server.serving.turn import TurnSpec, begin_turn
from server.sessions.service import response_kept
from server.views.file_citations import FileAnnouncer
from server.views.response_mcp import RemoteMcpTools
from server.views.responses import ResponsesView


class ResponsesServing:
    def __init__(self, services: Services) -> None:
        self.services = services
        self._live = LiveResponses()
        self._stored = StoredResponses(services, self._live)

    # --- POST /v1/responses ---------------------------------------------------------------

    async def create(
        self, body: ResponseCreateRequest, request: Request, principal: Principal
    ) -> Response:
        services = self.services
        begun = await self._begin(body, request, principal)
        run, shell, recorder, headers = begun.run, begun.shell, begun.recorder, begun.headers
        if body.stream:
            view = ResponsesView(
                shell,
                progress=begun.progress,
                remote_mcp=begun.remote,
                files=begun.files,
                sources=body.hosted_tools().sources,
            )
            frames = response_frames(
                services, run, view, lambda: asyncio.shield(recorder), leave_running=body.background
            )
            return sse_response(
                frames, headers=headers, keepalive_seconds=services.keepalive_seconds
            )
        if body.background:
            if body.store and services.store is not None:
                # The client will come back for this id, after a crash too: the queued response
                # and its run (which crash recovery fails) are committed before it is handed out.
                # A run waiting for its conversation has its row already: it starts only once
                # the turn ahead has ended, and its create answers at once.
                if not begun.queued:
                    await run.until_started()
                await services.store.db.writer.flush()
            return FastJSONResponse(shell, headers=headers)
        final = await unless_client_leaves(services, run, request, asyncio.shield(recorder))
        if final["status"] == "failed" and not any(
            item.get("type") == "message" for item in final["output"]
        ):
            # As on chat: a run that failed before it answered is an error, not a 200 whose
            # answer is empty (its progress lines alone are no answer). GET still shows it.
            end = await run.until_finished()
            return run_failed_response(
                (final.get("error") or {}).get("message"),
                headers=headers,
                retry_after=end.retry_after,
            )
        return FastJSONResponse(final, headers=headers)

    async def stream_events(
        self,
        body: ResponseCreateRequest,
        connection: HTTPConnection,
        principal: Principal,
        *,
        unstored: dict[str, list[Message]] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """A streamed response's events as objects (the WebSocket transport sends each as one
        message); the run stops if the consumer stops reading. ``unstored`` holds the
        transcripts of a connection's ``store: false`` responses: a later turn may continue
        one by ``previous_response_id``, and this one is added to it."""
        earlier = (unstored or {}).get(body.previous_response_id or "")
        begun = await self._begin(body, connection, principal, earlier=earlier)
        view = ResponsesView(
            begun.shell,
            progress=begun.progress,
            remote_mcp=begun.remote,
            files=begun.files,
            sources=body.hosted_tools().sources,
        )
        recorder = begun.recorder
        events: AsyncGenerator[Any, None] = response_frames(
            self.services,
            begun.run,
            view,
            lambda: asyncio.shield(recorder),
            leave_running=False,
            as_json=True,
        )
        try:
            async for payload in events:
                yield payload
        finally:
            await events.aclose()
        if unstored is not None and not body.store:
            unstored[begun.shell["id"]] = transcript_of(begun.history, begun.run.events)
            while len(unstored) > MAX_UNSTORED:
                del unstored[next(iter(unstored))]

    async def _begin(
        self,
        body: ResponseCreateRequest,
        request: HTTPConnection,
        principal: Principal,
        *,
        earlier: Sequence[Message] | None = None,
    ) -> _Begun:
        """Everything up to the answer: the run started, its first object and its recorder.
        ``earlier``: the transcript the response continues, when no store holds it."""
        services = self.services
        profile = resolve_profile(services, body.model, principal)
        end_user = end_user_id(request, principal, body.safety_identifier or body.user)
        previous = (
            None
            if earlier is not None
            else await previous_response(services, body, principal, end_user=end_user)
        )
        conversation = await conversation_of(services, body, principal, end_user=end_user)
        await resolve_item_references(
            services.store, principal.name, body.input_items(), end_user=end_user
        )
        hosted = body.hosted_tools()
        await check_hosted_tools(services, profile, scoped_owner(principal, end_user), hosted)
        _check_image_generation(profile, hosted)
        skills = await request_skills(services, profile, principal.name, body.shell_tool())
        progress = _progress(request, profile)
        side_task = (
            previous is None
            and conversation is None
            and is_side_task(request.headers, prompt_says=body.is_openwebui_task)
        )

        def agent_request(*, client_tools: bool, offer_tools: bool, run_id: str) -> AgentRequest:
            made = body.to_agent_request(with_client_tools=client_tools)
            if earlier is not None and not side_task:
                made = dataclasses.replace(made, history=[*earlier, *made.history])
            return dataclasses.replace(
                made, offer_tools=offer_tools, run_id=run_id, skills=skills if offer_tools else ()
            )

        tools = RemoteMcp(services, profile, body.tools)
        response_id = new_id("resp_")
        # The run's task, started inside, inherits the web tools' domains and the image
        # settings (the request's own). A stored response keeps its conversation's turn until
        # it is saved (its recorder gives it back): see ``server/sessions/journal.py``.
        with (
            only_domains(hosted.allowed_domains),
            image_options(hosted.images),
            response_kept(body.store),
        ):
            turn = await begin_turn(
                services,
                request,
                principal,
                profile,
                TurnSpec(
                    endpoint="responses",
                    completion_id=response_id,
                    agent_request=agent_request,
                    side_task=side_task,
                    openwebui=progress == "openwebui",
                    join=(
                        joining(previous, store=body.store)
                        if conversation is None
                        else in_conversation(conversation)
                    ),
                    named=previous is None and conversation is None,
                    answers=lambda: approval_answers(body.input_items()),
                    keeps_questions=body.store,
                    tools=tools,
                    side_task_files=True,
                    call_images=hosted.code_interpreter and progress != "openwebui",
                    end_user=body.safety_identifier or body.user,
                    queues=body.background,
                ),
            )
        run, rendering = turn.run, tools.rendering
        sessions = services.sessions
        # Whether the run's conversation lock waits for this response's save once the run
        # has ended: its own turn's does (begun so), one steered into it is added here.
        steered = "x-hermes-steered-into" in turn.headers
        kept = sessions is not None and body.store and (not steered or sessions.keep(run.id))
        try:
            shell = body.shell(
                response_id=response_id,
                created_at=int(time.time()),
                model=profile.id,
                status="queued" if body.background else "in_progress",
            )
            # Called once the response's save is queued (see ``record``).
            release = partial(sessions.release, run.id) if kept and sessions is not None else None
            recorder = record(
                services, run, body, shell, principal, progress, rendering, turn.files, release
            )
        except BaseException:
            if kept and sessions is not None:  # no recorder gives the turn back
                sessions.release(run.id)
            raise
        live = Live(run, shell, progress, recorder, rendering, turn.files)
        if body.store:  # `store: false` keeps nothing, not even for retrieval while it runs
            self._live.remember(live)
        history = list(turn.request.history)
        headers, files = turn.headers, turn.files
        return _Begun(
            run, shell, progress, recorder, headers, history, rendering, files, turn.queued
        )

    # --- POST /v1/responses/compact, GET / DELETE / cancel / input_items --------------------

    # ``end_user``: who behind the key the request is for (docs/end-users.md); another end
    # user's response is a 404 to it, as another key's is.

    async def compact(
        self, body: ResponseCreateRequest, principal: Principal, end_user: str | None = None
    ) -> Response:
        return await compact(self.services, body, principal, end_user)

    async def retrieve(
        self,
        response_id: str,
        principal: Principal,
        *,
        stream: bool,
        starting_after: int,
        end_user: str | None = None,
    ) -> Response:
        await self._theirs(response_id, principal, end_user)
        return await self._stored.retrieve(
            response_id, principal, stream=stream, starting_after=starting_after
        )

    async def cancel(
        self, response_id: str, principal: Principal, end_user: str | None = None
    ) -> Response:
        await self._theirs(response_id, principal, end_user)
        return await self._stored.cancel(response_id, principal)

    async def delete(
        self, response_id: str, principal: Principal, end_user: str | None = None
    ) -> dict[str, Any]:
        await self._theirs(response_id, principal, end_user)
        return await self._stored.delete(response_id, principal)

    async def input_items(
        self,
        response_id: str,
        principal: Principal,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
        end_user: str | None = None,
    ) -> dict[str, Any]:
        await self._theirs(response_id, principal, end_user)
        return await self._stored.input_items(
            response_id, principal, after=after, limit=limit, order=order
        )

    async def _theirs(self, response_id: str, principal: Principal, end_user: str | None) -> None:
        """A 404 when the key's response ``response_id`` is another end user's (one not
        found at all is left to the call that follows: it has its own ways to find it)."""
        live = self._live.get(response_id, principal)
        if live is not None:
            made_for = live.run.info.end_user
        else:
            store = self.services.store
            stored = await store.responses.get(principal.name, response_id) if store else None
            if stored is None:
                return
            made_for = stored.end_user
        if not sees(end_user, made_for):
            raise APIError(
                404,
                f"Response with id '{response_id}' not found.",
                param="response_id",
                code="response_not_found",
            )


@dataclass(frozen=True, slots=True)
class _Begun:
    """A response under way: its run, first object, how it renders, its recorder, headers."""

    run: Run
    shell: dict[str, Any]
    progress: Progress
    recorder: asyncio.Task[dict[str, Any]]
    headers: dict[str, str]
    history: list[Message]
    """The history the run started from (its transcript before its own messages)."""
    remote: RemoteMcpTools | None
    files: FileAnnouncer | None = None
    queued: bool = False
    """Its run waits for the turn ahead in its conversation before it joins it (a background
    response): it has not started, and need not have, for its create to answer."""


def _check_image_generation(profile: Profile, hosted: HostedTools) -> None:
    """A 400 naming the setting when the request's ``image_generation`` tool has no image
    model behind it on this profile."""
    if not hosted.image_generation or IMAGES_TOOLSET in profile.toolsets:
        return
    raise APIError(
        400,
        f"The model '{profile.id}' cannot take an image_generation tool: no images provider "
        "is configured for it (set profiles[].image_providers in the server's configuration).",
        param="tools",
    )


def _progress(request: HTTPConnection, profile: Profile) -> Progress:
    """Standard events by default; structured tool events or Open WebUI's tool cards on request
    (``X-Hermes-Progress: events|openwebui``), or for Open WebUI itself."""
    asked = request.headers.get("x-hermes-progress", "").strip().lower()
    if asked in ("events", "openwebui"):
        return asked  # type: ignore[return-value]
    if profile.openwebui or is_openwebui(request):
        return "openwebui"
    return "reasoning"
