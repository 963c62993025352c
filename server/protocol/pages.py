"""OpenAI's cursor-paginated list object, the one shape every list endpoint answers with."""

from __future__ import annotations

from typing import Any


def list_page(data: list[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    """``{"object": "list", "data", "first_id", "last_id", "has_more"}`` for one page of
    objects that carry an ``id``; ``has_more`` says whether items follow the page."""
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
