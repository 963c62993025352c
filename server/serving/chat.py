"""``POST /v1/chat/completions``: a request becomes a run; the run's events become the answer."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import Response

from hermes_core.events import ExitReason
from hermes_core.messages import text_of
from server.approvals import Asker, wait_seconds_of
from server.auth import Principal
from server.errors import run_failed_response
from server.json_response import FastJSONResponse
from server.protocol.chat import ChatCompletionRequest
from server.protocol.openwebui_tasks import is_side_task
from server.runs.manager import Run, Runnable, new_id
from server.services import Services
from server.serving.common import (
    conversation_owner,
    is_openwebui,
    new_agent,
    resolve_profile,
    session_name_of,
    start_run,
    turn_given_back_on_failure,
    unless_client_leaves,
    with_approvals,
    with_files_in_workspace,
)
from server.serving.file_announcements import file_announcer, watched
from server.sse import DONE, data_frame, sse_response
from server.views.chat import ChatCompletionBuilder, ChatStreamView
from server.views.file_citations import FileAnnouncer


class ChatServing:
    def __init__(self, services: Services) -> None:
        self.services = services

    async def create(
        self, body: ChatCompletionRequest, request: Request, principal: Principal
    ) -> Response:
        profile = resolve_profile(self.services, body.model, principal)
        services = self.services
        approval_wait = wait_seconds_of(request, services.approvals.expiry_seconds)
        run_id = new_id("run_")
        side_task = is_side_task(request.headers, prompt_says=body.is_openwebui_task)
        if side_task:
            # Open WebUI's title, tag and follow-up prompts: one plain model call, in a run.
            agent = profile.plain_agent(owner=principal.name)
            agent_request = body.to_agent_request(
                with_client_tools=False, offer_tools=False, run_id=run_id
            )
            openwebui, session_name, owner = False, None, principal.name
        else:
            openwebui = profile.openwebui or is_openwebui(request)
            # Open WebUI sends its own 36 built-in tools with every request: not ours to run.
            agent_request = body.to_agent_request(with_client_tools=not openwebui, run_id=run_id)
            session_name = session_name_of(request)
            owner = conversation_owner(request, principal)
            agent = new_agent(services, profile, owner)
        agent.check(agent_request)
        completion_id = new_id("chatcmpl-")
        services.runs.admit(principal.name)
        session_id = conversation = None
        asks = profile.asks_approval and not side_task  # else no approval work at all
        spoken, forked = text_of(agent_request.user_message) if asks else "", False
        if services.sessions is not None and not side_task:
            turn = await services.sessions.begin(
                agent,
                agent_request,
                owner=owner,
                profile=profile.id,
                run_id=run_id,
                name=session_name,
            )
            agent_request, session_id = turn.request, turn.session_id
            conversation = (owner, turn.conversation)
            forked = turn.forked_from is not None
        if not side_task:
            with turn_given_back_on_failure(services, run_id):
                if asks:
                    agent_request = await with_approvals(
                        services,
                        agent,
                        agent_request,
                        Asker(
                            owner=principal.name,
                            conversation=conversation,
                            session_id=session_id,
                            profile=profile.id,
                            wait_seconds=approval_wait,
                        ),
                        forked=forked,
                        answers={},
                        spoken=spoken,
                    )
                agent_request = await with_files_in_workspace(
                    services, profile, agent_request, principal, conversation
                )
                runnable: Runnable = watched(agent, agent_request, conversation)
                files = await file_announcer(
                    services, request, agent_request, conversation, openwebui=openwebui
                )
        else:
            runnable, files = agent, None
        run = await start_run(
            services,
            runnable,
            agent_request,
            principal=principal,
            profile=profile,
            endpoint="chat.completions",
            completion_id=completion_id,
            session_id=session_id,
            conversation=conversation,
            headers=request.headers,
        )
        headers = {"x-hermes-run-id": run.id}
        if session_id is not None:
            headers["x-hermes-session-id"] = session_name or session_id
        created = int(time.time())
        if body.stream:
            view = ChatStreamView(
                completion_id=completion_id,
                model=profile.id,
                created=created,
                include_usage=body.include_usage,
                openwebui=openwebui,
                client_tool_names=frozenset(tool.function.name for tool in body.tools or ()),
                files=files,
            )
            return sse_response(
                self._frames(run, view),
                headers=headers,
                keepalive_seconds=self.services.keepalive_seconds,
            )
        answer = self._complete(run, completion_id, profile.id, created, headers, files)
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
        self,
        run: Run,
        completion_id: str,
        model: str,
        created: int,
        headers: dict[str, str],
        files: FileAnnouncer | None,
    ) -> Response:
        builder = ChatCompletionBuilder(
            completion_id=completion_id, model=model, created=created, files=files
        )
        end = await run.until_finished()
        for event in run.events:
            builder.add(event)
        if not end.final_text and end.exit_reason is ExitReason.FAILED:
            return run_failed_response(end.error, headers=headers)
        return FastJSONResponse(builder.build(end), headers=headers)
