"""Approvals over HTTP: how a run's question reaches a person, and how the answer comes back.

A tool call that needs approval (see the profile's ``approvals`` policy) is recorded in the
store and then either

- *waits in place*, when the request asked for it (``X-Hermes-Approval-Wait: <seconds>``):
  the run pauses, ``GET /v1/runs/{id}`` lists the request, and
  ``POST /v1/runs/{id}/approvals/{approval_id}`` answers it, on any replica (the paused run
  reads the recorded answer back); nobody answering in time is a denial the model is told
  about; or
- *ends the run* (the default): the run finishes with ``awaiting_approval`` and a question,
  and the conversation's next turn carries the answer — a chat user's "approve" / "deny", a
  Responses ``mcp_approval_response`` item, or an answer posted to the endpoint beforehand
  (recorded, and acted on when the next turn arrives).

Approving "for this session" is a standing grant: later calls of that tool in the same
conversation run without asking.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from hermes_core.agent import AgentRequest
from hermes_core.agent.config import ApprovalAnswer
from hermes_core.events import ApprovalDecision
from hermes_core.persistence import ApprovalRecord, RunRecord, Store
from hermes_core.persistence.approvals import ApprovalScope, ApprovalStatus
from hermes_core.persistence.runs import LIVE_STATUSES
from hermes_core.tools.registry import ApprovalAsk, ApprovalCallback, ApprovalVerdict
from server.errors import APIError

log = logging.getLogger("hermes.approvals")

WAIT_HEADER = "x-hermes-approval-wait"
"""``X-Hermes-Approval-Wait: <seconds>``: a call needing approval pauses the run that long for
an answer through the approvals endpoint, instead of ending the run."""

Verdict = tuple[ApprovalStatus, ApprovalScope]

_WORDS = re.compile(r"[a-z]+")
_YES = frozenset({"approve", "approved", "yes", "y", "ok", "okay", "allow", "sure"})
_SESSION = ("session", "always", "conversation", "all")


def parse_spoken_answer(text: str) -> Verdict:
    """A person's answer in words ("approve", "approve for this session", "deny", anything
    else) as a verdict: only a clear yes approves; anything else is a refusal."""
    words = _WORDS.findall(text.lower())
    if not words or words[0] not in _YES or len(words) > 8:
        return "denied", "once"
    scope: ApprovalScope = "session" if any(w in _SESSION for w in words) else "once"
    return "approved", scope


def wait_seconds_of(request: HTTPConnection, limit: float) -> float:
    """How long the request lets a call wait for an approval in place (0: end the run)."""
    raw = request.headers.get(WAIT_HEADER, "").strip()
    if not raw:
        return 0.0
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= limit:
        raise APIError(
            400,
            f"The {WAIT_HEADER} header must be a number of seconds from 0 to {limit:g}.",
            param=WAIT_HEADER,
        )
    return seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class Asker:
    """Who a run's approvals are asked for, and where they are kept."""

    owner: str
    """The key's principal: who may answer."""
    conversation: tuple[str, str] | None
    """(owner, name) of the conversation: where a standing grant applies and where the next
    turn looks for the answer. None: the run has no conversation."""
    session_id: str | None
    profile: str
    wait_seconds: float


