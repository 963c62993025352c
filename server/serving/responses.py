"""``/v1/responses``: a request becomes a run; the run's events become Response objects and
``response.*`` stream events.

Every response, streamed or not, has one *recorder*: a task that follows its run through a
:class:`ResponsesView` from the first event to the last and saves the response as it starts
and as it ends (unless ``store`` is false). Whatever the client does — waits, streams, leaves,
or never waited (``background``) — the stored response ends up final, and the answer a
waiting client gets is the recorder's own final object.

``previous_response_id`` continues the session where that response ended (hidden server tool
calls included, so the prompt cache keeps hitting); continuing an older response of a chain
forks the session there.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Request
from fastapi.responses import Response
from starlette.requests import HTTPConnection

from hermes_core.agent import Agent, AgentRequest
from hermes_core.agent.compaction import CompactionRun
from hermes_core.context import Compressor
from hermes_core.events import (
    AgentEvent,
    CompressionPerformed,
    ExitReason,
    InterruptSource,
    MessageAdded,
    RunFinished,
)
from hermes_core.messages import Message
from hermes_core.persistence import StoredResponse
from server.auth import Principal
from server.errors import (
    APIError,
    error_response,
    run_failed_response,
)
from server.json_response import FastJSONResponse
from server.protocol.openwebui_tasks import is_side_task
from server.protocol.response_input import approval_answers, encode_compaction
from server.protocol.responses import ResponseCreateRequest
from server.runs.manager import Run, new_id
from server.services import Profile, Services
from server.serving.common import (
    is_openwebui,
    resolve_profile,
    start_run,
    unless_client_leaves,
)
from server.serving.item_references import resolve_item_references
from server.serving.remote_mcp import RemoteMcp
from server.serving.turn import Joined, JoinSession, TurnSpec, begin_turn, join_by_name
from server.sessions.service import SessionPoint, SessionService
from server.sse import DONE, named_frame, sse_response
from server.views.file_citations import FileAnnouncer
from server.views.response_mcp import RemoteMcpTools
from server.views.responses import ResponsesView, response_usage

Progress = Literal["reasoning", "events", "openwebui"]
LIVE_KEPT = 1000
"""Responses in progress that may be re-attached to (retrieve with stream=true) at most."""
CANCEL_WAIT_SECONDS = 30.0


@dataclass(slots=True)
class _Live:
    """A response in progress: its run, its first object, how it renders, its recorder.

    Kept only until the response is final and stored: a finished response is replayed from
    its run's logged events and the request kept in the store, so the server holds no
    request-sized object for it (a long instructions string, large tool schemas)."""

    run: Run
    shell: dict[str, Any]
    progress: Progress
    recorder: asyncio.Task[dict[str, Any]]
    remote: RemoteMcpTools | None = None
    """The request's own MCP servers, as its stream shows them."""
    files: FileAnnouncer | None = None
    """How its answer announces the files its run made."""


