"""A full disk, as the store's writer sees it: a transient refusal, not a bad write.

A write the database refuses because the disk (or the quota) is full would succeed unchanged
once space is freed, so the writer keeps it queued, in order, and retries it; a caller owed
durability meanwhile gets :class:`StorageFull`. Dropping such writes is what left runs marked
``running`` and conversations locked for hours after a disk filled mid-run.
"""

from __future__ import annotations

import errno
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hermes_core.errors import disk_full

__all__ = ["StorageFull", "WritesHeld", "disk_full", "what_they_were"]


class StorageFull(OSError):
    """Writes that were asked to be durable are waiting for disk space.

    An ``OSError`` with ``ENOSPC``, so that whoever already turns a full disk into an answer
    (a 507 on the HTTP side) handles this one the same way."""

    def __init__(self, waiting: int) -> None:
        super().__init__(
            errno.ENOSPC, f"the store's disk is full: {waiting} writes are waiting for space"
        )
        self.waiting = waiting


class WritesHeld(Exception):
    """A committer's answer when the disk filled: ``held`` (in order, from the first write
    refused for lack of space) were not attempted or not committed and must be retried;
    ``failures`` others failed for good (each logged)."""

    def __init__(self, held: Sequence[Any], failures: int) -> None:
        super().__init__(f"{len(held)} writes held for lack of space")
        self.held = list(held)
        self.failures = failures


def what_they_were(statements: Sequence[Any]) -> str:
    """What a list of writes' statements change, for a log line: ``messages 3, runs 1``."""
    tables: Counter[str] = Counter()
    for statement in statements:
        table = getattr(statement, "table", None)
        tables[str(getattr(table, "name", None) or "other")] += 1
    return ", ".join(f"{name} {count}" for name, count in tables.most_common())
