"""Runs: every agent request runs as a task with an id, an owner and a replayable event log.

The HTTP request that started a run only *follows* it: the run is an asyncio task of its own,
its events are appended to a log, and any number of followers (the chat stream, a client
re-attaching to ``/v1/runs/{id}/events``) read the log from a sequence number on. Stopping a
run interrupts its agent; the run then ends with an honest ``interrupted`` ending.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from hermes_core.agent import AgentRequest
from hermes_core.errors import disk_full
from hermes_core.events import (
    AgentEvent,
    CompressionPerformed,
    ExitReason,
    InterruptSource,
    MessageAdded,
    RunFinished,
)
from hermes_core.ids import token_hex
from hermes_core.usage import Usage
from server.errors import RunLimitExceeded, ServerDraining
from server.runs.observers import Observers

log = logging.getLogger(__name__)


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    STOPPING = "stopping"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    AWAITING_APPROVAL = "awaiting_approval"
    """Ended with a question for a human; the next turn (or the approvals endpoint) goes on."""

    @property
    def finished(self) -> bool:
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.STOPPING)


STATUS_OF_EXIT = {
    ExitReason.COMPLETED: RunStatus.COMPLETED,
    ExitReason.AWAITING_CLIENT_TOOLS: RunStatus.COMPLETED,
    ExitReason.AWAITING_APPROVAL: RunStatus.AWAITING_APPROVAL,
    ExitReason.INTERRUPTED: RunStatus.INTERRUPTED,
    ExitReason.BUDGET_EXHAUSTED: RunStatus.INCOMPLETE,
    ExitReason.TRUNCATED: RunStatus.INCOMPLETE,
    ExitReason.FAILED: RunStatus.FAILED,
}


STOP_REASONS = {
    InterruptSource.STOP_API: "stopped through the API",
    InterruptSource.CANCEL_API: "cancelled through the API",
    InterruptSource.DELETE_API: "response deleted",
    InterruptSource.CLIENT_DISCONNECT: "client disconnected",
    InterruptSource.SHUTDOWN: "server shutting down",
}
"""The words a run's error gives for each way the server stops it."""


@dataclass(slots=True, kw_only=True)
class RunInfo:
    """What a run's observers know of it besides its events: who started it, where, and the
    names that may label it. Observers never see the agent, and treat this as read-only (it
    is not frozen only because a frozen dataclass costs ~1 µs more to build, once per run)."""

    id: str
    owner: str
    endpoint: str
    """``chat.completions`` or ``responses``."""
    end_user: str | None = None
    """The end user the run is for (docs/end-users.md), when its key named one."""
    model: str
    """The model id the client named (a profile)."""
    completion_id: str = ""
    """The ``chatcmpl-`` / ``resp_`` id the client knows the run by."""
    session_id: str | None = None
    """The session the run starts in."""
    created_at: float = field(default_factory=time.time)
    providers: Mapping[str, str] = field(default_factory=dict)
    """Configured provider name → model of every provider the run may call: the only values
    a metric label of a model call may take (what an upstream reports is unbounded)."""
    trace_parent: object = None
    """The trace the client's ``traceparent`` names (an OpenTelemetry context), when runs
    are traced (``server/telemetry/``); None otherwise."""


RunObserver = Callable[[RunInfo, AgentEvent], None]
"""Called with every event of every run of the kinds it reads (``server/runs/observers.py``);
must not block."""


class Runnable(Protocol):
    """What runs: an ``Agent``, or another job that speaks the event contract (a compaction)."""

    async def execute(self, request: AgentRequest, deliver: Callable[[AgentEvent], object]) -> None:
        """Run ``request``, handing every event to ``deliver``; the last is one RunFinished."""
        ...

    def interrupt(self, reason: str = ..., *, source: InterruptSource = ...) -> None:
        """Stop soon; the ending says ``interrupted`` and records ``source``."""
        ...


def new_id(prefix: str) -> str:
    return f"{prefix}{token_hex(12)}"


@dataclass(slots=True, eq=False)
class Run:
    """One run: who owns it, how it is going, and everything it has said so far."""

    info: RunInfo
    agent: Runnable | None
    """What runs it; let go once the run has ended (a finished run keeps only its events)."""
    session_id: str | None = None
    """The session the run is in: where it started, then where it ended (a compression moves
    it to a child)."""
    transcript_length: int | None = None
    """Messages in the session when the run ended."""
    status: RunStatus = RunStatus.QUEUED
    exit_reason: ExitReason | None = None
    error: str | None = None
    ended_at: float | None = None
    events: list[AgentEvent] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    _waiters: list[asyncio.Future[None]] = field(default_factory=list)
    """One future per follower waiting for the next event."""
    _end_waiters: list[asyncio.Future[None]] = field(default_factory=list)
    """Futures of those waiting only for the ending (:meth:`until_finished`)."""

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def owner(self) -> str:
        return self.info.owner

    @property
    def endpoint(self) -> str:
        return self.info.endpoint

    @property
    def model(self) -> str:
        return self.info.model

    @property
    def completion_id(self) -> str:
        return self.info.completion_id

    @property
    def created_at(self) -> float:
        return self.info.created_at

    @property
    def finished(self) -> RunFinished | None:
        last = self.events[-1] if self.events else None
        return last if isinstance(last, RunFinished) else None

    def record(self, event: AgentEvent) -> None:
        self.events.append(event)
        if isinstance(event, RunFinished):
            self.exit_reason = event.exit_reason
            self.error = event.error
            self.status = STATUS_OF_EXIT[event.exit_reason]
            self.ended_at = time.time()
            if event.session_id is not None:
                self.session_id = event.session_id
                self.transcript_length = event.transcript_length
            _wake(self._end_waiters)
            self._end_waiters = []
        self.wake()

    def wake(self) -> None:
        """Wake every follower waiting for an event."""
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            _wake(waiters)

    async def until_started(self) -> None:
        """Wait for the run's first event: from then on its observers have it on record."""
        while not self.events and not self.status.finished:
            await _next_wake(self._waiters)

    async def until_finished(self) -> RunFinished:
        """Wait for the run's ending; unlike a follower, woken once and not for every event.
        Everything the run said is then in :attr:`events`."""
        while (finished := self.finished) is None:
            await _next_wake(self._end_waiters)
        return finished

    async def follow(self, *, after: int = -1) -> AsyncIterator[AgentEvent]:
        """Events with ``seq > after``: first those already logged, then live ones, to the end."""
        async for batch in self.follow_batches(after=after):
            for event in batch:
                yield event

    async def follow_batches(self, *, after: int = -1) -> AsyncIterator[list[AgentEvent]]:
        """Like :meth:`follow`, but everything logged since the last batch at once: a stream
        writes one chunk for a burst of events instead of one per event (never waiting for
        more than is there)."""
        index = after + 1
        while True:
            if index < len(self.events):
                batch = self.events[index:]
                index += len(batch)
                for end, event in enumerate(batch):
                    if isinstance(event, RunFinished):
                        yield batch[: end + 1]
                        return
                yield batch
                continue
            if self.status.finished:
                return
            await _next_wake(self._waiters)


async def _next_wake(waiters: list[asyncio.Future[None]]) -> None:
    """Wait in ``waiters`` until :func:`_wake` releases them."""
    waiter = asyncio.get_running_loop().create_future()
    waiters.append(waiter)
    await waiter


