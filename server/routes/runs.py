"""Native run control: status, the replayable event stream, and stop."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response

from hermes_core.events import AgentEvent, InterruptSource
from hermes_core.persistence import RunRecord
from hermes_core.persistence.disk_full import StorageFull
from server.errors import APIError
from server.http.auth import Principal, require_principal
from server.http.input_text import StrictJSONRoute
from server.http.openapi import errors, success
from server.http.sse import sse_response
from server.protocol.schemas.runs import (
    Approval,
    ApprovalAnswer,
    RunEvent,
    RunObject,
    RunStopped,
)
from server.runs.approvals import answer_pending, approval_object
from server.runs.manager import Run
from server.services import Services

router = APIRouter(prefix="/v1/runs", tags=["runs"], route_class=StrictJSONRoute)


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _find(request: Request, run_id: str, principal: Principal) -> Run:
    run = _services(request).runs.get(run_id, owner=principal.name)
    if run is None:  # another key's run is as invisible as a missing one
        raise APIError(404, f"No run '{run_id}'.", param="run_id", code="run_not_found")
    return run


def describe(run: Run) -> dict[str, Any]:
    end = run.finished
    return {
        "id": run.id,
        "object": "hermes.run",
        "endpoint": run.endpoint,
        "model": run.model,
        "completion_id": run.completion_id or None,
        "session_id": run.session_id,
        "status": run.status.value,
        "exit_reason": run.exit_reason.value if run.exit_reason else None,
        "error": run.error,
        "created_at": int(run.created_at),
        "ended_at": int(run.ended_at) if run.ended_at else None,
        "iterations": end.iterations if end else None,
        "usage": end.usage.as_dict() if end else None,
        "events": len(run.events),
    }


@router.get("/{run_id}", response_model=RunObject, responses=errors(401, 404))
async def get_run(
    run_id: str, request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> dict[str, Any]:
    """A run's status, the approvals it asked for and, once it ended, its exit reason and
    usage — also for runs of an earlier start of the server, from the database."""
    services = _services(request)
    store = services.store
    run = services.runs.get(run_id, owner=principal.name)
    if run is not None:
        described = describe(run)
    else:
        record = await store.runs.get(principal.name, run_id) if store is not None else None
        if record is None:
            raise APIError(404, f"No run '{run_id}'.", param="run_id", code="run_not_found")
        described = describe_record(record)
    try:
        asked = await store.approvals.of_run(principal.name, described["id"]) if store else []
    except StorageFull:
        if run is None:
            raise  # a 507: what the database says of this run may be stale
        # The disk is full: the run's own state, held here, still answers (whether it ended).
        asked = []
    return {**described, "approvals": [approval_object(record) for record in asked]}


def describe_record(record: RunRecord) -> dict[str, Any]:
    """A run known only from the database (its events are gone with the process)."""
    return {
        "id": record.id,
        "object": "hermes.run",
        "endpoint": record.endpoint,
        "model": record.model,
        "completion_id": record.completion_id,
        "session_id": record.session_id,
        "status": record.status,
        "exit_reason": record.exit_reason,
        "error": record.error,
        "created_at": int(record.created_at),
        "ended_at": int(record.ended_at) if record.ended_at else None,
        "iterations": record.iterations,
        "usage": record.usage or None,
        "events": 0,
    }


_EVENT_ID = re.compile(r"-?[0-9]{1,18}")
"""A sequence number as this stream sends it in ``id:`` (ASCII digits; 18 fit an int64)."""


def _event_id(value: str) -> int:
    """``Last-Event-ID``: the ``id:`` of the last event a reconnecting client saw."""
    value = value.strip()
    if not _EVENT_ID.fullmatch(value):
        raise APIError(
            400,
            "Last-Event-ID must be the id of an event of this stream (a sequence number).",
            param="last-event-id",
        )
    return int(value)


def event_frame(event: AgentEvent) -> bytes:
    payload = json.dumps(dataclasses.asdict(event), ensure_ascii=False, separators=(",", ":"))
    # The native stream may carry ids: they let EventSource clients resume by Last-Event-ID.
    return f"id: {event.seq}\nevent: {event.kind}\ndata: {payload}\n\n".encode()


@router.get(
    "/{run_id}/events",
    response_model=None,
    # Only for the document (no JSON answer to list); the handler returns its own response.
    response_class=Response,
    responses={
        200: success(
            None,
            "The run's native events as SSE: the log so far, then live ones until it ends.",
            stream=RunEvent,
        ),
        **errors(400, 401, 404),
    },
)
async def run_events(
    run_id: str,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
    after: Annotated[int, Query(ge=-1, description="Resume after this sequence number.")] = -1,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """The run's native events as SSE: the log so far, then live ones until the run ends —
    on any replica (another replica's run is read from its log in Redis)."""
    if last_event_id is not None:
        after = max(after, _event_id(last_event_id))
    services = _services(request)
    run = services.runs.get(run_id, owner=principal.name)
    events: AsyncIterator[AgentEvent]
    if run is not None:
        found, events = run.id, run.follow(after=after)
    else:
        logged = await _logged_run(services, principal, run_id, after)
        if logged is None:
            raise APIError(404, f"No run '{run_id}'.", param="run_id", code="run_not_found")
        found, events = logged

    async def frames() -> AsyncIterator[bytes]:
        async for event in events:
            yield event_frame(event)

    return sse_response(
        frames(), headers={"x-hermes-run-id": found}, keepalive_seconds=services.keepalive_seconds
    )


async def _logged_run(
    services: Services, principal: Principal, run_id: str, after: int
) -> tuple[str, AsyncIterator[AgentEvent]] | None:
    """Another replica's run of ``principal``, as its id and its logged events after ``after``."""
    cluster, store = services.cluster, services.store
    if cluster is None or store is None:
        return None
    record = await store.runs.get(principal.name, run_id)
    if record is None or not await cluster.has_events(record.id):
        return None
    return record.id, cluster.events(record.id, after=after)


@router.post(
    "/{run_id}/approvals/{approval_id}",
    response_model=Approval,
    responses=errors(400, 401, 404, 409),
)
async def answer_approval(
    run_id: str,
    approval_id: str,
    answer: ApprovalAnswer,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
) -> dict[str, Any]:
    """Approve or deny a tool call the run asked about. A run paused on it goes on at once;
    a run that ended awaiting it goes on with the conversation's next request."""
    services = _services(request)
    record = await answer_pending(
        services.store,
        services.approvals,
        owner=principal.name,
        run_id=run_id,
        approval_id=approval_id,
        approve=answer.approve,
        scope=answer.scope,
    )
    return approval_object(record)


@router.post(
    "/{run_id}/stop",
    status_code=202,
    response_model=None,
    responses={202: success(RunStopped, "Stopping."), **errors(401, 404, 409)},
)
async def stop_run(
    run_id: str, request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> JSONResponse:
    """Interrupt a run (by run id or ``chatcmpl-`` id), on whichever replica runs it; it then
    ends as ``interrupted``."""
    services = _services(request)
    run = services.runs.get(run_id, owner=principal.name)
    if run is None:
        stopped = await services.stop_anywhere(run_id, principal.name, InterruptSource.STOP_API)
        if stopped is not None:  # another replica runs it: the stop is on its way there
            return JSONResponse({"id": stopped, "object": "hermes.run", "status": "stopping"}, 202)
    run = _find(request, run_id, principal)
    if run.status.finished:
        raise APIError(
            409, f"Run '{run.id}' already ended ({run.status.value}).", code="run_finished"
        )
    services.runs.stop(run, InterruptSource.STOP_API)
    return JSONResponse({"id": run.id, "object": "hermes.run", "status": run.status.value}, 202)
