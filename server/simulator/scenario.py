"""What a scripted upstream does on each successive model call.

A scenario is a list of steps; each model call consumes one step. A step says what the model
answers (``reply``; omitted means "let the default policy answer") and which fault to inject
(``fault``). Steps are plain JSON, so tests script the simulator in-process or over HTTP alike.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from server.simulator.tokens import estimate_tokens


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCallSpec(_Strict):
    """One tool call the model makes."""

    name: str
    """May name a tool that was never offered (a hallucinated tool)."""
    arguments: dict[str, Any] | None = None
    """Sent as JSON text."""
    raw_arguments: str | None = None
    """Sent verbatim instead of ``arguments``: malformed or truncated JSON."""
    id: str | None = None
    """Call id; generated when omitted."""

    @property
    def arguments_text(self) -> str:
        if self.raw_arguments is not None:
            return self.raw_arguments
        return json.dumps(self.arguments or {}, separators=(",", ":"))


FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


class Reply(_Strict):
    """The model's answer to one call. An all-empty reply is the "empty response" case."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    finish_reason: FinishReason | None = None
    """Overrides the natural finish reason (``length`` for truncated arguments)."""
    chunk_count: int | None = Field(default=None, ge=1)
    """Stream the text in exactly this many deltas (default: about 16 characters each)."""
    output_tokens: int | None = Field(default=None, ge=0)
    """Overrides the estimated output token count."""
    refusal: str = ""
    """The model declines, saying this (Chat Completions' ``refusal``; the other protocols
    answer it as text)."""

    @property
    def reasoning_tokens(self) -> int:
        return estimate_tokens(self.reasoning)

    @property
    def total_output_tokens(self) -> int:
        """``output_tokens`` when scripted, else an estimate of everything generated."""
        if self.output_tokens is not None:
            return self.output_tokens
        generated = self.text + "".join(c.name + c.arguments_text for c in self.tool_calls)
        return estimate_tokens(generated) + self.reasoning_tokens

    @property
    def resolved_finish_reason(self) -> FinishReason:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


class Fault(_Strict):
    """Something going wrong on one call."""

    status: int | None = Field(default=None, ge=400, le=599)
    """Answer with this HTTP error instead of a reply (429, 500, 503, 401, 403, ...)."""
    message: str | None = None
    """Error message for ``status``."""
    retry_after: float | None = Field(default=None, ge=0)
    """Seconds, sent as the ``Retry-After`` header."""
    retry_after_ms: int | None = Field(default=None, ge=0)
    """Milliseconds, sent as the ``retry-after-ms`` header."""
    first_byte_delay: float = Field(default=0.0, ge=0)
    """Seconds before the response starts (headers included)."""
    chunk_delay: float = Field(default=0.0, ge=0)
    """Seconds between streamed frames."""
    disconnect_after: int | None = Field(default=None, ge=0)
    """Drop the connection after sending this many stream frames."""
    stream_error: str | None = None
    """Send an in-stream error frame of this type (e.g. ``overloaded_error``) after
    ``disconnect_after`` frames (default 1) instead of dropping the connection."""


class Step(_Strict):
    """One model call: a reply (or the default policy) and an optional fault."""

    reply: Reply | None = None
    fault: Fault | None = None
    repeat: int = Field(default=1, ge=1, le=10_000)
    """Serve this step for this many successive calls."""


class Scenario(_Strict):
    """The script for one scenario key (a model name or an ``x-sim-scenario`` header)."""

    steps: list[Step] = Field(default_factory=list)
    api_key: str | None = None
    """When set, calls with another key get a 401 (for credential-refresh tests)."""

    def expanded(self) -> list[Step]:
        return [step for step in self.steps for _ in range(step.repeat)]
