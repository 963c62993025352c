"""``Idempotency-Key``: a POST that starts work, retried with the same key, gets the first
request's answer instead of starting the work again.

OpenAI's SDKs retry a POST after a timeout or a 5xx; without a key a retried agent run runs its
tools again (a second ``rm``, a second email). With one, for 24 hours:

- the first request claims the key (one INSERT, so replicas agree on who did) and is answered
  to the end *whoever listens*: the client leaving does not stop its run, since its retry is
  coming for the answer. Its whole answer (a stream's frames too) is kept with the key;
- a retry while it runs follows it: on the replica serving it, the retry gets the answer's
  bytes as they are sent (a stream's frames so far, then the rest live; a waiting request's
  body when it is whole); on another replica, the retry waits for the kept answer;
- a retry after it gets the kept answer (``Idempotent-Replayed: true``);
- the same key with another body, or on another endpoint, is a 422
  ``idempotency_key_reused`` (not retried by the SDKs: it is the caller's mistake); a retry
  that waited past its limit is a 409 ``idempotency_key_in_use`` (which the SDKs retry).

A first request that did no work — refused before a run started with a 429, a 409 (its
session busy: the SDKs retry a 409, and a kept one would answer every retry the same for a
day) or a 5xx, a run the upstream refused for its rate before anything acted (a 429 too,
whose ``retry-after`` the retry follows), or that crashed before it answered — gives the key
up, so its retry does the work (one already waiting for it too). Other answers (4xx
included) are kept: they were the request's outcome. A replay carries the first answer's
own headers (``x-hermes-run-id``, ``x-hermes-session-id``).

A first request whose process died (killed) cannot give its key up. Its claim names its
replica and that replica's start, and holds a lease the request renews while it is answered,
and the run it starts is noted with it as it starts. A retry takes the request for dead when its
claim is an earlier start's of the retry's own replica (one process holds a replica's name at a
time), or when the lease ran out: then a claim without a run is the retry's (it does the work),
and one with a run is answered ``idempotency_key_interrupted`` (its tools may have acted). A
request that was only frozen past its lease finds its claim taken over at its next renewal and
stops, if it started no run; its writes to the key name its start, so they land on nothing it
lost.

A request without the header pays one header lookup (the hot path's header loop).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, BinaryIO, Final, TypeVar

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from hermes_core import json_codec
from hermes_core.persistence import IdempotencyRecord, IdempotencyStore, RunStore
from hermes_core.persistence.idempotency import Holder
from hermes_core.persistence.runs import LIVE_STATUSES
from server.errors import APIError, error_envelope
from server.http.auth import Principal

log = logging.getLogger(__name__)

HEADER = "idempotency-key"
HEADER_BYTES = HEADER.encode()
TTL_SECONDS = 24 * 3600.0
RUN_LOOK_SECONDS = 2.0
"""How often a waiting retry asks whether the first request's run is still going."""
ORPHAN_GRACE_SECONDS = 5.0
"""How long after its run ended a first request's answer may still be on its way to the
store, before a retry takes it as lost."""
CLAIM_LEASE_SECONDS = 30.0
"""How long a claim holds unless its request renews it (three times a lease, while it is being
answered): once it ran out, the request's process is dead, and a retry takes the key over."""
MAX_KEY_LENGTH = 255
MAX_KEPT_BYTES = 16 * 1024 * 1024
"""A longer answer is not kept (its retry is told to read the run instead)."""
RUN_ID_HEADER = b"x-hermes-run-id"
KEPT_HEADERS_PREFIX = b"x-hermes-"
"""The first answer's headers a replay carries again: the server's own (the run, the session a
client goes on in); framing ones (length, encoding, date) are the replay's own."""
REPLAYED = (b"idempotent-replayed", b"true")
JSON = "application/json"

Work = Callable[[Receive, Send], Awaitable[None]]
"""Answering the request (ASGI ``receive``/``send`` of the app serving it)."""
Made = TypeVar("Made", bound=dict[str, Any] | Response)
"""What a route answering at once makes: a JSON object (200), or its whole response."""
T = TypeVar("T")


class _TakenOver:
    """A retry found its key's claim dead (no run started, its request's process gone) and
    holds the key now: it does the work."""


TAKEN_OVER: Final = _TakenOver()


