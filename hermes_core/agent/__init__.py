"""The agent loop: ``Agent`` runs turns as a stream of typed events."""

from hermes_core.agent.agent import Agent
from hermes_core.agent.budget import BudgetPressure, IterationBudget
from hermes_core.agent.callbacks import AgentCallbacks
from hermes_core.agent.config import AgentConfig, AgentRequest
from hermes_core.context.hooks import ContextHooks

__all__ = [
    "Agent",
    "AgentCallbacks",
    "AgentConfig",
    "AgentRequest",
    "BudgetPressure",
    "ContextHooks",
    "IterationBudget",
]
