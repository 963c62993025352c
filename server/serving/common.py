"""What every endpoint that starts runs needs: the profile a request names, the conversation it
names, and whose memory its agent uses."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from fastapi import Request
from starlette.requests import HTTPConnection
from starlette.types import Receive

from hermes_core.agent import Agent, AgentRequest
from hermes_core.agent.config import chained
from hermes_core.events import ExitReason
from hermes_core.tools.quota import quota_in_force
from hermes_core.tools.registry import Tool
from hermes_core.tools.tenant import work_for
from server.errors import APIError
from server.files.removal import remove_workspace
from server.http.auth import Principal
from server.http.idempotency import note_run
from server.profiles import Profile
from server.runs.approvals import Asker, settle_open_approvals
from server.runs.manager import Run, Runnable, new_id
from server.services import Services
from server.serving.attachments import with_files
from server.serving.end_users import end_user_of, scoped_owner
from server.sessions.service import BUSY_MODES, MAX_NAME_LENGTH, BusyMode, valid_name
from server.telemetry.run_context import bind_run
from server.telemetry.tracing import incoming_trace
from server.usage.ledger import UsageLedger

log = logging.getLogger("hermes.runs")


def resolve_profile(services: Services, model: str, principal: Principal) -> Profile:
    """The profile ``model`` names, if ``principal`` may use it (else a 404 or 403)."""
    profile = services.profile(model)
    if profile is None:
        raise APIError(
            404, f"The model '{model}' does not exist.", param="model", code="model_not_found"
        )
    if not principal.may_use(profile.id):
        raise APIError(
            403,
            f"This API key may not use the model '{profile.id}'.",
            param="model",
            code="model_not_allowed",
        )
    return profile


def is_openwebui(request: HTTPConnection) -> bool:
    # The raw names, lower case as the ASGI server gives them: iterating the request's Headers
    # decodes every name first (~10 -> ~4 µs a request, timeit, 7 headers, a loaded VM).
    return any(name.startswith(b"x-openwebui-") for name, _ in request.scope["headers"])


def session_name_of(request: HTTPConnection) -> str | None:
    """The conversation the client names: ours, else Open WebUI's chat id."""
    for header in ("x-hermes-session-id", "x-openwebui-chat-id"):
        value = request.headers.get(header, "").strip()
        if value:
            if not valid_name(value):
                raise APIError(
                    400,
                    f"The {header} header must be 1 to {MAX_NAME_LENGTH} printable characters.",
                    param=header,
                )
            return value
    return None


def busy_mode_of(request: HTTPConnection) -> BusyMode | None:
    """The ``X-Hermes-Session-Busy`` header: what the turn does if its session is busy."""
    value = request.headers.get("x-hermes-session-busy", "").strip().lower()
    if not value:
        return None
    for mode in BUSY_MODES:
        if value == mode:
            return mode
    raise APIError(
        400,
        f"The x-hermes-session-busy header must be one of {', '.join(BUSY_MODES)}.",
        param="x-hermes-session-busy",
    )


def conversation_owner(request: HTTPConnection, principal: Principal) -> str:
    """Whose memory and conversations a request uses: the key's principal, or the end user
    its headers name inside it (``server/serving/end_users.py``), so that one key serving
    several end users keeps their memories, sessions and session searches apart. Runs and
    responses stay the key's (with the end user on their record)."""
    return scoped_owner(principal, end_user_of(request, principal))


def new_agent(
    services: Services,
    profile: Profile,
    owner: str,
    extra_tools: Sequence[Tool] = (),
    *,
    key: str | None = None,
) -> Agent:
    """An agent of ``profile`` acting for ``owner`` (see :func:`conversation_owner`): its
    memory and past sessions, and the store's write queue as its checkpoint before tools run;
    with the request's own tools (``extra_tools``) beside the profile's, and the skills of
    the API key's principal ``key`` (default ``owner``: a memory scope does not split them)."""
    return profile.new_agent(
        owner=owner,
        stores=services.stores,
        memory_owner=owner,
        checkpoint=services.store.db.writer.flush if services.store is not None else None,
        extra_tools=extra_tools,
        skill_library=services.skills,
        skills_owner=key,
    )


