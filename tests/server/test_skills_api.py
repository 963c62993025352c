"""``/v1/skills`` as the official SDK uses it: upload a skill's files or its zip, version it,
list, download and delete; each key sees its own skills only, and a bad skill or a hostile
zip is a 400 that says why."""

from __future__ import annotations

import asyncio
import io
import os
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from hermes_core.persistence import sqlite_url
from hermes_core.skills.format import MAX_ZIP_BYTES, bundle_from_zip
from hermes_core.skills.library import SkillEntry
from server.app import create_app
from server.http.body_limit import UPLOAD_ENVELOPE_BYTES
from server.http.threaded import ThreadedServer
from server.services import Services
from server.simulator import SimulatorServer
from server.skills.library import StoredSkills
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, make_services

SKILL_MD = b"---\nname: pdf-tools\ndescription: Fill in PDF forms.\n---\n\n# PDF\nRun fill.py\n"
SCRIPT = b"#!/usr/bin/env python3\nprint('filled')\n"


def skill_md(description: str, name: str = "pdf-tools") -> bytes:
    return f"---\nname: {name}\ndescription: {description}\n---\n\nBody\n".encode()


def zipped(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture
def services(_simulator_server: SimulatorServer, tmp_path: Path) -> Services:
    return make_services(_simulator_server, database_url=sqlite_url(tmp_path / "hermes.db"))


@pytest.fixture
def skills_server(services: Services) -> Iterator[ThreadedServer]:
    with ThreadedServer(create_app(services)) as server:
        yield server


async def _sdk(server: ThreadedServer, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=server.base_url + "/v1",
        api_key=key,
        max_retries=0,
        _strict_response_validation=True,
    )


@pytest.fixture
async def alice(skills_server: ThreadedServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with await _sdk(skills_server, KEY_ALICE) as sdk:
        yield sdk


@pytest.fixture
async def bob(skills_server: ThreadedServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with await _sdk(skills_server, KEY_BOB) as sdk:
        yield sdk


async def test_a_skill_uploaded_as_a_folders_files_is_kept_and_downloadable(
    alice: openai.AsyncOpenAI,
) -> None:
    skill = await alice.skills.create(
        files=[("pdf-tools/SKILL.md", SKILL_MD), ("pdf-tools/scripts/fill.py", SCRIPT)]
    )

    assert skill.id.startswith("skill_")
    assert (skill.name, skill.description) == ("pdf-tools", "Fill in PDF forms.")
    assert (skill.default_version, skill.latest_version) == ("1", "1")
    content = await alice.skills.content.retrieve(skill.id)
    bundle = bundle_from_zip(content.content)
    assert dict(bundle.files) == {"SKILL.md": SKILL_MD, "scripts/fill.py": SCRIPT}


async def test_a_skill_uploaded_as_a_zip_is_unpacked(alice: openai.AsyncOpenAI) -> None:
    data = zipped({"pdf-tools/SKILL.md": SKILL_MD, "pdf-tools/fill.py": SCRIPT})
    skill = await alice.skills.create(files=("pdf-tools.zip", data))
    content = await alice.skills.versions.content.retrieve("1", skill_id=skill.id)
    assert set(bundle_from_zip(content.content).files) == {"SKILL.md", "fill.py"}


async def test_skills_are_retrieved_listed_updated_and_deleted(alice: openai.AsyncOpenAI) -> None:
    first = await alice.skills.create(files=[("SKILL.md", skill_md("One.", "one"))])
    second = await alice.skills.create(files=[("SKILL.md", skill_md("Two.", "two"))])

    assert (await alice.skills.retrieve(first.id)).name == "one"
    assert [s.id async for s in alice.skills.list()] == [second.id, first.id]
    assert [s.id async for s in alice.skills.list(order="asc")] == [first.id, second.id]
    page = await alice.skills.list(limit=1)
    assert [s.id for s in page.data] == [second.id]
    assert page.has_more
    await alice.skills.versions.create(first.id, files=[("SKILL.md", skill_md("One, v2.", "one"))])
    updated = await alice.skills.update(first.id, default_version="2")
    assert (updated.default_version, updated.description) == ("2", "One, v2.")
    deleted = await alice.skills.delete(first.id)
    assert (deleted.id, deleted.deleted) == (first.id, True)
    assert [s.id async for s in alice.skills.list()] == [second.id]
    with pytest.raises(openai.NotFoundError):
        await alice.skills.retrieve(first.id)


async def test_versions_are_created_listed_retrieved_and_deleted(
    alice: openai.AsyncOpenAI,
) -> None:
    skill = await alice.skills.create(files=[("SKILL.md", SKILL_MD)])
    second = await alice.skills.versions.create(
        skill.id, files=[("SKILL.md", skill_md("Now with forms."))], default=True
    )

    assert (second.version, second.skill_id, second.object) == ("2", skill.id, "skill.version")
    assert (await alice.skills.retrieve(skill.id)).default_version == "2"
    listed = [v.version async for v in alice.skills.versions.list(skill.id)]
    assert listed == ["2", "1"]
    retrieved = await alice.skills.versions.retrieve("1", skill_id=skill.id)
    assert retrieved.description == "Fill in PDF forms."
    with pytest.raises(openai.BadRequestError, match="default"):
        await alice.skills.versions.delete("2", skill_id=skill.id)
    deleted = await alice.skills.versions.delete("1", skill_id=skill.id)
    assert (deleted.version, deleted.deleted) == ("1", True)
    assert [v.version async for v in alice.skills.versions.list(skill.id)] == ["2"]


async def test_a_new_version_must_keep_the_skills_name(alice: openai.AsyncOpenAI) -> None:
    skill = await alice.skills.create(files=[("SKILL.md", SKILL_MD)])
    with pytest.raises(openai.BadRequestError, match="keep the skill's name"):
        await alice.skills.versions.create(skill.id, files=[("SKILL.md", skill_md("x", "other"))])


async def test_a_name_already_used_asks_for_a_version_instead(alice: openai.AsyncOpenAI) -> None:
    skill = await alice.skills.create(files=[("SKILL.md", SKILL_MD)])
    with pytest.raises(openai.BadRequestError, match=f"/v1/skills/{skill.id}/versions"):
        await alice.skills.create(files=[("SKILL.md", SKILL_MD)])


async def test_another_keys_skill_is_not_found(
    alice: openai.AsyncOpenAI, bob: openai.AsyncOpenAI
) -> None:
    skill = await alice.skills.create(files=[("SKILL.md", SKILL_MD)])

    for attempt in (
        bob.skills.retrieve(skill.id),
        bob.skills.delete(skill.id),
        bob.skills.update(skill.id, default_version="1"),
        bob.skills.content.retrieve(skill.id),
        bob.skills.versions.list(skill.id),
        bob.skills.versions.create(skill.id, files=[("SKILL.md", SKILL_MD)]),
    ):
        with pytest.raises(openai.NotFoundError):
            await attempt
    assert [s async for s in bob.skills.list()] == []
    assert (await alice.skills.retrieve(skill.id)).id == skill.id


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ([("SKILL.md", b"no front matter\n")], "front matter"),
        ([("SKILL.md", b"---\nname: Bad Name\ndescription: x\n---\n")], "lowercase"),
        ([("README.md", b"hello")], "SKILL.md"),
    ],
)
async def test_a_bad_skill_md_is_refused_with_the_reason(
    alice: openai.AsyncOpenAI, files: list[tuple[str, bytes]], reason: str
) -> None:
    with pytest.raises(openai.BadRequestError, match=reason) as caught:
        await alice.skills.create(files=files)
    assert caught.value.status_code == 400


@pytest.mark.parametrize(
    "value",
    ["2001-02-30", "!!timestamp 0000-01-01", "!!int x", "[" * 5000 + "]" * 5000],
    ids=["impossible-date", "year-zero", "bad-int", "deep-nesting"],
)
async def test_a_front_matter_value_yaml_cannot_build_is_a_400_not_a_500(
    alice: openai.AsyncOpenAI, value: str
) -> None:
    # YAML reads these, then fails building the value (ValueError, RecursionError).
    text = f"---\nname: odd-values\ndescription: x\nwhen: {value}\n---\n\nBody\n"
    with pytest.raises(openai.BadRequestError, match="not valid YAML"):
        await alice.skills.create(files=[("SKILL.md", text.encode())])


async def test_a_zip_bomb_is_refused(alice: openai.AsyncOpenAI) -> None:
    bomb = zipped({"SKILL.md": SKILL_MD, "bomb.bin": b"\0" * (9 * 1024 * 1024)})
    assert len(bomb) < 100_000
    with pytest.raises(openai.BadRequestError, match="at most"):
        await alice.skills.create(files=("bomb.zip", bomb))


async def test_a_zip_climbing_out_of_its_folder_is_refused(alice: openai.AsyncOpenAI) -> None:
    evil = zipped({"SKILL.md": SKILL_MD, "../../etc/cron.d/evil": b"* * * * * root sh\n"})
    with pytest.raises(openai.BadRequestError, match="climbs out"):
        await alice.skills.create(files=("evil.zip", evil))
    with pytest.raises(openai.BadRequestError, match="climbs out"):
        await alice.skills.create(files=[("SKILL.md", SKILL_MD), ("../evil.sh", b"x")])


async def test_a_file_name_no_folder_could_hold_is_refused_at_upload(
    alice: openai.AsyncOpenAI,
) -> None:
    # Kept, such a skill could never be unpacked for a run (ENAMETOOLONG): attaching it was a 500.
    for name in ("a" * 256, "scripts/" + "é" * 128 + ".py"):
        with pytest.raises(openai.BadRequestError, match="too long"):
            await alice.skills.create(files=[("SKILL.md", SKILL_MD), (name, b"x")])
        with pytest.raises(openai.BadRequestError, match="too long"):
            await alice.skills.create(
                files=("long.zip", zipped({"SKILL.md": SKILL_MD, name: b"x"}))
            )
    kept = await alice.skills.create(files=[("SKILL.md", SKILL_MD), ("a" * 255, b"x")])
    assert kept.name == "pdf-tools"


async def test_an_upload_over_a_skills_size_limit_is_413(skills_server: ThreadedServer) -> None:
    too_big = b"x" * (MAX_ZIP_BYTES + UPLOAD_ENVELOPE_BYTES + 1)
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=skills_server.base_url) as raw:
        answer = await raw.post(
            "/v1/skills",
            headers={"authorization": f"Bearer {KEY_ALICE}"},
            files=[("files", ("SKILL.md", SKILL_MD)), ("files", ("big.bin", too_big))],
        )
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "body_too_large"


