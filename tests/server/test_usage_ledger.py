"""The usage ledger (in-process, on a SQLite store): a run's counter (its ``on_call``) adds
each call to its key's, end user's, profile's and provider model's row of the UTC day the call
was counted, as it is counted; a run's ending adds the calls no counter saw (all of a run
started without one), summed per provider model, on the UTC day it ended; no call is added
twice. The run's record keeps its end user and cost; events other than the ending write
nothing."""

from __future__ import annotations

from hermes_core.agent.config import chained
from hermes_core.events import CallRecord, ExitReason, RunFinished, RunStarted, TextDelta
from hermes_core.persistence import Store
from hermes_core.usage import Usage
from server.runs.manager import RunInfo
from server.sessions.journal import SessionJournal
from server.usage.ledger import UsageLedger

ENDED_AT = 1_795_000_000.0  # 2026-11-18 (UTC)


def _call(provider: str, model: str, tokens: int, cost: float) -> CallRecord:
    return CallRecord(
        provider=provider,
        model=model,
        usage=Usage(input_tokens=tokens, cache_read_tokens=tokens // 2, output_tokens=tokens // 10),
        cost_usd=cost,
    )


def _ending(run_id: str, calls: list[CallRecord]) -> RunFinished:
    usage = sum((call.usage for call in calls), Usage())
    return RunFinished(
        run_id=run_id,
        seq=9,
        exit_reason=ExitReason.COMPLETED,
        final_text="done",
        iterations=len(calls),
        usage=usage,
        model_calls=len(calls),
        cost_usd=sum(call.cost_usd for call in calls),
        calls=calls,
    )


async def test_a_run_without_a_counter_adds_its_calls_per_provider_model_as_it_ends(
    store: Store,
) -> None:
    ledger = UsageLedger(store.usage, clock=lambda: ENDED_AT)
    info = RunInfo(id="run_1", owner="alice", endpoint="chat.completions", model="hermes")
    info.end_user = "u1"
    calls = [
        _call("main", "gpt-4o", 100, 0.5),
        _call("main", "gpt-4o", 200, 1.0),
        _call("backup", "claude", 1000, 2.0),
    ]

    ledger.observe(info, TextDelta(run_id="run_1", seq=1, text="hi"))
    ledger.observe(info, _ending("run_1", calls))
    lines = await store.usage.report(
        owner="alice",
        since_day="2026-11-01",
        until_day="2026-11-30",
        group_by=["day", "end_user", "profile", "provider", "model"],
    )

    assert [(line.group, line.calls, line.usage, line.cost_usd) for line in lines] == [
        (
            {
                "day": "2026-11-18",
                "end_user": "u1",
                "profile": "hermes",
                "provider": "backup",
                "model": "claude",
            },
            1,
            Usage(input_tokens=1000, cache_read_tokens=500, output_tokens=100),
            2.0,
        ),
        (
            {
                "day": "2026-11-18",
                "end_user": "u1",
                "profile": "hermes",
                "provider": "main",
                "model": "gpt-4o",
            },
            2,
            Usage(input_tokens=300, cache_read_tokens=150, output_tokens=30),
            1.5,
        ),
    ]


async def test_a_run_of_no_end_user_is_the_keys_own(store: Store) -> None:
    ledger = UsageLedger(store.usage, clock=lambda: ENDED_AT)
    info = RunInfo(id="run_1", owner="bob", endpoint="responses", model="hermes")

    ledger.observe(info, _ending("run_1", [_call("main", "gpt-4o", 100, 0.5)]))
    ledger.observe(info, _ending("run_2", []))  # no model call (refused before one): no row

    (line,) = await store.usage.report(
        owner="bob", since_day="2026-11-18", until_day="2026-11-18", group_by=["end_user"]
    )
    assert (line.group, line.calls) == ({"end_user": ""}, 1)


def test_the_day_is_the_utc_day_of_the_moment() -> None:
    ledger = UsageLedger(None)  # type: ignore[arg-type]

    assert ledger.day(1_795_046_399.0) == "2026-11-18"
    assert ledger.day(1_795_046_400.0) == "2026-11-19"
    assert ledger.day(1_795_046_399.0) == "2026-11-18"


async def test_the_run_record_keeps_its_end_user_and_cost(store: Store) -> None:
    journal = SessionJournal(store)
    info = RunInfo(id="run_1", owner="alice", endpoint="chat.completions", model="hermes")
    info.end_user = "u1"
    started = RunStarted(
        run_id="run_1", seq=0, task_id="t", model="gpt-4o", provider="main", budget=10
    )

    journal(info, started)
    journal(info, _ending("run_1", [_call("main", "gpt-4o", 100, 0.25)]))
    record = await store.runs.get("alice", "run_1")

    assert record is not None
    assert (record.end_user, record.cost_usd) == ("u1", 0.25)


async def _rows(store: Store, owner: str = "alice") -> list[tuple[str, int, int, float]]:
    lines = await store.usage.report(
        owner=owner, since_day="2026-11-01", until_day="2026-11-30", group_by=["day", "model"]
    )
    return [
        (line.group["day"], line.calls, line.usage.input_tokens, line.cost_usd) for line in lines
    ]


async def test_a_counted_call_is_in_the_ledger_before_the_run_ends_on_the_day_it_was_counted(
    store: Store,
) -> None:
    now = [ENDED_AT]
    ledger = UsageLedger(store.usage, clock=lambda: now[0])
    count = ledger.counter("run_1", "alice", "u1", "hermes")

    count(_call("main", "gpt-4o", 100, 0.5))
    now[0] += 86_400
    count(_call("main", "gpt-4o", 200, 1.0))

    assert await _rows(store) == [("2026-11-18", 1, 100, 0.5), ("2026-11-19", 1, 200, 1.0)]


async def test_a_runs_ending_adds_only_the_calls_its_counter_did_not_see(store: Store) -> None:
    ledger = UsageLedger(store.usage, clock=lambda: ENDED_AT)
    info = RunInfo(id="run_1", owner="alice", endpoint="chat.completions", model="hermes")
    count = ledger.counter("run_1", "alice", None, "hermes")
    calls = [_call("main", "gpt-4o", 100, 0.5), _call("main", "gpt-4o", 200, 1.0)]
    count(calls[0])

    ledger.observe(info, _ending("run_1", calls))

    assert await _rows(store) == [("2026-11-18", 2, 300, 1.5)]


async def test_a_run_counted_call_by_call_is_in_the_ledger_once(store: Store) -> None:
    ledger = UsageLedger(store.usage, clock=lambda: ENDED_AT)
    info = RunInfo(id="run_1", owner="alice", endpoint="chat.completions", model="hermes")
    heard: list[CallRecord] = []
    count = chained(ledger.counter("run_1", "alice", None, "hermes"), heard.append)
    assert count is not None
    calls = [_call("main", "gpt-4o", 100, 0.5), _call("backup", "claude", 200, 1.0)]
    for call in calls:
        count(call)

    ledger.observe(info, _ending("run_1", calls))

    assert heard == calls  # the hook it was handed hears of each call too
    lines = await store.usage.report(
        owner="alice", since_day="2026-11-18", until_day="2026-11-18", group_by=["model"]
    )
    assert [(line.group["model"], line.calls, line.usage.input_tokens) for line in lines] == [
        ("claude", 1, 200),
        ("gpt-4o", 1, 100),
    ]
