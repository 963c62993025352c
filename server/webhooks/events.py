"""The events a webhook can be sent, in OpenAI's shape (``{"id", "object": "event", "type",
"created_at", "data": {"id": …}}``)."""

from __future__ import annotations

from typing import Final, Literal, get_args

WebhookEventType = Literal[
    "response.completed",
    "response.failed",
    "response.cancelled",
    "response.incomplete",
    "run.completed",
    "run.failed",
    "run.cancelled",
    "approval.requested",
]
EVENT_TYPES: Final = frozenset(get_args(WebhookEventType))
RESPONSE_EVENTS: Final = frozenset(t for t in EVENT_TYPES if t.startswith("response."))
RUN_EVENTS: Final = EVENT_TYPES - RESPONSE_EVENTS
