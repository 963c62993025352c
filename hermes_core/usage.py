"""Token usage, normalised across providers.

Providers disagree on what "input tokens" means: OpenAI's ``prompt_tokens`` include cached
tokens, Anthropic's ``input_tokens`` exclude both cache reads and cache writes. We always count
the whole prompt in ``input_tokens`` and report the cache share beside it, so that the cache-hit
ratio is ``cache_read_tokens / input_tokens`` on every provider.
"""

from __future__ import annotations

from hermes_core.records import record


@record
class Usage:
    """Tokens used by one model call, or summed over several."""

    input_tokens: int = 0
    """The whole prompt, cache reads and cache writes included."""
    cache_read_tokens: int = 0
    """Part of ``input_tokens`` served from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """Part of ``input_tokens`` written to the provider's prompt cache by this call."""
    output_tokens: int = 0
    """Generated tokens, reasoning included."""
    reasoning_tokens: int = 0
    """Part of ``output_tokens`` spent on reasoning/thinking."""

    def as_dict(self) -> dict[str, int]:
        """The fields by name (``dataclasses.asdict`` without its deep copy, on every run)."""
        return {
            "input_tokens": self.input_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )
