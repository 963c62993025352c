"""The shapes of ``/v1/conversations`` (as OpenAI's Conversations API): the request bodies,
checked, and the objects answered."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from server.protocol.schemas.common import Shape

MAX_METADATA_PAIRS, MAX_KEY_CHARS, MAX_VALUE_CHARS = 16, 64, 512
MAX_ITEMS_ADDED = 20
"""Items one request may add (OpenAI's limit, for create and for items.create)."""


def _metadata(value: dict[str, str] | None) -> dict[str, str] | None:
    if value is None:
        return None
    if len(value) > MAX_METADATA_PAIRS:
        raise ValueError(f"metadata holds at most {MAX_METADATA_PAIRS} key-value pairs")
    for key, item in value.items():
        if len(key) > MAX_KEY_CHARS:
            raise ValueError(f"metadata keys are at most {MAX_KEY_CHARS} characters")
        if len(item) > MAX_VALUE_CHARS:
            raise ValueError(f"metadata values are at most {MAX_VALUE_CHARS} characters")
    return value


class ConversationCreate(Shape):
    """``POST /v1/conversations``."""

    items: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_ITEMS_ADDED)
    """Responses input items the conversation starts with (at most 20)."""
    metadata: dict[str, str] | None = None
    """At most 16 pairs; keys up to 64 characters, values up to 512."""

    _checked = field_validator("metadata")(_metadata)


class ConversationUpdate(Shape):
    """``POST /v1/conversations/{id}``: the metadata, replaced."""

    metadata: dict[str, str]

    _checked = field_validator("metadata")(_metadata)


class ConversationItemsCreate(Shape):
    """``POST /v1/conversations/{id}/items``."""

    items: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_ITEMS_ADDED)
    """Responses input items appended to the conversation (1 to 20)."""


class ConversationObject(Shape):
    id: str
    object: Literal["conversation"]
    created_at: int
    metadata: dict[str, str]


class ConversationDeleted(Shape):
    id: str
    object: Literal["conversation.deleted"]
    deleted: bool


class ConversationItemList(Shape):
    """A page of items: ``message`` (user, assistant, system), ``function_call`` and
    ``function_call_output`` items, oldest first unless ``order=desc``."""

    object: Literal["list"]
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
