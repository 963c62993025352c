"""``POST /v1/responses/compact``: a conversation compacted by our own compressor."""

from __future__ import annotations

from fastapi.responses import Response

from hermes_core.agent import AgentRequest
from hermes_core.agent.compaction import CompactionRun
from hermes_core.context import Compressor
from hermes_core.events import CompressionPerformed, ExitReason
from server.errors import APIError, error_response
from server.http.auth import Principal
from server.http.json_response import FastJSONResponse
from server.protocol.response_input import encode_compaction
from server.protocol.responses import ResponseCreateRequest
from server.runs.manager import new_id
from server.services import Services
from server.serving.common import resolve_profile, start_run
from server.serving.end_users import scoped_owner
from server.serving.item_references import resolve_item_references
from server.serving.response_chain import previous_not_found, previous_response
from server.views.responses import response_usage


async def compact(
    services: Services,
    body: ResponseCreateRequest,
    principal: Principal,
    end_user: str | None = None,
) -> Response:
    """The conversation (``previous_response_id`` and/or ``input``) compacted by our own
    compressor, as one ``compaction`` item a client feeds back as input. The compaction
    is a run of its own: it can be stopped, and its summariser call is counted."""
    if body.conversation is not None:
        raise APIError(400, "Compaction takes no conversation.", param="conversation")
    profile = resolve_profile(services, body.model, principal)
    previous = await previous_response(services, body, principal, end_user=end_user)
    await resolve_item_references(
        services.store, principal.name, body.input_items(), end_user=end_user
    )
    request = body.to_agent_request(with_client_tools=False)
    messages = request.conversation()
    store = services.store
    if previous is not None and previous.session_id is not None and store is not None:
        owner = scoped_owner(principal, end_user)
        if await store.sessions.get(owner, previous.session_id) is None:
            raise previous_not_found("The session of the previous response no longer exists.")
        stored = await store.sessions.messages(previous.session_id)
        messages = [m.message for m in stored[: previous.transcript_length]] + messages
    summariser = profile.summariser
    compaction = CompactionRun(Compressor(summariser), context_window=summariser.context_window)
    compaction_id = new_id("resp_")
    run = await start_run(
        services,
        compaction,
        AgentRequest(history=messages, run_id=new_id("run_"), stream_model_replies=False),
        principal=principal,
        profile=profile,
        endpoint="responses",
        completion_id=compaction_id,
        session_id=None,
        end_user=end_user,
    )
    end = await run.until_finished()
    headers = {"x-hermes-run-id": run.id}
    compacted = next((e for e in run.events if isinstance(e, CompressionPerformed)), None)
    if compacted is None:  # stopped, or a bug of ours (a failing summariser is no failure)
        interrupted = end.exit_reason is ExitReason.INTERRUPTED
        status, code = (409, "run_interrupted") if interrupted else (500, "server_error")
        message = end.error or "The compaction failed."
        return error_response(status, message, code=code, headers=headers)
    payload = {
        "id": compaction_id,
        "object": "response.compaction",
        "created_at": int(run.created_at),
        "output": [
            {
                "type": "compaction",
                "id": new_id("cmp_"),
                "encrypted_content": encode_compaction(compacted.messages),
            }
        ],
        "usage": response_usage(end.usage),
    }
    return FastJSONResponse(payload, headers=headers)
