"""A profile's MCP servers as tools: ``<server>__<tool>``, results turned into text (and
images, which the model sees).

The set of tools changes while the server runs (a server connects, restarts, or says its list
changed), so the agent reads :meth:`McpToolset.tools` when a run starts; a run keeps the tools
it started with. A run that starts before a server's first attempt to connect has ended waits
for it first (:meth:`McpToolset.until_settled`).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TextIO

from hermes_core.events import ToolProgress
from hermes_core.tools.mcp.connection import McpConnection, McpUnavailable
from hermes_core.tools.mcp.spec import McpServerSpec, read_only, tool_name
from hermes_core.tools.registry import ApprovalCheck, Tool, ToolContext
from hermes_core.tools.results import ImagePart, ToolOutput

if TYPE_CHECKING:
    # Not at start: the connections load the SDK off the event loop before their first
    # connect (connection.load_sdk); a tool and its results exist only after one, and name
    # the SDK through hermes_core.tools.mcp.sdk then.
    import mcp_types


class McpToolset:
    """The MCP servers of one profile, connected in the background."""

    def __init__(self, specs: Iterable[McpServerSpec], *, errlog: TextIO | None = None) -> None:
        self.connections = {
            spec.name: McpConnection(spec, on_tools_changed=self._changed, errlog=errlog)
            for spec in specs
        }
        self.version = 0
        """Bumped whenever the tools may have changed."""
        self.listeners: list[Callable[[McpToolset], None]] = []
        """Called after the tools may have changed (a server connected or relisted)."""
        self._tools: list[Tool] | None = None

    def start(self) -> None:
        for connection in self.connections.values():
            connection.start()

    async def stop(self) -> None:
        for connection in self.connections.values():
            await connection.stop()

    @property
    def connecting(self) -> bool:
        """Some server's first attempt to connect has not ended yet (just after a start or a
        reload): a run starting now should wait for it (:meth:`until_settled`)."""
        return not all(c.settled for c in self.connections.values())

    async def until_settled(self) -> None:
        """Return once every server's first attempt to connect has ended, or its connect
        timeout has passed; the servers are waited for together."""
        pending = [c for c in self.connections.values() if not c.settled]
        if pending:
            await asyncio.gather(*(c.until_settled() for c in pending))

    def status(self) -> dict[str, str | None]:
        """Server → None when it is up, else why it is down."""
        return {name: c.error for name, c in self.connections.items()}

    def tools(self) -> list[Tool]:
        if self._tools is None:
            self._tools = [
                _as_tool(connection, listed)
                for connection in self.connections.values()
                for listed in connection.tools
            ]
        return self._tools

    def _changed(self) -> None:
        self._tools = None
        self.version += 1
        for listener in self.listeners:
            listener(self)


def _as_tool(connection: McpConnection, listed: mcp_types.Tool) -> Tool:
    spec = connection.spec
    remote = listed.name
    name = tool_name(spec.name, remote)

    async def call(arguments: dict[str, Any], ctx: ToolContext) -> str | ToolOutput:
        async def progress(progress: float, total: float | None, message: str | None) -> None:
            share = f"{progress:g}/{total:g}" if total else f"{progress:g}"
            line = f"{message} ({share})" if message else share
            ctx.emit(ToolProgress, call_id=ctx.call_id, name=name, output=line + "\n")

        from hermes_core.tools.mcp.sdk import MCPError  # loaded: the server was listed

        try:
            result = await connection.call(remote, arguments, progress)
        except McpUnavailable as unavailable:
            return f"Error: {unavailable}"
        except TimeoutError:
            return (
                f"Error: MCP server {spec.name!r} did not answer {remote} within "
                f"{spec.timeout_seconds:g} s; the call was cancelled."
            )
        except MCPError as error:  # the server's JSON-RPC error: the model's information
            return f"Error: MCP server {spec.name!r} refused the call: {error.error.message}"
        return result_output(result)

    title = listed.title or (listed.annotations.title if listed.annotations else None)
    description = listed.description or title or f"{remote} (MCP server {spec.name})"
    return Tool(
        name=name,
        toolset=f"mcp:{spec.name}",
        description=description,
        parameters=listed.input_schema or {"type": "object", "properties": {}},
        handler=call,
        cancellable=True,
        # Remote tools may change remote state: one at a time unless marked read-only.
        concurrent_safe=read_only(listed),
        needs_approval=_approval(spec, listed),
        summarize=lambda args: f"{spec.name}: {remote} {_preview(args)}",
    )


def _approval(spec: McpServerSpec, listed: mcp_types.Tool) -> ApprovalCheck | None:
    if spec.never_ask is not None and spec.never_ask.matches(listed):
        return None
    if spec.always_ask is not None and spec.always_ask.matches(listed):
        reason = f"calls to {listed.name} on MCP server {spec.name} are asked about"
    elif spec.approval == "never":
        return None
    elif spec.approval == "dangerous":
        hints = listed.annotations
        # The MCP hints: a tool may say it only reads, or that it changes nothing for good.
        if hints is not None and (hints.read_only_hint or hints.destructive_hint is False):
            return None
        reason = f"{listed.name} on MCP server {spec.name} may change things"
    else:
        reason = f"this profile asks before every call to MCP server {spec.name}"
    return lambda arguments: reason


def _preview(arguments: dict[str, Any]) -> str:
    text = json.dumps(arguments, ensure_ascii=False)
    return text if len(text) <= 80 else text[:79] + "…"


def result_text(result: mcp_types.CallToolResult) -> str:
    """A tool result as the model reads it: text parts as they are, images and binary
    resources described, embedded text resources with their URI, structured content as JSON
    when there is nothing else. An error result starts with ``Error:``."""
    parts = [_part_text(part) for part in result.content]
    if not any(parts) and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    text = "\n".join(p for p in parts if p)
    if result.is_error:
        return f"Error: {text or 'the tool failed'}"
    return text or "(no output)"


def result_output(result: mcp_types.CallToolResult) -> str | ToolOutput:
    """A tool result as the model receives it: :func:`result_text`, and the images it holds
    as images the model sees (the text still says where each one was). The executor drops
    images beyond its bounds, with a note."""
    from hermes_core.tools.mcp.sdk import mcp_types

    text = result_text(result)
    images = [
        ImagePart(part.mime_type, base64.b64decode(part.data, validate=False))
        for part in result.content
        if isinstance(part, mcp_types.ImageContent) and part.data
    ]
    if not images or result.is_error:
        return text
    return ToolOutput(text, images)


def _part_text(part: Any) -> str:
    from hermes_core.tools.mcp.sdk import mcp_types

    match part:
        case mcp_types.TextContent():
            return part.text
        case mcp_types.ImageContent() | mcp_types.AudioContent():
            kind = "image" if isinstance(part, mcp_types.ImageContent) else "audio"
            size = len(base64.b64decode(part.data, validate=False)) if part.data else 0
            return f"[{kind}: {part.mime_type}, {size} bytes]"
        case mcp_types.EmbeddedResource():
            resource = part.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                return f"[resource {resource.uri}]\n{resource.text}"
            return f"[resource {resource.uri}: {resource.mime_type or 'binary'}, not text]"
        case mcp_types.ResourceLink():
            return f"[resource link {part.uri}" + (f": {part.name}]" if part.name else "]")
        case _:
            return ""
