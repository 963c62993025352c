"""A reply's tool calls: validate their arguments, plan them, run them, record the results.

The tool-call path of the loop, and its endings: a reply cut off mid-arguments, broken JSON
(asked again, free), calls left awaiting a person's approval, calls the client must run, and
a model that keeps calling tools that do not exist. It also makes again the calls an earlier
run left awaiting approval, once they are answered (:meth:`ToolCallStep.answer_approvals`).
Running a batch is the ``ToolExecutor``'s job (``tools/executor.py``); this module decides
what the batch is and what the run does after it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from hermes_core.agent.arguments import parse_arguments
from hermes_core.agent.config import ApprovalAnswer
from hermes_core.agent.limits import within_tool_limit
from hermes_core.agent.planner import Planner
from hermes_core.agent.run_state import ActiveRun
from hermes_core.agent.tool_messages import approval_notice, normalised_assistant
from hermes_core.events import (
    ApprovalDecision,
    ApprovalResolved,
    ClientToolCallsPending,
    ExitReason,
    TextDelta,
    ToolOutcome,
)
from hermes_core.messages import ToolCall, text_of
from hermes_core.providers.base import ModelResponse
from hermes_core.tools.executor import CallResult, PlannedCall, ToolExecutor, refusal_text
from hermes_core.tools.registry import ApprovalAsk, Tool


class ToolCallStep:
    """Handles a run's tool calls; owns the run's :class:`ToolExecutor`."""

    def __init__(self, run: ActiveRun) -> None:
        self.run = run
        self._executor: ToolExecutor | None = None
        self.planner: Planner | None = None
        """The run's planner, which counts the tool results (None: the run has none)."""

    @property
    def executor(self) -> ToolExecutor:
        """Made at the run's first tool call: most runs make none."""
        if self._executor is None:
            run = self.run
            self._executor = ToolExecutor(
                registry=run.tools.catalogue,
                emit=run.emit,
                run_id=run.emitter.run_id,
                task_id=run.task_id,
                interrupted=run.agent.interrupt_event,
                approval_callback=run.agent.approval_callback,
                max_concurrency=run.agent.config.max_tool_concurrency,
                workspace=run.request.workspace,
                skill_folders=run.tools.skill_folders,
            )
        return self._executor

    async def handle(self, response: ModelResponse) -> bool:
        """Validate and run a reply's tool calls. True means: loop again."""
        run = self.run
        calls: list[ToolCall] = list(response.message.get("tool_calls") or ())
        verdicts = [
            parse_arguments(call["function"]["arguments"], self._schema_of(call)) for call in calls
        ]
        truncated = [c for c, v in zip(calls, verdicts, strict=True) if v.verdict == "truncated"]
        if truncated or response.finish_reason == "length":
            name = (truncated or calls)[0]["function"]["name"]
            run.finish(
                ExitReason.TRUNCATED,
                "",
                error=(
                    f"The model's reply was cut off by its output token limit while writing the "
                    f"arguments of '{name}'. Raise max_tokens and try again."
                ),
            )
            return False
        retries_left = run.state.invalid_json_retries < run.agent.config.max_invalid_json_retries
        if retries_left and any(v.verdict == "invalid" for v in verdicts):
            # Ask again without recording the broken reply; it does not cost an iteration.
            run.state.invalid_json_retries += 1
            run.budget.refund()
            run.state.iterations -= 1
            return True
        run.state.invalid_json_retries = 0
        run.append(normalised_assistant(response.message, calls))
        planned = [
            self._plan(call, verdict.arguments, verdict.error)
            for call, verdict in zip(calls, verdicts, strict=True)
        ]
        unknown = [p.name for p in planned if p.preset_result and p.name not in self._known()]
        client_calls = [call for call in calls if call["function"]["name"] in run.client_tools]
        server_calls = within_tool_limit(
            run, [p for p in planned if p.name not in run.client_tools]
        )
        if server_calls and run.agent.checkpoint is not None:
            # The call request must be on record before the tools act on the world.
            await run.agent.checkpoint()
        results = await self.executor.run_batch(server_calls)
        self._append_results(results)
        waiting = self.executor.take_deferred()
        if waiting:
            self._finish_awaiting_approval(waiting)
            return False
        if client_calls:
            run.emit(ClientToolCallsPending, tool_calls=client_calls)
            run.finish(ExitReason.AWAITING_CLIENT_TOOLS, text_of(response.message.get("content")))
            return False
        run.state.unknown_tool_turns = run.state.unknown_tool_turns + 1 if unknown else 0
        if run.state.unknown_tool_turns >= run.agent.config.max_unknown_tool_turns:
            run.finish(
                ExitReason.FAILED,
                "",
                error=(
                    f"The model called tools that do not exist {run.state.unknown_tool_turns} "
                    f"turns in a row (last: {', '.join(unknown)})."
                ),
            )
            return False
        return True

    async def answer_approvals(self, answers: Sequence[ApprovalAnswer]) -> None:
        """Make again the calls an earlier run left awaiting approval, now answered: the
        approved ones run, the others are refused. They are new calls of their own (the
        earlier ones were answered "not run yet"), so the model sees what happened last."""
        run = self.run
        calls: list[ToolCall] = [
            {
                "id": f"call_{answer.approval_id}",
                "type": "function",
                "function": {"name": answer.name, "arguments": json.dumps(answer.arguments)},
            }
            for answer in answers
        ]
        run.append({"role": "assistant", "content": None, "tool_calls": calls})
        planned = []
        for call, answer in zip(calls, answers, strict=True):
            run.emit(
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
        if run.agent.checkpoint is not None:
            await run.agent.checkpoint()
        self._append_results(await self.executor.run_batch(within_tool_limit(run, planned)))

    def _known(self) -> set[str]:
        return set(self.run.tools.names) | set(self.run.client_tools)

    def _schema_of(self, call: ToolCall) -> Mapping[str, Any] | None:
        name = call["function"]["name"]
        tool = self.run.tools.get(name)
        if tool is not None:
            return tool.parameters
        client = self.run.client_tools.get(name)
        return client.parameters if client is not None else None

    def _plan(self, call: ToolCall, arguments: dict[str, Any], error: str) -> PlannedCall:
        name = call["function"]["name"]
        tool: Tool | None = self.run.tools.get(name)
        preset: str | None = None
        outcome = ToolOutcome.ERROR
        if tool is None and name not in self.run.client_tools:
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

    def _append_results(self, results: list[CallResult]) -> None:
        if self.planner is not None:
            self.planner.count(results)
        for result in results:
            content = result.message_content  # text, or text and images as parts
            self.run.append({"role": "tool", "tool_call_id": result.call_id, "content": content})

    def _finish_awaiting_approval(self, waiting: Sequence[ApprovalAsk]) -> None:
        """End the run with its question to the user: the calls it waits on, and how to
        answer. The question is said (a text delta) and kept as the run's last message."""
        run = self.run
        notice = approval_notice(waiting)
        said = any(
            text_of(m.get("content")).strip()
            for m in run.state.transcript[len(run.request.history) :]
            if m["role"] == "assistant"
        )
        run.emit(TextDelta, text=("\n\n" if said else "") + notice)
        run.append({"role": "assistant", "content": notice})
        run.finish(ExitReason.AWAITING_APPROVAL, notice)
