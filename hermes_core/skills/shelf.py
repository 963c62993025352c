"""What skills one run may use, and where their files are on this host.

Three sources meet on a :class:`SkillShelf`: the profile's directory skills (read once, when
the profile is built: :func:`load_directory_skills`), the API key's own library (uploaded and
agent-written skills, :class:`~hermes_core.skills.library.SkillLibrary`, asked once per run),
and the skills the request attached. On a clash of names the nearer source wins: the
request's over the key's own over the profile's, so a key can override a profile's skill
and a request can override both.

A run for an end user behind the key (the server's docs/end-users.md) has a fourth: the
library of that end user, where the skills its agent writes go. It comes between the
request's and the key's: the end user's own, then the key's, then the profile's. Another end
user's library is never on the shelf.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hermes_core.skills.format import SkillError, read_skill_folder
from hermes_core.skills.library import SKILL_FILE, AttachedSkill, SkillEntry, SkillLibrary

log = logging.getLogger(__name__)

SANDBOX_SKILLS_DIR = "/skills"
"""Where a run's skill folders appear, read-only, to its sandboxed commands."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectorySkill:
    """One of a profile's directory skills: its entry and its folder."""

    entry: SkillEntry
    folder: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectorySkills:
    """A profile's directory skills, read when the profile was built."""

    skills: tuple[DirectorySkill, ...] = ()
    """Sorted by name; one per name (the first directory listed wins)."""
    broken: Mapping[str, str] = field(default_factory=dict)
    """Folder (or directory) → why it was left out: for the log and ``check-config``."""


def load_directory_skills(dirs: Sequence[Path]) -> DirectorySkills:
    """The skills in ``dirs``: each subfolder holding a ``SKILL.md`` is one. A folder that
    breaks the format is logged and left out (the others still load); blocking file reads,
    so call it when building a profile, not from a running event loop."""
    found: dict[str, DirectorySkill] = {}
    broken: dict[str, str] = {}
    for directory in dirs:
        if not directory.is_dir():
            broken[str(directory)] = "not a directory"
            continue
        for folder in sorted(directory.iterdir()):
            if not folder.is_dir() or not (folder / SKILL_FILE).is_file():
                continue
            try:
                bundle = read_skill_folder(folder)
            except (SkillError, OSError) as exc:
                broken[str(folder)] = str(exc)
                continue
            if bundle.name in found:
                broken[str(folder)] = (
                    f"the skill {bundle.name!r} is already in {found[bundle.name].folder}"
                )
                continue
            entry = SkillEntry(name=bundle.name, description=bundle.description, origin="profile")
            found[bundle.name] = DirectorySkill(entry=entry, folder=folder.resolve())
    for place, why in broken.items():
        log.warning("skill folder %s left out: %s", place, why)
    return DirectorySkills(skills=tuple(found[name] for name in sorted(found)), broken=broken)


