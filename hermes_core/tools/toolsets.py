"""The toolsets a profile may enable, what each needs to work, and how to build them.

A profile names toolsets (``tools: [files, shell, code]``), not single tools: a toolset is the
unit a user reasons about ("may it run commands?") and the unit approvals and metrics are kept
by. The agent-level toolsets (todo, memory, session_search, delegate_task, skills) are always on
(skills unless a profile's ``skills.enabled`` is false): the loop builds them per run (see
``agent/builtins.py``); they are listed here so that a profile naming them is understood, a
listing shows them, and ``skills``' approval policy can be set like any toolset's.

A toolset whose requirement is missing on this machine (``shell`` and ``code`` need the
sandbox) is not built; :func:`build_toolsets` says why, for the log and ``check-config``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from hermes_core.tools.agent_tools import ALWAYS_ON_TOOLS, SKILL_TOOLS
from hermes_core.tools.commands import code_tool, shell_tool
from hermes_core.tools.files import file_tools
from hermes_core.tools.image_generation import IMAGES_TOOLSET, generate_image_tool
from hermes_core.tools.images import view_image_tool
from hermes_core.tools.quota import WorkspaceQuota, bound_to
from hermes_core.tools.registry import Tool, ToolRegistry
from hermes_core.tools.sandbox import SandboxLimits, SandboxPolicy, sandbox_unavailable_reason
from hermes_core.tools.skills import SKILLS_TOOLSET
from hermes_core.tools.web.tools import WebOptions, web_tools

if TYPE_CHECKING:
    from hermes_core.providers.images_api import ImageChain

ApprovalPolicy = Literal["never", "dangerous", "always"]
"""When a toolset's calls wait for a human: never; when a call matches the documented danger
patterns (``tools/commands.py``); or on every call that acts."""
WORKSPACE_TOOLSETS = frozenset({"files", "shell", "code", "images"})
"""Toolsets that act on the conversation's workspace."""
AGENT_TOOLSET = "agent"
"""The toolset the agent-level tools are counted under."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolsetOptions:
    """How a profile's toolsets are set up."""

    limits: SandboxLimits = field(default_factory=SandboxLimits)
    policy: SandboxPolicy = field(default_factory=SandboxPolicy)
    quota: WorkspaceQuota = field(default_factory=WorkspaceQuota)
    """What workspaces may hold (commands and file writes are held to it)."""
    approvals: dict[str, ApprovalPolicy] = field(default_factory=dict)
    """Toolset name → policy; a toolset not named gets its ``default_approval``."""
    web: WebOptions = field(default_factory=WebOptions)
    images: ImageChain | None = None
    """The profile's image providers (``image_providers``), behind ``generate_image``; None:
    the ``images`` toolset stays off."""

    def approval(self, toolset: Toolset) -> ApprovalPolicy:
        return self.approvals.get(toolset.name, toolset.default_approval)


@dataclass(frozen=True, slots=True, kw_only=True)
class Toolset:
    name: str
    description: str
    build: Callable[[Toolset, ToolsetOptions], list[Tool]] | None = None
    """None for the agent-level toolsets, which the loop builds per run."""
    needs_sandbox: bool = False
    default_approval: ApprovalPolicy = "never"

    @property
    def always_on(self) -> bool:
        return self.build is None

    @property
    def approvable(self) -> bool:
        """A profile may set this toolset's approval policy (``approvals: {name: …}``): the
        toolsets it builds, and the agent-level ones with a call that may ask (skills)."""
        return not self.always_on or self.default_approval != "never"

    def missing(self, options: ToolsetOptions) -> str | None:
        """Why this toolset cannot work here, or None."""
        if self.needs_sandbox and not options.policy.unsandboxed:
            return sandbox_missing()
        if self.name == IMAGES_TOOLSET and options.images is None:
            return "no image providers are configured (profiles[].image_providers)"
        return None


_sandbox_checked: list[str | None] = []


def sandbox_missing() -> str | None:
    """Why the sandbox cannot run here, or None; probed once per process (it starts bwrap)."""
    if not _sandbox_checked:
        _sandbox_checked.append(sandbox_unavailable_reason())
    return _sandbox_checked[0]


