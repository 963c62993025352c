"""Measuring workspaces and holding them to their quotas (no sandbox needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_core.tools.quota import (
    MIB,
    QuotaExceeded,
    UsageBook,
    WorkspaceQuota,
    admit_write,
    assess,
    bound_to,
    measure,
)

ROOMY_DISK = WorkspaceQuota(reserve_bytes=0, reserve_fraction=0.0)


def fill(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def key_dir(tmp_path: Path) -> Path:
    return tmp_path / "workspaces" / "owner"


def test_measure_counts_allocated_bytes_and_every_entry(tmp_path: Path) -> None:
    fill(tmp_path / "a.bin", 3 * MIB)
    fill(tmp_path / "sub" / "b.bin", MIB)
    usage = measure(tmp_path, max_files=100)
    assert usage.files == 3  # two files and a directory
    assert 4 * MIB <= usage.bytes < 4 * MIB + 64 * 1024
    assert usage.complete


def test_a_sparse_file_counts_what_it_takes_not_what_it_claims(tmp_path: Path) -> None:
    with (tmp_path / "sparse").open("wb") as file:
        file.truncate(10 * 1024 * MIB)
    assert measure(tmp_path, max_files=10).bytes < MIB


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    fill(tmp_path / "outside" / "big.bin", 2 * MIB)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "link").symlink_to(tmp_path / "outside")
    usage = measure(tmp_path / "ws", max_files=10)
    assert usage.files == 1
    assert usage.bytes < MIB


def test_hard_links_are_counted_once(tmp_path: Path) -> None:
    fill(tmp_path / "a.bin", 2 * MIB)
    os.link(tmp_path / "a.bin", tmp_path / "b.bin")
    assert measure(tmp_path, max_files=10).bytes < 3 * MIB


def test_the_walk_stops_past_the_file_cap(tmp_path: Path) -> None:
    for n in range(50):
        (tmp_path / f"f{n}").touch()
    usage = measure(tmp_path, max_files=10)
    assert usage.files == 11
    assert not usage.complete


def test_a_missing_workspace_holds_nothing(tmp_path: Path) -> None:
    assert measure(tmp_path / "nowhere", max_files=10).bytes == 0


def test_a_workspace_over_its_quota_is_full_and_says_so(tmp_path: Path) -> None:
    workspace = key_dir(tmp_path) / "conversation"
    fill(workspace / "big.bin", 3 * MIB)
    quota = WorkspaceQuota(workspace_bytes=2 * MIB, reserve_bytes=0)
    verdict = assess(workspace, quota, book=UsageBook())
    assert verdict.full
    assert verdict.room < 0
    assert verdict.problem is not None
    assert verdict.problem.startswith("the workspace exceeded its quota of 2 MB (3")


def test_room_is_the_least_of_the_workspace_and_the_key(tmp_path: Path) -> None:
    keys = key_dir(tmp_path)
    fill(keys / "other" / "big.bin", 5 * MIB)
    fill(keys / "mine" / "small.bin", MIB)
    quota = WorkspaceQuota(workspace_bytes=4 * MIB, key_bytes=8 * MIB, reserve_bytes=0)
    verdict = assess(keys / "mine", quota, book=UsageBook())
    assert not verdict.full
    assert 1.5 * MIB < verdict.room <= 2 * MIB  # 8 MB for the key, 6 MB of it taken


def test_a_key_over_its_total_is_full_in_every_workspace(tmp_path: Path) -> None:
    keys = key_dir(tmp_path)
    fill(keys / "a" / "f", 3 * MIB)
    fill(keys / "b" / "f", 3 * MIB)
    quota = WorkspaceQuota(workspace_bytes=4 * MIB, key_bytes=5 * MIB, reserve_bytes=0)
    verdict = assess(keys / "c", quota, book=UsageBook())
    assert verdict.problem is not None
    assert verdict.problem.startswith("this key's workspaces together exceeded their quota")


def test_a_key_total_uses_remembered_figures_of_the_other_workspaces(tmp_path: Path) -> None:
    keys = key_dir(tmp_path)
    fill(keys / "other" / "f", 3 * MIB)
    book = UsageBook()
    quota = WorkspaceQuota(key_bytes=100 * MIB, reserve_bytes=0)
    first = assess(keys / "mine", quota, book=book)
    fill(keys / "other" / "g", 3 * MIB)  # not seen until its figure is stale
    second = assess(keys / "mine", quota, book=book)
    assert second.room == first.room


def test_too_many_files_is_full(tmp_path: Path) -> None:
    workspace = key_dir(tmp_path) / "conversation"
    workspace.mkdir(parents=True)
    for n in range(20):
        (workspace / f"f{n}").touch()
    verdict = assess(workspace, WorkspaceQuota(max_files=10, reserve_bytes=0), book=UsageBook())
    assert verdict.problem == "the workspace holds more than 10 files, the most it may"


def test_the_volume_keeps_its_reserve(tmp_path: Path) -> None:
    workspace = key_dir(tmp_path) / "conversation"
    quota = WorkspaceQuota(reserve_bytes=1 << 60, reserve_fraction=1.0)  # more than any disk
    verdict = assess(workspace, quota, book=UsageBook())
    assert verdict.problem is not None
    assert "disk is nearly full" in verdict.problem


def test_a_write_that_would_pass_the_quota_is_refused(tmp_path: Path) -> None:
    workspace = key_dir(tmp_path) / "conversation"
    fill(workspace / "a.bin", MIB)
    quota = WorkspaceQuota(workspace_bytes=2 * MIB, reserve_bytes=0)
    admit_write(workspace, MIB // 2, quota=quota)
    with pytest.raises(QuotaExceeded) as refused:
        admit_write(workspace, 2 * MIB, quota=quota)
    assert "would exceed its quota of 2 MB" in str(refused.value.strerror)
    assert str(refused.value.strerror).endswith("delete files to go on")


def test_a_write_replacing_a_file_counts_only_what_it_adds(tmp_path: Path) -> None:
    workspace = key_dir(tmp_path) / "conversation"
    fill(workspace / "a.bin", int(1.5 * MIB))
    quota = WorkspaceQuota(workspace_bytes=2 * MIB, reserve_bytes=0)
    admit_write(workspace, int(1.6 * MIB), replacing=workspace / "a.bin", quota=quota)


def test_a_bound_handler_writes_under_its_quota(tmp_path: Path) -> None:
    workspace = key_dir(tmp_path) / "conversation"
    fill(workspace / "a.bin", MIB)
    tight = WorkspaceQuota(workspace_bytes=MIB, reserve_bytes=0)

    def handler(arguments: dict[str, object], ctx: object) -> str:
        admit_write(workspace, 10)
        return "written"

    with pytest.raises(QuotaExceeded):
        bound_to(handler, tight)({}, None)
    assert bound_to(handler, ROOMY_DISK)({}, None) == "written"
