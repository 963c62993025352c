"""Keys' skills and their versions, in the SQL store so that every replica sees the same.

A skill is a name (unique per owner) and numbered versions ("1", "2", ...); each version
holds its files as one zip. Numbers are never reused, even after a version is deleted: a
replica that materialised ``<skill>/<number>`` on its disk can keep it for good. Writes are
direct, not queued with a run's writes: a skill is answered only once it is durable.

Every method takes the owner and finds nothing of another owner's: callers answer "not
found" either way, and no key learns that another's skill exists.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_core.persistence.database import Database
from hermes_core.persistence.tables import SkillRow, SkillVersionRow

SKILLS = SkillRow.__table__  # type: ignore[attr-defined]
VERSIONS = SkillVersionRow.__table__  # type: ignore[attr-defined]


class SkillNameTaken(ValueError):
    """The owner already has a skill of that name (add a version to it instead)."""


class DefaultVersion(ValueError):
    """The version is its skill's default: it cannot be deleted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillRecord:
    id: str
    owner: str
    name: str
    description: str
    default_version: int
    latest_version: int
    origin: str
    draft: bool
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillVersionRecord:
    """A version as listed; its zip is read on its own (:meth:`SkillStore.bundle`)."""

    id: str
    skill_id: str
    version: int
    name: str
    description: str
    body: str
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class NewVersion:
    """What a version is made of: its checked name and description, its ``SKILL.md`` body
    and its files' zip."""

    name: str
    description: str
    body: str
    bundle: bytes


class SkillStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(
        self, owner: str, version: NewVersion, *, origin: str, draft: bool = False
    ) -> SkillRecord:
        """A new skill whose version "1" is ``version``; :class:`SkillNameTaken` when the
        owner has a skill of that name."""
        now = time.time()
        record = SkillRecord(
            id=f"skill_{secrets.token_hex(16)}",
            owner=owner,
            name=version.name,
            description=version.description,
            default_version=1,
            latest_version=1,
            origin=origin,
            draft=draft,
            created_at=now,
        )
        values = {name: getattr(record, name) for name in _SKILL_FIELDS}
        try:
            async with self.db.engine.begin() as conn:
                await conn.execute(insert(SKILLS), {**values, "last_number": 1})
                await conn.execute(insert(VERSIONS), _version_values(record.id, 1, version, now))
        except IntegrityError:
            raise SkillNameTaken(version.name) from None
        return record

    async def get(self, owner: str, skill_id: str) -> SkillRecord | None:
        return await self._one((SKILLS.c.id == skill_id) & (SKILLS.c.owner == owner))

    async def named(self, owner: str, name: str) -> SkillRecord | None:
        return await self._one((SKILLS.c.name == name) & (SKILLS.c.owner == owner))

    async def _one(self, where: Any) -> SkillRecord | None:
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(select(SKILLS).where(where))).first()
        return _skill(row) if row is not None else None

    async def page(
        self,
        owner: str,
        *,
        after: SkillRecord | None = None,
        limit: int = 100,
        newest_first: bool = True,
    ) -> list[SkillRecord]:
        """``owner``'s skills, drafts too, newest first (or oldest), from just past ``after``."""
        where: Any = SKILLS.c.owner == owner
        if after is not None:
            at, last = SKILLS.c.created_at, SKILLS.c.id
            if newest_first:
                past = (at < after.created_at) | ((at == after.created_at) & (last < after.id))
            else:
                past = (at > after.created_at) | ((at == after.created_at) & (last > after.id))
            where = where & past
        ordering = [
            c.desc() if newest_first else c.asc() for c in (SKILLS.c.created_at, SKILLS.c.id)
        ]
        statement = select(SKILLS).where(where).order_by(*ordering).limit(limit)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [_skill(row) for row in rows]

    async def published(self, owner: str) -> list[SkillRecord]:
        """``owner``'s skills a run is offered (drafts left out), by name."""
        where = (SKILLS.c.owner == owner) & SKILLS.c.draft.is_(False)
        statement = select(SKILLS).where(where).order_by(SKILLS.c.name)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [_skill(row) for row in rows]

    async def add_version(
        self, owner: str, skill_id: str, version: NewVersion, *, make_default: bool
    ) -> SkillVersionRecord | None:
        """A new version of ``owner``'s skill (None: no such skill). Its name must be the
        skill's (the caller checks; a row's name never changes)."""
        now = time.time()
        async with self.db.engine.begin() as conn:
            # Raising the counter first locks the skill's row until this commits, so two
            # replicas adding versions at once get different numbers.
            mine = (SKILLS.c.id == skill_id) & (SKILLS.c.owner == owner)
            bumped = await conn.execute(
                update(SKILLS).where(mine).values(last_number=SKILLS.c.last_number + 1)
            )
            if not bumped.rowcount:
                return None
            number = (await conn.execute(select(SKILLS.c.last_number).where(mine))).scalar_one()
            values = _version_values(skill_id, number, version, now)
            await conn.execute(insert(VERSIONS), values)
            changes: dict[str, Any] = {"latest_version": number}
            if make_default:
                changes |= {"default_version": number, "description": version.description}
            await conn.execute(update(SKILLS).where(mine).values(**changes))
        return _version_record(values)

    async def set_default(self, owner: str, skill_id: str, number: int) -> SkillRecord | None:
        """Make version ``number`` the skill's default (None: no such skill);
        :class:`LookupError` when the skill has no such version."""
        async with self.db.engine.begin() as conn:
            if await self._owned(conn, owner, skill_id) is None:
                return None
            kept = await conn.execute(
                select(VERSIONS.c.description).where(
                    (VERSIONS.c.skill_id == skill_id) & (VERSIONS.c.version == number)
                )
            )
            description = kept.scalar_one_or_none()
            if description is None:
                raise LookupError(number)
            await conn.execute(
                update(SKILLS)
                .where(SKILLS.c.id == skill_id)
                .values(default_version=number, description=description)
            )
        return await self.get(owner, skill_id)

    async def approve(self, owner: str, skill_id: str) -> SkillRecord | None:
        """Publish a draft: its runs are offered it from now on (None: no such skill)."""
        mine = (SKILLS.c.id == skill_id) & (SKILLS.c.owner == owner)
        async with self.db.engine.begin() as conn:
            await conn.execute(update(SKILLS).where(mine).values(draft=False))
        return await self.get(owner, skill_id)

    async def delete(self, owner: str, skill_id: str) -> bool:
        """Delete the skill and every version of it; False when the owner has no such skill."""
        async with self.db.engine.begin() as conn:
            mine = (SKILLS.c.id == skill_id) & (SKILLS.c.owner == owner)
            removed = await conn.execute(delete(SKILLS).where(mine))
            if not removed.rowcount:
                return False
            await conn.execute(delete(VERSIONS).where(VERSIONS.c.skill_id == skill_id))
        return True

    async def version(self, owner: str, skill_id: str, number: int) -> SkillVersionRecord | None:
        statement = (
            select(*_VERSION_COLUMNS)
            .join(SKILLS, SKILLS.c.id == VERSIONS.c.skill_id)
            .where(
                (SKILLS.c.owner == owner)
                & (VERSIONS.c.skill_id == skill_id)
                & (VERSIONS.c.version == number)
            )
        )
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return _version_record(row._mapping) if row is not None else None

    async def version_with_id(
        self, owner: str, skill_id: str, version_id: str
    ) -> SkillVersionRecord | None:
        """The version whose id is ``version_id`` (a list's cursor names versions by id)."""
        statement = (
            select(*_VERSION_COLUMNS)
            .join(SKILLS, SKILLS.c.id == VERSIONS.c.skill_id)
            .where(
                (SKILLS.c.owner == owner)
                & (VERSIONS.c.skill_id == skill_id)
                & (VERSIONS.c.id == version_id)
            )
        )
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return _version_record(row._mapping) if row is not None else None

    async def versions(
        self,
        owner: str,
        skill_id: str,
        *,
        after: int | None = None,
        limit: int = 100,
        newest_first: bool = True,
    ) -> list[SkillVersionRecord]:
        """The skill's versions by number, newest first (or oldest), from just past
        ``after``; empty when the owner has no such skill."""
        where: Any = (SKILLS.c.owner == owner) & (VERSIONS.c.skill_id == skill_id)
        if after is not None:
            past = VERSIONS.c.version < after if newest_first else VERSIONS.c.version > after
            where = where & past
        order = VERSIONS.c.version.desc() if newest_first else VERSIONS.c.version.asc()
        statement = (
            select(*_VERSION_COLUMNS)
            .join(SKILLS, SKILLS.c.id == VERSIONS.c.skill_id)
            .where(where)
            .order_by(order)
            .limit(limit)
        )
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [_version_record(row._mapping) for row in rows]

    async def bundle(self, owner: str, skill_id: str, number: int) -> bytes | None:
        """The zip of the skill's version ``number`` (None: no such skill or version)."""
        statement = (
            select(VERSIONS.c.bundle)
            .join(SKILLS, SKILLS.c.id == VERSIONS.c.skill_id)
            .where(
                (SKILLS.c.owner == owner)
                & (VERSIONS.c.skill_id == skill_id)
                & (VERSIONS.c.version == number)
            )
        )
        async with self.db.engine.connect() as conn:
            data = (await conn.execute(statement)).scalar_one_or_none()
        return bytes(data) if data is not None else None

    async def delete_version(self, owner: str, skill_id: str, number: int) -> bool:
        """Delete one version; False when there is no such skill or version,
        :class:`DefaultVersion` when it is the skill's default."""
        async with self.db.engine.begin() as conn:
            skill = await self._owned(conn, owner, skill_id)
            if skill is None:
                return False
            if skill.default_version == number:
                raise DefaultVersion(number)
            this = (VERSIONS.c.skill_id == skill_id) & (VERSIONS.c.version == number)
            removed = await conn.execute(delete(VERSIONS).where(this))
            if not removed.rowcount:
                return False
            newest = await conn.execute(
                select(func.max(VERSIONS.c.version)).where(VERSIONS.c.skill_id == skill_id)
            )
            await conn.execute(
                update(SKILLS)
                .where(SKILLS.c.id == skill_id)
                .values(latest_version=newest.scalar_one())
            )
        return True

    async def _owned(self, conn: AsyncConnection, owner: str, skill_id: str) -> SkillRecord | None:
        """The skill, its row locked for the rest of ``conn``'s transaction (PostgreSQL;
        SQLite's writer takes the whole database anyway once it writes)."""
        statement = select(SKILLS).where((SKILLS.c.id == skill_id) & (SKILLS.c.owner == owner))
        if self.db.dialect == "postgresql":
            statement = statement.with_for_update()
        row = (await conn.execute(statement)).first()
        return _skill(row) if row is not None else None


_SKILL_FIELDS = tuple(name for name in SkillRecord.__dataclass_fields__ if name in SKILLS.columns)
_VERSION_FIELDS = tuple(SkillVersionRecord.__dataclass_fields__)
_VERSION_COLUMNS = tuple(VERSIONS.c[name] for name in _VERSION_FIELDS)


def _version_values(skill_id: str, number: int, version: NewVersion, now: float) -> dict[str, Any]:
    return {
        "id": f"skillver_{secrets.token_hex(16)}",
        "skill_id": skill_id,
        "version": number,
        "name": version.name,
        "description": version.description,
        "body": version.body,
        "bundle": version.bundle,
        "created_at": now,
    }


def _skill(row: Any) -> SkillRecord:
    return SkillRecord(**{name: getattr(row, name) for name in _SKILL_FIELDS})


def _version_record(values: Any) -> SkillVersionRecord:
    return SkillVersionRecord(**{name: values[name] for name in _VERSION_FIELDS})
