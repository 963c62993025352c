"""Where each conversation's working directory lives, and what clients may see of it.

A conversation is an owner's named session together with its forks (a Responses chain is a
session too, named by its first session's id). All of them share one directory: the files are
not versioned with the transcript, so going back to an earlier message forks the transcript
but keeps the files as they are now.

Directories are named by hashes (``<owner>/<conversation>``): names clients choose never become
paths, and one owner's conversations sit together (removed together, counted together).
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def conversation_workspace(root: Path, owner: str, conversation: str) -> Path:
    """The directory of ``owner``'s conversation ``conversation`` under ``root`` (not made)."""
    return root / _digest(owner, 16) / _digest(conversation, 32)
