"""Random ids (``run_…``, ``sess_…``, ``chatcmpl-…``) from a buffered read of the OS's CSPRNG.

``secrets.token_hex`` makes one ``getrandom`` system call per id, and a run makes several ids:
profiled, that was ~4 % of the event loop's samples. Here one call reads
:data:`BUFFER_BYTES` and ids are sliced off it until it is used up. The bytes are the same
``os.urandom`` bytes, each handed out once, so the ids are as unpredictable as before; a forked
child drops the buffer it inherited, so no two processes hand out the same bytes.
"""

from __future__ import annotations

import os
import threading

BUFFER_BYTES = 4096
"""Read at a time: ids for a few hundred runs per system call."""


class _Pool:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # ids are made on worker threads too
        self._bytes = b""
        self._used = 0

    def take(self, count: int) -> bytes:
        with self._lock:
            start = self._used
            end = start + count
            if end > len(self._bytes):
                self._bytes = os.urandom(max(BUFFER_BYTES, count))
                start, end = 0, count
            self._used = end
            return self._bytes[start:end]

    def drop(self) -> None:
        """Forget the buffer (in a forked child: the parent hands out the same bytes)."""
        self._lock = threading.Lock()
        self._bytes = b""
        self._used = 0


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.drop)


def token_hex(nbytes: int) -> str:
    """Like :func:`secrets.token_hex`: ``nbytes`` random bytes as ``2 * nbytes`` hex digits."""
    return _POOL.take(nbytes).hex()
