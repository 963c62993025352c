"""What the Responses view needs to show a request's own MCP servers (``tools: [{"type":
"mcp"}]``): the ``mcp_list_tools`` items it opens with, and which of the run's tools are calls
to those servers (shown as ``mcp_call`` items instead of progress lines).

It is plain data, kept with the stored request so that a replayed stream shows the same items.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class RemoteTool:
    server_label: str
    name: str
    """The tool's own name on its server (the model calls it ``<server_label>__<name>``)."""
    asks: bool
    """Calls wait for approval: the item opens once the call may run."""


@dataclass(frozen=True, slots=True)
class RemoteMcpTools:
    listings: list[dict[str, Any]]
    """One per server: ``{"server_label", "tools": [{"name", "input_schema", "description",
    "annotations"}]}``."""
    tools: dict[str, RemoteTool] = field(default_factory=dict)
    """The run's tool name → the server tool it calls."""

    @property
    def asks(self) -> bool:
        """Some call may wait for approval."""
        return any(tool.asks for tool in self.tools.values())

    def record(self) -> dict[str, Any]:
        return {
            "listings": self.listings,
            "tools": {
                name: [tool.server_label, tool.name, tool.asks] for name, tool in self.tools.items()
            },
        }

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> RemoteMcpTools | None:
        if not record:
            return None
        tools = {name: RemoteTool(*value) for name, value in record.get("tools", {}).items()}
        return cls(list(record.get("listings", [])), tools)


@dataclass(slots=True)
class McpCallState:
    """A call of a request's MCP tool as the view follows it."""

    tool: RemoteTool
    arguments: str
    index: int | None = None
    """Its item's output index once the item is open."""
    failed: bool = False
