"""Prompt-cache hits in a long tool loop, measured on the upstream simulator.

Runs one agent turn of ``--iterations`` model calls (all but the last call a tool) against the
simulator's Anthropic Messages endpoint, with :class:`CachingContext` placing the "system and
last 3" breakpoints, and prints each call's input tokens split into cache reads, cache writes
and uncached tokens. The figure that matters is the share of all input tokens after the first
call that were cache reads: the first call can only write. Exits 1 when it is below
``--target`` (80% by default).

The loop runs twice: without skills, and with ``--skills`` directory skills listed in the
system prompt (their names and descriptions) and the model opening one with ``skill_view`` in
its first call. Listing skills must not lower the share: it exits 1 too when the run with
skills reads a smaller share from the cache than the run without.

    .venv/bin/python -m bench.cache_hits [--ttl 1h] [--iterations 20] [--skills 12]

The simulator counts about four characters per token and, like the real API, caches nothing
below ``--min-cacheable-tokens`` (1024, Sonnet/Opus-class models' minimum).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from hermes_core.agent import Agent, AgentConfig, AgentRequest
from hermes_core.context.caching import CachingContext, PromptCacheSettings
from hermes_core.events import RunFinished, StepFinished
from hermes_core.memory_stores import InMemoryMemoryStore
from hermes_core.providers import ProviderConfig, create_provider
from hermes_core.providers.cache_markers import CacheTTL
from hermes_core.skills.format import skill_markdown
from hermes_core.skills.shelf import SkillShelf, load_directory_skills
from hermes_core.tools.registry import ToolContext, ToolRegistry
from hermes_core.usage import Usage
from server.simulator import Reply, Scenario, SimulatorServer, SimulatorState, Step, ToolCallSpec

MODEL = "claude-sonnet-4-5"

# A profile's instructions of the size real agents carry (a couple of thousand characters), so
# that the system prefix alone is a realistic share of every prompt.
INSTRUCTIONS = """\
# Role
You are the on-call assistant for the payments platform. You investigate incidents by reading
service logs, correlating errors across services and proposing the smallest safe remediation.

# How to work
1. Restate the symptom in one sentence before you start, then form a hypothesis.
2. Use `search_logs` to test the hypothesis. Search one service and one time window at a time;
   narrow the window when a search returns too much, widen it when it returns nothing.
3. Keep a running list of findings. Each finding names the service, the time, the log line
   that supports it and how confident you are (low / medium / high).
4. Prefer evidence over intuition. If two findings contradict each other, search again rather
   than guessing which one is right.
5. Stop searching when you can explain the symptom end to end, or after you have checked every
   service in the request path and found nothing new.

# Services in the request path
- edge-gateway: TLS termination, rate limiting, request ids (header x-request-id).
- checkout-api: validates the basket, creates the payment intent, calls ledger and psp-adapter.
- ledger: double-entry bookkeeping; every intent is reserved, then settled or released.
- psp-adapter: talks to the external payment service providers; retries with backoff.
- notifier: sends receipts; failures here never block a payment.

# Safety rules
- Never suggest replaying payments, editing ledger entries by hand or disabling rate limits.
- Remediations are limited to: restarting a pod, rolling back the last deploy of one service,
  raising a timeout by at most 2x, or paging the owning team.
- Quote log lines exactly; redact card numbers and e-mail addresses if you see any.

