"""Every ``hermes_*`` metric in a registry of its own, and the run-event observer that feeds it.

``observe`` runs on the hot path of every token, so per-run scratch state lives in one dict
keyed by run id (dropped on ``RunFinished``) and a ``TextDelta`` after a run's first costs one
dict lookup. How the less obvious numbers are derived:

- upstream calls: ``StepFinished`` is a success; each ``RetryScheduled`` and each
  ``FallbackActivated`` is one failed attempt; a run that ends between ``ModelCallStarted``
  and its ``StepFinished`` lost that call (``error``, or ``cancelled`` when interrupted); a
  compression's summariser call is a success of its own;
- grace calls: ``ModelCallStarted.grace``; answered or empty by the run's answer, an answer
  that is the agent's notice (``RunFinished.notice``) being none;
- sub-agent events count for model calls, tokens, tools and compressions; their runs, budget
  warnings and text are part of the parent's run.
- cost: each call's as it is made (``StepFinished.cost_usd``, a summariser's
  ``CompressionPerformed.summariser_call``, a sub-agent's calls through its own events), so a
  long run's spend shows while it goes on; the run's ending adds nothing.

Everything comes from the events and the run's :class:`RunInfo`; nothing is parsed from text.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, assert_never

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from hermes_core.errors import ErrorKind
from hermes_core.events import (
    AgentEvent,
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    BudgetWarning,
    ClientToolCallsPending,
    CompressionPerformed,
    ExitReason,
    FallbackActivated,
    ImagePartial,
    InterruptSource,
    MessageAdded,
    ModelCallStarted,
    PlanMade,
    ReasoningDelta,
    RetryScheduled,
    RunFinished,
    RunStarted,
    SourcesFound,
    Steered,
    StepFinished,
    SubagentEvent,
    TextDelta,
    ToolCallGenerating,
    ToolFinished,
    ToolOutcome,
    ToolProgress,
    ToolStarted,
)
from hermes_core.usage import Usage
from server.metrics.live import LiveCollector, LiveState, RunsNow
from server.runs.manager import RunInfo

OTHER = "other"
CONTENT_FILTER = "content_filter"
"""The ``exit_reason`` of a finished run the upstream's content filter stopped."""
ENDPOINTS = frozenset({"chat_completions", "responses", "runs", "models"})
_ERROR_KINDS = frozenset(kind.value for kind in ErrorKind)

REQUEST_BUCKETS = (*(0.1 * 2**i for i in range(13)), 900.0, 1800.0)  # 0.1 … 409.6, 900, 1800
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
ITERATION_BUCKETS = tuple(float(2**i) for i in range(10))  # 1 … 512
RATIO_BUCKETS = tuple(i / 10 for i in range(1, 11))  # 0.1 … 1.0
TOOL_BUCKETS = (*(0.01 * 2**i for i in range(14)), 300.0)  # 0.01 … 81.92, 300


def run_endpoint(endpoint: str) -> str:
    """The label of a run's endpoint (``chat.completions`` → ``chat_completions``)."""
    label = endpoint.replace(".", "_")
    return label if label in ENDPOINTS else OTHER


@dataclass(slots=True)
class _RunScratch:
    """What a run's metrics need to remember between its events."""

    endpoint: str
    models: Mapping[str, str]
    """Configured provider name → model: the only label values we let through."""
    provider: str
    """The provider serving the run now (changes on a fallback)."""
    budget: int = 1
    """The run's iteration budget."""
    started: float | None = None
    """Monotonic time of RunStarted; None for runs we did not see start (or sub-agents)."""
    first_token: bool = False
    calling: bool = False
    """A model call is in flight: ModelCallStarted without its StepFinished yet."""
    grace: bool = False
    """The budget ran out and the grace call was made."""
    approvals_pending: int = 0
    """Approvals asked for and not answered yet (they end with the run at the latest)."""

    def labels(self, provider: str) -> tuple[str, str]:
        """Bounded ``(provider, model)`` of a call served by ``provider``: the configured model,
        not the one the upstream reported (that one is unbounded)."""
        model = self.models.get(provider)
        return (provider, model) if model is not None else (OTHER, OTHER)


Metric = TypeVar("Metric", Counter, Gauge, Histogram)


