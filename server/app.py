"""``create_app(settings)``: wires routes, error handlers and services once."""

from __future__ import annotations

from fastapi import FastAPI

from server.errors import install_error_handlers
from server.routes import health, models
from server.settings import ServerSettings

VERSION = "0.1.0"


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    app = FastAPI(
        title="hermes-server",
        version=VERSION,
        summary="An OpenAI-compatible HTTP server whose model is a whole agent.",
    )
    app.state.settings = settings if settings is not None else ServerSettings()
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(models.router)
    return app