def key_of(scope: Scope) -> str | None:
    """The request's ``Idempotency-Key`` (checked: 1–255 visible ASCII characters)."""
    for name, value in scope["headers"]:
        if name == HEADER_BYTES:
            return checked_key(value.decode("latin-1"))
    return None


def checked_key(key: str) -> str:
    if not 0 < len(key) <= MAX_KEY_LENGTH or not all(33 <= ord(c) <= 126 for c in key):
        raise APIError(
            400,
            f"The Idempotency-Key must be 1 to {MAX_KEY_LENGTH} visible ASCII characters "
            "(a UUID is a good one).",
            param="Idempotency-Key",
            code="invalid_idempotency_key",
        )
    return key


def fingerprint(*parts: bytes) -> str:
    """What the same request is: a digest of its body (or of its parts, for a multipart one,
    whose boundary differs from try to try)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


END_USER_HEADERS = frozenset({b"x-hermes-memory-scope", b"x-openwebui-user-id"})
"""The headers a trusted front end names a request's end user with (as
server/serving/end_users.py reads them)."""


def for_whom(scope: Scope, principal: Principal) -> tuple[bytes, ...]:
    """What a request says of the end user it is for, as part of what the request is (its
    fingerprint): behind a trusted front end, its end-user headers as sent. Two end users who
    happen to send the same key (a front end deriving keys from chat and turn numbers) are
    then two requests, and the second is refused (422) instead of replayed the first's
    answer. Nothing for a request naming no end user: its fingerprint is its body's."""
    if not principal.trusted_front_end:
        return ()
    return tuple(
        name + b":" + value for name, value in scope["headers"] if name in END_USER_HEADERS
    )


def claim_of(
    scope: Scope, principal: Principal, parts: Callable[[], Iterable[bytes]]
) -> Claim | None:
    """The claim of a keyed request to a route (None without the header): ``parts`` say what
    the same request is, read only when there is a key."""
    key = key_of(scope)
    if key is None:
        return None
    return Claim(
        principal.name, key, scope["path"], fingerprint(*parts(), *for_whom(scope, principal))
    )


async def file_digest(file: BinaryIO) -> bytes:
    """An uploaded file's SHA-256 (read in a thread, then rewound for whoever reads it)."""

    def digest() -> bytes:
        file.seek(0)
        made = hashlib.sha256()
        for chunk in iter(lambda: file.read(1024 * 1024), b""):
            made.update(chunk)
        file.seek(0)
        return made.digest()

    return await asyncio.to_thread(digest)


@dataclass(frozen=True, slots=True)
class Claim:
    """A keyed request: whose, which key, where, and what body."""

    owner: str
    key: str
    endpoint: str
    fingerprint: str


class _Held:
    """A keyed request's claim while the request is answered: its lease renewed, and the run
    it starts noted with the key before that run starts."""

    def __init__(
        self, store: IdempotencyStore, claim: Claim, holder: Holder, task: asyncio.Task[Any]
    ) -> None:
        self._store = store
        self._claim = claim
        self._holder = holder
        self._task = task
        """The request's: stopped when a retry took its claim over before it started a run."""
        self.run_id: str | None = None

    async def note(self, run_id: str) -> None:
        """Note ``run_id`` with the key, or refuse to start it: a retry took the claim over
        (this process froze past its lease, and the retry does the work)."""
        if self.run_id is not None:
            return  # a later run in the context this request's run inherited
        self.run_id = run_id
        claim, life = self._claim, self._holder.life
        try:
            ours = await self._store.started(claim.owner, claim.key, run_id, life=life)
        except Exception:  # the store cannot say: doing the work is what the client asked for
            log.exception("noting an idempotency key's run failed")
            return
        if not ours:
            raise APIError(
                409,
                "A retry with this Idempotency-Key took the request over; it answers instead.",
                code="idempotency_key_in_use",
            )

    async def keep(self) -> None:
        """Renew the claim's lease while the request is answered. A renewal that finds the
        claim taken over stops a request that started no run (the retry does its work)."""
        claim, holder = self._claim, self._holder
        try:
            while True:
                await asyncio.sleep(holder.lease_seconds / 3)
                try:
                    held = await self._store.renew(claim.owner, claim.key, holder, now=time.time())
                except Exception:  # the database away for a moment: the next renewal may do
                    log.exception("renewing an idempotency key's claim failed")
                    continue
                if not held:
                    if self.run_id is None:
                        log.warning(
                            "an idempotency key's claim was taken over: stopping its request"
                        )
                        self._task.cancel()
                    return
        except Exception:  # the next retry finds the lease run out, at worst
            log.exception("keeping an idempotency key's claim failed")


