"""JSON on the hot path: orjson, with the standard library for what orjson refuses.

Every token of a stream is JSON twice (the upstream's chunk in, the client's chunk out), so
the encoder's speed shows in the server's CPU per request (bench/server_overhead.py). orjson
writes compact UTF-8, like ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``.
Its encoder refuses integers beyond 64 bits and non-string keys, which clients can send (a
tool schema's ``maximum``); such values take the standard library's path. Its decoder reads
integers beyond 64 bits as floats, which is harmless for what it reads (upstream streams).
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def dumps_text(value: Any) -> str:
    return dumps(value).decode()


loads = orjson.loads
"""Parse JSON; raises ``ValueError`` (``orjson.JSONDecodeError`` is one) on bad input. The
function itself, not a wrapper: it runs for every frame of every upstream stream."""
