"""hermes-server's configuration: a YAML file with ``${VAR}`` substitution, overridden by
environment variables, validated into one :class:`HermesConfig` (see docs/configuration.md)."""

from server.config.describe import config_warnings, describe, mask_secret
from server.config.loader import (
    CONFIG_ENV,
    ConfigError,
    LoadedConfig,
    Shadowed,
    edited_shadowed,
    load,
    load_config,
    shadowed_summary,
)
from server.config.schema import (
    DEFAULT_PROFILE_ID,
    SIMULATOR_PROVIDER,
    ApiKey,
    HermesConfig,
    ProfileConfig,
    RetrySettings,
    ServerConfig,
)

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_PROFILE_ID",
    "SIMULATOR_PROVIDER",
    "ApiKey",
    "ConfigError",
    "HermesConfig",
    "LoadedConfig",
    "ProfileConfig",
    "RetrySettings",
    "ServerConfig",
    "Shadowed",
    "config_warnings",
    "describe",
    "edited_shadowed",
    "load",
    "load_config",
    "mask_secret",
    "shadowed_summary",
]
