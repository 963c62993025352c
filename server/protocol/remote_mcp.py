"""The Responses API's own MCP tool: ``{"type": "mcp", "server_label", "server_url", …}`` in a
request's ``tools``. The server connects to that MCP server for the request; this module reads
and checks the tool's fields and says how the server is to be used (an ``McpServerSpec``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hermes_core.tools.mcp.spec import McpApproval, McpServerSpec, ToolFilter
from hermes_core.tools.web.guard import AddressPolicy
from server.errors import APIError

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""An HTTP field name (RFC 9110's token)."""
_HEADER_VALUE = re.compile(r"^[\t\x20-\x7e]*$")
"""What an HTTP client sends as a field value: visible ASCII, spaces and tabs (no line break
that would start another field, nothing its ASCII encoding would fail on a connection later)."""
CONNECT_SECONDS = 10.0
"""How long a request waits for its MCP server to connect and list its tools."""
CALL_SECONDS = 120.0
MAX_SERVERS = 8
"""``mcp`` tools one request may bring: each is a connection the server opens for it."""


@dataclass(frozen=True, slots=True)
class RemoteMcpTool:
    """One ``mcp`` tool of a request, checked."""

    label: str
    url: str
    headers: dict[str, str]
    allowed: ToolFilter | None
    approval: McpApproval
    """``always`` unless the request says ``never``; with filters, for tools they miss."""
    never_ask: ToolFilter | None = None
    always_ask: ToolFilter | None = None

    def spec(
        self, policy: AddressPolicy, connect_seconds: float = CONNECT_SECONDS
    ) -> McpServerSpec:
        return McpServerSpec(
            name=self.label,
            url=self.url,
            headers=self.headers,
            allowed=self.allowed,
            approval=self.approval,
            never_ask=self.never_ask,
            always_ask=self.always_ask,
            policy=policy,
            timeout_seconds=CALL_SECONDS,
            connect_timeout_seconds=connect_seconds,
        )


def remote_mcp_tools(tools: list[dict[str, Any]] | None) -> list[RemoteMcpTool]:
    """The request's ``mcp`` tools, checked (a 400 naming ``tools`` otherwise)."""
    found = [_remote(tool) for tool in tools or () if tool.get("type") == "mcp"]
    if len(found) > MAX_SERVERS:
        raise _invalid(f"At most {MAX_SERVERS} mcp tools per request.")
    labels = [tool.label for tool in found]
    for label in labels:
        if labels.count(label) > 1:
            raise _invalid(f"Two mcp tools have the server_label {label!r}.")
    return found


def echo_mcp_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An ``mcp`` tool as the Response lists it: never its headers or authorization, which
    may hold credentials (the stored response keeps what it lists)."""
    echoed = {
        key: tool.get(key)
        for key in ("server_label", "server_url", "server_description", "allowed_tools")
    }
    return {
        "type": "mcp",
        **echoed,
        "headers": None,
        "require_approval": tool.get("require_approval", "always"),
    }


def _remote(tool: dict[str, Any]) -> RemoteMcpTool:
    label, url = tool.get("server_label"), tool.get("server_url")
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise _invalid(
            "An mcp tool needs a server_label of 1-32 letters, digits, '_' or '-' "
            "(starting with a letter or digit)."
        )
    if tool.get("connector_id") is not None:
        raise _invalid("Connectors are not supported: give the MCP server's server_url.")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise _invalid(f"The mcp tool {label!r} needs a server_url (http or https).")
    headers = tool.get("headers") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise _invalid(f"The headers of the mcp tool {label!r} must map names to strings.")
    authorization = tool.get("authorization")
    if authorization is not None:
        if not isinstance(authorization, str):
            raise _invalid(f"The authorization of the mcp tool {label!r} must be a string.")
        headers = {**headers, "Authorization": f"Bearer {authorization}"}
    for name, value in headers.items():
        # Refused here, at once: sent, such a header fails the connection (a 424 after the
        # connect timeout), or a line break in it would add a header of the client's choosing.
        if not _HEADER_NAME.fullmatch(name):
            raise _invalid(f"The mcp tool {label!r} has a header name HTTP cannot carry.")
        if not _HEADER_VALUE.fullmatch(value):
            field = "authorization" if name == "Authorization" else f"header {name!r}"
            raise _invalid(
                f"The {field} of the mcp tool {label!r} holds characters HTTP cannot carry "
                "(only visible ASCII, spaces and tabs)."
            )
    allowed = _allowed(tool.get("allowed_tools"), label)
    approval = tool.get("require_approval")
    if approval is None or approval in ("always", "never"):
        return RemoteMcpTool(label, url, headers, allowed, approval or "always")
    if not isinstance(approval, dict) or set(approval) - {"always", "never"}:
        raise _invalid(
            f"require_approval of the mcp tool {label!r} must be 'always', 'never', or an "
            "object with 'always' and/or 'never' filters."
        )
    return RemoteMcpTool(
        label,
        url,
        headers,
        allowed,
        "always",  # a tool neither filter names is asked about
        never_ask=_filter(approval.get("never"), "require_approval.never"),
        always_ask=_filter(approval.get("always"), "require_approval.always"),
    )


def _allowed(value: Any, label: str) -> ToolFilter | None:
    if value is None:
        return None
    if isinstance(value, list):
        if not all(isinstance(name, str) for name in value):
            raise _invalid(f"allowed_tools of the mcp tool {label!r} must list tool names.")
        return ToolFilter(names=frozenset(value))
    return _filter(value, "allowed_tools")


def _filter(value: Any, where: str) -> ToolFilter | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"tool_names", "read_only"}:
        raise _invalid(f"{where} must be an object with tool_names and/or read_only.")
    names, read_only = value.get("tool_names"), value.get("read_only")
    if names is not None and not (
        isinstance(names, list) and all(isinstance(n, str) for n in names)
    ):
        raise _invalid(f"{where}.tool_names must be a list of tool names.")
    if read_only is not None and not isinstance(read_only, bool):
        raise _invalid(f"{where}.read_only must be true or false.")
    return ToolFilter(names=frozenset(names) if names is not None else None, read_only=read_only)


def _invalid(message: str) -> APIError:
    return APIError(400, message, param="tools")
