"""Beginning a turn: what every endpoint that answers a conversation does between a request
and its started run, once. Chat Completions and Responses each say what is theirs in a
:class:`TurnSpec` (how the request becomes an ``AgentRequest``, how the turn joins its session,
the request's own tools) and render the :class:`BegunTurn` their own way.

The steps, in order: the approval wait a client allows; the agent (a plain one for Open WebUI's
side tasks: no tools, no session); the request checked and the run admitted; the request's own
tools connected; the session joined; open approvals settled; the files placed in the workspace;
the run started (its trace continuing the request's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import HTTPConnection

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import InterruptSource
from hermes_core.messages import text_of
from hermes_core.tools.registry import Tool
from server.errors import APIError
from server.http.auth import Principal
from server.profiles import Profile
from server.runs.approvals import Asker, wait_seconds_of
from server.runs.manager import Run, Runnable, new_id
from server.services import Services
from server.serving.common import (
    busy_mode_of,
    new_agent,
    session_name_of,
    start_run,
    turn_given_back_on_failure,
    with_approvals,
    with_files_in_workspace,
    with_workspace,
)
from server.serving.end_users import end_user_of, scoped_owner
from server.serving.file_announcements import file_announcer, watched
from server.serving.queued_turn import QueuedTurn
from server.sessions.service import (
    BUSY_POLICY,
    QUEUED_WHEN_BUSY,
    BusyMode,
    BusyPolicy,
    SessionQueued,
    SessionSteered,
)
from server.views.file_citations import FileAnnouncer

if TYPE_CHECKING:
    from server.sessions.service import SessionService


@dataclass(slots=True)
class Joined:
    """The session a turn joined: its request on the session's transcript."""

    request: AgentRequest
    session_id: str | None = None
    """None: the turn is kept in no session."""
    conversation: str | None = None
    """The session's name: where its workspace and open approvals are kept."""
    forked: bool = False
    """Whether the turn forked the session (it continued an earlier point of it)."""
    fresh: bool = False
    """Whether the conversation began with this turn (so nothing of it awaits approval)."""


class JoinSession(Protocol):
    """How a turn joins its session (``name``: the one the client names, if any)."""

    async def __call__(
        self,
        sessions: SessionService,
        agent: Agent,
        request: AgentRequest,
        *,
        owner: str,
        profile: str,
        run_id: str,
        name: str | None,
    ) -> Joined: ...


async def join_by_name(
    sessions: SessionService,
    agent: Agent,
    request: AgentRequest,
    *,
    owner: str,
    profile: str,
    run_id: str,
    name: str | None,
    whole_history: bool = False,
) -> Joined:
    """The named session continued (its visible history the transcript), or a new one.
    ``whole_history``: the request carries the client's whole visible history (see
    ``SessionService.begin``)."""
    turn = await sessions.begin(
        agent,
        request,
        owner=owner,
        profile=profile,
        run_id=run_id,
        name=name,
        whole_history=whole_history,
    )
    forked = turn.forked_from is not None
    return Joined(turn.request, turn.session_id, turn.conversation, forked, turn.fresh)


async def join_by_history(
    sessions: SessionService,
    agent: Agent,
    request: AgentRequest,
    *,
    owner: str,
    profile: str,
    run_id: str,
    name: str | None,
) -> Joined:
    """A chat turn's: :func:`join_by_name`, its messages the client's whole visible history
    (so one that forks the session never steers into nor stops the turn running in it)."""
    return await join_by_name(
        sessions,
        agent,
        request,
        owner=owner,
        profile=profile,
        run_id=run_id,
        name=name,
        whole_history=True,
    )


class RequestTools(Protocol):
    """Tools a request brings of its own (the Responses ``mcp`` tool): connected once its run
    is admitted, offered beside the profile's, closed when the run ends (or at once, if it
    never starts)."""

    @property
    def asks(self) -> bool:
        """Whether any of them asks approval (known once connected)."""
        ...

    async def connect(self) -> Sequence[Tool]: ...

    async def stop(self) -> None: ...

    def close_after(self, run: Run) -> None: ...


class BuildRequest(Protocol):
    """How an endpoint's body becomes the turn's ``AgentRequest``: with the client's tools or
    without them, offering the agent's own tools or none (a side task), for run ``run_id``."""

    def __call__(self, *, client_tools: bool, offer_tools: bool, run_id: str) -> AgentRequest: ...


def _no_answers() -> Mapping[str, bool]:
    return {}


