"""Lists a client reads a page at a time, newest first (``after``, ``limit``, ``has_more``).

Keyset pagination on ``(created_at, id)``: a page starts just past the row the client last
saw, found by its id, so rows added meanwhile neither shift nor repeat a page (as an offset
would), and each page is one indexed range read. The table needs ``id`` and ``created_at``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Row, Table, and_, or_, select

from hermes_core.persistence.database import Database


async def newest_first(
    db: Database,
    table: Table,
    mine: ColumnElement[bool],
    *filters: ColumnElement[bool],
    after: str | None,
    limit: int,
) -> tuple[Sequence[Row[Any]], bool]:
    """The rows of ``table`` that are ``mine`` (whose row ``after`` must be too: another
    owner's id is no cursor) and pass ``filters``, newest first, just past ``after``; and
    whether there are more."""
    where = [mine, *filters]
    if after is not None:
        async with db.engine.connect() as conn:
            mark = (
                await conn.execute(select(table.c.created_at).where(table.c.id == after, mine))
            ).first()
        if mark is None:
            return [], False
        created_at = mark[0]
        where.append(
            or_(
                table.c.created_at < created_at,
                and_(table.c.created_at == created_at, table.c.id < after),
            )
        )
    statement = (
        select(table)
        .where(*where)
        .order_by(table.c.created_at.desc(), table.c.id.desc())
        .limit(limit + 1)
    )
    async with db.engine.connect() as conn:
        rows = (await conn.execute(statement)).all()
    return rows[:limit], len(rows) > limit