async def test_a_draft_is_listed_as_one_and_offered_once_approved(
    alice: openai.AsyncOpenAI, services: Services
) -> None:
    library = services.skills
    assert isinstance(library, StoredSkills)
    bundle = bundle_from_zip(zipped({"SKILL.md": skill_md("Learnt.", "learnt")}))
    entry = await library.write("alice", bundle, origin="agent", draft=True)
    assert entry.skill_id is not None
    raw = await alice.skills.with_raw_response.retrieve(entry.skill_id)
    shown = raw.http_response.json()
    assert (shown["draft"], shown["origin"]) == (True, "agent")
    assert await library.offered("alice") == []

    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=str(alice.base_url)) as http:
        approved = await http.post(
            f"skills/{entry.skill_id}/approve", headers={"authorization": f"Bearer {KEY_ALICE}"}
        )
    assert approved.status_code == 200
    assert "draft" not in approved.json()
    assert [e.name for e in await library.offered("alice")] == ["learnt"]


async def test_an_end_user_never_sees_a_draft_learnt_from_another_end_users_run(
    alice: openai.AsyncOpenAI, services: Services
) -> None:
    # A draft is written from one run's record (its user's words) and read by a person
    # before anyone is offered it: until then it is the key's to read, not its end users'.
    library = services.skills
    assert isinstance(library, StoredSkills)
    draft = await library.write(
        "alice",
        bundle_from_zip(zipped({"SKILL.md": skill_md("Ben's.", "bens")})),
        origin="agent",
        draft=True,
    )
    shared = await alice.skills.create(files=[("SKILL.md", skill_md("Shared.", "shared"))])
    ann = alice.with_options(default_headers={"x-hermes-memory-scope": "ann"})

    assert [s.id async for s in ann.skills.list()] == [shared.id]
    assert [s.id async for s in ann.skills.list(limit=1, order="asc")] == [shared.id]
    for attempt in (
        ann.skills.retrieve(str(draft.skill_id)),
        ann.skills.content.retrieve(str(draft.skill_id)),
        ann.skills.versions.list(str(draft.skill_id)),
        ann.skills.versions.retrieve("1", skill_id=str(draft.skill_id)),
        ann.skills.versions.content.retrieve("1", skill_id=str(draft.skill_id)),
    ):
        with pytest.raises(openai.NotFoundError):
            await attempt
    assert (await ann.skills.retrieve(shared.id)).name == "shared"
    assert {s.id async for s in alice.skills.list()} == {shared.id, draft.skill_id}


