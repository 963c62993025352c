"""The key's skill library over the SQL store: what runs are offered, and each version's
files materialised on this host when a run opens it.

A version never changes (its number is never reused), so its folder under
``<data_dir>/skills-cache/<skill_id>/<version>`` is made once and kept; two requests
materialising it at once each write a temporary sibling and the first rename wins.

What each key is offered is kept in this process for :data:`OFFERED_SECONDS` (every new
session's prompt lists it, so asking the store each time cost a query per request). Changes
made through this process (:meth:`StoredSkills.write`, :meth:`StoredSkills.remove`, the
``/v1/skills`` routes calling :meth:`StoredSkills.forget`) show at once; one made through
another replica or worker shows in this one's new sessions at most that long after.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from hermes_core.persistence.skills import NewVersion, SkillNameTaken, SkillRecord, SkillStore
from hermes_core.skills.format import (
    bundle_from_zip,
    bundle_to_zip,
    checked_bundle,
    parse_skill_md,
    write_bundle,
)
from hermes_core.skills.library import SKILL_FILE, SkillBundle, SkillEntry, SkillOrigin

_SKILL_ID = re.compile(r"skill_[0-9a-f]{32}")
LATEST = "latest"
OFFERED_SECONDS = 2.0
"""How long this process keeps a key's offered skills before asking the store again: how
late another replica's upload (or approval, or deletion) may reach this one's new sessions."""
OFFERED_KEYS_KEPT = 4096
"""Keys whose offered skills are kept at most; past that, the stale ones are let go."""


def version_number(version: str) -> int | None:
    """``"3"`` → 3; None for anything that is not a version number."""
    return int(version) if version.isdigit() and len(version) <= 9 else None


def new_version(bundle: SkillBundle) -> NewVersion:
    """What the store keeps of a checked ``bundle``: its zip and its ``SKILL.md``'s body."""
    body = parse_skill_md(bundle.files[SKILL_FILE].decode("utf-8")).body
    return NewVersion(
        name=bundle.name, description=bundle.description, body=body, bundle=bundle_to_zip(bundle)
    )


class StoredSkills:
    """:class:`hermes_core.skills.library.SkillLibrary` over the SQL store."""

    def __init__(
        self,
        store: SkillStore,
        cache_dir: Path | None = None,
        *,
        offered_seconds: float = OFFERED_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._cache_dir = cache_dir
        self._offered_seconds = offered_seconds
        self._clock = clock
        self._offered: dict[str, tuple[float, tuple[SkillEntry, ...]]] = {}
        """Owner → (when it goes stale, what it is offered)."""
        self._changes = 0
        """Counts :meth:`forget` calls: a list read while one happened may predate the
        change, so it is handed out but not kept."""
        self._reading: dict[str, asyncio.Future[tuple[SkillEntry, ...]]] = {}
        """Owner → the store read under way, which sessions starting meanwhile wait for."""

    @property
    def cache_dir(self) -> Path:
        if self._cache_dir is None:  # no data_dir (library use, tests): this process's own
            self._cache_dir = Path(tempfile.mkdtemp(prefix="hermes-skills-cache-"))
        return self._cache_dir

    async def offered(self, owner: str) -> list[SkillEntry]:
        """The owner's published skills: kept up to :data:`OFFERED_SECONDS` (see the module).
        Sessions starting together while none is kept share one read of the store."""
        kept = self._offered.get(owner)
        if kept is not None and kept[0] > self._clock():
            return list(kept[1])
        reading = self._reading.get(owner)
        if reading is None:
            reading = asyncio.ensure_future(self._read(owner, self._clock(), self._changes))
            self._reading[owner] = reading
            reading.add_done_callback(functools.partial(self._read_done, owner))
        # Shielded: one session giving up does not cancel the read the others wait for.
        return list(await asyncio.shield(reading))

    async def _read(self, owner: str, started: float, changes: int) -> tuple[SkillEntry, ...]:
        entries = tuple(_entry(record) for record in await self.store.published(owner))
        if changes == self._changes:  # else it may predate a change: handed out, not kept
            if len(self._offered) >= OFFERED_KEYS_KEPT:
                self._offered = {o: k for o, k in self._offered.items() if k[0] > started}
                if len(self._offered) >= OFFERED_KEYS_KEPT:
                    self._offered.clear()
            self._offered[owner] = (started + self._offered_seconds, entries)
        return entries

    def _read_done(self, owner: str, read: asyncio.Future[tuple[SkillEntry, ...]]) -> None:
        if self._reading.get(owner) is read:
            del self._reading[owner]
        if not read.cancelled():
            read.exception()  # seen: the sessions waiting were given it, or have gone

    def forget(self, owner: str) -> None:
        """The owner's skills changed through this process: its next run asks the store
        (a read under way may predate the change: it is neither kept nor joined)."""
        self._changes += 1
        self._offered.pop(owner, None)
        self._reading.pop(owner, None)

    async def find(self, owner: str, skill_id: str, version: str | None = None) -> SkillEntry:
        record = await self.store.get(owner, skill_id)
        if record is None:
            raise LookupError(f"No skill {skill_id!r}.")
        if version is None:
            return _entry(record)
        number = record.latest_version if version == LATEST else version_number(version)
        kept = await self.store.version(owner, skill_id, number) if number is not None else None
        if kept is None:
            raise LookupError(f"The skill {skill_id!r} has no version {version!r}.")
        return SkillEntry(
            name=kept.name,
            description=kept.description,
            origin=_origin(record),
            skill_id=skill_id,
            version=str(kept.version),
        )

    async def folder(self, owner: str, entry: SkillEntry) -> Path:
        skill_id, version = entry.skill_id, entry.version
        number = version_number(version) if version is not None else None
        if skill_id is None or not _SKILL_ID.fullmatch(skill_id) or number is None:
            raise LookupError(f"{entry.name!r} is not a skill of this library.")
        # Asked every time, cached or not: the folder is only ever handed to its owner.
        if await self.store.version(owner, skill_id, number) is None:
            raise LookupError(f"No version {version} of the skill {skill_id!r}.")
        target = self.cache_dir / skill_id / str(number)
        if await asyncio.to_thread(target.is_dir):
            return target
        data = await self.store.bundle(owner, skill_id, number)
        if data is None:  # deleted between the two questions
            raise LookupError(f"No version {version} of the skill {skill_id!r}.")
        await asyncio.to_thread(_materialise, data, target)
        return target

    async def discard(self, skill_id: str, number: int | None = None) -> None:
        """Remove the files of a deleted skill (every version) or of one deleted version from
        this host's cache: deleted means its files are gone too, not just its rows. (Another
        replica's copy goes with that replica's cache; no run is handed it meanwhile, as
        :meth:`folder` asks the store first.)"""
        if self._cache_dir is None or not _SKILL_ID.fullmatch(skill_id):
            return
        target = self._cache_dir / skill_id
        if number is not None:
            target = target / str(number)
        await asyncio.to_thread(shutil.rmtree, target, ignore_errors=True)

    async def write(
        self, owner: str, bundle: SkillBundle, *, origin: SkillOrigin, draft: bool = False
    ) -> SkillEntry:
        """A new skill, or a new version of the owner's skill of that name: the default one,
        unless it is a draft of a published skill (kept, offered once made the default)."""
        bundle = await asyncio.to_thread(checked_bundle, bundle)
        version = await asyncio.to_thread(new_version, bundle)
        for _ in range(2):  # a skill of that name made meanwhile is found the second time
            existing = await self.store.named(owner, bundle.name)
            if existing is None:
                try:
                    record = await self.store.create(owner, version, origin=origin, draft=draft)
                except SkillNameTaken:
                    continue
                self.forget(owner)
                return _entry(record)
            make_default = existing.draft or not draft
            added = await self.store.add_version(
                owner, existing.id, version, make_default=make_default
            )
            self.forget(owner)
            if added is None:  # deleted meanwhile
                continue
            return SkillEntry(
                name=added.name,
                description=added.description,
                origin=_origin(existing),
                skill_id=existing.id,
                version=str(added.version),
            )
        raise RuntimeError(f"the skill {bundle.name!r} kept changing while it was written")

    async def remove(self, owner: str, name: str) -> bool:
        record = await self.store.named(owner, name)
        if record is None:
            return False
        deleted = await self.store.delete(owner, record.id)
        self.forget(owner)
        if deleted:
            await self.discard(record.id)
        return deleted


def _materialise(data: bytes, target: Path) -> None:
    # Another request may make it first: a version's files are the same every time.
    with contextlib.suppress(FileExistsError):
        write_bundle(bundle_from_zip(data), target)


def _origin(record: SkillRecord) -> SkillOrigin:
    return cast(SkillOrigin, record.origin)


def _entry(record: SkillRecord) -> SkillEntry:
    return SkillEntry(
        name=record.name,
        description=record.description,
        origin=_origin(record),
        skill_id=record.id,
        version=str(record.default_version),
    )
