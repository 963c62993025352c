"""The skill tools in process: what a run lists, what skill_view shows, what skill_manage keeps
(and refuses), over a profile's directory skills and a key's library kept in memory."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from hermes_core.agent import Agent
from hermes_core.providers import ScriptedProvider, ScriptedReply
from hermes_core.providers.base import ModelRequest
from hermes_core.skills.format import skill_markdown, write_bundle
from hermes_core.skills.library import (
    SKILL_FILE,
    AttachedSkill,
    SkillBundle,
    SkillEntry,
    SkillOrigin,
)
from hermes_core.skills.shelf import SkillShelf, load_directory_skills


class MemoryLibrary:
    """A SkillLibrary kept in memory: each owner's skills by name, one folder per version."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.skills: dict[tuple[str, str], tuple[SkillEntry, SkillBundle]] = {}
        self._versions = itertools.count(1)

    async def offered(self, owner: str) -> list[SkillEntry]:
        return sorted((e for (o, _), (e, _) in self.skills.items() if o == owner), key=_name)

    async def find(self, owner: str, skill_id: str, version: str | None = None) -> SkillEntry:
        raise LookupError(skill_id)

    async def folder(self, owner: str, entry: SkillEntry) -> Path:
        _, bundle = self.skills[(owner, entry.name)]
        target = self.root / f"{entry.skill_id}-{entry.version}"
        if not target.exists():
            write_bundle(bundle, target)
        return target

    async def write(
        self, owner: str, bundle: SkillBundle, *, origin: SkillOrigin, draft: bool = False
    ) -> SkillEntry:
        entry = SkillEntry(
            name=bundle.name,
            description=bundle.description,
            origin=origin,
            skill_id=f"skill_{bundle.name}",
            version=str(next(self._versions)),
        )
        self.skills[(owner, bundle.name)] = (entry, bundle)
        return entry

    async def remove(self, owner: str, name: str) -> bool:
        return self.skills.pop((owner, name), None) is not None


def _name(entry: SkillEntry) -> str:
    return entry.name


def _skill_folder(parent: Path, name: str, description: str, body: str, **files: str) -> Path:
    folder = parent / name
    (folder / "scripts").mkdir(parents=True)
    (folder / SKILL_FILE).write_text(skill_markdown(name, description, body))
    for path, text in files.items():
        (folder / path.replace("__", "/")).write_text(text)
    return folder


def _bundle(name: str, description: str, body: str = "Do it.") -> SkillBundle:
    markdown = skill_markdown(name, description, body).encode()
    return SkillBundle(name=name, description=description, files={SKILL_FILE: markdown})


async def _run(shelf: SkillShelf, *calls: tuple[str, dict[str, Any]]) -> list[str]:
    """Run one turn making ``calls`` one after the other; the tool results, in order."""
    steps = [ScriptedReply(tool_calls=[call]) for call in calls]
    provider = ScriptedProvider(*steps, "Done.")
    result = await Agent(provider, skills=shelf, owner="alice").run_conversation("go")
    return [str(m["content"]) for m in result["messages"] if m["role"] == "tool"]


def _profile_skills(tmp_path: Path) -> SkillShelf:
    directory = tmp_path / "profile-skills"
    directory.mkdir()
    _skill_folder(
        directory,
        "greet",
        "Greets people politely.",
        "Say hello, then the name.",
        scripts__hello_py="print('hello')\n",
    )
    _skill_folder(directory, "count", "Counts things.", "Count to three.")
    skills = load_directory_skills([directory])
    return SkillShelf(directory=skills.skills, library=MemoryLibrary(tmp_path / "lib"), owner="a")