async def test_a_versions_folder_is_materialised_once_and_only_for_its_owner(
    alice: openai.AsyncOpenAI, services: Services
) -> None:
    library = services.skills
    assert isinstance(library, StoredSkills)
    skill = await alice.skills.create(files=[("SKILL.md", SKILL_MD), ("fill.py", SCRIPT)])
    entry = await library.find("alice", skill.id)

    folder = await library.folder("alice", entry)
    assert (folder / "fill.py").read_bytes() == SCRIPT
    assert await library.folder("alice", entry) == folder
    with pytest.raises(LookupError):
        await library.folder("bob", entry)
    with pytest.raises(LookupError):
        await library.folder("alice", SkillEntry(name="x", description="y", origin="uploaded"))


async def test_deleting_a_skill_or_a_version_removes_its_files_from_this_host(
    alice: openai.AsyncOpenAI, services: Services
) -> None:
    library = services.skills
    assert isinstance(library, StoredSkills)
    skill = await alice.skills.create(files=[("SKILL.md", SKILL_MD), ("fill.py", SCRIPT)])
    await alice.skills.versions.create(skill.id, files=[("SKILL.md", SKILL_MD)])
    first = await library.folder("alice", await library.find("alice", skill.id, "1"))
    second = await library.folder("alice", await library.find("alice", skill.id, "2"))

    await alice.skills.versions.delete("2", skill_id=skill.id)
    assert not second.exists()
    assert (first / "fill.py").read_bytes() == SCRIPT

    await alice.skills.delete(skill.id)
    assert not first.parent.exists(), "a deleted skill's files stayed on the host"


