"""The files toolset on a real directory: what each tool does, and that no path leaves the
workspace (``..``, absolute paths, symlinks)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from hermes_core.tools import file_scan
from hermes_core.tools.file_scan import CHUNK_BYTES
from hermes_core.tools.files import (
    MAX_EDIT_BYTES,
    MAX_LINE_CHARS,
    MAX_LISTED,
    MAX_RESULT_CHARS,
    READ_LINES,
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


def test_a_symlink_loop_is_refused_without_naming_the_servers_paths(workspace: Path) -> None:
    # Path.resolve raised RuntimeError("Symlink loop from '/data/workspaces/…'"), which the
    # tool's caller showed the model whole: where the server keeps every tenant's files.
    os.symlink("b", workspace / "a")
    os.symlink("a", workspace / "b")
    results = [
        call(read_file, workspace, path="a"),
        call(read_file, workspace, path="a/x.txt"),
        call(write_file, workspace, path="a/x.txt", content="x"),
        call(list_files, workspace, path="a"),
        call(search_files, workspace, pattern="x", path="a"),
    ]
    for result in results:
        assert result.startswith("Error: 'a"), result
        assert "loop" in result, result
        assert str(workspace) not in result, result


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


# --- bounded work: nothing a model writes can hold a shared thread or the server's memory ---


def test_a_pattern_re2_cannot_run_is_refused_saying_what_re2_lacks(workspace: Path) -> None:
    (workspace / "a.txt").write_text("abab\n")
    refused = call(search_files, workspace, pattern=r"(ab)\1")
    assert refused.startswith(r"Error: '(ab)\1' uses what RE2 does not support")
    assert "no backreferences" in refused
    assert "lookaround" in call(search_files, workspace, pattern="a(?=b)")


def test_a_catastrophic_pattern_is_matched_in_linear_time(workspace: Path) -> None:
    (workspace / "a.txt").write_text("a" * 40 + "!\n" + "a" * 40 + "\n")
    started = time.monotonic()
    assert call(search_files, workspace, pattern="(a+)+$") == f"a.txt:2: {'a' * 40}"
    assert time.monotonic() - started < 5  # Python's re takes hours on this


def test_a_pattern_too_large_to_match_quickly_is_refused(workspace: Path) -> None:
    (workspace / "a.txt").write_text("ab\n")
    refused = call(search_files, workspace, pattern="[ab]{1000}[ab]{1000}c")
    assert refused.startswith("Error: '[ab]{1000}[ab]{1000}c' is too large to search with")


def _in_a_thread(tool: Any, workspace: Path, **arguments: Any) -> str:
    """The call's result, or a failure (not a hang) if it blocks."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call, tool, workspace, **arguments).result(timeout=10)


def test_a_fifo_is_refused_by_every_tool_without_waiting_for_a_writer(workspace: Path) -> None:
    os.mkfifo(workspace / "g1")
    (workspace / "plain.txt").write_text("g1 here\n")
    for tool, extra in (
        (read_file, {}),
        (write_file, {"content": "x"}),
        (edit_file, {"old_text": "a", "new_text": "b"}),
    ):
        result = _in_a_thread(tool, workspace, path="g1", **extra)
        assert result.startswith("Error: 'g1' is not a regular file (a FIFO"), result
    assert _in_a_thread(list_files, workspace) == "plain.txt\t8 bytes"
    assert _in_a_thread(search_files, workspace, pattern="g1") == "plain.txt:1: g1 here"


def test_a_huge_file_gives_its_first_page_without_being_read_whole(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    huge = workspace / "huge.log"
    with huge.open("wb") as file:
        file.write(b"".join(b"event %d\n" % n for n in range(1, 200_001)))
        file.truncate(10 * 1024**3)  # 10 GiB, sparse: more than the machine's memory
    read = []
    real_read = os.read

    def counted(descriptor: int, size: int) -> bytes:
        data = real_read(descriptor, size)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counted)  # file_scan reads with os.read
    result = call(read_file, workspace, path="huge.log")
    lines = result.splitlines()
    assert lines[0] == "   1\tevent 1"
    assert lines[READ_LINES - 1] == f"{READ_LINES}\tevent {READ_LINES}"
    assert lines[-1] == (
        f"[… showing lines 1–{READ_LINES} of a longer file ({10 * 1024**3} bytes); "
        f"read on with offset={READ_LINES + 1}]"
    )
    assert sum(read) <= 2 * CHUNK_BYTES


def test_a_line_longer_than_a_chunk_is_shown_and_searched_by_its_start(workspace: Path) -> None:
    (workspace / "one.txt").write_bytes(b"start " + b"x" * (3 * CHUNK_BYTES) + b" end\nnext\n")
    shown = call(read_file, workspace, path="one.txt").splitlines()
    assert (
        shown[0]
        == f"1\tstart {'x' * (MAX_LINE_CHARS - 6)}… [line cut: {3 * CHUNK_BYTES + 10} bytes]"
    )
    assert shown[1] == "2\tnext"
    assert call(search_files, workspace, pattern="^start").startswith("one.txt:1: start x")
    assert call(search_files, workspace, pattern="end$").startswith("No line matches")


def test_lines_are_whole_and_numbered_across_chunk_boundaries(workspace: Path) -> None:
    text = b"alpha\nbe\n\ngamma-long-line\nd"
    (workspace / "t.txt").write_bytes(text)
    descriptor = os.open(workspace / "t.txt", os.O_RDONLY)
    try:
        blocks = list(file_scan.line_blocks(descriptor, file_scan.Budget(), chunk=4))
    finally:
        os.close(descriptor)
    lines = [
        (block.first_line + index, line, block.cut.get(block.first_line + index))
        for block in blocks
        for index, line in enumerate(block.data.split(b"\n")[:-1])
    ]
    assert lines == [
        (1, b"alph", 5),
        (2, b"be", None),
        (3, b"", None),
        (4, b"gamm", 15),
        (5, b"d", None),
    ]


def test_a_search_stops_with_what_it_found_when_its_run_is_interrupted(workspace: Path) -> None:
    (workspace / "a.txt").write_text("hit\n")
    interrupted = ToolContext(
        run_id="r", task_id="t", call_id="c", is_interrupted=lambda: True, workspace=workspace
    )
    result = search_files({"pattern": "hit"}, interrupted)
    assert result == (
        "[search stopped early: the run was interrupted; narrow the pattern, the path or the glob]"
    )


def test_a_file_too_large_to_edit_is_refused_with_its_size(workspace: Path) -> None:
    with (workspace / "big.txt").open("wb") as file:
        file.write(b"text\n")
        file.truncate(MAX_EDIT_BYTES + 1)
    refused = call(edit_file, workspace, path="big.txt", old_text="text", new_text="t")
    assert refused.startswith(f"Error: 'big.txt' has {MAX_EDIT_BYTES + 1} bytes; edit_file")


def test_file_tools_have_a_deadline() -> None:
    assert all(tool.timeout for tool in file_tools())