class ApprovalDesk:
    """The server's approvals: the runs waiting in place, and the rules every run follows."""

    def __init__(self, *, expiry_seconds: float = 900.0, poll_seconds: float = 0.5) -> None:
        self.expiry_seconds = expiry_seconds
        """How long a request stays answerable; after that it is a denial."""
        self.poll_seconds = poll_seconds
        """How often a paused run reads its request back from the store: an answer posted to
        another replica (or another worker) is recorded there, and only there."""
        self._waiting: dict[str, asyncio.Future[Verdict]] = {}
        self._closing: set[asyncio.Future[None]] = set()

    def approver(self, store: Store | None, asker: Asker) -> ApprovalCallback | None:
        """The approval callback of one run; None when nobody could ever answer (no store,
        or neither a conversation to answer in nor time to wait): such a call is refused."""
        if store is None or (asker.conversation is None and asker.wait_seconds <= 0):
            return None

        async def decide(ask: ApprovalAsk) -> ApprovalVerdict:
            return await self._decide(store, asker, ask)

        return decide

    async def _decide(self, store: Store, asker: Asker, ask: ApprovalAsk) -> ApprovalVerdict:
        # Recorded before the first await: the run's ApprovalRequested event is out already,
        # and a client acting on it must find the request (reads flush queued writes first).
        conversation = asker.conversation
        now = time.time()
        wait = min(asker.wait_seconds, self.expiry_seconds)
        store.approvals.add(
            ApprovalRecord(
                id=ask.approval_id,
                owner=asker.owner,
                conversation_owner=conversation[0] if conversation else asker.owner,
                conversation=conversation[1] if conversation else "",
                session_id=asker.session_id,
                run_id=ask.call.run_id,
                profile=asker.profile,
                call_id=ask.call.call_id,
                tool=ask.call.name,
                toolset=ask.toolset,
                arguments=ask.call.arguments,
                reason=ask.reason,
                status="pending",
                scope="once",
                created_at=now,
                expires_at=now + (wait if wait > 0 else self.expiry_seconds),
            )
        )
        # Likewise, an answer that comes before the wait below starts must find the run.
        answered: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._waiting[ask.approval_id] = answered
        try:
            if conversation is not None and await store.approvals.granted(
                conversation[0], conversation[1], ask.call.name
            ):
                # A standing grant answers it: kept as approved, for the record.
                await store.approvals.decide(ask.approval_id, "approved", now=now)
                await store.approvals.claim([ask.approval_id], ask.call.run_id)
                return ApprovalVerdict.APPROVED
            if wait <= 0:
                return ApprovalVerdict.DEFERRED
            return await self._wait(store, asker.owner, ask, answered, wait)
        except asyncio.CancelledError:
            # The run was stopped while it asked: nobody acts on this request any more, so it
            # must not be left pending for the next turn's words to answer.
            closing = asyncio.ensure_future(self._close_unanswered(store, ask))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
            raise
        finally:
            self._waiting.pop(ask.approval_id, None)

    async def _wait(
        self,
        store: Store,
        owner: str,
        ask: ApprovalAsk,
        answered: asyncio.Future[Verdict],
        seconds: float,
    ) -> ApprovalVerdict:
        status = await self._heard(store, owner, ask.approval_id, answered, seconds)
        if status is None:
            status = "expired"
            if not await store.approvals.decide(ask.approval_id, "expired", now=time.time()):
                # Answered in the last instant, here or elsewhere: the store has the answer
                # the answering side reported, and that is the one acted on.
                record = await store.approvals.get(owner, ask.approval_id)
                if record is not None and record.status != "pending":
                    status = record.status
        # Acted on here, in this run: the conversation's next turn has nothing to settle.
        await store.approvals.claim([ask.approval_id], ask.call.run_id)
        return ApprovalVerdict(status)

    async def _heard(
        self,
        store: Store,
        owner: str,
        approval_id: str,
        answered: asyncio.Future[Verdict],
        seconds: float,
    ) -> ApprovalStatus | None:
        """The answer given within ``seconds``, or None. An answer posted to this process
        arrives through ``answered`` at once; one posted to another replica is only in the
        store, where the decision moved the row out of *pending* exactly once, so reading it
        back is as good as being told (and needs nothing but the database both share)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, self.poll_seconds)):  # see delivery.py
                    status, _ = await asyncio.shield(answered)
                return status
            try:
                record = await store.approvals.get(owner, approval_id)
            except Exception:
                # A failed read only delays hearing of the answer: the next one may work, and
                # the decision at the deadline settles it either way.
                log.warning("could not read approval %s back; still waiting", approval_id)
                continue
            if record is not None and record.status != "pending":
                return record.status
        return None

    async def _close_unanswered(self, store: Store, ask: ApprovalAsk) -> None:
        try:
            await store.approvals.decide(ask.approval_id, "expired", now=time.time())
            await store.approvals.claim([ask.approval_id], ask.call.run_id)
        except Exception:
            log.exception("could not close approval %s of a stopped run", ask.approval_id)

    def waiting(self, approval_id: str) -> bool:
        """Whether a run is paused on this approval in this process."""
        return approval_id in self._waiting

    def hand_over(self, approval_id: str, verdict: Verdict) -> bool:
        """Give a paused run its answer (already recorded); False if none waits for it."""
        future = self._waiting.get(approval_id)
        if future is None or future.done():
            return False
        future.set_result(verdict)
        return True


async def settle_open_approvals(
    store: Store | None,
    request: AgentRequest,
    *,
    conversation: tuple[str, str],
    run_id: str,
    forked: bool,
    answers: Mapping[str, bool],
    spoken: str,
) -> AgentRequest:
    """``request`` carrying the answers to what the conversation's last run left awaiting
    approval: ``answers`` (approval id → approve) where given, else the person's words
    ``spoken``; unanswered requests past their time are expired. A turn that forked the
    conversation (the person went back) drops them: they belonged to the abandoned branch."""
    if store is None:
        return request
    records = await store.approvals.open(*conversation)
    if not records:
        return request
    now = time.time()
    settled: list[ApprovalAnswer] = []
    spoken_verdict = parse_spoken_answer(spoken)
    for record in records:
        status, scope = record.status, record.scope
        if status == "pending":
            if forked or record.expired_at(now):
                status, scope = "expired", "once"
            elif record.id in answers:
                status, scope = ("approved" if answers[record.id] else "denied"), "once"
            else:
                status, scope = spoken_verdict
            await store.approvals.decide(record.id, status, now=now, scope=scope)
        if not forked:
            settled.append(_answer(record, status))
    await store.approvals.claim([record.id for record in records], run_id)
    if not settled:
        return request
    return dataclasses.replace(request, approvals=tuple(settled))


def _answer(record: ApprovalRecord, status: ApprovalStatus) -> ApprovalAnswer:
    return ApprovalAnswer(
        approval_id=record.id,
        name=record.tool,
        arguments=record.arguments,
        reason=record.reason,
        decision=ApprovalDecision(status if status != "pending" else "expired"),
    )


async def close_questions_of(store: Store, runs: Sequence[RunRecord]) -> None:
    """Close what ``runs`` asked and never acted on: their server died (crash recovery, here
    or by another replica). As for a run stopped while it asks (``_close_unanswered``), nobody
    acts on those requests any more; left open, the conversation's next turn would take its
    words for their answer, and a "sure" about something else would run a dead run's call."""
    now = time.time()
    for run in runs:
        asked = await store.approvals.of_run(run.owner, run.id)
        for record in asked:
            if record.status == "pending":
                await store.approvals.decide(record.id, "expired", now=now)
        await store.approvals.claim([record.id for record in asked], run.id)


ANOTHER_REPLICAS_WRITE_SECONDS = 3.0
"""How long an answer waits for an approval its live run asked for on another replica to reach
the database: that replica records it through its write queue, and a client that saw the
request in the run's stream may answer here before the queue was written."""


async def _recorded(
    store: Store, owner: str, run_id: str, approval_id: str, *, replicas: bool
) -> ApprovalRecord | None:
    record = await store.approvals.get(owner, approval_id)
    if record is not None or not replicas:  # this process's own writes are flushed first
        return record
    run = await store.runs.get(owner, run_id)
    if run is not None and run.status not in LIVE_STATUSES:
        return None  # its run is over: it asks nothing any more (its row, too, may be queued)
    deadline = time.monotonic() + ANOTHER_REPLICAS_WRITE_SECONDS
    while record is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        record = await store.approvals.get(owner, approval_id)
    return record


async def answer_pending(
    store: Store | None,
    desk: ApprovalDesk,
    *,
    owner: str,
    run_id: str,
    approval_id: str,
    approve: bool,
    scope: ApprovalScope,
    replicas: bool = False,
) -> ApprovalRecord:
    """Record ``owner``'s answer to a pending approval of ``run_id`` and hand it to the run
    paused on it, if one is; the approval as it now stands. 404 for an approval that is not
    the owner's or not that run's; 409 for one already answered or expired. ``replicas``:
    other replicas may run the run (an approval unknown yet may still be on its way)."""
    record = (
        await _recorded(store, owner, run_id, approval_id, replicas=replicas)
        if store is not None
        else None
    )
    if store is None or record is None or record.run_id != run_id:
        raise APIError(
            404,
            f"Run '{run_id}' has no approval '{approval_id}'.",
            param="approval_id",
            code="approval_not_found",
        )
    now = time.time()
    if record.expired_at(now):
        await store.approvals.decide(approval_id, "expired", now=now)
        raise APIError(
            409,
            f"Approval '{approval_id}' expired unanswered; the call was not run.",
            code="approval_expired",
        )
    status: ApprovalStatus = "approved" if approve else "denied"
    if record.status != "pending" or not await store.approvals.decide(
        approval_id, status, now=now, scope=scope
    ):
        current = await store.approvals.get(owner, approval_id)
        raise APIError(
            409,
            f"Approval '{approval_id}' was already answered "
            f"({current.status if current else record.status}).",
            code="approval_answered",
        )
    desk.hand_over(approval_id, (status, scope))
    return dataclasses.replace(record, status=status, scope=scope, decided_at=now)


def approval_object(record: ApprovalRecord, *, now: float | None = None) -> dict[str, object]:
    """An approval as ``GET /v1/runs/{id}`` and the approvals endpoint show it."""
    now = time.time() if now is None else now
    status = "expired" if record.expired_at(now) else record.status
    return {
        "id": record.id,
        "object": "hermes.approval",
        "run_id": record.run_id,
        "call_id": record.call_id,
        "tool": record.tool,
        "toolset": record.toolset,
        "arguments": record.arguments,
        "reason": record.reason,
        "status": status,
        "scope": record.scope,
        "created_at": int(record.created_at),
        "expires_at": int(record.expires_at),
        "decided_at": int(record.decided_at) if record.decided_at is not None else None,
    }
