"""A code call's images are looked for while its run goes on: the next code call may already be
running (and writing) as the earlier call's workspace is looked at. What that next call does
must neither become the earlier call's images nor lead the look outside the workspace.

In-process: a stand-in run emits the calls' events and writes their files as a sandboxed call
would; the real look (``server/files/call_images.py``) watches it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from server.files.call_images import images_in
from server.files.workspace_changes import snapshot
from tests.server.test_code_interpreter_images import CHART, png


def test_an_image_whose_folder_becomes_a_link_out_as_it_is_read_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another tenant's chart, outside this workspace, where a link could lead.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "chart.png").write_bytes(png(9, 9))
    workspace = tmp_path / "workspace"
    (workspace / "plots").mkdir(parents=True)
    began = time.time_ns()
    (workspace / "plots" / "chart.png").write_bytes(CHART)
    now = snapshot(workspace)
    opening = os.open

    def swapped_first(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        # The next code call, running meanwhile, puts a link where the folder was, between
        # the look's check of the path and its open.
        if str(path).endswith("plots/chart.png") and not (workspace / "plots").is_symlink():
            (workspace / "plots").rename(workspace / "was-plots")
            (workspace / "plots").symlink_to(elsewhere)
        return opening(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swapped_first)
    found = images_in(workspace, now, began, None, inline=True)
    assert [image.data for image in found] == []
