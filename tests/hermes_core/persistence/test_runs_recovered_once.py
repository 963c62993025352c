"""A dead replica's runs are recovered once, however many recoveries race over them: its own
at its restart and another replica's watch of it as dead may run at once, and each run they
both returned would be told of twice (two webhooks, two failed Responses, its interrupted
tool calls answered twice)."""

from __future__ import annotations

import asyncio
from collections import Counter

from hermes_core.persistence import RunStore, Store
from tests.hermes_core.persistence.conftest import INSTANCE

RUNS = 20
ROUNDS = 5


def _start(runs: RunStore, run_id: str) -> None:
    runs.started(
        run_id=run_id,
        owner="alice",
        endpoint="runs",
        model="hermes-agent",
        session_id=None,
        completion_id=None,
        created_at=1000.0,
    )


async def test_two_recoveries_racing_over_a_dead_replicas_runs_recover_each_run_once(
    store: Store, other: Store
) -> None:
    for round_ in range(ROUNDS):
        ids = [f"run_{round_}_{n}" for n in range(RUNS)]
        for run_id in ids:
            _start(store.runs, run_id)
        await store.db.writer.flush()

        restarted, watched = await asyncio.gather(
            store.runs.recover(),  # the replica back under its name
            other.runs.recover(INSTANCE),  # the other's watch, before the lease is back
        )

        told = Counter(run.id for run in [*restarted, *watched])
        assert told == Counter(ids), f"round {round_}: {told - Counter(ids)} twice"
