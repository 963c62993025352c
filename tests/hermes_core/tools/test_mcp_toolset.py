"""How an MCP server's tools look to the agent: names, approvals, results as text."""

from __future__ import annotations

import base64

import mcp_types

from hermes_core.tools.mcp.connection import McpConnection
from hermes_core.tools.mcp.spec import McpApproval, McpServerSpec, tool_name
from hermes_core.tools.mcp.toolset import _as_tool, result_text
from hermes_core.tools.registry import Tool


def listed(
    name: str, *, read_only_hint: bool | None = None, destructive_hint: bool | None = None
) -> mcp_types.Tool:
    annotations = (
        mcp_types.ToolAnnotations(read_only_hint=read_only_hint, destructive_hint=destructive_hint)
        if read_only_hint is not None or destructive_hint is not None
        else None
    )
    return mcp_types.Tool(
        name=name, input_schema={"type": "object", "properties": {}}, annotations=annotations
    )


def tool_of(approval: McpApproval, tool: mcp_types.Tool) -> Tool:
    spec = McpServerSpec(name="files", command="true", approval=approval)
    return _as_tool(McpConnection(spec), tool)


def test_tool_names_are_prefixed_and_kept_within_the_apis_rules() -> None:
    assert tool_name("github", "create_issue") == "github__create_issue"
    assert tool_name("my.server", "do it/now") == "my_server__do_it_now"
    assert len(tool_name("s", "x" * 100)) == 64


def test_dangerous_asks_only_before_tools_not_marked_harmless() -> None:
    reads = tool_of("dangerous", listed("read", read_only_hint=True))
    writes = tool_of("dangerous", listed("write"))
    appends = tool_of("dangerous", listed("append", destructive_hint=False))
    assert reads.needs_approval is None
    assert appends.needs_approval is None
    assert writes.needs_approval is not None
    assert writes.needs_approval({}) == "write on MCP server files may change things"


def test_always_asks_before_every_call_and_never_asks_never() -> None:
    reads = listed("read", read_only_hint=True)
    assert tool_of("always", reads).needs_approval is not None
    assert tool_of("never", listed("write")).needs_approval is None


def test_read_only_tools_may_run_together_others_one_at_a_time() -> None:
    assert tool_of("never", listed("read", read_only_hint=True)).concurrent_safe
    assert not tool_of("never", listed("write")).concurrent_safe


def test_results_become_text_the_model_can_read() -> None:
    png = base64.b64encode(b"\x89PNG" + b"\0" * 10).decode()
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="hello"),
            mcp_types.ImageContent(type="image", data=png, mime_type="image/png"),
            mcp_types.EmbeddedResource(
                type="resource",
                resource=mcp_types.TextResourceContents(uri="file:///notes.md", text="# Notes"),
            ),
        ]
    )
    assert result_text(result) == (
        "hello\n[image: image/png, 14 bytes]\n[resource file:///notes.md]\n# Notes"
    )


def test_structured_content_alone_is_shown_as_json_and_errors_say_so() -> None:
    structured = mcp_types.CallToolResult(content=[], structured_content={"total": 3})
    assert result_text(structured) == '{"total": 3}'
    failed = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="no such repo")], is_error=True
    )
    assert result_text(failed) == "Error: no such repo"
