"""Tools the model may call: their schemas, handlers, flags and hooks.

A handler takes the validated arguments and a :class:`ToolContext`; it may be a plain function
(run in a worker thread, so it can block without stalling the event loop) or a coroutine
function. Whatever it returns becomes the tool result: strings as they are, anything else as
JSON.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeAlias

from hermes_core.events import Emit, emit_nowhere
from hermes_core.providers.base import ToolSchema
from hermes_core.tools.results import ImagePart

ToolHandler: TypeAlias = Callable[[dict[str, Any], "ToolContext"], Any]
ApprovalCheck: TypeAlias = Callable[[dict[str, Any]], str | None]
"""Returns why a call needs approval (e.g. "deletes files"), or None when it does not."""


@dataclass(slots=True, kw_only=True)
class ToolContext:
    """What a running tool may know and do besides its arguments."""

    run_id: str
    task_id: str
    call_id: str
    is_interrupted: Callable[[], bool]
    """True once the run was interrupted; long-running tools may poll it and stop early."""
    workspace: Path | None = None
    """The conversation's working directory, when it has one (see ``tools/workspace.py``)."""
    emit: Emit = emit_nowhere
    """``emit(EventClass, **fields)`` adds an event to the run's stream (``delegate_task``
    forwards its children's events this way). Call it from the event loop's thread only."""
    images: tuple[ImagePart, ...] = ()
    """Images this run's tools returned before this call, newest last (``vision_analyze``
    looks at the last one)."""
    skill_folders: Mapping[str, Path] = field(default_factory=dict)
    """The run's skills by name → their folders on this host: sandboxed commands see each,
    read-only, at ``/skills/<name>`` (see ``skills/shelf.py``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """One callable tool."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON Schema of the arguments object."""
    toolset: str = ""
    """The toolset it belongs to (``tools/toolsets.py``): what metrics count it under."""
    handler: ToolHandler
    concurrent_safe: bool = True
    """May run at the same time as other tools of the same model reply."""
    interactive: bool = False
    """Talks to a human (e.g. clarify): forces the whole batch to run one call at a time."""
    cancellable: bool = False
    """On an interrupt the running call is cancelled instead of allowed to finish."""
    max_result_chars: int | None = None
    """Results longer than this are cut for the model's view (the transcript keeps them)."""
    timeout: float | None = None
    """Seconds before the call is abandoned with an error result."""
    needs_approval: ApprovalCheck | None = None
    """Dangerous-action check; a reason means an approval callback must allow the call."""
    summarize: Callable[[dict[str, Any]], str] | None = None
    """One human-readable line for progress displays; defaults to the name and first argument."""
    _schema: ToolSchema | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def schema(self) -> ToolSchema:
        """What the model is shown; made on first use and then kept (a tool's name,
        description and parameters never change, and every model call of every run shows
        them)."""
        schema = self._schema
        if schema is None:
            schema = ToolSchema(
                name=self.name, description=self.description, parameters=dict(self.parameters)
            )
            object.__setattr__(self, "_schema", schema)
        return schema

    def with_handler(self, handler: ToolHandler) -> Tool:
        """This tool with another handler: a tool whose schema and flags are fixed but whose
        handler closes over one run's state is bound from one template this way."""
        return replace(self, handler=handler)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)

    def summary(self, arguments: dict[str, Any]) -> str:
        if self.summarize is not None:
            return self.summarize(arguments)
        first = next(iter(arguments.values()), None)
        if first is None:
            return self.name
        text = first if isinstance(first, str) else repr(first)
        return f"{self.name} {text[:80]}"


