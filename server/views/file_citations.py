"""The files a run made, announced in each client's terms (``RunFinished.files``).

- Responses: a ``container_file_citation`` annotation per file on the answer's text (OpenAI's
  code-interpreter shape), its container being the conversation's workspace
  (``/v1/containers``).
- Chat: ``message.annotations`` entries of type ``url_citation`` (the only type the SDK's
  chat message knows) whose URL is the file's signed link, carrying the same
  ``container_file_citation`` facts beside it.
- Open WebUI: the answer itself ends with the files as Markdown — images inline
  (``![chart.png](link)``), other files as links — through signed links a browser opens
  without the API key.

A citation spans the first place the answer names the file (its path, else its name); a file
the answer never names is still announced, with an empty span at the end of the text.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hermes_core.events import WorkspaceFile
from server.files.links import file_id

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg"})


@dataclass(frozen=True, slots=True)
class FileAnnouncer:
    """How one request's answers name its workspace's files."""

    container_id: str
    link: Callable[[str], str] | None = None
    """A relative path → a signed URL a browser may open; None: no links."""
    openwebui: bool = False
    """Announce in the text, as Markdown (else as annotations)."""
    base_url: str = ""
    """Where clients reach the server (``public_url``, else the request's base; no trailing
    ``/``): the container's file URLs are absolute against it."""

    def responses_annotations(
        self, text: str, files: Sequence[WorkspaceFile]
    ) -> list[dict[str, Any]]:
        return [{"type": "container_file_citation", **self._facts(text, file)} for file in files]

    def chat_annotations(self, text: str, files: Sequence[WorkspaceFile]) -> list[dict[str, Any]]:
        annotations = []
        for file in files:
            facts = self._facts(text, file)
            cited = {
                "url": self.link(file.path) if self.link else "",
                "title": facts["filename"],
                "start_index": facts["start_index"],
                "end_index": facts["end_index"],
            }
            annotations.append(
                {"type": "url_citation", "url_citation": cited, "container_file_citation": facts}
            )
        return annotations

    def markdown(self, files: Sequence[WorkspaceFile], *, after: str) -> str:
        """The files as Markdown to append to an answer ending in ``after`` ('' when there
        is nothing to show)."""
        if self.link is None or not files:
            return ""
        lines = []
        for file in files:
            name = _escaped(posixpath.basename(file.path))
            url = self.link(file.path)
            if posixpath.splitext(file.path)[1].lower() in IMAGE_SUFFIXES:
                lines.append(f"![{name}]({url})")
            else:
                lines.append(f"[{name}]({url})")
        separator = "" if not after else "\n" if after.endswith("\n\n") else "\n\n"
        return separator + "\n\n".join(lines) + "\n"

    def _facts(self, text: str, file: WorkspaceFile) -> dict[str, Any]:
        filename = posixpath.basename(file.path)
        start, end = _mention(text, file.path, filename)
        return {
            "container_id": self.container_id,
            "file_id": file_id(file.path),
            "filename": filename,
            "start_index": start,
            "end_index": end,
        }


def _mention(text: str, path: str, filename: str) -> tuple[int, int]:
    for needle in (path, filename):
        start = text.find(needle)
        if start != -1:
            return start, start + len(needle)
    return len(text), len(text)


def _escaped(name: str) -> str:
    """A name as Markdown link text: brackets and backslashes would end or break it."""
    return "".join(f"\\{c}" if c in "[]\\" else c for c in name)
