"""Run one model reply's tool calls: concurrently where safe, in order where not.

Whatever happens, every call gets exactly one result, and results come back in the order the
model made the calls: a tool that raises, times out, is denied or is cancelled produces an
error result; it never escapes into the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_core.events import (
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    Emit,
    ToolFinished,
    ToolOutcome,
    ToolStarted,
)
from hermes_core.tools.registry import (
    ApprovalAsk,
    ApprovalCallback,
    ApprovalVerdict,
    Tool,
    ToolCallRequest,
    ToolContext,
    ToolRegistry,
)
from hermes_core.tools.results import ImagePart, ToolOutput, admit_images, message_content

log = logging.getLogger(__name__)

DEFAULT_MAX_CONCURRENCY = 8
PREVIEW_CHARS = 2000
"""Of a result, what its ToolFinished event carries: enough for a UI's tool card."""
ERROR_CHARS = 300
"""Of a failed call's result, what its ToolFinished event gives as the error: one line's worth."""
MAX_REMEMBERED_IMAGES = 8
"""Of the images a run's tools returned, how many the executor keeps for ``vision_analyze``."""
CANCELLED_BEFORE_START = "Cancelled: the run was interrupted before this tool started."
CANCELLED_WHILE_RUNNING = "Cancelled: the run was interrupted while this tool was running."
CANCELLED_AWAITING_APPROVAL = (
    "Cancelled: the run was interrupted while this call waited for approval; it did not run."
)
AWAITING_APPROVAL_RESULT = (
    "Not run yet: this call waits for the user's approval ({reason}); the user answers in "
    "their next message. Do not repeat the call meanwhile."
)


def new_approval_id() -> str:
    return f"apr_{uuid.uuid4().hex[:24]}"


TOOL_ERROR_PREFIX = "Error:"
"""How a tool's answer says the call failed (``tools/files.py``, ``tools/todo.py``...)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedCall:
    """A call the model made, ready to run or already answered."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    tool: Tool | None
    """None when ``preset_result`` answers the call (unknown tool, unparsable arguments)."""
    preset_result: str | None = None
    preset_outcome: ToolOutcome = ToolOutcome.ERROR
    """How a call answered by ``preset_result`` ended."""
    approved: bool = False
    """Already approved (an earlier turn's answer): runs without asking again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallResult:
    call_id: str
    name: str
    content: str
    outcome: ToolOutcome
    error: str | None = None
    duration_s: float = 0.0
    images: tuple[ImagePart, ...] = ()
    """Images the tool returned (within the bounds of ``tools/results.py``)."""

    @property
    def ok(self) -> bool:
        return self.outcome is ToolOutcome.SUCCESS

    @property
    def message_content(self) -> str | list[dict[str, Any]]:
        """The tool message's content: the text, with the images as parts when there are."""
        return message_content(self.content, self.images)


def render_result(value: Any) -> str:
    """A handler's return value as the text the model reads (a :class:`ToolOutput`'s text;
    see :func:`render_output` for its images)."""
    if isinstance(value, ToolOutput):
        return render_output(value)[0]
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def render_output(value: Any) -> tuple[str, tuple[ImagePart, ...]]:
    """A handler's return value as text and images; images beyond the bounds are dropped,
    each with a note in the text."""
    if not isinstance(value, ToolOutput):
        return render_result(value), ()
    images, notes = admit_images(value.images)
    text = "\n".join(line for line in (value.text, *notes) if line)
    return text, images


