from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from server.http.auth import Principal, require_principal
from server.http.input_text import StrictJSONRoute
from server.http.openapi import errors, success
from server.protocol.chat import ChatCompletionRequest
from server.protocol.schemas.chat import ChatCompletion, ChatCompletionChunk
from server.serving.chat import ChatServing

router = APIRouter(prefix="/v1", tags=["chat"], route_class=StrictJSONRoute)


@router.post(
    "/chat/completions",
    response_model=None,
    responses={
        200: success(
            ChatCompletion,
            "The ``chat.completion`` once the run has ended; with ``stream: true``, an SSE "
            "stream of ``chat.completion.chunk``s ending with ``data: [DONE]``.",
            stream=ChatCompletionChunk,
        ),
        **errors(400, 401, 403, 404, 409, 413, 429, 502),
    },
)
async def create_chat_completion(
    body: ChatCompletionRequest,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
) -> Response:
    """Run the agent on the conversation; stream its progress as chunks or answer at the end."""
    serving: ChatServing = request.app.state.chat
    return await serving.create(body, request, principal)
