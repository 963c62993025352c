"""Placeholder: being written (see server/simulator/openai_chat.py for the pattern)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from server.simulator.state import CallPlan, SimulatorState
from server.simulator.wire import error_response


async def respond(state: SimulatorState, plan: CallPlan, body: dict[str, Any]) -> Response:
    return error_response(state, plan, 501, "not implemented yet")
