"""``item_reference`` input items: a client (the AI SDK, by default) naming an item of one of
its earlier stored responses by id instead of sending it again.

Output item ids are made from their response's id (``msg_<suffix>_<n>`` belongs to
``resp_<suffix>``; see ``server/views/responses.py``), so a reference finds its response
directly. A reference to anything else — an unknown id, another key's item, a response not
stored, another end user's (docs/end-users.md) — is a 400 naming the item.
"""

from __future__ import annotations

import copy
from typing import Any

from hermes_core.persistence import Store, StoredResponse
from server.errors import APIError
from server.serving.end_users import sees


async def resolve_item_references(
    store: Store | None,
    owner: str,
    items: list[dict[str, Any]],
    *,
    end_user: str | None = None,
) -> None:
    """Replace, in place, each ``item_reference`` of ``items`` with the item it names, in a
    response ``end_user`` (the request's) sees."""
    if not any(item.get("type") == "item_reference" for item in items):
        return
    responses: dict[str, StoredResponse | None] = {}
    for index, item in enumerate(items):
        if item.get("type") != "item_reference":
            continue
        item_id = str(item.get("id") or "")
        response_id = _response_of(item_id)
        if response_id is not None and response_id not in responses:
            found = await store.responses.get(owner, response_id) if store is not None else None
            seen = found is not None and sees(end_user, found.end_user)
            responses[response_id] = found if seen else None
        stored = responses.get(response_id) if response_id is not None else None
        named = _item_in(stored, item_id)
        if named is None:
            raise APIError(
                400,
                f"item_reference '{item_id}' names no item of a stored response of yours.",
                param="input",
            )
        items[index] = named


def _response_of(item_id: str) -> str | None:
    """The id of the response an output item id belongs to, by the shape of the id."""
    _, _, rest = item_id.partition("_")
    suffix, _, position = rest.rpartition("_")
    if not suffix or not position.isdigit():
        return None
    return f"resp_{suffix}"


def _item_in(stored: StoredResponse | None, item_id: str) -> dict[str, Any] | None:
    if stored is None or not isinstance(stored.body, dict):
        return None
    for item in stored.body.get("output") or ():
        if isinstance(item, dict) and item.get("id") == item_id:
            return copy.deepcopy(item)
    return None