async def test_the_listing_is_sorted_and_the_nearer_source_wins_a_clash(tmp_path: Path) -> None:
    shelf = _profile_skills(tmp_path)
    assert shelf.library is not None
    await shelf.library.write("a", _bundle("greet", "The key's own greeting."), origin="uploaded")
    await shelf.library.write("a", _bundle("bake", "Bakes bread."), origin="agent")
    attached_folder = _skill_folder(tmp_path / "req", "count", "The request's count.", "Count.")
    attached = AttachedSkill(
        entry=SkillEntry(name="count", description="The request's count.", origin="request"),
        folder=attached_folder,
    )

    listing = await shelf.for_run([attached]).listing()

    assert [(e.name, e.origin) for e in listing] == [
        ("bake", "agent"),
        ("count", "request"),
        ("greet", "uploaded"),
    ]


async def test_another_owner_is_offered_none_of_a_keys_skills(tmp_path: Path) -> None:
    shelf = _profile_skills(tmp_path)
    assert shelf.library is not None
    await shelf.library.write("a", _bundle("bake", "Bakes bread."), origin="agent")
    other = SkillShelf(directory=shelf.directory, library=shelf.library, owner="b")

    assert [e.name for e in await other.listing()] == ["count", "greet"]


async def test_the_system_prompt_lists_the_skills_sorted_and_asks_to_view_them_first(
    tmp_path: Path,
) -> None:
    shelf = _profile_skills(tmp_path)
    provider = ScriptedProvider("Hi.")

    await Agent(provider, skills=shelf).run_conversation("hi")

    system = _system(provider.requests[0])
    assert "- count: Counts things.\n- greet: Greets people politely." in system
    assert "skill_view" in system
    offered = {t.name for t in provider.requests[0].tools}
    assert {"skills_list", "skill_view", "skill_manage"} <= offered


def _system(request: ModelRequest) -> str:
    first = request.messages[0]
    assert first["role"] == "system"
    return str(first["content"])


async def test_skill_view_gives_the_body_and_the_other_files_with_their_sandbox_paths(
    tmp_path: Path,
) -> None:
    (result,) = await _run(_profile_skills(tmp_path), ("skill_view", {"name": "greet"}))

    assert "Say hello, then the name." in result
    assert "name: greet" not in result  # the front matter is not the body
    assert "scripts/hello_py (15 bytes): /skills/greet/scripts/hello_py" in result


async def test_skill_view_with_a_file_gives_its_text(tmp_path: Path) -> None:
    (result,) = await _run(
        _profile_skills(tmp_path), ("skill_view", {"name": "greet", "file": "scripts/hello_py"})
    )

    assert result == "print('hello')\n"


async def test_skill_view_refuses_a_path_outside_the_skill(tmp_path: Path) -> None:
    (result,) = await _run(
        _profile_skills(tmp_path), ("skill_view", {"name": "greet", "file": "../count/SKILL.md"})
    )

    assert result.startswith("Error: the skill has no file")


async def test_skill_view_refuses_a_binary_file(tmp_path: Path) -> None:
    shelf = _profile_skills(tmp_path)
    (shelf.directory[1].folder / "blob.bin").write_bytes(b"\x00\x01\x02")

    (result,) = await _run(shelf, ("skill_view", {"name": "greet", "file": "blob.bin"}))

    assert result.startswith("Error: blob.bin is a binary file")


async def test_skill_manage_create_keeps_the_skill_in_the_owners_library(tmp_path: Path) -> None:
    shelf = SkillShelf(library=MemoryLibrary(tmp_path), owner="alice", manage_approval=False)
    create = {
        "action": "create",
        "name": "brew-tea",
        "description": "Brews tea.",
        "body": "Boil water.",
        "files": {"scripts/steep.sh": "sleep 180\n"},
    }

    created, listed = await _run(shelf, ("skill_manage", create), ("skills_list", {}))

    assert created.startswith("Created the skill 'brew-tea'")
    assert '"name": "brew-tea"' in listed
    assert '"origin": "agent"' in listed
    assert shelf.library is not None
    (entry,) = await shelf.library.offered("alice")
    assert entry.origin == "agent"
    assert await shelf.library.offered("bob") == []


