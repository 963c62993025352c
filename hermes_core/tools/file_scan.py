"""Reading a workspace's files within bounds the model cannot move: the file tools' budget
(a deadline, bytes read), files read as blocks of whole lines, and a walk that never opens or
follows anything that is not a plain directory or regular file.

The file tools run in worker threads the whole server shares. A call that reads a 250 MB file
whole, or walks a million files, holds its thread and its memory for as long as it likes; so
every read here is a fixed-size chunk, every long line is kept to a bounded prefix, and every
loop asks its :class:`Budget` before going on.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hermes_core.tools.workspace import NotRegularFile

DEADLINE_S = 10.0
"""Seconds one file-tool call may spend reading or walking before it stops."""
MAX_SCAN_BYTES = 128 * 1024 * 1024
"""Bytes one file-tool call may read in all (a search over many files, a deep page)."""
CHUNK_BYTES = 64 * 1024
"""What one read takes from a file; also the longest line kept whole (a longer line is seen,
matched and shown, by its first ``CHUNK_BYTES``)."""
SKIPPED_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv"})
"""Directories walks pass over unless asked into them."""


class ScanStopped(Exception):
    """A call ran out of its budget; ``str()`` says which part, in the model's words."""


def _never() -> bool:
    return False


@dataclass(slots=True)
class Budget:
    """What one call may spend. It also stops the call when its run is interrupted, since a
    thread cannot be cancelled from outside: only its own checks end it."""

    seconds: float = DEADLINE_S
    max_bytes: int = MAX_SCAN_BYTES
    is_interrupted: Callable[[], bool] = _never
    started: float = field(default_factory=time.monotonic)
    spent: int = 0

    def check(self) -> None:
        if self.is_interrupted():
            raise ScanStopped("the run was interrupted")
        if time.monotonic() - self.started > self.seconds:
            raise ScanStopped(f"it reached its deadline of {self.seconds:g} s")

    def spend(self, size: int) -> None:
        self.spent += size
        if self.spent > self.max_bytes:
            raise ScanStopped(f"it read its limit of {self.max_bytes // (1024 * 1024)} MiB")


@dataclass(frozen=True, slots=True)
class Block:
    """Whole lines of a file, read together."""

    data: bytes
    """The lines, each ending in ``\\n`` (the file's last line too), none longer than a chunk."""
    first_line: int
    """The number of its first line (from 1)."""
    cut: Mapping[int, int]
    """Lines cut to a chunk's length: their numbers, and the bytes they really had."""

    @property
    def lines(self) -> int:
        return self.data.count(b"\n")


def line_blocks(descriptor: int, budget: Budget, *, chunk: int = CHUNK_BYTES) -> Iterator[Block]:
    """The file open at ``descriptor`` as blocks of whole lines, from its current offset; one
    chunk read per block, so what is held at once is about two chunks whatever the file."""
    number = 1
    carry = b""  # the start of a line the chunks so far did not finish, kept to a chunk
    carry_length = 0  # and the bytes that line really had so far
    while True:
        budget.check()
        data = os.read(descriptor, chunk)
        if not data:
            break
        budget.spend(len(data))
        last = data.rfind(b"\n")
        if last < 0:
            carry_length += len(data)
            carry += data[: chunk - len(carry)]
            continue
        first = data.find(b"\n")
        cut = {number: carry_length + first} if carry_length + first > chunk else {}
        head = (carry + data[:first])[:chunk] if carry else data[:first]
        block = Block(head + data[first : last + 1], number, cut)
        yield block
        number += block.lines
        carry = data[last + 1 :]
        carry_length = len(carry)
    if carry_length:
        cut = {number: carry_length} if carry_length > len(carry) else {}
        yield Block(carry + b"\n", number, cut)


def is_binary(head: bytes) -> bool:
    """Whether a file's first bytes say it is not text (a NUL, or not UTF-8)."""
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a character cut at the end of the sample is fine
    return False


def regular_files(
    start: Path, budget: Budget, *, skip: frozenset[str] = SKIPPED_DIRS
) -> Iterator[tuple[Path, os.stat_result]]:
    """The regular files at or under ``start`` (a real path) with their ``lstat``, in name
    order. Nothing is opened but directories, nothing followed: symlinks, FIFOs, sockets and
    devices are passed over, as are directories named in ``skip``."""
    info = os.lstat(start)
    if stat.S_ISREG(info.st_mode):
        yield start, info
        return
    if not stat.S_ISDIR(info.st_mode):
        raise NotRegularFile(f"'{start.name}' is not a regular file or a directory.")
    pending = [start]
    while pending:
        budget.check()
        directory = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except (PermissionError, FileNotFoundError, NotADirectoryError):
            continue  # changed or closed under us (commands run alongside): not ours to show
        subdirectories = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in skip:
                    subdirectories.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                yield Path(entry.path), info
        pending.extend(reversed(subdirectories))
