"""``GET /metrics`` for Prometheus and ``GET /ready`` for orchestrators; neither needs a key.

A scrape only serialises counters already in memory: no database, no upstream, no await.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.retry import PROCESS_COOLDOWNS
from hermes_core.tools.isolation import isolation
from server.errors import APIError
from server.http.input_text import StrictJSONRoute
from server.http.openapi import errors
from server.metrics import LiveState, McpServerUp, Metrics
from server.services import Services

router = APIRouter(tags=["health"], route_class=StrictJSONRoute)


class McpServerState(BaseModel):
    profile: str
    server: str
    up: bool
    error: str | None = None
    """Why the server is down; it is being reconnected meanwhile."""


class SandboxIsolation(BaseModel):
    """What keeps sandboxed commands from starving each other here (``docs/isolation.md``)."""

    cgroups: str | None
    """``cgroup v2 (memory, pids, cpu)`` or ``cgroup v1 (…)``; None when unavailable."""
    cgroups_missing: str | None = None
    """Why there are no cgroups: memory and processes are then bounded per process only."""
    user_per_workspace: bool
    """Each workspace's commands run as a user of their own (the server runs as root)."""
    seccomp: bool
    """New user namespaces are refused inside the sandbox."""


class Readiness(BaseModel):
    status: str = "ready"
    """``ready``, or ``degraded`` while an MCP server is down: runs go on without its tools,
    so the server stays ready."""
    profiles: int
    """How many agent profiles (models) are configured."""
    mcp_servers: list[McpServerState] = []
    """Every configured MCP server, up or not (and why not)."""
    cooling_providers: list[str] = []
    """Providers kept out of first place now (rate-limited; with Redis, by any replica)."""
    sandboxes: SandboxIsolation | None = None
    """How commands are isolated, when a profile runs them (``shell``, ``code``)."""


# Not in the OpenAPI document: it is not JSON, and only Prometheus reads it.
@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Every ``hermes_*`` metric in the Prometheus text format."""
    source: Metrics = request.app.state.metrics
    return Response(generate_latest(source.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/ready", response_model=Readiness, responses=errors(503))
async def ready(request: Request) -> Readiness:
    """Readiness: the server has something to serve. Needs no API key; 503 until it does."""
    services: Services = request.app.state.services
    if not services.profiles:
        raise APIError(503, "No agent profile is configured.", code="not_ready")
    if services.runs.draining:
        # First thing on SIGTERM: load balancers stop sending while the runs finish.
        raise APIError(503, "Shutting down: finishing the runs in progress.", code="draining")
    if services.store is not None and not await services.store.db.ping():
        raise APIError(503, "The database is not reachable.", code="not_ready")
    volume = services.cluster.volume if services.cluster is not None else None
    if volume is not None and (problem := await volume.problem()) is not None:
        raise APIError(503, problem, code="not_ready")  # uploads and workspaces out of reach
    servers = [
        McpServerState(profile=profile.id, server=name, up=error is None, error=error)
        for profile in services.profiles
        if profile.mcp is not None
        for name, error in profile.mcp.status().items()
    ]
    status = "degraded" if any(not server.up for server in servers) else "ready"
    return Readiness(
        status=status,
        profiles=len(services.profiles),
        mcp_servers=servers,
        cooling_providers=PROCESS_COOLDOWNS.cooling(),
        sandboxes=_sandboxes(services),
    )


def live_state(services: Services) -> LiveState:
    """What ``/metrics`` reads at each scrape (as ``/ready`` reports it): every configured
    provider and whether it is cooling down, every MCP server and whether it is up. Memory
    only: the profiles live now (a reload replaces them), their cooldowns and connections."""
    cooling: dict[str, bool] = {}
    for profile in services.profiles:
        for chain in profile.chains:
            if isinstance(chain, FallbackChain):
                now = set(chain.cooldowns.cooling())
                for member in chain.providers:
                    cooling[member.name] = cooling.get(member.name, False) or member.name in now
            else:
                cooling.setdefault(chain.name, False)
    servers = [
        McpServerUp(profile=profile.id, server=name, up=error is None)
        for profile in services.profiles
        if profile.mcp is not None
        for name, error in profile.mcp.status().items()
    ]
    return LiveState(cooling=cooling, mcp_servers=servers)


def _sandboxes(services: Services) -> SandboxIsolation | None:
    if not any({"shell", "code"} & set(profile.toolsets) for profile in services.profiles):
        return None
    found = isolation()  # found once per process: no I/O after the first call
    return SandboxIsolation(
        cgroups=found.cgroups,
        cgroups_missing=found.cgroups_missing,
        user_per_workspace=found.user_per_workspace,
        seccomp=found.seccomp,
    )
