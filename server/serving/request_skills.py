"""The skills one Responses request attaches to its run: its ``shell`` tool's
``environment.skills``, each resolved to a folder on this host (an :class:`AttachedSkill`) that
the run lists after its frozen system prompt and mounts in its sandbox at ``/skills/<name>``.

The request's ``shell`` tool stands for the agent's own: a profile without the shell toolset
cannot take one. A ``skill_reference`` names one of the key's own skills (the key's library;
another key's id is as unknown as a made-up one). An ``inline`` skill is a zip sent in the
request: checked as an upload is, and written once per content digest under
``<data_dir>/skills-cache/inline/<sha256>``, so a client sending the same skill with every
request does not write it again.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import hashlib
from pathlib import Path

from hermes_core.skills.format import MAX_ZIP_BYTES, SkillError, bundle_from_zip, write_bundle
from hermes_core.skills.library import AttachedSkill, SkillEntry, SkillLibrary
from server.errors import APIError
from server.files.links import container_root
from server.profiles import Profile
from server.protocol.responses import (
    SHELL_TOOL,
    HostedTools,
    InlineSkill,
    ShellTool,
    SkillReference,
)
from server.services import Services

INLINE_CACHE = Path("skills-cache", "inline")
"""Where inline skills are written, under the data directory."""


async def request_skills(
    services: Services, profile: Profile, owner: str, tool: ShellTool | None
) -> tuple[AttachedSkill, ...]:
    """The skills ``tool`` attaches for ``owner`` (the key's principal), resolved; a 400 naming
    ``tools`` when the profile has no shell or a skill cannot be had."""
    if tool is None:
        return ()
    if SHELL_TOOL not in profile.toolsets:
        raise _invalid(
            f"The model '{profile.id}' has no shell: it cannot take a shell tool "
            "(its profile does not enable the shell toolset)."
        )
    attached: list[AttachedSkill] = []
    for skill in tool.skills:
        if isinstance(skill, SkillReference):
            attached.append(await _referenced(services.skills, owner, skill))
        else:
            attached.append(await asyncio.to_thread(_inline, _inline_root(services), skill))
    names = [skill.entry.name for skill in attached]
    for name in names:
        if names.count(name) > 1:
            raise _invalid(f"Two of the shell tool's skills are named '{name}'.")
    return tuple(attached)


async def check_hosted_tools(
    services: Services, profile: Profile, owner: str, hosted: HostedTools
) -> None:
    """A 400 naming ``tools`` when ``profile`` lacks what a hosted tool the request names
    needs: the toolset serving it (and, for ``web_search``, a search backend); or when the
    container ``code_interpreter`` names is not one of ``owner``'s. The shell's own check is
    :func:`request_skills`'."""
    needs = []
    if hosted.web_search:
        needs.append(("web_search", "web"))
    if hosted.code_interpreter:
        needs.append(("code_interpreter", "code"))
    for kind, toolset in needs:
        if toolset not in profile.toolsets:
            why = profile.unavailable_toolsets.get(toolset)
            raise _invalid(
                f"The model '{profile.id}' cannot take a {kind} tool: its profile does not "
                f"enable the {toolset} toolset" + (f" ({why})." if why else ".")
            )
    if hosted.web_search and profile.tools.get("web_search") is None:
        raise _invalid(
            f"The model '{profile.id}' cannot take a web_search tool: no search backend is "
            "configured (set web.search in the server's configuration)."
        )
    if hosted.container is not None:
        root = None
        if services.workspaces_dir is not None:
            root = container_root(services.workspaces_dir, owner, hosted.container)
        if root is None or not await asyncio.to_thread(root.is_dir):
            # The same words whether made up or another key's: nothing says it exists.
            raise _invalid(f"No container found with id '{hosted.container}'.")


async def _referenced(
    library: SkillLibrary | None, owner: str, skill: SkillReference
) -> AttachedSkill:
    if library is None:  # no store: no uploaded skills
        raise _no_such(skill)
    try:
        entry = await library.find(owner, skill.skill_id, skill.version)
        folder = await library.folder(owner, entry)  # LookupError too: deleted meanwhile
    except LookupError:
        raise _no_such(skill) from None
    return AttachedSkill(entry=dataclasses.replace(entry, origin="request"), folder=folder)


def _inline(root: Path | None, skill: InlineSkill) -> AttachedSkill:
    """Decode, check and write ``skill`` (file work: on a worker thread)."""
    if root is None:
        raise _invalid("Inline skills need a data directory, and this server keeps none.")
    try:
        data = base64.b64decode(skill.data, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(f"The inline skill '{skill.name}' is not valid base64.") from None
    if len(data) > MAX_ZIP_BYTES:  # the request checked the text; padding aside, the same
        raise _invalid(f"The inline skill '{skill.name}' is too large.")
    try:
        bundle = bundle_from_zip(data)
    except SkillError as error:
        raise _invalid(f"The inline skill '{skill.name}' is not a valid skill: {error}.") from None
    if bundle.name != skill.name:
        raise _invalid(
            f"The inline skill '{skill.name}' is named '{bundle.name}' in its SKILL.md: "
            "give the same name."
        )
    folder = root / hashlib.sha256(data).hexdigest()
    if not folder.is_dir():
        # Another request may write the same skill meanwhile: the same files, so either is it.
        with contextlib.suppress(FileExistsError):
            write_bundle(bundle, folder)
    entry = SkillEntry(name=bundle.name, description=bundle.description, origin="request")
    return AttachedSkill(entry=entry, folder=folder)


def _inline_root(services: Services) -> Path | None:
    # The server's data directory, as the file links know it (None in library use).
    data_dir = services.file_links.settings.data_dir
    return None if data_dir is None else data_dir / INLINE_CACHE


def _no_such(skill: SkillReference) -> APIError:
    # The same words whether the id is made up or another key's: nothing says it exists.
    version = f" at version '{skill.version}'" if skill.version is not None else ""
    return _invalid(f"No such skill: '{skill.skill_id}'{version}.")


def _invalid(message: str) -> APIError:
    return APIError(400, message, param="tools")
