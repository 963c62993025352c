"""A code call's images are looked for while its run goes on: the next code call may already be
running (and writing) as the earlier call's workspace is looked at. What that next call does
must neither become the earlier call's images nor lead the look outside the workspace.

In-process: a stand-in run emits the calls' events and writes their files as a sandboxed call
would; the real look (``server/files/call_images.py``) watches it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_core.agent import AgentRequest
from hermes_core.events import AgentEvent, ToolFinished, ToolOutcome, ToolStarted
from server.files.call_images import CallImagesWatch, images_in
from server.files.workspace_changes import snapshot
from tests.server.test_code_interpreter_images import CHART, paths, png


def saved(path: Path, data: bytes) -> None:
    """Write ``path`` as a sandboxed call would, stamped with the time it was written."""
    path.write_bytes(data)
    now = time.time_ns()  # the kernel's coarse stamp may lag; a real call takes far longer
    os.utime(path, ns=(now, now))


class TwoCodeCalls:
    """A run whose model asked for two code calls in one step: the second begins (and saves
    its chart) as soon as the first has ended, before anything else runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seq = 0

    def _emit(self, deliver: Callable[[AgentEvent], object], kind: Any, **fields: Any) -> None:
        deliver(kind(run_id="run_1", seq=self.seq, **fields))
        self.seq += 1

    async def execute(self, request: AgentRequest, deliver: Callable[[AgentEvent], object]) -> None:
        for call_id, name in (("call_1", "first.png"), ("call_2", "second.png")):
            self._emit(deliver, ToolStarted, call_id=call_id, name="code", arguments={}, summary="")
            saved(self.root / name, CHART)
            self._emit(
                deliver,
                ToolFinished,
                call_id=call_id,
                name="code",
                outcome=ToolOutcome.SUCCESS,
                duration_s=0.0,
                result_preview="",
            )

    def interrupt(self, reason: str = "interrupted", **_: Any) -> None:
        pass


async def test_an_image_the_next_call_saves_while_the_last_is_looked_at_is_the_next_calls(
    tmp_path: Path,
) -> None:
    delivered: list[AgentEvent] = []
    watch = CallImagesWatch(TwoCodeCalls(tmp_path), tmp_path, conversation=None)
    await watch.execute(AgentRequest(user_message="plot twice"), delivered.append)
    images = {e.call_id: paths(e.images) for e in delivered if isinstance(e, ToolFinished)}
    assert images == {"call_1": ["first.png"], "call_2": ["second.png"]}


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
