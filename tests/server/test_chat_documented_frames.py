"""Every structured progress a chat stream sends (``delta.hermes``) is the documented shape for
its ``type``, key for key: a client generating types from the OpenAPI document can read it."""

from __future__ import annotations

from typing import Any

from hermes_core.events import (
    AgentEvent,
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    PlanMade,
    ToolFinished,
    ToolOutcome,
    ToolProgress,
    ToolStarted,
)
from server.protocol.schemas.chat import (
    ApprovalProgress,
    ChatCompletionChunk,
    PlanProgress,
)
from server.protocol.schemas.chat import ToolProgress as ToolProgressShape
from server.views.chat import ChatStreamView

RUN = "run_1"
SHAPES: dict[str, Any] = {
    "tool": ToolProgressShape,
    "approval": ApprovalProgress,
    "plan": PlanProgress,
}


def _events() -> list[AgentEvent]:
    return [
        PlanMade(run_id=RUN, seq=1, steps=["look", "answer"]),
        ToolStarted(
            run_id=RUN, seq=2, call_id="c1", name="shell", arguments={"cmd": "ls"}, summary="ls"
        ),
        ToolProgress(run_id=RUN, seq=3, call_id="c1", name="shell", output="a.txt\n"),
        ToolFinished(
            run_id=RUN,
            seq=4,
            call_id="c1",
            name="shell",
            outcome=ToolOutcome.SUCCESS,
            duration_s=0.01,
            result_preview="a.txt",
        ),
        ApprovalRequested(
            run_id=RUN,
            seq=5,
            approval_id="ap_1",
            call_id="c2",
            name="shell",
            arguments={"cmd": "rm -r x"},
            reason="deletes files recursively",
        ),
        ApprovalResolved(
            run_id=RUN,
            seq=6,
            approval_id="ap_1",
            call_id="c2",
            name="shell",
            decision=ApprovalDecision.EXPIRED,
        ),
    ]


def test_each_structured_progress_is_its_documented_shape_key_for_key() -> None:
    view = ChatStreamView(completion_id="chatcmpl-1", model="m", created=1)
    seen = set()
    for event in _events():
        for frame in view.handle(event):
            ChatCompletionChunk.model_validate(frame)
            progress = frame["choices"][0]["delta"]["hermes"]  # type: ignore[typeddict-item]
            shape = SHAPES[progress["type"]]
            shape.model_validate(progress)
            assert set(progress) <= set(shape.model_fields), progress["type"]
            seen.add((progress["type"], progress.get("phase")))
    assert seen == {
        ("plan", None),
        ("tool", "started"),
        ("tool", "progress"),
        ("tool", "finished"),
        ("approval", "requested"),
        ("approval", "resolved"),
    }
