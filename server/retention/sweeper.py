"""The retention sweeper: deletes what is older than the configuration keeps.

Every replica runs one; it sweeps at start and then every :data:`SWEEP_SECONDS`, but only the
replica holding the ``retention`` lease (``persistence/leases.py``) sweeps at a time: the
lease is taken for :data:`LEASE_SECONDS` and renewed while the sweep works, so a replica that
dies mid-sweep loses it soon and the next one to try takes over. A replica that loses its
lease (it froze past it) stops at the next batch. Rows are deleted in bounded batches; files
(workspaces, uploads' bytes) are removed in worker threads, never on the event loop.

What goes, per sweep (docs/retention.md): sessions not updated for ``sessions_days`` (with
their transcripts, todos and approvals; a conversation's workspace once none of its sessions
is left; never a conversation whose run holds it), run records that ended ``runs_days`` ago
(with their ``api_runs`` rows and webhook deliveries), uploads ``files_days`` old (records and
bytes), approvals asked ``approvals_days`` ago; and, whatever the policy, uploads past their
own ``expires_at`` (``expires_after`` at upload: the client's, not the configuration's; its
owner stopped seeing it then). One log line says how many of each.

Every replica also forgets its own cached skill folders (``skills-cache/<skill id>``) of
skills that no longer exist (deleted, or erased with their end user): that cache is each
replica's, not on the shared volume.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path

from hermes_core.ids import token_hex
from hermes_core.persistence import FileRecord, Store
from hermes_core.persistence.retention import Counts, add_counts
from server.files.removal import remove_files, remove_tree, remove_workspace
from server.files.workspaces import conversation_workspace
from server.retention.policy import DAY, RetentionPolicy

log = logging.getLogger("hermes.retention")

LEASE = "retention"
SWEEP_SECONDS = 600.0
LEASE_SECONDS = 60.0
"""How long a sweep holds the lease between renewals (renewed every third of it)."""
_SKILL_ID = re.compile(r"skill_[0-9a-f]{32}")


class LeaseLost(Exception):
    """Another replica holds the sweep's lease now: this sweep must stop."""