# Answer format
End with a short report: **Symptom**, **Root cause** (with confidence), **Evidence** (at most
five bullet points with timestamps), **Remediation** and **Follow-ups**. Use plain Markdown,
no tables. Keep it under 250 words; the reader is an engineer who was just paged.
"""

TASK = (
    "Checkout latency p99 jumped from 800 ms to 9 s at 02:10 UTC and some customers saw "
    "'payment pending' for minutes. Find out why."
)

SERVICES = ("edge-gateway", "checkout-api", "ledger", "psp-adapter", "notifier")
LEVELS = ("INFO", "WARN", "ERROR")


def search_logs(arguments: dict[str, Any], ctx: ToolContext) -> str:
    """A few hundred characters of log lines that differ per call, like a real log search."""
    service = str(arguments.get("service", "checkout-api"))
    window = str(arguments.get("window", "02:00-02:30"))
    query = str(arguments.get("query", ""))
    seed = hashlib.sha256(f"{service}|{window}|{query}".encode()).digest()
    hour, first_minute = _window_start(window)
    lines = [f"{seed[31] % 40 + 6} matches for {query!r} in {service} ({window} UTC), first 6:"]
    for i in range(6):
        level = LEVELS[seed[i] % len(LEVELS)]
        minute = (first_minute + seed[i] % 10) % 60
        second, latency = seed[i + 6] % 60, 200 + seed[i + 12] * 35
        request_id = seed[i : i + 4].hex()
        lines.append(
            f"{hour:02d}:{minute:02d}:{second:02d} {level} {service} req={request_id} "
            f"latency_ms={latency} msg={query or 'request finished'}"
        )
    return "\n".join(lines)


def _window_start(window: str) -> tuple[int, int]:
    try:
        hour, minute = window.split("-")[0].split(":")
        return int(hour) % 24, int(minute) % 60
    except ValueError:  # a model may pass anything; a log search does not crash on it
        return 2, 0


def tools() -> ToolRegistry:
    registry = ToolRegistry()
    registry.tool(
        name="search_logs",
        description="Search one service's logs in a UTC time window; returns matching lines.",
        parameters={
            "type": "object",
            "properties": {
                "service": {"type": "string", "enum": list(SERVICES)},
                "window": {"type": "string", "description": "HH:MM-HH:MM, UTC"},
                "query": {"type": "string", "description": "Words or a quoted phrase"},
            },
            "required": ["service", "window"],
        },
    )(search_logs)
    return registry


SKILL_TOPICS = (
    "incident-triage",
    "ledger-reconciliation",
    "psp-outage-playbook",
    "deploy-rollback",
    "rate-limit-tuning",
    "receipt-resend",
    "latency-budget-review",
    "pod-restart-checklist",
    "timeout-raise-review",
    "postmortem-draft",
    "on-call-handover",
    "log-query-cookbook",
)


def write_skills(root: Path, count: int) -> SkillShelf:
    """``count`` skills of the size real ones have (a description of a sentence or two, a
    body of steps), as a profile's directory skills."""
    for number in range(count):
        name = SKILL_TOPICS[number % len(SKILL_TOPICS)] + ("" if number < 12 else f"-{number}")
        description = (
            f"How to handle {name.replace('-', ' ')} on the payments platform: the checks, the "
            "order to run them in and what to report. Use when the incident touches it."
        )
        steps = "\n".join(f"{i}. Check step {i} of {name} and note the result." for i in range(8))
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(skill_markdown(name, description, steps))
    return SkillShelf(directory=load_directory_skills([root]).skills)


def scenario(iterations: int, *, views_skill: bool = False) -> Scenario:
    """``iterations - 1`` replies that each search the logs (the first opening a skill too
    when ``views_skill``), then the final report."""
    queries = ("timeout", "retry", "reserve", "latency_ms>5000", "circuit open", "settled")
    steps = []
    if views_skill:
        call = ToolCallSpec(name="skill_view", arguments={"name": SKILL_TOPICS[0]})
        steps.append(Step(reply=Reply(text="Loading the triage skill first.", tool_calls=[call])))
    for i in range(iterations - 1 - len(steps)):
        arguments = {
            "service": SERVICES[i % len(SERVICES)],
            "window": f"02:{(i * 2) % 50:02d}-02:{(i * 2) % 50 + 10:02d}",
            "query": queries[i % len(queries)],
        }
        note = f"Checking {arguments['service']} for {arguments['query']!r} next."
        call = ToolCallSpec(name="search_logs", arguments=arguments)
        steps.append(Step(reply=Reply(text=note, tool_calls=[call])))
    report = (
        "**Symptom**: p99 checkout latency 9 s from 02:10 UTC.\n**Root cause**: psp-adapter "
        "retries against a slow provider held ledger reservations open (medium confidence)."
    )
    steps.append(Step(reply=Reply(text=report)))
    return Scenario(steps=steps)


@dataclass(frozen=True, slots=True)
class Measurement:
    calls: list[Usage]
    exit_reason: str

    @property
    def read_share_after_first(self) -> float:
        later = self.calls[1:]
        total = sum(usage.input_tokens for usage in later)
        return sum(usage.cache_read_tokens for usage in later) / total if total else 0.0


