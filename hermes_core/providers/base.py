"""The provider interface: one model call in, one stream of provider events out.

All three adapters (``chat_completions``, ``codex_responses``, ``anthropic_messages``) implement
:class:`Provider`. The agent loop sees only these types, never a wire format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from hermes_core.messages import Message
from hermes_core.records import record
from hermes_core.usage import Usage

ApiMode = Literal["chat_completions", "codex_responses", "anthropic_messages"]
API_MODES: tuple[ApiMode, ...] = get_args(ApiMode)
ADAPTERS: Mapping[ApiMode, str] = {
    "chat_completions": "hermes_core.providers.chat_completions:ChatCompletionsProvider",
    "codex_responses": "hermes_core.providers.codex_responses:ResponsesProvider",
    "anthropic_messages": "hermes_core.providers.anthropic_messages:AnthropicMessagesProvider",
}
"""The adapter of each api_mode, as ``module:class``: imported only when a provider of that mode
is built (each pulls in its SDK), and named here so that a mode is declared in one place."""

FinishReason = Literal["stop", "tool_calls", "length", "content_filter"]
"""Why the model stopped, in OpenAI's vocabulary whatever the provider said."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSchema:
    """A function the model may call."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    """JSON Schema of the arguments object."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputFormat:
    """The shape a run's final answer must take (structured outputs): JSON matching
    ``schema`` (``json_schema``), or any JSON object (``json_object``)."""

    kind: Literal["json_schema", "json_object"]
    name: str = "answer"
    schema: Mapping[str, Any] | None = None
    """A JSON Schema; required for ``json_schema``."""
    strict: bool = False
    """Ask the upstream to enforce the schema exactly (OpenAI's strict mode)."""
    description: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ForcedTool:
    """``tool_choice`` that forces one named function."""

    name: str


ToolChoice = Literal["auto", "none", "required"] | ForcedTool


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptCachePolicy:
    """Ask the adapter to place explicit prompt-cache breakpoints (Anthropic ``cache_control``).

    The layout is "system and last 3": one breakpoint on the system prompt and one on each of
    the last three non-system messages, never more than four in all (the API's limit).
    Adapters whose upstream caches automatically (OpenAI) ignore it.
    """

    ttl: Literal["5m", "1h"] = "5m"


@record
class ModelRequest:
    """Everything one model call needs, in the internal format."""

    messages: Sequence[Message]
    """The conversation; a leading ``system`` message becomes the provider's system prompt."""
    tools: Sequence[ToolSchema] = ()
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning_effort: str | None = None
    """``low`` / ``medium`` / ``high``; mapped to each provider's reasoning control."""
    output_format: OutputFormat | None = None
    """The shape of the answer text, where the upstream can enforce one natively."""
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    prompt_cache: PromptCachePolicy | None = None
    """Explicit cache breakpoints to place; None places none."""
    stream: bool = True
    """False: nobody watches the reply as it is generated. An adapter may then ask the
    upstream for it in one piece, and yield it as one delta of each kind before the response:
    one body to read instead of a frame per token."""


# --- provider events --------------------------------------------------------------------------


@record
class ModelTextDelta:
    """A piece of the assistant's answer text."""

    kind: Literal["text_delta"] = "text_delta"
    text: str


@record
class ModelReasoningDelta:
    """A piece of the model's reasoning (thinking, reasoning summary or reasoning_content)."""

    kind: Literal["reasoning_delta"] = "reasoning_delta"
    text: str


@record
class ToolCallDelta:
    """A piece of a tool call as it is generated.

    ``id`` and ``name`` arrive on the first delta of a call; later deltas carry argument text.
    """

    kind: Literal["tool_call_delta"] = "tool_call_delta"
    index: int
    """Position of the call within this model response (0, 1, ... for parallel calls)."""
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@record
class ModelResponse:
    """The end of a model call: the assembled assistant message and what it cost."""

    kind: Literal["model_response"] = "model_response"
    message: Message
    """An ``assistant`` message in the internal format (text, tool_calls, reasoning)."""
    finish_reason: FinishReason
    usage: Usage
    provider: str
    """Name of the provider that served the call."""
    model: str
    """Model id as the upstream reported it."""


@record
class ProviderRetry:
    """A fallback chain will call ``provider`` again after ``delay_s`` seconds."""

    kind: Literal["retry_scheduled"] = "retry_scheduled"
    provider: str
    attempt: int
    """The attempt that failed (1 for the first call)."""
    delay_s: float
    reason: str
    """The failure's classification (``rate_limit``, ``server_error``, ...)."""


@record
class ProviderSwitched:
    """A fallback chain gave up on ``from_provider`` and continues on ``to_provider``."""

    kind: Literal["provider_switched"] = "provider_switched"
    from_provider: str
    to_provider: str
    reason: str


ProviderEvent = (
    ModelTextDelta
    | ModelReasoningDelta
    | ToolCallDelta
    | ProviderRetry
    | ProviderSwitched
    | ModelResponse
)


def coalesce(events: list[ProviderEvent]) -> list[ProviderEvent]:
    """Merge adjacent deltas that continue each other: text with text, reasoning with
    reasoning, and a tool call's argument pieces.

    For what arrived from upstream in one read: the client sees the same text in fewer,
    larger deltas (as if the network had delivered it that way), and the server handles one
    event instead of one per token, which under load is most of its per-token work.
    """
    if len(events) < 2:
        return events
    merged: list[ProviderEvent] = [events[0]]
    for event in events[1:]:
        last = merged[-1]
        if isinstance(event, ModelTextDelta) and isinstance(last, ModelTextDelta):
            merged[-1] = ModelTextDelta(text=last.text + event.text)
        elif isinstance(event, ModelReasoningDelta) and isinstance(last, ModelReasoningDelta):
            merged[-1] = ModelReasoningDelta(text=last.text + event.text)
        elif (
            isinstance(event, ToolCallDelta)
            and isinstance(last, ToolCallDelta)
            and event.index == last.index
            and not event.id
            and not event.name
        ):
            merged[-1] = dataclasses.replace(last, arguments=last.arguments + event.arguments)
        else:
            merged.append(event)
    return merged


class Provider(Protocol):
    """One configured upstream model, reachable through one api_mode."""

    @property
    def name(self) -> str: ...

    @property
    def api_mode(self) -> ApiMode: ...

    @property
    def model(self) -> str: ...

    @property
    def context_window(self) -> int:
        """The model's context window in tokens (from configuration)."""
        ...

    async def refresh_credentials(self) -> bool:
        """Re-read the API key from its source; True when a different key is now in use."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Run one model call.

        Yields deltas as they arrive (all at once, when ``request.stream`` is False and the
        adapter fetches the reply in one piece) and ends with exactly one
        :class:`ModelResponse`.
        Raises :class:`hermes_core.errors.ProviderError` on any upstream failure, including
        one after some deltas were already yielded. Closing the iterator (``aclose()``) or
        cancelling the task consuming it closes the upstream connection at once.
        """
        ...

    async def aclose(self) -> None:
        """Release the HTTP client."""
        ...
