"""Which files a run created or changed in its workspace, reported on its ending."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from hermes_core.agent import AgentRequest
from hermes_core.events import (
    AgentEvent,
    ExitReason,
    InterruptSource,
    RunFinished,
    TextDelta,
    WorkspaceFile,
)
from hermes_core.usage import Usage
from server.files.workspace_changes import (
    WorkspaceWatch,
    changes,
    read_container_record,
    snapshot,
)


def test_changes_are_new_files_and_files_of_another_size_or_time(tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_text("same")
    (tmp_path / "edited.txt").write_text("one")
    (tmp_path / "node_modules").mkdir()
    before = snapshot(tmp_path)

    (tmp_path / "edited.txt").write_text("two!")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "chart.png").write_bytes(b"png")
    (tmp_path / "node_modules" / "dep.js").write_text("skipped")
    os.symlink("/etc/passwd", tmp_path / "link")

    assert changes(before, snapshot(tmp_path)) == [
        WorkspaceFile(path="edited.txt", bytes=4, created=False),
        WorkspaceFile(path="out/chart.png", bytes=3, created=True),
    ]


def test_a_missing_workspace_has_no_files(tmp_path: Path) -> None:
    assert snapshot(tmp_path / "none") == {}


class _Writer:
    """A runnable that writes a file, says something, then ends."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def execute(self, request: AgentRequest, deliver: Callable[[AgentEvent], object]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "made.txt").write_text("hello")
        deliver(TextDelta("run_1", 0, text="done"))
        deliver(
            RunFinished(
                "run_1",
                1,
                exit_reason=ExitReason.COMPLETED,
                final_text="done",
                iterations=1,
                usage=Usage(),
                model_calls=1,
            )
        )

    def interrupt(
        self, reason: str = "interrupted", *, source: InterruptSource = InterruptSource.OTHER
    ) -> None:
        pass


async def test_the_watched_runs_ending_names_the_files_it_made(tmp_path: Path) -> None:
    root = tmp_path / "owner" / ("a" * 32)
    seen: list[AgentEvent] = []

    await WorkspaceWatch(_Writer(root), root, "report").execute(AgentRequest(), seen.append)

    assert [type(e) for e in seen] == [TextDelta, RunFinished]
    ending = seen[-1]
    assert isinstance(ending, RunFinished)
    assert ending.files == [WorkspaceFile(path="made.txt", bytes=5, created=True)]
    assert read_container_record(root)["name"] == "report"
