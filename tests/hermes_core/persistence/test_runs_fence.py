"""A run's row fences its late writers: once it is no longer live (another replica declared it
interrupted), what the replica that ran it still writes for it changes nothing, while the
other writes of the same batch land."""

from __future__ import annotations

from hermes_core.persistence import RunStore, Store


def _start(runs: RunStore, run_id: str) -> None:
    runs.started(
        run_id=run_id,
        owner="alice",
        endpoint="chat.completions",
        model="hermes-agent",
        session_id=None,
        completion_id=None,
        created_at=1000.0,
    )


def _complete(runs: RunStore, run_id: str) -> None:
    runs.finished(
        run_id,
        status="completed",
        exit_reason="completed",
        iterations=1,
        model_calls=1,
        usage={"input_tokens": 1, "output_tokens": 1},
        error=None,
    )


async def test_a_run_declared_interrupted_is_not_written_over_by_its_late_writer(
    store: Store,
) -> None:
    _start(store.runs, "run_taken")
    [taken] = await store.runs.recover()  # as another replica does for a lapsed lease
    assert taken.id == "run_taken"
    _start(store.runs, "run_live")
    # One batch: the late writer's status and ending, and another run's ending.
    store.runs.status("run_taken", "stopping")
    _complete(store.runs, "run_taken")
    _complete(store.runs, "run_live")
    await store.db.writer.flush()
    fenced = await store.runs.get("alice", "run_taken")
    assert fenced is not None
    assert (fenced.status, fenced.exit_reason) == ("interrupted", "interrupted")
    live = await store.runs.get("alice", "run_live")
    assert live is not None
    assert (live.status, live.exit_reason) == ("completed", "completed")
