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
    try:
        # O_EXCL: of two processes starting at once, one writes the id and both read it.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return path.read_text().strip() or made
    with os.fdopen(descriptor, "w") as file:
        file.write(made + "\n")
    return made