async def _maybe_await(value: Awaitable[Any] | Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class ToolExecutor:
    """Executes batches of planned calls for one run."""

    def __init__(
        self,
        *,
        registry: ToolRegistry,
        emit: Emit,
        run_id: str,
        task_id: str,
        interrupted: asyncio.Event,
        approval_callback: ApprovalCallback | None = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        workspace: Path | None = None,
        skill_folders: Mapping[str, Path] | None = None,
    ) -> None:
        self._registry = registry
        self._emit = emit
        self._run_id = run_id
        self._task_id = task_id
        self._interrupted = interrupted
        self._approve = approval_callback
        self._slots = asyncio.Semaphore(max_concurrency)
        self._workspace = workspace
        self._skill_folders = skill_folders if skill_folders is not None else {}
        self._deferred: list[ApprovalAsk] = []
        self._images: list[ImagePart] = []
        """Images this run's tools returned, newest last (``vision_analyze`` reads them)."""

    def take_deferred(self) -> list[ApprovalAsk]:
        """The calls of the last batches left awaiting approval (and forget them)."""
        deferred, self._deferred = self._deferred, []
        return deferred

    async def run_batch(self, calls: Sequence[PlannedCall]) -> list[CallResult]:
        """Run ``calls``; results are in call order whatever the completion order."""
        runnable = [c for c in calls if c.tool is not None]
        sequential = len(runnable) <= 1 or any(
            c.tool.interactive or not c.tool.concurrent_safe for c in runnable if c.tool
        )
        if sequential:
            return [await self._run_one(call) for call in calls]
        return list(await asyncio.gather(*(self._run_one(call) for call in calls)))

    async def _run_one(self, call: PlannedCall) -> CallResult:
        if call.tool is None:
            content = call.preset_result or "Error: this call could not be run."
            self._emit(
                ToolStarted,
                call_id=call.call_id,
                name=call.name,
                arguments=call.arguments,
                summary=call.name,
            )
            return self._finished(call, content, call.preset_outcome, started=time.monotonic())
        async with self._slots:
            if self._interrupted.is_set():
                return self._finished(
                    call,
                    CANCELLED_BEFORE_START,
                    ToolOutcome.CANCELLED,
                    started=time.monotonic(),
                    announce=True,
                )
            return await self._execute(call, call.tool)

    async def _execute(self, call: PlannedCall, tool: Tool) -> CallResult:
        started = time.monotonic()
        self._emit(
            ToolStarted,
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            summary=tool.summary(call.arguments),
        )
        request = ToolCallRequest(
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            run_id=self._run_id,
            task_id=self._task_id,
        )
        for hook in self._registry.pre_hooks:
            blocked = await _maybe_await(hook(request))
            if blocked is not None:
                return self._finished(call, blocked, ToolOutcome.BLOCKED, started=started)
        if not call.approved:
            refusal = await self._check_approval(tool, request)
            if refusal is not None:
                content, outcome = refusal
                return self._finished(call, content, outcome, started=started)
        try:
            value = await self._invoke(tool, request)
        except _Cancelled:
            return self._finished(
                call, CANCELLED_WHILE_RUNNING, ToolOutcome.CANCELLED, started=started
            )
        except _ToolTimedOut:
            message = f"Error: {tool.name} timed out after {tool.timeout:g} s."
            return self._finished(call, message, ToolOutcome.TIMEOUT, started=started)
        except Exception as exc:  # a tool's failure is the model's information, not ours
            log.info("tool %s raised %s", tool.name, type(exc).__name__, exc_info=True)
            message = f"Error: {type(exc).__name__}: {exc}"
            return self._finished(call, message, ToolOutcome.ERROR, started=started)
        content, images = render_output(value)
        for post in self._registry.post_hooks:
            content = await _maybe_await(post(request, content))
        self._images += images
        del self._images[:-MAX_REMEMBERED_IMAGES]
        # Tools say a refusal or a missing file with an "Error: …" answer (the model reads it
        # and corrects its next call): the call failed all the same, and is shown so.
        outcome = (
            ToolOutcome.ERROR if content.startswith(TOOL_ERROR_PREFIX) else ToolOutcome.SUCCESS
        )
        return self._finished(call, content, outcome, started=started, images=images)

    async def _check_approval(
        self, tool: Tool, request: ToolCallRequest
    ) -> tuple[str, ToolOutcome] | None:
        """None when the call may run; else its result and outcome (refused, or waiting)."""
        reason = tool.needs_approval(request.arguments) if tool.needs_approval else None
        if reason is None:
            return None
        ask = ApprovalAsk(
            approval_id=new_approval_id(), call=request, reason=reason, toolset=tool.toolset
        )
        self._emit(
            ApprovalRequested,
            approval_id=ask.approval_id,
            call_id=request.call_id,
            name=tool.name,
            arguments=request.arguments,
            reason=reason,
        )
        try:
            verdict = await self._verdict(ask)
        except _Cancelled:
            return CANCELLED_AWAITING_APPROVAL, ToolOutcome.CANCELLED
        if verdict is ApprovalVerdict.DEFERRED:
            self._deferred.append(ask)
            return AWAITING_APPROVAL_RESULT.format(reason=reason), ToolOutcome.AWAITING_APPROVAL
        decision = ApprovalDecision(verdict.value)
        self._emit(
            ApprovalResolved,
            approval_id=ask.approval_id,
            call_id=request.call_id,
            name=tool.name,
            decision=decision,
        )
        if decision is ApprovalDecision.APPROVED:
            return None
        if self._approve is None:
            unasked = (
                f"Denied: {tool.name} needs approval ({reason}) and no approver is configured. "
                "Do not retry; tell the user what you wanted to do."
            )
            return unasked, ToolOutcome.DENIED
        return refusal_text(tool.name, reason, decision), ToolOutcome.DENIED

    async def _verdict(self, ask: ApprovalAsk) -> ApprovalVerdict:
        if self._approve is None:
            return ApprovalVerdict.DENIED
        try:
            # A person may take minutes to answer: a stop must not wait for them.
            answer = await self._unless_interrupted(_maybe_await(self._approve(ask)))
        except _Cancelled:
            raise
        except Exception:
            log.exception("approval callback failed; denying %s", ask.call.name)
            return ApprovalVerdict.DENIED
        if isinstance(answer, ApprovalVerdict):
            return answer
        return ApprovalVerdict.APPROVED if answer else ApprovalVerdict.DENIED

    async def _invoke(self, tool: Tool, request: ToolCallRequest) -> Any:
        context = ToolContext(
            run_id=self._run_id,
            task_id=self._task_id,
            call_id=request.call_id,
            is_interrupted=self._interrupted.is_set,
            emit=self._emit,
            workspace=self._workspace,
            images=tuple(self._images),
            skill_folders=self._skill_folders,
        )
        if tool.is_async:
            work: Awaitable[Any] = tool.handler(request.arguments, context)
        else:
            # Plain functions may block: keep them off the event loop, and off the loop's
            # default executor too, which DNS lookups and the server's own file work share.
            work = _in_tool_thread(tool, request.arguments, context)
        # A task, started on the loop's next turn: the calls of a batch all start (and pass
        # their interrupt check) before any handler runs.
        task = asyncio.ensure_future(_bounded(work, tool.timeout))
        if not tool.cancellable:
            return await task
        return await self._unless_interrupted(task)

    async def _unless_interrupted(self, work: Awaitable[Any]) -> Any:
        """``work``'s result, unless the run is interrupted first: then ``work`` is cancelled
        and :class:`_Cancelled` raised."""
        task = asyncio.ensure_future(work)
        waiter = asyncio.ensure_future(self._interrupted.wait())
        try:
            done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()  # the run itself is being cancelled: the work must not outlive it
            raise
        finally:
            waiter.cancel()
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise _Cancelled

    def _finished(
        self,
        call: PlannedCall,
        content: str,
        outcome: ToolOutcome,
        *,
        started: float,
        announce: bool = False,
        images: tuple[ImagePart, ...] = (),
    ) -> CallResult:
        """Announce how the call ended; on a failure, ``content`` (what the model reads) is
        also the error."""
        if announce:
            self._emit(
                ToolStarted,
                call_id=call.call_id,
                name=call.name,
                arguments=call.arguments,
                summary=call.name,
            )
        duration = time.monotonic() - started
        error = None if outcome is ToolOutcome.SUCCESS else content[:ERROR_CHARS]
        # Views show the text; an image is named, never inlined, in a tool card.
        shown = "\n".join([content, *(f"[image: {image.describe()}]" for image in images)])
        self._emit(
            ToolFinished,
            call_id=call.call_id,
            name=call.name,
            outcome=outcome,
            duration_s=duration,
            result_preview=shown[:PREVIEW_CHARS],
            result_chars=len(content),
            error=error,
        )
        return CallResult(
            call_id=call.call_id,
            name=call.name,
            content=content,
            outcome=outcome,
            error=error,
            duration_s=duration,
            images=images,
        )


def refusal_text(name: str, reason: str, decision: ApprovalDecision) -> str:
    """What the model reads when a call it made was not approved."""
    if decision is ApprovalDecision.EXPIRED:
        return (
            f"Denied: {name} needed the user's approval ({reason}) and nobody answered in time, "
            "so it did not run. Do not retry it; tell the user what you wanted to do."
        )
    return f"Denied by the user: {name} ({reason}) did not run. Choose another way."


TOOL_THREADS = 16
"""Threads that run plain-function tool handlers, for all runs of the process. A handler that
outlives its call's timeout still holds one until it returns (a thread cannot be killed), so
handlers bound their own work (the file tools stop at a deadline of their own)."""
_tool_pool: ThreadPoolExecutor | None = None


def _tool_threads() -> ThreadPoolExecutor:
    global _tool_pool
    if _tool_pool is None:
        _tool_pool = ThreadPoolExecutor(TOOL_THREADS, thread_name_prefix="hermes-tool")
    return _tool_pool


async def _in_tool_thread(tool: Tool, arguments: dict[str, Any], context: ToolContext) -> Any:
    # A coroutine, as asyncio.to_thread was: the handler is handed to a thread only when its
    # task first runs, after the whole batch passed its interrupt checks.
    run = functools.partial(contextvars.copy_context().run, tool.handler, arguments, context)
    return await asyncio.get_running_loop().run_in_executor(_tool_threads(), run)


class _Cancelled(Exception):
    """A cancellable tool was stopped by an interrupt."""


class _ToolTimedOut(Exception):
    """The tool outran its own ``timeout`` (distinct from a TimeoutError the tool raised)."""


async def _bounded(work: Awaitable[Any], seconds: float | None) -> Any:
    if seconds is None:
        return await work
    deadline = asyncio.timeout(seconds)
    try:
        async with deadline:
            return await work
    except TimeoutError as exc:
        # Only our deadline is a timeout; a TimeoutError the tool raised itself before the
        # deadline is the tool's own failure and is reported as such.
        if deadline.expired():
            raise _ToolTimedOut from exc
        raise