def _wake(waiters: list[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():  # one whose waiting task was cancelled
            waiter.set_result(None)


class RunManager:
    """Starts runs, finds them for their owner, stops them, and forgets old finished ones."""

    def __init__(
        self,
        *,
        max_runs: int = 256,
        max_runs_per_owner: int = 32,
        max_runs_per_user: int = 4,
        keep_finished: int = 1000,
        observers: Sequence[RunObserver] = (),
        settle: Callable[[], Awaitable[None]] | None = None,
        redact: Callable[[str], str] = str,
    ) -> None:
        self.observers: Observers[RunObserver] = Observers(observers)
        """Called with every event of every run (metrics, persistence) of the kinds each reads
        (``server/runs/observers.py``); must not block."""
        self.settle = settle
        """Awaited after the observers saw a run's ending and before any follower does: what
        they queued (the final message, the run's record) is durable before a client hears
        the run is over."""
        self.redact = redact
        """Masks secrets in a failed run's error (the log's masking), before anyone hears it."""
        self._runs: dict[str, Run] = {}
        self._aliases: dict[str, str] = {}
        # Kept incrementally so admission and clean-up cost O(1) per run, not O(runs kept).
        self._live: dict[str, int] = {}
        self._live_users: dict[tuple[str, str], int] = {}
        """Live runs per (owner, end user), for the runs that name one."""
        self._live_total = 0
        self._finished_order: deque[str] = deque()
        self.max_runs = max_runs
        self.max_runs_per_owner = max_runs_per_owner
        self.max_runs_per_user = max_runs_per_user
        """Runs one end user behind a key may have in progress (``limits.runs_per_user``),
        inside the key's own limit."""
        self.keep_finished = keep_finished
        self.exiting = False
        """The server has begun to exit: streams it cuts from now on are its doing."""
        self.draining = False
        """The server is shutting down gracefully: no new run is admitted."""

    # --- starting ---------------------------------------------------------------------------

    def start(
        self,
        agent: Runnable,
        request: AgentRequest,
        *,
        owner: str,
        endpoint: str,
        model: str,
        end_user: str | None = None,
        completion_id: str = "",
        session_id: str | None = None,
        providers: Mapping[str, str] | None = None,
        trace_parent: object = None,
    ) -> Run:
        self.admit(owner, end_user)
        info = RunInfo(
            id=request.run_id or new_id("run_"),
            owner=owner,
            end_user=end_user,
            endpoint=endpoint,
            model=model,
            completion_id=completion_id,
            session_id=session_id,
            providers=providers or {},
            trace_parent=trace_parent,
        )
        run = Run(info=info, agent=agent, session_id=session_id)
        self._runs[run.id] = run
        if completion_id:
            self._aliases[completion_id] = run.id
        self._live[owner] = self._live.get(owner, 0) + 1
        if end_user is not None:
            user = (owner, end_user)
            self._live_users[user] = self._live_users.get(user, 0) + 1
        self._live_total += 1
        run.status = RunStatus.RUNNING
        run.task = asyncio.create_task(self._drive(run, agent, request), name=f"hermes-{run.id}")
        return run

    def live_tasks(self) -> list[asyncio.Task[None]]:
        """The tasks of the runs in progress here (a reload waits for them)."""
        return [r.task for r in self._runs.values() if not r.status.finished and r.task]

    def live_run_keys(self) -> list[tuple[str, str]]:
        """``(owner, run_id)`` of every run in progress here, and ``(owner/end_user, run_id)``
        beside it for a run of an end user: the sets the run is counted in on every replica
        (``server/replicas/reservations.py``)."""
        keys = []
        for run in self._runs.values():
            if not run.status.finished:
                keys.append((run.owner, run.id))
                if run.info.end_user is not None:
                    keys.append((user_key(run.owner, run.info.end_user), run.id))
        return keys

    def live_runs(self, owner: str | None = None, end_user: str | None = None) -> int:
        """Runs in progress (of ``owner``'s ``end_user``, of ``owner``, or of everyone): what
        the limits count."""
        if owner is None:
            return self._live_total
        if end_user is not None:
            return self._live_users.get((owner, end_user), 0)
        return self._live.get(owner, 0)

    def admit(self, owner: str, end_user: str | None = None) -> None:
        """Raise :class:`RunLimitExceeded` if ``owner`` (for ``end_user``, when it names one)
        may not start a run now, and :class:`ServerDraining` once the server is shutting
        down."""
        if self.draining:
            raise ServerDraining()
        if self._live_total >= self.max_runs:
            raise RunLimitExceeded("The server is running its maximum of runs.", retry_after=5)
        if self._live.get(owner, 0) >= self.max_runs_per_owner:
            raise RunLimitExceeded(
                f"This API key already has {self.max_runs_per_owner} runs in progress.",
                retry_after=5,
            )
        if end_user is not None and self._live_users.get((owner, end_user), 0) >= (
            self.max_runs_per_user
        ):
            raise RunLimitExceeded(end_user_limit_message(self.max_runs_per_user), retry_after=5)

    async def _drive(self, run: Run, agent: Runnable, request: AgentRequest) -> None:
        if request.run_id != run.id:
            request = dataclasses.replace(request, run_id=run.id)
        ending: RunFinished | None = None

        def deliver(event: AgentEvent) -> None:
            # Called inside the agent loop for every event: record and count it right there.
            nonlocal ending
            if isinstance(event, RunFinished):
                if event.error:
                    # The error reaches the client, the store and the metrics from here: an
                    # upstream that echoes its key in a refusal must not hand it to them.
                    event = dataclasses.replace(event, error=self.redact(event.error))
                ending = event  # followers hear of it once the observers' writes are durable
            else:
                run.record(event)
            self._observe(run, event)

        try:
            await agent.execute(request, deliver)
            if ending is not None and self.settle is not None:
                try:
                    await self.settle()
                except Exception as exc:
                    if not disk_full(exc):
                        log.exception("settling run %s failed", run.id)
                    else:  # the run is over all the same; its record waits for space, queued
                        log.error("run %s ended while the disk is full: its record waits", run.id)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The agent turns its own failures into RunFinished; reaching here is our bug.
            log.exception("run %s crashed", run.id)
        finally:
            if ending is not None:
                run.record(ending)
            else:
                # Every follower and observer must still see an ending.
                ending = _crashed(run, request)
                self._observe(run, ending)
                run.record(ending)
            self._retire(run)

    def _observe(self, run: Run, event: AgentEvent) -> None:
        info = run.info
        for observe in self.observers.of(type(event)):
            try:
                observe(info, event)
            except Exception:
                log.exception("a run observer failed on %s", event.kind)

    def _retire(self, run: Run) -> None:
        """Count a run out of the live ones and forget the oldest finished runs."""
        run.agent = None  # its prompt, stores and tools are no use to a replay
        self._live_total -= 1
        left = self._live[run.owner] - 1
        if left:
            self._live[run.owner] = left
        else:
            del self._live[run.owner]
        if run.info.end_user is not None:
            user = (run.owner, run.info.end_user)
            left = self._live_users[user] - 1
            if left:
                self._live_users[user] = left
            else:
                del self._live_users[user]
        self._finished_order.append(run.id)
        while len(self._finished_order) > self.keep_finished:
            old = self._runs.pop(self._finished_order.popleft(), None)
            if old is not None:
                self._aliases.pop(old.completion_id, None)

    def forget(self, run_ids: Sequence[str]) -> int:
        """Drop these finished runs and their events (their records were erased): a replay
        of them finds nothing from now on. A run still going is kept. How many went."""
        forgotten = 0
        for run_id in run_ids:
            run = self._runs.get(run_id)
            if run is None or not run.status.finished:
                continue
            del self._runs[run_id]
            self._aliases.pop(run.completion_id, None)
            forgotten += 1
        return forgotten

    # --- finding and stopping -----------------------------------------------------------------

    def get(self, run_id: str, *, owner: str) -> Run | None:
        """The run named by its id or its completion id, if ``owner`` owns it."""
        run = self._runs.get(self._aliases.get(run_id, run_id))
        return run if run is not None and run.owner == owner else None

    def begin_exit(self) -> None:
        """The process is about to stop serving (called before it tears connections down)."""
        self.exiting = True

    def follower_left(self, run: Run) -> None:
        """The client following ``run`` is gone: stop the run, blaming the shutdown when the
        server itself is cutting its streams."""
        source = InterruptSource.SHUTDOWN if self.exiting else InterruptSource.CLIENT_DISCONNECT
        self.stop(run, source)

    def stop(self, run: Run, source: InterruptSource) -> None:
        """Interrupt ``run``; its ending records ``source``."""
        if run.status.finished:
            return
        run.status = RunStatus.STOPPING
        if run.agent is not None:
            run.agent.interrupt(STOP_REASONS.get(source, source.value), source=source)

    def lost_lease(self) -> None:
        """This replica's lease lapsed (it was frozen, or cut from Redis): another replica has
        declared its runs interrupted and freed their sessions. Stop every one at once; what
        they still write is fenced off by the database (a run no longer live is not updated)."""
        for run in self._runs.values():
            if run.status.finished:
                continue
            run.status = RunStatus.STOPPING
            if run.agent is not None:
                run.agent.interrupt(
                    "this replica lost its lease; another replica took the run over",
                    source=InterruptSource.SHUTDOWN,
                )

    async def drain(self, seconds: float) -> int:
        """Take no new run, let the live ones finish for up to ``seconds``, then interrupt
        what is left (recorded as stopped by the shutdown); returns how many were cut."""
        self.draining = True
        live = [r.task for r in self._runs.values() if not r.status.finished and r.task]
        if live:
            await asyncio.wait(live, timeout=seconds)
        left = [r for r in self._runs.values() if not r.status.finished]
        if left:
            await self.shutdown()
        return len(left)

    async def shutdown(self) -> None:
        """Interrupt every live run and wait (briefly) for them to end honestly."""
        self.exiting = True
        live = [r for r in self._runs.values() if not r.status.finished]
        for run in live:
            self.stop(run, InterruptSource.SHUTDOWN)
        tasks = [r.task for r in live if r.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=5)


def user_key(owner: str, end_user: str) -> str:
    """The name ``owner``'s ``end_user`` is counted under beside the key (as their scoped
    owner: principal names hold no ``/``, so it never is another key's)."""
    return f"{owner}/{end_user}"


def end_user_limit_message(limit: int) -> str:
    return (
        f"This end user already has {limit} runs in progress (limits.runs_per_user); "
        "other users of this API key may still start runs."
    )


def _crashed(run: Run, request: AgentRequest) -> RunFinished:
    """The ending of a run whose runner raised instead of ending it, with its transcript as far
    as its events tell (where a Response continued from it forks: 0 would lose every earlier
    turn): where it stood when the run began, or after the last message the run added, in the
    session a compression last moved it to."""
    session_id, length = run.session_id, len(request.history)
    for event in run.events:
        if isinstance(event, MessageAdded):
            length = event.index + 1
        elif isinstance(event, CompressionPerformed) and event.session_id is not None:
            session_id, length = event.session_id, event.messages_after
    return RunFinished(
        run_id=run.id,
        seq=len(run.events),
        exit_reason=ExitReason.FAILED,
        final_text="",
        iterations=0,
        usage=Usage(),
        model_calls=0,
        error="The run ended unexpectedly (a server error); see the server log.",
        session_id=session_id,
        transcript_length=length,
    )