async def measure(
    *, iterations: int, ttl: CacheTTL, min_cacheable_tokens: int, skills: int = 0
) -> Measurement:
    state = SimulatorState(min_cacheable_tokens=min_cacheable_tokens)
    state.script(MODEL, scenario(iterations, views_skill=skills > 0))
    with tempfile.TemporaryDirectory(prefix="hermes-bench-skills-") as root:
        shelf = write_skills(Path(root), skills) if skills else None
        return await _measure(state, ttl=ttl, shelf=shelf)


async def _measure(
    state: SimulatorState, *, ttl: CacheTTL, shelf: SkillShelf | None
) -> Measurement:
    with SimulatorServer(state) as simulator:
        provider = create_provider(
            ProviderConfig(
                name="simulator",
                model=MODEL,
                api_mode="anthropic_messages",
                base_url=simulator.base_url,
                api_key=SecretStr("bench"),
                timeout=30.0,
            )
        )
        memory = InMemoryMemoryStore()
        await memory.save(
            "default",
            "memory",
            [
                "psp-adapter owns retries; ledger reservations expire after 15 minutes.",
                "Deploys happen at :05 past the hour; check the deploy log first.",
            ],
        )
        agent = Agent(
            provider,
            tools=tools(),
            config=AgentConfig(instructions=INSTRUCTIONS),
            memory_store=memory,
            context=CachingContext(PromptCacheSettings(ttl=ttl)),
            skills=shelf,
        )
        calls: list[Usage] = []
        exit_reason = "none"
        try:
            async for event in agent.run(AgentRequest(user_message=TASK)):
                if isinstance(event, StepFinished):
                    calls.append(event.usage)
                elif isinstance(event, RunFinished):
                    exit_reason = event.exit_reason
        finally:
            await provider.aclose()
    return Measurement(calls=calls, exit_reason=exit_reason)


def report(measurement: Measurement, *, ttl: CacheTTL, target: float, title: str) -> str:
    header = f"{'call':>4}  {'input':>7}  {'read':>7}  {'write':>7}  {'uncached':>8}  {'hit':>5}"
    rows = [title, header]
    for number, usage in enumerate(measurement.calls, start=1):
        uncached = usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens
        hit = usage.cache_read_tokens / usage.input_tokens if usage.input_tokens else 0.0
        rows.append(
            f"{number:>4}  {usage.input_tokens:>7}  {usage.cache_read_tokens:>7}  "
            f"{usage.cache_write_tokens:>7}  {uncached:>8}  {hit:>5.0%}"
        )
    later = measurement.calls[1:]
    total = Usage()
    for usage in later:
        total = total + usage
    rows += [
        "",
        f"model calls: {len(measurement.calls)} (exit: {measurement.exit_reason}), ttl {ttl}",
        f"after the first call: {total.cache_read_tokens} of {total.input_tokens} input tokens "
        f"were cache reads = {measurement.read_share_after_first:.1%} (target {target:.0%})",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_hits", description=__doc__)
    parser.add_argument("--ttl", choices=("5m", "1h"), default="5m")
    parser.add_argument("--iterations", type=int, default=20, help="model calls (>= 2)")
    parser.add_argument("--min-cacheable-tokens", type=int, default=1024)
    parser.add_argument("--target", type=float, default=0.80, help="minimum read share")
    parser.add_argument("--skills", type=int, default=12, help="skills listed in the 2nd run")
    args = parser.parse_args(argv)
    if args.iterations < 3:
        parser.error("--iterations must be at least 3")
    ttl: CacheTTL = "1h" if args.ttl == "1h" else "5m"
    shares: list[float] = []
    for skills in (0, args.skills):
        measurement = asyncio.run(
            measure(
                iterations=args.iterations,
                ttl=ttl,
                min_cacheable_tokens=args.min_cacheable_tokens,
                skills=skills,
            )
        )
        title = f"== {skills} skills listed" + (" (the model opens one first)" if skills else "")
        print(report(measurement, ttl=ttl, target=args.target, title=title), end="\n\n")
        done = measurement.exit_reason == "completed" and len(measurement.calls) == args.iterations
        if not done:
            print("the scripted tool loop did not run to the end", file=sys.stderr)
            return 1
        shares.append(measurement.read_share_after_first)
    without, with_skills = shares
    print(f"read share: {without:.1%} without skills, {with_skills:.1%} with {args.skills} listed")
    if with_skills < without:
        print("listing skills lowered the prompt-cache hit share", file=sys.stderr)
        return 1
    return 0 if min(shares) >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
