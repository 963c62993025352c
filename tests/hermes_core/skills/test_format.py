"""The checks every skill passes before it is kept or written: the SKILL.md, paths, limits."""

from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

import pytest

from hermes_core.skills.format import (
    MAX_SKILL_BYTES,
    MAX_SKILL_FILES,
    SkillError,
    bundle_from_files,
    bundle_from_zip,
    bundle_to_zip,
    checked_bundle,
    parse_skill_md,
    read_skill_folder,
    skill_markdown,
    write_bundle,
)
from hermes_core.skills.library import SkillBundle

SKILL_MD = (
    b"---\nname: pdf-tools\ndescription: Fill in PDF forms.\nlicense: MIT\n---\n\n"
    b"# PDF\nRun scripts/fill.py\n"
)


def zipped(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_parse_reads_name_description_body_and_other_keys() -> None:
    manifest = parse_skill_md(SKILL_MD.decode())
    assert (manifest.name, manifest.description) == ("pdf-tools", "Fill in PDF forms.")
    assert manifest.body.startswith("# PDF")
    assert manifest.metadata == {"license": "MIT"}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("# no front matter\n", "front matter"),
        ("---\nname: a\ndescription: b\n", "closing"),
        ("---\nname: [a\n---\n", "YAML"),
        ("---\n- a\n---\n", "mapping"),
        ("---\ndescription: b\n---\n", "'name'"),
        ("---\nname: Bad_Name\ndescription: b\n---\n", "lowercase"),
        ("---\nname: -lead\ndescription: b\n---\n", "lowercase"),
        ("---\nname: " + "a" * 65 + "\ndescription: b\n---\n", "64"),
        ("---\nname: ok\n---\n", "'description'"),
        ("---\nname: ok\ndescription: " + "d" * 1025 + "\n---\n", "1024"),
    ],
)
def test_parse_rejects_a_bad_skill_md_saying_why(text: str, reason: str) -> None:
    with pytest.raises(SkillError, match=reason):
        parse_skill_md(text)


def test_skill_markdown_parses_back() -> None:
    text = skill_markdown("my-skill", "Does: things, 'quoted'", "Body\n")
    manifest = parse_skill_md(text)
    assert (manifest.name, manifest.description, manifest.body) == (
        "my-skill",
        "Does: things, 'quoted'",
        "Body\n",
    )


def test_files_in_one_top_folder_are_taken_as_the_skill() -> None:
    bundle = bundle_from_files([("pdf/SKILL.md", SKILL_MD), ("pdf/scripts/fill.py", b"print(1)\n")])
    assert bundle.name == "pdf-tools"
    assert set(bundle.files) == {"SKILL.md", "scripts/fill.py"}


def test_a_single_zip_upload_is_unpacked() -> None:
    data = zipped({"pdf/SKILL.md": SKILL_MD, "pdf/__MACOSX/x": b"", "pdf/a/b.txt": b"b"})
    bundle = bundle_from_files([("pdf.zip", data)])
    assert set(bundle.files) == {"SKILL.md", "a/b.txt"}


@pytest.mark.parametrize(
    "path", ["../evil", "a/../../evil", "/etc/passwd", "C:/x", "a\\b", "a\x00b"]
)
def test_paths_outside_the_folder_are_refused(path: str) -> None:
    with pytest.raises(SkillError):
        bundle_from_files([("SKILL.md", SKILL_MD), (path, b"x")])


def test_a_path_no_disk_could_hold_is_refused() -> None:
    # A model's JSON spells lone surrogates; a file named with one cannot be written.
    with pytest.raises(SkillError, match="may not hold"):
        checked_bundle(
            SkillBundle(name="x", description="y", files={"SKILL.md": SKILL_MD, "a\ud800": b"x"})
        )
    with pytest.raises(SkillError, match="too long"):
        bundle_from_files([("SKILL.md", SKILL_MD), ("x" * 256, b"x")])


def test_a_zip_with_traversal_is_refused() -> None:
    with pytest.raises(SkillError, match="climbs out"):
        bundle_from_zip(zipped({"SKILL.md": SKILL_MD, "../../etc/cron": b"x"}))


