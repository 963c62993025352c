"""The two kinds of item whose text streams in parts — ``message`` (``output_text`` parts) and
``reasoning`` (``summary_text`` parts) — and the events that open, grow and close a part."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Frame = dict[str, Any]


@dataclass(frozen=True, slots=True)
class StreamedKind:
    """How one kind of streamed item (message or reasoning) holds its parts and names their
    events."""

    type: str
    id_prefix: str
    parts: str
    """The item's list of parts (``content`` or ``summary``), indexed by ``<parts>_index``."""
    part_events: str
    """``<part_events>.added`` / ``.done`` bracket a part."""
    text_events: str
    """``<text_events>.delta`` / ``.done`` carry its text."""
    empty_part: dict[str, Any]
    text_extra: dict[str, Any]
    """Fields the text events also carry."""

    def new_item(self, item_id: str) -> dict[str, Any]:
        head = {"type": self.type, "id": item_id, "status": "in_progress"}
        if self.type == "message":
            head["role"] = "assistant"
        return {**head, self.parts: []}


MESSAGE = StreamedKind(
    type="message",
    id_prefix="msg",
    parts="content",
    part_events="response.content_part",
    text_events="response.output_text",
    empty_part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
    text_extra={"logprobs": []},
)
REASONING = StreamedKind(
    type="reasoning",
    id_prefix="rs",
    parts="summary",
    part_events="response.reasoning_summary_part",
    text_events="response.reasoning_summary_text",
    empty_part={"type": "summary_text", "text": ""},
    text_extra={},
)


@dataclass(slots=True)
class OpenItem:
    """The message or reasoning item being streamed, and its open part (text so far), if any."""

    kind: StreamedKind
    item: dict[str, Any]
    index: int
    part: dict[str, Any] | None = None

    def append(self, text: str) -> list[Frame]:
        """``text`` added to the open part (opened first when there is none)."""
        frames: list[Frame] = []
        if self.part is None:
            self.part = copy.deepcopy(self.kind.empty_part)
            self.item[self.kind.parts].append(self.part)
            added = {"type": f"{self.kind.part_events}.added", **self._where()}
            frames.append({**added, "part": copy.deepcopy(self.part)})
        self.part["text"] += text
        delta = {"type": f"{self.kind.text_events}.delta", **self._where(), "delta": text}
        return [*frames, {**delta, **copy.deepcopy(self.kind.text_extra)}]

    def close_part(self, annotations: Sequence[dict[str, Any]] = ()) -> list[Frame]:
        """The events closing the open part; ``annotations`` (a message's citations) are
        added to it first, each announced by its own event."""
        if self.part is None:
            return []
        part, where = self.part, self._where()
        self.part = None
        frames: list[Frame] = []
        for annotation in annotations:
            part["annotations"].append(annotation)
            frames.append(
                {
                    "type": f"{self.kind.text_events}.annotation.added",
                    **where,
                    "annotation_index": len(part["annotations"]) - 1,
                    "annotation": copy.deepcopy(annotation),
                }
            )
        done = {"type": f"{self.kind.text_events}.done", **where, "text": part["text"]}
        return [
            *frames,
            {**done, **copy.deepcopy(self.kind.text_extra)},
            {"type": f"{self.kind.part_events}.done", **where, "part": copy.deepcopy(part)},
        ]

    def _where(self) -> Frame:
        """What places a part event: the item, its output index, the (last) part's index."""
        last = len(self.item[self.kind.parts]) - 1
        return {
            "item_id": self.item["id"],
            "output_index": self.index,
            f"{self.kind.parts}_index": last,
        }
