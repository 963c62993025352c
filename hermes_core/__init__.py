"""hermes_core: the agent engine. No HTTP in here; ``server`` is one consumer of it.

What library users need is re-exported here; ``tests/hermes_core/test_public_api.py`` pins it.
"""

from hermes_core.agent import (
    Agent,
    AgentCallbacks,
    AgentConfig,
    AgentRequest,
    BudgetPressure,
    ContextHooks,
    IterationBudget,
)
from hermes_core.errors import (
    ConfigurationError,
    ErrorKind,
    HermesError,
    InvalidRequestError,
    ProviderError,
)
from hermes_core.events import AgentEvent, ExitReason
from hermes_core.messages import Message
from hermes_core.providers import (
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderConfig,
    ProviderEvent,
    create_provider,
)
from hermes_core.tools.registry import Tool, ToolContext, ToolRegistry
from hermes_core.usage import Usage

__all__ = [
    "Agent",
    "AgentCallbacks",
    "AgentConfig",
    "AgentEvent",
    "AgentRequest",
    "BudgetPressure",
    "ConfigurationError",
    "ContextHooks",
    "ErrorKind",
    "ExitReason",
    "HermesError",
    "InvalidRequestError",
    "IterationBudget",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "ProviderEvent",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "Usage",
    "create_provider",
]
