"""``Agent``: the public face of the agent loop.

``Agent.run(request)`` is the primitive: an async generator of :mod:`hermes_core.events`.
``Agent.execute(request, deliver)`` is the same turn with each event handed to a callback as it
happens (no queue, no task of its own: the server's run manager uses it on the hot path).
``run_conversation()`` and ``chat()`` drive it to the end for callers that want a result, and
feed the optional callbacks on the way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from hermes_core.agent.budget import IterationBudget
from hermes_core.agent.builtins import (
    AGENT_LEVEL_TOOLS,
    CHILD_EXCLUDED,
    ClarifyCallback,
    bind_builtin,
    builtin_templates,
)
from hermes_core.agent.callbacks import AgentCallbacks
from hermes_core.agent.config import AgentConfig, AgentRequest, SpendLimit
from hermes_core.agent.emitter import Deliver, Emitter
from hermes_core.agent.episodes import recall
from hermes_core.agent.loop import RunDriver
from hermes_core.agent.run_state import Steering
from hermes_core.agent.run_tools import RunTools
from hermes_core.context.hooks import ContextHooks
from hermes_core.errors import DISK_FULL_ERROR, InvalidRequestError, disk_full
from hermes_core.events import (
    AgentEvent,
    CallRecord,
    CompressionPerformed,
    ExitReason,
    InterruptSource,
    MessageAdded,
    RunFinished,
    RunStarted,
)
from hermes_core.ids import token_hex
from hermes_core.memory_stores import InMemoryMemoryStore, InMemoryTodoStore
from hermes_core.messages import Message
from hermes_core.providers.base import ModelRequest, Provider
from hermes_core.providers.fallback import ChainTurn, FallbackChain
from hermes_core.skills.shelf import SkillShelf, attached_section, skills_section
from hermes_core.stores import MemoryStore, SessionSearchStore, TodoStore
from hermes_core.tools.agent_tools import memory_snapshot
from hermes_core.tools.registry import ApprovalCallback, Tool, ToolRegistry
from hermes_core.usage import Usage

log = logging.getLogger(__name__)
PARENT = InterruptSource.PARENT


class Agent:
    """An agent: a provider, tools, stores and settings. Runs one conversation turn at a time.

    The system prompt (core instructions, the profile's instructions and the memory snapshot)
    is built on the first run and then frozen for the agent's life — one agent is one session —
    so the prompt prefix, and with it the provider's prompt cache, stays stable.
    """

    def __init__(
        self,
        provider: Provider,
        *,
        tools: ToolRegistry | None = None,
        config: AgentConfig | None = None,
        owner: str = "default",
        memory_owner: str | None = None,
        memory_store: MemoryStore | None = None,
        todo_store: TodoStore | None = None,
        session_search: SessionSearchStore | None = None,
        approval_callback: ApprovalCallback | None = None,
        clarify_callback: ClarifyCallback | None = None,
        callbacks: AgentCallbacks | None = None,
        context: ContextHooks | None = None,
        budget: IterationBudget | None = None,
        depth: int = 0,
        system_prompt: str | None = None,
        checkpoint: Callable[[], Awaitable[None]] | None = None,
        skills: SkillShelf | None = None,
    ) -> None:
        self.provider = provider
        self.tools = tools if tools is not None else ToolRegistry()
        self.config = config if config is not None else AgentConfig()
        self.owner = owner
        """Whose sessions ``session_search`` sees (an API key's principal)."""
        self.memory_owner = memory_owner or owner
        """Whose memory the agent reads and writes: the owner, or a scope within it."""
        self.memory_store: MemoryStore = memory_store or InMemoryMemoryStore()
        self.todo_store: TodoStore = todo_store or InMemoryTodoStore()
        self.session_search = session_search
        """Past sessions ``session_search`` looks through; without one the tool is not offered."""
        self.approval_callback = approval_callback
        self.clarify_callback = clarify_callback or (
            callbacks.clarify_callback if callbacks is not None else None
        )
        self.callbacks = callbacks
        self.context = context if context is not None else ContextHooks()
        self.shared_budget = budget
        """When set, every run draws from this pool (a sub-agent shares its parent's)."""
        self.depth = depth
        self.interrupt_event = asyncio.Event()
        self.interrupt_reason: str | None = None
        self.interrupt_source: InterruptSource | None = None
        self.children: list[Agent] = []
        """Sub-agents of the current run, interrupted together with it."""
        self.checkpoint = checkpoint
        """Awaited before tools run: a journal of ``MessageAdded`` events makes the tool-call
        request durable there, so a crash never leaves a tool's effect without its cause."""
        self.skills = skills
        """The skills the agent's runs are offered (None: the profile has skills off)."""
        self.run_skills: SkillShelf | None = None
        """The current run's shelf: :attr:`skills` with the request's attached skills."""
        self._frozen_prompt: str | None = system_prompt
        self._driver: RunDriver | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self.steering = Steering()
        """The current run's steered messages (closed between runs: a steer needs a run)."""
        self.steering.close()

    # --- control ------------------------------------------------------------------------------

    def interrupt(
        self, reason: str = "interrupted", *, source: InterruptSource = InterruptSource.OTHER
    ) -> None:
        """Stop the current run soon; safe from any task or thread.

        An in-flight model call is abandoned at once; running tools finish (cancellable ones
        are cancelled); tools not yet started are answered as cancelled. An interrupt that
        arrives between runs applies to the next one. ``reason`` is for people (the run's
        error says it); ``source`` is the fact its ending records.
        """
        with self._lock:
            self.interrupt_reason = reason
            self.interrupt_source = source
            loop = self._loop
        if loop is not None and loop.is_running():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                self._interrupt_now()
            else:
                loop.call_soon_threadsafe(self._interrupt_now)
        else:
            self.interrupt_event.set()

    def steer(self, message: str) -> bool:
        """Give the running turn ``message`` before its next model call; safe from any task or
        thread. The loop appends it to the transcript as a user message, so the turn's answer
        answers it too. False when no run's loop is going on (none has begun yet, or the last
        has ended) or the run has made its last model call (its answer is final): the message
        was not taken, and the caller should say so. Unlike an interrupt, a steer between runs
        is not kept for the next one: a message is for the turn it was written to."""
        with self._lock:
            return self.steering.offer(message)

    def _interrupt_now(self) -> None:
        self.interrupt_event.set()
        if self._driver is not None:
            self._driver.model_call.cancel()
        for child in self.children:
            child.interrupt(self.interrupt_reason or "parent interrupted", source=PARENT)

    def spawn_child(self, budget: IterationBudget) -> Agent:
        """A sub-agent for ``delegate_task``: this agent's provider and tools, less those a
        child never gets (it cannot delegate, ask the user or edit memory), drawing on
        ``budget``, and interrupted together with this agent."""
        child = Agent(
            self.provider,
            tools=self.tools.without(*CHILD_EXCLUDED),
            # The run's cost cap holds the child through its spend limit, over the run's
            # spending and the child's together (``child_spend_limit``), not on its own.
            config=dataclasses.replace(
                self.config, instructions="", planner=False, max_cost_usd=None
            ),
            owner=self.owner,
            todo_store=InMemoryTodoStore(),
            session_search=self.session_search,
            approval_callback=self.approval_callback,
            context=self.context,
            budget=budget,
            depth=self.depth + 1,
            skills=self.skills,
        )
        self.children.append(child)
        if self.interrupt_event.is_set():
            child.interrupt(self.interrupt_reason or "parent interrupted", source=PARENT)
        return child

    def child_spend_limit(self) -> SpendLimit | None:
        """What a sub-agent of the current run is held to: the run's cost cap and budgets,
        over the run's spending so far and the sub-agent's own."""
        driver = self._driver
        return None if driver is None else driver.run.child_spend_limit()

    def count_child_calls(self, calls: Sequence[CallRecord]) -> None:
        """A finished sub-agent's model calls: the current run paid for them, so they are
        in its usage, cost and ``calls`` (its budgets and its ledger rows see them)."""
        driver = self._driver
        if driver is not None:
            for call in calls:
                driver.run.count(call)

    # --- running ------------------------------------------------------------------------------

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentEvent]:
        """Run one turn; yields every event, ending with exactly one ``RunFinished``.

        The turn runs in a task of its own, so the consumer may take its time over each event.
        """
        self.check(request)
        queue: asyncio.Queue[AgentEvent | None] = asyncio.Queue()

        async def turn() -> None:
            try:
                await self._execute(request, queue.put_nowait)
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(turn())
        try:
            while (event := await queue.get()) is not None:
                yield event
            await task  # a failure before the loop began (building the prompt) surfaces here
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def execute(self, request: AgentRequest, deliver: Deliver) -> None:
        """Run one turn in the calling task, handing every event to ``deliver`` as it happens;
        the last is exactly one ``RunFinished``.

        The cheap form of :meth:`run` for a consumer that only records and counts events:
        ``deliver`` is called synchronously from inside the loop, so it must not block.
        """
        self.check(request)
        await self._execute(request, deliver)

    async def _execute(self, request: AgentRequest, deliver: Deliver) -> None:
        # Ids from the process's buffered random bytes, not a system call each (the server
        # names the run; the task it leaves to us).
        task_id = request.task_id or f"task_{token_hex(8)}"
        run_id = request.run_id or f"run_{token_hex(8)}"
        budget = self.shared_budget or IterationBudget(self.config.max_iterations)
        tools = self._tools_for_run(
            request, task_id=task_id, session_id=request.session_id or task_id, budget=budget
        )
        emitter = Emitter(run_id, deliver)
        self._loop = asyncio.get_running_loop()
        with self._lock:
            self.steering = Steering()
        turn = self._begin_turn()
        try:
            emitter.emit(
                RunStarted,
                task_id=task_id,
                session_id=request.session_id,
                model=turn.model,
                provider=turn.name,
                budget=budget.max_total,
                streamed=request.stream_model_replies,
            )
            await self._open_skills(tools)
            system_prompt = await self._system_prompt(request.system_message)
            request = await self._with_recall(request, task_id)
            driver = RunDriver(
                self,
                request,
                provider=turn,
                emitter=emitter,
                task_id=task_id,
                budget=budget,
                tools=tools,
                system_prompt=system_prompt,
            )
            self._driver = driver
            try:
                await driver.drive()
            except Exception as exc:  # a bug of ours must still end the run honestly
                if disk_full(exc):  # not a bug: the store could not save the run's progress
                    log.error("run %s: failed, the store's disk is full", run_id)
                    error = DISK_FULL_ERROR
                else:
                    log.exception("run %s: the agent loop failed", run_id)
                    error = f"internal error: {type(exc).__name__}"
                driver.finish(ExitReason.FAILED, "", error=error)
        finally:
            self._driver = None
            self.steering.close()  # a run that ended before its loop took none
            self.children.clear()
            if self.interrupt_event.is_set():  # honoured: the next run starts clean
                self.interrupt_event.clear()
                self.interrupt_reason = None
                self.interrupt_source = None

    async def _with_recall(self, request: AgentRequest, task_id: str) -> AgentRequest:
        """``request`` with what the owner's earlier sessions say about its message, when the
        profile injects episodes (``memory.inject_episodes``); a sub-agent recalls nothing."""
        limit = self.config.inject_episodes
        if not limit or self.depth or self.session_search is None or request.recalled:
            return request
        message = request.user_message
        if message is None and request.history and request.history[-1]["role"] == "user":
            message = request.history[-1].get("content")  # the server passes it this way
        recalled = await recall(
            self.session_search,
            self.owner,
            message,
            limit=limit,
            exclude=request.session_id or task_id,
        )
        return request if recalled is None else dataclasses.replace(request, recalled=recalled)

    def _begin_turn(self) -> ChainTurn:
        """Fallback is turn-scoped: every run starts again on the preferred provider."""
        chain = self.provider
        if not isinstance(chain, FallbackChain):
            chain = FallbackChain([self.provider], retry=self.config.retry)
        return chain.for_turn(adapt=self._adapt_request)

    def _adapt_request(self, request: ModelRequest, provider: Provider) -> ModelRequest:
        return self.context.mark_cache(request, provider=provider)

    def _tools_for_run(
        self, request: AgentRequest, *, task_id: str, session_id: str, budget: IterationBudget
    ) -> RunTools:
        """The agent-level tools over the registry's (they win a clash of names)."""

        def bind(name: str) -> Tool:
            return bind_builtin(self, name, session_id=session_id, budget=budget)

        if self.skills is not None:
            self.run_skills = self.skills.for_run(request.skills)
        return RunTools(self.tools.overlaid(builtin_templates(self)), bind)

    async def _open_skills(self, tools: RunTools) -> None:
        """Give the run's commands its skill folders (``/skills/<name>``), when it has
        commands: a library skill's folder is made on this host the first time."""
        shelf = self.run_skills
        if shelf is not None and ("shell" in self.tools or "code" in self.tools):
            tools.skill_folders = await shelf.folders()

    def check(self, request: AgentRequest) -> None:
        """Raise :class:`InvalidRequestError` now if ``request`` cannot run as asked."""
        for client_tool in request.client_tools:
            if client_tool.name in AGENT_LEVEL_TOOLS or client_tool.name in self.tools:
                raise InvalidRequestError(
                    f"The client tool '{client_tool.name}' has the name of a server tool; "
                    "rename it.",
                    param="tools",
                )

    async def frozen_prompt(self) -> str:
        """The agent's own system prompt — core and profile instructions, the skills offered
        (names and descriptions, sorted) and the memory snapshot — built on first use and then
        fixed (a session stores it and passes it back as ``system_prompt``, so memory writes
        and new skills show in the next session, not this one)."""
        if self._frozen_prompt is None:
            snapshot = await memory_snapshot(self.memory_store, self.memory_owner)
            skills = ""
            if self.skills is not None:  # the request's own skills come after this prompt
                skills = skills_section(await self.skills.for_run(()).listing())
            parts = [self.config.core_instructions, self.config.instructions, skills, snapshot]
            self._frozen_prompt = "\n\n".join(part.strip() for part in parts if part.strip())
        return self._frozen_prompt

    def freeze_prompt(self, prompt: str) -> None:
        """Use ``prompt`` (a stored session's frozen prompt) instead of building one."""
        self._frozen_prompt = prompt

    async def _system_prompt(self, client_system: str | None) -> str:
        frozen = await self.frozen_prompt()
        shelf = self.run_skills
        if shelf is not None and shelf.attached:  # after the cached prefix, like the client's
            attached = attached_section([skill.entry for skill in shelf.attached])
            frozen = f"{frozen}\n\n{attached}"
        if client_system and client_system.strip():
            return f"{frozen}\n\n{client_system.strip()}"
        return frozen

    # --- convenience --------------------------------------------------------------------------

    async def run_conversation(
        self,
        user_message: str | list[dict[str, Any]] | None,
        system_message: str | None = None,
        conversation_history: Sequence[Message] | None = None,
        task_id: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Run one turn to its end and return the result as a dict.

        Keys: ``final_response``, ``messages`` (the whole transcript, tool calls included),
        ``exit_reason``, ``completed``, ``partial``, ``iterations``, ``model_calls``, ``usage``,
        ``error``, ``task_id``, ``run_id``.
        """
        history = list(conversation_history or ())
        request = AgentRequest(
            user_message=user_message,
            history=history,
            system_message=system_message,
            task_id=task_id,
            **options,
        )
        transcript = list(history)
        started: RunStarted | None = None
        finished: RunFinished | None = None
        async for event in self.run(request):
            if self.callbacks is not None:
                await self.callbacks.dispatch(event)
            if isinstance(event, RunStarted):
                started = event
            elif isinstance(event, MessageAdded):
                transcript.append(event.message)
            elif isinstance(event, CompressionPerformed):
                transcript = list(event.messages)  # the child session starts from here
            elif isinstance(event, RunFinished):
                finished = event
        assert started is not None
        assert finished is not None
        return {
            "final_response": finished.final_text,
            "messages": transcript,
            "exit_reason": finished.exit_reason.value,
            "completed": finished.exit_reason is ExitReason.COMPLETED,
            "partial": finished.partial,
            "iterations": finished.iterations,
            "model_calls": finished.model_calls,
            "usage": usage_dict(finished.usage),
            "calls": [
                {"provider": c.provider, "model": c.model, "usage": usage_dict(c.usage)}
                for c in finished.calls
            ],
            "error": finished.error,
            "task_id": started.task_id,
            "run_id": started.run_id,
        }

    async def chat(self, message: str) -> str:
        """Send one message; return the final answer text."""
        result = await self.run_conversation(message)
        return str(result["final_response"])


def usage_dict(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "output_tokens": usage.output_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "total_tokens": usage.total_tokens,
    }
