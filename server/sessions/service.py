"""Which session a turn continues, and the turn lock that keeps two turns of one conversation
from interleaving.

A request either names its conversation (``X-Hermes-Session-Id``, Open WebUI's chat id) or
not. Unnamed, it starts a session of its own from the history it carries. Named, the turn
takes the conversation's lock, compares the client's visible history with each live branch of
the conversation (:mod:`server.sessions.reconcile`), and then continues the best branch — the
stored transcript, hidden tool calls included, plus the client's new messages — or forks a
child at the point where the client's history diverged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy import select

from hermes_core.agent import Agent, AgentRequest
from hermes_core.messages import Message, text_of
from hermes_core.persistence import RunRecord, SessionInfo, Store, StoredMessage
from hermes_core.persistence.conversations import UNBOUND_PROFILE
from hermes_core.persistence.runs import RUNS
from hermes_core.persistence.sessions import LOCKS, new_session_id
from server.errors import SessionBusy
from server.runs.manager import RunInfo
from server.sessions.journal import SessionJournal
from server.sessions.reconcile import Reconciliation, reconcile

MAX_NAME_LENGTH = 256
BRANCHES_COMPARED = 10
"""Live branches of a conversation a turn compares itself with (the most recent ones)."""
LOCK_POLL_SECONDS = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    session_id: str
    conversation: str
    """The session's name, shared by its forks: what its workspace is kept under."""
    request: AgentRequest
    """The agent request on the session's full transcript (its new messages included)."""
    forked_from: str | None = None
    fresh: bool = False
    """The conversation began with this turn, named by its new session's id: none of its
    runs can have left a question awaiting approval (nothing to look up)."""
    save: Callable[[], None] = lambda: None
    """Writes what the turn adds to the conversation (its new session or fork, the client's
    new messages): called once its run starts (see the journal), so that a turn refused
    before keeps nothing (no message a retry would double, no fork that would shadow the
    branch it copies)."""


@dataclass(frozen=True, slots=True)
class SessionPoint:
    """A session as it stood when a turn ended: its id and how many messages it held."""

    session_id: str
    position: int


BusyMode = Literal["wait", "reject", "refuse", "interrupt", "enqueue", "steer"]
"""What a turn does when another turn of its conversation is running (``refuse``: ``reject``,
its older name)."""
BUSY_MODES: tuple[BusyMode, ...] = ("wait", "reject", "refuse", "interrupt", "enqueue", "steer")


@dataclass(frozen=True, slots=True, kw_only=True)
class BusyPolicy:
    """How the turn being begun treats a busy conversation, with what its modes need: the
    message to steer in, and how to reach the running turn on whichever replica runs it."""

    mode: BusyMode
    text: str = ""
    """The turn's new message: what ``steer`` gives the running turn."""
    steer: Callable[[str, str], Awaitable[bool | None]] | None = None
    """``(run_id, text)``: whether the running run took the message (None: none runs)."""
    stop: Callable[[str], Awaitable[object]] | None = None
    """``(run_id)``: interrupt the running run, wherever it runs."""


BUSY_POLICY: ContextVar[BusyPolicy | None] = ContextVar("hermes_busy_policy", default=None)
"""The busy policy of the turn this task is beginning (set by ``begin_turn`` around joining
its session): the join functions of every endpoint pass through here unchanged."""

RESPONSE_KEPT: ContextVar[bool] = ContextVar("hermes_response_kept", default=False)
"""Whether the turn this task is beginning saves a response once its run has ended (a stored
Responses turn; set around beginning it): its conversation's lock is then kept past the run's
end until :meth:`SessionService.release` (see the journal), so that no change of the
conversation comes between the run's end and the response saying where it ended."""


@contextmanager
def response_kept(kept: bool) -> Iterator[None]:
    """:data:`RESPONSE_KEPT` for the turns begun inside."""
    token = RESPONSE_KEPT.set(kept)
    try:
        yield
    finally:
        RESPONSE_KEPT.reset(token)


QUEUED_WHEN_BUSY: ContextVar[bool] = ContextVar("hermes_queued_when_busy", default=False)
"""Whether the turn this task is beginning, should it have to wait for another turn of its
conversation (``wait``, ``enqueue``), is begun queued instead (a background response, whose
create answers at once): :class:`SessionQueued` is raised without waiting, and the turn's run
joins the conversation later (set by ``begin_turn`` around joining its session)."""