async def unbound(arguments: dict[str, Any], context: ToolContext) -> Any:
    """The handler of a tool template, whose real handler is bound per use
    (:meth:`Tool.with_handler`). Coroutine function, as the handlers bound are."""
    raise RuntimeError("a tool template was called: bind its handler with Tool.with_handler")


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallRequest:
    """A validated call about to run; what hooks and approval callbacks see."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    run_id: str
    task_id: str


PreToolHook: TypeAlias = Callable[[ToolCallRequest], Awaitable[str | None] | str | None]
"""Runs before a call; returning a string blocks the call with that string as its result."""
PostToolHook: TypeAlias = Callable[[ToolCallRequest, str], Awaitable[str] | str]
"""Runs after a call with its result text; returns the (possibly rewritten) result."""


class ApprovalVerdict(StrEnum):
    """An approver's answer to an :class:`ApprovalAsk`."""

    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    """Nobody answered in time: the call does not run, and the model is told so."""
    DEFERRED = "deferred"
    """Nobody can answer while the run goes on: the call does not run now, and the run ends
    awaiting approval; a later turn brings the answer (see ``AgentRequest.approvals``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalAsk:
    """A call that needs approval, as the approver sees it."""

    approval_id: str
    """Unique: what an answer names."""
    call: ToolCallRequest
    reason: str
    """Why it needs approval, in words for the person asked."""
    toolset: str


ApprovalCallback: TypeAlias = Callable[
    [ApprovalAsk], Awaitable[ApprovalVerdict | bool] | ApprovalVerdict | bool
]
"""Decides an :class:`ApprovalAsk`; True and False stand for approved and denied."""


class ToolRegistry:
    """The tools of an agent, in a stable order (sorted by name) so prompts stay cacheable."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self.pre_hooks: list[PreToolHook] = []
        self.post_hooks: list[PostToolHook] = []
        # Every model call asks for the tools in order and their schemas, and every run for
        # the agent-level tools over this registry's: kept until a tool is registered.
        self._sorted: tuple[Tool, ...] | None = None
        self._schemas: tuple[ToolSchema, ...] | None = None
        self._overlays: dict[tuple[int, ...], tuple[tuple[Tool, ...], ToolRegistry]] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._sorted = self._schemas = None
        self._overlays.clear()
        return tool

    def tool(
        self,
        *,
        name: str | None = None,
        description: str = "",
        parameters: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Callable[[ToolHandler], ToolHandler]:
        """Decorator: register ``handler`` with the given schema and flags."""

        def wrap(handler: ToolHandler) -> ToolHandler:
            self.register(
                Tool(
                    name=name or handler.__name__,
                    description=description or (inspect.getdoc(handler) or ""),
                    parameters=parameters or {"type": "object", "properties": {}},
                    handler=handler,
                    **options,
                )
            )
            return handler

        return wrap

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return [tool.name for tool in self._in_order()]

    def tools(self) -> list[Tool]:
        return list(self._in_order())

    def schemas(self) -> tuple[ToolSchema, ...]:
        """The tools' schemas, in order: one tuple, the same object until a tool is
        registered (so a provider may keep what it makes of it per tuple)."""
        if self._schemas is None:
            self._schemas = tuple(tool.schema for tool in self._in_order())
        return self._schemas

    def _in_order(self) -> tuple[Tool, ...]:
        if self._sorted is None:
            self._sorted = tuple(self._tools[name] for name in sorted(self._tools))
        return self._sorted

    def overlaid(self, tools: tuple[Tool, ...]) -> ToolRegistry:
        """A registry of ``tools`` and those of this registry's not named like one of them,
        with this registry's hooks (the same lists). Made once per ``tools`` (the same
        objects) and kept while this registry is unchanged: it must not be changed."""
        key = tuple(map(id, tools))
        kept = self._overlays.get(key)
        if kept is None:
            overlay = ToolRegistry(tools)
            for tool in self._in_order():
                if tool.name not in overlay:
                    overlay.register(tool)
            kept = self._overlays[key] = (tools, overlay)  # the tools keep their ids taken
        overlay = kept[1]
        overlay.pre_hooks, overlay.post_hooks = self.pre_hooks, self.post_hooks
        return overlay

    def without(self, *names: str) -> ToolRegistry:
        """A copy lacking ``names`` (hooks kept), e.g. the tools a sub-agent may use."""
        copy = ToolRegistry(t for t in self.tools() if t.name not in names)
        copy.pre_hooks = list(self.pre_hooks)
        copy.post_hooks = list(self.post_hooks)
        return copy
