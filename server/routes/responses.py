"""``/v1/responses``: create, retrieve (and re-attach to the stream), cancel, delete, list input
items, compact."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from server.http.auth import Principal, require_principal
from server.http.input_text import StrictJSONRoute
from server.http.openapi import errors, success
from server.protocol.responses import ResponseCreateRequest
from server.protocol.schemas.responses import (
    InputItemList,
    ResponseCompaction,
    ResponseDeleted,
    ResponseObject,
    ResponseStreamEvent,
)
from server.serving.end_users import end_user_id
from server.serving.responses import ResponsesServing

router = APIRouter(prefix="/v1/responses", tags=["responses"], route_class=StrictJSONRoute)
Caller = Annotated[Principal, Depends(require_principal)]


def _serving(request: Request) -> ResponsesServing:
    serving: ResponsesServing = request.app.state.responses
    return serving


@router.post(
    "",
    response_model=None,
    responses={
        200: success(
            ResponseObject,
            "The Response once the run has ended (at once, ``queued``, for ``background: true``, "
            "even while another turn of its conversation runs); with ``stream: true``, an SSE "
            "stream of ``response.*`` events ending with ``data: [DONE]``.",
            stream=ResponseStreamEvent,
        ),
        **errors(400, 401, 403, 404, 409, 413, 424, 429, 502),
    },
)
async def create_response(
    body: ResponseCreateRequest, request: Request, principal: Caller
) -> Response:
    """Run the agent on the input; answer with the Response, or stream ``response.*`` events;
    ``background: true`` answers at once and runs on (after the turn ahead, when its
    conversation is busy). A ``previous_response_id`` naming no response this key may continue
    (unknown, ``store: false``, another's, or its session deleted) is a 400
    ``previous_response_not_found``, as on OpenAI."""
    return await _serving(request).create(body, request, principal)


@router.post(
    "/compact",
    response_model=None,
    responses={
        200: success(ResponseCompaction, "The conversation as one compaction item."),
        **errors(400, 401, 403, 404, 409, 413, 429, 502),
    },
)
async def compact_response(
    body: ResponseCreateRequest, request: Request, principal: Caller
) -> Response:
    """Compact a conversation into one ``compaction`` item that can be fed back as input."""
    end_user = end_user_id(request, principal, body.safety_identifier or body.user)
    return await _serving(request).compact(body, principal, end_user)


@router.get(
    "/{response_id}",
    response_model=None,
    responses={
        200: success(
            ResponseObject,
            "The Response as of now; with ``stream=true``, its SSE stream again (events after "
            "``starting_after``, then live ones).",
            stream=ResponseStreamEvent,
        ),
        **errors(400, 401, 404, 409),
    },
)
async def retrieve_response(
    response_id: str,
    request: Request,
    principal: Caller,
    stream: bool = False,
    starting_after: Annotated[int, Query(ge=-1)] = -1,
) -> Response:
    """The stored response; with ``stream=true`` its events again from ``starting_after`` on,
    then live ones until it ends (a client that lost its stream resumes without a gap)."""
    return await _serving(request).retrieve(
        response_id,
        principal,
        stream=stream,
        starting_after=starting_after,
        end_user=end_user_id(request, principal),
    )


@router.delete("/{response_id}", response_model=ResponseDeleted, responses=errors(401, 404))
async def delete_response(response_id: str, request: Request, principal: Caller) -> dict[str, Any]:
    """Forget a stored response (stopping it first if it is still running)."""
    return await _serving(request).delete(response_id, principal, end_user_id(request, principal))


@router.post(
    "/{response_id}/cancel",
    response_model=None,
    responses={
        200: success(
            ResponseObject,
            "The Response, ended with status ``cancelled`` (one cancelled already: as it is).",
        ),
        **errors(401, 404, 409),
    },
)
async def cancel_response(response_id: str, request: Request, principal: Caller) -> Response:
    """Stop a response in progress; answers it with status ``cancelled``. Cancelling twice is
    idempotent, as on OpenAI; cancelling one that ended otherwise is a 409."""
    return await _serving(request).cancel(response_id, principal, end_user_id(request, principal))


@router.get(
    "/{response_id}/input_items",
    # Documented only: the items are the client's own, kept as it sent them.
    response_model=None,
    responses={200: success(InputItemList, "A page of input items."), **errors(400, 401, 404)},
)
async def list_input_items(
    response_id: str,
    request: Request,
    principal: Caller,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> dict[str, Any]:
    """The input items the response was created with, paginated."""
    return await _serving(request).input_items(
        response_id,
        principal,
        after=after,
        limit=limit,
        order=order,
        end_user=end_user_id(request, principal),
    )