@dataclass(slots=True, kw_only=True)  # not frozen: a frozen one costs a turn ~2 µs to make
class TurnSpec:
    """What an endpoint says about the turn it begins; :func:`begin_turn` does the rest."""

    endpoint: str
    """The run's endpoint, as runs and metrics name it."""
    completion_id: str
    """The id of the answer (``chatcmpl-…``, ``resp_…``)."""
    agent_request: BuildRequest
    side_task: bool
    """Open WebUI's title, tag and follow-up prompts: one plain model call, in a run."""
    openwebui: bool
    """Open WebUI's own tools come with every request, not ours to run; its file links."""
    join: JoinSession = join_by_history
    named: bool = True
    """Whether the session headers name the turn's session (not when a Responses turn
    continues a previous response)."""
    answers: Callable[[], Mapping[str, bool]] = _no_answers
    """Approval answers the request's input carries (asked only when the turn may ask)."""
    keeps_questions: bool = True
    """Whether the turn's conversation keeps what it leaves awaiting approval (not a
    Responses turn of ``store: false``: it keeps nothing)."""
    tools: RequestTools | None = None
    side_task_files: bool = False
    """Whether a side task's files are placed as a turn's are (Responses) or left as sent."""
    session_busy: BusyMode | None = None
    """What the turn does when its session is busy, as the request's body says (a run's
    ``session_busy``); the ``X-Hermes-Session-Busy`` header, then the profile's, otherwise."""
    call_images: bool = False
    """Whether the answer shows the images each ``code`` call made (a Responses request that
    names ``code_interpreter``): the workspace is looked at as each such call ends."""
    end_user: str | None = None
    """The end user the body names (``safety_identifier``, else ``user``); the request's
    headers come first, and only a trusted front end's count (``server/serving/end_users.py``)."""
    queues: bool = False
    """Whether the turn, should its session be busy with a turn it would wait for (``wait``,
    ``enqueue``), is begun at once with its run queued, the run joining the session when the
    turn ahead ends (a background response: its create answers at once)."""


@dataclass(slots=True)
class BegunTurn:
    """A turn under way: its run, the request it started from, and its answer's headers."""

    run: Run
    request: AgentRequest
    session_id: str | None
    headers: dict[str, str]
    """``x-hermes-run-id``, and ``x-hermes-session-id`` for a turn of a session."""
    files: FileAnnouncer | None
    """How its answer names the files its run made (None: no lasting workspace)."""
    queued: bool = False
    """Its run waits for its session (``TurnSpec.queues``): it joins it, and its first event
    comes, once the turn ahead has ended."""


async def begin_turn(
    services: Services,
    connection: HTTPConnection,
    principal: Principal,
    profile: Profile,
    spec: TurnSpec,
) -> BegunTurn:
    """Start the run of one turn of ``profile`` for ``principal``, as ``spec`` says."""
    approval_wait = wait_seconds_of(connection, services.approvals.expiry_seconds)
    run_id = new_id("run_")
    side = spec.side_task
    # Named once, here: who the turn is for holds its run to their limit and budget, and (but
    # for a side task, which keeps nothing) scopes its memory, sessions and workspace.
    named = end_user_of(connection, principal, spec.end_user)
    end_user = named.id if named is not None else None
    agent: Agent
    if side:
        agent = profile.plain_agent(owner=principal.name)
        request = spec.agent_request(client_tools=False, offer_tools=False, run_id=run_id)
        owner, name = principal.name, None
    else:
        client_tools = not spec.openwebui
        request = spec.agent_request(client_tools=client_tools, offer_tools=True, run_id=run_id)
        name = session_name_of(connection) if spec.named else None
        owner = scoped_owner(principal, end_user)
        agent = new_agent(services, profile, owner, key=principal.name)
    agent.check(request)
    services.runs.admit(principal.name, end_user)
    tools = None if side else spec.tools
    try:
        if tools is not None:
            extra = await tools.connect()
            if extra:
                agent = new_agent(services, profile, owner, extra, key=principal.name)
        # Else no approval work at all: the hot path stays bare.
        asks = (profile.asks_approval or (tools is not None and tools.asks)) and not side
        answers, spoken = (spec.answers(), text_of(request.user_message)) if asks else ({}, "")
        joined = await _join(
            services,
            connection,
            principal,
            profile,
            spec,
            agent,
            request,
            run_id,
            name,
            owner,
            tools if not side else None,
            side=side,
        )
        if isinstance(joined, BegunTurn):  # steered into the running turn: no run of its own
            return joined
        if isinstance(joined, SessionQueued):
            pending = _Pending(
                services=services,
                principal=principal,
                profile=profile,
                spec=spec,
                agent=agent,
                run_id=run_id,
                name=name,
                owner=owner,
                end_user=end_user,
                asks=asks,
                answers=answers,
                spoken=spoken,
                approval_wait=approval_wait,
            )
            begun = await _begin_queued(pending, connection, request, joined)
            if tools is not None:
                tools.close_after(begun.run)
            return begun
        request, session_id = joined.request, joined.session_id
        conversation = (owner, joined.conversation) if joined.conversation is not None else None
        runnable: Runnable = agent
        files = None
        if not side or spec.side_task_files:
            with turn_given_back_on_failure(services, run_id):
                request, runnable = await _prepared(
                    services,
                    principal,
                    profile,
                    spec,
                    agent,
                    joined,
                    conversation,
                    asks=asks,
                    answers=answers,
                    spoken=spoken,
                    approval_wait=approval_wait,
                    end_user=end_user,
                )
                files = await file_announcer(
                    services, connection, request, conversation, openwebui=spec.openwebui
                )
        run = await start_run(
            services,
            runnable,
            request,
            principal=principal,
            profile=profile,
            endpoint=spec.endpoint,
            completion_id=spec.completion_id,
            session_id=session_id,
            conversation=conversation,
            headers=connection.headers,
            end_user=end_user,
        )
    except BaseException:
        if tools is not None:  # the run never started: nothing else closes them
            await tools.stop()
        raise
    if tools is not None:
        tools.close_after(run)
    headers = {"x-hermes-run-id": run.id}
    if session_id is not None:
        # The name the session and its workspace are kept under (GET /v1/workspaces/{it}): a
        # conversation's id, a run's session, a client's header; the session's id otherwise.
        headers["x-hermes-session-id"] = joined.conversation or name or session_id
    return BegunTurn(run, request, session_id, headers, files)


