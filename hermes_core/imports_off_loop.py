"""Heavy packages a server does not load at start, loaded on first use without holding up the
event loop.

``import aiohttp`` in a coroutine would run the whole import (~0.1 s of CPU) on the event
loop, every other request waiting, the first time a model call, a web tool or a webhook needs
it. :func:`import_off_loop` imports on a worker thread instead; the coroutine then takes the
module from ``sys.modules`` (``import aiohttp`` after it costs nothing and keeps the types).
"""

from __future__ import annotations

import asyncio
import importlib
import sys


async def import_off_loop(name: str) -> None:
    """Make sure ``name`` is imported, importing it on a worker thread if it is not."""
    if name not in sys.modules:
        await asyncio.to_thread(importlib.import_module, name)
