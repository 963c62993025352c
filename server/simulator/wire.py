"""Wire helpers shared by the three protocol endpoints: SSE frames, errors, injected faults."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from server.simulator.scenario import Fault
from server.simulator.state import Api, CallPlan, SimulatorState

# Error ``type`` per status, in each vendor's vocabulary.
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class SimulatedDisconnect(Exception):
    """Raised inside a stream to make the server drop the connection, as scripted."""


class _HideSimulatedDisconnects(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None:
            if isinstance(exc, SimulatedDisconnect):
                return False
            exc = exc.__cause__ or exc.__context__
        return True


logging.getLogger("uvicorn.error").addFilter(_HideSimulatedDisconnects())


def sse(data: Any, *, event: str | None = None) -> str:
    """One SSE frame: an optional ``event:`` line, one ``data:`` line, a blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {payload}\n\n"


def error_body(api: Api, status: int, message: str) -> dict[str, Any]:
    if api == "anthropic_messages":
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    code = "rate_limit_exceeded" if status == 429 else None
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def error_response(
    state: SimulatorState, plan: CallPlan, status: int, message: str, fault: Fault | None = None
) -> Response:
    """Answer the call with an HTTP error in the protocol's own envelope."""
    headers: dict[str, str] = {}
    if fault is not None and fault.retry_after is not None:
        headers["retry-after"] = f"{fault.retry_after:g}"
    if fault is not None and fault.retry_after_ms is not None:
        headers["retry-after-ms"] = str(fault.retry_after_ms)
    if plan.record.api == "anthropic_messages":
        headers["request-id"] = f"req_sim_{plan.record.seq}"
    else:
        headers["x-request-id"] = f"req_sim_{plan.record.seq}"
    state.finish(plan.record, "error", status=status)
    return JSONResponse(error_body(plan.record.api, status, message), status, headers=headers)


async def preflight(state: SimulatorState, plan: CallPlan) -> Response | None:
    """Apply the step's up-front faults; return the error response when the call must fail."""
    if plan.unauthorized:
        return error_response(state, plan, 401, "Invalid API key (simulated).")
    fault = plan.step.fault if plan.step else None
    if fault is None:
        return None
    if fault.first_byte_delay:
        await asyncio.sleep(fault.first_byte_delay)
    if fault.status is not None:
        message = fault.message or f"Simulated upstream failure with status {fault.status}."
        return error_response(state, plan, fault.status, message, fault)
    return None


def stream_response(
    state: SimulatorState,
    plan: CallPlan,
    frames: Sequence[str],
    *,
    error_frame: Callable[[str, str], str],
) -> StreamingResponse:
    """Stream prepared SSE frames, applying chunk delays and scripted drops, recording the end.

    ``error_frame(type, message)`` renders an in-stream error in the protocol's own shape.
    """
    fault = plan.step.fault if plan.step else None
    delay = fault.chunk_delay if fault else 0.0
    cut_at = _cut_at(fault)

    async def body() -> AsyncIterator[str]:
        outcome: str = "disconnected"
        try:
            for index, frame in enumerate(frames):
                if cut_at is not None and index == cut_at:
                    if fault is not None and fault.stream_error is not None:
                        yield error_frame(fault.stream_error, "Simulated in-stream error.")
                        state.count_frame(plan.record)
                        outcome = "dropped"
                        return
                    outcome = "dropped"
                    raise SimulatedDisconnect(f"dropped after {index} frames")
                if delay and index:
                    await asyncio.sleep(delay)
                yield frame
                state.count_frame(plan.record)
            outcome = "completed"
        finally:
            state.finish(plan.record, outcome)  # type: ignore[arg-type]

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-request-id": f"req_sim_{plan.record.seq}"},
    )


async def json_reply(
    state: SimulatorState,
    plan: CallPlan,
    payload: dict[str, Any],
    *,
    frame_count: Callable[[], int],
) -> Response:
    """Answer a call made without ``stream`` in one piece, once its stream would have ended.

    The step's stream faults apply as a real upstream shows them to such a call: the same
    generation time (``chunk_delay`` per frame it would have streamed), and a failure part-way
    as a dropped connection or, for an in-stream error, a 500. ``frame_count`` is how many
    frames the stream would have had (asked only when a fault needs it).
    """
    fault = plan.step.fault if plan.step else None
    cut_at = _cut_at(fault)
    if fault is not None and (fault.chunk_delay or cut_at is not None):
        frames = frame_count()
        sent = frames if cut_at is None else min(cut_at, frames)
        if fault.chunk_delay and sent > 1:
            await asyncio.sleep(fault.chunk_delay * (sent - 1))
        if cut_at is not None and cut_at < frames:
            if fault.stream_error is not None:
                return error_response(state, plan, 500, "Simulated in-stream error.")
            return _dropped(state, plan)
    state.finish(plan.record, "completed", status=200)
    return JSONResponse(payload, headers={"x-request-id": f"req_sim_{plan.record.seq}"})


def _cut_at(fault: Fault | None) -> int | None:
    """After how many frames the step's fault ends the stream (None: it does not)."""
    if fault is None:
        return None
    if fault.disconnect_after is None and fault.stream_error is not None:
        return 1  # an in-stream error comes after the first frame unless told otherwise
    return fault.disconnect_after


def _dropped(state: SimulatorState, plan: CallPlan) -> Response:
    """Headers, then the connection dropped before the body."""

    async def body() -> AsyncIterator[bytes]:
        yield b""  # the headers are out
        state.finish(plan.record, "dropped")
        raise SimulatedDisconnect("dropped before the body")

    return StreamingResponse(body(), media_type="application/json")


def split_text(text: str, chunk_count: int | None, chunk_size: int = 16) -> list[str]:
    """Cut ``text`` into stream deltas: exactly ``chunk_count`` pieces, or ~``chunk_size`` chars."""
    if not text:
        return []
    if chunk_count is None:
        return [text[i : i + chunk_size] for i in range(0, len(text), chunk_size)]
    count = min(chunk_count, len(text))
    base, extra = divmod(len(text), count)
    pieces, start = [], 0
    for i in range(count):
        end = start + base + (1 if i < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces
