"""Drop three indexes no query reads: every run and session saved paid to maintain them.

- ``ix_sessions_owner``: a prefix of ``ix_sessions_owner_name``, which serves the same lookups.
- ``ix_runs_owner``: runs are found by id or completion id (each indexed), then checked for
  their owner.
- ``ix_runs_session_id``: nothing looks runs up by session.

Each was one more B-tree page rewritten by the commit that saved a run (bench/store_writes.py).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_sessions_owner", table_name="sessions")
    op.drop_index("ix_runs_owner", table_name="runs")
    op.drop_index("ix_runs_session_id", table_name="runs")


def downgrade() -> None:
    op.create_index("ix_runs_session_id", "runs", ["session_id"])
    op.create_index("ix_runs_owner", "runs", ["owner"])
    op.create_index("ix_sessions_owner", "sessions", ["owner"])
