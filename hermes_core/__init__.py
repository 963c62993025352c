"""hermes_core: the agent engine. No HTTP in here; ``server`` is one consumer of it.

What library users need is re-exported here; ``tests/hermes_core/test_public_api.py`` pins it.
"""

from hermes_core.errors import ConfigurationError, ErrorKind, HermesError, ProviderError
from hermes_core.messages import Message
from hermes_core.providers import (
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderConfig,
    ProviderEvent,
    create_provider,
)
from hermes_core.usage import Usage

__all__ = [
    "ConfigurationError",
    "ErrorKind",
    "HermesError",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "ProviderEvent",
    "Usage",
    "create_provider",
]