class Labelled(Generic[Metric]):
    """A metric with its children looked up once per label values.

    prometheus_client validates the values and takes a lock on every ``labels()`` call; ours
    are bounded (see ``_RunScratch.labels``) and no child is ever removed, so each child is
    looked up once and kept. The metric itself is left as the library made it.
    """

    __slots__ = ("_children", "metric")

    def __init__(self, metric: Metric) -> None:
        self.metric: Metric = metric
        self._children: dict[tuple[str, ...], Metric] = {}

    def labels(self, *values: str) -> Metric:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


@dataclass(frozen=True, slots=True)
class _CallChildren:
    """The series one successful model call of a (provider, model) pair adds to, looked up
    once per pair rather than seven times per call."""

    success: Counter
    input_tokens: Counter
    output_tokens: Counter
    cache_read_tokens: Counter
    cache_write_tokens: Counter
    reasoning_tokens: Counter
    cache_hit: Counter
    cache_write_only: Counter
    cache_miss: Counter


class Metrics:
    """Every ``hermes_*`` metric, in a registry of its own."""

    def __init__(
        self, *, registry: CollectorRegistry | None = None, runtime_metrics: bool = True
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        if runtime_metrics:  # process_*, python_*: what the global registry would have had
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self._runs: dict[str, _RunScratch] = {}
        self._calls: dict[tuple[str, str], _CallChildren] = {}

        r = self.registry

        def counter(name: str, doc: str, labels: str) -> Labelled[Counter]:
            return Labelled(Counter(name, doc, labels.split(), registry=r))

        def histogram(
            name: str, doc: str, labels: str, buckets: Sequence[float]
        ) -> Labelled[Histogram]:
            return Labelled(Histogram(name, doc, labels.split(), buckets=buckets, registry=r))

        llm = "provider model"
        self.config_version = Labelled(
            Gauge(
                "hermes_config_version_info",
                "The configuration live now (1) by the hash of its file; earlier ones 0.",
                ["version"],
                registry=r,
            )
        )
        self.config_reloads = counter(
            "hermes_config_reloads_total", "Configuration reloads.", "result"
        )
        self.requests = counter("hermes_requests_total", "HTTP requests.", "endpoint status")
        self.request_duration = histogram(
            "hermes_request_duration_seconds",
            "HTTP request duration, to the last byte of the response.",
            "endpoint status",
            REQUEST_BUCKETS,
        )
        self.time_to_first_token = histogram(
            "hermes_time_to_first_token_seconds",
            "From the start of a streamed run to its first answer text.",
            "endpoint",
            TTFT_BUCKETS,
        )
        self.runs_active = Labelled(
            Gauge("hermes_runs_active", "Runs in progress.", ["endpoint"], registry=r)
        )
        self.runs_finished = counter(
            "hermes_runs_finished_total", "Finished runs.", "endpoint exit_reason"
        )
        self.run_iterations = histogram(
            "hermes_run_iterations", "Budgeted model calls per run.", "endpoint", ITERATION_BUCKETS
        )
        self.interrupts = counter("hermes_interrupts_total", "Interrupted runs.", "endpoint source")
        self.budget_used = histogram(
            "hermes_run_budget_used_ratio", "Iteration budget used.", "endpoint", RATIO_BUCKETS
        )
        self.budget_warnings = counter("hermes_budget_warnings_total", "Budget warnings.", "tier")
        self.budget_exhausted = counter(
            "hermes_budget_exhausted_total", "Runs that ran out of iterations.", "endpoint"
        )
        self.grace_calls = counter(
            "hermes_budget_grace_calls_total", "Final calls after the budget ran out.", "outcome"
        )
        self.llm_requests = counter(
            "hermes_llm_requests_total", "Upstream model calls.", f"{llm} outcome"
        )
        self.llm_retries = counter("hermes_llm_retries_total", "Retries.", "provider reason")
        self.llm_fallbacks = counter(
            "hermes_llm_fallbacks_total",
            "Switches to the next provider of a fallback chain.",
            "from_provider to_provider reason",
        )
        self.input_tokens = counter(
            "hermes_llm_input_tokens_total", "Prompt tokens, cache included.", llm
        )
        self.output_tokens = counter(
            "hermes_llm_output_tokens_total", "Output tokens, reasoning included.", llm
        )
        self.cache_read_tokens = counter(
            "hermes_llm_cache_read_input_tokens_total", "Prompt tokens read from cache.", llm
        )
        self.cache_write_tokens = counter(
            "hermes_llm_cache_write_input_tokens_total", "Prompt tokens written to cache.", llm
        )
        self.reasoning_tokens = counter(
            "hermes_llm_reasoning_output_tokens_total", "Reasoning tokens.", llm
        )
        self.llm_cost = counter(
            "hermes_llm_cost_usd_total",
            "What model calls cost in US dollars at the configured prices (0 for unpriced "
            "models), by profile and configured provider; sub-agents' calls in their run's.",
            "profile provider",
        )
        self.prompt_cache = counter(
            "hermes_llm_prompt_cache_total",
            "Model calls by prompt-cache result (hit: read > 0; write_only; miss).",
            f"{llm} result",
        )
        self.approvals = counter(
            "hermes_approvals_total",
            "Approvals answered, by outcome (approved, denied, expired).",
            "toolset tool outcome",
        )
        self.tool_calls = counter("hermes_tool_calls_total", "Tool calls.", "toolset tool outcome")
        self.tool_duration = histogram(
            "hermes_tool_duration_seconds",
            "Tool call duration.",
            "toolset tool outcome",
            TOOL_BUCKETS,
        )
        self._toolsets: dict[str, str] = {}
        """Tool name → toolset, for the tools runs may call."""
        self.skill_views = counter(
            "hermes_skill_views_total", "Skills loaded by the agent (skill_view).", "profile"
        )
        self.skills_created = counter(
            "hermes_skills_created_total",
            "Skills created (origin agent: the agent's skill_manage; extracted: drafts proposed "
            "from runs, offered once approved).",
            "profile origin",
        )
        self._skill_creations: set[str] = set()
        """Call ids of skill_manage creations started and not finished yet."""
        self.compressions = counter(
            "hermes_context_compressions_total",
            "Context compressions (summary: a summary was written; prune: old outputs cut).",
            "method",
        )
        self.plans = counter(
            "hermes_plans_total",
            "Plans the planner wrote (replanned: made again after too many tool calls failed).",
            "profile replanned",
        )
        self._live = LiveCollector(self._runs_now)
        r.register(self._live)

    def watch(self, state: Callable[[], LiveState]) -> None:
        """Read ``state`` at each scrape: the providers cooling down, the MCP servers up."""
        self._live.state = state

    def _runs_now(self) -> RunsNow:
        """The runs in progress, at scrape time: one pass over the live runs' scratch."""
        now = time.monotonic()
        oldest = now
        pending = 0
        for scratch in self._runs.values():
            if scratch.started is not None and scratch.started < oldest:
                oldest = scratch.started
            pending += scratch.approvals_pending
        return RunsNow(oldest_age_seconds=now - oldest, approvals_pending=pending)

    def start_at_zero(
        self,
        *,
        models: Mapping[str, str],
        chains: Sequence[Sequence[str]],
        tools: Iterable[str],
    ) -> None:
        """Create now, at zero, the series alerts are written against: ``rate()`` needs a
        series before its first increment, and an absent series cannot be told from a healthy
        one. ``models``: configured provider name → model; ``chains``: each fallback chain's
        provider names in order; ``tools``: the server tools that may ask for approval."""
        for endpoint in ("chat_completions", "responses"):
            self.runs_active.labels(endpoint)
            self.budget_exhausted.labels(endpoint)
            for reason in [*(r.value for r in ExitReason), CONTENT_FILTER]:
                self.runs_finished.labels(endpoint, reason)
            for source in InterruptSource:
                self.interrupts.labels(endpoint, source.value)
        for tier in ("caution", "warning"):
            self.budget_warnings.labels(tier)
        for grace in ("answered", "empty", "interrupted", "error"):
            self.grace_calls.labels(grace)
        for tool in tools:
            for decision in ApprovalDecision:
                self.approvals.labels(self._toolset(tool), tool, decision.value)
        self._upstreams_at_zero(models, chains)

    def _upstreams_at_zero(
        self, models: Mapping[str, str], chains: Sequence[Sequence[str]]
    ) -> None:
        for provider, model in models.items():
            for outcome in ("success", "error", "cancelled"):
                self.llm_requests.labels(provider, model, outcome)
        for chain in chains:
            for given_up, next_one in itertools.pairwise(chain):
                for kind in _ERROR_KINDS:
                    self.llm_fallbacks.labels(given_up, next_one, kind)

    # --- HTTP ---------------------------------------------------------------------------------

    def record_request(self, endpoint: str, status: int, seconds: float) -> None:
        code = str(status)
        self.requests.labels(endpoint, code).inc()
        self.request_duration.labels(endpoint, code).observe(seconds)

    # --- events -------------------------------------------------------------------------------

    def observe(self, info: RunInfo, event: AgentEvent) -> None:
        """The RunManager observer: count what ``event`` says about the run."""
        self._handle(info, event, nested=False)

    # One branch per event kind is exhaustiveness, not complexity: hence the noqa.
    def _handle(self, info: RunInfo, event: AgentEvent, *, nested: bool) -> None:  # noqa: C901
        # The hottest kinds come first: a match tries its cases in order.
        match event:
            case TextDelta():
                scratch = self._runs.get(event.run_id)
                if scratch is not None and not scratch.first_token:
                    self._first_token(scratch)
            case (
                ReasoningDelta()
                | ToolCallGenerating()
                | MessageAdded()
                | ToolProgress()
                | SourcesFound()
                | ImagePartial()
                | ClientToolCallsPending()
                | Steered()
            ):
                pass
            case ApprovalRequested():
                scratch = self._runs.get(event.run_id)
                if scratch is not None:
                    scratch.approvals_pending += 1
            case ApprovalResolved():
                scratch = self._runs.get(event.run_id)
                if scratch is not None and scratch.approvals_pending:
                    scratch.approvals_pending -= 1
                toolset, tool = self._tool_labels(event.name)
                self.approvals.labels(toolset, tool, event.decision.value).inc()
            case ModelCallStarted():
                scratch = self._scratch(info, event.run_id)
                scratch.calling = True
                scratch.grace = scratch.grace or event.grace
            case StepFinished():
                scratch = self._scratch(info, event.run_id)
                if event.finish_reason == "interrupted":
                    # A call cut off mid-way: its estimated tokens count; the run's end counts
                    # it as cancelled (it is still "calling" then).
                    labels = scratch.labels(event.provider)
                    self._tokens(
                        self._calls.get(labels) or self._call_children(labels), event.usage
                    )
                else:
                    scratch.calling = False
                    self._model_call(scratch.labels(event.provider), event.usage)
                if event.cost_usd:
                    self._cost(info, event.provider, event.cost_usd)
            case ToolStarted():
                if event.name == "skill_manage" and event.arguments.get("action") == "create":
                    self._skill_creations.add(event.call_id)
            case ToolFinished():
                self._tool_finished(event)
                if event.name in ("skill_view", "skill_manage"):
                    self._skill_finished(info, event)
            case RetryScheduled():
                labels = self._scratch(info, event.run_id).labels(event.provider)
                self.llm_requests.labels(*labels, "error").inc()
                self.llm_retries.labels(labels[0], _bounded(event.reason, _ERROR_KINDS)).inc()
            case FallbackActivated():
                self._fallback(info, event)
            case CompressionPerformed():
                self.compressions.labels("summary" if event.summarised else "prune").inc()
                call = event.summariser_call
                if call is not None:
                    labels = self._scratch(info, event.run_id).labels(call.provider)
                    self._model_call(labels, call.usage)
                    if call.cost_usd:
                        self._cost(info, call.provider, call.cost_usd)
            case BudgetWarning():
                if not nested:  # a sub-agent shares its parent's budget: one warning is enough
                    self.budget_warnings.labels(event.tier).inc()
            case RunStarted():
                self._run_started(info, event, nested=nested)
            case RunFinished():
                self._run_finished(info, event, nested=nested)
            case PlanMade():
                # The profile is a configured name (a run's model is one): a bounded label.
                self.plans.labels(info.model, "true" if event.replanned else "false").inc()
            case SubagentEvent():
                # Tools and model calls of a sub-agent are real; its run is part of ours.
                self._handle(info, event.event, nested=True)
            case _:
                assert_never(event)

    def _scratch(self, info: RunInfo, run_id: str) -> _RunScratch:
        scratch = self._runs.get(run_id)
        if scratch is None:  # a run already going when we were attached
            scratch = _RunScratch(
                endpoint=run_endpoint(info.endpoint),
                models=info.providers,
                provider=next(iter(info.providers), OTHER),
                first_token=True,
            )
            self._runs[run_id] = scratch
        return scratch

    def _first_token(self, scratch: _RunScratch) -> None:
        scratch.first_token = True
        if scratch.started is not None:
            elapsed = time.monotonic() - scratch.started
            self.time_to_first_token.labels(scratch.endpoint).observe(elapsed)

    def _run_started(self, info: RunInfo, event: RunStarted, *, nested: bool) -> None:
        endpoint = run_endpoint(info.endpoint)
        scratch = _RunScratch(
            endpoint=endpoint,
            models=info.providers,
            provider=event.provider,
            budget=max(1, event.budget),
            # A sub-agent's text is not what the client waits for, and a reply fetched in one
            # piece has no first token apart from its last.
            first_token=nested or not event.streamed,
            started=None if nested else time.monotonic(),
        )
        self._runs[event.run_id] = scratch
        if not nested:
            self.runs_active.labels(endpoint).inc()

    def _model_call(self, labels: tuple[str, str], usage: Usage) -> None:
        """A model call that answered, with what it cost."""
        children = self._calls.get(labels) or self._call_children(labels)
        children.success.inc()
        self._tokens(children, usage)
        if usage.cache_read_tokens:
            children.cache_hit.inc()
        elif usage.cache_write_tokens:
            children.cache_write_only.inc()
        else:
            children.cache_miss.inc()

    def _tokens(self, children: _CallChildren, usage: Usage) -> None:
        # An increment takes a lock; adding nothing is skipped (the series exist already).
        if usage.input_tokens:
            children.input_tokens.inc(usage.input_tokens)
        if usage.output_tokens:
            children.output_tokens.inc(usage.output_tokens)
        if usage.reasoning_tokens:
            children.reasoning_tokens.inc(usage.reasoning_tokens)
        if usage.cache_read_tokens:
            children.cache_read_tokens.inc(usage.cache_read_tokens)
        if usage.cache_write_tokens:
            children.cache_write_tokens.inc(usage.cache_write_tokens)

    def _call_children(self, labels: tuple[str, str]) -> _CallChildren:
        children = self._calls[labels] = _CallChildren(
            success=self.llm_requests.labels(*labels, "success"),
            input_tokens=self.input_tokens.labels(*labels),
            output_tokens=self.output_tokens.labels(*labels),
            cache_read_tokens=self.cache_read_tokens.labels(*labels),
            cache_write_tokens=self.cache_write_tokens.labels(*labels),
            reasoning_tokens=self.reasoning_tokens.labels(*labels),
            cache_hit=self.prompt_cache.labels(*labels, "hit"),
            cache_write_only=self.prompt_cache.labels(*labels, "write_only"),
            cache_miss=self.prompt_cache.labels(*labels, "miss"),
        )
        return children

    def name_toolsets(self, toolsets: Mapping[str, str]) -> None:
        """Tool name → toolset for every tool runs may call: the ``toolset`` label of tool
        series (a tool not named here counts under ``other``)."""
        self._toolsets = dict(toolsets)

    def add_toolsets(self, toolsets: Mapping[str, str]) -> None:
        """More tools that name series: a configured MCP server's, once it has listed them."""
        self._toolsets.update(toolsets)

    def _toolset(self, tool: str) -> str:
        return self._toolsets.get(tool, OTHER)

    def _tool_labels(self, name: str) -> tuple[str, str]:
        """``(toolset, tool)`` labels of a call. Only tools the server knows name a series: a
        client's names (a made-up tool, a request's own MCP server's) are unbounded, so they
        count as ``other`` (under ``mcp`` for a request's MCP tools)."""
        if name in self._toolsets:
            return self._toolsets[name], name
        return ("mcp" if "__" in name else OTHER), OTHER

    def _tool_finished(self, event: ToolFinished) -> None:
        labels = (*self._tool_labels(event.name), event.outcome.value)
        self.tool_calls.labels(*labels).inc()
        self.tool_duration.labels(*labels).observe(event.duration_s)

    def _skill_finished(self, info: RunInfo, event: ToolFinished) -> None:
        # The skill tools answer a mistake the model can correct as an "Error: …" result
        # (a successful call as far as the executor knows): those are not views or skills.
        done = event.outcome is ToolOutcome.SUCCESS and not event.result_preview.startswith(
            "Error:"
        )
        if event.name == "skill_view":
            if done:
                self.skill_views.labels(info.model).inc()
        elif event.call_id in self._skill_creations:
            self._skill_creations.discard(event.call_id)
            if done:
                self.skills_created.labels(info.model, "agent").inc()

    def _fallback(self, info: RunInfo, event: FallbackActivated) -> None:
        scratch = self._scratch(info, event.run_id)
        source = scratch.labels(event.from_provider)
        # The provider given up on failed its last attempt: that is one failed call.
        self.llm_requests.labels(*source, "error").inc()
        target = scratch.labels(event.to_provider)[0]
        reason = _bounded(event.reason, _ERROR_KINDS)
        self.llm_fallbacks.labels(source[0], target, reason).inc()
        scratch.provider = event.to_provider

    def _run_finished(self, info: RunInfo, event: RunFinished, *, nested: bool) -> None:
        scratch = self._runs.pop(event.run_id, None)
        interrupted = event.exit_reason is ExitReason.INTERRUPTED
        if scratch is not None and scratch.calling:
            # The run ended inside a model call: it failed (after its retries) or was cut off.
            outcome = "cancelled" if interrupted else "error"
            self.llm_requests.labels(*scratch.labels(scratch.provider), outcome).inc()
        if nested:
            return
        endpoint = scratch.endpoint if scratch is not None else run_endpoint(info.endpoint)
        if scratch is not None and scratch.started is not None:
            self.runs_active.labels(endpoint).dec()
        self.runs_finished.labels(endpoint, _finished_as(event)).inc()
        self.run_iterations.labels(endpoint).observe(event.iterations)
        budget = scratch.budget if scratch is not None else max(1, event.iterations)
        self.budget_used.labels(endpoint).observe(min(1.0, event.iterations / budget))
        if event.exit_reason is ExitReason.BUDGET_EXHAUSTED:
            self.budget_exhausted.labels(endpoint).inc()
        if scratch is not None and scratch.grace:
            self.grace_calls.labels(_grace_outcome(event, still_calling=scratch.calling)).inc()
        if interrupted:
            source = event.interrupt_source or InterruptSource.OTHER
            self.interrupts.labels(endpoint, source.value).inc()

    def _cost(self, info: RunInfo, provider: str, cost_usd: float) -> None:
        """One call's cost, under the run's profile and the call's configured provider (an
        upstream's unknown name as ``other``): over a run's calls, its ``hermes.cost_usd``."""
        bounded = provider if provider in info.providers else OTHER
        self.llm_cost.labels(info.model, bounded).inc(cost_usd)


def _finished_as(event: RunFinished) -> str:
    """A finished run's ``exit_reason`` label: its exit reason, but ``content_filter`` for a run
    the upstream's content filter stopped (``failed`` in the API, as it answered no question).
    Its user asked for what the upstream will not say, which is no fault of the server's or the
    upstream's: the error-ratio alert, which reads ``failed``, must not page for it."""
    return CONTENT_FILTER if event.content_filtered else event.exit_reason.value


def _grace_outcome(event: RunFinished, *, still_calling: bool) -> str:
    if still_calling:  # the grace call itself did not come back
        return "interrupted" if event.exit_reason is ExitReason.INTERRUPTED else "error"
    # "empty": the grace reply had no text (it called tools anyway, or said nothing); the run
    # then ends on the agent's notice, which is no answer of the model's.
    return "answered" if event.final_text.strip() and not event.notice else "empty"


def _bounded(value: str, allowed: frozenset[str]) -> str:
    return value if value in allowed else OTHER