async def _prepared(
    services: Services,
    principal: Principal,
    profile: Profile,
    spec: TurnSpec,
    agent: Agent,
    joined: Joined,
    conversation: tuple[str, str] | None,
    *,
    asks: bool,
    answers: Mapping[str, bool],
    spoken: str,
    approval_wait: float,
    end_user: str | None,
) -> tuple[AgentRequest, Runnable]:
    """The joined turn's request made ready to run (its conversation's open approvals
    settled, its files placed in the workspace), and what runs it (the agent, watching the
    workspace for the files it makes)."""
    request = joined.request
    if asks:
        asker = Asker(
            owner=principal.name,
            conversation=conversation if spec.keeps_questions else None,
            session_id=joined.session_id,
            profile=profile.id,
            wait_seconds=approval_wait,
        )
        request = await with_approvals(
            services,
            agent,
            request,
            asker,
            forked=joined.forked,
            fresh=joined.fresh,
            answers=answers,
            spoken=spoken,
        )
    request = await with_files_in_workspace(
        services, profile, request, principal, conversation, end_user
    )
    return request, watched(agent, request, conversation, call_images=spec.call_images)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Pending:
    """A turn begun queued, as far as it got before its session turned out busy: what its
    run needs to join the session and get ready (:func:`_begin_queued`)."""

    services: Services
    principal: Principal
    profile: Profile
    spec: TurnSpec
    agent: Agent
    run_id: str
    name: str | None
    owner: str
    end_user: str | None
    asks: bool
    answers: Mapping[str, bool]
    spoken: str
    approval_wait: float


async def _begin_queued(
    pending: _Pending, connection: HTTPConnection, request: AgentRequest, busy: SessionQueued
) -> BegunTurn:
    """Start the run of a turn whose session is busy (``TurnSpec.queues``): queued, it joins
    the session as an ``enqueue`` turn once the turn ahead ends, inside its own task; then
    it runs as any turn. Its workspace and the way its answer names files are the
    conversation's, known now by its name."""
    services, principal, profile, spec = (
        pending.services,
        pending.principal,
        pending.profile,
        pending.spec,
    )
    sessions = services.sessions
    assert sessions is not None  # only a turn joining a session is begun queued
    conversation = (pending.owner, busy.name)

    async def join(run_request: AgentRequest) -> tuple[AgentRequest, Runnable]:
        # Its task's own context: the turn ahead is waited for, however long it takes.
        token = BUSY_POLICY.set(BusyPolicy(mode="enqueue"))
        try:
            joined = await spec.join(
                sessions,
                pending.agent,
                run_request,
                owner=pending.owner,
                profile=profile.id,
                run_id=pending.run_id,
                name=pending.name,
            )
        finally:
            BUSY_POLICY.reset(token)
        with turn_given_back_on_failure(services, pending.run_id):
            return await _prepared(
                services,
                principal,
                profile,
                spec,
                pending.agent,
                joined,
                conversation,
                asks=pending.asks,
                answers=pending.answers,
                spoken=pending.spoken,
                approval_wait=pending.approval_wait,
                end_user=pending.end_user,
            )

    placed = with_workspace(services, profile, request, principal, conversation)
    files = await file_announcer(
        services, connection, placed, conversation, openwebui=spec.openwebui
    )
    run = await start_run(
        services,
        QueuedTurn(join, abandon=lambda: sessions.abandon(pending.run_id)),
        request,
        principal=principal,
        profile=profile,
        endpoint=spec.endpoint,
        completion_id=spec.completion_id,
        session_id=None,
        conversation=conversation,
        headers=connection.headers,
        end_user=pending.end_user,
    )
    sessions.queued(run.info)
    return BegunTurn(run, request, None, {"x-hermes-run-id": run.id}, files, queued=True)


