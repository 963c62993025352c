"""A response once begun: retrieved (as an object, or its stream again), cancelled, deleted,
its input items listed; while it runs from its live state, once it ended from the store."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi.responses import Response

from hermes_core.events import AgentEvent, InterruptSource
from hermes_core.persistence import StoredResponse
from server.errors import APIError
from server.http.auth import Principal
from server.http.json_response import FastJSONResponse
from server.http.sse import sse_response
from server.protocol.pages import list_page
from server.protocol.responses import ResponseCreateRequest
from server.services import Services, redis_needed
from server.serving.response_live import Live, LiveResponses, response_frames
from server.views.file_citations import FileAnnouncer
from server.views.response_mcp import RemoteMcpTools
from server.views.responses import ResponsesView

CANCEL_WAIT_SECONDS = 30.0


class StoredResponses:
    """``GET``, ``DELETE``, ``cancel`` and ``input_items`` of ``/v1/responses/{id}``."""

    def __init__(self, services: Services, live: LiveResponses) -> None:
        self.services = services
        self.live = live

    async def retrieve(
        self, response_id: str, principal: Principal, *, stream: bool, starting_after: int
    ) -> Response:
        live = self.live.get(response_id, principal)
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
        self, response_id: str, principal: Principal, live: Live | None, starting_after: int
    ) -> Response:
        """The response's stream again: while it runs from its live state, once it ended from
        the store (its request) and its run's logged events, while the run is remembered."""
        if live is not None:
            run, recorder = live.run, live.recorder
            view = ResponsesView(
                live.shell, progress=live.progress, remote_mcp=live.remote, files=live.files
            )
            frames = response_frames(
                self.services,
                run,
                view,
                lambda: asyncio.shield(recorder),
                leave_running=True,
                starting_after=starting_after,
            )
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
            sources=request.hosted_tools().sources,
        )

        async def final() -> dict[str, Any]:
            return stored.body

        frames = response_frames(
            self.services,
            ended,
            view,
            final,
            leave_running=True,
            starting_after=starting_after,
            events=logged,
        )
        return sse_response(
            frames,
            headers={"x-hermes-run-id": stored.run_id or ""},
            keepalive_seconds=self.services.keepalive_seconds,
        )

    async def _logged_elsewhere(self, stored: StoredResponse) -> AsyncIterator[AgentEvent] | None:
        """The events of a response's run another replica ran (or runs), from its log."""
        cluster = self.services.cluster
        if cluster is None or stored.run_id is None:
            return None
        with redis_needed():  # Redis away: a 503 to retry, not a 500
            logged = await cluster.has_events(stored.run_id)
        return cluster.events(stored.run_id) if logged else None

    async def cancel(self, response_id: str, principal: Principal) -> Response:
        live = self.live.get(response_id, principal)
        if live is None and self.services.cluster is not None:
            early = await self._cancelled_early(response_id, principal)
            if early is not None:
                return FastJSONResponse(early)
        if live is not None and not live.run.status.finished:
            self.services.runs.stop(live.run, InterruptSource.CANCEL_API)
            final = await asyncio.wait_for(asyncio.shield(live.recorder), CANCEL_WAIT_SECONDS)
            return FastJSONResponse(final)
        if live is not None:  # ended, its final object not yet stored
            final = await asyncio.wait_for(asyncio.shield(live.recorder), CANCEL_WAIT_SECONDS)
        else:
            stored = await self._stored(response_id, principal)
            if await self._stopped_elsewhere(stored, principal, "cancel"):
                return FastJSONResponse(await self._final_elsewhere(stored, principal))
            final = stored.body
        if final["status"] == "cancelled":
            # Cancelling twice is idempotent, as on OpenAI: a client that retries a cancel
            # (its first answer lost) gets the cancelled response again, not a conflict.
            return FastJSONResponse(final)
        raise APIError(
            409,
            f"Response '{response_id}' is not in progress ({final['status']}).",
            code="response_not_cancellable",
        )

    async def delete(self, response_id: str, principal: Principal) -> dict[str, Any]:
        live = self.live.get(response_id, principal)
        if live is None and self.services.cluster is not None:
            with contextlib.suppress(APIError):  # nothing stored: the 404 comes below
                stored = await self._stored(response_id, principal)
                if await self._stopped_elsewhere(stored, principal, "delete"):
                    await self._final_elsewhere(stored, principal)
        if live is not None:
            if not live.run.status.finished:
                self.services.runs.stop(live.run, InterruptSource.DELETE_API)
                await asyncio.wait_for(asyncio.shield(live.recorder), CANCEL_WAIT_SECONDS)
            self.live.forget(response_id)
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

    async def _cancelled_early(
        self, response_id: str, principal: Principal
    ) -> dict[str, Any] | None:
        """Cancel a response another replica began so recently that it is not stored yet (it
        is saved behind, in batches), by its run's reservation; then the response once that
        replica stored it. None: it is stored already (or nobody runs it)."""
        store = self.services.store
        if store is None or await store.responses.get(principal.name, response_id) is not None:
            return None
        source = InterruptSource.CANCEL_API
        if await self.services.stop_anywhere(response_id, principal.name, source) is None:
            return None
        deadline = time.monotonic() + CANCEL_WAIT_SECONDS
        while time.monotonic() < deadline:
            stored = await store.responses.get(principal.name, response_id)
            if stored is not None and stored.status not in ("queued", "in_progress"):
                return stored.body
            await asyncio.sleep(0.05)
        return None

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
        items = [_listed(item) for item in stored.request.get("input_items", [])]
        if order == "desc":
            items.reverse()
        if after is not None:
            ids = [item.get("id") for item in items]
            if after not in ids:
                raise APIError(404, f"No input item '{after}' in this response.", param="after")
            items = items[ids.index(after) + 1 :]
        return list_page(items[:limit], has_more=len(items) > limit)

    async def _stored(self, response_id: str, principal: Principal) -> StoredResponse:
        store = self.services.store
        found = await store.responses.get(principal.name, response_id) if store else None
        if found is None:
            raise _not_found(response_id)
        return found


def _not_found(response_id: str) -> APIError:
    return APIError(
        404, f"Response with id '{response_id}' not found.", param="response_id",
        code="response_not_found",
    )  # fmt: skip


_LISTED_WITH_STATUS = frozenset({"message", "function_call", "function_call_output"})
"""Input item types OpenAI's list gives a ``status``: the SDK's item types require one of an
assistant message, a function call and a function call's output (a strict client refuses a
page without it)."""


def _listed(item: dict[str, Any]) -> dict[str, Any]:
    """An input item as ``input_items`` lists it: as the client sent it, with what OpenAI's
    list always shows and a client may leave out — ``completed`` when it gave no status (an
    input item is whole once sent), and its content parts' defaults."""
    if item.get("type") not in _LISTED_WITH_STATUS:
        return item
    listed = {**item, "status": item.get("status") or "completed"}
    content = item.get("content")
    if isinstance(content, list):
        listed["content"] = [_listed_part(part) for part in content]
    return listed


def _listed_part(part: Any) -> Any:
    """A content part with what it left out that the SDK's types require: an image's
    ``detail`` (``auto``, its default), an answer's ``annotations`` (none)."""
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "input_image":
        return {**part, "detail": part.get("detail") or "auto"}
    if kind == "output_text":
        return {**part, "annotations": part.get("annotations") or []}
    return part


def _announcer_of(container: Any) -> FileAnnouncer | None:
    """How a stored response cited its files, for a replay of its stream."""
    return FileAnnouncer(container) if isinstance(container, str) else None
