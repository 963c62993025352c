"""Where context management plugs into every model call.

The loop calls :meth:`ContextHooks.before_call` before building the model's view (preflight
compression lives there) and :meth:`ContextHooks.mark_cache` on the finished request (the
prompt-cache policy lives there). The defaults do nothing; :mod:`hermes_core.context` provides
the real ones. A hook reports what it did as a value (:class:`Compaction`); the loop turns it
into the run's event, so events are made in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermes_core.events import CallRecord
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
    """The session the run started in; compression starts a child of its newest session."""
    between_turns: bool
    """True for the first call of a turn (a more aggressive threshold applies there)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Compaction:
    """A compression a hook performed on ``CallContext.transcript`` (now the compacted one)."""

    tokens_before: int
    """Estimated prompt tokens before."""
    tokens_after: int
    messages_before: int
    session_id: str
    """The child session that continues the conversation from here."""
    parent_session_id: str
    """The session that was compressed."""
    summarised: bool
    """False when only old tool outputs were pruned."""
    summariser_call: CallRecord | None = None
    """The model call that wrote the summary, when one answered."""


class ContextHooks:
    async def before_call(self, context: CallContext) -> Compaction | None:
        """May compress ``context.transcript`` in place before the next model call, and then
        says so."""
        return None

    def mark_cache(self, request: ModelRequest, *, provider: Provider) -> ModelRequest:
        """May return ``request`` with a prompt-cache policy for ``provider``."""
        return request