async def _join(
    services: Services,
    connection: HTTPConnection,
    principal: Principal,
    profile: Profile,
    spec: TurnSpec,
    agent: Agent,
    request: AgentRequest,
    run_id: str,
    name: str | None,
    owner: str,
    tools: RequestTools | None,
    *,
    side: bool,
) -> Joined | BegunTurn | SessionQueued:
    """The session the turn joins, under its busy policy (none for a side task); or, when its
    message was steered into the session's running turn, that turn; or, for a turn that
    queues (``TurnSpec.queues``), that its session is busy: it joined none."""
    if services.sessions is None or side:
        return Joined(request)
    token = BUSY_POLICY.set(_busy_policy(services, connection, principal, profile, spec, request))
    queues = QUEUED_WHEN_BUSY.set(True) if spec.queues else None
    try:
        return await spec.join(
            services.sessions,
            agent,
            request,
            owner=owner,
            profile=profile.id,
            run_id=run_id,
            name=name,
        )
    except SessionSteered as steered:
        if tools is not None:  # no run of its own: nothing else closes them
            await tools.stop()
        return _steered(services, principal, steered)
    except SessionQueued as busy:
        return busy
    finally:
        if queues is not None:
            QUEUED_WHEN_BUSY.reset(queues)
        BUSY_POLICY.reset(token)


def _busy_policy(
    services: Services,
    connection: HTTPConnection,
    principal: Principal,
    profile: Profile,
    spec: TurnSpec,
    request: AgentRequest,
) -> BusyPolicy | None:
    """The turn's busy policy: the request's mode (its body's, else its header's), else its
    profile's; None leaves the server's."""
    mode = spec.session_busy or busy_mode_of(connection) or profile.session_busy
    if mode is None:
        return None
    if mode == "steer" and not _all_text(request):
        # Steering gives the running turn the message's text alone: an attached file or image
        # would be lost without a word. The turn runs after the running one instead, as
        # enqueue does, its files placed in the workspace as any turn's are.
        mode = "enqueue"
    key = principal.name

    async def steer(run_id: str, text: str) -> bool | None:
        return await services.steer_anywhere(run_id, key, text)

    async def stop(run_id: str) -> object:
        return await services.stop_anywhere(run_id, key, InterruptSource.SESSION_BUSY)

    return BusyPolicy(mode=mode, text=_new_text(request), steer=steer, stop=stop)


def _new_text(request: AgentRequest) -> str:
    """The text of the turn's new message (the last of the client's messages when the client
    sends its whole history)."""
    return text_of(_new_content(request))


def _all_text(request: AgentRequest) -> bool:
    """Whether the turn's new message is text only (no file, no image): all of it steers."""
    content = _new_content(request)
    return not isinstance(content, list) or all(part.get("type") == "text" for part in content)


def _new_content(request: AgentRequest) -> str | list[dict[str, Any]] | None:
    """The turn's new message's content (None: its last message is not the user's)."""
    if request.user_message is not None:
        return request.user_message
    last = request.history[-1] if request.history else None
    return last.get("content") if last is not None and last["role"] == "user" else None


def _steered(services: Services, principal: Principal, steered: SessionSteered) -> BegunTurn:
    """The turn whose message was steered into its session's running turn: answered by that
    turn (its answer is the answer to both), when it runs here. On another replica, the
    request is told where its message went (409 ``session_steered``): this replica cannot
    follow that run as its own."""
    run = services.runs.get(steered.run_id, owner=principal.name)
    if run is None:
        raise APIError(
            409,
            f"The message was steered into run {steered.run_id}, which is answering it "
            f"(follow GET /v1/runs/{steered.run_id}/events).",
            code="session_steered",
        )
    headers = {
        "x-hermes-run-id": run.id,
        "x-hermes-session-id": steered.conversation,
        "x-hermes-steered-into": run.id,
    }
    return BegunTurn(run, AgentRequest(), run.session_id, headers, None)
