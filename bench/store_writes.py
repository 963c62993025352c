"""What saving a run costs: the store writes of one-call runs, group-committed like the server's.

Replays the writes the session journal queues for an unnamed one-call run (session, the
client's message, the run's row, the answer, the token counters, the run's ending) for many
runs, ``--batch`` runs per commit, and reports the process's CPU per run.

    .venv/bin/python -m bench.store_writes [--runs 5000] [--batch 16] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from hermes_core.persistence import Store, StoredMessage, sqlite_url
from hermes_core.persistence.sessions import new_session_id
from hermes_core.usage import Usage

ANSWER = "The quick brown fox jumps over the lazy dog again and again. " * 2


def _one_run(store: Store, index: int) -> None:
    session_id = new_session_id()
    run_id = f"run_{index:012d}"
    store.sessions.create(
        session_id=session_id,
        owner="bench",
        profile="hermes-agent",
        system_prompt="You are a helpful agent.",
        name=session_id,
        title="Say something.",
    )
    store.sessions.add_messages(
        session_id, 0, [StoredMessage({"role": "user", "content": "Say something."}, "client")]
    )
    store.runs.started(
        run_id=run_id,
        owner="bench",
        endpoint="chat.completions",
        model="hermes-agent",
        session_id=session_id,
        completion_id=f"chatcmpl-{index}",
        created_at=time.time(),
    )
    store.sessions.add_messages(
        session_id, 1, [StoredMessage({"role": "assistant", "content": ANSWER}, "agent")]
    )
    usage = Usage(input_tokens=12, output_tokens=30)
    store.sessions.add_usage(session_id, usage)
    store.runs.finished(
        run_id,
        status="completed",
        exit_reason="completed",
        iterations=1,
        model_calls=1,
        usage={"input_tokens": 12, "output_tokens": 30},
        error=None,
    )


async def _measure(url: str, runs: int, batch: int) -> float:
    store = await Store.open(url)
    try:
        started = time.process_time()
        for index in range(runs):
            _one_run(store, index)
            if (index + 1) % batch == 0:
                await store.db.writer.flush()
        await store.db.writer.flush()
        return (time.process_time() - started) / runs
    finally:
        await store.db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    url = args.database_url or sqlite_url(Path(tempfile.mkdtemp()) / "hermes.db")
    per_run = asyncio.run(_measure(url, args.runs, args.batch))
    print(f"{args.runs} runs, {args.batch} per commit: {per_run * 1e6:.0f} µs CPU per run")


if __name__ == "__main__":
    main()
