"""Documents (PDF, DOCX, XLSX, PPTX) as text, extracted in the sandbox, never in the server.

A crafted document can make a parser take minutes or gigabytes, so the server only hands the
file over: :func:`extract_text` runs ``document_script.py`` with the sandbox's data Python
(:mod:`.sandbox_python`), passing the document as an open read-only descriptor (the sandbox
gets no path to it, and an empty scratch directory as its workspace), under limits of its own
(:data:`DOCUMENT_LIMITS`: time, memory, processes, output) and with no network. What it
prints is the text, with page, sheet and slide markers; a document it cannot read, or that
hits a limit, is a :class:`DocumentUnreadable` whose message tells the model why.

``read_file`` (through :func:`text_of`, from its worker thread) and the files a request
attaches on a profile without file tools (``server/files/reading.py``) both read documents
this way. Recent extractions are kept, so paging through a long document extracts it once.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import os
import shutil
import tempfile
import threading
from pathlib import Path, PurePosixPath

from hermes_core.tools.sandbox import (
    SandboxLimits,
    SandboxPolicy,
    run_command,
    sandbox_unavailable_reason,
)
from hermes_core.tools.sandbox_python import python_executable

DOCUMENT_KINDS = {".pdf": "pdf", ".docx": "docx", ".xlsx": "xlsx", ".xlsm": "xlsx", ".pptx": "pptx"}
"""File name endings read as documents, and the kind the in-sandbox script is told."""
MAX_TEXT_BYTES = 4_000_000
"""Text kept of one document (then a line says it goes on)."""
DOCUMENT_LIMITS = SandboxLimits(
    timeout_seconds=20.0,
    cpu_seconds=20,
    memory_bytes=1024**3,
    max_processes=16,
    max_file_bytes=1024**2,
    max_output_bytes=MAX_TEXT_BYTES + 4096,
    sandbox_memory_bytes=1024**3,
    cpus=1.0,
    tmp_bytes=16 * 1024**2,
)
"""What one extraction may use: below ``read_file``'s own deadline (30 s), so the tool
answers with the reason rather than being abandoned."""
_SCRIPT = Path(__file__).with_name("document_script.py")
_ERROR_MARK = "\x00hermes-document-error:"  # document_script.ERROR_MARK (never imported here)
_CACHED = 8


class DocumentUnreadable(Exception):
    """A document could not be read as text; the message says why, in the model's words."""


def document_kind(name: str, head: bytes = b"") -> str | None:
    """The kind of document ``name`` is (by its ending, or a PDF by its first bytes), or None
    for a file read as it is (text, CSV)."""
    kind = DOCUMENT_KINDS.get(PurePosixPath(name).suffix.lower())
    if kind is None and head.startswith(b"%PDF-"):
        return "pdf"
    return kind


@functools.cache
def _script() -> str:
    return _SCRIPT.read_text()


_recent: collections.OrderedDict[tuple[object, ...], str] = collections.OrderedDict()
_recent_lock = threading.Lock()
_sandbox_probe: list[str | None] = []
_probe_lock = threading.Lock()


def _sandbox_missing() -> str | None:
    """Why no sandbox can run here (probed once per process: it starts bubblewrap)."""
    with _probe_lock:
        if not _sandbox_probe:
            _sandbox_probe.append(sandbox_unavailable_reason())
        return _sandbox_probe[0]


async def extract_text(
    descriptor: int,
    kind: str,
    *,
    policy: SandboxPolicy,
    limits: SandboxLimits = DOCUMENT_LIMITS,
    reuse: bool = True,
) -> str:
    """The text of the ``kind`` document open at ``descriptor`` (read-only), extracted in the
    sandbox under ``limits``; :class:`DocumentUnreadable` when it cannot be. With ``reuse``, a
    recent extraction of the same unchanged file is reused (paging through it, a resent
    history); not for a file in memory, whose inode says nothing once it is gone."""
    if not reuse:
        return await _extract(descriptor, kind, policy, limits)
    info = os.fstat(descriptor)
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, kind, policy.python, limits)
    with _recent_lock:
        if key in _recent:
            _recent.move_to_end(key)
            return _recent[key]
    text = await _extract(descriptor, kind, policy, limits)
    with _recent_lock:
        _recent[key] = text
        while len(_recent) > _CACHED:
            _recent.popitem(last=False)
    return text


async def _extract(descriptor: int, kind: str, policy: SandboxPolicy, limits: SandboxLimits) -> str:
    if not policy.unsandboxed:
        missing = await asyncio.to_thread(_sandbox_missing)
        if missing is not None:
            raise DocumentUnreadable(
                "documents (PDF, DOCX, XLSX, PPTX) cannot be read on this server: it has no "
                f"sandbox to parse them in safely ({missing})"
            )
    # Only the data Python and its limits: no network, whatever commands may reach.
    confined = dataclasses.replace(policy, network=False, egress=None)
    argv = [python_executable(policy), "-I", "-c", _script(), kind, str(descriptor)]
    argv.append(str(MAX_TEXT_BYTES))
    scratch = Path(tempfile.mkdtemp(prefix="hermes-document-"))
    try:
        result = await run_command(
            argv, workspace=scratch, limits=limits, policy=confined, inherit_fds=(descriptor,)
        )
    finally:
        await asyncio.to_thread(shutil.rmtree, scratch, True)
    if result.timed_out:
        raise DocumentUnreadable(
            f"reading it took longer than the {limits.timeout_seconds:g} s a document may take"
        )
    output = result.output
    if _ERROR_MARK in output:
        raise DocumentUnreadable(output.rpartition(_ERROR_MARK)[2].strip())
    if result.out_of_memory or result.exit_code < 0:
        raise DocumentUnreadable(
            f"reading it was stopped at a limit (memory: {limits.memory_bytes // 1024**2} MB, "
            f"CPU: {limits.cpu_seconds} s; signal {-result.exit_code})"
        )
    if result.exit_code != 0:
        last = output.strip().splitlines()[-1:] or ["no output"]
        raise DocumentUnreadable(f"the extraction failed (exit code {result.exit_code}: {last[0]})")
    return output


def text_of(descriptor: int, kind: str, *, policy: SandboxPolicy) -> str:
    """:func:`extract_text` from a worker thread (the file tools')."""
    return asyncio.run(extract_text(descriptor, kind, policy=policy))
