"""An idempotency key's claim names its replica and that replica's start, and has a lease; the
kept answer keeps its headers.

A request killed with its process after claiming a key, but before starting a run, left the key
claimed for its 24 hours: every retry waited, then was told to retry. A retry can now tell the
claim is dead (its lease ran out, or it is an earlier start's of this replica) and take it
over. A replayed answer lacked the first one's ``x-hermes-session-id``: the headers are kept.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("idempotency_keys") as keys:
        keys.add_column(sa.Column("headers", sa.String(), nullable=True))
        keys.add_column(sa.Column("instance", sa.String(), nullable=True))
        keys.add_column(sa.Column("life", sa.String(), nullable=True))
        keys.add_column(sa.Column("claimed_until", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("idempotency_keys") as keys:
        keys.drop_column("claimed_until")
        keys.drop_column("life")
        keys.drop_column("instance")
        keys.drop_column("headers")