async def test_skill_manage_answers_a_broken_skill_with_an_error_to_correct(
    tmp_path: Path,
) -> None:
    shelf = SkillShelf(library=MemoryLibrary(tmp_path), owner="alice", manage_approval=False)
    bad_name = {"action": "create", "name": "Brew Tea", "description": "x", "body": "y"}
    escape = {
        "action": "create",
        "name": "brew",
        "description": "x",
        "body": "y",
        "files": {"../out.txt": "z"},
    }

    named, escaped = await _run(shelf, ("skill_manage", bad_name), ("skill_manage", escape))

    assert named.startswith("Error: the skill's name 'Brew Tea' may hold only")
    assert escaped.startswith("Error: ")
    assert shelf.library is not None
    assert await shelf.library.offered("alice") == []


async def test_skill_manage_patch_replaces_one_occurrence_in_the_body(tmp_path: Path) -> None:
    library = MemoryLibrary(tmp_path / "lib")
    shelf = SkillShelf(library=library, owner="alice", manage_approval=False)
    await library.write("alice", _bundle("bake", "Bakes.", "Heat to 200 C."), origin="agent")
    patch = {"action": "patch", "name": "bake", "old_text": "200", "new_text": "220"}

    patched, viewed = await _run(shelf, ("skill_manage", patch), ("skill_view", {"name": "bake"}))

    assert patched.startswith("Patched the skill 'bake'")
    assert "Heat to 220 C." in viewed


async def test_skill_manage_delete_refuses_a_profile_skill(tmp_path: Path) -> None:
    shelf = _profile_skills(tmp_path)
    shelf.manage_approval = False

    (result,) = await _run(shelf, ("skill_manage", {"action": "delete", "name": "greet"}))

    assert result == "Error: 'greet' is a profile skill, not one of yours: not deleted."
    assert (shelf.directory[1].folder / SKILL_FILE).exists()


async def test_skill_manage_asks_for_approval_by_default(tmp_path: Path) -> None:
    shelf = SkillShelf(library=MemoryLibrary(tmp_path), owner="alice")
    create = {"action": "create", "name": "brew", "description": "Brews.", "body": "Boil."}
    asked: list[str] = []

    def deny(ask: Any) -> bool:
        asked.append(ask.reason)
        return False

    provider = ScriptedProvider(ScriptedReply(tool_calls=[("skill_manage", create)]), "Ok.")
    await Agent(provider, skills=shelf, approval_callback=deny).run_conversation("go")

    assert asked == ["creates the skill 'brew', which later sessions of this key will use"]
    assert shelf.library is not None
    assert await shelf.library.offered("alice") == []


async def test_a_broken_skill_folder_is_left_out_and_said(tmp_path: Path) -> None:
    directory = tmp_path / "skills"
    _skill_folder(directory, "fine", "Fine.", "Ok.")
    broken = directory / "broken"
    broken.mkdir()
    (broken / SKILL_FILE).write_text("no front matter\n")

    loaded = load_directory_skills([directory])

    assert [s.entry.name for s in loaded.skills] == ["fine"]
    assert list(loaded.broken) == [str(broken)]


async def test_unsandboxed_skill_view_gives_the_folders_host_path(tmp_path: Path) -> None:
    shelf = _profile_skills(tmp_path)
    shelf.mounted = False

    (result,) = await _run(shelf, ("skill_view", {"name": "greet"}))

    assert f"{shelf.directory[1].folder}/scripts/hello_py" in result
    assert "/skills/greet" not in result


async def test_a_requests_skills_follow_the_frozen_prompt_and_stay_out_of_it(
    tmp_path: Path,
) -> None:
    shelf = _profile_skills(tmp_path)
    folder = _skill_folder(tmp_path / "req", "fold", "Folds maps.", "Fold twice.")
    attached = AttachedSkill(
        entry=SkillEntry(name="fold", description="Folds maps.", origin="request"), folder=folder
    )
    provider = ScriptedProvider("Hi.")
    agent = Agent(provider, skills=shelf)

    await agent.run_conversation("hi", skills=[attached])

    frozen = await agent.frozen_prompt()
    assert "fold" not in frozen
    system = _system(provider.requests[0])
    assert system.startswith(frozen)
    assert system[len(frozen) :].strip().endswith("- fold: Folds maps.")
