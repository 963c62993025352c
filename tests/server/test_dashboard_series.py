"""Every series the Grafana dashboard (deploy/grafana) and the alert rules (deploy/prometheus)
read is one a real server's ``/metrics`` exposes, with the labels and label values they match.

The PromQL is read with a small tokenizer, not a full parser: strings, label matchers,
ranges, grouping clauses (``by (…)``, ``on (…)``…), Grafana variables and numbers are cut
out, identifiers followed by ``(`` are functions, and what remains must be a metric name:
``hermes_*``, ``process_*`` (the process collector in our registry) or ``up`` (Prometheus's
own, not in ``/metrics``). Any other word fails the test, so an expression the tokenizer does
not understand is never silently passed over.

"Exists" means: after the runs below (a streamed run calling a tool, a fallback, a failed
run), the scrape
holds at least one sample of that exact name — ``_bucket`` for a quantile, ``_total`` for a
counter; a family's HELP/TYPE lines alone do not count, because a query over them returns
nothing. Every label a selector matches on is one the samples carry, every literal value it
matches (``exit_reason="failed"``) is one some sample has, and every label it groups by
(``sum by (provider)``) is one some series it reads has.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from hermes_core.providers import ProviderConfig, create_provider
from hermes_core.providers.base import Provider
from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.retry import Cooldowns, RetryPolicy
from hermes_core.tools.mcp.toolset import McpToolset
from hermes_core.tools.registry import ToolContext, ToolRegistry
from server.app import create_app
from server.http.auth import KeyRing
from server.http.threaded import ThreadedServer
from server.profiles import Profile
from server.runs.manager import RunManager
from server.services import Services
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "hermes-server.json"
RULES = ROOT / "deploy" / "prometheus" / "hermes-server-rules.yml"

KEY = "sk-dashboard-0123456789abcdef"
AUTH = {"authorization": f"Bearer {KEY}"}
TARGET_LABELS = frozenset({"job", "instance"})
"""Labels Prometheus adds to every scraped sample: never in /metrics itself."""
NOT_IN_METRICS = frozenset({"up"})
"""Series Prometheus makes itself for each scrape target."""


# --- reading PromQL ---------------------------------------------------------------------------

_STRING = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`'
_IDENT = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SELECTOR = re.compile(rf"({_IDENT})\s*\{{((?:{_STRING}|[^}}\"'`])*)\}}")
_MATCHER = re.compile(rf"({_IDENT})\s*(=~|!~|!=|=)\s*({_STRING})")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "group_left", "group_right", "inf", "nan"}
)
_METRIC = re.compile(r"(?:hermes|process)_[a-z0-9_]+|up")


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str


def series_read(expr: str) -> set[str]:
    """The metric names ``expr`` reads."""
    text = re.sub(_STRING, '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\$\{\w+\}|\$\w+", " ", text)  # Grafana variables
    text = re.sub(r"(?<![\w:])\d+(?:\.\d+)?(?:e[+-]?\d+)?", " ", text)
    names = set()
    for found in re.finditer(rf"({_IDENT})(\s*\()?", text):
        word, call = found.group(1), found.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        assert _METRIC.fullmatch(word), f"not a metric name I know: {word!r} in {expr!r}"
        names.add(word)
    assert names, f"reads no series: {expr!r}"
    return names


def grouping_labels(expr: str) -> set[str]:
    """The labels ``expr`` groups or matches on: ``by (…)``, ``on (…)``, ``group_left (…)``…"""
    return {
        label.strip()
        for clause in _GROUPING.finditer(expr)
        for label in clause.group(0).split("(", 1)[1].rstrip(")").split(",")
        if label.strip()
    }


def selectors(expr: str) -> list[tuple[str, list[Matcher]]]:
    """Each ``name{…}`` in ``expr`` with its matchers (values unquoted)."""
    found = []
    for selector in _SELECTOR.finditer(expr):
        matchers = [
            Matcher(m.group(1), m.group(2), json.loads(m.group(3)))
            for m in _MATCHER.finditer(selector.group(2))
        ]
        found.append((selector.group(1), matchers))
    return found


def test_the_tokenizer_finds_metrics_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, endpoint) (rate(hermes_x_bucket{job=~"$job", '
        'status="200"}[$__rate_interval]))) / on (job) group_left sum(hermes_y_total) * 1e6 '
        "and up == 0 or vector(1) * $price"
    )
    assert series_read(expr) == {"hermes_x_bucket", "hermes_y_total", "up"}
    assert grouping_labels(expr) == {"le", "endpoint", "job"}
    assert selectors(expr)[0] == (
        "hermes_x_bucket",
        [Matcher("job", "=~", "$job"), Matcher("status", "=", "200")],
    )
    with pytest.raises(AssertionError, match="not a metric name"):
        series_read("sum(rate(hermes_x_total[5m])) by (provider) > threshold")


def _panels() -> Iterator[dict[str, Any]]:
    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    yield from walk(json.loads(DASHBOARD.read_text())["panels"])


def test_the_dashboard_reads_its_datasource_variable_and_says_what_each_panel_shows() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"job", "instance"} <= variables.keys()
    ids, cells = set(), set()
    for panel in _panels():
        assert panel["id"] not in ids, panel["title"]
        ids.add(panel["id"])
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))
        if panel["type"] == "row":
            continue
        assert panel["title"], panel
        assert panel["description"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            # Scoped to the chosen job and replicas, like every other panel.
            assert 'job=~"$job", instance=~"$instance"' in target["expr"], target["expr"]


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in _panels() for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            # label_values(selector, label): the selector is PromQL, the label is not.
            found = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["definition"])
            assert found, variable["definition"]
            queries.append(found.group(1))
    return queries


def rule_queries() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


# --- a server that has done a little of everything -----------------------------------------


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        description="Look a word up.",
        parameters={"type": "object", "properties": {"word": {"type": "string"}}},
    )
    async def lookup(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "a fine word"

    @registry.tool(
        description="Delete a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
        needs_approval=lambda arguments: "deletes a file",
    )
    async def delete_file(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "deleted"

    return registry


def _chain(simulator: SimulatorServer, *names: str) -> FallbackChain:
    providers: list[Provider] = [
        create_provider(
            ProviderConfig(
                name=name,
                model=f"sim-{name}",
                api_mode="chat_completions",
                base_url=simulator.base_url + "/v1",
                api_key=SecretStr("upstream-key"),
                timeout=10,
            )
        )
        for name in names
    ]
    retry = RetryPolicy(base_delay=0.01, max_attempts=2, jitter=False)
    return FallbackChain(providers, retry=retry, cooldowns=Cooldowns())


class DownMcpServer(McpToolset):
    """A profile's one MCP server, down: what ``/ready`` and ``/metrics`` read is its status."""

    def __init__(self) -> None:
        super().__init__([])

    def status(self) -> dict[str, str | None]:
        return {"ghost": "connection refused"}


