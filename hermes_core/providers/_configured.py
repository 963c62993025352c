"""What every adapter shares: identity from its configuration, an SDK client, key rotation."""

from __future__ import annotations

from typing import Generic, TypeVar

import anthropic
import openai

from hermes_core.providers.config import ProviderConfig
from hermes_core.providers.credentials import rotated_client

Client = TypeVar("Client", openai.AsyncOpenAI, anthropic.AsyncAnthropic)


class ConfiguredProvider(Generic[Client]):
    """Base of the three adapters; each adds ``api_mode`` and ``stream()``."""

    def __init__(self, config: ProviderConfig, client: Client) -> None:
        self._config = config
        self._client: Client = client

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def model(self) -> str:
        return self._config.model

    @property
    def context_window(self) -> int:
        return self._config.context_window

    async def refresh_credentials(self) -> bool:
        """Re-read the key after a 401/403; True when a different key is now in use."""
        client = await rotated_client(self._config, self._client)
        if client is None:
            return False
        self._client = client
        self._key_changed()
        return True

    def _key_changed(self) -> None:
        """Hook for adapters that derive state from the key."""

    async def aclose(self) -> None:
        await self._client.close()
