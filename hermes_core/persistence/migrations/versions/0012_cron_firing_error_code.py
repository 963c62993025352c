"""A cron firing that started no run keeps why as a code beside its message: the cron shows
it (``last_error``) to its key, which can tell a spent budget from a busy session.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cron_firings") as firings:
        firings.add_column(sa.Column("error_code", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cron_firings") as firings:
        firings.drop_column("error_code")