@pytest.fixture
def server(simulator: SimulatorServer) -> Iterator[ThreadedServer]:
    ghost = DownMcpServer()
    profiles = [
        Profile(id="tool-agent", provider=_chain(simulator, "plain"), tools=_tools()),
        Profile(id="fallback-agent", provider=_chain(simulator, "primary", "backup")),
        Profile(id="mcp-agent", provider=_chain(simulator, "mcp"), mcp=ghost),
    ]
    services = Services(profiles=profiles, keyring=KeyRing({KEY: "alice"}), runs=RunManager())
    with ThreadedServer(create_app(services)) as running:
        yield running


@pytest.fixture
async def http(server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=10) as client:
        yield client


async def _drive(simulator: SimulatorServer, http: httpx.AsyncClient) -> None:
    """A streamed run that calls a tool, a run that falls back to another provider, and one
    that fails."""
    lookup = ToolCallSpec(name="lookup", arguments={"word": "gauge"})
    steps = [Step(reply=Reply(tool_calls=[lookup])), Step(reply=Reply(text="A gauge measures."))]
    simulator.state.script("sim-plain", Scenario(steps=steps))
    body = {"model": "tool-agent", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with http.stream("POST", "/v1/chat/completions", headers=AUTH, json=body) as streamed:
        assert streamed.status_code == 200
        assert "A gauge measures." in "".join([line async for line in streamed.aiter_lines()])

    failing = Step(fault=Fault(status=503), repeat=10)
    simulator.state.script("sim-primary", Scenario(steps=[failing]))
    simulator.state.script("sim-backup", Scenario(steps=[Step(reply=Reply(text="Backup."))]))
    body = {"model": "fallback-agent", "messages": [{"role": "user", "content": "hi"}]}
    answer = await http.post("/v1/chat/completions", headers=AUTH, json=body)
    assert answer.status_code == 200, answer.text

    # And a run whose every provider fails: a 502 (the error-ratio alerts match on 5xx).
    simulator.state.script("sim-plain", Scenario(steps=[failing]))
    body = {"model": "tool-agent", "messages": [{"role": "user", "content": "hi"}]}
    answer = await http.post("/v1/chat/completions", headers=AUTH, json=body)
    assert answer.status_code == 502, answer.text


async def test_every_series_the_dashboard_and_rules_read_is_in_metrics(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    await _drive(simulator, http)
    scrape = await http.get("/metrics")
    assert scrape.status_code == 200
    samples: dict[str, list[dict[str, str]]] = defaultdict(list)
    for family in text_string_to_metric_families(scrape.text):
        for sample in family.samples:
            samples[sample.name].append(sample.labels)

    queries = {"dashboard": dashboard_queries(), "rules": rule_queries()}
    missing: list[str] = []
    read: set[str] = set()
    for source, exprs in queries.items():
        for expr in exprs:
            for name in series_read(expr) - NOT_IN_METRICS:
                read.add(name)
                if name not in samples:
                    missing.append(f"{source}: no sample named {name} (in {expr})")
            for name, matchers in selectors(expr):
                if name in NOT_IN_METRICS or name not in samples:
                    continue
                missing.extend(
                    f"{source}: {name}{{{m.label}{m.op}{m.value!r}}} matches nothing"
                    for m in matchers
                    if m.label not in TARGET_LABELS and not _matches(samples[name], m)
                )
            # A label no series it reads has would group everything under "" silently.
            carried = {label for name in series_read(expr) for ls in samples[name] for label in ls}
            missing.extend(
                f"{source}: groups by {label!r}, which none of its series has (in {expr})"
                for label in grouping_labels(expr) - TARGET_LABELS - carried
            )
    assert not missing, "\n".join(missing)
    # Every row of the dashboard reads something: the check above saw all of them.
    assert {
        "hermes_runs_finished_total",
        "hermes_time_to_first_token_seconds_bucket",
        "hermes_llm_fallbacks_total",
        "hermes_provider_cooling_down",
        "hermes_tool_duration_seconds_bucket",
        "hermes_approvals_pending",
        "hermes_mcp_server_up",
        "hermes_oldest_run_age_seconds",
        "process_cpu_seconds_total",
    } <= read


def _matches(labelsets: list[dict[str, str]], matcher: Matcher) -> bool:
    """Some sample has ``matcher.label``, and (unless the value is a Grafana variable or the
    matcher negative) a value it matches."""
    values = [labels[matcher.label] for labels in labelsets if matcher.label in labels]
    if not values:
        return False
    if "$" in matcher.value or matcher.op in ("!=", "!~"):
        return True
    if matcher.op == "=":
        return matcher.value in values
    return any(re.fullmatch(matcher.value, value) for value in values)
