"""This server's name among the processes that share its database.

Every run records the instance that runs it, and at start an instance closes the runs it left
live (crash recovery). The name used to be the host name, which changes when a container is
recreated: the recreated server then left its own cut runs ``running`` for good. It is now an
id kept in the data directory (the volume that outlives the container, beside the SQLite file),
made on the first start, unless the configuration names the instance (``server.instance``).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

FILE_NAME = "instance"


def instance_name(data_dir: Path) -> str:
    """The instance id kept in ``data_dir``, made (once, atomically) if there is none yet."""
    path = data_dir / FILE_NAME
    try:
        existing = path.read_text().strip()
    except FileNotFoundError:
        existing = ""
    if existing:
        return existing
    data_dir.mkdir(parents=True, exist_ok=True)
    made = f"inst_{secrets.token_hex(8)}"
    try:
        # O_EXCL: of two processes starting at once, one writes the id and both read it.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return path.read_text().strip() or made
    with os.fdopen(descriptor, "w") as file:
        file.write(made + "\n")
    return made