_held: ContextVar[_Held | None] = ContextVar("hermes_idempotency_claim", default=None)
"""The claim of the keyed request this task answers (None: a request without a key)."""


async def note_run(run_id: str) -> None:
    """Where a run is about to start: a keyed request notes the run with its key first, so a
    retry after this process died knows the work began and does not begin it again. Raises a
    409 ``APIError`` when a retry has taken the key over. Nothing for a request without a key."""
    held = _held.get()
    if held is not None:
        await held.note(run_id)


class Idempotency:
    """Keyed requests, kept in the SQL store (``store`` is set once it is open; without one
    the header is ignored: nothing could be kept across a retry to another replica)."""

    def __init__(self, *, wait_seconds: float = 600.0, poll_seconds: float = 0.25) -> None:
        self.store: IdempotencyStore | None = None
        self.wait_seconds = wait_seconds
        """How long a retry waits for an answer another replica is making."""
        self.poll_seconds = poll_seconds
        self.runs: RunStore | None = None
        """Where a retry learns that the first request's run ended without its answer being
        kept (its replica died): it stops waiting then (set with ``store``)."""
        self._live: dict[tuple[str, str], _Answer] = {}
        """The answers this replica is making, by ``(owner, key)``: what its retries follow."""
        self.life = uuid.uuid4().hex
        """This start of the replica, named in its claims: a claim naming this replica and
        another start is dead (an instance's name is one live process's at a time)."""

    def _holder(self) -> Holder:
        instance = self.runs.instance if self.runs is not None else None
        return Holder(instance, self.life, CLAIM_LEASE_SECONDS)

    async def _claim(self, store: IdempotencyStore, claim: Claim) -> IdempotencyRecord | None:
        """Claim the key for this request: None when it is ours now, else the row holding it."""
        return await store.claim(
            claim.owner,
            claim.key,
            endpoint=claim.endpoint,
            fingerprint=claim.fingerprint,
            now=time.time(),
            ttl=TTL_SECONDS,
            holder=self._holder(),
        )

    async def serve(self, claim: Claim, work: Work, receive: Receive, send: Send) -> None:
        """Answer a keyed request: do ``work`` if the key is new, else what the first did."""
        store = self.store
        if store is None:
            await work(receive, send)
            return
        try:
            held = await self._claim(store, claim)
        except Exception:
            # The table cannot say: doing the work is what the client asked for.
            await work(receive, send)
            return
        if held is None or await self._again(store, claim, held, receive, send):
            await self._first(store, claim, work, receive, send)

    async def once(
        self, claim: Claim | None, make: Callable[[], Awaitable[Made]]
    ) -> Made | Response:
        """For a route whose answer is whole at once: ``make``'s answer when the request is
        new (kept as the key's), else the first request's answer. The answer is a JSON object
        (an upload's, a 200), or a whole response (a run's 202: the run its
        ``x-hermes-run-id`` names is kept with the key, as :meth:`serve` keeps it)."""
        store = self.store
        if claim is None or store is None:
            return await make()
        held = await self._claim(store, claim)
        if held is not None:
            messages: list[Message] = []

            async def collect(message: Message) -> None:
                messages.append(message)

            if not await self._again(store, claim, held, None, collect):
                return _response_of(messages)
        life = self.life
        try:
            made = await self._holding(store, claim, make)
        except APIError as exc:
            if not _did_work(exc.status, None):
                await _quietly(store.release(claim.owner, claim.key, life=life))
            else:  # the request's outcome: a retry is told the same
                body = json_codec.dumps(
                    error_envelope(exc.status, exc.message, param=exc.param, code=exc.code)
                )
                await _quietly(
                    store.finish(
                        claim.owner,
                        claim.key,
                        status_code=exc.status,
                        content_type=JSON,
                        body=body,
                        life=life,
                    )
                )
            raise
        except BaseException:
            await _quietly(store.release(claim.owner, claim.key, life=life))
            raise
        headers: str | None = None
        if isinstance(made, Response):
            status, content_type, body = made.status_code, made.media_type, bytes(made.body)
            run_id = made.headers.get(RUN_ID_HEADER.decode())
            headers = _kept_headers(made.raw_headers)
        else:
            status, content_type, body, run_id = 200, JSON, json_codec.dumps(made), None
        if run_id is not None:  # what retention and erasure delete the key with
            await _quietly(store.started(claim.owner, claim.key, run_id, life=life))
        if _did_work(status, run_id):
            await _quietly(
                store.finish(
                    claim.owner,
                    claim.key,
                    status_code=status,
                    content_type=content_type,
                    body=body,
                    headers=headers,
                    life=life,
                )
            )
        else:
            await _quietly(store.release(claim.owner, claim.key, life=life))
        return made

    async def _holding(
        self, store: IdempotencyStore, claim: Claim, make: Callable[[], Awaitable[T]]
    ) -> T:
        """``make``'s result, made while the key's claim is kept alive (its lease renewed),
        with the run it starts noted with the key before the run starts: the serving layer
        awaits :func:`note_run` there, which finds this claim in the request's context."""
        task = asyncio.current_task()
        assert task is not None
        held = _Held(store, claim, self._holder(), task)
        token = _held.set(held)
        keeper = asyncio.create_task(held.keep())
        try:
            return await make()
        finally:
            keeper.cancel()
            _held.reset(token)

    async def _first(
        self, store: IdempotencyStore, claim: Claim, work: Work, receive: Receive, send: Send
    ) -> None:
        answer = _Answer()
        place = (claim.owner, claim.key)
        self._live[place] = answer
        listening = True

        async def steady_receive() -> Message:
            # The client leaving is hidden from the work: it goes on to its answer, for the
            # retry that is coming for it.
            message = await receive()
            if message["type"] == "http.disconnect":
                await asyncio.Event().wait()
            return message

        async def capturing_send(message: Message) -> None:
            nonlocal listening
            answer.add(message)
            if message["type"] == "http.response.start" and answer.run_id is not None:
                await _quietly(store.started(claim.owner, claim.key, answer.run_id, life=self.life))
            if listening:
                try:
                    await send(message)
                except OSError:  # gone: the rest is kept for the retry only
                    listening = False

        try:
            await self._holding(store, claim, lambda: work(steady_receive, capturing_send))
        finally:
            # Kept (or given up) before retries stop following it here: one arriving between
            # the two finds the row done.
            answer.finish()
            try:
                if answer.did_work:
                    await _quietly(self._keep(store, claim, answer))
                else:
                    await _quietly(store.release(claim.owner, claim.key, life=self.life))
            finally:
                if self._live.get(place) is answer:
                    del self._live[place]

    async def _keep(self, store: IdempotencyStore, claim: Claim, answer: _Answer) -> None:
        body = b"".join(answer.chunks)
        await store.finish(
            claim.owner,
            claim.key,
            status_code=answer.status or 500,
            content_type=answer.content_type,
            body=body if len(body) <= MAX_KEPT_BYTES else b"",
            headers=_kept_headers(answer.start.get("headers", ()) if answer.start else ()),
            life=self.life,
        )

    async def _again(
        self,
        store: IdempotencyStore,
        claim: Claim,
        held: IdempotencyRecord,
        receive: Receive | None,
        send: Send,
    ) -> bool:
        """Answer a retry of a claimed key as its first request did (or will); True when the
        key is the retry's now (its first request died before starting a run): the retry then
        does the work itself."""
        if held.endpoint != claim.endpoint:
            await _refuse(
                send,
                422,
                f"This Idempotency-Key was used on POST {held.endpoint} already; use a new key "
                "for this request.",
                "idempotency_key_reused",
            )
            return False
        if held.fingerprint != claim.fingerprint:
            await _refuse(
                send,
                422,
                "This Idempotency-Key was used with another request body already; a retry "
                "must send the same body (or use a new key for a new request).",
                "idempotency_key_reused",
            )
            return False
        live = self._live.get((claim.owner, claim.key))
        if held.state == "running" and live is not None:
            async for message in live.follow():
                await send(message)
            return False
        if held.state == "running":
            found = await _unless_gone(self._until_done(store, claim), receive)
            if found is TAKEN_OVER:
                return True
            if not isinstance(found, IdempotencyRecord):
                await _refuse(
                    send,
                    409,
                    "The first request with this Idempotency-Key has not answered yet; retry.",
                    "idempotency_key_in_use",
                )
                return False
            held = found
        await _replay(held, send)
        return False

    async def _until_done(
        self, store: IdempotencyStore, claim: Claim
    ) -> IdempotencyRecord | _TakenOver | None:
        """The key's row once its answer is kept (another replica is making it); TAKEN_OVER
        once the key is this retry's (its first request died before it started a run, or gave
        the key up having done no work); or None: the wait ran out."""
        deadline = time.monotonic() + self.wait_seconds
        next_look = time.monotonic() + RUN_LOOK_SECONDS
        while time.monotonic() < deadline:
            await asyncio.sleep(self.poll_seconds)
            found = await store.get(claim.owner, claim.key)
            if found is None:
                # Given up since this retry saw it held (its first request did no work, a 429
                # it answered as this retry came): the work is this retry's, unless another
                # retry claimed the key first.
                found = await self._claim(store, claim)
                if found is None:
                    return TAKEN_OVER
            if found.state == "done":
                return found
            if self._dead(found):
                if found.run_id is None:  # it did nothing: this retry does the work
                    if await store.take_over(found, self._holder(), now=time.time()):
                        return TAKEN_OVER
                    continue  # changed meanwhile: look again
                return await self._interrupted(store, claim, found.run_id, found.life)
            if found.run_id is not None and time.monotonic() >= next_look:
                next_look = time.monotonic() + RUN_LOOK_SECONDS
                if await self._orphaned(found.run_id, claim.owner):
                    return await self._interrupted(store, claim, found.run_id, found.life)
        return None

    def _dead(self, found: IdempotencyRecord) -> bool:
        """Whether the request holding ``found``'s claim is provably dead: the claim is an
        earlier start's of this replica (whose name one live process holds at a time), or its
        lease ran out unrenewed (its process died, or froze for longer than a lease: then its
        writes, fenced by its start, no longer land). A claim made before claims named their
        holder is never taken for dead: it expires with its key."""
        if found.life is None or found.life == self.life:
            return False
        instance = self.runs.instance if self.runs is not None else None
        if instance is not None and found.instance == instance:
            return True
        return found.claimed_until is not None and found.claimed_until < time.time()

    async def _orphaned(self, run_id: str, owner: str) -> bool:
        """The run ended a while ago and its answer was never kept: the replica answering
        the first request died (crash recovery closed the run)."""
        if self.runs is None:
            return False
        run = await self.runs.get(owner, run_id)
        ended = run.ended_at if run is not None else None
        return (
            run is not None
            and run.status not in LIVE_STATUSES
            and ended is not None
            and time.time() - ended > ORPHAN_GRACE_SECONDS
        )

    async def _interrupted(
        self, store: IdempotencyStore, claim: Claim, run_id: str, life: str | None
    ) -> IdempotencyRecord | None:
        """Keep, as the key's answer, that its first request was cut off: every retry gets
        it at once instead of waiting out the wait, and none runs the work again (its tools
        may have acted)."""
        body = json_codec.dumps(
            error_envelope(
                422,
                f"The first request with this Idempotency-Key was cut off (its server stopped) "
                f"and never answered; its run {run_id} ended without an answer. Check what it "
                "did, then send a new key to try again.",
                code="idempotency_key_interrupted",
            )
        )
        await store.finish(
            claim.owner,
            claim.key,
            status_code=422,
            content_type="application/json",
            body=body,
            life=life,  # unless its holder answered meanwhile
        )
        found = await store.get(claim.owner, claim.key)
        return found if found is not None and found.state == "done" else None


