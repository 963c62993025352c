"""``/v1/skills``: upload, version, list, download and delete skills, as OpenAI's Skills API;
each key sees its own skills only (another key's answer 404, as if they did not exist).

An upload is multipart: ``files`` (the SDK sends ``files[]``) holding either a skill's files,
each named by its path in the skill's folder, or one zip of the folder. Every upload passes
:mod:`hermes_core.skills.format`'s checks; what fails one is a 400 saying why. Drafts (skills
the agent wrote, not yet approved) are listed with ``draft`` and ``origin`` and published by
``POST /v1/skills/{id}/approve``, a Hermes extension.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from hermes_core.persistence.skills import (
    DefaultVersion,
    SkillNameTaken,
    SkillRecord,
    SkillVersionRecord,
)
from hermes_core.persistence.storable import holds_unstorable
from hermes_core.skills.format import MAX_SKILL_FILES, SkillError, bundle_from_files
from hermes_core.skills.library import SkillBundle
from server.errors import APIError
from server.http.auth import Principal, require_principal
from server.http.idempotency import claim_of
from server.http.openapi import errors
from server.protocol.pages import list_page
from server.protocol.schemas.skills import (
    SkillDeleted,
    SkillList,
    SkillObject,
    SkillUpdate,
    SkillVersionDeleted,
    SkillVersionList,
    SkillVersionObject,
)
from server.routes.key_alone import key_alone
from server.services import Services
from server.serving.end_users import end_user_id
from server.skills.library import LATEST, StoredSkills, new_version, version_number

router = APIRouter(prefix="/v1/skills", tags=["skills"])

Owner = Annotated[Principal, Depends(require_principal)]
# The key's skills are offered to every one of its end users: one of them uploading, changing
# or deleting one would change what the others' runs are told.
_KEY_ALONE = (
    "The key's skills are shared by all of its end users: upload, change or delete them with "
    "the key alone, naming no end user."
)
KeyAlone = Annotated[Principal, Depends(key_alone(_KEY_ALONE))]

# ``files``, ``files[]`` (the SDK) or ``files[0]``, ``files[1]``, ...
_FILES_FIELD = re.compile(r"files(\[\d*\])?")
_UPLOAD_SCHEMA = {
    "type": "object",
    "required": ["files"],
    "properties": {
        "files": {
            "type": "array",
            "items": {"type": "string", "format": "binary"},
            "description": "The skill's files, each named by its path in the skill's folder "
            "(SKILL.md at the top, or all in one folder), or one zip of the folder.",
        },
        "default": {
            "type": "boolean",
            "description": "Versions only: make the new version the skill's default.",
        },
    },
}
UPLOAD: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": _UPLOAD_SCHEMA}},
    }
}
UPDATE: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": SkillUpdate.model_json_schema()}},
    }
}
ZIP: dict[str, Any] = {
    "description": "The version's files, zipped.",
    "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}},
}


def _skills(request: Request) -> StoredSkills:
    services: Services = request.app.state.services
    if not isinstance(services.skills, StoredSkills):
        raise APIError(404, "This server keeps no skills (it runs without a database).")
    return services.skills


def _sees_drafts(request: Request, principal: Principal) -> bool:
    """Whether the request may read drafts: the key alone. A draft is written from one run's
    record (its user's words) for a person to read before any run is offered it; until then
    it is not for the key's other end users to read, as their runs are not offered it."""
    return end_user_id(request, principal) is None


async def _skill(
    skills: StoredSkills, owner: str, skill_id: str, *, drafts: bool = True
) -> SkillRecord:
    record = await skills.store.get(owner, skill_id)
    if record is None or (record.draft and not drafts):
        raise APIError(404, f"No skill with id {skill_id[:80]!r}.", param="skill_id")
    return record


async def _version(
    skills: StoredSkills, owner: str, record: SkillRecord, version: str
) -> SkillVersionRecord:
    number = record.latest_version if version == LATEST else version_number(version)
    kept = await skills.store.version(owner, record.id, number) if number is not None else None
    if kept is None:
        raise APIError(404, f"The skill has no version {version[:40]!r}.", param="version")
    return kept


async def _upload(request: Request) -> tuple[SkillBundle, dict[str, str]]:
    """The checked skill a multipart upload carries, and its other (text) fields."""
    form = await request.form(max_files=MAX_SKILL_FILES + 1, max_fields=20)
    try:
        files: list[tuple[str, bytes]] = []
        fields: dict[str, str] = {}
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                if _FILES_FIELD.fullmatch(key):
                    files.append((value.filename or "", await value.read()))
            else:
                fields[key] = value
    finally:
        await form.close()
    if not files:
        raise APIError(
            400, "Upload the skill's files (or a zip of them) as 'files'.", param="files"
        )
    try:
        bundle = await asyncio.to_thread(bundle_from_files, files)
    except SkillError as exc:
        raise APIError(400, f"Not a valid skill: {exc}.", param="files") from None
    if holds_unstorable((bundle.name, bundle.description)):
        # YAML's escapes spell NUL and lone surrogates, which no store holds (a 500 there).
        raise APIError(
            400,
            "Not a valid skill: its name or description holds a NUL character or a lone surrogate.",
            param="files",
        )
    return bundle, fields


def skill_object(record: SkillRecord) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "id": record.id,
        "object": "skill",
        "name": record.name,
        "description": record.description,
        "created_at": int(record.created_at),
        "default_version": str(record.default_version),
        "latest_version": str(record.latest_version),
    }
    if record.draft:
        shown |= {"draft": True, "origin": record.origin}
    return shown


