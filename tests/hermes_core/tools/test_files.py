"""The files toolset on a real directory: what each tool does, and that no path leaves the
workspace (``..``, absolute paths, symlinks)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hermes_core.tools.files import (
    MAX_LISTED,
    MAX_RESULT_CHARS,
    edit_file,
    file_tools,
    list_files,
    read_file,
    search_files,
    write_file,
)
from hermes_core.tools.registry import ToolContext


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the workspace that no tool may read or change."""
    path = tmp_path / "shadow"
    path.write_text("root:secret-hash:19000:0:99999:7:::\n")
    return path


def context(workspace: Path | None) -> ToolContext:
    return ToolContext(
        run_id="r", task_id="t", call_id="c", is_interrupted=lambda: False, workspace=workspace
    )


def call(tool: Any, workspace: Path | None, **arguments: Any) -> str:
    result: str = tool(arguments, context(workspace))
    return result


# --- reading --------------------------------------------------------------------------------


def test_read_numbers_lines_and_pages_through_a_long_file(workspace: Path) -> None:
    (workspace / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    assert call(read_file, workspace, path="a.txt", offset=3, limit=2) == (
        "3\tline 3\n4\tline 4\n[… showing lines 3–4 of 10; read on with offset=5]"
    )
    assert call(read_file, workspace, path="a.txt", offset=9).splitlines() == [
        " 9\tline 9",
        "10\tline 10",
    ]


def test_read_refuses_an_offset_past_the_end(workspace: Path) -> None:
    (workspace / "a.txt").write_text("one\ntwo\n")
    assert call(read_file, workspace, path="a.txt", offset=5).startswith("Error: a.txt has 2")


def test_a_binary_file_is_described_not_dumped(workspace: Path) -> None:
    (workspace / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(100))
    assert call(read_file, workspace, path="image.png") == (
        "[image.png is a binary file of 116 bytes; it is not shown as text.]"
    )


def test_a_huge_file_is_cut_with_a_marker_saying_how_to_read_on(workspace: Path) -> None:
    (workspace / "big.txt").write_text("x" * 1000 + "\n" * 0 + ("y" * 100 + "\n") * 5000)
    result = call(read_file, workspace, path="big.txt")
    assert len(result) <= MAX_RESULT_CHARS + 200
    assert result.splitlines()[-1].startswith("[… showing lines 1–")
    assert "read on with offset=" in result


def test_reading_a_missing_file_says_so(workspace: Path) -> None:
    assert call(read_file, workspace, path="nope.txt").startswith("Error: no such file")


# --- writing and editing --------------------------------------------------------------------


def test_write_creates_directories_and_says_what_it_did(workspace: Path) -> None:
    assert call(write_file, workspace, path="out/report.md", content="# Hi\n") == (
        "Created out/report.md (5 bytes)."
    )
    assert (workspace / "out" / "report.md").read_text() == "# Hi\n"
    assert call(write_file, workspace, path="out/report.md", content="x").startswith("Overwrote")


def test_an_exact_edit_replaces_the_one_match(workspace: Path) -> None:
    (workspace / "app.py").write_text("def f():\n    return 1\n")
    result = call(edit_file, workspace, path="app.py", old_text="return 1", new_text="return 2")
    assert result == "Edited app.py: replaced 1 occurrence."
    assert (workspace / "app.py").read_text() == "def f():\n    return 2\n"


def test_an_edit_whose_text_is_missing_says_how_to_fix_it(workspace: Path) -> None:
    (workspace / "app.py").write_text("def f():\n    return 1\n")
    result = call(edit_file, workspace, path="app.py", old_text="Return  1", new_text="x")
    assert result.startswith("Error: old_text was not found in app.py")
    assert "case or whitespace" in result
    assert (workspace / "app.py").read_text() == "def f():\n    return 1\n"


def test_an_ambiguous_edit_is_refused_with_the_lines_it_matched(workspace: Path) -> None:
    (workspace / "a.txt").write_text("x = 1\ny = 2\nx = 1\n")
    refused = call(edit_file, workspace, path="a.txt", old_text="x = 1", new_text="x = 3")
    assert refused.startswith("Error: old_text occurs 2 times in a.txt (lines 1, 3)")
    assert (workspace / "a.txt").read_text() == "x = 1\ny = 2\nx = 1\n"
    done = call(
        edit_file, workspace, path="a.txt", old_text="x = 1", new_text="x = 3", replace_all=True
    )
    assert done == "Edited a.txt: replaced 2 occurrences."
    assert (workspace / "a.txt").read_text() == "x = 3\ny = 2\nx = 3\n"


# --- listing and searching ------------------------------------------------------------------


def test_list_matches_a_glob_recursively_with_sizes(workspace: Path) -> None:
    (workspace / "data").mkdir()
    (workspace / "data" / "a.csv").write_text("1,2\n")
    (workspace / "data" / "b.txt").write_text("hello")
    (workspace / "c.csv").write_text("")
    assert call(list_files, workspace, pattern="*.csv") == "c.csv\t0 bytes\ndata/a.csv\t4 bytes"
    assert call(list_files, workspace, pattern="*.json").startswith("No files match")


def test_a_long_listing_is_cut_with_a_marker(workspace: Path) -> None:
    for number in range(MAX_LISTED + 7):
        (workspace / f"f{number:04}.txt").write_text("")
    listing = call(list_files, workspace).splitlines()
    assert len(listing) == MAX_LISTED + 1
    assert listing[-1] == "[… 7 more; narrow the pattern or the path]"


def test_search_finds_lines_by_regular_expression(workspace: Path) -> None:
    (workspace / "a.py").write_text("import os\nTOTAL = 3\n")
    (workspace / "b.md").write_text("total: 3\n")
    assert (
        call(search_files, workspace, pattern=r"(?i)^total")
        == "a.py:2: TOTAL = 3\nb.md:1: total: 3"
    )
    assert call(search_files, workspace, pattern="TOTAL", glob="*.md").startswith("No line")
    assert call(search_files, workspace, pattern="(").startswith("Error: '(' is not a valid")


# --- confinement ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["../shadow", "a/../../shadow", "/etc/passwd", "", "a\x00b", "x" * 2000]
)
def test_paths_outside_the_workspace_are_refused(workspace: Path, path: str) -> None:
    for tool, extra in (
        (read_file, {}),
        (write_file, {"content": "owned"}),
        (edit_file, {"old_text": "root", "new_text": "owned"}),
        (list_files, {}),
    ):
        arguments = {"path": path, **extra}
        assert call(tool, workspace, **arguments).startswith("Error:")


