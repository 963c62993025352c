"""One model call of a run: compress, build the request, make the call, count what it cost.

Every model call of a run — the loop's, and the grace call at the end of the budget — goes
through :meth:`ModelStep.call`, so what the model sees (the prepared transcript, the offered
tools, the budget note) and what a call is counted as (``StepFinished``, usage, call records)
are decided in one place. The call itself is ``model_call.py``'s (interruptible, in the run's
own task); this module is the run's side of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hermes_core.agent.model_call import CallOutcome, InterruptibleCall
from hermes_core.agent.prepare import CONTINUE_PLACEHOLDER, prepare_messages
from hermes_core.agent.run_state import STEP_BREAK, ActiveRun
from hermes_core.context.compression import estimate_tokens
from hermes_core.context.hooks import CallContext
from hermes_core.events import (
    BudgetWarning,
    CallRecord,
    CompressionPerformed,
    ExitReason,
    ModelCallStarted,
    StepFinished,
)
from hermes_core.providers.base import ModelRequest, ToolSchema
from hermes_core.providers.retry import rate_limited_for
from hermes_core.usage import Usage


class ModelStep:
    """Makes a run's model calls; holds the call in flight so an interrupt can cancel it."""

    def __init__(self, run: ActiveRun) -> None:
        self.run = run
        self.model_call = InterruptibleCall()

    async def call(
        self,
        *,
        tools_allowed: bool,
        closing_note: str | None = None,
        grace: bool = False,
        planning: bool = False,
    ) -> CallOutcome | None:
        """Make one model call; on failure or interrupt, finish the run and return None.

        ``planning``: the planner's call (``planner.py``), whose text is a plan, not the
        answer: it is not shown, no answer format applies, and it is not the run's first step."""
        run = self.run
        if run.state.calls and (overspent := run.overspent()) is not None:
            # Every model call after the first passes here (the loop's, a plan's, the grace
            # call): a run that has spent what it may makes none of them.
            run.finish_overspent(overspent)
            return None
        first_step = run.state.model_calls == run.state.plan_calls
        await self._compress_if_needed()
        note = self._budget_note() if tools_allowed else None
        last = run.state.transcript[-1] if run.state.transcript else None
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
            run.state.transcript,
            system_prompt=run.system_prompt,
            max_tool_result_chars=run.agent.config.max_tool_result_chars,
            tool_result_limits=self._tool_result_limits(),
            last_tool_note=note,
            closing_user_note=closing_note,
        )
        request = run.agent.context.mark_cache(
            ModelRequest(
                messages=messages,
                tools=self._offered_tools() if tools_allowed else (),
                tool_choice=run.request.tool_choice if tools_allowed and first_step else "auto",
                parallel_tool_calls=run.request.parallel_tool_calls if tools_allowed else None,
                max_tokens=run.request.max_tokens or run.agent.config.max_tokens,
                temperature=_first(run.request.temperature, run.agent.config.temperature),
                reasoning_effort=run.request.reasoning_effort or run.agent.config.reasoning_effort,
                output_format=None if planning else run.output_format,
                stream=run.request.stream_model_replies,
            ),
            provider=run.provider,
        )
        run.emit(
            ModelCallStarted,
            iteration=run.state.iterations,
            provider=run.provider.name,
            model=run.provider.model,
            grace=grace,
        )
        outcome = await self.model_call.run(
            run.provider,
            request,
            run.emit,
            is_interrupted=run.agent.interrupt_event.is_set,
            # A structured answer is shown only once it is checked (see text_reply._shaped).
            hold_text=run.output_format is not None or planning,
            lead=STEP_BREAK if run.state.shown_text else "",
        )
        shown = "" if planning else outcome.streamed_text
        if shown and run.output_format is None:
            run.state.shown_text = True
        if outcome.interrupted:
            self._count_stopped_call(request, outcome.streamed_text)
            run.finish_interrupted(shown)
            return None
        if outcome.error is not None:
            # Refused for its rate before anything acted (no answer came, no approved call
            # ran): a refusal the client may simply retry, told as a 429. Once a tool may have
            # acted, the run did work, and a retry (its Idempotency-Key given up) would act twice.
            acted = run.state.model_calls > 0 or bool(run.request.approvals)
            run.finish(
                ExitReason.FAILED,
                shown,
                error=outcome.error.message,
                retry_after=None if acted else rate_limited_for(outcome.error),
            )
            return None
        response = outcome.response
        assert response is not None
        run.state.model_calls += 1
        run.state.plan_calls += planning
        run.state.last_prompt_tokens = response.usage.input_tokens or None
        call = self._priced(response.provider, response.model, response.usage)
        self.run.count(call)
        run.emit(
            StepFinished,
            iteration=run.state.iterations,
            usage=response.usage,
            provider=response.provider,
            model=response.model,
            finish_reason=response.finish_reason,
            cost_usd=call.cost_usd,
        )
        return outcome

    def _count_stopped_call(self, request: ModelRequest, streamed: str) -> None:
        """A call stopped mid-way was paid for, but no upstream said how much: count an
        estimate (the prompt, and the text it streamed), so usage and metrics are not zero."""
        run = self.run
        usage = Usage(
            input_tokens=estimate_tokens(request.messages),
            output_tokens=-(-len(streamed) // 4),
        )
        run.state.model_calls += 1
        call = self._priced(run.provider.name, run.provider.model, usage)
        self.run.count(call)
        run.emit(
            StepFinished,
            iteration=run.state.iterations,
            usage=usage,
            provider=run.provider.name,
            model=run.provider.model,
            finish_reason="interrupted",
            cost_usd=call.cost_usd,
        )

    def _priced(self, provider: str, model: str, usage: Usage) -> CallRecord:
        """The record of a call, with its cost at the agent's prices (0 without prices)."""
        prices = self.run.agent.config.prices
        cost = 0.0 if prices is None else prices.cost(model, usage)
        return CallRecord(provider=provider, model=model, usage=usage, cost_usd=cost)

    async def _compress_if_needed(self) -> None:
        """Let the context hooks compress the transcript, and announce it when they did."""
        run = self.run
        compaction = await run.agent.context.before_call(
            CallContext(
                transcript=run.state.transcript,
                provider=run.provider,
                last_prompt_tokens=run.state.last_prompt_tokens,
                session_id=run.request.session_id or run.task_id,
                between_turns=run.state.model_calls == 0,
            )
        )
        if compaction is None:
            return
        call = compaction.summariser_call
        if call is not None:
            call = self._priced(call.provider, call.model, call.usage)
            self.run.count(call)
        if run.session_id is not None:
            run.session_id = compaction.session_id
        run.emit(
            CompressionPerformed,
            tokens_before=compaction.tokens_before,
            tokens_after=compaction.tokens_after,
            messages_before=compaction.messages_before,
            messages_after=len(run.state.transcript),
            session_id=compaction.session_id,
            parent_session_id=compaction.parent_session_id,
            messages=list(run.state.transcript),
            summarised=compaction.summarised,
            summariser_call=call,
        )

    def _offered_tools(self) -> Sequence[ToolSchema]:
        run = self.run
        if not run.client_tools:
            return run.tools.schemas()  # the same tuple every call, for a provider to keep
        client = list(run.client_tools.values())
        first_step = run.state.model_calls == run.state.plan_calls
        if run.request.tool_choice == "required" and first_step:
            # A client that requires a tool call means one of the tools it declared.
            return client
        return [*run.tools.schemas(), *client]

    def _tool_result_limits(self) -> Mapping[str, int]:
        limits: dict[str, int] = {}
        for message in self.run.state.transcript:
            for call in message.get("tool_calls") or ():
                tool = self.run.tools.get(call["function"]["name"])
                if tool is not None and tool.max_result_chars is not None:
                    limits[call["id"]] = tool.max_result_chars
        return limits

    def _budget_note(self) -> str | None:
        run = self.run
        pressure = run.agent.config.budget_pressure
        used, total = run.budget.used, run.budget.max_total
        tier = pressure.tier(used, total)
        if tier is not None and tier not in run.state.warned:
            run.state.warned.add(tier)
            run.emit(BudgetWarning, tier=tier, used=used, total=total)
        return pressure.note(used, total) if run.last_role() == "tool" else None


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)
