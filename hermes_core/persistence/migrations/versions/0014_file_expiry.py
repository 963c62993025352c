"""A file may expire: ``expires_at``, from the upload's ``expires_after`` (OpenAI's Files API).

A client that uploaded with an expiry relied on the file going away; it was kept forever, and
counted against its key's quota forever. An expired file is gone for its owner at once, and
the retention sweeper removes its record and bytes.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("files") as files:
        files.add_column(sa.Column("expires_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("files") as files:
        files.drop_column("expires_at")
