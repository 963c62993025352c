"""What an MCP server is to a profile (how to reach it, which of its tools to use), with no
import of the MCP SDK: the configuration and the Responses API's ``mcp`` tool describe servers
at every start and request, while the SDK (``connection.py``, ~0.3 s to import) is loaded only
when a server is connected to."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import mcp_types

    from hermes_core.tools.web.guard import AddressPolicy

MAX_TOOL_NAME = 64
"""Longest tool name the OpenAI and Anthropic APIs accept."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """The agent's name for ``tool`` of ``server``: prefixed, and within the APIs' rules."""
    return _UNSAFE.sub("_", f"{server}__{tool}")[:MAX_TOOL_NAME]


McpApproval = Literal["never", "dangerous", "always"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFilter:
    """Tools by name and by the server's read-only hint (a filter of the Responses API's
    ``allowed_tools`` and ``require_approval``); an unset criterion matches every tool."""

    names: frozenset[str] | None = None
    read_only: bool | None = None

    def matches(self, tool: mcp_types.Tool) -> bool:
        if self.names is not None and tool.name not in self.names:
            return False
        return self.read_only is None or read_only(tool) == self.read_only


def read_only(tool: mcp_types.Tool) -> bool:
    return bool(tool.annotations and tool.annotations.read_only_hint)


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServerSpec:
    """How to reach one MCP server and what of it a profile uses."""

    name: str
    command: str | None = None
    """stdio: the program to start (with ``args``, ``env``, ``cwd``)."""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    """Streamable HTTP: the server's endpoint (with ``headers``)."""
    headers: dict[str, str] = field(default_factory=dict)
    include: tuple[str, ...] = ()
    """Only these tools (all when empty)."""
    exclude: tuple[str, ...] = ()
    allowed: ToolFilter | None = None
    """Only the tools this matches (with ``include`` and ``exclude``)."""
    approval: McpApproval = "never"
    """``dangerous`` asks before tools the server does not mark read-only."""
    never_ask: ToolFilter | None = None
    """Tools that never ask, whatever ``approval`` says (checked first)."""
    always_ask: ToolFilter | None = None
    """Tools that always ask, whatever ``approval`` says."""
    policy: AddressPolicy | None = None
    """Where an HTTP server may be: a client's server URL is held to the tools' address policy;
    None for the operator's own servers."""
    timeout_seconds: float = 60.0
    """Per call; the call is cancelled on the server beyond it."""
    connect_timeout_seconds: float = 15.0

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"

    def wants(self, tool: mcp_types.Tool) -> bool:
        if self.include and tool.name not in self.include:
            return False
        if self.allowed is not None and not self.allowed.matches(tool):
            return False
        return tool.name not in self.exclude
