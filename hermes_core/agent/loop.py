"""One run of the agent loop, as explicit steps over explicit state.

Each iteration: check for an interrupt, take an iteration from the budget (or make the grace
call), build the model's view of the transcript, make the interruptible model call, then either
finish on text or validate and execute the tool calls and go round again. Every exit goes
through :meth:`ActiveRun.finish <hermes_core.agent.run_state.ActiveRun.finish>`, which states
the honest exit reason.

This module is only the order of the steps; each step is a module of its own:

- ``run_state.py`` — the run's state, what it needs of its agent, ``append`` and ``finish``;
- ``model_step.py`` — one model call: compression, the request, the call, its cost;
- ``tool_calls.py`` — a reply's tool calls: validation, planning, running, their endings;
- ``text_reply.py`` — a reply without tool calls: the ways a run ends on text;
- ``limits.py`` — the grace call at the end of the budget, and ``max_tool_calls``;
- ``planner.py`` — a profile's planner: a plan before the first step, a new one after failures;
- ``tool_messages.py`` — the recorded assistant reply and the approval question.
"""

from __future__ import annotations

from hermes_core.agent.budget import IterationBudget
from hermes_core.agent.config import AgentRequest
from hermes_core.agent.emitter import Emitter
from hermes_core.agent.limits import TOOL_LIMIT_REQUEST, budget_exhausted, tool_calls_used_up
from hermes_core.agent.model_step import ModelStep
from hermes_core.agent.planner import Planner
from hermes_core.agent.run_state import ActiveRun, LoopOwner
from hermes_core.agent.run_tools import RunTools
from hermes_core.agent.text_reply import handle_text
from hermes_core.agent.tool_calls import ToolCallStep
from hermes_core.messages import Message, text_of
from hermes_core.providers.base import ModelResponse, Provider


class RunDriver:
    """Drives one run: the loop over a model step, then its tool calls or its text reply."""

    def __init__(
        self,
        agent: LoopOwner,
        request: AgentRequest,
        *,
        provider: Provider,
        emitter: Emitter,
        task_id: str,
        budget: IterationBudget,
        tools: RunTools,
        system_prompt: str,
    ) -> None:
        self.run = ActiveRun(
            agent,
            request,
            provider=provider,
            emitter=emitter,
            task_id=task_id,
            budget=budget,
            tools=tools,
            system_prompt=system_prompt,
        )
        self.model = ModelStep(self.run)
        self.model_call = self.model.model_call
        """The model call in flight, for the agent to cancel on an interrupt."""
        self.tool_calls = ToolCallStep(self.run)
        self.planner = Planner(self.run, self.model) if agent.config.planner else None
        """None without a planner: then the loop does nothing for it at all."""
        self.tool_calls.planner = self.planner
        self.finish = self.run.finish
        """The run's one exit (the agent ends a run its loop failed with it)."""

    async def drive(self) -> None:
        run = self.run
        if not await self._begin():
            return
        planner = self.planner
        while True:
            if run.agent.interrupt_event.is_set():
                return run.finish_interrupted("")
            run.apply_steering()
            if not run.budget.consume():
                return await budget_exhausted(run, self.model)
            run.state.iterations += 1
            limited = tool_calls_used_up(run)
            outcome = await self.model.call(
                tools_allowed=run.request.offer_tools and not limited,
                closing_note=TOOL_LIMIT_REQUEST if limited else None,
            )
            if outcome is None:
                return
            response = outcome.response
            assert response is not None
            if response.message.get("tool_calls"):
                if not await self.tool_calls.handle(response):
                    return
                if planner is not None and not await planner.after_tools():
                    return
                continue
            if self._steered_after(response):
                continue
            if not handle_text(run, response, outcome.streamed_text):
                return

    def _steered_after(self, response: ModelResponse) -> bool:
        """A plain text reply while steered messages wait: keep it as the model's word so far
        and go round again, so the next call answers them too (the turn's answer is then the
        one to both). Not a reply that would end the run any other way (cut off, filtered, a
        refusal, a structured answer still to check)."""
        run = self.run
        if not run.agent.steering.waiting() or run.output_format is not None:
            return False
        text = text_of(response.message.get("content"))
        if not text.strip() or response.finish_reason != "stop":
            return False
        message: Message = dict(response.message)  # type: ignore[assignment]
        run.append(message)
        return True

    async def _begin(self) -> bool:
        """What the run starts from: the new message, answered approvals, a plan. False: the
        run has already finished (the plan's call failed)."""
        run = self.run
        new = run.request.new_message()
        if new is not None:
            run.append(new)
        if run.request.recalled:  # kept in the transcript: later turns' prefix stays put
            run.append({"role": "system", "content": run.request.recalled})
        if run.request.approvals:
            await self.tool_calls.answer_approvals(run.request.approvals)
        planner = self.planner
        return planner is None or not planner.wanted() or await planner.plan()
