"""How a provider is configured, and which api_mode it speaks."""

from __future__ import annotations

from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from hermes_core.errors import ConfigurationError
from hermes_core.providers.base import API_MODES, ApiMode

# Providers that speak only the Responses API.
_RESPONSES_PROVIDERS = frozenset({"openai-codex", "codex", "xai"})
_RESPONSES_HOSTS = ("chatgpt.com/backend-api/codex", "api.x.ai")


class ProviderConfig(BaseModel):
    """One upstream: where it is, how to authenticate, which model to call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Our name for this upstream, used in logs, events and metrics."""
    model: str
    """The upstream's model id."""
    provider: str | None = None
    """Vendor hint (``openai``, ``anthropic``, ``openrouter``, ...) used to pick an api_mode."""
    api_mode: ApiMode | None = None
    """Explicit wire protocol; resolved from ``provider`` and ``base_url`` when omitted."""
    base_url: str | None = None
    api_key: SecretStr | None = None
    """A literal key. The sources below are re-read when the upstream answers 401/403."""
    api_key_env: str | None = None
    """Name of an environment variable holding the key."""
    api_key_file: str | None = None
    """Path of a file holding the key (surrounding whitespace ignored)."""
    api_key_command: str | None = None
    """A shell command whose standard output is the key (e.g. a secrets-manager CLI)."""
    context_window: int = 128_000
    timeout: float = Field(default=600.0, gt=0)
    """Seconds to wait for connect, for the first byte and between stream chunks."""
    max_output_tokens: int = 4096
    """Sent as ``max_tokens`` when the request names none (Anthropic requires one)."""
    vision: bool = True
    """The model sees images. False for a text-only model: images (a user's, a tool's) reach
    it as placeholders, and a profile with ``vision_providers`` offers ``vision_analyze``."""

    @property
    def resolved_api_mode(self) -> ApiMode:
        return resolve_api_mode(
            api_mode=self.api_mode, provider=self.provider, base_url=self.base_url
        )


def resolve_api_mode(
    *, api_mode: str | None = None, provider: str | None = None, base_url: str | None = None
) -> ApiMode:
    """Pick the wire protocol: explicit mode, then vendor, then base-URL heuristics, then Chat."""
    if api_mode is not None:
        for mode in API_MODES:
            if api_mode == mode:
                return mode
        raise ConfigurationError(
            f"unknown api_mode {api_mode!r}; expected one of {', '.join(API_MODES)}"
        )
    vendor = (provider or "").lower()
    if vendor == "anthropic":
        return "anthropic_messages"
    if vendor in _RESPONSES_PROVIDERS:
        return "codex_responses"
    if base_url:
        parsed = urlparse(base_url)
        host_and_path = f"{parsed.netloc}{parsed.path}".rstrip("/").lower()
        if parsed.netloc.lower() == "api.anthropic.com" or host_and_path.endswith("/anthropic"):
            return "anthropic_messages"
        if any(host_and_path.startswith(prefix) for prefix in _RESPONSES_HOSTS):
            return "codex_responses"
    return "chat_completions"
