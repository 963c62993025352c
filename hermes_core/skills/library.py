"""What a skill is to the rest of the code, and where a key's own skills are kept.

A skill reaches a run from one of four places (:data:`SkillOrigin`): a directory a profile
names, an upload through ``/v1/skills``, the agent's own ``skill_manage``, or a request that
attaches one (the Responses ``shell`` tool's ``environment.skills``). Whatever its origin, a
run sees it as a :class:`SkillEntry` (name and description, for the system prompt) and, once
it is opened, as a folder on this host holding its files (read-only: the sandbox mounts it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

SkillOrigin = Literal["profile", "uploaded", "agent", "request"]

SKILL_FILE = "SKILL.md"


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillBundle:
    """One version of a skill: its checked name and description and all of its files
    (relative POSIX path → bytes; ``SKILL.md`` always among them)."""

    name: str
    description: str
    files: Mapping[str, bytes]


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillEntry:
    """A skill as a listing shows it."""

    name: str
    description: str
    origin: SkillOrigin
    skill_id: str | None = None
    """Its id in the key's library (None for a profile's directory skills)."""
    version: str | None = None
    """The version a run uses (the skill's default version, or the one a request named)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttachedSkill:
    """A skill one request brings to its run (the Responses ``shell`` tool's
    ``environment.skills``), already resolved to a folder on this host."""

    entry: SkillEntry
    folder: Path


class SkillLibrary(Protocol):
    """A key's own skills (uploaded and agent-written), kept by the server's store and shared
    by its replicas. Every method is scoped to ``owner``: no key sees another's skills."""

    async def offered(self, owner: str) -> list[SkillEntry]:
        """The skills ``owner``'s runs are offered: each skill's default version, drafts left
        out, sorted by name."""
        ...

    async def find(self, owner: str, skill_id: str, version: str | None = None) -> SkillEntry:
        """The skill ``skill_id`` at ``version`` (its default when None, ``"latest"`` its
        newest); :class:`LookupError` when ``owner`` has no such skill or version."""
        ...

    async def folder(self, owner: str, entry: SkillEntry) -> Path:
        """A read-only folder on this host holding ``entry``'s files (made from the store on
        first use, then kept: a version never changes)."""
        ...

    async def write(
        self, owner: str, bundle: SkillBundle, *, origin: SkillOrigin, draft: bool = False
    ) -> SkillEntry:
        """Keep ``bundle``: a new skill, or a new (default) version of ``owner``'s skill of
        that name. A draft is kept but not offered until approved."""
        ...

    async def remove(self, owner: str, name: str) -> bool:
        """Delete ``owner``'s skill named ``name`` (every version); False when there was none."""
        ...
