"""Context management for the agent loop: compression and prompt caching.

:class:`CompressingContext` and :class:`CachingContext` are the loop's ``ContextHooks``; wrap
one in the other to get both, e.g. ``CachingContext(inner=CompressingContext(Compressor(aux)))``.
"""

from hermes_core.context.caching import CachingContext, PromptCacheSettings
from hermes_core.context.compression import (
    PRUNED_TOOL_OUTPUT,
    CompressingContext,
    CompressionPlan,
    CompressionResult,
    CompressionSettings,
    Compressor,
    estimate_tokens,
    plan,
)
from hermes_core.context.summary import SUMMARY_MARKER

__all__ = [
    "PRUNED_TOOL_OUTPUT",
    "SUMMARY_MARKER",
    "CachingContext",
    "CompressingContext",
    "CompressionPlan",
    "CompressionResult",
    "CompressionSettings",
    "Compressor",
    "PromptCacheSettings",
    "estimate_tokens",
    "plan",
]
