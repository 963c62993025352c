"""The agent-level skill tools: ``skills_list``, ``skill_view`` and ``skill_manage``.

The system prompt names each skill with its description; these load the rest on demand
(progressive disclosure): ``skill_view`` gives a skill's ``SKILL.md`` body and the list of its
other files (readable by commands at ``/skills/<name>/…``), or one file's text.
``skill_manage`` writes the API key's own skills (create, patch, delete) into its library, as
the ``agent`` origin — or, in a run for an end user behind the key, that end user's (the key's
skills it reads but never changes: a patch makes the end user's own version); it waits for
approval unless the profile says ``approvals: {skills: never}``. Each tool closes over the
run's :class:`~hermes_core.skills.shelf.SkillShelf`, whose owner is the key or its end user:
the model can never name another key's library, or another end user's.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path, PurePosixPath
from typing import Any

from hermes_core.skills.format import (
    SkillError,
    bundle_from_files,
    parse_skill_md,
    read_skill_folder,
    skill_markdown,
)
from hermes_core.skills.library import SKILL_FILE, SkillBundle
from hermes_core.skills.shelf import SkillShelf
from hermes_core.tools.agent_tools import SKILL_TOOLS
from hermes_core.tools.registry import Tool, ToolContext, unbound

__all__ = ["SKILLS_TOOLSET", "SKILL_TOOLS", "bind_skill_tool", "skill_templates"]

SKILLS_TOOLSET = "skills"
"""The agent-level toolset of the skill tools; ``skill_manage`` asks for approval by default."""
MAX_FILE_CHARS = 50_000
"""Of one file ``skill_view`` shows, at most this much text."""

_NAME = {"type": "string", "description": "The skill's name."}
_LIST_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
_VIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": _NAME,
        "file": {
            "type": "string",
            "description": "One of the skill's other files (its relative path) to read.",
        },
    },
    "required": ["name"],
}
_MANAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["create", "patch", "delete"]},
        "name": {
            "type": "string",
            "description": "Lowercase letters, digits and hyphens, at most 64 characters.",
        },
        "description": {
            "type": "string",
            "description": "What the skill does and when to use it (create; optional in patch).",
        },
        "body": {
            "type": "string",
            "description": "The SKILL.md instructions in markdown (create; or a whole new body "
            "in patch).",
        },
        "files": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "create: other files, relative path → text (e.g. scripts/run.py).",
        },
        "old_text": {"type": "string", "description": "patch: text of the body to replace."},
        "new_text": {"type": "string", "description": "patch: what replaces old_text."},
    },
    "required": ["action", "name"],
}


def _manage_reason(arguments: dict[str, Any]) -> str | None:
    action = arguments.get("action")
    name = arguments.get("name")
    if action not in ("create", "patch", "delete") or not isinstance(name, str):
        return None  # the handler refuses it: nothing to approve
    verb = {"create": "creates", "patch": "changes", "delete": "deletes"}[action]
    return f"{verb} the skill {name!r}, which later sessions of this key will use"


SKILLS_LIST_TOOL = Tool(
    name="skills_list",
    toolset=SKILLS_TOOLSET,
    description="List the skills you may use: name, description and origin of each.",
    parameters=_LIST_SCHEMA,
    handler=unbound,
    summarize=lambda args: "skills_list",
)
SKILL_VIEW_TOOL = Tool(
    name="skill_view",
    toolset=SKILLS_TOOLSET,
    description=(
        "Load a skill: its SKILL.md instructions and the list of its other files (scripts, "
        "references) with the path commands find them at; with 'file', that file's text."
    ),
    parameters=_VIEW_SCHEMA,
    handler=unbound,
    summarize=lambda args: f"skill_view {args.get('name', '')} {args.get('file') or ''}".strip(),
)
_MANAGE = Tool(
    name="skill_manage",
    toolset=SKILLS_TOOLSET,
    description=(
        "Keep a skill for later sessions: create (name, description, body, optional files), "
        "patch (name and a new body and/or description, or old_text → new_text in the body; "
        "makes a new version) or delete one of your own. Write a skill after solving a task "
        "others will meet again."
    ),
    parameters=_MANAGE_SCHEMA,
    handler=unbound,
    concurrent_safe=False,
    summarize=lambda args: f"skill_manage {args.get('action', '')} {args.get('name', '')}",
)
SKILL_MANAGE_TOOL = _MANAGE
"""``skill_manage`` when the profile lets it write without asking."""
SKILL_MANAGE_ASKING_TOOL = Tool(
    name=_MANAGE.name,
    toolset=_MANAGE.toolset,
    description=_MANAGE.description,
    parameters=_MANAGE.parameters,
    handler=unbound,
    concurrent_safe=False,
    needs_approval=_manage_reason,
    summarize=_MANAGE.summarize,
)
"""``skill_manage`` waiting for a person's approval (the default)."""