def test_a_zip_with_a_symlink_is_refused() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("SKILL.md", SKILL_MD)
        link = zipfile.ZipInfo("link")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
    with pytest.raises(SkillError, match="symbolic link"):
        bundle_from_zip(buffer.getvalue())


def test_a_zip_bomb_is_refused_on_its_declared_size() -> None:
    data = zipped({"SKILL.md": SKILL_MD, "bomb": b"\0" * (MAX_SKILL_BYTES + 1)})
    with pytest.raises(SkillError, match="at most"):
        bundle_from_zip(data)


def test_a_zip_bomb_that_lies_about_its_size_is_refused_on_what_it_unpacks() -> None:
    data = bytearray(zipped({"SKILL.md": SKILL_MD, "bomb": b"\0" * 100_000}))
    # Rewrite the declared size of "bomb" (local header and central directory) to 10 bytes.
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        start = 0
        while (at := data.find(signature, start)) != -1:
            name_at = at + (30 if signature == b"PK\x03\x04" else 46)
            if data[name_at : name_at + 4] == b"bomb":
                data[at + offset : at + offset + 4] = (10).to_bytes(4, "little")
            start = at + 4
    with pytest.raises(SkillError):
        bundle_from_zip(bytes(data))


def test_too_many_files_are_refused() -> None:
    files = [("SKILL.md", SKILL_MD)] + [(f"f{i}", b"") for i in range(MAX_SKILL_FILES)]
    with pytest.raises(SkillError, match="at most"):
        bundle_from_files(files)
    with pytest.raises(SkillError, match="at most"):
        bundle_from_zip(zipped(dict(files)))


def test_not_a_zip_is_refused() -> None:
    with pytest.raises(SkillError, match="not a readable zip"):
        bundle_from_files([("skill.zip", b"not a zip")])


def test_a_missing_skill_md_is_refused() -> None:
    with pytest.raises(SkillError, match=r"SKILL\.md"):
        bundle_from_files([("README.md", b"hi")])


def test_bundle_to_zip_is_deterministic_and_round_trips() -> None:
    bundle = bundle_from_files([("SKILL.md", SKILL_MD), ("scripts/run.sh", b"#!/bin/sh\n")])
    data = bundle_to_zip(bundle)
    assert data == bundle_to_zip(
        SkillBundle(
            name=bundle.name,
            description=bundle.description,
            files=dict(reversed(list(bundle.files.items()))),
        )
    )
    assert bundle_from_zip(data) == bundle


def test_read_skill_folder_and_write_bundle_round_trip(tmp_path: Path) -> None:
    source = tmp_path / "pdf-tools"
    (source / "scripts").mkdir(parents=True)
    (source / "SKILL.md").write_bytes(SKILL_MD)
    (source / "scripts" / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (source / ".git").mkdir()
    (source / ".git" / "HEAD").write_bytes(b"ref")
    bundle = read_skill_folder(source)
    assert set(bundle.files) == {"SKILL.md", "scripts/run.sh"}
    target = tmp_path / "out" / "pdf-tools"
    write_bundle(bundle, target)
    assert read_skill_folder(target) == bundle
    assert (target / "scripts" / "run.sh").stat().st_mode & 0o111
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["pdf-tools"]
    with pytest.raises(FileExistsError):
        write_bundle(bundle, target)


def test_read_skill_folder_refuses_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "SKILL.md").write_bytes(SKILL_MD)
    (tmp_path / "secret").symlink_to("/etc/passwd")
    with pytest.raises(SkillError, match="not a plain file"):
        read_skill_folder(tmp_path)


def test_write_bundle_refuses_an_unclean_path(tmp_path: Path) -> None:
    bundle = SkillBundle(name="x", description="y", files={"SKILL.md": SKILL_MD, "../x": b""})
    with pytest.raises(SkillError):
        write_bundle(bundle, tmp_path / "skill")
    assert list(tmp_path.iterdir()) == []
