"""The usage ledger: tokens and cost per key, end user, profile, provider model and day.

One row per (day, owner, end user, profile, provider, model) holds running sums. A run adds
to its rows when it ends (one entry per provider model it called), through the write queue
like the run's own record, as an upsert that adds: replicas adding to the same row at once
never lose each other's tokens (the sum happens in the database, not read-modify-write).

Budgets read it (:meth:`UsageStore.spent`) before a run starts; ``GET /v1/usage`` reads it
(:meth:`UsageStore.report`). Days are UTC, written ``YYYY-MM-DD``, so that they sort and
compare as text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import Executable

from hermes_core.persistence.database import Database
from hermes_core.persistence.tables import UsageDailyRow
from hermes_core.persistence.writer import Phase
from hermes_core.usage import Usage

USAGE = UsageDailyRow.__table__  # type: ignore[attr-defined]
_KEYS = ("day", "owner", "end_user", "profile", "provider", "model")
SUMMED: Final = (
    "calls",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_usd",
)
"""The columns an entry adds to its row."""

GROUPS: Final = {
    "day": "day",
    "key": "owner",
    "end_user": "end_user",
    "profile": "profile",
    "provider": "provider",
    "model": "model",
}
"""What a report may group by, and the column each names (``key``: the owning principal)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageEntry:
    """What one run adds to one ledger row."""

    day: str
    """``YYYY-MM-DD``, UTC."""
    owner: str
    """The key's principal."""
    end_user: str
    """``""`` when the run named none."""
    profile: str
    provider: str
    model: str
    calls: int
    usage: Usage
    cost_usd: float


@dataclass(frozen=True, slots=True)
class Spent:
    tokens: int
    """``input_tokens + output_tokens``."""
    cost_usd: float


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageLine:
    """One line of a report: the values of the grouped fields, and the sums over its rows."""

    group: dict[str, str]
    """Report field (``day``, ``key``, …) → value, for the fields grouped by."""
    calls: int
    usage: Usage
    cost_usd: float


class UsageStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._add: Executable | None = None
        """The adding upsert, built once for the engine's dialect (the writer compiles it
        once)."""

    def add(self, entries: Sequence[UsageEntry]) -> None:
        """Add each entry to its row, creating it if needed (queued on the write queue; a
        flush makes it visible)."""
        if not entries:
            return
        statement = self._add if self._add is not None else self._adding()
        submit = self.db.writer.submit
        for entry in entries:
            usage = entry.usage
            submit(
                statement,
                {
                    "day": entry.day,
                    "owner": entry.owner,
                    "end_user": entry.end_user,
                    "profile": entry.profile,
                    "provider": entry.provider,
                    "model": entry.model,
                    "calls": entry.calls,
                    "input_tokens": usage.input_tokens,
                    "cache_read_tokens": usage.cache_read_tokens,
                    "cache_write_tokens": usage.cache_write_tokens,
                    "output_tokens": usage.output_tokens,
                    "reasoning_tokens": usage.reasoning_tokens,
                    "cost_usd": entry.cost_usd,
                },
                # Additions commute: their order within a batch does not matter.
                phase=Phase.UPDATE,
            )

    def _adding(self) -> Executable:
        insert = (postgresql if self.db.dialect == "postgresql" else sqlite).insert(USAGE)
        statement: Executable = insert.on_conflict_do_update(
            index_elements=list(_KEYS),
            set_={name: USAGE.c[name] + insert.excluded[name] for name in SUMMED},
        )
        self._add = statement
        return statement

    async def spent(
        self,
        owner: str,
        end_user: str | None = None,
        *,
        since_day: str,
        until_day: str | None = None,
    ) -> Spent:
        """What ``owner`` spent from ``since_day`` (to ``until_day``), both inclusive: over all
        its end users (its own runs included) when ``end_user`` is None, that end user's
        otherwise."""
        await self.db.writer.flush()
        where = [USAGE.c.owner == owner, USAGE.c.day >= since_day]
        if until_day is not None:
            where.append(USAGE.c.day <= until_day)
        if end_user is not None:
            where.append(USAGE.c.end_user == end_user)
        statement = select(
            func.coalesce(func.sum(USAGE.c.input_tokens + USAGE.c.output_tokens), 0),
            func.coalesce(func.sum(USAGE.c.cost_usd), 0.0),
        ).where(*where)
        async with self.db.engine.connect() as conn:
            tokens, cost = (await conn.execute(statement)).one()
        return Spent(int(tokens), float(cost))

    async def report(
        self,
        *,
        owner: str | None,
        since_day: str,
        until_day: str,
        group_by: Sequence[str] = ("day",),
        end_user: str | None = None,
        model: str | None = None,
        profile: str | None = None,
        limit: int | None = None,
    ) -> list[UsageLine]:
        """Sums over the rows of ``owner`` (every owner's when None) between the two days
        (inclusive) that match the filters, one line per distinct value of the ``group_by``
        fields (see :data:`GROUPS`), in their order; one line over everything when it is
        empty. At most ``limit`` lines."""
        unknown = [name for name in group_by if name not in GROUPS]
        if unknown:
            raise ValueError(f"cannot group usage by {unknown}")
        await self.db.writer.flush()
        where: list[ColumnElement[bool]] = [USAGE.c.day >= since_day, USAGE.c.day <= until_day]
        for column, value in (
            ("owner", owner),
            ("end_user", end_user),
            ("model", model),
            ("profile", profile),
        ):
            if value is not None:
                where.append(USAGE.c[column] == value)
        grouped = [USAGE.c[GROUPS[name]] for name in group_by]
        sums = [func.coalesce(func.sum(USAGE.c[name]), 0).label(name) for name in SUMMED]
        statement: Any = select(*grouped, *sums).where(*where)
        if grouped:
            statement = statement.group_by(*grouped).order_by(*grouped)
        if limit is not None:
            statement = statement.limit(limit)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        lines = []
        for row in rows:
            if not grouped and not row.calls:
                continue  # an aggregate over no rows: no line rather than a line of zeros
            lines.append(
                UsageLine(
                    group={name: row[index] for index, name in enumerate(group_by)},
                    calls=int(row.calls),
                    usage=Usage(
                        input_tokens=int(row.input_tokens),
                        cache_read_tokens=int(row.cache_read_tokens),
                        cache_write_tokens=int(row.cache_write_tokens),
                        output_tokens=int(row.output_tokens),
                        reasoning_tokens=int(row.reasoning_tokens),
                    ),
                    cost_usd=float(row.cost_usd),
                )
            )
        return lines
