"""The initial schema, with full-text search over messages.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory",
        sa.Column("scope", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("entries", sa.JSON(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "target"),
    )
    op.create_table(
        "responses",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=True),
        sa.Column("previous_id", sa.String(), nullable=True),
        sa.Column("run_id", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("request", sa.JSON(), nullable=True),
        sa.Column("body", sa.JSON(), nullable=True),
        sa.Column("transcript_length", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("responses", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_responses_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_responses_owner"), ["owner"], unique=False)

    op.create_table(
        "runs",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=True),
        sa.Column("endpoint", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("completion_id", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("exit_reason", sa.String(), nullable=True),
        sa.Column("iterations", sa.Integer(), nullable=False),
        sa.Column("model_calls", sa.Integer(), nullable=False),
        sa.Column("usage", sa.JSON(), nullable=True),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("instance", sa.String(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_completion_id"), ["completion_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_owner"), ["owner"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_session_id"), ["session_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_status"), ["status"], unique=False)

    op.create_table(
        "sessions",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=True),
        sa.Column("profile", sa.String(), nullable=False),
        sa.Column("title", sa.String(), nullable=False),
        sa.Column("system_prompt", sa.String(), nullable=False),
        sa.Column("parent_id", sa.String(), nullable=True),
        sa.Column("origin", sa.String(), nullable=True),
        sa.Column("base_id", sa.String(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("end_reason", sa.String(), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_read_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_write_tokens", sa.Integer(), nullable=False),
        sa.Column("reasoning_tokens", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_sessions_owner"), ["owner"], unique=False)
        batch_op.create_index("ix_sessions_owner_name", ["owner", "name"], unique=False)

    op.create_table(
        "session_locks",
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("lease_until", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("owner", "name"),
    )
    op.create_table(
        "todos",
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("items", sa.JSON(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("session_id"),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("content", sa.JSON(), nullable=True),
        sa.Column("tool_calls", sa.JSON(), nullable=True),
        sa.Column("tool_call_id", sa.String(), nullable=True),
        sa.Column("reasoning", sa.String(), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=True),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("compacted", sa.Boolean(), nullable=False),
        sa.Column("search_text", sa.String(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("session_id", "position"),
    )
    _create_message_search()


def _create_message_search() -> None:
    # Full-text search has no portable DDL. SQLite: an FTS5 index over messages.search_text,
    # kept current by triggers. PostgreSQL: a GIN index on the text's tsvector, punctuation
    # blanked first, or the parser keeps paths, URLs, addresses and dotted numbers whole
    # ('src/main.py') and their words ('main') are never found. ``search.PG_VECTOR`` must
    # stay the same expression, or the index goes unused.
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE_SEARCH:
            op.execute(statement)
    else:
        op.execute(
            "CREATE INDEX ix_messages_search ON messages USING gin "
            "(to_tsvector('simple', regexp_replace(search_text, '[[:punct:]]+', ' ', 'g')))"
        )


SQLITE_SEARCH = (
    "CREATE VIRTUAL TABLE messages_fts USING fts5("
    "search_text, content='messages', content_rowid='id', tokenize='unicode61')",
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN "
    "INSERT INTO messages_fts(rowid, search_text) VALUES (new.id, new.search_text); END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, search_text) "
    "VALUES ('delete', old.id, old.search_text); END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF search_text ON messages BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, search_text) "
    "VALUES ('delete', old.id, old.search_text); "
    "INSERT INTO messages_fts(rowid, search_text) VALUES (new.id, new.search_text); END",
)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE messages_fts")
    op.drop_table("messages")
    op.drop_table("todos")
    op.drop_table("session_locks")
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_sessions_owner_name")
        batch_op.drop_index(batch_op.f("ix_sessions_owner"))

    op.drop_table("sessions")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_status"))
        batch_op.drop_index(batch_op.f("ix_runs_session_id"))
        batch_op.drop_index(batch_op.f("ix_runs_owner"))
        batch_op.drop_index(batch_op.f("ix_runs_completion_id"))

    op.drop_table("runs")
    with op.batch_alter_table("responses", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_responses_owner"))
        batch_op.drop_index(batch_op.f("ix_responses_created_at"))

    op.drop_table("responses")
    op.drop_table("memory")
