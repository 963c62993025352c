"""The replica holding a conversation's turn lock.

A replica killed before its run's row was written (rows are written behind, in batches) left a
lock naming a run no row describes; recovering that replica could not find it, and the
conversation stayed locked until the lock's lease (hours). The lock now names its replica.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("session_locks") as batch:
        batch.add_column(sa.Column("instance", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("session_locks") as batch:
        batch.drop_column("instance")