async def test_two_requests_materialising_one_version_at_once_share_one_folder(
    alice: openai.AsyncOpenAI, services: Services
) -> None:
    library = services.skills
    assert isinstance(library, StoredSkills)
    skill = await alice.skills.create(files=[("SKILL.md", SKILL_MD), ("fill.py", SCRIPT)])
    entry = await library.find("alice", skill.id)

    folders = await asyncio.gather(*(library.folder("alice", entry) for _ in range(4)))

    assert len(set(folders)) == 1
    assert sorted(p.name for p in folders[0].parent.iterdir()) == ["1"]
    assert (folders[0] / "SKILL.md").read_bytes() == SKILL_MD


async def test_writing_a_skill_of_a_known_name_adds_its_default_version(
    alice: openai.AsyncOpenAI, services: Services
) -> None:
    library = services.skills
    assert isinstance(library, StoredSkills)
    first = await library.write(
        "alice", bundle_from_zip(zipped({"SKILL.md": SKILL_MD})), origin="agent"
    )
    better = bundle_from_zip(zipped({"SKILL.md": skill_md("Better."), "x": b""}))
    second = await library.write("alice", better, origin="agent")

    assert (second.skill_id, second.version) == (first.skill_id, "2")
    assert [(e.name, e.version, e.description) for e in await library.offered("alice")] == [
        ("pdf-tools", "2", "Better.")
    ]
    assert await library.remove("alice", "pdf-tools")
    assert await library.offered("alice") == []


async def test_a_skill_larger_than_a_request_body_may_be_is_still_uploaded(
    alice: openai.AsyncOpenAI, services: Services
) -> None:
    assets = os.urandom(6 * 1024 * 1024)  # incompressible, over the 4 MiB body limit
    assert services.max_body_bytes < len(assets)

    skill = await alice.skills.create(
        files=[("pdf-tools/SKILL.md", SKILL_MD), ("pdf-tools/assets/form.bin", assets)]
    )
    version = await alice.skills.versions.create(
        skill.id, files=[("pdf-tools/SKILL.md", SKILL_MD), ("pdf-tools/assets/form.bin", assets)]
    )

    assert version.version == "2"
    content = await alice.skills.content.retrieve(skill.id)
    assert bundle_from_zip(content.content).files["assets/form.bin"] == assets
