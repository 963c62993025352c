"""Where context management plugs into every model call.

The loop calls :meth:`ContextHooks.before_call` before building the model's view (preflight
compression lives there) and :meth:`ContextHooks.mark_cache` on the finished request (prompt
cache breakpoints live there). The defaults do nothing; the resilience layer subclasses this.
"""

from __future__ import annotations

from hermes_core.messages import Message
from hermes_core.providers.base import ModelRequest


class ContextHooks:
    async def before_call(self, transcript: list[Message]) -> None:
        """May compress ``transcript`` in place before the next model call."""
        return None

    def mark_cache(self, request: ModelRequest) -> ModelRequest:
        """May return ``request`` with prompt-cache breakpoints placed."""
        return request
