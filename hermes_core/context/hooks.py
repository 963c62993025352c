"""Where context management plugs into every model call.

The loop calls :meth:`ContextHooks.before_call` before building the model's view (preflight
compression lives there) and :meth:`ContextHooks.mark_cache` on the finished request (the
prompt-cache policy lives there). The defaults do nothing; ``hermes_core.context`` provides the
real ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hermes_core.messages import Message
from hermes_core.providers.base import ModelRequest, Provider


@dataclass(slots=True, kw_only=True)
class CallContext:
    """What a context hook may see and change before one model call."""

    transcript: list[Message]
    """The run's transcript. Compression replaces its contents in place."""
    provider: Provider
    """The provider the call goes to first (its ``context_window`` sets the limits)."""
    last_prompt_tokens: int | None
    """The real prompt size of the previous call, when there was one: better than an estimate."""
    session_id: str
    """The session the transcript belongs to; compression starts a child of it."""
    between_turns: bool
    """True for the first call of a turn (a more aggressive threshold applies there)."""
    emit: Callable[..., Any]
    """``emit(EventClass, **fields)``, e.g. for ``CompressionPerformed``."""


class ContextHooks:
    async def before_call(self, context: CallContext) -> None:
        """May compress ``context.transcript`` in place before the next model call."""
        return None

    def mark_cache(self, request: ModelRequest, *, provider: Provider) -> ModelRequest:
        """May return ``request`` with a prompt-cache policy for ``provider``."""
        return request
