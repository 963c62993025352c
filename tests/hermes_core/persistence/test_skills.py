"""Keys' skills in the SQL store: one owner's skills hidden from another, version numbers
never reused, and two stores (two replicas) adding versions at once."""

from __future__ import annotations

import asyncio

import pytest

from hermes_core.persistence import Store
from hermes_core.persistence.skills import DefaultVersion, NewVersion, SkillNameTaken


def _version(description: str = "Does a thing.", name: str = "pdf-tools") -> NewVersion:
    return NewVersion(name=name, description=description, body="# Body\n", bundle=b"PK zip")


async def test_a_skill_is_kept_with_its_first_version_and_hidden_from_other_owners(
    store: Store,
) -> None:
    skill = await store.skills.create("alice", _version(), origin="uploaded")
    assert skill.id.startswith("skill_")
    assert (skill.default_version, skill.latest_version) == (1, 1)
    assert await store.skills.get("alice", skill.id) == skill
    assert await store.skills.named("alice", "pdf-tools") == skill
    assert await store.skills.bundle("alice", skill.id, 1) == b"PK zip"
    assert await store.skills.get("bob", skill.id) is None
    assert await store.skills.bundle("bob", skill.id, 1) is None
    assert await store.skills.versions("bob", skill.id) == []
    assert not await store.skills.delete("bob", skill.id)


async def test_a_name_is_unique_per_owner(store: Store) -> None:
    await store.skills.create("alice", _version(), origin="uploaded")
    with pytest.raises(SkillNameTaken):
        await store.skills.create("alice", _version(), origin="uploaded")
    await store.skills.create("bob", _version(), origin="uploaded")


async def test_versions_are_numbered_and_numbers_never_reused(store: Store) -> None:
    skill = await store.skills.create("alice", _version(), origin="uploaded")
    second = await store.skills.add_version("alice", skill.id, _version("v2"), make_default=False)
    assert second is not None
    assert second.version == 2
    assert (await store.skills.get("alice", skill.id)).description == "Does a thing."  # type: ignore[union-attr]
    with pytest.raises(DefaultVersion):
        await store.skills.delete_version("alice", skill.id, 1)
    assert await store.skills.delete_version("alice", skill.id, 2)
    assert (await store.skills.get("alice", skill.id)).latest_version == 1  # type: ignore[union-attr]
    third = await store.skills.add_version("alice", skill.id, _version("v3"), make_default=True)
    assert third is not None
    assert third.version == 3
    now = await store.skills.get("alice", skill.id)
    assert now is not None
    assert (now.default_version, now.latest_version, now.description) == (3, 3, "v3")
    assert [v.version for v in await store.skills.versions("alice", skill.id)] == [3, 1]
    updated = await store.skills.set_default("alice", skill.id, 1)
    assert updated is not None
    assert (updated.default_version, updated.description) == (1, "Does a thing.")
    with pytest.raises(LookupError):
        await store.skills.set_default("alice", skill.id, 2)


async def test_drafts_are_not_published_until_approved(store: Store) -> None:
    draft = await store.skills.create("alice", _version(name="zeta"), origin="agent", draft=True)
    await store.skills.create("alice", _version(name="alpha"), origin="uploaded")
    assert [s.name for s in await store.skills.published("alice")] == ["alpha"]
    await store.skills.approve("alice", draft.id)
    assert [s.name for s in await store.skills.published("alice")] == ["alpha", "zeta"]


async def test_two_stores_adding_versions_at_once_get_different_numbers(
    store: Store, other: Store
) -> None:
    skill = await store.skills.create("alice", _version(), origin="uploaded")
    added = await asyncio.gather(
        *(
            replica.skills.add_version("alice", skill.id, _version(), make_default=True)
            for _ in range(5)
            for replica in (store, other)
        )
    )
    numbers = sorted(v.version for v in added if v is not None)
    assert numbers == list(range(2, 12))
    final = await store.skills.get("alice", skill.id)
    assert final is not None
    assert final.latest_version == 11
