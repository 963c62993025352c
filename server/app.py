"""``create_app(services)``: wires routes, middleware and error handlers once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from starlette.types import Receive, Scope, Send

from hermes_core.skills.format import MAX_ZIP_BYTES
from hermes_core.tools.agent_tools import AGENT_LEVEL_TOOLS
from hermes_core.tools.toolsets import AGENT_TOOLSET
from server.crons.scheduler import scheduling
from server.errors import install_error_handlers
from server.http.auth import RequireKey
from server.http.body_limit import UPLOAD_ENVELOPE_BYTES, BodySizeLimit
from server.http.hot_path import HotPath, HotRoute
from server.http.input_text import RefuseNulInURL
from server.http.openapi import install_openapi
from server.metrics import RequestMetrics, path_endpoint
from server.process.drain import install_drain
from server.protocol.chat import ChatCompletionRequest
from server.protocol.responses import ResponseCreateRequest
from server.routes import (
    admin,
    chat,
    containers,
    conversations,
    crons,
    files,
    health,
    models,
    responses,
    responses_socket,
    runs,
    sessions,
    signed_files,
    skills,
    workspaces,
)
from server.routes import metrics as metrics_routes
from server.routes import usage as usage_routes
from server.services import Services
from server.serving.chat import ChatServing
from server.serving.responses import ResponsesServing
from server.telemetry.tracing import install_tracing

VERSION = "0.1.0"


class HermesApp(FastAPI):
    """FastAPI, with the hot path in front of its whole middleware stack (see
    server/http/hot_path.py): the two create routes' common case pays for none of it."""

    hot_path: HotPath | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot = self.hot_path
        route = hot.route_of(scope) if hot is not None and not self.root_path else None
        if route is None or hot is None:
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self  # as Starlette sets it, for ``request.app``
        await hot.serve(route, scope, receive, send)


def add_routes(app: FastAPI, *routers: APIRouter) -> None:
    """The routers' routes, on the app as they were built: each already has its router's
    prefix and tags, and the app adds no dependencies, responses or body limit of its own.

    Not ``include_router``: FastAPI (0.16x) wraps an included router and builds its routes'
    state again, lazily, on the first request that walks past it — a starting server's first
    ``/health``, behind all 60-odd routes, paid for every one of them — and walks the
    wrappers again on every request after."""
    for router in routers:
        app.router.routes.extend(router.routes)


async def _whole_app(app: FastAPI, scope: Scope, receive: Receive, send: Send) -> None:
    await FastAPI.__call__(app, scope, receive, send)


def create_app(services: Services) -> HermesApp:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await services.open()
        install_drain(services, services.drain_seconds)
        for hook in services.startup_hooks:
            hook()
        yield
        await services.runs.shutdown()
        await services.close()

    app = HermesApp(
        title="hermes-server",
        version=VERSION,
        summary="An OpenAI-compatible HTTP server whose model is a whole agent.",
        lifespan=lifespan,
        # Our observability is /metrics. FastAPI's own OpenTelemetry hooks would otherwise look
        # up the global providers (three environment reads) on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.services = services
    app.state.metrics = services.metrics
    if services.metrics.observe not in services.runs.observers:
        services.runs.observers.append(services.metrics.observe)
    install_tracing(services)  # nothing at all unless OTEL_EXPORTER_OTLP_* asks for traces
    profiles = services.profiles
    services.metrics.name_toolsets(
        {
            **dict.fromkeys(AGENT_LEVEL_TOOLS, AGENT_TOOLSET),
            **{t.name: t.toolset or "custom" for p in profiles for t in p.tools.tools()},
        }
    )
    for profile in profiles:
        if profile.mcp is not None:
            # Configured MCP servers' tools name series once listed (the operator bounds them).
            profile.mcp.listeners.append(
                lambda mcp: services.metrics.add_toolsets({t.name: t.toolset for t in mcp.tools()})
            )
    services.metrics.watch(lambda: metrics_routes.live_state(services))
    services.metrics.start_at_zero(
        models={name: model for p in profiles for name, model in p.provider_models.items()},
        chains=[p.chain_names for p in profiles],
        tools={t.name for p in profiles for t in p.tools.tools() if t.needs_approval},
    )
    app.state.chat = ChatServing(services)
    app.state.responses = ResponsesServing(services)
    install_error_handlers(app)
    install_openapi(app)
    # An upload may be as large as a file, or a skill's zip, may be, with room for the
    # multipart envelope.
    files_limit = services.file_limits.max_file_bytes + UPLOAD_ENVELOPE_BYTES
    skills_limit = max(services.max_body_bytes, MAX_ZIP_BYTES + UPLOAD_ENVELOPE_BYTES)
    max_body_bytes = services.max_body_bytes

    def body_limit(path: str) -> int:
        if path == "/v1/files":
            return files_limit
        if path.startswith("/v1/skills"):  # a skill, or a version of one (POST …/versions)
            return skills_limit
        return max_body_bytes

    app.add_middleware(BodySizeLimit, limit_of=body_limit)
    # Outside the body limit: a request without a key is refused before its body is read.
    app.add_middleware(RequireKey, keyring=services.keyring)
    app.add_middleware(RefuseNulInURL)
    # Added last, so outermost: it also counts 413s and requests that crash.
    app.add_middleware(RequestMetrics, metrics=services.metrics)
    # In front of all of them; it does what they would for the requests it serves.
    app.hot_path = HotPath(
        lambda scope, receive, send: _whole_app(app, scope, receive, send),
        routes={
            path: HotRoute(model, create, path_endpoint(path) or path)
            for path, model, create in (
                ("/v1/chat/completions", ChatCompletionRequest, app.state.chat.create),
                ("/v1/responses", ResponseCreateRequest, app.state.responses.create),
            )
        },
        handlers=app.exception_handlers,
        keyring=services.keyring,
        body_limit=body_limit,
        record=services.metrics.record_request,
        idempotency=services.idempotency,
    )
    add_routes(
        app,
        chat.router,
        responses.router,
        responses_socket.router,
        runs.router,
        runs.webhooks_router,
        crons.router,
        usage_routes.router,
    )
    services.schedules = scheduling(runs.start_api_run)
    add_routes(
        app,
        files.router,
        skills.router,
        conversations.router,
        sessions.router,
        admin.router,
        signed_files.router,  # before /v1/workspaces/{conversation}/…
        workspaces.router,
        containers.router,
        models.router,
        health.router,
        metrics_routes.router,
    )
    return app
