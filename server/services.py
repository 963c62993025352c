"""What the HTTP layer serves: agent profiles, the run manager, keys and limits — built once
by ``create_app`` and shared by every route through ``app.state.services``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hermes_core.agent import Agent
from hermes_core.events import AgentEvent, InterruptSource, RunFinished
from hermes_core.persistence import Store
from hermes_core.persistence.runs import LIVE_STATUSES
from hermes_core.providers.retry import PROCESS_COOLDOWNS
from hermes_core.skills.library import SkillLibrary
from hermes_core.tools.egress import close_egress_proxies
from hermes_core.tools.web.guard import AddressPolicy
from server.budgets.admission import Budgets
from server.errors import RedisUnavailable, RunLimitExceeded
from server.files.links import FileLinks
from server.files.uploads import FileLimits, FileVault
from server.files.workspace_changes import WorkspaceWatch
from server.files.workspaces import conversation_workspace
from server.http.auth import KeyRing
from server.http.idempotency import Idempotency
from server.metrics import Metrics
from server.profiles import Profile, Stores
from server.protocol.remote_mcp import CONNECT_SECONDS
from server.retention.policy import RetentionPolicy
from server.retention.sweeper import Sweeper
from server.runs.approvals import ApprovalDesk, close_questions_of
from server.runs.manager import Run, RunInfo, RunManager, RunStatus, end_user_limit_message
from server.runs.observers import observes
from server.sessions.service import SessionService, SessionSettings
from server.skills.extraction import Learner, SkillExtractor
from server.skills.library import StoredSkills
from server.usage.ledger import UsageLedger
from server.webhooks.service import Webhooks

if TYPE_CHECKING:
    from server.replicas.cluster import Cluster

log = logging.getLogger("hermes.services")


class Background(Protocol):
    """Work a replica does on its own once open (firing schedules), stopped at close."""

    async def close(self) -> None: ...


@dataclass(slots=True, kw_only=True)
class Services:
    profiles: Sequence[Profile]
    keyring: KeyRing = field(default_factory=KeyRing)
    runs: RunManager = field(default_factory=RunManager)
    stores: Stores = field(default_factory=Stores)
    metrics: Metrics = field(default_factory=Metrics)
    """Prometheus metrics; ``create_app`` registers their observer with ``runs``."""
    stop_on_disconnect: bool = True
    keepalive_seconds: float = 15.0
    startup_hooks: list[Callable[[], None]] = field(default_factory=list)
    """Called once the services are open, on the event loop (e.g. the config reloader)."""
    drain_seconds: float = 30.0
    """On SIGTERM, how long runs in progress may go on before the shutdown cuts them."""
    address_policy: AddressPolicy = field(default_factory=AddressPolicy)
    remote_mcp_connect_seconds: float = CONNECT_SECONDS
    """How long a Responses request's own ``mcp`` server may take to answer
    (``web.mcp_connect_timeout_seconds``) before the request is a 424."""
    """Where tools that reach the network may go (``web.allow``): a client's MCP server URL
    is held to it too."""
    """Quiet time after which a stream gets a ``: keep-alive`` comment (tools running)."""
    max_body_bytes: int = 4 * 1024 * 1024
    max_crons_per_key: int = 100
    """Schedules one key may keep (``limits.crons_per_key``)."""
    database_url: str | None = None
    """Where durable state lives; None keeps everything in memory (library use, some tests)."""
    workspaces_dir: Path | None = None
    """Where conversations' working directories live; None: runs have no workspace (file,
    shell and code tools then refuse to act)."""
    files_dir: Path | None = None
    """Where uploaded files' bytes live; None: no Files API (nor without a database)."""
    file_links: FileLinks = field(default_factory=FileLinks)
    """How answers link to workspace files (signed links, ``server.public_url``)."""
    file_limits: FileLimits = field(
        default_factory=lambda: FileLimits(
            max_file_bytes=100 * 1024 * 1024, quota_bytes=1024 * 1024 * 1024, max_files=1000
        )
    )
    instance: str | None = None
    """This server's name among the processes sharing the database
    (see server/replicas/instance.py); None: the host name."""
    migrate_on_start: bool | None = None
    """Apply schema migrations at start; None: only on SQLite (PostgreSQL schemas are
    upgraded deliberately, with ``hermes-server db upgrade``)."""
    session_settings: SessionSettings = field(default_factory=SessionSettings)
    approvals: ApprovalDesk = field(default_factory=ApprovalDesk)
    responses_max_count: int | None = None
    responses_max_age_seconds: float | None = None
    """Stored responses are pruned beyond these (at start, then every ``PRUNE_SECONDS``)."""
    cluster: Cluster | None = None
    """The other replicas (``server.redis_url``): cross-replica stops and dead-replica
    recovery. None: this process is alone."""
    store: Store | None = None
    idempotency: Idempotency = field(default_factory=Idempotency)
    """``Idempotency-Key`` requests, answered once (kept in ``store`` once it is open)."""
    files: FileVault | None = None
    """Uploaded files; set by :meth:`open` when there is a database and a ``files_dir``."""
    skills: SkillLibrary | None = None
    extractor: SkillExtractor | None = None
    """Reads the runs of learning profiles for draft skills (see :meth:`watch_learning`)."""
    """The keys' own skills (``/v1/skills``, the agent's); set by :meth:`open` when there is
    a database."""
    sessions: SessionService | None = None
    ledger: UsageLedger | None = None
    """The usage ledger; set by :meth:`open` when there is a database (``server/usage/``)."""
    budgets: Budgets = field(default_factory=Budgets)
    """Keys' and end users' budgets, held as each run starts (``server/budgets/``)."""
    webhooks: Webhooks = field(default_factory=Webhooks)
    """Where events of runs and background responses are sent (delivering once open)."""
    schedules: Callable[[Services, Store], Background | None] = lambda _services, _store: None
    """Starts firing the schedules (``/v1/crons``) once the store is open; set by
    ``create_app``, since the scheduler starts runs as the routes do (above this module)."""
    scheduler: Background | None = None
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    """How long sessions, runs, files and approvals are kept (reloadable)."""
    sweeper: Sweeper | None = None
    """Deletes what is past ``retention`` (one replica at a time); set by :meth:`open`."""
    _pruning: asyncio.Task[None] | None = None
    _releasing: set[asyncio.Task[None]] = field(default_factory=set)
    """Named conversations and transcripts; set by :meth:`open` when there is a database."""

    async def open(self) -> None:
        """Start connecting MCP servers; connect the database, switch the agents' stores to
        it, and close what a previous life of this instance left open (runs marked
        ``interrupted``)."""
        for profile in self.profiles:
            if profile.mcp is not None:
                profile.mcp.start()
        # The file-link secret is made on the first start, not by the first answer's link.
        await asyncio.to_thread(self.file_links.signer)
        if self.database_url is None or self.store is not None:
            return
        db_url = self.database_url
        migrate = self.migrate_on_start
        if migrate is None:
            migrate = db_url.startswith("sqlite")
        store = await Store.open(
            db_url,
            migrate=migrate,
            instance=self.instance,
            responses_max_count=self.responses_max_count,
            responses_max_age_seconds=self.responses_max_age_seconds,
        )
        self.store = store
        self.idempotency.store = store.idempotency
        self.idempotency.runs = store.runs
        self.stores = Stores(memory=store.memory, todos=store.todos, sessions=store.search)
        self.sessions = SessionService(store, self.session_settings)
        self.runs.observers.append(self.sessions.journal)
        self.ledger = UsageLedger(store.usage)
        self.runs.observers.append(self.ledger.observe)
        self.budgets.store = store.usage  # budgets read what the ledger recorded
        self.runs.settle = store.db.writer.flush
        if self.files_dir is not None:
            self.files = FileVault(self.files_dir, store, self.file_limits)
        data_dir = self.file_links.settings.data_dir
        skills_cache = data_dir / "skills-cache" if data_dir is not None else None
        self.skills = StoredSkills(store.skills, skills_cache)
        self.watch_learning()
        self.webhooks.open(store, instance=store.runs.instance, policy=lambda: self.address_policy)
        self.runs.observers.append(self.webhooks.observe)
        await self._join_replicas()
        recovered = await self.sessions.recover()
        if recovered:
            log.warning("marked %d run(s) of a previous start interrupted", len(recovered))
            await close_questions_of(store, recovered)
            await self.webhooks.recovered(recovered)
        if self.cluster is not None:
            sessions = self.sessions
            webhooks = self.webhooks
            cluster = self.cluster

            async def recover(instance: str) -> int:
                runs = await sessions.recover(instance)
                await close_questions_of(store, runs)
                await webhooks.recovered(runs)
                for run in runs:
                    # Streams resumed elsewhere must end too, and the key's limit let go.
                    await cluster.close_log(run.id, "The replica running this run stopped.")
                    await cluster.release(run.owner, run.id, run.end_user)
                return len(runs)

            await self.cluster.start(
                on_stop=self._stop_requested,
                recover=recover,
                live_instances=self.sessions.live_instances,
                live_runs=self.runs.live_run_keys,
                cooldowns=PROCESS_COOLDOWNS,
                lapsed=self.runs.lost_lease,
                on_steer=self._steer_requested,
                on_forget=self.runs.forget,
            )
            for run in recovered:  # this replica's previous life, as another would recover it
                await cluster.close_log(run.id, "The replica running this run stopped.")
                await cluster.release(run.owner, run.id, run.end_user)
            self.runs.observers.append(self._release_reservation)
            self.runs.observers.append(lambda _info, event: cluster.record(event))
        responses = (
            self.responses_max_count is not None or self.responses_max_age_seconds is not None
        )
        if responses:
            await store.responses.prune()
        self._pruning = asyncio.create_task(
            _prune_forever(store, responses=responses), name="hermes-prune"
        )
        self.scheduler = self.schedules(self, store)
        self.sweeper = Sweeper(
            store,
            lambda: self.retention,
            instance=store.runs.instance,
            workspaces_dir=self.workspaces_dir,
            file_path=self.files.path if self.files is not None else None,
            skills_cache=skills_cache,
        )
        self.sweeper.start()

    async def _join_replicas(self) -> None:
        """With replicas, take this replica's lease before recovering its previous life's runs
        (a live replica of the same name keeps its runs: ``InstanceTaken``), and have webhooks
        watch the lease: only once it was lost can a run of this replica's have been taken
        over."""
        if self.cluster is not None:
            await self.cluster.claim()
            self.webhooks.lease_losses = self.cluster.lease_losses

    def workspace(self, owner: str, conversation: str) -> Path | None:
        """The working directory of ``owner``'s conversation ``conversation`` (a session
        name), or None when this server keeps no workspaces."""
        if self.workspaces_dir is None:
            return None
        return conversation_workspace(self.workspaces_dir, owner, conversation)

    def profile(self, model: str) -> Profile | None:
        return next((p for p in self.profiles if p.id == model), None)

    def watch_learning(self) -> None:
        """Read runs for draft skills once a profile learns (called at open, and after a
        reload, which may have turned learning on): only then does every run's event pass
        the extractor too."""
        if self.skills is None or self.extractor is not None:
            return
        if not any(p.learn_after is not None and p.skills is not None for p in self.profiles):
            return
        metrics = self.metrics
        self.extractor = SkillExtractor(
            self.skills,
            self._learner,
            on_draft=lambda profile, _entry: metrics.skills_created.labels(
                profile, "extracted"
            ).inc(),
            on_call=self.ledger.record_call if self.ledger is not None else None,
        )
        self.runs.observers.append(self.extractor.observe)

    def _learner(self, model: str) -> Learner | None:
        profile = self.profile(model)
        if profile is None or profile.learn_after is None or profile.skills is None:
            return None
        return Learner(
            provider=profile.side_task_provider,
            min_tool_calls=profile.learn_after,
            prices=profile.config.prices,
        )

    async def reserve_run(
        self, owner: str, run_id: str, alias: str = "", end_user: str | None = None
    ) -> None:
        """Count a run about to start against ``owner``'s limit on every replica, and its
        ``end_user``'s (``limits.runs_per_user``) when it names one (this replica's own count
        is checked by ``RunManager.admit``); 429 beyond either, 503 while Redis is out of
        reach. ``alias``: its completion's id, by which a stop finds it too."""
        if self.cluster is None:
            return
        limit = self.runs.max_runs_per_owner
        refused: str | None
        with redis_needed():
            if end_user is None:
                reserved = await self.cluster.reserve(owner, run_id, limit, alias)
                refused = None if reserved else "key"
            else:
                user_limit = self.runs.max_runs_per_user
                refused = await self.cluster.reserve_for_user(
                    owner, end_user, run_id, limit=limit, user_limit=user_limit, alias=alias
                )
                if refused == "user":
                    raise RunLimitExceeded(end_user_limit_message(user_limit), retry_after=5)
        if refused is not None:
            raise RunLimitExceeded(
                f"This API key already has {limit} runs in progress.", retry_after=5
            )

    async def release_run(self, owner: str, run_id: str, end_user: str | None = None) -> None:
        """Let go of the reservation :meth:`reserve_run` made for a run that did not start
        after all (refused by this replica: draining, or at its own limit). Kept, it would
        count against ``owner``'s limit on every replica until it lapsed, a lease later."""
        if self.cluster is not None:
            await self.cluster.release(owner, run_id, end_user)

    @observes(RunFinished)
    def _release_reservation(self, info: RunInfo, event: AgentEvent) -> None:
        if isinstance(event, RunFinished) and self.cluster is not None:
            task = asyncio.create_task(self.cluster.release(info.owner, info.id, info.end_user))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)

    def _stop_requested(self, run_id: str, owner: str, source: str) -> None:
        """Another replica was asked to stop a run: stop it if it is one of ours."""
        run = self.runs.get(run_id, owner=owner)
        if run is None or run.status.finished:
            return
        try:
            reason = InterruptSource(source)
        except ValueError:
            reason = InterruptSource.STOP_API
        self.runs.stop(run, reason)

    async def stop_anywhere(self, run_id: str, owner: str, source: InterruptSource) -> str | None:
        """Stop ``owner``'s live run (by run or completion id) on whichever replica runs it;
        its run id, or None when no replica runs it (it ended, or never was)."""
        run = self.runs.get(run_id, owner=owner)
        if run is not None:
            if run.status.finished:
                return None
            self.runs.stop(run, source)
            return run.id
        if self.cluster is None or self.store is None:
            return None
        record = await self.store.runs.get(owner, run_id)
        with redis_needed():
            if record is None:
                # Its row may not be written yet (in its first milliseconds): its reservation is.
                found = await self.cluster.reserved_run(owner, run_id)
                if found is not None:
                    await self.cluster.request_stop(found, owner, source.value)
                return found
            if record.status not in LIVE_STATUSES:
                return None
            await self.cluster.request_stop(record.id, owner, source.value)
            return record.id

    async def forget_runs(self, run_ids: list[str]) -> None:
        """Erased runs: this replica drops their events, and with replicas every other one
        does too (their Redis logs go)."""
        if not run_ids:
            return
        self.runs.forget(run_ids)
        if self.cluster is not None:
            await self.cluster.forget_runs(run_ids)

    def _steer_requested(self, run_id: str, owner: str, text: str) -> bool | None:
        """Another replica was asked to steer a run: steer it if it is one of ours."""
        run = self.runs.get(run_id, owner=owner)
        if run is None:
            return None
        return steer_run(run, text)

    async def steer_anywhere(self, run_id: str, owner: str, text: str) -> bool | None:
        """Give ``owner``'s live run ``run_id`` the message ``text`` before its next model call,
        on whichever replica runs it: whether the run took it (False: it has made its last
        model call), or None when no replica runs it."""
        run = self.runs.get(run_id, owner=owner)
        if run is not None:
            return steer_run(run, text)
        if self.cluster is None or self.store is None:
            return None
        record = await self.store.runs.get(owner, run_id)
        with redis_needed():
            if record is None:
                found = await self.cluster.reserved_run(owner, run_id)  # in its first moments
                if found is None:
                    return None
                run_id = found
            elif record.status not in LIVE_STATUSES:
                return None
            else:
                run_id = record.id
            return await self.cluster.request_steer(run_id, owner, text)

    async def close(self) -> None:
        """Release upstream connections (profiles may share providers) and the database."""
        await close_egress_proxies()  # sandboxes' network: started by their first command
        if self.cluster is not None:
            await self.cluster.close()
        if self.extractor is not None:
            await self.extractor.close()
        if self.scheduler is not None:
            await self.scheduler.close()
        if self.sweeper is not None:
            await self.sweeper.close()
        await self.budgets.close()  # its reads of the ledger, before the store closes
        await self.webhooks.close()
        if self._pruning is not None:
            self._pruning.cancel()
            await asyncio.gather(self._pruning, return_exceptions=True)
        if self.store is not None:
            await self.store.close()
        for profile in self.profiles:
            if profile.mcp is not None:
                await profile.mcp.stop()
        closed: set[int] = set()
        for profile in self.profiles:
            for client in profile.clients:
                if id(client) not in closed:
                    closed.add(id(client))
                    await client.aclose()


