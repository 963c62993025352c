"""The simulator as an ASGI app: three upstream protocols plus a small control API.

Protocol routes::

    POST /v1/chat/completions   OpenAI Chat Completions   (openai_chat.py)
    POST /v1/responses          OpenAI Responses          (openai_responses.py)
    POST /v1/messages           Anthropic Messages        (anthropic_messages.py)
    POST /v1/images/generations OpenAI images API         (openai_images.py)

Control routes (for tests, benchmarks and demos that run the simulator in another process)::

    PUT  /_sim/scenarios/{key}  install a Scenario (JSON) for a model name / x-sim-scenario key
    GET  /_sim/requests         the recorded requests (?scenario=key to filter)
    POST /_sim/reset            forget scenarios, recordings and the prompt cache
    POST /_sim/clock            {"advance": seconds}: move the cache clock forward
    POST /_sim/config           {"min_cacheable_tokens": n}
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from server.simulator import anthropic_messages, openai_chat, openai_images, openai_responses
from server.simulator.scenario import Scenario
from server.simulator.state import Api, CallPlan, SimulatorState
from server.simulator.wire import error_body

Responder = Callable[[SimulatorState, CallPlan, dict[str, Any]], Awaitable[Response]]

SIMULATED_MODELS = ("sim-chat", "sim-reasoner", "claude-sim", "gpt-5-sim")


def _api_key(request: Request) -> str | None:
    key = request.headers.get("x-api-key")
    if key:
        return key
    auth = request.headers.get("authorization", "")
    return auth[7:] if auth.lower().startswith("bearer ") else None


def _protocol_endpoint(
    state: SimulatorState, api: Api, respond: Responder
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return JSONResponse(error_body(api, 400, "Request body is not valid JSON."), 400)
        if not isinstance(body, dict):
            return JSONResponse(error_body(api, 400, "Request body must be a JSON object."), 400)
        plan = state.begin_call(
            api=api,
            path=request.url.path,
            headers=dict(request.headers),
            body=body,
            api_key=_api_key(request),
        )
        fault = plan.step.fault if plan.step else None
        if body.get("stream") or fault is None or not fault.chunk_delay:
            return await respond(state, plan, body)
        # A reply in one piece first takes its generation time: a caller that hangs up
        # meanwhile is recorded as gone, as it would be from a stream.
        return await _unless_hung_up(request, respond(state, plan, body), state, plan)

    return endpoint


async def _unless_hung_up(
    request: Request, answer: Awaitable[Response], state: SimulatorState, plan: CallPlan
) -> Response:
    answering = asyncio.ensure_future(answer)
    watching = asyncio.ensure_future(_hung_up(request))
    try:
        await asyncio.wait((answering, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
    if answering.done():
        return answering.result()
    answering.cancel()
    state.finish(plan.record, "disconnected")
    return Response(status_code=499)  # nobody is there to read it


async def _hung_up(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_simulator_app(state: SimulatorState | None = None) -> Starlette:
    """Build the simulator app around ``state`` (a fresh one when omitted)."""
    sim = state if state is not None else SimulatorState()

    async def put_scenario(request: Request) -> Response:
        try:
            scenario = Scenario.model_validate_json(await request.body())
        except ValidationError as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "invalid_scenario"}}, 400)
        sim.script(request.path_params["key"], scenario)
        return JSONResponse({"ok": True})

    async def list_requests(request: Request) -> Response:
        scenario = request.query_params.get("scenario")
        return JSONResponse(
            {"data": [dataclasses.asdict(r) for r in sim.requests(scenario=scenario)]}
        )

    async def reset(_: Request) -> Response:
        sim.reset()
        return JSONResponse({"ok": True})

    async def clock(request: Request) -> Response:
        payload = json.loads(await request.body() or b"{}")
        sim.advance_clock(float(payload.get("advance", 0)))
        return JSONResponse({"ok": True})

    async def config(request: Request) -> Response:
        payload = json.loads(await request.body() or b"{}")
        if "min_cacheable_tokens" in payload:
            sim.cache.min_cacheable_tokens = int(payload["min_cacheable_tokens"])
        return JSONResponse({"min_cacheable_tokens": sim.cache.min_cacheable_tokens})

    async def models(_: Request) -> Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "hermes-simulator"}
            for m in SIMULATED_MODELS
        ]
        return JSONResponse({"object": "list", "data": data})

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    routes = [
        Route(
            "/v1/chat/completions",
            _protocol_endpoint(sim, "chat_completions", openai_chat.respond),
            methods=["POST"],
        ),
        Route(
            "/v1/responses",
            _protocol_endpoint(sim, "responses", openai_responses.respond),
            methods=["POST"],
        ),
        Route(
            "/v1/messages",
            _protocol_endpoint(sim, "anthropic_messages", anthropic_messages.respond),
            methods=["POST"],
        ),
        Route(
            "/v1/images/generations",
            _protocol_endpoint(sim, "images", openai_images.respond),
            methods=["POST"],
        ),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/_sim/scenarios/{key:path}", put_scenario, methods=["PUT", "POST"]),
        Route("/_sim/requests", list_requests, methods=["GET"]),
        Route("/_sim/reset", reset, methods=["POST"]),
        Route("/_sim/clock", clock, methods=["POST"]),
        Route("/_sim/config", config, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.simulator = sim
    return app
