"""Gauges read at scrape time: what the server is in the middle of now, not what it counted.

Alerts need these as levels, and none of them is an event: a provider cooling down, an MCP
server that is down, a run that never ends, a person not answering an approval. Each scrape
reads them from memory — the metrics' own per-run scratch, the cooldowns, the MCP
connections' state — and nothing else: no database, no Redis, no await.

Every family is exposed from the start (with no sample when there is nothing to report), so a
dashboard or a rule never reads a family that is not there yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


@dataclass(frozen=True, slots=True)
class McpServerUp:
    profile: str
    server: str
    up: bool


@dataclass(frozen=True, slots=True)
class LiveState:
    """What the server's configuration is doing now (the HTTP side builds it: the metrics know
    no profiles)."""

    cooling: Mapping[str, bool] = field(default_factory=dict)
    """Every configured provider name → whether it is cooling down now (after a 429)."""
    mcp_servers: Sequence[McpServerUp] = ()
    """Every configured MCP server of every profile."""


@dataclass(frozen=True, slots=True)
class RunsNow:
    """What the run observer knows of the runs in progress."""

    oldest_age_seconds: float
    approvals_pending: int


class LiveCollector(Collector):
    """The scrape-time gauges; registered once, in the metrics' own registry."""

    def __init__(self, runs: Callable[[], RunsNow]) -> None:
        self._runs = runs
        self.state: Callable[[], LiveState] | None = None
        """Set by the app (:meth:`Metrics.watch`); without it the provider and MCP families
        are exposed with no samples."""

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families(RunsNow(0.0, 0), LiveState())

    def collect(self) -> Iterable[GaugeMetricFamily]:
        state = self.state() if self.state is not None else LiveState()
        return self._families(self._runs(), state)

    @staticmethod
    def _families(runs: RunsNow, state: LiveState) -> list[GaugeMetricFamily]:
        oldest = GaugeMetricFamily(
            "hermes_oldest_run_age_seconds",
            "Seconds since the oldest run in progress here started (0 when none): a run that "
            "never ends keeps growing it.",
            value=runs.oldest_age_seconds,
        )
        pending = GaugeMetricFamily(
            "hermes_approvals_pending",
            "Tool calls waiting for a person's approval now.",
            value=runs.approvals_pending,
        )
        cooling = GaugeMetricFamily(
            "hermes_provider_cooling_down",
            "1 while a configured provider is kept out of first place after a rate limit "
            "(429), else 0.",
            labels=["provider"],
        )
        for provider, now in sorted(state.cooling.items()):
            cooling.add_metric([provider], 1.0 if now else 0.0)
        mcp = GaugeMetricFamily(
            "hermes_mcp_server_up",
            "1 while a configured MCP server is connected, else 0 (its tools are missing from "
            "runs meanwhile, and it is being reconnected).",
            labels=["profile", "server"],
        )
        for server in state.mcp_servers:
            mcp.add_metric([server.profile, server.server], 1.0 if server.up else 0.0)
        return [oldest, pending, cooling, mcp]
