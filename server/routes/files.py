"""``/v1/files``: upload, list, retrieve, download and delete files, as OpenAI's Files API;
each key sees its own files only, and an end user behind it (docs/end-users.md) their own and
the key's, never another end user's."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, File, Form, Query, Request, UploadFile
from fastapi.responses import FileResponse, Response

from hermes_core.persistence import FileRecord
from server.errors import APIError
from server.files.uploads import FileVault, decoded_filename
from server.http.auth import Principal, require_principal
from server.http.idempotency import claim_of, file_digest, key_of
from server.http.openapi import BYTES, errors
from server.protocol.pages import list_page
from server.protocol.schemas.files import FileDeleted, FileList, FileObject
from server.services import Services
from server.serving.end_users import end_user_of

router = APIRouter(prefix="/v1/files", tags=["files"])

EXPIRY_ANCHORS = frozenset({"created_at"})
"""What an ``expires_after`` counts from, as OpenAI allows."""
MIN_EXPIRY_SECONDS = 3600
MAX_EXPIRY_SECONDS = 30 * 24 * 3600


def _vault(request: Request, principal: Principal) -> FileVault:
    """The files as the request's end user (if its key may name one) sees them."""
    services: Services = request.app.state.services
    if services.files is None:
        raise APIError(404, "This server keeps no files (it runs without a database).")
    end_user = end_user_of(request, principal)
    return services.files.as_end_user(end_user.id if end_user is not None else None)


def file_object(record: FileRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "file",
        "bytes": record.bytes,
        "created_at": int(record.created_at),
        "filename": record.filename,
        "purpose": record.purpose,
        "status": "processed",
        "expires_at": int(record.expires_at) if record.expires_at is not None else None,
        "status_details": None,
    }


@router.post("", response_model=FileObject, responses=errors(400, 401, 413))
async def upload_file(
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
    file: Annotated[UploadFile, File(description="The file's bytes, with its name.")],
    purpose: Annotated[str, Form(description="What it is for, as OpenAI names it.")],
    expires_anchor: Annotated[
        str | None,
        Form(
            alias="expires_after[anchor]",
            description="What the expiry counts from: `created_at` (with its `seconds`).",
        ),
    ] = None,
    expires_seconds: Annotated[
        str | None,
        Form(
            alias="expires_after[seconds]",
            description="Seconds after the anchor the file expires: 3600 to 2592000.",
        ),
    ] = None,
) -> dict[str, Any] | Response:
    """Upload a file (multipart: ``file`` and ``purpose``; ``expires_after``, optional). A
    message refers to it by id: a chat ``file`` part or a Responses ``input_file``; the agent
    then finds it in its workspace. Once expired, a file is gone as if deleted."""
    # With an Idempotency-Key, a retry gets the first upload's file (server/http/idempotency.py).
    vault = _vault(request, principal)
    filename = decoded_filename(file.filename)
    if "expires_after" in await request.form():  # the form FastAPI parsed, kept on the request
        # A client that sent the object as one field asked for an expiry all the same: a file
        # kept for ever instead, unannounced, is not what it asked for.
        raise APIError(
            400,
            "Send 'expires_after' as the fields 'expires_after[anchor]' and "
            "'expires_after[seconds]', as the OpenAI SDKs do.",
            param="expires_after",
        )
    expires_after = _expires_after(expires_anchor, expires_seconds)
    claim = None
    if key_of(request.scope) is not None:
        content = await file_digest(file.file)
        name = filename.encode()
        # The expiry is part of what the request is (a retry with another is not the same);
        # none adds nothing, so a key's fingerprint without one is what it always was.
        expiry = () if expires_after is None else (b"expires_after=%d" % expires_after,)
        claim = claim_of(
            request.scope, principal, lambda: (purpose.encode(), name, content, *expiry)
        )

    async def save() -> dict[str, Any]:
        record = await vault.save(
            principal.name,
            file.file,
            size=file.size,
            filename=filename or "upload",
            purpose=purpose,
            expires_after=expires_after,
        )
        return file_object(record)

    services: Services = request.app.state.services
    return await services.idempotency.once(claim, save)


def _expires_after(anchor: str | None, seconds: str | None) -> int | None:
    """The seconds after its upload a file expires (``expires_after``), as OpenAI allows
    them; None without one; 400 for one that is not allowed."""
    if anchor is None and seconds is None:
        return None
    if anchor not in EXPIRY_ANCHORS:
        raise APIError(
            400,
            f"'expires_after.anchor' must be one of {', '.join(sorted(EXPIRY_ANCHORS))}.",
            param="expires_after.anchor",
        )
    # Digits only: int() would also take " 3600", "3_600" and other scripts' digits.
    # Digits only (int() would also take " 3600", "3_600" and other scripts' digits), and few
    # of them (int() refuses over 4,300).
    digits = seconds is not None and seconds.isascii() and seconds.isdigit() and len(seconds) < 10
    after = int(seconds) if digits and seconds is not None else None
    if after is None or not MIN_EXPIRY_SECONDS <= after <= MAX_EXPIRY_SECONDS:
        raise APIError(
            400,
            f"'expires_after.seconds' must be an integer from {MIN_EXPIRY_SECONDS} "
            f"to {MAX_EXPIRY_SECONDS}.",
            param="expires_after.seconds",
        )
    return after


@router.get("", response_model=FileList, responses=errors(400, 401))
async def list_files(
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
    purpose: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
    order: Literal["asc", "desc"] = "desc",
    after: Annotated[str | None, Query(description="List from just past this file id.")] = None,
) -> dict[str, Any]:
    """The key's files, newest first (``order=asc``: oldest first)."""
    vault = _vault(request, principal)
    past = await vault.get(principal.name, after) if after is not None else None
    records = await vault.list(
        principal.name, purpose=purpose, after=past, limit=limit + 1, newest_first=order == "desc"
    )
    data = [file_object(record) for record in records[:limit]]
    return list_page(data, has_more=len(records) > limit)


@router.get("/{file_id}", response_model=FileObject, responses=errors(401, 404))
async def retrieve_file(
    file_id: str, request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> dict[str, Any]:
    return file_object(await _vault(request, principal).get(principal.name, file_id))


@router.get(
    "/{file_id}/content",
    response_class=FileResponse,
    responses={200: BYTES, **errors(401, 404)},
)
async def file_content(
    file_id: str, request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> FileResponse:
    vault = _vault(request, principal)
    record = await vault.get_readable(principal.name, file_id)
    return FileResponse(
        vault.path(record),
        filename=record.filename,
        media_type="application/octet-stream",
    )


@router.delete("/{file_id}", response_model=FileDeleted, responses=errors(401, 404))
async def delete_file(
    file_id: str, request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> dict[str, Any]:
    """Delete a file; copies already placed in workspaces stay there."""
    await _vault(request, principal).delete(principal.name, file_id)
    return {"id": file_id, "object": "file", "deleted": True}
