"""Upstream model providers: one interface, three wire protocols."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from hermes_core.providers.base import (
    ADAPTERS,
    ApiMode,
    FinishReason,
    ForcedTool,
    ModelReasoningDelta,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    OutputFormat,
    PromptCachePolicy,
    Provider,
    ProviderEvent,
    ToolCallDelta,
    ToolChoice,
    ToolSchema,
)
from hermes_core.providers.config import ProviderConfig, resolve_api_mode
from hermes_core.providers.scripted import ScriptedProvider, ScriptedReply


def create_provider(config: ProviderConfig) -> Provider:
    """Build the adapter for ``config``'s api_mode (see ``ADAPTERS``)."""
    module, name = ADAPTERS[config.resolved_api_mode].split(":")
    adapter: Callable[[ProviderConfig], Provider] = getattr(importlib.import_module(module), name)
    return adapter(config)


__all__ = [
    "ApiMode",
    "FinishReason",
    "ForcedTool",
    "ModelReasoningDelta",
    "ModelRequest",
    "ModelResponse",
    "ModelTextDelta",
    "OutputFormat",
    "PromptCachePolicy",
    "Provider",
    "ProviderConfig",
    "ProviderEvent",
    "ScriptedProvider",
    "ScriptedReply",
    "ToolCallDelta",
    "ToolChoice",
    "ToolSchema",
    "create_provider",
    "resolve_api_mode",
]
