"""The retention sweeper without a server, on SQLite and PostgreSQL: one replica sweeps at a
time (the lease), a sweep deletes what the policy says; the policy comes from ``retention:``
and ``profiles[].retention`` field by field, and a configuration reload replaces it. Expired
uploads swept by two replicas at once lose their record and bytes once."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select, update

from hermes_core.persistence import FileRecord, Store
from hermes_core.persistence.sessions import SESSIONS
from server.bootstrap import build_profiles
from server.config import load_config
from server.files.uploads import FileLimits, FileVault
from server.process.reload import ConfigReloader
from server.retention.policy import DAY, RetentionPolicy, Rule, retention_policy
from server.retention.sweeper import LEASE, Sweeper
from server.services import Services
from tests.hermes_core.persistence.test_retention import end_user_rows

CONFIG = """\
server:
  api_keys: [{{principal: alice, key: sk-retention-0123456789}}]
providers:
  - {{name: real, model: gpt-x, base_url: "http://127.0.0.1:9/v1"}}
retention:
  sessions_days: {days}
  files_days: 10
profiles:
  - {{id: plain, providers: [real]}}
  - id: short
    providers: [real]
    retention: {{sessions_days: 2, runs_days: null}}
"""


UPLOAD_LIMITS = FileLimits(max_file_bytes=1024, quota_bytes=10 * 1024, max_files=10)


@pytest.fixture
async def replicas(database_url: str) -> AsyncIterator[tuple[Store, Store]]:
    """Two replicas' stores on one database."""
    first = await Store.open(database_url, instance="replica-a")
    second = await Store.open(database_url, instance="replica-b", migrate=False)
    yield first, second
    await first.close()
    await second.close()


def sweeper(store: Store, tmp_path: Path) -> Sweeper:
    policy = RetentionPolicy(sessions=Rule(days=30))
    return Sweeper(
        store, lambda: policy, instance=store.runs.instance, workspaces_dir=tmp_path / "ws"
    )


async def old_session(store: Store, name: str) -> None:
    session_id = store.sessions.create(owner="alice", profile="p", system_prompt="", name=name)
    await store.db.writer.flush()
    async with store.db.engine.begin() as conn:
        await conn.execute(
            update(SESSIONS)
            .where(SESSIONS.c.id == session_id)
            .values(updated_at=time.time() - 40 * DAY)
        )


async def names(store: Store) -> set[str]:
    async with store.db.engine.connect() as conn:
        return set((await conn.execute(select(SESSIONS.c.name))).scalars())


async def test_one_replica_sweeps_at_a_time(replicas: tuple[Store, Store], tmp_path: Path) -> None:
    first, second = replicas
    a, b = sweeper(first, tmp_path), sweeper(second, tmp_path)
    await old_session(first, "old")
    assert await first.leases.take(LEASE, a.holder, seconds=60)  # a sweep of A's goes on

    assert await b.sweep(wait_seconds=0.2) is None  # B waited, then gave up
    assert await names(first) == {"old"}

    await first.leases.release(LEASE, a.holder)
    assert await b.sweep() == {
        "sessions": 1,
        "messages": 0,
        "todos": 0,
        "approvals": 0,
        "workspaces": 0,
    }
    assert await names(first) == set()
    # B let the lease go once done: A sweeps next (nothing left).
    assert await a.sweep() == {}


async def test_a_policy_that_keeps_everything_sweeps_nothing(
    replicas: tuple[Store, Store], tmp_path: Path
) -> None:
    store = replicas[0]
    await old_session(store, "old")
    idle = Sweeper(store, RetentionPolicy, instance="replica-a")
    assert await idle.sweep() == {}
    assert await names(store) == {"old"}


def test_a_profiles_retention_overrides_the_top_level_one_field_by_field(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text(CONFIG.format(days=90))
    policy = retention_policy(load_config(path, {}))
    assert policy.sessions == Rule(days=90, by_profile={"short": 2})
    assert policy.runs == Rule(days=None, by_profile={"short": None})
    assert policy.approvals == Rule()
    assert policy.files_days == 10
    now = time.time()
    horizon = policy.sessions.horizon(now)
    assert horizon.default == pytest.approx(now - 90 * DAY)
    assert horizon.by_profile["short"] == pytest.approx(now - 2 * DAY)


async def test_a_reload_replaces_the_retention_in_force(tmp_path: Path) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text(CONFIG.format(days=90))
    config = load_config(path, {})
    services = Services(profiles=build_profiles(config), retention=retention_policy(config))
    reloader = ConfigReloader(services, config, path, {})
    assert services.retention.sessions.days == 90

    path.write_text(CONFIG.format(days=7))
    assert await reloader.reload()

    assert services.retention.sessions.days == 7
    await services.close()


async def test_a_replica_forgets_its_cached_folders_of_skills_that_are_gone(
    replicas: tuple[Store, Store], tmp_path: Path
) -> None:
    store = replicas[0]
    kept = (await end_user_rows(store, "alice", "u1", at=time.time()))["skill"]
    gone = "skill_" + "ab" * 16
    cache = tmp_path / "skills-cache"
    for name in (kept, gone, "skill_ab.partial"):
        (cache / name / "1").mkdir(parents=True)
        (cache / name / "1" / "SKILL.md").write_text("---\nname: x\n---\n")
    cleaner = Sweeper(store, RetentionPolicy, instance="replica-a", skills_cache=cache)

    assert await cleaner.forget_cached_skills() == 1

    assert sorted(path.name for path in cache.iterdir()) == sorted([kept, "skill_ab.partial"])


async def _uploaded(store: Store, vault: FileVault, *, expires_at: float | None) -> FileRecord:
    record = FileRecord(
        id=f"file-{secrets.token_hex(12)}",
        owner="alice",
        filename="a.txt",
        purpose="user_data",
        bytes=3,
        created_at=time.time() - 7200,
        expires_at=expires_at,
    )
    path = vault.path(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"abc")
    await store.files.add(record)
    return record


async def test_expired_uploads_swept_by_two_replicas_at_once_are_removed_once(
    replicas: tuple[Store, Store], tmp_path: Path
) -> None:
    first, second = replicas
    vault = FileVault(tmp_path / "files", first, UPLOAD_LIMITS)  # the volume the replicas share
    expired = [await _uploaded(first, vault, expires_at=time.time() - 1) for _ in range(3)]
    kept = await _uploaded(first, vault, expires_at=time.time() + 3600)
    sweepers = [
        Sweeper(store, RetentionPolicy, instance=store.runs.instance, file_path=vault.path)
        for store in (first, second)
    ]

    counts = await asyncio.gather(*(s.sweep(wait_seconds=60) for s in sweepers))

    assert sorted(c.get("files", 0) for c in counts if c is not None) == [0, 3]
    assert [p.name for p in (tmp_path / "files").rglob("file-*")] == [kept.id]
    for record in expired:
        assert await second.files.get("alice", record.id) is None
    assert await second.files.get("alice", kept.id) == kept
    # And a sweep again finds nothing to remove.
    assert await sweepers[1].sweep() == {}
