"""``check-config``'s look at the MCP servers: connect to each, list its tools, say why not."""

from __future__ import annotations

from typing import TextIO

from hermes_core.tools.mcp.connection import McpConnection
from server.config.schema import HermesConfig


async def probe_mcp_servers(config: HermesConfig, errlog: TextIO) -> list[str]:
    """One line per configured MCP server: up with its tools, or down and why (the servers'
    own stderr goes to ``errlog``)."""
    lines = []
    for profile in config.profiles:
        for server in profile.mcp_servers:
            spec = server.spec()
            connection = McpConnection(spec, errlog=errlog)
            connection.start()
            try:
                up = await connection.wait_up(spec.connect_timeout_seconds + 1)
                where = f"{profile.id}/{spec.name} ({spec.transport})"
                if up:
                    names = ", ".join(t.name for t in connection.tools) or "no tools"
                    lines.append(f"{where}: up, {len(connection.tools)} tools: {names}")
                else:
                    lines.append(f"{where}: DOWN: {connection.error}")
            finally:
                await connection.stop()
    return lines