def test_a_symlink_leading_outside_is_refused_for_every_tool(workspace: Path, secret: Path) -> None:
    os.symlink(secret, workspace / "innocent.txt")
    os.symlink(secret.parent, workspace / "linked_dir")
    assert "outside the workspace" in call(read_file, workspace, path="innocent.txt")
    assert "outside the workspace" in call(read_file, workspace, path="linked_dir/shadow")
    assert call(write_file, workspace, path="innocent.txt", content="owned").startswith("Error:")
    edit = call(edit_file, workspace, path="innocent.txt", old_text="root", new_text="owned")
    assert edit.startswith("Error:")
    assert "secret-hash" not in call(search_files, workspace, pattern="root")
    assert "shadow" not in call(list_files, workspace)
    assert secret.read_text() == "root:secret-hash:19000:0:99999:7:::\n"


def test_a_symlink_inside_the_workspace_is_followed(workspace: Path) -> None:
    (workspace / "real.txt").write_text("inside\n")
    os.symlink(workspace / "real.txt", workspace / "alias.txt")
    assert call(read_file, workspace, path="alias.txt") == "1\tinside"


def test_without_a_workspace_the_tools_say_so() -> None:
    assert "no workspace" in call(read_file, None, path="a.txt")


def test_tools_that_write_are_not_run_concurrently() -> None:
    flags = {tool.name: tool.concurrent_safe for tool in file_tools()}
    assert flags == {
        "read_file": True,
        "write_file": False,
        "edit_file": False,
        "list_files": True,
        "search_files": True,
    }