def with_workspace(
    services: Services,
    profile: Profile,
    request: AgentRequest,
    principal: Principal,
    conversation: tuple[str, str] | None,
) -> AgentRequest:
    """``request`` with its run's workspace, for a profile whose tools use one: the
    conversation's (owner, session name), or one of the run's own, removed when it ends."""
    if not profile.uses_workspace or request.workspace is not None:
        return request
    owner, name = conversation or (principal.name, f"run:{request.run_id or id(request)}")
    return dataclasses.replace(request, workspace=services.workspace(owner, name))


@contextlib.contextmanager
def turn_given_back_on_failure(services: Services, run_id: str | None) -> Iterator[None]:
    """Whatever fails inside gives the conversation's turn (begun for ``run_id``) back, so
    the session's next turn is not kept waiting for a run that never started."""
    try:
        yield
    except BaseException:
        if services.sessions is not None and run_id is not None:
            services.sessions.abandon(run_id)
        raise


async def with_files_in_workspace(
    services: Services,
    profile: Profile,
    request: AgentRequest,
    principal: Principal,
    conversation: tuple[str, str] | None,
    end_user: str | None = None,
) -> AgentRequest:
    """``request`` with its run's workspace and the files its messages carry placed in it
    (those ``end_user`` may name: their own uploads and the key's)."""
    placed = with_workspace(services, profile, request, principal, conversation)
    with quota_in_force(profile.workspace_quota):  # uploads placed there count as writes
        return await with_files(services, placed, principal=principal, end_user=end_user)


