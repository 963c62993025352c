"""Server settings, read from ``HERMES_*`` environment variables.

The configuration file, agent profiles and upstream chains arrive with the HTTP facade issue;
until then the server announces one agent model and answers health and model listing.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HERMES_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    model_ids: list[str] = Field(default_factory=lambda: ["hermes-agent"])
    """The agent models announced by ``GET /v1/models``."""
    max_body_bytes: int = 4 * 1024 * 1024
