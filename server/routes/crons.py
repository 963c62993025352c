"""Schedules (``/v1/crons``): make, list, read, change, pause, resume and delete a key's
crons. Each firing is a ``POST /v1/runs`` run (``server/crons/scheduler.py``)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from hermes_core.persistence import Store
from hermes_core.persistence.crons import Cron, Firing
from server.crons.expression import BadSchedule, parse
from server.crons.scheduler import CRON_ID_KEY, CronScheduler
from server.errors import APIError
from server.http.auth import Principal
from server.http.input_text import StrictJSONRoute
from server.http.openapi import errors
from server.protocol.pages import list_page
from server.protocol.schemas.crons import (
    CronCreateRequest,
    CronDeleted,
    CronList,
    CronObject,
    CronUpdateRequest,
)
from server.protocol.schemas.runs import RunCreateRequest
from server.routes.key_alone import key_alone
from server.routes.runs import (
    _as_response_request,
    _checked_metadata,
    _checked_webhook,
    checked_session,
    with_referenced_items,
)
from server.runs.manager import new_id
from server.services import Services
from server.serving.common import resolve_profile

router = APIRouter(prefix="/v1/crons", tags=["crons"], route_class=StrictJSONRoute)
# Schedules are the key's and fire as the key: a request for one end user would read and change
# the crons of the key's other end users, and make runs outside its own memory and sessions.
_KEY_ALONE = "Schedules are the key's: manage them with the key alone, naming no end user."
Owner = Annotated[Principal, Depends(key_alone(_KEY_ALONE))]


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _store(services: Services) -> Store:
    if services.store is None:
        raise APIError(400, "This server keeps no schedules (it runs without a database).")
    return services.store


def _wake(services: Services) -> None:
    if isinstance(services.scheduler, CronScheduler):
        services.scheduler.wake()


def cron_object(cron: Cron, last: Firing | None = None) -> dict[str, Any]:
    """The cron as the API shows it, with what its latest firing (``last``) came to."""
    body = cron.body
    hook = body.get("webhook")
    return {
        "id": cron.id,
        "object": "hermes.cron",
        "schedule": cron.schedule,
        "timezone": cron.timezone,
        "model": cron.model,
        "input": body["input"],
        "instructions": body.get("instructions"),
        "session": body.get("session"),
        "metadata": body.get("metadata") or {},
        "webhook": {"url": hook["url"]} if hook else None,
        "paused": cron.paused,
        "next_fire_at": int(cron.next_fire_at) if cron.next_fire_at is not None else None,
        "created_at": int(cron.created_at),
        "updated_at": int(cron.updated_at),
        **_last_firing(last),
    }


def _last_firing(last: Firing | None) -> dict[str, Any]:
    """``last_*``: when the latest firing fired, how it came out (``starting`` while its run
    waits for its session), the run it started or steered into, and why it started none."""
    if last is None:
        return {"last_fired_at": None, "last_status": None, "last_run_id": None, "last_error": None}
    failed = last.status == "failed"
    return {
        "last_fired_at": int(last.scheduled_at),
        "last_status": "starting" if last.status == "claimed" else last.status,
        "last_run_id": last.run_id,
        # A firing failed before its code was kept (an older server) tells its message alone.
        "last_error": (
            {"code": last.error_code or "run_not_started", "message": last.error or ""}
            if failed
            else None
        ),
    }


async def _described(store: Store, owner: str, crons: list[Cron]) -> list[dict[str, Any]]:
    last = await store.crons.latest_firings(owner, [c.id for c in crons])
    return [cron_object(c, last.get(c.id)) for c in crons]


def _next_fire_at(schedule: str, timezone: str, now: float) -> float | None:
    try:
        parsed = parse(schedule, timezone)
    except BadSchedule as bad:
        param = "timezone" if "time zone" in str(bad) else "schedule"
        raise APIError(400, f"{param}: {bad}.", param=param) from None
    return parsed.next_after(now)


async def _checked_body(
    services: Services, principal: Principal, fields: dict[str, Any]
) -> dict[str, Any]:
    """What every firing starts its run with, checked as ``POST /v1/runs`` checks it."""
    resolve_profile(services, fields["model"], principal)
    run = RunCreateRequest.model_validate(
        {
            "model": fields["model"],
            "input": fields["input"],
            "instructions": fields.get("instructions"),
            "session": fields.get("session"),
            "metadata": fields.get("metadata"),
            "webhook": fields.get("webhook"),
        }
    )
    checked_session(run.session)
    # An item named by reference is kept itself: the cron stands on its own, whatever becomes
    # of the response it was in.
    run = await with_referenced_items(services, principal, run, None)
    # The input is one a run takes (its items too): every firing would fail on it otherwise.
    _as_response_request(run).to_agent_request(with_client_tools=False)
    metadata = _checked_metadata(run.metadata)
    if len(metadata) > 15 or CRON_ID_KEY in metadata:
        raise APIError(
            400,
            f"A cron's metadata holds at most 15 pairs, and not {CRON_ID_KEY} (its runs' "
            "metadata names their cron with it).",
            param="metadata",
        )
    if run.webhook is not None:
        await _checked_webhook(services, run.webhook)
    return {
        "input": run.input,
        "instructions": run.instructions,
        "session": run.session,
        "metadata": metadata,
        "webhook": run.webhook.model_dump() if run.webhook is not None else None,
    }


async def _find(store: Store, principal: Principal, cron_id: str) -> Cron:
    cron = await store.crons.get(principal.name, cron_id)
    if cron is None:  # another key's cron is as invisible as a missing one
        raise APIError(404, f"No cron '{cron_id}'.", param="cron_id", code="cron_not_found")
    return cron


@router.post("", response_model=CronObject, responses=errors(400, 401, 403, 404))
async def create_cron(
    body: CronCreateRequest, request: Request, principal: Owner
) -> dict[str, Any]:
    """Schedule a run of a profile (``model``) on ``input``, fired at the times ``schedule``
    names in ``timezone``, once across replicas."""
    services = _services(request)
    store = _store(services)
    cap = services.max_crons_per_key
    if await store.crons.count(principal.name) >= cap:
        raise APIError(
            400,
            f"This key keeps {cap} crons, the most it may (limits.crons_per_key); delete some "
            "first.",
            code="too_many_crons",
        )
    now = time.time()
    next_fire_at = _next_fire_at(body.schedule, body.timezone, now)
    fields = body.model_dump()
    cron = Cron(
        id=new_id("cron_"),
        owner=principal.name,
        schedule=body.schedule,
        timezone=body.timezone,
        model=body.model,
        body=await _checked_body(services, principal, fields),
        paused=body.paused,
        next_fire_at=None if body.paused else next_fire_at,
        created_at=now,
        updated_at=now,
    )
    await store.crons.add(cron)
    _wake(services)
    return cron_object(cron)


@router.get("", response_model=CronList, responses=errors(400, 401, 403))
async def list_crons(
    request: Request,
    principal: Owner,
    after: Annotated[str | None, Query(max_length=64, description="The last id seen.")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    """The key's crons, newest first."""
    store = _services(request).store
    if store is None:
        return list_page([], has_more=False)
    found, more = await store.crons.page(principal.name, after=after, limit=limit)
    return list_page(await _described(store, principal.name, found), has_more=more)


