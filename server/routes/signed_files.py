"""``/v1/workspaces/signed/{token}/{name}``: a workspace file through a signed link, for a
browser that has no API key (Open WebUI showing a chart inline, a user opening a report).

The token is the only authority (``server/files/links.py``): it names one path of one
workspace until it expires. This is the one file route the API key middleware lets through
without a key; a forged, altered or expired token is a 403, a file gone since is a 404.
"""

from __future__ import annotations

import asyncio
import mimetypes
from pathlib import PurePosixPath

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from server.errors import APIError
from server.files.links import LinkRefused
from server.http.auth import SIGNED_PREFIX
from server.http.openapi import BYTES, errors
from server.protocol.schemas.common import ErrorEnvelope
from server.routes.file_bytes import file_response, open_file
from server.services import Services

router = APIRouter(prefix=SIGNED_PREFIX.rstrip("/"), tags=["workspaces"])

_SHOWN_INLINE = ("image/", "text/plain", "application/pdf")
"""What a browser may show in place; anything else is downloaded."""
_HEADERS = {
    # Whatever the agent wrote (an HTML page, an SVG with a script) runs nowhere here.
    "content-security-policy": "sandbox; default-src 'none'; img-src 'self'; "
    "style-src 'unsafe-inline'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "private, max-age=300",
}


@router.get(
    "/{token}/{name}",
    response_class=StreamingResponse,
    responses={
        200: BYTES,
        403: {"model": ErrorEnvelope, "description": "The link is forged, altered or expired."},
        **errors(404),
    },
    openapi_extra={"security": []},
)
async def signed_file(token: str, name: str, request: Request) -> StreamingResponse:
    """The file the link names; no API key (the token is the authority)."""
    services: Services = request.app.state.services
    links = services.file_links
    signer = links.signer() if links.signer_ready else await asyncio.to_thread(links.signer)
    if signer is None or services.workspaces_dir is None:
        raise APIError(404, "This server gives no file links.", code="file_not_found")
    try:
        target = signer.check(token)
    except LinkRefused as refused:
        raise APIError(403, str(refused), param="token", code=refused.code) from None
    if PurePosixPath(target.path).name != name:
        raise APIError(404, f"No file '{name}' behind this link.", code="file_not_found")
    root = services.workspaces_dir / target.workspace
    if not await asyncio.to_thread(root.is_dir):
        raise APIError(404, "This link's workspace is gone.", code="file_not_found")
    descriptor, info = await open_file(root, target.path)
    media_type = mimetypes.guess_type(name)[0] or ""
    inline = media_type.startswith(_SHOWN_INLINE)
    return file_response(descriptor, info.st_size, name, inline=inline, headers=_HEADERS)
