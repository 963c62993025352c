"""``hermes_llm_cost_usd_total``: what model calls cost per profile and configured provider,
counted as each call is made (a run's ending, its own or a sub-agent's, adds nothing), an
upstream's unknown provider name as ``other``."""

from __future__ import annotations

from hermes_core.events import (
    AgentEvent,
    CallRecord,
    CompressionPerformed,
    StepFinished,
    SubagentEvent,
)
from hermes_core.usage import Usage
from server.metrics import Metrics
from server.runs.manager import RunInfo
from tests.server.run_endings import ending_of

INFO = RunInfo(
    id="run_1",
    owner="alice",
    endpoint="chat.completions",
    model="hermes",
    providers={"a": "model-a", "b": "model-b"},
)


def _call(provider: str, cost: float) -> CallRecord:
    return CallRecord(provider=provider, model="x", usage=Usage(input_tokens=10), cost_usd=cost)


def _step(run_id: str, seq: int, call: CallRecord) -> StepFinished:
    return StepFinished(
        run_id=run_id,
        seq=seq,
        iteration=seq,
        usage=call.usage,
        provider=call.provider,
        model=call.model,
        finish_reason="stop",
        cost_usd=call.cost_usd,
    )


def _cost(metrics: Metrics, provider: str) -> float | None:
    labels = {"profile": "hermes", "provider": provider}
    return metrics.registry.get_sample_value("hermes_llm_cost_usd_total", labels)


def test_each_calls_cost_is_counted_per_profile_and_provider_as_it_is_made() -> None:
    metrics = Metrics(runtime_metrics=False)
    calls = [_call("a", 0.25), _call("b", 1.0), _call("z", 2.0)]

    for seq, call in enumerate(calls, start=1):
        metrics.observe(INFO, _step("run_1", seq, call))

    assert (_cost(metrics, "a"), _cost(metrics, "b"), _cost(metrics, "other")) == (0.25, 1.0, 2.0)


def test_a_sub_agents_calls_count_once_and_no_ending_adds_to_the_cost() -> None:
    metrics = Metrics(runtime_metrics=False)
    child_call = _call("a", 0.5)
    own = _call("a", 0.25)

    def nested(seq: int, event: AgentEvent) -> SubagentEvent:
        return SubagentEvent(run_id="run_1", seq=seq, call_id="c", child_index=0, event=event)

    metrics.observe(INFO, _step("run_1", 1, own))
    metrics.observe(INFO, nested(2, _step("run_child", 1, child_call)))
    metrics.observe(INFO, nested(3, ending_of("run_child", [child_call])))
    metrics.observe(INFO, ending_of("run_1", [own, child_call]))  # the parent paid for both

    assert _cost(metrics, "a") == 0.75


def test_a_summarisers_call_is_counted_with_the_compression() -> None:
    metrics = Metrics(runtime_metrics=False)

    metrics.observe(
        INFO,
        CompressionPerformed(
            run_id="run_1",
            seq=1,
            tokens_before=9000,
            tokens_after=900,
            messages_before=40,
            messages_after=4,
            session_id=None,
            parent_session_id=None,
            messages=[],
            summarised=True,
            summariser_call=_call("b", 0.125),
        ),
    )

    assert _cost(metrics, "b") == 0.125
