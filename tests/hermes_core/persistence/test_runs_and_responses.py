"""The run records (and their crash recovery) and the stored Responses API objects."""

from __future__ import annotations

import dataclasses
import time

from hermes_core.persistence import ResponseStore, RunRecord, RunStore, Store, StoredResponse
from tests.hermes_core.persistence.conftest import INSTANCE

USAGE = {"input_tokens": 12, "output_tokens": 3}


def _start(runs: RunStore, run_id: str, *, owner: str = "alice", completion: str = "") -> None:
    runs.started(
        run_id=run_id,
        owner=owner,
        endpoint="chat.completions",
        model="hermes-agent",
        session_id="sess_1",
        completion_id=completion,
        created_at=1000.0,
    )


def _finish(runs: RunStore, run_id: str) -> None:
    runs.finished(
        run_id,
        status="completed",
        exit_reason="done",
        iterations=2,
        model_calls=3,
        usage=USAGE,
        error=None,
    )


async def test_a_run_is_found_by_its_id_and_by_its_completion_id(store: Store) -> None:
    _start(store.runs, "run_1", completion="chatcmpl-1")
    by_id = await store.runs.get("alice", "run_1")
    assert by_id == RunRecord(
        id="run_1",
        owner="alice",
        session_id="sess_1",
        endpoint="chat.completions",
        model="hermes-agent",
        completion_id="chatcmpl-1",
        status="running",
        exit_reason=None,
        iterations=0,
        model_calls=0,
        usage={},
        error=None,
        created_at=1000.0,
        ended_at=None,
    )
    assert await store.runs.get("alice", "chatcmpl-1") == by_id


async def test_a_run_is_hidden_from_other_owners(store: Store) -> None:
    _start(store.runs, "run_1", completion="chatcmpl-1")
    assert await store.runs.get("bob", "run_1") is None
    assert await store.runs.get("bob", "chatcmpl-1") is None


async def test_finished_records_how_the_run_ended(store: Store) -> None:
    _start(store.runs, "run_1")
    store.runs.moved("run_1", "sess_2")
    _finish(store.runs, "run_1")
    run = await store.runs.get("alice", "run_1")
    assert run is not None
    assert (run.status, run.exit_reason, run.error) == ("completed", "done", None)
    assert (run.iterations, run.model_calls, run.usage) == (2, 3, USAGE)
    assert (run.session_id, run.completion_id) == ("sess_2", None)
    assert run.ended_at is not None


async def test_recover_interrupts_only_this_instances_live_runs(store: Store) -> None:
    other = RunStore(store.db, instance="instance-b")
    _start(store.runs, "mine_running")
    _start(store.runs, "mine_stopping")
    store.runs.status("mine_stopping", "stopping")
    _start(store.runs, "mine_done")
    _finish(store.runs, "mine_done")
    _start(other, "theirs_running")
    done_before = await store.runs.get("alice", "mine_done")

    recovered = await store.runs.recover()

    assert store.runs.instance == INSTANCE
    assert sorted((run.id, run.status) for run in recovered) == [
        ("mine_running", "running"),
        ("mine_stopping", "stopping"),
    ]
    for run_id in ("mine_running", "mine_stopping"):
        run = await store.runs.get("alice", run_id)
        assert run is not None
        assert (run.status, run.exit_reason) == ("interrupted", "interrupted")
        assert run.error is not None
        assert run.ended_at is not None
    assert await store.runs.get("alice", "mine_done") == done_before
    theirs = await store.runs.get("alice", "theirs_running")
    assert theirs is not None
    assert theirs.status == "running"
    assert await store.runs.recover() == []


# --- responses --------------------------------------------------------------------------------


def _response(
    response_id: str, *, owner: str = "alice", created_at: float = 1000.0
) -> StoredResponse:
    return StoredResponse(
        id=response_id,
        owner=owner,
        session_id="sess_1",
        previous_id=None,
        run_id="run_1",
        status="in_progress",
        request={"model": "hermes-agent", "input": [{"role": "user", "content": "hi"}]},
        body={"id": response_id, "object": "response", "output": []},
        transcript_length=0,
        created_at=created_at,
        updated_at=created_at,
    )


async def test_saving_a_response_again_replaces_it(store: Store) -> None:
    first = _response("resp_1")
    store.responses.save(first)
    assert await store.responses.get("alice", "resp_1") == first

    done = dataclasses.replace(
        first,
        status="completed",
        body={"id": "resp_1", "object": "response", "output": [{"type": "message"}]},
        transcript_length=2,
        updated_at=1005.0,
    )
    store.responses.save(done)
    assert await store.responses.get("alice", "resp_1") == done


async def test_delete_removes_a_response_once(store: Store) -> None:
    store.responses.save(_response("resp_1"))
    assert await store.responses.delete("alice", "resp_1")
    assert await store.responses.get("alice", "resp_1") is None
    assert not await store.responses.delete("alice", "resp_1")


async def test_responses_are_isolated_by_owner(store: Store) -> None:
    store.responses.save(_response("resp_1", owner="alice"))
    assert await store.responses.get("bob", "resp_1") is None
    assert not await store.responses.delete("bob", "resp_1")
    assert await store.responses.get("alice", "resp_1") is not None


async def test_prune_keeps_the_newest_max_count(store: Store) -> None:
    responses = ResponseStore(store.db, max_count=2)
    for index in range(4):
        responses.save(_response(f"resp_{index}", created_at=1000.0 + index))
    assert await responses.prune() == 2
    kept = [await responses.get("alice", f"resp_{index}") is not None for index in range(4)]
    assert kept == [False, False, True, True]


async def test_prune_forgets_responses_older_than_max_age(store: Store) -> None:
    responses = ResponseStore(store.db, max_age_seconds=60)
    now = time.time()
    responses.save(_response("old", created_at=now - 3600))
    responses.save(_response("recent", created_at=now - 5))
    assert await responses.prune() == 1
    assert await responses.get("alice", "old") is None
    assert await responses.get("alice", "recent") is not None


async def test_prune_with_a_max_count_of_zero_keeps_nothing(store: Store) -> None:
    responses = ResponseStore(store.db, max_count=0)
    responses.save(_response("resp_0", created_at=1000.0))
    assert await responses.prune() == 1
    assert await responses.get("alice", "resp_0") is None
