"""Native runs: start one that goes on without its client (``POST /v1/runs``), list a key's
runs, read one's status, its replayable event stream and webhook deliveries, stop it, answer
its approvals; and ``GET /v1/webhooks/deliveries``."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.requests import HTTPConnection

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import AgentEvent, InterruptSource
from hermes_core.persistence import RunRecord
from hermes_core.persistence.disk_full import StorageFull
from hermes_core.persistence.webhooks import Delivery
from hermes_core.tools.web.guard import checked_addresses, system_lookup
from server.errors import APIError
from server.http.auth import Principal, require_principal
from server.http.idempotency import claim_of
from server.http.input_text import StrictJSONRoute
from server.http.openapi import errors, success
from server.http.sse import sse_response
from server.protocol.pages import list_page
from server.protocol.responses import ResponseCreateRequest
from server.protocol.schemas.runs import (
    Approval,
    ApprovalAnswer,
    RunCreateRequest,
    RunEvent,
    RunList,
    RunObject,
    RunSteered,
    RunSteerRequest,
    RunStopped,
    RunWebhook,
    WebhookDeliveryList,
)
from server.runs.approvals import answer_pending, approval_object
from server.runs.manager import Run, RunStatus
from server.services import Services, redis_needed
from server.serving.common import resolve_profile
from server.serving.end_users import end_user_id, end_user_of
from server.serving.item_references import resolve_item_references
from server.serving.response_chain import conversation_of, in_conversation
from server.serving.turn import Joined, JoinSession, TurnSpec, begin_turn, join_by_name
from server.sessions.service import MAX_NAME_LENGTH, valid_name
from server.webhooks.service import RUNS_ENDPOINT, RequestWebhook
from server.webhooks.signing import secret_key

if TYPE_CHECKING:
    from server.sessions.service import SessionService

router = APIRouter(prefix="/v1/runs", tags=["runs"], route_class=StrictJSONRoute)
webhooks_router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"], route_class=StrictJSONRoute)
Owner = Annotated[Principal, Depends(require_principal)]


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _viewer(request: Request, principal: Principal) -> str | None:
    """The end user a request names, whose runs alone it sees; None: the key, which sees all
    of its runs (they are its record of what ran: how it stops a runaway one)."""
    end_user = end_user_of(request, principal)
    return end_user.id if end_user is not None else None


async def _visible(request: Request, principal: Principal, run_id: str) -> bool:
    """Whether the request may see its key's run ``run_id`` (if there is one): a request
    naming no end user sees them all; one naming an end user, only theirs."""
    viewer = _viewer(request, principal)
    if viewer is None:
        return True
    services = _services(request)
    run = services.runs.get(run_id, owner=principal.name)
    if run is not None:
        owner = run.info.end_user
    else:
        record = await services.store.runs.get(principal.name, run_id) if services.store else None
        owner = record.end_user if record is not None else None
    return owner == viewer


async def _check_visible(request: Request, principal: Principal, run_id: str) -> None:
    """A 404 for a run of another end user than the one the request names, as for a run
    that does not exist."""
    if not await _visible(request, principal, run_id):
        raise APIError(404, f"No run '{run_id}'.", param="run_id", code="run_not_found")


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
        "end_user": run.info.end_user,
        "completion_id": run.completion_id or None,
        "session_id": run.session_id,
        "status": run.status.value,
        "exit_reason": run.exit_reason.value if run.exit_reason else None,
        "error": run.error,
        "created_at": int(run.created_at),
        "ended_at": int(run.ended_at) if run.ended_at else None,
        "iterations": end.iterations if end else None,
        "usage": end.usage.as_dict() if end else None,
        "cost_usd": end.cost_usd if end else None,
        "events": len(run.events),
    }


# --- POST /v1/runs, GET /v1/runs ------------------------------------------------------------------


@router.post(
    "",
    status_code=202,
    response_model=RunObject,
    responses=errors(400, 401, 403, 404, 409, 429),
)
async def create_run(body: RunCreateRequest, request: Request, principal: Owner) -> Response:
    """Start a run of a profile (``model``) on ``input``, in a session or a conversation (or
    a new session); it goes on without the client. Follow it with ``/v1/runs/{id}/events``,
    read it with ``GET /v1/runs/{id}``, or be told by its ``webhook``. Retried with the same
    ``Idempotency-Key`` and body, it answers the first request's run again instead of
    starting another."""
    services = _services(request)
    # The body as sent is what the same request is (read already: FastAPI parsed it), as on
    # chat and Responses; a retry after a lost 202 gets that 202 (server/http/idempotency.py).
    sent = await request.body()
    claim = claim_of(request.scope, principal, lambda: (sent,))

    async def start() -> JSONResponse:
        described, headers = await start_api_run(services, request, principal, body)
        return JSONResponse(described, status_code=202, headers=headers)

    return await services.idempotency.once(claim, start)


async def start_api_run(
    services: Services, request: HTTPConnection, principal: Principal, body: RunCreateRequest
) -> tuple[dict[str, Any], dict[str, str]]:
    """Start the run ``body`` asks for: the run as ``POST /v1/runs`` answers it, and its
    headers (also how a schedule's firing starts its run, with a connection of its own)."""
    if body.session is not None and body.conversation is not None:
        raise APIError(400, "Name a session or a conversation, not both.", param="session")
    checked_session(body.session)
    metadata = _checked_metadata(body.metadata)
    hook = await _checked_webhook(services, body.webhook) if body.webhook else None
    profile = resolve_profile(services, body.model, principal)
    end_user = end_user_id(request, principal)
    body = await with_referenced_items(services, principal, body, end_user)
    turn = _as_response_request(body)
    conversation = await conversation_of(services, turn, principal, end_user=end_user)

    def agent_request(*, client_tools: bool, offer_tools: bool, run_id: str) -> AgentRequest:
        made = turn.to_agent_request(with_client_tools=False)
        # Nobody watches yet; a client may follow the run later: stream the model's replies.
        return dataclasses.replace(
            made, offer_tools=offer_tools, run_id=run_id, stream_model_replies=True
        )

    begun = await begin_turn(
        services,
        request,
        principal,
        profile,
        TurnSpec(
            endpoint=RUNS_ENDPOINT,
            completion_id="",
            agent_request=agent_request,
            side_task=False,
            openwebui=False,
            join=in_conversation(conversation) if conversation else _named(body.session),
            named=False,
            session_busy=body.session_busy,
        ),
    )
    run, headers = begun.run, begun.headers
    if "x-hermes-steered-into" in headers:
        # The input went into the session's running run (session_busy: steer): that run is
        # the answer, as GET /v1/runs/{id} shows it; it keeps its own metadata and webhook.
        return await _with_records(services, principal, describe(run), live=True), headers
    if hook is not None:  # before anything is awaited: the run cannot have ended yet
        services.webhooks.requested(run.id, hook)
    store = services.store
    if store is not None:
        await store.webhooks.remember_run(
            run_id=run.id,
            owner=principal.name,
            metadata=metadata,
            webhook_url=hook.url if hook else None,
            webhook_secret=hook.secret if hook else None,
            created_at=run.created_at,
        )
        # Its record is durable before its id is handed out (a restart then shows its end).
        await run.until_started()
        await store.db.writer.flush()
    described = {**describe(run), "metadata": metadata, "approvals": [], "webhooks": []}
    return described, headers


def _named(session: str | None) -> JoinSession:
    """How a run joins the session the body names (or a new one). A run's input is only what
    it adds (a cron's same words each night, say), never the visible history a chat client
    resends: so it goes on from the session as it stands, as a conversation's turn does,
    instead of being reconciled with it (which forked the session empty at every run)."""
    if session is not None:
        return in_conversation(session)

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
        return await join_by_name(
            sessions, agent, request, owner=owner, profile=profile, run_id=run_id, name=session
        )

    return join


async def with_referenced_items(
    services: Services, principal: Principal, body: RunCreateRequest, end_user: str | None
) -> RunCreateRequest:
    """``body`` with each ``item_reference`` of its input replaced by the item it names, of a
    stored response the request sees (a 400 otherwise), as ``/v1/responses`` takes them."""
    if isinstance(body.input, str):
        return body
    items = list(body.input)
    await resolve_item_references(services.store, principal.name, items, end_user=end_user)
    return body.model_copy(update={"input": items})


def _as_response_request(body: RunCreateRequest) -> ResponseCreateRequest:
    """The run's input read as a Responses request's (text or items, instructions)."""
    try:
        return ResponseCreateRequest.model_validate(
            {
                "model": body.model,
                "input": body.input,
                "instructions": body.instructions,
                "conversation": body.conversation,
            }
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or None
        raise APIError(400, f"Invalid input: {first['msg']}.", param=where) from None


def checked_session(name: str | None) -> None:
    """A 400 for a session name the sessions' routes (and ``X-Hermes-Session-Id``) could not
    name: a session a run made so could not be read or deleted by its name."""
    if name is not None and not valid_name(name):
        raise APIError(
            400, f"session is 1 to {MAX_NAME_LENGTH} printable characters.", param="session"
        )


def _checked_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    metadata = metadata or {}
    if len(metadata) > 16 or any(len(k) > 64 or len(v) > 512 for k, v in metadata.items()):
        raise APIError(
            400,
            "metadata holds at most 16 pairs, keys up to 64 characters, values up to 512.",
            param="metadata",
        )
    return metadata


async def _checked_webhook(services: Services, hook: RunWebhook) -> RequestWebhook:
    """The run's own webhook, if the server can keep it and may reach it (a 400 otherwise)."""
    if not services.webhooks.enabled:
        raise APIError(400, "This server keeps no webhooks (it runs without a database).")
    if hook.secret is None:
        raise APIError(
            400,
            "webhook.secret is required: a whsec_ secret of yours the events are signed with.",
            param="webhook.secret",
        )
    try:
        secret_key(hook.secret)
    except ValueError as bad:
        raise APIError(400, f"webhook.secret: {bad}.", param="webhook.secret") from None
    policy = services.address_policy
    try:
        host = policy.check_url(hook.url)
        parts = urlsplit(hook.url)
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        await checked_addresses(policy, system_lookup, host, port)
    except (OSError, ValueError) as refused:
        raise APIError(400, f"webhook.url: {refused}.", param="webhook.url") from None
    return RequestWebhook(url=hook.url, secret=hook.secret)


@router.get("", response_model=RunList, responses=errors(400, 401))
async def list_runs(
    request: Request,
    principal: Owner,
    status: Annotated[RunStatus | None, Query(description="Only runs in this state.")] = None,
    session: Annotated[
        str | None, Query(max_length=256, description="A session's name or id.")
    ] = None,
    since: Annotated[
        int | None, Query(ge=0, description="Only runs created at or after (UNIX seconds).")
    ] = None,
    after: Annotated[str | None, Query(max_length=64, description="The last id seen.")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    """The key's runs, newest first: every endpoint's, ``POST /v1/runs``' with their
    metadata."""
    services = _services(request)
    store = services.store
    if store is None:
        return list_page([], has_more=False)
    records, more = await store.webhooks.runs_page(
        principal.name,
        end_user=_viewer(request, principal),
        after=after,
        limit=limit,
        status=status.value if status else None,
        session=session,
        since=since,
    )
    extras = await store.webhooks.api_runs(principal.name, [r.id for r in records])
    data = []
    for record in records:
        live = services.runs.get(record.id, owner=principal.name)
        described = describe(live) if live is not None else describe_record(record)
        extra = extras.get(record.id)
        described["metadata"] = extra.metadata if extra is not None else None
        data.append(described)
    return list_page(data, has_more=more)


def delivery_object(delivery: Delivery) -> dict[str, Any]:
    pending = delivery.status == "pending"
    return {
        "id": delivery.id,
        "object": "hermes.webhook_delivery",
        "event_id": delivery.event_id,
        "type": delivery.event_type,
        "run_id": delivery.run_id,
        "source": delivery.source,
        # An operator's endpoint is not the key's to see (its address may carry a token).
        "url": delivery.url if delivery.source == "request" else None,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "next_attempt_at": int(delivery.next_attempt_at) if pending else None,
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "created_at": int(delivery.created_at),
        "delivered_at": int(delivery.delivered_at) if delivery.delivered_at else None,
    }


@webhooks_router.get("/deliveries", response_model=WebhookDeliveryList, responses=errors(400, 401))
async def list_deliveries(
    request: Request,
    principal: Owner,
    run_id: Annotated[str | None, Query(max_length=64, description="Only this run's.")] = None,
    after: Annotated[str | None, Query(max_length=64, description="The last id seen.")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    """The key's webhook deliveries (of its runs' and background responses' events), newest
    first: where each stands, its attempts and the last failure."""
    store = _services(request).store
    if _viewer(request, principal) is not None:
        # Deliveries are kept per key, and name their runs and their URLs (which may carry a
        # token): a request for an end user lists those of one run of theirs at a time.
        if run_id is None:
            raise APIError(
                400,
                "A request naming an end user lists the deliveries of one of their runs: "
                "give run_id.",
                param="run_id",
            )
        if not await _visible(request, principal, run_id):
            return list_page([], has_more=False)  # as for a run that does not exist
    if store is None:
        return list_page([], has_more=False)
    found, more = await store.webhooks.page(principal.name, after=after, limit=limit, run_id=run_id)
    return list_page([delivery_object(d) for d in found], has_more=more)


# --- one run --------------------------------------------------------------------------------------


@router.get("/{run_id}", response_model=RunObject, responses=errors(401, 404))
async def get_run(
    run_id: str, request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> dict[str, Any]:
    """A run's status, the approvals it asked for and, once it ended, its exit reason and
    usage — also for runs of an earlier start of the server, from the database."""
    await _check_visible(request, principal, run_id)
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
    return await _with_records(services, principal, described, live=run is not None)


async def _with_records(
    services: Services, principal: Principal, described: dict[str, Any], *, live: bool
) -> dict[str, Any]:
    """The run ``described`` with what the database keeps of it: its approvals, its metadata
    and its webhook deliveries (``live``: the run is held here, and answers on a full disk)."""
    store = services.store
    try:
        asked = await store.approvals.of_run(principal.name, described["id"]) if store else []
    except StorageFull:
        if not live:
            raise  # a 507: what the database says of this run may be stale
        # The disk is full: the run's own state, held here, still answers (whether it ended).
        asked = []
    if store is not None:
        extra = (await store.webhooks.api_runs(principal.name, [described["id"]])).get(
            described["id"]
        )
        described["metadata"] = extra.metadata if extra is not None else None
        sent = await store.webhooks.of_run(principal.name, described["id"])
        described["webhooks"] = [delivery_object(d) for d in sent]
    return {**described, "approvals": [approval_object(record) for record in asked]}


def describe_record(record: RunRecord) -> dict[str, Any]:
    """A run known only from the database (its events are gone with the process)."""
    return {
        "id": record.id,
        "object": "hermes.run",
        "endpoint": record.endpoint,
        "model": record.model,
        "end_user": record.end_user,
        "completion_id": record.completion_id,
        "session_id": record.session_id,
        "status": record.status,
        "exit_reason": record.exit_reason,
        "error": record.error,
        "created_at": int(record.created_at),
        "ended_at": int(record.ended_at) if record.ended_at else None,
        "iterations": record.iterations,
        "usage": record.usage or None,
        "cost_usd": record.cost_usd if record.ended_at is not None else None,
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
    await _check_visible(request, principal, run_id)
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
    if record is None:
        return None
    with redis_needed():  # Redis away: a 503 to retry, not a 500
        logged = await cluster.has_events(record.id)
    return (record.id, cluster.events(record.id, after=after)) if logged else None


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
    await _check_visible(request, principal, run_id)
    services = _services(request)
    record = await answer_pending(
        services.store,
        services.approvals,
        owner=principal.name,
        run_id=run_id,
        approval_id=approval_id,
        approve=answer.approve,
        scope=answer.scope,
        replicas=services.cluster is not None,
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
    await _check_visible(request, principal, run_id)
    services = _services(request)
    run = services.runs.get(run_id, owner=principal.name)
    if run is None:
        stopped = await services.stop_anywhere(run_id, principal.name, InterruptSource.STOP_API)
        if stopped is not None:  # another replica runs it: the stop is on its way there
            return JSONResponse({"id": stopped, "object": "hermes.run", "status": "stopping"}, 202)
        # Ended on another replica (or before this one's start): as its own replica says.
        record = await services.store.runs.get(principal.name, run_id) if services.store else None
        if record is not None:
            raise APIError(
                409, f"Run '{record.id}' already ended ({record.status}).", code="run_finished"
            )
    run = _find(request, run_id, principal)
    if run.status.finished:
        raise APIError(
            409, f"Run '{run.id}' already ended ({run.status.value}).", code="run_finished"
        )
    services.runs.stop(run, InterruptSource.STOP_API)
    return JSONResponse({"id": run.id, "object": "hermes.run", "status": run.status.value}, 202)


@router.post(
    "/{run_id}/steer",
    status_code=202,
    response_model=RunSteered,
    responses=errors(400, 401, 404, 409),
)
async def steer_run(
    run_id: str,
    body: RunSteerRequest,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
) -> JSONResponse:
    """Give a running run ``input`` as a user message before its next model call, on
    whichever replica runs it: its answer then answers it too. 409 when the run is not
    running, or has made its last model call (its answer is final)."""
    await _check_visible(request, principal, run_id)
    services = _services(request)
    taken = await services.steer_anywhere(run_id, principal.name, body.input)
    if taken is None:
        run = services.runs.get(run_id, owner=principal.name)
        record = None
        if run is None and services.store is not None:
            record = await services.store.runs.get(principal.name, run_id)
        if run is None and record is None:  # another key's run is as invisible as a missing one
            raise APIError(404, f"No run '{run_id}'.", param="run_id", code="run_not_found")
        raise APIError(409, f"Run '{run_id}' is not running.", code="run_not_running")
    if not taken:
        raise APIError(
            409,
            f"Run '{run_id}' cannot take a message now: its loop has not begun yet, or it has "
            "made its last model call. Retry, or start a new turn.",
            code="run_not_running",
        )
    run = services.runs.get(run_id, owner=principal.name)
    found = run.id if run is not None else run_id
    return JSONResponse(
        {"id": found, "object": "hermes.run", "status": "running", "steered": True}, 202
    )
