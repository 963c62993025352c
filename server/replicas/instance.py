"""This server's name among the processes that share its database.

Every run records the instance that runs it, and at start an instance closes the runs it left
live (crash recovery). The name used to be the host name, which changes when a container is
recreated: the recreated server then left its own cut runs ``running`` for good. It is now an
id kept in the data directory (the volume that outlives the container, beside the SQLite file),
made on the first start, unless the configuration names the instance (``server.instance``).
"""

from __future__ import annotations

from pathlib import Path

from server.replicas.id_file import kept_id

FILE_NAME = "instance"


def instance_name(data_dir: Path) -> str:
    """The instance id kept in ``data_dir``, made (once, atomically) if there is none yet."""
    return kept_id(data_dir / FILE_NAME, "inst")