def skill_templates(shelf: SkillShelf) -> tuple[Tool, ...]:
    """The skill tools a run with ``shelf`` offers, unbound (the same objects every run)."""
    if not shelf.writable:
        return (SKILLS_LIST_TOOL, SKILL_VIEW_TOOL)
    manage = SKILL_MANAGE_ASKING_TOOL if shelf.manage_approval else SKILL_MANAGE_TOOL
    return (SKILLS_LIST_TOOL, SKILL_VIEW_TOOL, manage)


def bind_skill_tool(name: str, shelf: SkillShelf) -> Tool:
    """The skill tool ``name`` bound to one run's shelf."""
    if name == "skills_list":
        return SKILLS_LIST_TOOL.with_handler(_lister(shelf))
    if name == "skill_view":
        return SKILL_VIEW_TOOL.with_handler(_viewer(shelf))
    if name == "skill_manage":
        template = SKILL_MANAGE_ASKING_TOOL if shelf.manage_approval else SKILL_MANAGE_TOOL
        return template.with_handler(_manager(shelf))
    raise ValueError(f"{name!r} is not a skill tool")


def _lister(shelf: SkillShelf) -> Any:
    async def skills_list(arguments: dict[str, Any], ctx: ToolContext) -> Any:
        entries = await shelf.listing()
        if not entries:
            return "No skills are available."
        return [{"name": e.name, "description": e.description, "origin": e.origin} for e in entries]

    return skills_list


def _viewer(shelf: SkillShelf) -> Any:
    async def skill_view(arguments: dict[str, Any], ctx: ToolContext) -> str:
        name = arguments.get("name")
        if not isinstance(name, str) or not name.strip():
            return "Error: 'name' must be a skill's name (see skills_list)."
        name = name.strip()
        entry = await shelf.entry(name)
        if entry is None:
            return f"Error: there is no skill named {name!r}; skills_list shows those there are."
        folder = await shelf.folder(name)
        if folder is None:
            return f"Error: the skill {name!r} has no files here."
        files = await asyncio.to_thread(_files_of, folder)
        where = shelf.path_in_sandbox(name, folder)
        wanted = arguments.get("file")
        if isinstance(wanted, str) and wanted.strip():
            return await asyncio.to_thread(_one_file, folder, files, wanted.strip(), where)
        text = await asyncio.to_thread((folder / SKILL_FILE).read_text, encoding="utf-8")
        try:
            body = parse_skill_md(text).body
        except SkillError:
            body = text
        lines = [f"# Skill: {entry.name} ({entry.origin})", entry.description, "", body.strip()]
        others = [(path, size) for path, size in files if path != SKILL_FILE]
        if others:
            lines += [
                "",
                f"Other files (commands find them under {where}/; skill_view with "
                "'file' reads one):",
            ]
            lines += [f"- {path} ({size} bytes): {where}/{path}" for path, size in others]
        return "\n".join(lines)

    return skill_view


def _files_of(folder: Path) -> list[tuple[str, int]]:
    """The skill folder's files (relative POSIX path, size), sorted; links are not followed."""
    found: list[tuple[str, int]] = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            found.append((path.relative_to(folder).as_posix(), path.stat().st_size))
    return sorted(found)


def _one_file(folder: Path, files: list[tuple[str, int]], wanted: str, where: str) -> str:
    # A path the model copied from the listing ("/skills/<name>/x") names the file "x".
    relative = wanted.removeprefix(where + "/").removeprefix("./")
    relative = PurePosixPath(relative).as_posix()
    sizes = dict(files)
    if relative not in sizes:  # only the listed files: no '..', no absolute path, no link
        return f"Error: the skill has no file {wanted!r}; its files: {', '.join(sorted(sizes))}"
    with (folder / relative).open("rb") as stream:
        data = stream.read(MAX_FILE_CHARS * 4 + 1)
    if b"\0" in data[:8192]:
        return (
            f"Error: {relative} is a binary file ({sizes[relative]} bytes); use it with a "
            f"command at {where}/{relative}."
        )
    text = data.decode("utf-8", errors="replace")
    if len(text) > MAX_FILE_CHARS or sizes[relative] > len(data):
        text = text[:MAX_FILE_CHARS]
        text += f"\n[cut: {relative} is {sizes[relative]} bytes; read the rest with a command]"
    return text


