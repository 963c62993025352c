"""What every adapter shares: identity from its configuration, and its key, read again when
the upstream refuses it (key rotation)."""

from __future__ import annotations

from hermes_core.providers.config import ProviderConfig
from hermes_core.providers.credentials import read_key, reread_key

NO_KEY = "unused"
"""Sent when no key is configured: local servers often need none, and the SDKs insist on one."""


class ConfiguredProvider:
    """Base of the three adapters; each adds ``api_mode``, ``stream()`` and ``aclose()``, and
    rebuilds whatever carries the key in :meth:`_key_changed`."""

    def __init__(self, config: ProviderConfig) -> None:
        self._config = config
        self._key = read_key(config) or NO_KEY

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
        key = await reread_key(self._config)
        if not key or key == self._key:
            return False
        self._key = key
        self._key_changed()
        return True

    def _key_changed(self) -> None:
        """Hook: the key in ``self._key`` is new."""
