"""The agent loop: ``Agent`` runs turns as a stream of typed events."""

from hermes_core.agent.budget import BudgetPressure, IterationBudget
from hermes_core.agent.callbacks import AgentCallbacks
from hermes_core.agent.config import AgentConfig, AgentRequest
from hermes_core.agent.context import ContextHooks
from hermes_core.agent.loop import Agent

__all__ = [
    "Agent",
    "AgentCallbacks",
    "AgentConfig",
    "AgentRequest",
    "BudgetPressure",
    "ContextHooks",
    "IterationBudget",
]
