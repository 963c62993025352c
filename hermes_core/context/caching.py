"""Anthropic prompt caching: when to place ``cache_control`` breakpoints.

:func:`cache_policy_for` decides whether a provider gets breakpoints at all, and
:class:`CachingContext` asks for them on every model call of the agent loop. Where they go on
the wire is the adapters' business (:mod:`hermes_core.providers.cache_markers`).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from hermes_core.context.hooks import CallContext, Compaction, ContextHooks
from hermes_core.providers.base import ApiMode, ModelRequest, PromptCachePolicy, Provider
from hermes_core.providers.cache_markers import CacheTTL

# --- when to cache ----------------------------------------------------------------------------


class ProviderIdentity(Protocol):
    """What the caching decision needs of a provider (every :class:`Provider` has it)."""

    @property
    def api_mode(self) -> ApiMode: ...

    @property
    def model(self) -> str: ...


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PromptCacheSettings:
    """How an agent uses explicit prompt caching."""

    enabled: bool | None = None
    """None decides per provider (see :func:`cache_policy_for`); True also marks any
    ``chat_completions`` model (e.g. another family whose gateway honours ``cache_control``);
    False places no breakpoints anywhere (for gateways that reject ``cache_control``)."""
    ttl: CacheTTL = "5m"
    """``1h`` costs more to write (2x input price instead of 1.25x) but survives long pauses,
    e.g. a user reading an answer before the next turn."""


def looks_like_anthropic_model(model: str) -> bool:
    """True for model ids such as ``claude-sonnet-4-5`` or ``anthropic/claude-opus-4``."""
    lowered = model.lower()
    return "claude" in lowered or "anthropic/" in lowered


def cache_policy_for(
    provider: ProviderIdentity, settings: PromptCacheSettings | None = None
) -> PromptCachePolicy | None:
    """The cache policy for calls to ``provider``, or None to place no breakpoints.

    ``anthropic_messages``: always (unless disabled). ``chat_completions``: when the model looks
    like an Anthropic one, or when enabled explicitly. ``codex_responses``: never — OpenAI
    caches prefixes automatically and its wire has no ``cache_control``.
    """
    settings = settings if settings is not None else PromptCacheSettings()
    if settings.enabled is False:
        return None
    if provider.api_mode == "anthropic_messages":
        wanted = True
    elif provider.api_mode == "chat_completions":
        wanted = settings.enabled is True or looks_like_anthropic_model(provider.model)
    else:
        wanted = False
    return PromptCachePolicy(ttl=settings.ttl) if wanted else None


class CachingContext(ContextHooks):
    """Context hooks that ask for prompt-cache breakpoints on every model call.

    ``inner`` is another set of hooks (e.g. compression) this one wraps: its ``before_call``
    runs as is, and its ``mark_cache`` runs before the caching decision. The decision is
    authoritative — a policy the request already carries is replaced, removed if ``provider``
    should get none — so re-marking a request for another provider (after a fallback switch)
    never sends ``cache_control`` where it does not belong.
    """

    def __init__(
        self, settings: PromptCacheSettings | None = None, *, inner: ContextHooks | None = None
    ) -> None:
        self.settings = settings if settings is not None else PromptCacheSettings()
        self._inner = inner if inner is not None else ContextHooks()

    async def before_call(self, context: CallContext) -> Compaction | None:
        return await self._inner.before_call(context)

    def mark_cache(self, request: ModelRequest, *, provider: Provider) -> ModelRequest:
        request = self._inner.mark_cache(request, provider=provider)
        policy = cache_policy_for(provider, self.settings)
        if request.prompt_cache == policy:
            return request
        return dataclasses.replace(request, prompt_cache=policy)
