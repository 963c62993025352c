"""Removing a workspace from disk (deleting a conversation or container, retention, erasure,
a run's temporary workspace): what its commands left read-only goes too, and a link in it
is removed, never followed out of it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from server.files.removal import remove_tree, remove_workspace
from server.files.workspace_changes import container_record


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores read-only modes")
def test_a_workspace_with_read_only_leftovers_is_removed_whole(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    locked = workspace / "cache" / "locked"
    locked.mkdir(parents=True)
    (locked / "data.bin").write_bytes(b"x")
    os.chmod(locked, stat.S_IRUSR | stat.S_IXUSR)  # as `chmod -w` in a command leaves it
    os.chmod(workspace / "cache", stat.S_IRUSR | stat.S_IXUSR)

    assert remove_tree(workspace)

    assert not workspace.exists()


def test_a_link_out_of_the_workspace_is_removed_and_its_target_kept(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "escape").symlink_to(outside, target_is_directory=True)
    container_record(workspace).write_text("{}")

    assert remove_workspace(workspace)

    assert not workspace.exists()
    assert (outside / "keep.txt").read_text() == "mine"
    assert not container_record(workspace).exists()


def test_a_workspace_that_is_a_link_is_unlinked_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    workspace = tmp_path / "workspace"
    workspace.symlink_to(outside, target_is_directory=True)

    assert remove_tree(workspace)

    assert not workspace.is_symlink()
    assert (outside / "keep.txt").read_text() == "mine"


def test_removing_a_workspace_that_is_not_there_says_so(tmp_path: Path) -> None:
    assert not remove_tree(tmp_path / "never-made")