def version_object(version: SkillVersionRecord) -> dict[str, Any]:
    return {
        "id": version.id,
        "object": "skill.version",
        "skill_id": version.skill_id,
        "version": str(version.version),
        "name": version.name,
        "description": version.description,
        "created_at": int(version.created_at),
    }


def _zip(name: str, data: bytes) -> Response:
    return Response(
        data,
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="{name}.zip"'},
    )


@router.post(
    "",
    response_model=SkillObject,
    response_model_exclude_unset=True,
    responses=errors(400, 401, 403, 413),
    openapi_extra=UPLOAD,
)
async def create_skill(request: Request, principal: KeyAlone) -> dict[str, Any] | Response:
    """Upload a new skill (its version "1"). A name the key already uses is refused: add a
    version to that skill instead."""
    # With an Idempotency-Key, a retry gets the first upload's skill (server/http/idempotency.py).
    skills = _skills(request)
    bundle, fields = await _upload(request)

    async def create() -> dict[str, Any]:
        version = await asyncio.to_thread(new_version, bundle)
        try:
            record = await skills.store.create(principal.name, version, origin="uploaded")
            skills.forget(principal.name)
        except SkillNameTaken:
            existing = await skills.store.named(principal.name, bundle.name)
            where = f"/v1/skills/{existing.id}/versions" if existing else "its versions"
            raise APIError(
                400,
                f"You already have a skill named {bundle.name!r}: add a version to it instead "
                f"(POST {where}).",
                param="files",
                code="skill_name_taken",
            ) from None
        return skill_object(record)

    return await _once(request, principal, bundle, fields, create)


@router.get(
    "", response_model=SkillList, response_model_exclude_unset=True, responses=errors(400, 401)
)
async def list_skills(
    request: Request,
    principal: Owner,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
    after: Annotated[str | None, Query(description="List from just past this skill id.")] = None,
) -> dict[str, Any]:
    """The key's skills (drafts too, marked), newest first (``order=asc``: oldest first)."""
    skills = _skills(request)
    drafts = _sees_drafts(request, principal)
    past = await skills.store.get(principal.name, after) if after is not None else None
    if after is not None and (past is None or (past.draft and not drafts)):
        raise APIError(400, f"No skill with id {after[:80]!r} to list after.", param="after")
    records: list[SkillRecord] = []
    while len(records) <= limit:
        page = await skills.store.page(
            principal.name, after=past, limit=limit + 1, newest_first=order == "desc"
        )
        records += [record for record in page if drafts or not record.draft]
        if len(page) <= limit:
            break
        past = page[-1]
    data = [skill_object(record) for record in records[:limit]]
    return list_page(data, has_more=len(records) > limit)


@router.get(
    "/{skill_id}",
    response_model=SkillObject,
    response_model_exclude_unset=True,
    responses=errors(401, 404),
)
async def retrieve_skill(skill_id: str, request: Request, principal: Owner) -> dict[str, Any]:
    drafts = _sees_drafts(request, principal)
    return skill_object(await _skill(_skills(request), principal.name, skill_id, drafts=drafts))


