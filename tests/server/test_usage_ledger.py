"""The ledger observer (in-process, on a SQLite store): a run's ending adds its calls, summed
per provider model, to its key's, end user's and profile's row of the UTC day it ended; the
run's record keeps its end user and cost; events other than the ending write nothing."""

from __future__ import annotations

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


async def test_a_run_adds_its_calls_per_provider_model_to_its_day(store: Store) -> None:
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


def test_the_day_is_the_utc_day_the_run_ended() -> None:
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
