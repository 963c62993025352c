"""ToolRegistry: registration, stable order, copies without some tools; Tool's defaults."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_core.providers.base import ToolSchema
from hermes_core.tools.registry import Tool, ToolCallRequest, ToolContext, ToolRegistry

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def _echo(arguments: dict[str, Any], context: ToolContext) -> str:
    return "echo"


async def _async_echo(arguments: dict[str, Any], context: ToolContext) -> str:
    return "echo"


def _tool(name: str) -> Tool:
    return Tool(name=name, description=f"The {name} tool.", parameters=EMPTY_SCHEMA, handler=_echo)


def _block_nothing(request: ToolCallRequest) -> str | None:
    return None


def _keep(request: ToolCallRequest, content: str) -> str:
    return content


def test_a_registered_tool_can_be_found_by_name() -> None:
    registry = ToolRegistry()
    tool = _tool("read_file")

    assert registry.register(tool) is tool
    assert (registry.get("read_file"), "read_file" in registry, len(registry)) == (tool, True, 1)
    assert (registry.get("write_file"), "write_file" in registry) == (None, False)


def test_the_constructor_registers_its_tools() -> None:
    registry = ToolRegistry([_tool("b"), _tool("a")])

    assert registry.names == ["a", "b"]


def test_registering_a_name_twice_is_an_error() -> None:
    registry = ToolRegistry([_tool("read_file")])

    with pytest.raises(ValueError, match="a tool named 'read_file' is already registered"):
        registry.register(_tool("read_file"))


def test_names_and_tools_are_sorted_by_name() -> None:
    tools = [_tool("web_search"), _tool("clarify"), _tool("memory")]
    registry = ToolRegistry(tools)

    assert registry.names == ["clarify", "memory", "web_search"]
    assert [t.name for t in registry.tools()] == ["clarify", "memory", "web_search"]


def test_the_decorator_takes_name_and_description_from_the_function() -> None:
    registry = ToolRegistry()

    def shout(arguments: dict[str, Any], context: ToolContext) -> str:
        """Say it louder."""
        return str(arguments["text"]).upper()

    returned = registry.tool(parameters=EMPTY_SCHEMA)(shout)

    assert returned is shout
    assert registry.get("shout") == Tool(
        name="shout", description="Say it louder.", parameters=EMPTY_SCHEMA, handler=shout
    )


def test_the_decorator_passes_name_description_and_flags() -> None:
    registry = ToolRegistry()

    @registry.tool(
        name="ask",
        description="Ask the user.",
        parameters=EMPTY_SCHEMA,
        interactive=True,
        timeout=5.0,
    )
    def clarify(arguments: dict[str, Any], context: ToolContext) -> str:
        """Not this text."""
        return "answer"

    assert registry.get("ask") == Tool(
        name="ask",
        description="Ask the user.",
        parameters=EMPTY_SCHEMA,
        handler=clarify,
        interactive=True,
        timeout=5.0,
    )


def test_without_drops_the_named_tools_and_keeps_the_hooks() -> None:
    registry = ToolRegistry([_tool("a"), _tool("delegate_task"), _tool("b")])
    registry.pre_hooks.append(_block_nothing)
    registry.post_hooks.append(_keep)

    child = registry.without("delegate_task", "absent")

    assert child.names == ["a", "b"]
    assert (child.pre_hooks, child.post_hooks) == ([_block_nothing], [_keep])
    assert registry.names == ["a", "b", "delegate_task"]


def test_hooks_added_to_a_copy_stay_in_the_copy() -> None:
    registry = ToolRegistry([_tool("a")])
    child = registry.without()

    child.pre_hooks.append(_block_nothing)
    child.post_hooks.append(_keep)

    assert (registry.pre_hooks, registry.post_hooks) == ([], [])


def test_the_schema_is_what_the_provider_sees() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    tool = Tool(name="read_file", description="Read.", parameters=schema, handler=_echo)

    assert tool.schema == ToolSchema(name="read_file", description="Read.", parameters=schema)


def test_a_coroutine_handler_is_async_and_a_plain_one_is_not() -> None:
    plain = _tool("plain")
    asynchronous = Tool(name="async", description="", parameters=EMPTY_SCHEMA, handler=_async_echo)

    assert (plain.is_async, asynchronous.is_async) == (False, True)


def test_the_default_summary_is_the_name_and_first_argument() -> None:
    tool = _tool("read_file")

    assert tool.summary({"path": "README.md", "limit": 10}) == "read_file README.md"


def test_the_default_summary_shows_other_values_as_repr_cut_to_80_chars() -> None:
    tool = _tool("t")

    assert [tool.summary({"n": 42}), tool.summary({"text": "x" * 100})] == ["t 42", "t " + "x" * 80]


def test_the_default_summary_without_arguments_is_the_name() -> None:
    assert _tool("list_tools").summary({}) == "list_tools"


def test_a_custom_summary_replaces_the_default() -> None:
    tool = Tool(
        name="terminal",
        description="",
        parameters=EMPTY_SCHEMA,
        handler=_echo,
        summarize=lambda arguments: f"$ {arguments['command']}",
    )

    assert tool.summary({"command": "ls -la"}) == "$ ls -la"


def test_a_tools_schema_is_made_once() -> None:
    tool = _tool("read_file")

    assert tool.schema is tool.schema


def test_with_handler_changes_only_the_handler() -> None:
    template = Tool(
        name="ask", description="Ask.", parameters=EMPTY_SCHEMA, handler=_echo, interactive=True
    )

    bound = template.with_handler(_async_echo)

    assert bound == Tool(
        name="ask",
        description="Ask.",
        parameters=EMPTY_SCHEMA,
        handler=_async_echo,
        interactive=True,
    )
    assert template.handler is _echo


def test_the_schemas_are_one_tuple_in_name_order_until_a_tool_is_registered() -> None:
    registry = ToolRegistry([_tool("b"), _tool("a")])

    schemas = registry.schemas()
    assert [s.name for s in schemas] == ["a", "b"]
    assert registry.schemas() is schemas

    registry.register(_tool("c"))

    assert [s.name for s in registry.schemas()] == ["a", "b", "c"]


def test_an_overlay_puts_its_tools_over_the_registrys_and_shares_its_hooks() -> None:
    registry = ToolRegistry([_tool("a"), _tool("memory")])
    registry.pre_hooks.append(_block_nothing)
    memory = Tool(name="memory", description="Mine.", parameters=EMPTY_SCHEMA, handler=_echo)

    overlay = registry.overlaid((memory,))

    assert overlay.names == ["a", "memory"]
    assert overlay.get("memory") is memory
    assert overlay.pre_hooks is registry.pre_hooks
    assert registry.get("memory") is not memory


def test_an_overlay_is_made_once_per_tools_until_the_registry_changes() -> None:
    registry = ToolRegistry([_tool("a")])
    extra = (_tool("todo"),)

    overlay = registry.overlaid(extra)
    assert registry.overlaid(extra) is overlay
    assert registry.overlaid((_tool("todo"),)) is not overlay  # other objects, another overlay

    registry.register(_tool("b"))

    assert registry.overlaid(extra).names == ["a", "b", "todo"]
