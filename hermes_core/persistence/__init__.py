"""The SQL store: sessions and transcripts, runs, responses, memory, todos and usage.

``Store`` opens one database (SQLite file by default, PostgreSQL by URL) and hands out one
repository per kind of record; every repository shares the database's write queue.
"""

from __future__ import annotations

import socket

from hermes_core.persistence.agent_stores import SqlMemoryStore, SqlTodoStore
from hermes_core.persistence.approvals import ApprovalRecord, ApprovalStore
from hermes_core.persistence.conversations import (
    ConversationMessage,
    ConversationRecord,
    ConversationStore,
)
from hermes_core.persistence.crons import CronStore
from hermes_core.persistence.database import Database, SchemaOutOfDate, sqlite_url
from hermes_core.persistence.erasure import ErasureStore
from hermes_core.persistence.files import FileRecord, FileStore, FileUsage
from hermes_core.persistence.idempotency import IdempotencyRecord, IdempotencyStore
from hermes_core.persistence.leases import LeaseStore
from hermes_core.persistence.responses import ResponseStore, StoredResponse
from hermes_core.persistence.retention import RetentionStore
from hermes_core.persistence.rows import Source, StoredMessage
from hermes_core.persistence.runs import RunRecord, RunStore
from hermes_core.persistence.search import SqlSessionSearch
from hermes_core.persistence.sessions import LogicalMessage, SessionInfo, SessionStore
from hermes_core.persistence.skills import SkillStore
from hermes_core.persistence.usage import Spent, UsageEntry, UsageLine, UsageStore
from hermes_core.persistence.webhooks import WebhookStore

__all__ = [
    "ApprovalRecord",
    "ApprovalStore",
    "ConversationMessage",
    "ConversationRecord",
    "ConversationStore",
    "Database",
    "FileRecord",
    "FileStore",
    "FileUsage",
    "IdempotencyRecord",
    "IdempotencyStore",
    "LogicalMessage",
    "ResponseStore",
    "RunRecord",
    "RunStore",
    "SchemaOutOfDate",
    "SessionInfo",
    "SessionStore",
    "SkillStore",
    "Source",
    "Spent",
    "SqlMemoryStore",
    "SqlSessionSearch",
    "SqlTodoStore",
    "Store",
    "StoredMessage",
    "StoredResponse",
    "UsageEntry",
    "UsageLine",
    "UsageStore",
    "sqlite_url",
]


class Store:
    def __init__(
        self,
        db: Database,
        *,
        instance: str | None = None,
        responses_max_count: int | None = None,
        responses_max_age_seconds: float | None = None,
    ) -> None:
        self.db = db
        instance = instance or socket.gethostname()
        self.sessions = SessionStore(db, instance=instance)
        self.runs = RunStore(db, instance=instance)
        self.responses = ResponseStore(
            db, max_count=responses_max_count, max_age_seconds=responses_max_age_seconds
        )
        self.memory = SqlMemoryStore(db)
        self.todos = SqlTodoStore(db)
        self.search = SqlSessionSearch(db)
        self.approvals = ApprovalStore(db)
        self.files = FileStore(db)
        self.skills = SkillStore(db)
        self.idempotency = IdempotencyStore(db)
        self.conversations = ConversationStore(db)
        self.webhooks = WebhookStore(db)
        self.crons = CronStore(db)
        self.usage = UsageStore(db)
        self.leases = LeaseStore(db)
        self.retention = RetentionStore(db, instance=instance)
        self.erasure = ErasureStore(db)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrate: bool = True,
        instance: str | None = None,
        responses_max_count: int | None = None,
        responses_max_age_seconds: float | None = None,
    ) -> Store:
        """Connect and bring the schema up to date (or check it is, when ``migrate`` is off)."""
        db = Database(url)
        try:
            await db.ensure_schema(upgrade=migrate)
        except BaseException:
            await db.close()
            raise
        return cls(
            db,
            instance=instance,
            responses_max_count=responses_max_count,
            responses_max_age_seconds=responses_max_age_seconds,
        )

    async def close(self) -> None:
        await self.db.close()
