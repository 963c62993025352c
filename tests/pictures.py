"""Pictures the tests send and expect back, kept apart so that using one imports nothing else
(the MCP test server that also returns one loads the MCP SDK)."""

from __future__ import annotations

import base64

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
"""A one-pixel PNG."""