def _manager(shelf: SkillShelf) -> Any:
    async def skill_manage(arguments: dict[str, Any], ctx: ToolContext) -> str:
        action = arguments.get("action")
        name = arguments.get("name")
        if not isinstance(name, str) or not name.strip():
            return "Error: 'name' must be the skill's name."
        name = name.strip()
        try:
            if action == "create":
                return await _create(shelf, name, arguments)
            if action == "patch":
                return await _patch(shelf, name, arguments)
            if action == "delete":
                return await _delete(shelf, name)
        except SkillError as exc:
            return f"Error: {exc}"
        return "Error: 'action' must be create, patch or delete."

    return skill_manage


async def _create(shelf: SkillShelf, name: str, arguments: dict[str, Any]) -> str:
    if await shelf.entry(name) is not None:
        return f"Error: a skill named {name!r} exists already; patch it, or choose another name."
    description, body = arguments.get("description"), arguments.get("body")
    if not isinstance(description, str) or not isinstance(body, str) or not body.strip():
        return "Error: create needs 'description' and a non-empty 'body' (strings)."
    extra = arguments.get("files") or {}
    if not isinstance(extra, dict) or not all(
        isinstance(p, str) and isinstance(t, str) for p, t in extra.items()
    ):
        return "Error: 'files' must map relative paths to text."
    if any(PurePosixPath(p).as_posix() == SKILL_FILE for p in extra):
        return f"Error: {SKILL_FILE} is made from 'description' and 'body'; leave it out of files."
    markdown = skill_markdown(name, description, body)
    files = [(SKILL_FILE, markdown.encode()), *((p, t.encode()) for p, t in extra.items())]
    bundle = bundle_from_files(files)
    await _write(shelf, bundle)
    names = ", ".join(sorted(bundle.files))
    return f"Created the skill {name!r} ({names}); later sessions list it."


async def _patch(shelf: SkillShelf, name: str, arguments: dict[str, Any]) -> str:
    entry = await shelf.entry(name)
    folder = await shelf.folder(name) if entry is not None else None
    if entry is None or folder is None:
        return f"Error: there is no skill named {name!r} to patch."
    current = await asyncio.to_thread(read_skill_folder, folder)
    manifest = parse_skill_md(current.files[SKILL_FILE].decode("utf-8"))
    description = arguments.get("description")
    body = arguments.get("body")
    old, new = arguments.get("old_text"), arguments.get("new_text")
    if description is not None and not isinstance(description, str):
        return "Error: 'description' must be a string."
    if body is not None and not isinstance(body, str):
        return "Error: 'body' must be a string."
    if old is not None:
        if not isinstance(old, str) or not old or not isinstance(new, str):
            return "Error: 'old_text' (non-empty) and 'new_text' must be strings."
        source = body if body is not None else manifest.body
        count = source.count(old)
        if count != 1:
            found = "does not occur" if count == 0 else f"occurs {count} times"
            return f"Error: 'old_text' {found} in the body; give text that occurs exactly once."
        body = source.replace(old, new, 1)
    if description is None and body is None:
        return "Error: patch needs a new 'body' or 'description', or 'old_text' and 'new_text'."
    markdown = skill_markdown(
        name,
        description if description is not None else manifest.description,
        body if body is not None else manifest.body,
    )
    if manifest.metadata:  # keep the other front-matter keys (license, metadata, ...)
        markdown = _with_metadata(markdown, manifest.metadata)
    files = {**current.files, SKILL_FILE: markdown.encode()}
    await _write(shelf, bundle_from_files(sorted(files.items())))
    shadow = " (your own, standing in for the profile's)" if entry.origin == "profile" else ""
    return f"Patched the skill {name!r}: a new version{shadow}; later sessions use it."


def _with_metadata(markdown: str, metadata: dict[str, Any]) -> str:
    import yaml

    head, _, rest = markdown.removeprefix("---\n").partition("---\n")
    extra = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True, width=10_000)
    return f"---\n{head}{extra}---\n{rest}"


async def _delete(shelf: SkillShelf, name: str) -> str:
    own = {e.name: e for e in await shelf.own()}
    if name not in own:
        entry = await shelf.entry(name)
        if entry is not None:
            whose = "the API key's" if entry.origin != "profile" else "a profile"
            return f"Error: {name!r} is {whose} skill, not one of yours: not deleted."
        return f"Error: you have no skill named {name!r}."
    assert shelf.library is not None
    removed = await shelf.library.remove(shelf.owner, name)
    shelf.forget_own()
    return f"Deleted the skill {name!r}." if removed else f"Error: no skill named {name!r}."


async def _write(shelf: SkillShelf, bundle: SkillBundle) -> None:
    assert shelf.library is not None
    await shelf.library.write(shelf.owner, bundle, origin="agent")
    shelf.forget_own()