@router.post(
    "/{skill_id}",
    response_model=SkillObject,
    response_model_exclude_unset=True,
    responses=errors(400, 401, 403, 404),
    openapi_extra=UPDATE,
)
async def update_skill(skill_id: str, request: Request, principal: KeyAlone) -> dict[str, Any]:
    """Choose the version runs use (``default_version``)."""
    # Read by hand rather than as a body parameter: FastAPI's single-body alias makes
    # pydantic warn on every request.
    try:
        body = SkillUpdate.model_validate_json(await request.body())
    except ValidationError:
        raise APIError(
            400, "The body must be a JSON object with 'default_version'.", param="default_version"
        ) from None
    skills = _skills(request)
    record = await _skill(skills, principal.name, skill_id, drafts=_sees_drafts(request, principal))
    number = version_number(body.default_version)
    try:
        updated = (
            await skills.store.set_default(principal.name, record.id, number)
            if number is not None
            else None
        )
    except LookupError:
        updated = None
    skills.forget(principal.name)
    if updated is None:
        raise APIError(
            400, f"The skill has no version {body.default_version[:40]!r}.", param="default_version"
        )
    return skill_object(updated)


@router.post(
    "/{skill_id}/approve",
    response_model=SkillObject,
    response_model_exclude_unset=True,
    responses=errors(401, 403, 404),
)
async def approve_skill(skill_id: str, request: Request, principal: KeyAlone) -> dict[str, Any]:
    """Publish a draft the agent wrote: runs are offered it from now on (Hermes extension)."""
    skills = _skills(request)
    await _skill(skills, principal.name, skill_id)
    record = await skills.store.approve(principal.name, skill_id)
    skills.forget(principal.name)
    if record is None:  # deleted meanwhile
        raise APIError(404, f"No skill with id {skill_id[:80]!r}.", param="skill_id")
    return skill_object(record)


@router.delete("/{skill_id}", response_model=SkillDeleted, responses=errors(401, 403, 404))
async def delete_skill(skill_id: str, request: Request, principal: KeyAlone) -> dict[str, Any]:
    """Delete a skill and all of its versions."""
    skills = _skills(request)
    deleted = await skills.store.delete(principal.name, skill_id)
    skills.forget(principal.name)
    if not deleted:
        raise APIError(404, f"No skill with id {skill_id[:80]!r}.", param="skill_id")
    await skills.discard(skill_id)
    return {"id": skill_id, "object": "skill.deleted", "deleted": True}


@router.get(
    "/{skill_id}/content", response_class=Response, responses={200: ZIP, **errors(401, 404)}
)
async def skill_content(skill_id: str, request: Request, principal: Owner) -> Response:
    """The default version's files, zipped."""
    skills = _skills(request)
    record = await _skill(skills, principal.name, skill_id, drafts=_sees_drafts(request, principal))
    return await _content(skills, principal.name, record, str(record.default_version))


@router.post(
    "/{skill_id}/versions",
    response_model=SkillVersionObject,
    responses=errors(400, 401, 403, 404, 413),
    openapi_extra=UPLOAD,
)
async def create_version(
    skill_id: str, request: Request, principal: KeyAlone
) -> dict[str, Any] | Response:
    """Upload a new version of a skill (same name); ``default=true`` makes runs use it."""
    # With an Idempotency-Key, a retry gets the first upload's version.
    skills = _skills(request)
    record = await _skill(skills, principal.name, skill_id, drafts=_sees_drafts(request, principal))
    bundle, fields = await _upload(request)
    if bundle.name != record.name:
        raise APIError(
            400,
            f"A new version must keep the skill's name {record.name!r} (its SKILL.md names "
            f"{bundle.name!r}); upload a differently named skill with POST /v1/skills.",
            param="files",
        )
    make_default = fields.get("default", "false").strip().lower() in ("true", "1")

    async def add() -> dict[str, Any]:
        version = await asyncio.to_thread(new_version, bundle)
        added = await skills.store.add_version(
            principal.name, record.id, version, make_default=make_default
        )
        skills.forget(principal.name)
        if added is None:  # deleted meanwhile
            raise APIError(404, f"No skill with id {skill_id[:80]!r}.", param="skill_id")
        return version_object(added)

    return await _once(request, principal, bundle, fields, add)


