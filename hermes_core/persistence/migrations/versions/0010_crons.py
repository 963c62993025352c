"""Schedules (``/v1/crons``) and their firings, claimed once across replicas.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "crons",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("schedule", sa.String(), nullable=False),
        sa.Column("timezone", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("next_fire_at", sa.Float(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_crons_due", "crons", ["paused", "next_fire_at"])
    op.create_index("ix_crons_owner_created", "crons", ["owner", "created_at"])
    op.create_table(
        "cron_firings",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("cron_id", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("scheduled_at", sa.Float(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("claimed_by", sa.String(), nullable=True),
        sa.Column("claimed_until", sa.Float(), nullable=True),
        sa.Column("run_id", sa.String(), nullable=True),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("cron_id", "scheduled_at", name="uq_cron_firings_time"),
    )
    op.create_index("ix_cron_firings_open", "cron_firings", ["status", "claimed_until"])


def downgrade() -> None:
    op.drop_index("ix_cron_firings_open", table_name="cron_firings")
    op.drop_table("cron_firings")
    op.drop_index("ix_crons_owner_created", table_name="crons")
    op.drop_index("ix_crons_due", table_name="crons")
    op.drop_table("crons")