@router.get("/{cron_id}", response_model=CronObject, responses=errors(400, 401, 403, 404))
async def get_cron(cron_id: str, request: Request, principal: Owner) -> dict[str, Any]:
    store = _store(_services(request))
    (described,) = await _described(store, principal.name, [await _find(store, principal, cron_id)])
    return described


@router.post("/{cron_id}", response_model=CronObject, responses=errors(400, 401, 403, 404))
async def update_cron(
    cron_id: str, body: CronUpdateRequest, request: Request, principal: Owner
) -> dict[str, Any]:
    """Change what the body names; a new schedule, time zone or ``paused`` recomputes the
    next firing."""
    services = _services(request)
    store = _store(services)
    cron = await _find(store, principal, cron_id)
    given = body.model_dump(include=body.model_fields_set)
    for required in ("schedule", "timezone", "model", "input", "paused"):
        if required in given and given[required] is None:
            raise APIError(400, f"{required} cannot be null.", param=required)
    schedule = given.get("schedule", cron.schedule)
    timezone = given.get("timezone", cron.timezone)
    paused = given.get("paused", cron.paused)
    now = time.time()
    next_fire_at = _next_fire_at(schedule, timezone, now)
    if not paused and not cron.paused and schedule == cron.schedule and timezone == cron.timezone:
        next_fire_at = cron.next_fire_at  # the timing did not change: keep its due firing
    fields = {"model": cron.model, **cron.body, **given}
    changed = await store.crons.change(
        principal.name,
        cron_id,
        schedule=schedule,
        timezone=timezone,
        model=fields["model"],
        body=await _checked_body(services, principal, fields),
        paused=paused,
        next_fire_at=None if paused else next_fire_at,
        updated_at=now,
    )
    if changed is None:
        raise APIError(404, f"No cron '{cron_id}'.", param="cron_id", code="cron_not_found")
    _wake(services)
    (described,) = await _described(store, principal.name, [changed])
    return described


async def _set_paused(request: Request, principal: Principal, cron_id: str, paused: bool) -> Any:
    services = _services(request)
    store = _store(services)
    cron = await _find(store, principal, cron_id)
    now = time.time()
    if paused == cron.paused:
        return (await _described(store, principal.name, [cron]))[0]
    next_fire_at = None if paused else _next_fire_at(cron.schedule, cron.timezone, now)
    changed = await store.crons.change(
        principal.name, cron_id, paused=paused, next_fire_at=next_fire_at, updated_at=now
    )
    if changed is None:
        raise APIError(404, f"No cron '{cron_id}'.", param="cron_id", code="cron_not_found")
    _wake(services)
    (described,) = await _described(store, principal.name, [changed])
    return described


@router.post("/{cron_id}/pause", response_model=CronObject, responses=errors(400, 401, 403, 404))
async def pause_cron(cron_id: str, request: Request, principal: Owner) -> dict[str, Any]:
    """Stop firing until resumed (firings missed meanwhile are not made up)."""
    described: dict[str, Any] = await _set_paused(request, principal, cron_id, True)
    return described


@router.post("/{cron_id}/resume", response_model=CronObject, responses=errors(400, 401, 403, 404))
async def resume_cron(cron_id: str, request: Request, principal: Owner) -> dict[str, Any]:
    """Fire again, from the next time after now."""
    described: dict[str, Any] = await _set_paused(request, principal, cron_id, False)
    return described


@router.delete("/{cron_id}", response_model=CronDeleted, responses=errors(400, 401, 403, 404))
async def delete_cron(cron_id: str, request: Request, principal: Owner) -> dict[str, Any]:
    """Fire it no more (runs it started go on, and stay listed)."""
    store = _store(_services(request))
    if not await store.crons.remove(principal.name, cron_id):
        raise APIError(404, f"No cron '{cron_id}'.", param="cron_id", code="cron_not_found")
    await store.crons.forget_firings([cron_id])  # a claim still held fires nothing then
    return {"id": cron_id, "object": "hermes.cron.deleted", "deleted": True}
