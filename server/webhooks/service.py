"""Which events go where: a run observer turns the endings of runs (``POST /v1/runs``) and of
background responses, and runs' approval requests, into deliveries kept in the store; the
dispatcher (:mod:`server.webhooks.delivery`) sends them.

The observer costs nothing when no webhook could apply: no endpoint configured and no run
with a webhook of its own is one comparison per event.

A run's ending is not told when another replica took the run over (it told of it already);
finding out costs a flush of the write queue and a read of the run's row, so it is only done
for a run during which this replica lost its lease (``lease_losses`` grew): no other replica
takes over the runs of one that kept its lease, and a server without replicas has none.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hermes_core.events import (
    AgentEvent,
    ApprovalRequested,
    ExitReason,
    InterruptSource,
    RunFinished,
    RunStarted,
)
from hermes_core.ids import token_hex
from hermes_core.persistence import RunRecord, Store
from hermes_core.persistence.webhooks import Delivery
from hermes_core.tools.web.guard import AddressPolicy
from server.runs.manager import STATUS_OF_EXIT, RunInfo
from server.runs.observers import observes
from server.webhooks.delivery import DeliverySettings, Dispatcher
from server.webhooks.events import RESPONSE_EVENTS

log = logging.getLogger("hermes.webhooks")

RUNS_ENDPOINT = "runs"
"""The endpoint of runs started by ``POST /v1/runs``: the runs ``run.*`` events are about."""

_RESPONSE_EVENT = {
    ExitReason.COMPLETED: "response.completed",
    ExitReason.AWAITING_CLIENT_TOOLS: "response.completed",
    ExitReason.AWAITING_APPROVAL: "response.completed",
    ExitReason.BUDGET_EXHAUSTED: "response.incomplete",
    ExitReason.TRUNCATED: "response.incomplete",
    ExitReason.INTERRUPTED: "response.cancelled",
    ExitReason.FAILED: "response.failed",
}
_RUN_EVENT = {
    ExitReason.COMPLETED: "run.completed",
    ExitReason.AWAITING_CLIENT_TOOLS: "run.completed",
    ExitReason.AWAITING_APPROVAL: "run.completed",
    ExitReason.BUDGET_EXHAUSTED: "run.completed",
    ExitReason.TRUNCATED: "run.completed",
    ExitReason.INTERRUPTED: "run.cancelled",
    ExitReason.FAILED: "run.failed",
}
"""A run that ended incomplete or awaiting an answer still completed its turn: the event's
``data.status`` says how."""


def _response_event(end: RunFinished) -> str:
    """The event of a background response that ended so: the Response's own status (see
    ``ResponsesView._settle``). An answer the upstream's content filter stopped failed the
    run, but its Response is ``incomplete`` (``content_filter``), and so is its event; one
    its server stopped (a drain's end) was cancelled by no client: it is ``failed``."""
    if end.content_filtered:
        return "response.incomplete"
    if end.interrupt_source is InterruptSource.SHUTDOWN:
        return "response.failed"
    return _RESPONSE_EVENT[end.exit_reason]


@dataclass(frozen=True, slots=True)
class WebhookTarget:
    """A configured endpoint (``webhooks:`` in the file)."""

    url: str
    secret: str
    events: frozenset[str]

    def __repr__(self) -> str:  # never the secret, in a log or a traceback
        return f"WebhookTarget(url={self.url!r}, events={sorted(self.events)!r})"


@dataclass(frozen=True, slots=True)
class RequestWebhook:
    """A run's own endpoint (``webhook`` on ``POST /v1/runs``): every run event goes there."""

    url: str
    secret: str

    def __repr__(self) -> str:
        return f"RequestWebhook(url={self.url!r})"


class Webhooks:
    """The webhooks of one server: its configured endpoints (replaced by a reload), the
    runs' own ones, the observer and the dispatcher."""

    def __init__(
        self, targets: Sequence[WebhookTarget] = (), settings: DeliverySettings | None = None
    ) -> None:
        self.targets = tuple(targets)
        self.settings = settings or DeliverySettings()
        self._requested: dict[str, RequestWebhook] = {}
        self._store: Store | None = None
        self._dispatcher: Dispatcher | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.lease_losses: Callable[[], int] | None = None
        """How many times this replica lost its lease (``Cluster.lease_losses``); None: a
        server without replicas, whose runs no one else takes over."""
        self._losses_at_start: dict[str, int] = {}
        """``lease_losses()`` when each run followed here started."""

    @property
    def enabled(self) -> bool:
        """Whether deliveries can be kept (there is a database)."""
        return self._store is not None

    def open(self, store: Store, *, instance: str, policy: Callable[[], AddressPolicy]) -> None:
        """Start delivering (this replica's share of every replica's deliveries); ``policy``:
        where webhooks may go, as it stands at each attempt (a reload may change it)."""
        self._store = store
        self._dispatcher = Dispatcher(
            store.webhooks,
            instance=instance,
            secret_of=self._secret_of,
            policy=policy,
            settings=self.settings,
        )
        self._dispatcher.start()

    async def close(self) -> None:
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        if self._dispatcher is not None:
            await self._dispatcher.close()

    def requested(self, run_id: str, hook: RequestWebhook) -> None:
        """Run ``run_id`` (about to start) has a webhook of its own."""
        self._requested[run_id] = hook

    # --- the observer -------------------------------------------------------------------------

    @observes(RunStarted, RunFinished, ApprovalRequested)
    def observe(self, info: RunInfo, event: AgentEvent) -> None:
        if not self.targets and not self._requested:
            if self._losses_at_start:  # webhooks removed by a reload while runs went on
                self._losses_at_start.pop(info.id, None)
            return
        if isinstance(event, RunStarted):
            if self.lease_losses is not None:
                self._losses_at_start[info.id] = self.lease_losses()
        elif isinstance(event, RunFinished):
            own = self._requested.pop(info.id, None)
            suspect = self._lost_lease_since(self._losses_at_start.pop(info.id, 0))
            if info.endpoint == RUNS_ENDPOINT:
                kind = _RUN_EVENT[event.exit_reason]
                data = {
                    "id": info.id,
                    "object": "hermes.run",
                    "status": STATUS_OF_EXIT[event.exit_reason].value,
                }
                self._spawn(self._run_ended(info, event, kind, data, own, suspect))
            elif info.endpoint == "responses" and info.completion_id:
                kind = _response_event(event)
                if any(kind in target.events for target in self.targets):
                    self._spawn(self._background_response(info, event, kind, suspect))
        elif isinstance(event, ApprovalRequested) and info.endpoint == RUNS_ENDPOINT:
            data = {"id": event.approval_id, "object": "hermes.approval", "run_id": info.id}
            own = self._requested.get(info.id)
            self._spawn(self._emit(info.owner, info.id, "approval.requested", data, own))

    async def _run_ended(
        self,
        info: RunInfo,
        event: RunFinished,
        kind: str,
        data: Mapping[str, object],
        own: RequestWebhook | None,
        suspect: bool,
    ) -> None:
        if not (suspect and await self._taken_over(info, event)):
            await self._emit(info.owner, info.id, kind, data, own)

    async def _background_response(
        self, info: RunInfo, event: RunFinished, kind: str, suspect: bool
    ) -> None:
        if not (suspect and await self._taken_over(info, event)):
            await self._response_ended(info.owner, info.id, info.completion_id, kind)

    def _lost_lease_since(self, losses_at_start: int) -> bool:
        """Whether this replica lost its lease since a run started (when it had lost it
        ``losses_at_start`` times; 0 for a run whose start was not seen): only then can the
        run have been taken over by another replica."""
        return self.lease_losses is not None and self.lease_losses() != losses_at_start

    async def _taken_over(self, info: RunInfo, event: RunFinished) -> bool:
        """Whether another replica closed the run before this one ended it: this replica was
        frozen (or cut from Redis) past its lease, the other's crash recovery declared the run
        interrupted and told of it (:meth:`recovered`), and the run's row fenced off the
        ending this replica wrote late. Its ending is then not told a second time (a
        ``run.cancelled`` after the ``run.failed``). When the row cannot be read, it is told:
        an event twice is better than none. Asked only for a run during which this replica
        lost its lease (:meth:`_lost_lease_since`)."""
        store = self._store
        if store is None:
            return False
        try:
            await store.db.writer.flush()  # the run's ending, queued by the journal before
            taken = await store.runs.taken_over(info.owner, info.id)
        except Exception:
            log.warning("reading run %s's row failed: telling of its ending", info.id)
            return False
        if taken:
            log.warning(
                "run %s ended here after another replica took it over: its %s event is not "
                "sent (the other replica told of its ending)",
                info.id,
                event.exit_reason.value,
            )
        return taken

    async def _response_ended(self, owner: str, run_id: str, completion_id: str, kind: str) -> None:
        """OpenAI tells of background responses only: a response another client waited for
        (or streamed) is not announced."""
        if self._store is None:
            return
        await self._store.db.writer.flush()  # the response is saved through the write queue
        stored = await self._store.responses.get(owner, completion_id)
        if stored is None or stored.body.get("background") is not True:
            return
        await self._emit(owner, run_id, kind, {"id": completion_id}, None)

    async def recovered(self, runs: Sequence[RunRecord]) -> None:
        """Tell of runs a replica left unfinished when it died (or this one, at its last
        life), now closed by crash recovery: their clients went away trusting a webhook to
        say how they ended. A run of ``POST /v1/runs`` is ``run.failed`` with status
        ``interrupted`` (nobody cancelled it), a background response ``response.failed``."""
        store = self._store
        if store is None or not runs:
            return
        for run in runs:
            try:
                if run.endpoint == RUNS_ENDPOINT:
                    kept = (await store.webhooks.api_runs(run.owner, [run.id])).get(run.id)
                    own = (
                        RequestWebhook(kept.webhook_url, kept.webhook_secret)
                        if kept is not None and kept.webhook_url and kept.webhook_secret
                        else None
                    )
                    if own is None and not self.targets:
                        continue
                    data = {
                        "id": run.id,
                        "object": "hermes.run",
                        "status": "interrupted",
                        "error": "The server running this run stopped.",
                    }
                    await self._emit(run.owner, run.id, "run.failed", data, own)
                elif run.endpoint == "responses" and run.completion_id and self.targets:
                    kind = "response.failed"
                    if any(kind in target.events for target in self.targets):
                        await self._response_ended(run.owner, run.id, run.completion_id, kind)
            except Exception:  # one run's event must not keep the others' from being told
                log.exception("telling of recovered run %s failed", run.id)

    async def _emit(
        self,
        owner: str,
        run_id: str,
        kind: str,
        data: Mapping[str, object],
        own: RequestWebhook | None,
    ) -> None:
        store = self._store
        if store is None:
            return
        now = time.time()
        event_id = "evt_" + token_hex(12)
        body = json.dumps(
            {
                "id": event_id,
                "object": "event",
                "type": kind,
                "created_at": int(now),
                "data": data,
            },
            separators=(",", ":"),
        )
        destinations: list[tuple[str, str, str | None]] = [
            (target.url, "config", None) for target in self.targets if kind in target.events
        ]
        if own is not None and kind not in RESPONSE_EVENTS:
            destinations.append((own.url, "request", own.secret))
        deliveries = [
            Delivery(
                id="wh_" + token_hex(12),
                owner=owner,
                run_id=run_id,
                event_id=event_id,
                event_type=kind,
                body=body,
                url=url,
                source=source,
                secret=secret,
                status="pending",
                attempts=0,
                next_attempt_at=now,
                last_status_code=None,
                last_error=None,
                created_at=now,
                delivered_at=None,
            )
            for url, source, secret in destinations
        ]
        if not deliveries:
            return
        await store.webhooks.add(deliveries)
        if self._dispatcher is not None:
            self._dispatcher.wake()

    def _secret_of(self, delivery: Delivery) -> str | None:
        if delivery.source == "request":
            return delivery.secret
        return next(
            (
                target.secret
                for target in self.targets
                if target.url == delivery.url and delivery.event_type in target.events
            ),
            None,
        )

    def _spawn(self, work: object) -> None:
        assert asyncio.iscoroutine(work)
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("keeping a webhook event failed", exc_info=task.exception())