async def start_run(
    services: Services,
    agent: Runnable,
    request: AgentRequest,
    *,
    principal: Principal,
    profile: Profile,
    endpoint: str,
    completion_id: str,
    session_id: str | None,
    conversation: tuple[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    end_user: str | None = None,
) -> Run:
    """Start the run; if it cannot start, give back the session turn it was given.

    ``conversation`` (owner, session name) is where the run's workspace is kept; a run of no
    conversation gets a workspace of its own, removed when it ends. ``headers``: the request's,
    whose ``traceparent`` the run's trace continues. ``end_user``: who behind the key the run
    is for (``server/serving/end_users.py``): their run limit and budget hold it too.

    From here on, this task's log lines (and the run's, in the task it gets) are about the
    run: its ids ride in a context variable the run's task inherits."""
    if request.run_id is None:
        request = dataclasses.replace(request, run_id=new_id("run_"))
    if services.ledger is not None:  # the ledger gains each call as the run counts it
        request = _with_counter(services.ledger, request, principal.name, end_user, profile.id)
    bind_run(request.run_id or "", session_id, principal.name)
    work_for(principal.name)  # what tools share between tenants, they share fairly
    request = with_workspace(services, profile, request, principal, conversation)
    temporary = request.workspace if conversation is None else None
    with turn_given_back_on_failure(services, request.run_id):
        request = await services.budgets.admit(principal, end_user, request)
        run_id = request.run_id or ""
        try:
            await services.reserve_run(principal.name, run_id, completion_id, end_user=end_user)
        except asyncio.CancelledError:  # its client left: the reservation may be made all the same
            await services.release_run(principal.name, run_id, end_user)
            raise
        try:
            await note_run(run_id)  # a keyed request's claim knows its work began
            run = services.runs.start(
                agent,
                request,
                owner=principal.name,
                end_user=end_user,
                endpoint=endpoint,
                model=profile.id,
                completion_id=completion_id,
                session_id=session_id,
                providers=profile.provider_models,
                trace_parent=incoming_trace(headers, request),
            )
        except BaseException:
            # Refused here after the other replicas counted it (this one began draining, or
            # filled up, while the turn waited for its conversation): let them count it out.
            await services.release_run(principal.name, run_id, end_user)
            raise
    if run.task is not None:
        if temporary is not None:
            run.task.add_done_callback(lambda _: _remove_soon(temporary))
        run.task.add_done_callback(lambda _: _log_failure(run))
    return run


def _with_counter(
    ledger: UsageLedger, request: AgentRequest, owner: str, end_user: str | None, profile: str
) -> AgentRequest:
    """``request`` with the ledger's counter as its ``on_call`` (a hook it carried already is
    called after the ledger's). A copy (~5 µs): the request may be the caller's to keep, and a
    run's hook must never reach another run that reuses it."""
    counter = ledger.counter(request.run_id or "", owner, end_user, profile)
    return dataclasses.replace(request, on_call=chained(counter, request.on_call))


def _log_failure(run: Run) -> None:
    """One line for a run that failed (in the run's log context: it carries its ids)."""
    end = run.finished
    if end is not None and end.exit_reason is ExitReason.FAILED:
        log.warning("run failed: %s", end.error or "no reason given")


def _remove_soon(directory: Path) -> None:
    """Remove a temporary workspace (in a worker thread: it may be large), read-only
    leftovers of its commands included."""
    if directory.exists():
        asyncio.get_running_loop().run_in_executor(None, remove_workspace, directory)


async def with_approvals(
    services: Services,
    agent: Agent,
    request: AgentRequest,
    asker: Asker,
    *,
    forked: bool,
    fresh: bool = False,
    answers: Mapping[str, bool],
    spoken: str,
) -> AgentRequest:
    """``request`` with the answers to what its conversation's last run left awaiting
    approval, and ``agent`` with the approver of this run. Only for a profile whose tools may
    ask (``Profile.asks_approval``): callers skip it otherwise, query and all. A ``fresh``
    conversation (begun by this turn) has nothing awaiting approval: no query either."""
    agent.approval_callback = services.approvals.approver(services.store, asker)
    if asker.conversation is None or fresh:
        return request
    return await settle_open_approvals(
        services.store,
        request,
        conversation=asker.conversation,
        run_id=request.run_id or "",
        forked=forked,
        answers=answers,
        spoken=spoken,
    )


T = TypeVar("T")
KEEP_RUNNING_HEADER = "x-hermes-keep-running"
"""``X-Hermes-Keep-Running: true``: a client that waits for an answer but may leave and poll
the run (``/v1/runs/{id}``) instead; its run goes on without it."""
WATCH_AFTER_SECONDS = 1.0
"""How long a waiting client's run goes before the server starts watching for the client to
leave. Watching costs a task per request (~4 % of a short run's CPU); most runs are over
before this, and one whose client left early is stopped this much later."""


async def unless_client_leaves(
    services: Services, run: Run, request: Request, answer: Awaitable[T]
) -> T:
    """``answer`` (what a waiting client gets once its run ends), with the run stopped if the
    client goes away first, as a stream's is when its reader leaves (the answer then tells of
    the interrupted run, to nobody)."""
    keep = request.headers.get(KEEP_RUNNING_HEADER, "").strip().lower() in ("1", "true", "yes")
    if keep or not services.stop_on_disconnect:
        return await answer
    loop = asyncio.get_running_loop()
    watching: list[asyncio.Task[None]] = []

    def watch() -> None:
        watching.append(loop.create_task(_stop_when_gone(services, run, request.receive)))

    timer = loop.call_later(WATCH_AFTER_SECONDS, watch)
    try:
        return await answer
    finally:
        timer.cancel()
        for task in watching:
            task.cancel()


async def _stop_when_gone(services: Services, run: Run, receive: Receive) -> None:
    """Stop ``run`` once its client has disconnected (the request body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    services.runs.follower_left(run)
