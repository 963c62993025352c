"""The upstream LLM simulator: a real HTTP server speaking the OpenAI Chat Completions,
OpenAI Responses and Anthropic Messages protocols, scripted per test.

Used by the tests, the benchmarks and the offline demo (``hermes-server simulate``).
"""

from server.simulator.app import create_simulator_app
from server.simulator.runner import SimulatorServer
from server.simulator.scenario import Fault, Reply, Scenario, Step, ToolCallSpec
from server.simulator.state import RecordedRequest, SimulatorState

__all__ = [
    "Fault",
    "RecordedRequest",
    "Reply",
    "Scenario",
    "SimulatorServer",
    "SimulatorState",
    "Step",
    "ToolCallSpec",
    "create_simulator_app",
]