class _Answer:
    """An answer being sent: kept as it goes, followed by retries."""

    __slots__ = ("_changed", "chunks", "content_type", "finished", "run_id", "start")

    def __init__(self) -> None:
        self.start: Message | None = None
        self.chunks: list[bytes] = []
        self.run_id: str | None = None
        self.content_type: str | None = None
        self.finished = False
        self._changed = asyncio.Event()

    @property
    def status(self) -> int | None:
        return None if self.start is None else int(self.start["status"])

    @property
    def did_work(self) -> bool:
        return _did_work(self.status, self.run_id)

    def add(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
            for name, value in message.get("headers", ()):
                if name == RUN_ID_HEADER:
                    self.run_id = value.decode("latin-1")
                elif name == b"content-type":
                    self.content_type = value.decode("latin-1")
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            if chunk:
                self.chunks.append(chunk)
            if not message.get("more_body", False):
                self.finished = True
        self._changed.set()
        self._changed = asyncio.Event()

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._changed.set()

    async def follow(self) -> AsyncIterator[Message]:
        """The answer's messages from its start: those sent already, then the rest as sent."""
        sent = 0
        started = False
        while True:
            changed = self._changed
            if not started and self.start is not None:
                started = True
                headers = [*self.start.get("headers", ()), REPLAYED]
                yield {
                    "type": "http.response.start",
                    "status": self.start["status"],
                    "headers": headers,
                }
            while started and sent < len(self.chunks):
                sent += 1
                yield {
                    "type": "http.response.body",
                    "body": self.chunks[sent - 1],
                    "more_body": True,
                }
            if self.finished:
                break
            await changed.wait()
        if not started:  # the first request crashed before answering: the retry may retry
            for message in _refusal(
                409,
                "The first request with this Idempotency-Key failed before it answered; retry.",
                "idempotency_key_in_use",
            ):
                yield message
            return
        yield {"type": "http.response.body", "body": b"", "more_body": False}


def _did_work(status: int | None, run_id: str | None) -> bool:
    """Whether an answer is the request's outcome, not a refusal before any work (a 429, a 409
    or a 5xx before a run started, or no answer at all): only then is it kept."""
    if status == 429:  # a run's too: one refused for its rate before anything acted
        return False
    if run_id is not None:
        return True
    return status is not None and not (status in (409, 429) or status >= 500)


async def _unless_gone(waiting: Awaitable[T | None], receive: Receive | None) -> T | None:
    """``waiting``'s row, or None as soon as the client goes away (nobody to answer)."""
    if receive is None:
        return await waiting
    task = asyncio.ensure_future(waiting)

    async def until_gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    gone = asyncio.ensure_future(until_gone())
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not task.done():
        task.cancel()
        return None
    return task.result()


def _response_of(messages: list[Message]) -> Response:
    start = next(m for m in messages if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    response = Response(body, status_code=start["status"])
    response.raw_headers = [
        (name, value) for name, value in start["headers"] if name != b"content-length"
    ] + [(b"content-length", str(len(body)).encode())]
    return response


async def _replay(held: IdempotencyRecord, send: Send) -> None:
    if not held.body and held.status_code is not None and held.status_code < 300:
        await _refuse(
            send,
            409,
            "The answer to the first request with this Idempotency-Key was too long to keep"
            + (f"; read its run {held.run_id} instead." if held.run_id else "."),
            "idempotency_answer_not_kept",
        )
        return
    body = held.body or b""
    headers = [(b"content-length", str(len(body)).encode()), REPLAYED]
    if held.content_type:
        headers.append((b"content-type", held.content_type.encode("latin-1")))
    if held.headers:
        headers.extend(
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in json_codec.loads(held.headers)
        )
    elif held.run_id:  # kept before answers kept their headers
        headers.append((RUN_ID_HEADER, held.run_id.encode("latin-1")))
    await send(
        {"type": "http.response.start", "status": held.status_code or 200, "headers": headers}
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _kept_headers(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The headers of an answer a replay of it carries again, as kept with its key."""
    kept = [
        [name.decode("latin-1"), value.decode("latin-1")]
        for name, value in headers
        if name.lower().startswith(KEPT_HEADERS_PREFIX)
    ]
    return json_codec.dumps_text(kept) if kept else None


def _refusal(status: int, message: str, code: str) -> list[Message]:
    body = json_codec.dumps(error_envelope(status, message, param="Idempotency-Key", code=code))
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return [
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": body, "more_body": False},
    ]


async def _refuse(send: Send, status: int, message: str, code: str) -> None:
    for part in _refusal(status, message, code):
        await send(part)


async def _quietly(step: Awaitable[object]) -> None:
    """A bookkeeping write whose failure must not fail the answer (the key then simply
    expires, or stays claimed: a retry waits and is told to retry)."""
    try:
        await step
    except Exception:
        log.exception("keeping an idempotency key's answer failed")
