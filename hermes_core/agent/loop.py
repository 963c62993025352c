"""One run of the agent loop, as explicit steps over explicit state.

Each iteration: check for an interrupt, take an iteration from the budget (or make the grace
call), build the model's view of the transcript, make the interruptible model call, then either
finish on text or validate and execute the tool calls and go round again. Every exit goes
through :meth:`RunDriver.finish`, which states the honest exit reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hermes_core.agent.arguments import parse_arguments
from hermes_core.agent.budget import IterationBudget
from hermes_core.agent.builtins import HOUSEKEEPING_TOOLS
from hermes_core.agent.config import AgentConfig, AgentRequest, ApprovalAnswer
from hermes_core.agent.emitter import Emitter
from hermes_core.agent.model_call import CallOutcome, InterruptibleCall
from hermes_core.agent.prepare import CONTINUE_PLACEHOLDER, prepare_messages
from hermes_core.agent.structured import check_answer, format_instructions, repair_note
from hermes_core.context.compression import estimate_tokens
from hermes_core.context.hooks import CallContext, ContextHooks
from hermes_core.events import (
    ApprovalDecision,
    ApprovalResolved,
    BudgetWarning,
    CallRecord,
    ClientToolCallsPending,
    CompressionPerformed,
    ExitReason,
    InterruptSource,
    MessageAdded,
    ModelCallStarted,
    RunFinished,
    StepFinished,
    TextDelta,
    ToolOutcome,
)
from hermes_core.messages import Message, ToolCall, text_of
from hermes_core.providers.base import ModelRequest, ModelResponse, Provider, ToolSchema
from hermes_core.tools.executor import CallResult, PlannedCall, ToolExecutor, refusal_text
from hermes_core.tools.registry import ApprovalAsk, ApprovalCallback, Tool, ToolRegistry
from hermes_core.usage import Usage

EMPTY_NUDGE = (
    "You just executed tool calls but returned an empty response. Please process the tool "
    "results above and continue with the task."
)
TOOL_LIMIT_RESULT = (
    "Error: this request may make at most {limit} tool call(s) and they are used up; "
    "answer with what you have."
)
TOOL_LIMIT_REQUEST = (
    "You have made every tool call this request allows, so you cannot call tools any more. "
    "Reply now with your final answer based on what you found."
)
GRACE_REQUEST = (
    "You have used every iteration of your budget, so you cannot call tools any more. Reply "
    "now with your final answer: summarise what you did, what you found, and what is left."
)


STEP_BREAK = "\n\n"
"""Shown between the text of two model steps of one run."""


@dataclass(slots=True)
class RunState:
    """Everything a run accumulates; the transcript is the record of the conversation."""

    transcript: list[Message]
    iterations: int = 0
    model_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    calls: list[CallRecord] = field(default_factory=list)
    invalid_json_retries: int = 0
    unknown_tool_turns: int = 0
    nudged: bool = False
    reshaped: bool = False
    shown_text: bool = False
    """Some answer text of this run has been shown: a later step's text starts on a new
    paragraph (not "Let me check.Found it.")."""
    """The answer was asked for again once, for not having the requested shape."""
    tool_calls: int = 0
    """Server tool calls executed so far (for ``max_tool_calls``)."""
    last_prompt_tokens: int | None = None
    warned: set[str] = field(default_factory=set)


class LoopOwner(Protocol):
    """What the loop needs of the agent that runs it (``Agent``, seen without importing it)."""

    @property
    def config(self) -> AgentConfig: ...
    @property
    def context(self) -> ContextHooks: ...
    @property
    def checkpoint(self) -> Callable[[], Awaitable[None]] | None: ...
    @property
    def approval_callback(self) -> ApprovalCallback | None: ...
    @property
    def interrupt_event(self) -> asyncio.Event: ...
    @property
    def interrupt_reason(self) -> str | None: ...
    @property
    def interrupt_source(self) -> InterruptSource | None: ...


class RunDriver:
    def __init__(
        self,
        agent: LoopOwner,
        request: AgentRequest,
        *,
        provider: Provider,
        emitter: Emitter,
        task_id: str,
        budget: IterationBudget,
        tools: ToolRegistry,
        system_prompt: str,
    ) -> None:
        self.agent = agent
        self.provider = provider
        """This turn's provider: a fallback chain's view that remembers a switch."""
        self.request = request
        self.emitter = emitter
        self.emit = emitter.emit
        self.task_id = task_id
        self.budget = budget
        self.tools = tools
        self.output_format = request.output_format
        if self.output_format is not None:
            system_prompt = f"{system_prompt}\n\n{format_instructions(self.output_format)}"
        self.system_prompt = system_prompt
        self.model_call = InterruptibleCall()
        self.state = RunState(transcript=list(request.history))
        self.session_id = request.session_id
        """The session the run is in now (a compression moves it to a child)."""
        self.client_tools = {tool.name: tool for tool in request.client_tools}
        self.executor = ToolExecutor(
            registry=tools,
            emit=self.emit,
            run_id=emitter.run_id,
            task_id=task_id,
            interrupted=agent.interrupt_event,
            approval_callback=agent.approval_callback,
            max_concurrency=agent.config.max_tool_concurrency,
            workspace=request.workspace,
        )

    # --- transcript -------------------------------------------------------------------------

    def append(self, message: Message) -> None:
        self.state.transcript.append(message)
        self.emit(MessageAdded, index=len(self.state.transcript) - 1, message=message)

    def _last_role(self) -> str | None:
        return self.state.transcript[-1]["role"] if self.state.transcript else None

    # --- the loop ---------------------------------------------------------------------------

    async def drive(self) -> None:
        if self.request.user_message is not None:
            self.append({"role": "user", "content": self.request.user_message})
        if self.request.approvals:
            await self.answer_approvals(self.request.approvals)
        while True:
            if self.agent.interrupt_event.is_set():
                return self.finish_interrupted("")
            if not self.budget.consume():
                return await self.budget_exhausted()
            self.state.iterations += 1
            limited = self._tool_calls_used_up()
            outcome = await self.call_model(
                tools_allowed=self.request.offer_tools and not limited,
                closing_note=TOOL_LIMIT_REQUEST if limited else None,
            )
            if outcome is None:
                return
            response = outcome.response
            assert response is not None
            if response.message.get("tool_calls"):
                if not await self.handle_tool_calls(response):
                    return
                continue
            if not self.handle_text(response, outcome.streamed_text):
                return

    async def call_model(
        self, *, tools_allowed: bool, closing_note: str | None = None, grace: bool = False
    ) -> CallOutcome | None:
        """Make one model call; on failure or interrupt, finish the run and return None."""
        await self._compress_if_needed()
        note = self._budget_note() if tools_allowed else None
        last = self.state.transcript[-1] if self.state.transcript else None
        if (
            closing_note is None
            and last is not None
            and last["role"] == "assistant"
            and not last.get("tool_calls")
        ):
            # No upstream call ends on the assistant (some take it as a prefill, others
            # refuse it): a history with nothing new after the answer asks to go on.
            closing_note = CONTINUE_PLACEHOLDER
        messages = prepare_messages(
            self.state.transcript,
            system_prompt=self.system_prompt,
            max_tool_result_chars=self.agent.config.max_tool_result_chars,
            tool_result_limits=self._tool_result_limits(),
            last_tool_note=note,
            closing_user_note=closing_note,
        )
        request = self.agent.context.mark_cache(
            ModelRequest(
                messages=messages,
                tools=self._offered_tools() if tools_allowed else (),
                tool_choice=self.request.tool_choice
                if tools_allowed and self.state.model_calls == 0
                else "auto",
                parallel_tool_calls=self.request.parallel_tool_calls if tools_allowed else None,
                max_tokens=self.request.max_tokens or self.agent.config.max_tokens,
                temperature=_first(self.request.temperature, self.agent.config.temperature),
                reasoning_effort=self.request.reasoning_effort
                or self.agent.config.reasoning_effort,
                output_format=self.output_format,
                stream=self.request.stream_model_replies,
            ),
            provider=self.provider,
        )
        self.emit(
            ModelCallStarted,
            iteration=self.state.iterations,
            provider=self.provider.name,
            model=self.provider.model,
            grace=grace,
        )
        outcome = await self.model_call.run(
            self.provider,
            request,
            self.emit,
            is_interrupted=self.agent.interrupt_event.is_set,
            # A structured answer is shown only once it is checked (see _shaped).
            hold_text=self.output_format is not None,
            lead=STEP_BREAK if self.state.shown_text else "",
        )
        if outcome.streamed_text and self.output_format is None:
            self.state.shown_text = True
        if outcome.interrupted:
            self._count_stopped_call(request, outcome.streamed_text)
            self.finish_interrupted(outcome.streamed_text)
            return None
        if outcome.error is not None:
            self.finish(ExitReason.FAILED, outcome.streamed_text, error=outcome.error.message)
            return None
        response = outcome.response
        assert response is not None
        self.state.model_calls += 1
        self.state.last_prompt_tokens = response.usage.input_tokens or None
        self._count(
            CallRecord(provider=response.provider, model=response.model, usage=response.usage)
        )
        self.emit(
            StepFinished,
            iteration=self.state.iterations,
            usage=response.usage,
            provider=response.provider,
            model=response.model,
            finish_reason=response.finish_reason,
        )
        return outcome

    def _count_stopped_call(self, request: ModelRequest, streamed: str) -> None:
        """A call stopped mid-way was paid for, but no upstream said how much: count an
        estimate (the prompt, and the text it streamed), so usage and metrics are not zero."""
        usage = Usage(
            input_tokens=estimate_tokens(request.messages),
            output_tokens=-(-len(streamed) // 4),
        )
        self.state.model_calls += 1
        self._count(CallRecord(provider=self.provider.name, model=self.provider.model, usage=usage))
        self.emit(
            StepFinished,
            iteration=self.state.iterations,
            usage=usage,
            provider=self.provider.name,
            model=self.provider.model,
            finish_reason="interrupted",
        )

    def _count(self, call: CallRecord) -> None:
        self.state.usage += call.usage
        self.state.calls.append(call)

    async def _compress_if_needed(self) -> None:
        """Let the context hooks compress the transcript, and announce it when they did."""
        compaction = await self.agent.context.before_call(
            CallContext(
                transcript=self.state.transcript,
                provider=self.provider,
                last_prompt_tokens=self.state.last_prompt_tokens,
                session_id=self.request.session_id or self.task_id,
                between_turns=self.state.model_calls == 0,
            )
        )
        if compaction is None:
            return
        if compaction.summariser_call is not None:
            self._count(compaction.summariser_call)
        if self.session_id is not None:
            self.session_id = compaction.session_id
        self.emit(
            CompressionPerformed,
            tokens_before=compaction.tokens_before,
            tokens_after=compaction.tokens_after,
            messages_before=compaction.messages_before,
            messages_after=len(self.state.transcript),
            session_id=compaction.session_id,
            parent_session_id=compaction.parent_session_id,
            messages=list(self.state.transcript),
            summarised=compaction.summarised,
            summariser_call=compaction.summariser_call,
        )

    def _offered_tools(self) -> list[ToolSchema]:
        client = list(self.client_tools.values())
        if client and self.request.tool_choice == "required" and self.state.model_calls == 0:
            # A client that requires a tool call means one of the tools it declared.
            return client
        return [tool.schema for tool in self.tools.tools()] + client

    def _tool_result_limits(self) -> Mapping[str, int]:
        limits: dict[str, int] = {}
        for message in self.state.transcript:
            for call in message.get("tool_calls") or ():
                tool = self.tools.get(call["function"]["name"])
                if tool is not None and tool.max_result_chars is not None:
                    limits[call["id"]] = tool.max_result_chars
        return limits

    def _budget_note(self) -> str | None:
        pressure = self.agent.config.budget_pressure
        used, total = self.budget.used, self.budget.max_total
        tier = pressure.tier(used, total)
        if tier is not None and tier not in self.state.warned:
            self.state.warned.add(tier)
            self.emit(BudgetWarning, tier=tier, used=used, total=total)
        return pressure.note(used, total) if self._last_role() == "tool" else None

    # --- text replies -----------------------------------------------------------------------

    def handle_text(self, response: ModelResponse, streamed: str) -> bool:
        """Finish on a text reply, or recover from an empty one. True means: loop again."""
        text = text_of(response.message.get("content")) or streamed
        refusal = response.message.get("refusal")
        if refusal and not text.strip():
            # A refusal is the model's answer, in the standard field: no shape to check. The
            # transcript keeps it as the turn's text (what the next calls should see).
            refused: Message = dict(response.message)  # type: ignore[assignment]
            refused["content"] = refusal
            self.append(refused)
            self.finish(ExitReason.COMPLETED, "", refusal=refusal)
            return False
        if text.strip():
            message: Message = dict(response.message)  # type: ignore[assignment]
            message["content"] = text
            if self.output_format is not None and response.finish_reason == "stop":
                return self._shaped(message, text)
            self.append(message)
            if response.finish_reason == "length":
                self.finish(
                    ExitReason.TRUNCATED,
                    text,
                    error="The answer was cut off by the output token limit.",
                )
            elif response.finish_reason == "content_filter":
                self.finish(
                    ExitReason.FAILED, text, error="The upstream content filter stopped the answer."
                )
            else:
                self.finish(ExitReason.COMPLETED, text)
            return False
        earlier = self._text_before_housekeeping()
        if earlier:
            self.finish(ExitReason.COMPLETED, earlier)
            return False
        if self._last_role() == "tool" and not self.state.nudged:
            self.state.nudged = True
            self.append({"role": "assistant", "content": "(empty)"})
            self.append({"role": "user", "content": EMPTY_NUDGE})
            return True
        self.finish(ExitReason.FAILED, "", error="The model returned an empty response.")
        return False

    def _shaped(self, message: Message, text: str) -> bool:
        """Finish with an answer of the requested shape, shown now (it was held back); ask
        once more when it has not the shape; then fail. True means: loop again."""
        assert self.output_format is not None
        answer, problem = check_answer(text, self.output_format)
        if problem is None:
            message["content"] = answer
            self.append(message)
            self.emit(TextDelta, text=answer)
            self.finish(ExitReason.COMPLETED, answer)
            return False
        self.append(message)
        if not self.state.reshaped:
            self.state.reshaped = True
            self.append({"role": "user", "content": repair_note(self.output_format, problem)})
            return True
        self.finish(
            ExitReason.FAILED,
            "",
            error=f"The answer did not have the requested shape ({problem}).",
        )
        return False

    def _text_before_housekeeping(self) -> str:
        """The previous assistant's text, if its only tool calls were housekeeping ones."""
        for message in reversed(self.state.transcript):
            if message["role"] != "assistant":
                continue
            names = {call["function"]["name"] for call in message.get("tool_calls") or ()}
            text = text_of(message.get("content"))
            if names and names <= HOUSEKEEPING_TOOLS and text.strip():
                return text
            return ""
        return ""

    # --- tool calls -------------------------------------------------------------------------

    async def handle_tool_calls(self, response: ModelResponse) -> bool:
        """Validate and run a reply's tool calls. True means: loop again."""
        calls: list[ToolCall] = list(response.message.get("tool_calls") or ())
        verdicts = [
            parse_arguments(call["function"]["arguments"], self._schema_of(call)) for call in calls
        ]
        truncated = [c for c, v in zip(calls, verdicts, strict=True) if v.verdict == "truncated"]
        if truncated or response.finish_reason == "length":
            name = (truncated or calls)[0]["function"]["name"]
            self.finish(
                ExitReason.TRUNCATED,
                "",
                error=(
                    f"The model's reply was cut off by its output token limit while writing the "
                    f"arguments of '{name}'. Raise max_tokens and try again."
                ),
            )
            return False
        retries_left = self.state.invalid_json_retries < self.agent.config.max_invalid_json_retries
        if retries_left and any(v.verdict == "invalid" for v in verdicts):
            # Ask again without recording the broken reply; it does not cost an iteration.
            self.state.invalid_json_retries += 1
            self.budget.refund()
            self.state.iterations -= 1
            return True
        self.state.invalid_json_retries = 0
        self.append(_normalised_assistant(response.message, calls))
        planned = [
            self._plan(call, verdict.arguments, verdict.error)
            for call, verdict in zip(calls, verdicts, strict=True)
        ]
        unknown = [p.name for p in planned if p.preset_result and p.name not in self._known()]
        client_calls = [call for call in calls if call["function"]["name"] in self.client_tools]
        server_calls = self._within_tool_limit(
            [p for p in planned if p.name not in self.client_tools]
        )
        if server_calls and self.agent.checkpoint is not None:
            # The call request must be on record before the tools act on the world.
            await self.agent.checkpoint()
        results = await self.executor.run_batch(server_calls)
        self._append_results(results)
        waiting = self.executor.take_deferred()
        if waiting:
            self.finish_awaiting_approval(waiting)
            return False
        if client_calls:
            self.emit(ClientToolCallsPending, tool_calls=client_calls)
            self.finish(ExitReason.AWAITING_CLIENT_TOOLS, text_of(response.message.get("content")))
            return False
        self.state.unknown_tool_turns = self.state.unknown_tool_turns + 1 if unknown else 0
        if self.state.unknown_tool_turns >= self.agent.config.max_unknown_tool_turns:
            self.finish(
                ExitReason.FAILED,
                "",
                error=(
                    f"The model called tools that do not exist {self.state.unknown_tool_turns} "
                    f"turns in a row (last: {', '.join(unknown)})."
                ),
            )
            return False
        return True

    def _tool_calls_used_up(self) -> bool:
        limit = self.request.max_tool_calls
        return limit is not None and self.state.tool_calls >= limit

    def _within_tool_limit(self, calls: list[PlannedCall]) -> list[PlannedCall]:
        """Count the calls that will run; answer those beyond ``max_tool_calls`` with an error."""
        limit = self.request.max_tool_calls
        kept: list[PlannedCall] = []
        for call in calls:
            if call.preset_result is None:
                if limit is not None and self.state.tool_calls >= limit:
                    call = dataclasses.replace(
                        call,
                        tool=None,
                        preset_result=TOOL_LIMIT_RESULT.format(limit=limit),
                        preset_outcome=ToolOutcome.LIMIT,
                    )
                else:
                    self.state.tool_calls += 1
            kept.append(call)
        return kept

    def _known(self) -> set[str]:
        return set(self.tools.names) | set(self.client_tools)

    def _schema_of(self, call: ToolCall) -> Mapping[str, Any] | None:
        name = call["function"]["name"]
        tool = self.tools.get(name)
        if tool is not None:
            return tool.parameters
        client = self.client_tools.get(name)
        return client.parameters if client is not None else None

    def _plan(self, call: ToolCall, arguments: dict[str, Any], error: str) -> PlannedCall:
        name = call["function"]["name"]
        tool: Tool | None = self.tools.get(name)
        preset: str | None = None
        outcome = ToolOutcome.ERROR
        if tool is None and name not in self.client_tools:
            preset = f"Tool '{name}' does not exist. Available: {sorted(self._known())}"
            outcome = ToolOutcome.NOT_FOUND
        elif error:
            tool, preset = None, f"Error: {error}"
            outcome = ToolOutcome.INVALID_ARGUMENTS
        return PlannedCall(
            call_id=call["id"],
            name=name,
            arguments=arguments,
            tool=tool,
            preset_result=preset,
            preset_outcome=outcome,
        )

    async def answer_approvals(self, answers: Sequence[ApprovalAnswer]) -> None:
        """Make again the calls an earlier run left awaiting approval, now answered: the
        approved ones run, the others are refused. They are new calls of their own (the
        earlier ones were answered "not run yet"), so the model sees what happened last."""
        calls: list[ToolCall] = [
            {
                "id": f"call_{answer.approval_id}",
                "type": "function",
                "function": {"name": answer.name, "arguments": json.dumps(answer.arguments)},
            }
            for answer in answers
        ]
        self.append({"role": "assistant", "content": None, "tool_calls": calls})
        planned = []
        for call, answer in zip(calls, answers, strict=True):
            self.emit(
                ApprovalResolved,
                approval_id=answer.approval_id,
                call_id=call["id"],
                name=answer.name,
                decision=answer.decision,
            )
            plan = self._plan(call, answer.arguments, "")
            if plan.tool is not None and answer.decision is not ApprovalDecision.APPROVED:
                refusal = refusal_text(answer.name, answer.reason, answer.decision)
                plan = dataclasses.replace(
                    plan, tool=None, preset_result=refusal, preset_outcome=ToolOutcome.DENIED
                )
            planned.append(dataclasses.replace(plan, approved=True))
        if self.agent.checkpoint is not None:
            await self.agent.checkpoint()
        self._append_results(await self.executor.run_batch(self._within_tool_limit(planned)))

    def _append_results(self, results: list[CallResult]) -> None:
        for result in results:
            content = result.message_content  # text, or text and images as parts
            self.append({"role": "tool", "tool_call_id": result.call_id, "content": content})

    # --- endings ----------------------------------------------------------------------------

    async def budget_exhausted(self) -> None:
        """Out of iterations: one tool-less grace call if the model has not yet spoken."""
        if self._last_role() != "tool":
            last = self.state.transcript[-1] if self.state.transcript else None
            text = text_of(last.get("content")) if last and last["role"] == "assistant" else ""
            return self.finish(ExitReason.BUDGET_EXHAUSTED, text, error=self._budget_error())
        outcome = await self.call_model(tools_allowed=False, closing_note=GRACE_REQUEST, grace=True)
        if outcome is None:
            return None
        assert outcome.response is not None
        text = text_of(outcome.response.message.get("content")) or outcome.streamed_text
        if text.strip():
            self.append({"role": "assistant", "content": text})
        return self.finish(ExitReason.BUDGET_EXHAUSTED, text, error=self._budget_error())

    def _budget_error(self) -> str:
        return f"The iteration budget ({self.budget.max_total}) is exhausted."

    def finish_awaiting_approval(self, waiting: Sequence[ApprovalAsk]) -> None:
        """End the run with its question to the user: the calls it waits on, and how to
        answer. The question is said (a text delta) and kept as the run's last message."""
        notice = approval_notice(waiting)
        said = any(
            text_of(m.get("content")).strip()
            for m in self.state.transcript[len(self.request.history) :]
            if m["role"] == "assistant"
        )
        self.emit(TextDelta, text=("\n\n" if said else "") + notice)
        self.append({"role": "assistant", "content": notice})
        self.finish(ExitReason.AWAITING_APPROVAL, notice)

    def finish_interrupted(self, partial_text: str) -> None:
        reason = self.agent.interrupt_reason or "interrupted"
        self.finish(
            ExitReason.INTERRUPTED,
            partial_text,
            partial=bool(partial_text),
            error=f"Interrupted: {reason}",
        )

    def finish(
        self,
        reason: ExitReason,
        text: str,
        *,
        error: str | None = None,
        partial: bool = False,
        refusal: str | None = None,
    ) -> None:
        interrupted = reason is ExitReason.INTERRUPTED
        self.emit(
            RunFinished,
            exit_reason=reason,
            final_text=text,
            partial=partial,
            iterations=self.state.iterations,
            usage=self.state.usage,
            model_calls=self.state.model_calls,
            error=error,
            interrupt_source=(self.agent.interrupt_source or InterruptSource.OTHER)
            if interrupted
            else None,
            session_id=self.session_id,
            transcript_length=len(self.state.transcript),
            calls=list(self.state.calls),
            refusal=refusal,
        )