def _files(toolset: Toolset, options: ToolsetOptions) -> list[Tool]:
    tools = [
        *file_tools(approval=options.approval(toolset), policy=options.policy),
        view_image_tool(),
    ]
    # write_file and edit_file check the quota before they write (tools/quota.py).
    return [dataclasses.replace(t, handler=bound_to(t.handler, options.quota)) for t in tools]


def _shell(toolset: Toolset, options: ToolsetOptions) -> list[Tool]:
    approval = options.approval(toolset)
    return [
        shell_tool(
            limits=options.limits, policy=options.policy, approval=approval, quota=options.quota
        )
    ]


def _code(toolset: Toolset, options: ToolsetOptions) -> list[Tool]:
    approval = options.approval(toolset)
    return [
        code_tool(
            limits=options.limits, policy=options.policy, approval=approval, quota=options.quota
        )
    ]


def _web(toolset: Toolset, options: ToolsetOptions) -> list[Tool]:
    return web_tools(options.web, approval=options.approval(toolset))


def _images(toolset: Toolset, options: ToolsetOptions) -> list[Tool]:
    assert options.images is not None  # missing() kept the toolset off otherwise
    return [generate_image_tool(options.images, options.quota)]


TOOLSETS: dict[str, Toolset] = {
    toolset.name: toolset
    for toolset in (
        Toolset(
            name="files",
            description="read, write, edit, list and search the conversation's files",
            build=_files,
        ),
        Toolset(
            name="shell",
            description="run bash commands in the sandbox, in the conversation's workspace",
            build=_shell,
            needs_sandbox=True,
            default_approval="dangerous",
        ),
        Toolset(
            name="code",
            description="run Python snippets in the sandbox, in the conversation's workspace",
            build=_code,
            needs_sandbox=True,
            default_approval="dangerous",
        ),
        Toolset(
            name="web",
            description="search the web and read pages (public addresses unless allow-listed)",
            build=_web,
        ),
        Toolset(
            name=IMAGES_TOOLSET,
            description="generate images with the profile's image models, into the workspace "
            "(on when the profile has image_providers)",
            build=_images,
        ),
        *(Toolset(name=name, description="agent-level, always on") for name in ALWAYS_ON_TOOLS),
        Toolset(
            name=SKILLS_TOOLSET,
            description="agent-level: list, load and write skills (skill_manage asks first)",
            default_approval="always",
        ),
    )
}
"""Every toolset a profile may name, by name."""


@dataclass(frozen=True, slots=True)
class BuiltToolsets:
    registry: ToolRegistry
    """The tools of the toolsets that could be built."""
    active: list[str]
    """The toolsets on, agent-level ones included, in catalogue order."""
    unavailable: dict[str, str]
    """Toolset → why it stays off."""

    def toolset_of(self) -> dict[str, str]:
        """Tool name → toolset name, for every tool a run of this profile may call."""
        names = {tool.name: tool.toolset for tool in self.registry.tools()}
        skills = dict.fromkeys(SKILL_TOOLS, SKILLS_TOOLSET) if SKILLS_TOOLSET in self.active else {}
        return {**dict.fromkeys(ALWAYS_ON_TOOLS, AGENT_TOOLSET), **skills, **names}


def build_toolsets(names: Iterable[str], options: ToolsetOptions) -> BuiltToolsets:
    """The registry of the toolsets ``names`` (unknown names raise ``KeyError``)."""
    wanted = set(names)
    for name in wanted:
        if name not in TOOLSETS:
            raise KeyError(name)
    tools: list[Tool] = []
    active: list[str] = []
    unavailable: dict[str, str] = {}
    for toolset in TOOLSETS.values():
        if toolset.always_on:
            active.append(toolset.name)
            continue
        if toolset.name not in wanted:
            continue
        reason = toolset.missing(options)
        if reason is not None:
            unavailable[toolset.name] = reason
            continue
        assert toolset.build is not None
        tools += toolset.build(toolset, options)
        active.append(toolset.name)
    return BuiltToolsets(ToolRegistry(tools), active, unavailable)
