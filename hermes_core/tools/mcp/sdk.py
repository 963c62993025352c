"""The MCP SDK's names that a connection and its tools use at run time, in one module that
imports the SDK (~0.35 s): :mod:`~hermes_core.tools.mcp.connection` loads it on a worker thread
before its first connect (:func:`~hermes_core.tools.mcp.connection.load_sdk`), so that neither
a server's start nor its event loop waits for it. Everything else names it at function level,
once it is loaded, or under ``TYPE_CHECKING``."""

from __future__ import annotations

import anyio
import httpx2
import mcp_types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from hermes_core.tools.web.guard_httpx import guarded_http_client

__all__ = [
    "MODERN_PROTOCOL_VERSIONS",
    "Client",
    "ListenNotSupportedError",
    "MCPError",
    "StdioServerParameters",
    "anyio",
    "guarded_http_client",
    "httpx2",
    "mcp_types",
    "stdio_client",
    "streamable_http_client",
]