def _normalised_assistant(message: Message, calls: list[ToolCall]) -> Message:
    """The assistant message as recorded: empty argument strings become ``{}``."""
    out: Message = dict(message)  # type: ignore[assignment]
    out["tool_calls"] = [
        {
            **call,
            "function": {
                **call["function"],
                "arguments": call["function"]["arguments"].strip() or "{}",
            },
        }
        for call in calls
    ]
    return out


def approval_notice(waiting: Sequence[ApprovalAsk]) -> str:
    """The question a run awaiting approval ends with, for a person to read and answer."""
    lines = ["I need your approval before I go on:"]
    for ask in waiting:
        lines.append(f"- `{ask.call.name}`: {_shown(ask.call.arguments)} ({ask.reason})")
    names = ", ".join(dict.fromkeys(f"`{ask.call.name}`" for ask in waiting))
    lines.append(
        f"Reply **approve** to let it run, **approve for this session** to allow {names} "
        "for the rest of this conversation, or **deny**."
    )
    return "\n".join(lines)


def _shown(arguments: dict[str, Any]) -> str:
    """A call's arguments in one readable line: the command or code itself when that is all."""
    values = [v for v in arguments.values() if isinstance(v, str)]
    text = values[0] if len(arguments) == 1 and values else json.dumps(arguments)
    text = " ".join(text.split())
    return f"`{text[:300]}{'…' if len(text) > 300 else ''}`"


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)
