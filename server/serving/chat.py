"""``POST /v1/chat/completions``: a request becomes a run; the run's events become the answer."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import Response

from hermes_core.events import ExitReason
from server.errors import run_failed_response
from server.http.auth import Principal
from server.http.json_response import FastJSONResponse
from server.http.sse import DONE, data_frame, sse_response
from server.protocol.chat import ChatCompletionRequest
from server.protocol.openwebui_tasks import is_side_task
from server.runs.manager import Run, new_id
from server.services import Services
from server.serving.common import is_openwebui, resolve_profile, unless_client_leaves
from server.serving.turn import TurnSpec, begin_turn
from server.views.chat import ChatCompletionBuilder, ChatStreamView
from server.views.chat_stop import StopCut


def _end_user_named(body: ChatCompletionRequest) -> str | None:
    """The end user the body names: ``safety_identifier`` (OpenAI's newer field, taken as
    an extra one), else ``user``."""
    extra = body.model_extra or {}
    named = extra.get("safety_identifier")
    return named if isinstance(named, str) and named.strip() else body.user


class ChatServing:
    def __init__(self, services: Services) -> None:
        self.services = services

    async def create(
        self, body: ChatCompletionRequest, request: Request, principal: Principal
    ) -> Response:
        services = self.services
        profile = resolve_profile(services, body.model, principal)
        openwebui = profile.openwebui or is_openwebui(request)
        side_task = is_side_task(request.headers, prompt_says=body.is_openwebui_task)
        completion_id = new_id("chatcmpl-")
        turn = await begin_turn(
            services,
            request,
            principal,
            profile,
            TurnSpec(
                endpoint="chat.completions",
                completion_id=completion_id,
                agent_request=lambda *, client_tools, offer_tools, run_id: body.to_agent_request(
                    with_client_tools=client_tools, offer_tools=offer_tools, run_id=run_id
                ),
                side_task=side_task,
                openwebui=openwebui,
                end_user=_end_user_named(body),
            ),
        )
        run, headers, files = turn.run, turn.headers, turn.files
        created = int(time.time())
        if body.stream:
            view = ChatStreamView(
                completion_id=completion_id,
                model=profile.id,
                created=created,
                include_usage=body.include_usage,
                openwebui=openwebui and not side_task,  # a side task's answer is plain text
                client_tool_names=frozenset(tool.function.name for tool in body.tools or ()),
                files=files,
                stop=StopCut(body.stop_sequences) if body.stop_sequences else None,
            )
            return sse_response(
                self._frames(run, view),
                headers=headers,
                keepalive_seconds=self.services.keepalive_seconds,
            )
        builder = ChatCompletionBuilder(
            completion_id=completion_id,
            model=profile.id,
            created=created,
            files=files,
            stop=body.stop_sequences,
        )
        answer = self._complete(run, builder, headers)
        return await unless_client_leaves(services, run, request, answer)

    async def _frames(self, run: Run, view: ChatStreamView) -> AsyncIterator[bytes]:
        try:
            async for batch in run.follow_batches():
                frames: list[bytes] = []
                for event in batch:
                    frames.extend(data_frame(payload) for payload in view.handle(event))
                if frames:
                    yield b"".join(frames)
            yield DONE
        finally:
            # Reached early only when the client went away: Open WebUI's only stop signal.
            if not run.status.finished and self.services.stop_on_disconnect:
                self.services.runs.follower_left(run)

    async def _complete(
        self, run: Run, builder: ChatCompletionBuilder, headers: dict[str, str]
    ) -> Response:
        end = await run.until_finished()
        for event in run.events:
            builder.add(event)
        if not end.final_text and end.exit_reason is ExitReason.FAILED and not end.content_filtered:
            return run_failed_response(end.error, headers=headers, retry_after=end.retry_after)
        return FastJSONResponse(builder.build(end), headers=headers)
