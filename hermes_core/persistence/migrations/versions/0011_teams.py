"""Serving a team: end users on runs, responses, files and conversations; the usage ledger; leases.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as runs:
        runs.add_column(sa.Column("end_user", sa.String(), nullable=True))
        runs.add_column(
            sa.Column("cost_usd", sa.Float(), nullable=False, server_default=sa.text("0"))
        )
    op.create_index("ix_runs_owner_end_user", "runs", ["owner", "end_user"])
    op.create_index("ix_runs_ended_at", "runs", ["ended_at"])
    with op.batch_alter_table("responses") as responses:
        responses.add_column(sa.Column("end_user", sa.String(), nullable=True))
    with op.batch_alter_table("files") as files:
        files.add_column(sa.Column("end_user", sa.String(), nullable=True))
    with op.batch_alter_table("conversations") as conversations:
        conversations.add_column(sa.Column("end_user", sa.String(), nullable=True))
    op.create_index("ix_sessions_updated_at", "sessions", ["updated_at"])
    op.create_table(
        "usage_daily",
        sa.Column("day", sa.String(), primary_key=True),
        sa.Column("owner", sa.String(), primary_key=True),
        sa.Column("end_user", sa.String(), primary_key=True),
        sa.Column("profile", sa.String(), primary_key=True),
        sa.Column("provider", sa.String(), primary_key=True),
        sa.Column("model", sa.String(), primary_key=True),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("reasoning_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
    )
    op.create_index("ix_usage_daily_owner_day", "usage_daily", ["owner", "day"])
    op.create_table(
        "leases",
        sa.Column("name", sa.String(), primary_key=True),
        sa.Column("holder", sa.String(), nullable=False),
        sa.Column("lease_until", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
    op.drop_index("ix_usage_daily_owner_day", table_name="usage_daily")
    op.drop_table("usage_daily")
    op.drop_index("ix_sessions_updated_at", table_name="sessions")
    with op.batch_alter_table("conversations") as conversations:
        conversations.drop_column("end_user")
    with op.batch_alter_table("files") as files:
        files.drop_column("end_user")
    with op.batch_alter_table("responses") as responses:
        responses.drop_column("end_user")
    op.drop_index("ix_runs_ended_at", table_name="runs")
    op.drop_index("ix_runs_owner_end_user", table_name="runs")
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("cost_usd")
        runs.drop_column("end_user")
