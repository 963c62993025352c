"""``hermes_llm_cost_usd_total``: a run's cost per profile and configured provider, counted once
when the run ends (a sub-agent's calls are in its parent's ending, its own adds nothing), an
upstream's unknown provider name as ``other``."""

from __future__ import annotations

from hermes_core.events import CallRecord, SubagentEvent
from hermes_core.usage import Usage
from server.metrics import Metrics
from server.runs.manager import RunInfo
from tests.server.run_endings import ending_of


def _call(provider: str, cost: float) -> CallRecord:
    return CallRecord(provider=provider, model="x", usage=Usage(input_tokens=10), cost_usd=cost)


def test_a_runs_cost_is_counted_per_profile_and_provider_when_it_ends() -> None:
    metrics = Metrics(runtime_metrics=False)
    info = RunInfo(
        id="run_1",
        owner="alice",
        endpoint="chat.completions",
        model="hermes",
        providers={"a": "model-a", "b": "model-b"},
    )
    child = ending_of("run_child", [_call("a", 0.5)])

    calls = [_call("a", 0.25), _call("a", 0.5), _call("b", 1.0), _call("z", 2.0)]

    metrics.observe(
        info, SubagentEvent(run_id="run_1", seq=3, call_id="c", child_index=0, event=child)
    )
    metrics.observe(info, ending_of("run_1", calls))

    def cost(provider: str) -> float | None:
        labels = {"profile": "hermes", "provider": provider}
        return metrics.registry.get_sample_value("hermes_llm_cost_usd_total", labels)

    assert (cost("a"), cost("b"), cost("other")) == (0.75, 1.0, 2.0)