class Sweeper:
    def __init__(
        self,
        store: Store,
        policy: Callable[[], RetentionPolicy],
        *,
        instance: str,
        workspaces_dir: Path | None = None,
        file_path: Callable[[FileRecord], Path] | None = None,
        skills_cache: Path | None = None,
        every_seconds: float = SWEEP_SECONDS,
        lease_seconds: float = LEASE_SECONDS,
    ) -> None:
        self.store = store
        self.policy = policy
        """The policy in force (read at each sweep: a configuration reload changes it)."""
        self.holder = f"{instance}:{token_hex(6)}"
        """This process's name in the lease (two processes may share an instance name)."""
        self.workspaces_dir = workspaces_dir
        self.file_path = file_path
        self.skills_cache = skills_cache
        self.every_seconds = every_seconds
        self.lease_seconds = lease_seconds
        self._one_at_a_time = asyncio.Lock()
        self._lost = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Sweep now (if this replica gets the lease), then every ``every_seconds``."""
        self._task = asyncio.create_task(self._forever(), name="hermes-retention")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:  # a failed sweep must not stop the next one
                log.exception("the retention sweep failed")
            try:
                await self.forget_cached_skills()
            except Exception:
                log.exception("forgetting cached skills failed")
            await asyncio.sleep(self.every_seconds)

    async def sweep(self, *, wait_seconds: float = 0.0) -> Counts | None:
        """One sweep now: what it deleted, by table (``workspaces``: directories); None when
        another replica held the lease for all of ``wait_seconds``. A policy that keeps
        everything still sweeps expired uploads."""
        policy = self.policy()
        async with self._one_at_a_time:
            deadline = time.monotonic() + wait_seconds
            while not await self.store.leases.take(LEASE, self.holder, seconds=self.lease_seconds):
                if time.monotonic() >= deadline:
                    return None
                await asyncio.sleep(min(0.5, max(deadline - time.monotonic(), 0.01)))
            self._lost = False
            renewing = asyncio.create_task(self._renew(), name="hermes-retention-lease")
            try:
                return await self._sweep(policy)
            finally:
                renewing.cancel()
                await asyncio.gather(renewing, return_exceptions=True)
                await self.store.leases.release(LEASE, self.holder)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            if not await self.store.leases.renew(LEASE, self.holder, seconds=self.lease_seconds):
                self._lost = True
                return

    def _check(self) -> None:
        if self._lost:
            raise LeaseLost("another replica took the retention lease")

    async def _sweep(self, policy: RetentionPolicy) -> Counts:
        started = time.monotonic()
        counts: Counts = {}
        try:
            if not policy.empty:
                await self._sweep_retention(policy, time.time(), counts)
            async with contextlib.aclosing(self.store.files.expire()) as expired_files:
                async for records in expired_files:
                    add_counts(counts, {"files": len(records)})
                    await self._remove_files(records)
                    self._check()
        except LeaseLost:
            log.warning("retention sweep stopped: another replica holds its lease now")
        took = time.monotonic() - started
        deleted = ", ".join(f"{count} {name}" for name, count in counts.items() if count)
        if deleted or not policy.empty:  # no line each sweep of a server that keeps everything
            log.info("retention sweep: deleted %s in %.1f s", deleted or "nothing", took)
        return counts

    async def _sweep_retention(self, policy: RetentionPolicy, now: float, counts: Counts) -> None:
        """Delete what ``policy`` says is past retention at ``now``, adding it to ``counts``."""
        retention = self.store.retention
        expired = retention.expire_sessions(
            policy.sessions.horizon(now), holder=f"retention_{token_hex(8)}"
        )
        async with contextlib.aclosing(expired) as batches:
            async for batch in batches:
                add_counts(counts, batch.counts)
                gone = [self._workspace(owner, name) for owner, name in batch.gone]
                removed = await asyncio.to_thread(_remove_workspaces, [p for p in gone if p])
                add_counts(counts, {"workspaces": removed})
                self._check()
        async with contextlib.aclosing(retention.expire_runs(policy.runs.horizon(now))) as runs:
            async for done in runs:
                add_counts(counts, done)
                self._check()
        approvals = retention.expire_approvals(policy.approvals.horizon(now), now=now)
        async with contextlib.aclosing(approvals) as batches_of_approvals:
            async for done in batches_of_approvals:
                add_counts(counts, done)
                self._check()
        if policy.files_days is not None:
            files = retention.expire_files(now - policy.files_days * DAY)
            async with contextlib.aclosing(files) as batches_of_files:
                async for records in batches_of_files:
                    add_counts(counts, {"files": len(records)})
                    await self._remove_files(records)
                    self._check()

    async def _remove_files(self, records: list[FileRecord]) -> None:
        """Remove the bytes of uploads whose records were deleted (in a worker thread)."""
        if self.file_path is not None:
            paths = [self.file_path(record) for record in records]
            await asyncio.to_thread(remove_files, paths)

    def _workspace(self, owner: str, conversation: str) -> Path | None:
        if self.workspaces_dir is None:
            return None
        return conversation_workspace(self.workspaces_dir, owner, conversation)

    async def forget_cached_skills(self, skill_ids: list[str] | None = None) -> int:
        """Remove this replica's cached folders of skills that no longer exist (of
        ``skill_ids`` only, when given); how many."""
        cache = self.skills_cache
        if cache is None:
            return 0
        cached = await asyncio.to_thread(_cached_skills, cache)
        if skill_ids is not None:
            cached = [skill for skill in cached if skill in set(skill_ids)]
        if not cached:
            return 0
        existing = await self.store.retention.existing_skills(cached)
        gone = [cache / skill for skill in cached if skill not in existing]
        return await asyncio.to_thread(_remove_trees, gone)


def _cached_skills(cache: Path) -> list[str]:
    try:
        return [entry.name for entry in cache.iterdir() if _SKILL_ID.fullmatch(entry.name)]
    except FileNotFoundError:
        return []


def _remove_trees(paths: list[Path]) -> int:
    return sum(1 for path in paths if remove_tree(path))


def _remove_workspaces(paths: list[Path]) -> int:
    return sum(1 for path in paths if remove_workspace(path))
