"""An id kept in a file: read if it is there, else made and written once, atomically.

A replica's instance name lives in its data directory, and the shared volume's id on the volume
itself; both must survive restarts and be the same for every process that reads them, even two
starting at the same instant."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def kept_id(path: Path, prefix: str) -> str:
    """The id in ``path``; if there is none yet, ``<prefix>_<16 hex>``, written there first."""
    try:
        existing = path.read_text().strip()
    except FileNotFoundError:
        existing = ""
    if existing:
        return existing
    path.parent.mkdir(parents=True, exist_ok=True)
    made = f"{prefix}_{secrets.token_hex(8)}"
    # Written whole beside it, then linked into place: of two processes starting at once, one
    # links its id and both read that one; nobody ever reads a file still being written.
    draft = path.with_name(f".{path.name}.{made}")
    draft.write_text(made + "\n")
    try:
        os.link(draft, path)
    except FileExistsError:
        return path.read_text().strip()
    finally:
        draft.unlink()
    return made