class ResponsesServing:
    def __init__(self, services: Services) -> None:
        self.services = services
        self._live: OrderedDict[str, _Live] = OrderedDict()

    # --- POST /v1/responses ---------------------------------------------------------------

    async def create(
        self, body: ResponseCreateRequest, request: Request, principal: Principal
    ) -> Response:
        services = self.services
        begun = await self._begin(body, request, principal)
        run, shell, recorder, headers = begun.run, begun.shell, begun.recorder, begun.headers
        if body.stream:
            view = ResponsesView(
                shell, progress=begun.progress, remote_mcp=begun.remote, files=begun.files
            )
            frames = self._frames(
                run, view, lambda: asyncio.shield(recorder), leave_running=body.background
            )
            return sse_response(
                frames, headers=headers, keepalive_seconds=services.keepalive_seconds
            )
        if body.background:
            if body.store and services.store is not None:
                # The client will come back for this id, after a crash too: the queued response
                # and its run (which crash recovery fails) are committed before it is handed out.
                await run.until_started()
                await services.store.db.writer.flush()
            return FastJSONResponse(shell, headers=headers)
        final = await unless_client_leaves(services, run, request, asyncio.shield(recorder))
        if final["status"] == "failed" and not any(
            item.get("type") == "message" for item in final["output"]
        ):
            # As on chat: a run that failed before it answered is an error, not a 200 whose
            # answer is empty (its progress lines alone are no answer). GET still shows it.
            return run_failed_response((final.get("error") or {}).get("message"), headers=headers)
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
            begun.shell, progress=begun.progress, remote_mcp=begun.remote, files=begun.files
        )
        recorder = begun.recorder
        events: AsyncGenerator[Any, None] = self._frames(
            begun.run, view, lambda: asyncio.shield(recorder), leave_running=False, as_json=True
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
        previous = None if earlier is not None else await self._previous(body, principal)
        await resolve_item_references(services.store, principal.name, body.input_items())
        progress = _progress(request, profile)
        side_task = previous is None and is_side_task(
            request.headers, prompt_says=body.is_openwebui_task
        )

        def agent_request(client_tools: bool) -> AgentRequest:
            made = body.to_agent_request(with_client_tools=client_tools)
            if earlier is None or side_task:
                return made
            return dataclasses.replace(made, history=[*earlier, *made.history])

        tools = RemoteMcp(services, profile, body.tools)
        response_id = new_id("resp_")
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
                join=_joining(previous, store=body.store),
                named=previous is None,
                answers=lambda: approval_answers(body.input_items()),
                keeps_questions=body.store,
                tools=tools,
                side_task_files=True,
            ),
        )
        run, rendering = turn.run, tools.rendering
        shell = body.shell(
            response_id=response_id,
            created_at=int(time.time()),
            model=profile.id,
            status="queued" if body.background else "in_progress",
        )
        recorder = self._recorder(run, body, shell, principal, progress, rendering, turn.files)
        live = _Live(run, shell, progress, recorder, rendering, turn.files)
        if body.store:  # `store: false` keeps nothing, not even for retrieval while it runs
            self._remember(live)
        history = list(turn.request.history)
        return _Begun(run, shell, progress, recorder, turn.headers, history, rendering, turn.files)

    async def _previous(
        self, body: ResponseCreateRequest, principal: Principal
    ) -> StoredResponse | None:
        if body.previous_response_id is None:
            return None
        store = self.services.store
        found = (
            await store.responses.get(principal.name, body.previous_response_id)
            if store is not None
            else None
        )
        if found is None:
            raise APIError(
                404,
                f"Previous response with id '{body.previous_response_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        if found.status in ("queued", "in_progress"):
            raise APIError(
                409,
                f"Response '{found.id}' is still in progress; continue it once it has ended.",
                param="previous_response_id",
                code="previous_response_in_progress",
            )
        return found

    def _recorder(
        self,
        run: Run,
        body: ResponseCreateRequest,
        shell: dict[str, Any],
        principal: Principal,
        progress: Progress,
        remote: RemoteMcpTools | None,
        files: FileAnnouncer | None,
    ) -> asyncio.Task[dict[str, Any]]:
        store = self.services.store if body.store else None
        view = ResponsesView(shell, progress=progress, remote_mcp=remote, files=files)
        request_record = {
            "input_items": body.input_items(),
            "body": body.model_dump(mode="json", exclude={"input"}),
            "progress": progress,  # how its stream renders, for a replay from the store
        }
        if remote is not None:
            request_record["remote_mcp"] = remote.record()
        if files is not None and not files.openwebui:
            # A replay from the store cites the same container (Open WebUI's links, signed
            # for a time, are not made again).
            request_record["files_container"] = files.container_id

        def save(response: dict[str, Any]) -> None:
            if store is None:
                return
            store.responses.save(
                StoredResponse(
                    id=shell["id"],
                    owner=principal.name,
                    session_id=run.session_id,
                    previous_id=body.previous_response_id,
                    run_id=run.id,
                    status=response["status"],
                    request=request_record,
                    body=response,
                    transcript_length=run.transcript_length or 0,
                    created_at=run.created_at,  # to the microsecond: retention orders by it
                    updated_at=time.time(),
                )
            )

        save(shell)  # now, so that a background response can be retrieved at once

        async def record() -> dict[str, Any]:
            await run.until_finished()
            for event in run.events:
                view.handle(event)
            final = view.response
            save(final)
            return final

        return asyncio.create_task(record(), name=f"hermes-record-{shell['id']}")

    def _remember(self, live: _Live) -> None:
        response_id = live.shell["id"]
        self._live[response_id] = live
        # Once final (and stored), it is replayed from the store: forget it here.
        live.recorder.add_done_callback(lambda _: self._live.pop(response_id, None))
        while len(self._live) > LIVE_KEPT:
            self._live.popitem(last=False)

    async def _frames(
        self,
        run: Run | None,
        view: ResponsesView,
        final: Callable[[], Awaitable[dict[str, Any]]],
        *,
        leave_running: bool,
        starting_after: int = -1,
        as_json: bool = False,
        events: AsyncIterator[AgentEvent] | None = None,
    ) -> AsyncGenerator[Any, None]:
        """The response's stream: its opening, then every event of its run (``run``'s, or
        ``events``: another replica's run, from its log), as SSE frames (or, ``as_json``, as
        the event objects); ``final`` is the response as stored once the run ended."""
        source = events if events is not None else run.follow() if run is not None else None
        assert source is not None
        try:
            for payload in view.opening():
                if payload["sequence_number"] > starting_after:
                    yield payload if as_json else named_frame(payload["type"], payload)
            async for event in source:
                if isinstance(event, RunFinished):
                    # The stored response is final before the client hears the run ended, so
                    # its next request can continue from it at once; and both say the same.
                    view.completed_at = (await final()).get("completed_at")
                payloads = view.handle(event)
                for payload in payloads:
                    if payload["sequence_number"] > starting_after:
                        yield payload if as_json else named_frame(payload["type"], payload)
            if not as_json:
                yield DONE
        finally:
            # Reached early only when the client went away.
            leaving = run is not None and not run.status.finished and not leave_running
            if leaving and run is not None and self.services.stop_on_disconnect:
                self.services.runs.follower_left(run)

    # --- POST /v1/responses/compact ---------------------------------------------------------

    async def compact(self, body: ResponseCreateRequest, principal: Principal) -> Response:
        """The conversation (``previous_response_id`` and/or ``input``) compacted by our own
        compressor, as one ``compaction`` item a client feeds back as input. The compaction
        is a run of its own: it can be stopped, and its summariser call is counted."""
        services = self.services
        profile = resolve_profile(services, body.model, principal)
        previous = await self._previous(body, principal)
        await resolve_item_references(services.store, principal.name, body.input_items())
        request = body.to_agent_request(with_client_tools=False)
        messages = list(request.history)
        if request.user_message is not None:
            messages.append({"role": "user", "content": request.user_message})
        store = services.store
        if previous is not None and previous.session_id is not None and store is not None:
            stored = await store.sessions.messages(previous.session_id)
            messages = [m.message for m in stored[: previous.transcript_length]] + messages
        summariser = profile.summariser
        compaction = CompactionRun(Compressor(summariser), context_window=summariser.context_window)
        compaction_id = new_id("resp_")
        run = await start_run(
            services,
            compaction,
            AgentRequest(history=messages, run_id=new_id("run_"), stream_model_replies=False),
            principal=principal,
            profile=profile,
            endpoint="responses",
            completion_id=compaction_id,
            session_id=None,
        )
        end = await run.until_finished()
        headers = {"x-hermes-run-id": run.id}
        compacted = next((e for e in run.events if isinstance(e, CompressionPerformed)), None)
        if compacted is None:  # stopped, or a bug of ours (a failing summariser is no failure)
            interrupted = end.exit_reason is ExitReason.INTERRUPTED
            status, code = (409, "run_interrupted") if interrupted else (500, "server_error")
            message = end.error or "The compaction failed."
            return error_response(status, message, code=code, headers=headers)
        payload = {
            "id": compaction_id,
            "object": "response.compaction",
            "created_at": int(run.created_at),
            "output": [
                {
                    "type": "compaction",
                    "id": new_id("cmp_"),
                    "encrypted_content": encode_compaction(compacted.messages),
                }
            ],
            "usage": response_usage(end.usage),
        }
        return FastJSONResponse(payload, headers=headers)

    # --- GET / DELETE / cancel / input_items ------------------------------------------------

    async def retrieve(
        self, response_id: str, principal: Principal, *, stream: bool, starting_after: int
    ) -> Response:
        live = self._live_for(response_id, principal)
        if stream:
            return await self._replay(response_id, principal, live, starting_after)
        if live is not None:
            view = ResponsesView(
                live.shell, progress=live.progress, remote_mcp=live.remote, files=live.files
            )
            for event in list(live.run.events):
                view.handle(event)
            return FastJSONResponse(view.response)
        return FastJSONResponse((await self._stored(response_id, principal)).body)

    async def _replay(
        self, response_id: str, principal: Principal, live: _Live | None, starting_after: int
    ) -> Response:
        """The response's stream again: while it runs from its live state, once it ended from
        the store (its request) and its run's logged events, while the run is remembered."""
        if live is not None:
            run, recorder = live.run, live.recorder
            view = ResponsesView(
                live.shell, progress=live.progress, remote_mcp=live.remote, files=live.files
            )
            frames = self._frames(
                run, view, lambda: asyncio.shield(recorder), leave_running=True,
                starting_after=starting_after,
            )  # fmt: skip
            return sse_response(
                frames,
                headers={"x-hermes-run-id": run.id},
                keepalive_seconds=self.services.keepalive_seconds,
            )
        stored = await self._stored(response_id, principal)  # 404 when there is none at all
        ended = self.services.runs.get(stored.run_id or "", owner=principal.name)
        logged = await self._logged_elsewhere(stored) if ended is None else None
        if (ended is None and logged is None) or "body" not in stored.request:
            raise APIError(
                409,
                "This response's event stream is no longer available; retrieve it "
                "without stream=true.",
                param="stream",
                code="stream_unavailable",
            )
        request = ResponseCreateRequest.model_validate(stored.request["body"])
        shell = request.shell(
            response_id=stored.id,
            created_at=stored.body["created_at"],
            model=stored.body["model"],
            status="queued" if request.background else "in_progress",
        )
        view = ResponsesView(
            shell,
            progress=stored.request.get("progress", "reasoning"),
            remote_mcp=RemoteMcpTools.from_record(stored.request.get("remote_mcp")),
            files=_announcer_of(stored.request.get("files_container")),
        )

        async def final() -> dict[str, Any]:
            return stored.body

        frames = self._frames(
            ended, view, final, leave_running=True, starting_after=starting_after, events=logged
        )
        return sse_response(
            frames,
            headers={"x-hermes-run-id": stored.run_id or ""},
            keepalive_seconds=self.services.keepalive_seconds,
        )

    async def _logged_elsewhere(self, stored: StoredResponse) -> AsyncIterator[AgentEvent] | None:
        """The events of a response's run another replica ran (or runs), from its log."""
        cluster = self.services.cluster
        if cluster is None or stored.run_id is None or not await cluster.has_events(stored.run_id):
            return None
        return cluster.events(stored.run_id)

    async def cancel(self, response_id: str, principal: Principal) -> Response:
        live = self._live_for(response_id, principal)
        if live is None or live.run.status.finished:
            stored = await self._stored(response_id, principal)
            if live is None and await self._stopped_elsewhere(stored, principal, "cancel"):
                return FastJSONResponse(await self._final_elsewhere(stored, principal))
            raise APIError(
                409,
                f"Response '{response_id}' is not in progress ({stored.status}).",
                code="response_not_cancellable",
            )
        self.services.runs.stop(live.run, InterruptSource.CANCEL_API)
        final = await asyncio.wait_for(asyncio.shield(live.recorder), CANCEL_WAIT_SECONDS)
        return FastJSONResponse(final)

    async def delete(self, response_id: str, principal: Principal) -> dict[str, Any]:
        live = self._live_for(response_id, principal)
        if live is None and self.services.cluster is not None:
            with contextlib.suppress(APIError):  # nothing stored: the 404 comes below
                stored = await self._stored(response_id, principal)
                if await self._stopped_elsewhere(stored, principal, "delete"):
                    await self._final_elsewhere(stored, principal)
        if live is not None:
            if not live.run.status.finished:
                self.services.runs.stop(live.run, InterruptSource.DELETE_API)
                await asyncio.wait_for(asyncio.shield(live.recorder), CANCEL_WAIT_SECONDS)
            self._live.pop(response_id, None)
        store = self.services.store
        deleted = store is not None and await store.responses.delete(principal.name, response_id)
        if not deleted and live is None:
            raise _not_found(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    async def _stopped_elsewhere(
        self, stored: StoredResponse, principal: Principal, why: Literal["cancel", "delete"]
    ) -> bool:
        """Stop the response's run on the replica running it; False when none does."""
        if stored.status not in ("queued", "in_progress") or stored.run_id is None:
            return False
        source = InterruptSource.CANCEL_API if why == "cancel" else InterruptSource.DELETE_API
        return await self.services.stop_anywhere(stored.run_id, principal.name, source) is not None

    async def _final_elsewhere(
        self, stored: StoredResponse, principal: Principal
    ) -> dict[str, Any]:
        """The response once the replica that ran it stored it final (or as it is, after
        ``CANCEL_WAIT_SECONDS``)."""
        deadline = time.monotonic() + CANCEL_WAIT_SECONDS
        while stored.status in ("queued", "in_progress") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            stored = await self._stored(stored.id, principal)
        return stored.body

    async def input_items(
        self,
        response_id: str,
        principal: Principal,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> dict[str, Any]:
        stored = await self._stored(response_id, principal)
        items: list[dict[str, Any]] = list(stored.request.get("input_items", []))
        if order == "desc":
            items.reverse()
        if after is not None:
            ids = [item.get("id") for item in items]
            if after not in ids:
                raise APIError(404, f"No input item '{after}' in this response.", param="after")
            items = items[ids.index(after) + 1 :]
        page = items[:limit]
        return {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }

    def _live_for(self, response_id: str, principal: Principal) -> _Live | None:
        live = self._live.get(response_id)
        return live if live is not None and live.run.owner == principal.name else None

    async def _stored(self, response_id: str, principal: Principal) -> StoredResponse:
        store = self.services.store
        found = await store.responses.get(principal.name, response_id) if store else None
        if found is None:
            raise _not_found(response_id)
        return found


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


def _not_found(response_id: str) -> APIError:
    return APIError(
        404, f"Response with id '{response_id}' not found.", param="response_id",
        code="response_not_found",
    )  # fmt: skip


def _announcer_of(container: Any) -> FileAnnouncer | None:
    """How a stored response cited its files, for a replay of its stream."""
    return FileAnnouncer(container) if isinstance(container, str) else None


def _joining(previous: StoredResponse | None, *, store: bool) -> JoinSession:
    """How a turn joins its session: after ``previous`` (the response it continues), forking
    the session when that was not its last; with none, the session the client names, as a
    chat turn would (its input is the visible history), or a new one. A turn of
    ``store: false`` keeps nothing: it reads the session it continues, and joins none."""
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
            if after is None and name is not None:
                return await join_by_name(
                    sessions,
                    agent,
                    request,
                    owner=owner,
                    profile=profile,
                    run_id=run_id,
                    name=name,
                )
            if not store:
                if after is None:
                    return Joined(request)
                peeked, conversation = await sessions.peek_after(
                    agent, request, owner=owner, after=after
                )
                return Joined(peeked, None, conversation)
            turn = await sessions.begin_after(
                agent, request, owner=owner, profile=profile, run_id=run_id, after=after
            )
        except LookupError as exc:
            raise APIError(
                404,
                "The session of the previous response no longer exists.",
                param="previous_response_id",
                code="previous_response_not_found",
            ) from exc
        forked = turn.forked_from is not None
        return Joined(turn.request, turn.session_id, turn.conversation, forked)

    return join


def _progress(request: HTTPConnection, profile: Profile) -> Progress:
    """Standard events by default; structured tool events or Open WebUI's tool cards on request
    (``X-Hermes-Progress: events|openwebui``), or for Open WebUI itself."""
    asked = request.headers.get("x-hermes-progress", "").strip().lower()
    if asked in ("events", "openwebui"):
        return asked  # type: ignore[return-value]
    if profile.openwebui or is_openwebui(request):
        return "openwebui"
    return "reasoning"
