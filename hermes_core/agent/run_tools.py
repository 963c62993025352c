"""The tools of one run: the agent's registry, with the agent-level tools over it.

What the model is shown of them — names, schemas, flags — is the same for every run of an
agent's kind, so it is made once (``ToolRegistry.overlaid`` over the agent-level tools'
templates) rather than per run; only a tool the model calls is bound to the run (its session,
stores, budget), when it is first looked up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from hermes_core.providers.base import ToolSchema
from hermes_core.tools.registry import Tool, ToolRegistry, unbound


class RunTools:
    """One run's tools: ``catalogue`` as the model sees them, templates bound by ``bind``."""

    def __init__(
        self,
        catalogue: ToolRegistry,
        bind: Callable[[str], Tool],
        skill_folders: Mapping[str, Path] | None = None,
    ) -> None:
        self.catalogue = catalogue
        """Every tool of the run, templates unbound; it holds the hooks too."""
        self.skill_folders: Mapping[str, Path] = skill_folders or {}
        """The run's skill folders, which its commands see (``ToolContext.skill_folders``)."""
        self._bind = bind
        self._bound: dict[str, Tool] = {}

    def get(self, name: str) -> Tool | None:
        """The tool to run for ``name`` (a template is bound on its first call)."""
        tool = self._bound.get(name)
        if tool is None:
            tool = self.catalogue.get(name)
            if tool is not None and tool.handler is unbound:
                tool = self._bound[name] = self._bind(name)
        return tool

    @property
    def names(self) -> list[str]:
        return self.catalogue.names

    def schemas(self) -> tuple[ToolSchema, ...]:
        return self.catalogue.schemas()
