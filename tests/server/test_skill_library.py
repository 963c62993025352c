"""The key's skill library over the SQL store (``server/skills/library.py``): what a key is
offered is kept briefly in the process, so a new session does not query it each time; what
this process changes shows at once, what another replica changes within the keeping time."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hermes_core.persistence import Store
from hermes_core.persistence.skills import NewVersion
from hermes_core.skills.library import SkillBundle
from server.skills.library import StoredSkills


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _version(name: str) -> NewVersion:
    return NewVersion(name=name, description=f"About {name}.", body="Body", bundle=b"PK zip")


def _bundle(name: str) -> SkillBundle:
    skill_md = f"---\nname: {name}\ndescription: About {name}.\n---\n\nBody\n"
    return SkillBundle(
        name=name, description=f"About {name}.", files={"SKILL.md": skill_md.encode()}
    )


async def test_another_replicas_change_is_offered_once_the_kept_list_goes_stale(
    store: Store, tmp_path: Path
) -> None:
    clock = Clock()
    library = StoredSkills(store.skills, tmp_path / "cache", offered_seconds=2.0, clock=clock)
    assert await library.offered("alice") == []

    await store.skills.create("alice", _version("pdf-tools"), origin="uploaded")  # elsewhere
    clock.now += 1.9
    assert await library.offered("alice") == []
    clock.now += 0.2
    assert [entry.name for entry in await library.offered("alice")] == ["pdf-tools"]


async def test_this_processs_writes_and_removals_are_offered_at_once(
    store: Store, tmp_path: Path
) -> None:
    library = StoredSkills(store.skills, tmp_path / "cache", clock=Clock())
    assert await library.offered("alice") == []

    await library.write("alice", _bundle("pdf-tools"), origin="agent")
    assert [entry.name for entry in await library.offered("alice")] == ["pdf-tools"]
    assert await library.offered("bob") == []
    assert await library.remove("alice", "pdf-tools")
    assert await library.offered("alice") == []


async def test_a_list_read_while_this_process_changed_the_library_is_not_kept(
    store: Store, tmp_path: Path
) -> None:
    library = StoredSkills(store.skills, tmp_path / "cache", clock=Clock())
    published = store.skills.published

    async def published_then_changed(owner: str) -> list:  # type: ignore[type-arg]
        found = await published(owner)  # read before the write below committed
        await store.skills.create(owner, _version("pdf-tools"), origin="uploaded")
        library.forget(owner)
        return found

    store.skills.published = published_then_changed  # type: ignore[method-assign]
    assert await library.offered("alice") == []
    store.skills.published = published  # type: ignore[method-assign]
    assert [entry.name for entry in await library.offered("alice")] == ["pdf-tools"]


async def test_sessions_starting_together_share_one_read_of_the_store(
    store: Store, tmp_path: Path
) -> None:
    library = StoredSkills(store.skills, tmp_path / "cache", clock=Clock())
    await store.skills.create("alice", _version("pdf-tools"), origin="uploaded")
    published, reads = store.skills.published, []
    release = asyncio.Event()

    async def slow_published(owner: str) -> list:  # type: ignore[type-arg]
        reads.append(owner)
        await release.wait()
        return await published(owner)

    store.skills.published = slow_published  # type: ignore[method-assign]
    waiting = [asyncio.ensure_future(library.offered("alice")) for _ in range(8)]
    for _ in range(100):  # the read starting (no time passes: only the loop turning)
        if reads:
            break
        await asyncio.sleep(0)
    waiting[0].cancel()  # one giving up leaves the read to the others
    release.set()
    offered = await asyncio.gather(*waiting[1:])

    assert reads == ["alice"]
    assert all([entry.name for entry in entries] == ["pdf-tools"] for entries in offered)