async def _once(
    request: Request,
    principal: Principal,
    bundle: SkillBundle,
    fields: dict[str, str],
    make: Callable[[], Awaitable[dict[str, Any]]],
) -> dict[str, Any] | Response:
    """``make``'s object, or (a retry with the same ``Idempotency-Key``) the first one's."""

    def parts() -> list[bytes]:
        named = [(path.encode(), data) for path, data in sorted(bundle.files.items())]
        given = [f"{k}={v}".encode() for k, v in sorted(fields.items())]
        return [part for pair in named for part in pair] + given

    services: Services = request.app.state.services
    claim = claim_of(request.scope, principal, parts)
    return await services.idempotency.once(claim, make)


@router.get(
    "/{skill_id}/versions", response_model=SkillVersionList, responses=errors(400, 401, 404)
)
async def list_versions(
    skill_id: str,
    request: Request,
    principal: Owner,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
    after: Annotated[str | None, Query(description="List from just past this version id.")] = None,
) -> dict[str, Any]:
    """A skill's versions, newest first (``order=asc``: oldest first)."""
    skills = _skills(request)
    record = await _skill(skills, principal.name, skill_id, drafts=_sees_drafts(request, principal))
    past: int | None = None
    if after is not None:
        found = await skills.store.version_with_id(principal.name, record.id, after)
        if found is None:
            raise APIError(400, f"The skill has no version with id {after[:80]!r}.", param="after")
        past = found.version
    versions = await skills.store.versions(
        principal.name, record.id, after=past, limit=limit + 1, newest_first=order == "desc"
    )
    data = [version_object(version) for version in versions[:limit]]
    return list_page(data, has_more=len(versions) > limit)


@router.get(
    "/{skill_id}/versions/{version}",
    response_model=SkillVersionObject,
    responses=errors(401, 404),
)
async def retrieve_version(
    skill_id: str, version: str, request: Request, principal: Owner
) -> dict[str, Any]:
    skills = _skills(request)
    record = await _skill(skills, principal.name, skill_id, drafts=_sees_drafts(request, principal))
    return version_object(await _version(skills, principal.name, record, version))


@router.delete(
    "/{skill_id}/versions/{version}",
    response_model=SkillVersionDeleted,
    responses=errors(400, 401, 403, 404),
)
async def delete_version(
    skill_id: str, version: str, request: Request, principal: KeyAlone
) -> dict[str, Any]:
    """Delete one version; the default version cannot be (choose another default first)."""
    skills = _skills(request)
    record = await _skill(skills, principal.name, skill_id, drafts=_sees_drafts(request, principal))
    kept = await _version(skills, principal.name, record, version)
    try:
        deleted = await skills.store.delete_version(principal.name, record.id, kept.version)
        skills.forget(principal.name)
    except DefaultVersion:
        raise APIError(
            400,
            f"Version {kept.version} is the skill's default: make another version the default "
            "before deleting it.",
            param="version",
        ) from None
    if not deleted:
        raise APIError(404, f"The skill has no version {version[:40]!r}.", param="version")
    await skills.discard(record.id, kept.version)
    return {
        "id": kept.id,
        "object": "skill.version.deleted",
        "deleted": True,
        "version": str(kept.version),
    }


@router.get(
    "/{skill_id}/versions/{version}/content",
    response_class=Response,
    responses={200: ZIP, **errors(401, 404)},
)
async def version_content(
    skill_id: str, version: str, request: Request, principal: Owner
) -> Response:
    """One version's files, zipped."""
    skills = _skills(request)
    record = await _skill(skills, principal.name, skill_id, drafts=_sees_drafts(request, principal))
    return await _content(skills, principal.name, record, version)


async def _content(skills: StoredSkills, owner: str, record: SkillRecord, version: str) -> Response:
    kept = await _version(skills, owner, record, version)
    data = await skills.store.bundle(owner, record.id, kept.version)
    if data is None:  # deleted meanwhile
        raise APIError(404, f"The skill has no version {version[:40]!r}.", param="version")
    return _zip(record.name, data)
