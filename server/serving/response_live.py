"""A response in progress: its recorder, its stream, and where a retrieve finds it while it
runs."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from hermes_core.events import AgentEvent, RunFinished
from hermes_core.persistence import StoredResponse
from hermes_core.persistence.disk_full import StorageFull
from server.http.auth import Principal
from server.http.sse import DONE, named_frame
from server.protocol.responses import ResponseCreateRequest
from server.runs.manager import Run
from server.services import Services
from server.views.file_citations import FileAnnouncer
from server.views.response_mcp import RemoteMcpTools
from server.views.responses import ResponsesView

Progress = Literal["reasoning", "events", "openwebui"]
LIVE_KEPT = 1000
"""Responses in progress that may be re-attached to (retrieve with stream=true) at most."""


@dataclass(slots=True)
class Live:
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


class LiveResponses:
    """The responses in progress that were stored, by id, until each is final."""

    def __init__(self) -> None:
        self._live: OrderedDict[str, Live] = OrderedDict()

    def remember(self, live: Live) -> None:
        response_id = live.shell["id"]
        self._live[response_id] = live
        # Once final (and stored), it is replayed from the store: forget it here.
        live.recorder.add_done_callback(lambda _: self._live.pop(response_id, None))
        while len(self._live) > LIVE_KEPT:
            self._live.popitem(last=False)

    def get(self, response_id: str, principal: Principal) -> Live | None:
        live = self._live.get(response_id)
        return live if live is not None and live.run.owner == principal.name else None

    def forget(self, response_id: str) -> None:
        self._live.pop(response_id, None)


def record(
    services: Services,
    run: Run,
    body: ResponseCreateRequest,
    shell: dict[str, Any],
    principal: Principal,
    progress: Progress,
    remote: RemoteMcpTools | None,
    files: FileAnnouncer | None,
    release: Callable[[], bool] | None = None,
) -> asyncio.Task[dict[str, Any]]:
    """The response's recorder: saves it as it starts and as it ends (unless ``store`` is
    false), and gives its final object. ``release``: gives back the conversation's turn,
    which the run's ending left to this response's save (``server/sessions/journal.py``);
    True when it went back (queued) now. Called once the save is queued, however the
    recorder ends."""
    store = services.store if body.store else None
    sources = body.hosted_tools().sources
    view = ResponsesView(shell, progress=progress, remote_mcp=remote, files=files, sources=sources)
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
                end_user=run.info.end_user,
            )
        )

    save(shell)  # now, so that a background response can be retrieved at once

    released = False

    def give_back() -> bool:
        nonlocal released
        if release is None or released:
            return False
        released = True
        return release()

    async def record() -> dict[str, Any]:
        try:
            await run.until_finished()
            for event in run.events:
                view.handle(event)
            final = view.response
            save(final)
        finally:
            given_back = give_back()
        if given_back and services.store is not None:
            # The save and the turn's release (a batch writes it last) are durable before the
            # client hears of the end: its next turn may come through another replica.
            with contextlib.suppress(StorageFull):  # queued: written once there is room
                await services.store.db.writer.flush()
        return final

    recorder = asyncio.create_task(record(), name=f"hermes-record-{shell['id']}")
    recorder.add_done_callback(lambda _: give_back())  # one cancelled before it began
    return recorder


async def response_frames(
    services: Services,
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
        if leaving and run is not None and services.stop_on_disconnect:
            services.runs.follower_left(run)
