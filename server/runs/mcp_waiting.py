"""Runs that start while their profile's MCP servers are still connecting — the first requests
after a start or a reload — wait for them, then take their tools.

Without the wait such a run got none of the servers' tools, and nothing said so. The wait is
the run's own (in its task, after it was admitted): the event loop and other runs go on, and a
stop ends it. Only runs that start before every server's first attempt to connect has ended
pay for it; the profile then hands out plain agents again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import AgentEvent
from hermes_core.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from hermes_core.tools.mcp.toolset import McpToolset


class McpWaitingAgent(Agent):
    """An agent whose run first waits for the MCP servers still connecting (each up to its
    connect timeout), then runs with the tools listed by then (see :meth:`waits_for`)."""

    _mcp: McpToolset | None = None
    _tools_then: Callable[[], ToolRegistry] | None = None

    def waits_for(self, mcp: McpToolset, tools_then: Callable[[], ToolRegistry]) -> None:
        """Before its run: wait for ``mcp``, then take the tools ``tools_then()`` gives."""
        self._mcp, self._tools_then = mcp, tools_then

    async def execute(self, request: AgentRequest, deliver: Callable[[AgentEvent], object]) -> None:
        if self._mcp is not None:
            if self._mcp.connecting:
                await self._until_settled_or_stopped(self._mcp)
            self.tools = self._tools_for(request)  # also when it settled since it was built
        await super().execute(request, deliver)

    async def _until_settled_or_stopped(self, mcp: McpToolset) -> None:
        # A stop before the run began only sets the event: the run then ends as interrupted
        # the moment it starts, so there is no point waiting on.
        if self.interrupt_event.is_set():
            return
        settled = asyncio.ensure_future(mcp.until_settled())
        stopped = asyncio.ensure_future(self.interrupt_event.wait())
        try:
            await asyncio.wait((settled, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in (settled, stopped):
                waiting.cancel()
            await asyncio.gather(settled, stopped, return_exceptions=True)

    def _tools_for(self, request: AgentRequest) -> ToolRegistry:
        """The tools listed by now, less any a client tool of this request is named like (the
        request was checked against the tools it would have had; it must not fail now)."""
        if self._tools_then is None:
            return self.tools
        tools = self._tools_then()
        clashing = {tool.name for tool in request.client_tools} & set(tools.names)
        return tools.without(*clashing) if clashing else tools