PRUNE_SECONDS = 600.0


@contextlib.contextmanager
def redis_needed() -> Iterator[None]:
    """Redis out of reach inside (refused, cut, timed out; this replica's link to it closed)
    is a :class:`RedisUnavailable`, a 503 to retry soon: the client's request was fine, and
    Redis is normally back within seconds. Any other error goes on as it was."""
    try:
        yield
    except Exception as error:
        if _unreachable(error):
            raise RedisUnavailable() from error
        raise


def _unreachable(error: BaseException) -> bool:
    if isinstance(error, OSError | TimeoutError):  # ConnectionError is an OSError
        return True
    # redis-py's own ConnectionError and TimeoutError are not the built-in ones. Looked up,
    # not imported: only replicas load redis, and only they get here.
    exceptions = sys.modules.get("redis.exceptions")
    return exceptions is not None and isinstance(
        error, exceptions.ConnectionError | exceptions.TimeoutError
    )


def steer_run(run: Run, text: str) -> bool | None:
    """Steer one of this replica's runs (``Agent.steer``): whether it took ``text``; None when
    it is not an agent's run going on (ended, or a job that takes no messages)."""
    agent = run.agent
    while isinstance(agent, WorkspaceWatch):
        agent = agent.inner
    if run.status.finished or run.status is RunStatus.STOPPING or not isinstance(agent, Agent):
        return None
    return agent.steer(text)


async def _prune_forever(store: Store, *, responses: bool) -> None:
    """Keep stored responses within their retention limits (when they have any), and forget
    idempotency keys past their 24 hours."""
    while True:
        await asyncio.sleep(PRUNE_SECONDS)
        if responses:
            try:
                removed = await store.responses.prune()
            except Exception:  # a failed prune must not stop the next one
                log.exception("pruning stored responses failed")
            else:
                if removed:
                    log.info("pruned %d stored response(s)", removed)
        try:
            await store.idempotency.prune(time.time())
        except Exception:
            log.exception("pruning idempotency keys failed")