@contextmanager
def queued_when_busy(queued: bool) -> Iterator[None]:
    """:data:`QUEUED_WHEN_BUSY` for the turns begun inside."""
    token = QUEUED_WHEN_BUSY.set(queued)
    try:
        yield
    finally:
        QUEUED_WHEN_BUSY.reset(token)


OnAnotherBranch = Callable[[str], Awaitable[bool]]
"""Whether the turn being begun is on another branch of its conversation than the run (by
id) holding the conversation's turn now (see :meth:`SessionService._lock`)."""


async def _always(_: str) -> bool:
    return True


class SessionSteered(Exception):
    """The turn's message was steered into the running turn ``run_id`` of its conversation
    (``session_busy: steer``): no turn of its own was begun, and nothing of it was saved
    here (the running turn stores the message when it takes it)."""

    def __init__(self, run_id: str, conversation: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id
        self.conversation = conversation


class SessionQueued(Exception):
    """The turn would wait for another turn of its conversation ``name`` and was begun under
    :data:`QUEUED_WHEN_BUSY`: it took nothing (no lock, no place in line, nothing saved). Its
    caller starts its run queued, and joins the conversation again inside it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass(slots=True, kw_only=True)
class SessionSettings:
    busy: BusyMode = "wait"
    """What a second concurrent turn of one conversation does (a profile's or a request's
    own mode wins)."""
    wait_seconds: float = 30.0
    lease_seconds: float = 6 * 3600.0
    """A lock older than this is considered abandoned (its holder died without recovery)."""


def valid_name(name: str) -> bool:
    return 0 < len(name) <= MAX_NAME_LENGTH and name.isprintable()


class SessionService:
    def __init__(self, store: Store, settings: SessionSettings | None = None) -> None:
        self.store = store
        self.settings = settings or SessionSettings()
        self.journal = SessionJournal(store)
        self._lines: dict[tuple[str, str], _Line] = {}
        """Turns of one conversation waiting for it on this replica, first come first served."""

    async def begin(
        self,
        agent: Agent,
        request: AgentRequest,
        *,
        owner: str,
        profile: str,
        run_id: str,
        name: str | None,
        whole_history: bool = False,
    ) -> Turn:
        """Resolve the turn's session, save the client's new messages, and point ``agent`` at
        the session's frozen system prompt. The caller must start the run with ``run_id``, or
        call :meth:`abandon`. ``whole_history``: the request carries the client's whole
        visible history (a chat completion), so whether it forks the conversation tells
        whether it is on the branch of the turn running in it (see :meth:`_elsewhere`); a
        run's input is only its new message, whatever it continues."""
        client = request.conversation()
        if name is None:
            turn = await self._new_session(agent, request, owner, profile, client, name=None)
            self._track(run_id, turn, lock=None)
            return turn

        async def elsewhere(holder: str) -> bool:
            return await self._elsewhere(owner, name, client, holder)

        return await self._locked(
            owner,
            name,
            run_id,
            lambda waited: self._continue(agent, request, owner, profile, client, name, waited),
            branch=elsewhere if whole_history else None,
        )

    async def begin_after(
        self,
        agent: Agent,
        request: AgentRequest,
        *,
        owner: str,
        profile: str,
        run_id: str,
        after: SessionPoint | None,
        apart: bool = False,
    ) -> Turn:
        """A turn that continues a stored session as it stood at ``after`` (where a response
        of a ``previous_response_id`` chain ended): the session itself when nothing was added
        since, else a child forked at that point (a client going back to an earlier response).
        ``apart``: always a child, named by its own id (the session is a conversation's that
        the turn is not part of). Raises :class:`LookupError` when the session is not the
        owner's, or is deleted before the turn has it."""
        client = request.conversation()
        if after is None:
            turn = await self._new_session(agent, request, owner, profile, client, name=None)
            self._track(run_id, turn, lock=None)
            return turn
        session = await self.store.sessions.get(owner, after.session_id)
        if session is None:
            raise LookupError(after.session_id)
        if apart:  # a chain of its own, named by a new id: no turn of another to wait for
            turn = await self._resume(
                agent, request, session, after.position, client, profile=profile, apart=True
            )
            self._track(run_id, turn, lock=None)
            return turn
        name = session.name or session.id
        return await self._locked(
            owner,
            name,
            run_id,
            lambda _: self._resume(
                agent, request, session, after.position, client, profile=profile, apart=apart
            ),
            branch=_always,  # it continues a point that has ended: never the running branch
        )

    async def begin_latest(
        self,
        agent: Agent,
        request: AgentRequest,
        *,
        owner: str,
        profile: str,
        run_id: str,
        name: str,
    ) -> Turn:
        """A turn that appends to the conversation ``name`` as it stands once its lock is
        held (a Responses ``conversation``: the client sends only its new items, so nothing
        is reconciled): its newest branch, or a new session. A session the Conversations API
        started before any turn is bound to this turn's profile and frozen prompt."""
        client = request.conversation()

        async def latest(_: float | None) -> Turn:
            tips = await self.store.sessions.tips(owner, name, limit=1)
            if not tips:
                return await self._new_session(agent, request, owner, profile, client, name=name)
            session = tips[0]
            position = len(await self.store.sessions.messages(session.id))
            return await self._resume(agent, request, session, position, client, profile=profile)

        return await self._locked(owner, name, run_id, latest)

    async def peek_after(
        self, agent: Agent, request: AgentRequest, *, owner: str, after: SessionPoint
    ) -> tuple[AgentRequest, str]:
        """``request`` on the transcript of a stored session as it stood at ``after``, saving
        nothing (a turn with ``store: false``), and the session's conversation. Raises
        :class:`LookupError` like :meth:`begin_after`."""
        session = await self.store.sessions.get(owner, after.session_id)
        if session is None:
            raise LookupError(after.session_id)
        if session.profile != UNBOUND_PROFILE:  # else the agent's own: nothing is bound here
            agent.freeze_prompt(session.system_prompt)
        stored = await self.store.sessions.messages(session.id)
        transcript = [m.message for m in stored[: after.position]] + request.conversation()
        peeked = dataclasses.replace(request, history=transcript, user_message=None)
        return peeked, session.name or session.id

    async def peek_named(
        self, agent: Agent, request: AgentRequest, *, owner: str, name: str
    ) -> AgentRequest | None:
        """``request`` on the branch of the conversation ``name`` that its history matches
        best, as :meth:`begin` would continue it, saving nothing (a turn with ``store:
        false``); None when there is no such conversation."""
        client = request.conversation()
        best = await self._best_branch(owner, name, client)
        if best is None:
            return None
        branch, found = best
        if branch.profile != UNBOUND_PROFILE:  # else the agent's own: nothing is bound here
            agent.freeze_prompt(branch.system_prompt)
        sessions = self.store.sessions
        if found.fork_at is None:
            base = await sessions.messages(branch.id)
        else:
            base = await sessions.prefix(branch, found.fork_at)
        transcript = [stored.message for stored in base] + list(found.new_messages)
        return dataclasses.replace(request, history=transcript, user_message=None)

    async def _resume(
        self,
        agent: Agent,
        request: AgentRequest,
        session: SessionInfo,
        position: int,
        client: list[Message],
        *,
        profile: str,
        apart: bool = False,
    ) -> Turn:
        sessions = self.store.sessions
        actual = await sessions.messages(session.id)
        # Read again, now its turn is ours: the caller read it before taking the lock (or,
        # apart, takes none), and a session deleted since would give an empty fork, not a 404.
        current = await sessions.get(session.owner, session.id)
        if current is None:
            raise LookupError(session.id)
        session = await self._on_prompt(agent, current, profile)
        conversation = session.name or session.id
        fork: Callable[[], None] = _nothing
        if len(actual) == position and not apart:
            session_id, forked_from, base = session.id, None, actual
        else:
            at = await sessions.logical_position(session, position)
            session_id, base, fork = await sessions.planned_fork(session, at, apart=apart)
            forked_from = session.id
            if apart:
                conversation = session_id
        added = [StoredMessage(m, "client") for m in client]

        def save() -> None:
            fork()
            sessions.add_messages(session_id, len(base), added)

        transcript = [stored.message for stored in base] + client
        return Turn(
            session_id=session_id,
            conversation=conversation,
            request=_on_transcript(request, session_id, transcript),
            forked_from=forked_from,
            save=save,
        )

    async def _locked(
        self,
        owner: str,
        name: str,
        run_id: str,
        resolve: Callable[[float | None], Awaitable[Turn]],
        *,
        branch: OnAnotherBranch | None = None,
    ) -> Turn:
        """``resolve`` the turn holding the conversation's lock (given when the turn began to
        wait for it, if it did); the lock is given back if that fails, and otherwise held by
        the run until it ends (see the journal). ``branch``: see :meth:`_lock`."""
        waited = await self._lock(owner, name, run_id, branch=branch)
        try:
            turn = await resolve(waited)
        except BaseException:
            self.store.sessions.unlock(owner, name, run_id)
            raise
        self._track(run_id, turn, lock=(owner, name))
        return turn

    def _track(self, run_id: str, turn: Turn, *, lock: tuple[str, str] | None) -> None:
        kept = RESPONSE_KEPT.get()
        self.journal.track(run_id, turn.session_id, lock=lock, save=turn.save, kept=kept)

    def queued(self, run: RunInfo) -> None:
        """The run of a turn begun queued (:class:`SessionQueued`) started: it is on record
        from now on, before it joins its conversation (see the journal)."""
        self.journal.queued(run)

    def abandon(self, run_id: str) -> None:
        """The run was not started after all: give its lock back."""
        self.journal.untrack(run_id)

    def keep(self, run_id: str) -> bool:
        """One more response of the running run ``run_id`` (one steered into it) that its
        conversation's lock waits for once it has ended, until :meth:`release`; False when
        the lock is back already (nothing to release)."""
        return self.journal.keep(run_id)

    def release(self, run_id: str) -> bool:
        """A response of the run (begun under :data:`RESPONSE_KEPT`, or kept by
        :meth:`keep`) is saved, or never will be: the conversation's lock, kept past the
        run's end for it, goes back once no other is to come. Whether it went back now."""
        return self.journal.release(run_id)

    async def recover(self, instance: str | None = None) -> list[RunRecord]:
        """Close what a previous life of this instance (or ``instance``, a replica that died)
        left open; returns those runs."""
        runs = await self.store.runs.recover(instance)
        await self.store.sessions.unlock_runs([run.id for run in runs])
        # A run killed before its row was written left a lock no run row leads to.
        await self.store.sessions.unlock_instance(instance or self.store.runs.instance)
        lengths: dict[str, int] = {}
        for session_id in {run.session_id for run in runs if run.session_id}:
            messages = await self.store.sessions.messages(session_id)
            missing = _unanswered_calls(messages)
            self.store.sessions.add_messages(
                session_id,
                len(messages),
                [
                    StoredMessage(
                        {"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED_RESULT},
                        "agent",
                    )
                    for call_id in missing
                ],
            )
            lengths[session_id] = len(messages) + len(missing)
        await self.store.responses.fail_unfinished(
            [run.id for run in runs],
            "The server restarted while this response was in progress.",
            # Where each run's transcript stands now: its response ended there.
            {run.id: (run.session_id, lengths[run.session_id]) for run in runs if run.session_id},
        )
        await self.store.db.writer.flush()
        return runs

    async def live_instances(self) -> set[str]:
        """The replicas with something to recover should they be gone: runs marked live, or
        conversation locks held (by a run that may have died before its row was written)."""
        return await self.store.runs.live_instances() | await self.store.sessions.lock_holders()

    # --- the steps ----------------------------------------------------------------------------

    async def _lock(
        self, owner: str, name: str, run_id: str, *, branch: OnAnotherBranch | None = None
    ) -> float | None:
        """Take the conversation's turn for ``run_id``, or do what the turn's busy policy says
        when another turn holds it. Returns when (``time.time()``) the turn began to wait
        for another, None when it took the conversation at once.

        ``branch``: whether this turn is on another branch than the running one (asked only
        when it would steer or interrupt that one). A turn that continues a stored point of
        the conversation (a response that has ended) always is: the running turn began from
        that point too (a sibling) or runs on another branch. So is a chat turn whose history
        forks the conversation (an edited or regenerated message), or continues a branch the
        running turn does not write to. Steering its message into that turn, or stopping it,
        would change a branch it is no part of: ``steer`` and ``interrupt`` wait for it as
        ``wait`` does (up to ``wait_seconds`` from its arrival), and the turn runs as its own
        fork."""
        sessions, settings = self.store.sessions, self.settings
        policy = BUSY_POLICY.get() or BusyPolicy(mode=settings.busy)
        mode = policy.mode
        lease = settings.lease_seconds
        if mode in ("reject", "refuse"):
            if not await sessions.lock(owner, name, run_id, lease_seconds=lease):
                raise _busy(name)
            return None
        # A wait (or an interrupt's wait for the stopped turn) counts its time in the line.
        waits = mode in ("wait", "interrupt")
        began = time.monotonic()
        deadline = began + (settings.wait_seconds if waits else lease)
        arrived = time.time()
        line = self._lines.get((owner, name))
        if line is not None and line.lock.locked() and _queues(mode):
            raise SessionQueued(name)  # turns before it wait here: it would wait behind them
        async with self._line(owner, name, deadline, busy=lambda: _busy(name)) as queued:
            if await sessions.lock(owner, name, run_id, lease_seconds=lease):
                return arrived if queued else None
            holder = await self._holder(owner, name)
            if (
                mode in ("steer", "interrupt")
                and holder is not None
                and branch is not None
                and await branch(holder)
            ):
                mode, deadline = "wait", min(deadline, began + settings.wait_seconds)
            if _queues(mode):
                raise SessionQueued(name)
            if mode == "steer":
                steer = policy.steer if holder is not None and policy.text else None
                if steer is not None and holder is not None and await steer(holder, policy.text):
                    raise SessionSteered(holder, name)
                # The running turn has given its answer: this one comes next.
            elif mode == "interrupt" and holder is not None and policy.stop is not None:
                await policy.stop(holder)
            while not await sessions.lock(owner, name, run_id, lease_seconds=lease):
                if time.monotonic() >= deadline:
                    raise _busy(name)
                await asyncio.sleep(LOCK_POLL_SECONDS)
            return arrived

    @asynccontextmanager
    async def _line(
        self, owner: str, name: str, deadline: float, *, busy: Callable[[], Exception]
    ) -> AsyncIterator[bool]:
        """Wait for the turns of ``name`` that came before this one on this replica to have
        taken the conversation (an ``asyncio.Lock`` wakes its waiters in order), until
        ``deadline`` (then ``busy()`` is raised). Yields whether the turn had to wait."""
        key = (owner, name)
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = _Line()
        line.users += 1
        queued = line.lock.locked()
        try:
            if not queued:
                await line.lock.acquire()  # at once (behind a woken waiter at most)
            else:
                try:
                    left = max(0.0, deadline - time.monotonic())
                    async with asyncio.timeout(left):  # cancellable, unlike 3.11's wait_for
                        await line.lock.acquire()
                except TimeoutError:
                    raise busy() from None
            try:
                yield queued
            finally:
                line.lock.release()
        finally:
            line.users -= 1
            if not line.users:
                del self._lines[key]

    async def _holder(self, owner: str, name: str) -> str | None:
        """The run holding the conversation's turn now, if any."""
        statement = select(LOCKS.c.run_id).where(LOCKS.c.owner == owner, LOCKS.c.name == name)
        async with self.store.db.engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return None if row is None else str(row.run_id)

    async def _elsewhere(self, owner: str, name: str, client: list[Message], holder: str) -> bool:
        """Whether a chat turn whose client sent ``client`` (its whole visible history) is on
        another branch of the conversation than the run ``holder`` running in it: its history
        forks the branch it matches best (the client edited or regenerated an earlier
        message), or continues a branch that run does not write to (one the client went back
        to). A history that continues the running branch is the client's next message, sent
        while the running turn answers (Open WebUI's user typing as the agent works): the
        client cannot have that answer yet, so it is compared as a turn that waited is."""
        running = await self._session_of(holder)
        best = await self._best_branch(owner, name, client, running=running)
        if best is None:  # the running turn begins the conversation: nothing to fork yet
            return False
        branch, found = best
        return found.fork_at is not None or (running is not None and branch.id != running)

    async def _session_of(self, run_id: str) -> str | None:
        """The session the run writes to, once its row is written (its lock is taken before:
        None in its first moments, as for a run that died before it had a row)."""
        statement = select(RUNS.c.session_id).where(RUNS.c.id == run_id)
        async with self.store.db.engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return None if row is None or row.session_id is None else str(row.session_id)

    async def _new_session(
        self,
        agent: Agent,
        request: AgentRequest,
        owner: str,
        profile: str,
        client: list[Message],
        *,
        name: str | None,
    ) -> Turn:
        prompt = await agent.frozen_prompt()
        # An unnamed session is named by its id, so a client can continue it by that name.
        session_id = new_session_id()
        sessions = self.store.sessions
        added = [StoredMessage(message, "client") for message in client]

        def save() -> None:
            sessions.create(
                session_id=session_id,
                owner=owner,
                profile=profile,
                system_prompt=prompt,
                name=name or session_id,
                title=_title(client),
            )
            sessions.add_messages(session_id, 0, added)

        return Turn(
            session_id=session_id,
            conversation=name or session_id,
            request=_on_transcript(request, session_id, client),
            fresh=name is None,
            save=save,
        )

    async def _continue(
        self,
        agent: Agent,
        request: AgentRequest,
        owner: str,
        profile: str,
        client: list[Message],
        name: str,
        waited: float | None = None,
    ) -> Turn:
        best = await self._best_branch(owner, name, client, waited)
        if best is None:
            return await self._new_session(agent, request, owner, profile, client, name=name)
        branch, found = best
        branch = await self._on_prompt(agent, branch, profile)
        sessions = self.store.sessions
        fork: Callable[[], None] = _nothing
        if found.fork_at is None:
            session_id, forked_from = branch.id, None
            base = [stored.message for stored in await sessions.messages(branch.id)]
        else:
            session_id, kept, fork = await sessions.planned_fork(branch, found.fork_at)
            forked_from = branch.id
            base = [stored.message for stored in kept]
        added = [StoredMessage(m, "client") for m in found.new_messages]

        def save() -> None:
            fork()
            sessions.add_messages(session_id, len(base), added)

        transcript = base + list(found.new_messages)
        return Turn(
            session_id=session_id,
            conversation=name,
            request=_on_transcript(request, session_id, transcript),
            forked_from=forked_from,
            save=save,
        )

    async def _on_prompt(self, agent: Agent, session: SessionInfo, profile: str) -> SessionInfo:
        """Point ``agent`` at the session's frozen prompt. A session the Conversations API
        started before any turn has none yet: it is bound to this turn's profile and prompt
        (whichever endpoint's turn comes first), never run with an empty one."""
        if session.profile != UNBOUND_PROFILE:
            agent.freeze_prompt(session.system_prompt)
            return session
        prompt = await agent.frozen_prompt()
        await self.store.conversations.bind(session.id, profile, prompt)
        return dataclasses.replace(session, profile=profile, system_prompt=prompt)

    async def _best_branch(
        self,
        owner: str,
        name: str,
        client: list[Message],
        waited: float | None = None,
        *,
        running: str | None = None,
    ) -> tuple[SessionInfo, Reconciliation] | None:
        """The live branch the client's history matches furthest (the newest on a tie).
        ``waited``: when the turn began to wait for another one; a branch written since
        may end with an answer the client could not have yet. ``running``: the branch a
        running turn is answering on, whose answer the client cannot have yet either."""
        best: tuple[SessionInfo, Reconciliation] | None = None
        for branch in await self.store.sessions.tips(owner, name, limit=BRANCHES_COMPARED):
            logical = [entry.stored for entry in await self.store.sessions.logical(branch)]
            behind = branch.id == running or (waited is not None and branch.updated_at >= waited)
            found = reconcile(logical, client, behind=behind)
            if best is None or found.matched > best[1].matched:
                best = (branch, found)
            if found.fork_at is None:
                break  # a branch the client simply continues: nothing can match better
        return best


@dataclass(slots=True)
class _Line:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


def _nothing() -> None:
    pass


def _queues(mode: BusyMode) -> bool:
    """Whether a turn whose busy mode is ``mode`` is begun queued rather than wait for its
    conversation (only ever asked once it would wait). The other modes never wait for the
    running turn to end by itself: ``reject`` is answered at once, ``interrupt`` stops it
    and ``steer`` joins it (or waits the moment its answer takes to be saved)."""
    return mode in ("wait", "enqueue") and QUEUED_WHEN_BUSY.get()


def _busy(name: str) -> SessionBusy:
    return SessionBusy(
        f"Another turn of the session '{name}' is still running; retry when it ends."
    )


INTERRUPTED_RESULT = (
    "Error: the server stopped while this tool call was in progress; it may or may not have "
    "taken effect. Check before repeating it."
)


def _unanswered_calls(messages: list[StoredMessage]) -> list[str]:
    """Ids of the last tool-call request's calls that no tool message answers (where a run
    that died while its tools ran left the transcript)."""
    for index in range(len(messages) - 1, -1, -1):
        calls = messages[index].message.get("tool_calls")
        if calls:
            answered = {m.message.get("tool_call_id") for m in messages[index + 1 :]}
            return [call["id"] for call in calls if call["id"] not in answered]
    return []


def _title(messages: list[Message]) -> str:
    first = next((m for m in messages if m["role"] == "user"), None)
    return " ".join(text_of(first.get("content")).split()) if first is not None else ""


def _on_transcript(
    request: AgentRequest, session_id: str, transcript: list[Message]
) -> AgentRequest:
    """The request re-expressed on the session: the whole transcript is history (its new
    messages are saved as its run starts), nothing is appended by the run itself."""
    return dataclasses.replace(
        request, history=transcript, user_message=None, session_id=session_id
    )
