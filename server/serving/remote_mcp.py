"""A request's own MCP servers (the Responses ``mcp`` tool): connected for the request, their
tools offered to its run, closed when the run ends."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hermes_core.tools.mcp.spec import tool_name
from hermes_core.tools.registry import Tool
from hermes_core.tools.web.guard import AddressRefused, checked_addresses, system_lookup
from server.errors import APIError
from server.profiles import Profile
from server.protocol.remote_mcp import RemoteMcpTool, remote_mcp_tools
from server.runs.manager import Run
from server.services import Services
from server.views.response_mcp import RemoteMcpTools, RemoteTool

if TYPE_CHECKING:
    from hermes_core.tools.mcp.toolset import McpToolset

_closing: set[asyncio.Task[None]] = set()
"""Connections waiting for their run to end (held so that they are not collected)."""


async def connect_remote_mcp(
    services: Services, profile: Profile, remote: list[RemoteMcpTool]
) -> tuple[McpToolset, RemoteMcpTools]:
    """Connect to every server and list its tools. A server URL pointing inside the network
    is a 400 (as ``web_fetch`` refuses it); a server that does not answer, a 424."""
    policy = services.address_policy
    connect_seconds = services.remote_mcp_connect_seconds
    taken = profile.run_tools().names
    for tool in remote:
        if any(name.startswith(f"{tool.label}__") for name in taken):
            raise APIError(
                400,
                f"The server_label {tool.label!r} is already used by this model's own MCP "
                "server: choose another label.",
                param="tools",
            )
        parts = urlsplit(tool.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            await checked_addresses(policy, system_lookup, parts.hostname or "", port)
        except AddressRefused as refused:
            raise APIError(400, f"mcp tool {tool.label!r}: {refused}", param="tools") from None
        except OSError as error:
            raise _unavailable(tool.label, str(error)) from None
    from hermes_core.tools.mcp.toolset import McpToolset  # the MCP SDK: loaded on first use

    toolset = McpToolset([tool.spec(policy, connect_seconds) for tool in remote])
    toolset.start()
    try:
        for label, connection in toolset.connections.items():
            if not await connection.wait_up(connect_seconds):
                raise _unavailable(label, connection.error or "no answer")
    except BaseException:
        await toolset.stop()
        raise
    return toolset, _rendering(toolset)


class RemoteMcp:
    """The MCP servers a request's ``tools`` name, as the tools it brings to its turn (a
    :class:`~server.serving.turn.RequestTools`); ``rendering``: how its stream shows them
    (None: it named none)."""

    def __init__(
        self, services: Services, profile: Profile, tools: list[dict[str, Any]] | None
    ) -> None:
        self._services, self._profile, self._tools = services, profile, tools
        self._toolset: McpToolset | None = None
        self.rendering: RemoteMcpTools | None = None

    @property
    def asks(self) -> bool:
        return self.rendering is not None and self.rendering.asks

    async def connect(self) -> list[Tool]:
        remote = remote_mcp_tools(self._tools)
        if not remote:
            return []
        self._toolset, self.rendering = await connect_remote_mcp(
            self._services, self._profile, remote
        )
        return self._toolset.tools()

    async def stop(self) -> None:
        if self._toolset is not None:
            await self._toolset.stop()

    def close_after(self, run: Run) -> None:
        if self._toolset is not None:
            close_after(run, self._toolset)


def close_after(run: Run, toolset: McpToolset) -> None:
    """Close the request's MCP connections once its run has ended."""

    async def close() -> None:
        try:
            await run.until_finished()
        finally:
            await toolset.stop()

    task = asyncio.create_task(close(), name=f"hermes-mcp-close-{run.id}")
    _closing.add(task)
    task.add_done_callback(_closing.discard)


def _rendering(toolset: McpToolset) -> RemoteMcpTools:
    by_name = {tool.name: tool for tool in toolset.tools()}
    listings = []
    tools: dict[str, RemoteTool] = {}
    for label, connection in toolset.connections.items():
        listed = []
        for remote in connection.tools:
            name = tool_name(label, remote.name)
            asks = name in by_name and by_name[name].needs_approval is not None
            tools[name] = RemoteTool(label, remote.name, asks)
            listed.append(
                {
                    "name": remote.name,
                    "input_schema": remote.input_schema,
                    "description": remote.description,
                    "annotations": (
                        remote.annotations.model_dump(exclude_none=True, by_alias=True)
                        if remote.annotations
                        else None
                    ),
                }
            )
        listings.append({"server_label": label, "tools": listed})
    return RemoteMcpTools(listings, tools)


def _unavailable(label: str, why: str) -> APIError:
    return APIError(
        424,
        f"Error retrieving tool list from MCP server {label!r}: {why}",
        param="tools",
        code="mcp_server_unavailable",
    )