class SkillShelf:
    """The skills offered to the runs of one agent, acting for ``owner`` (an API key's
    principal, or an end user behind it: the only library it writes), with the skills of
    ``key_owner`` (the key's principal, when ``owner`` is an end user's) read beside them.

    :meth:`for_run` makes the shelf of one run (with the request's attached skills); the
    library is asked once per run, and again after this run wrote to it.
    """

    def __init__(
        self,
        *,
        directory: Sequence[DirectorySkill] = (),
        library: SkillLibrary | None = None,
        owner: str = "default",
        key_owner: str | None = None,
        attached: Sequence[AttachedSkill] = (),
        manage_approval: bool = True,
        mounted: bool = True,
    ) -> None:
        self.directory = tuple(directory)
        self.library = library
        self.owner = owner
        self.key_owner = key_owner if key_owner != owner else None
        """Whose library is read, not written, beside ``owner``'s (None: none)."""
        self.attached = tuple(attached)
        self.manage_approval = manage_approval
        """``skill_manage`` waits for a person's approval (the ``skills`` toolset's policy)."""
        self.mounted = mounted
        """Commands see the skills at ``/skills/<name>`` (False: unsandboxed, host paths)."""
        self._offered: list[SkillEntry] | None = None
        self._keys: list[SkillEntry] | None = None
        self._folders: dict[str, Path] = {}

    def for_run(self, attached: Sequence[AttachedSkill]) -> SkillShelf:
        """A shelf for one run, with the skills its request attached."""
        return SkillShelf(
            directory=self.directory,
            library=self.library,
            owner=self.owner,
            key_owner=self.key_owner,
            attached=attached,
            manage_approval=self.manage_approval,
            mounted=self.mounted,
        )

    @property
    def writable(self) -> bool:
        """The key has a library to write to (a server without a database has none)."""
        return self.library is not None

    async def own(self) -> list[SkillEntry]:
        """The owner's own skills (uploaded and agent-written), asked once per run."""
        if self.library is None:
            return []
        if self._offered is None:
            self._offered = await self._read(self.owner)
            if self._offered is None:
                return []
        return self._offered

    async def keys(self) -> list[SkillEntry]:
        """The skills of the key an end user's agent acts behind, asked once per run (none
        when the owner is the key itself)."""
        if self.library is None or self.key_owner is None:
            return []
        if self._keys is None:
            self._keys = await self._read(self.key_owner)
            if self._keys is None:
                return []
        return self._keys

    async def _read(self, owner: str) -> list[SkillEntry] | None:
        assert self.library is not None
        try:
            return await self.library.offered(owner)
        except Exception:  # the store failing must not fail the run: it goes on without
            log.exception("the skill library could not be read; the run goes on without it")
            return None

    def forget_own(self) -> None:
        """The library changed (this run wrote to it): ask it again next time."""
        self._offered = None

    async def listing(self) -> list[SkillEntry]:
        """Every skill the run may use, one per name, sorted by name."""
        chosen: dict[str, SkillEntry] = {s.entry.name: s.entry for s in self.directory}
        for entry in await self.keys():
            chosen[entry.name] = entry
        for entry in await self.own():
            chosen[entry.name] = entry
        for skill in self.attached:
            chosen[skill.entry.name] = skill.entry
        return [chosen[name] for name in sorted(chosen)]

    async def entry(self, name: str) -> SkillEntry | None:
        return next((e for e in await self.listing() if e.name == name), None)

    async def folder(self, name: str) -> Path | None:
        """The folder on this host holding the skill ``name``'s files, or None when the run
        has no such skill. A library skill's folder is made on first use."""
        for skill in self.attached:
            if skill.entry.name == name:
                return skill.folder
        for owner, entries in ((self.owner, await self.own()), (self.key_owner, await self.keys())):
            found = next((e for e in entries if e.name == name), None)
            if found is not None and owner is not None:
                assert self.library is not None
                key = f"{found.skill_id}@{found.version}"
                place = self._folders.get(key)
                if place is None:
                    place = self._folders[key] = await self.library.folder(owner, found)
                return place
        return next((s.folder for s in self.directory if s.entry.name == name), None)

    async def folders(self) -> dict[str, Path]:
        """Every skill's folder by name (library ones made now): what sandboxed commands
        see at ``/skills/<name>``. A library folder that cannot be made is left out."""
        found: dict[str, Path] = {}
        for entry in await self.listing():
            try:
                place = await self.folder(entry.name)
            except Exception:  # one skill's folder (or the store) failing must not fail the run
                log.warning("the folder of skill %s could not be made", entry.name, exc_info=True)
                continue
            if place is not None:
                found[entry.name] = place
        return found

    def path_in_sandbox(self, name: str, folder: Path) -> str:
        """Where commands find the skill ``name``'s folder."""
        return f"{SANDBOX_SKILLS_DIR}/{name}" if self.mounted else str(folder)


def skills_section(entries: Sequence[SkillEntry]) -> str:
    """The system prompt's section listing ``entries`` (stable: same skills, same text, so
    the prompt prefix stays cacheable)."""
    if not entries:
        return ""
    lines = "\n".join(f"- {e.name}: {' '.join(e.description.split())}" for e in entries)
    return (
        "# Skills\n"
        "Skills are instructions and files for particular tasks. Before following one, "
        "load it with skill_view(name).\n"
        f"{lines}"
    )


def attached_section(entries: Sequence[SkillEntry]) -> str:
    """The section naming the skills a request attached (after the frozen prompt)."""
    if not entries:
        return ""
    lines = "\n".join(f"- {e.name}: {' '.join(e.description.split())}" for e in entries)
    return (
        "# Skills attached to this request\n"
        "Load one with skill_view(name) before following it.\n"
        f"{lines}"
    )
