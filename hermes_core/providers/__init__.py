"""Upstream model providers: one interface, three wire protocols."""

from __future__ import annotations

from hermes_core.providers.base import (
    ApiMode,
    FinishReason,
    ForcedTool,
    ModelReasoningDelta,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    PromptCachePolicy,
    Provider,
    ProviderEvent,
    ToolCallDelta,
    ToolChoice,
    ToolSchema,
)
from hermes_core.providers.config import ProviderConfig, resolve_api_mode


def create_provider(config: ProviderConfig) -> Provider:
    """Build the adapter for ``config``'s api_mode."""
    mode = config.resolved_api_mode
    if mode == "anthropic_messages":
        from hermes_core.providers.anthropic_messages import AnthropicMessagesProvider

        return AnthropicMessagesProvider(config)
    if mode == "codex_responses":
        from hermes_core.providers.codex_responses import ResponsesProvider

        return ResponsesProvider(config)
    from hermes_core.providers.chat_completions import ChatCompletionsProvider

    return ChatCompletionsProvider(config)


__all__ = [
    "ApiMode",
    "FinishReason",
    "ForcedTool",
    "ModelReasoningDelta",
    "ModelRequest",
    "ModelResponse",
    "ModelTextDelta",
    "PromptCachePolicy",
    "Provider",
    "ProviderConfig",
    "ProviderEvent",
    "ToolCallDelta",
    "ToolChoice",
    "ToolSchema",
    "create_provider",
    "resolve_api_mode",
]
