"""Jobs of several tenants take their turns: a tenant's long queue never stands in front of
another tenant's job. Real threads; the tests wait on events, never on time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, wait

import pytest

from hermes_core.tools.fair_threads import FairThreads

DEADLINE = 30.0


def _job(
    done: list[str],
    name: str,
    gate: threading.Event | None = None,
    started: threading.Event | None = None,
) -> Callable[[], str]:
    def run() -> str:
        if started is not None:
            started.set()
        if gate is not None:
            assert gate.wait(DEADLINE)
        done.append(name)
        return name

    return run


def test_another_tenants_job_runs_before_the_rest_of_a_long_queue() -> None:
    threads = FairThreads(1, name="test-fair")
    done: list[str] = []
    gate = threading.Event()
    first = threads.submit("alice", _job(done, "alice-0", gate))
    later = [threads.submit("alice", _job(done, f"alice-{n}")) for n in (1, 2, 3)]
    bob = threads.submit("bob", _job(done, "bob-0"))
    gate.set()
    wait([first, bob, *later], timeout=DEADLINE)
    assert done == ["alice-0", "bob-0", "alice-1", "alice-2", "alice-3"]


def test_a_free_thread_goes_to_the_tenant_with_fewest_jobs_running() -> None:
    threads = FairThreads(2, name="test-fair")
    done: list[str] = []
    gates = [threading.Event(), threading.Event()]
    started = [threading.Event(), threading.Event()]
    running = [
        threads.submit("alice", _job(done, f"alice-{n}", gates[n], started[n])) for n in (0, 1)
    ]
    assert all(event.wait(DEADLINE) for event in started)  # both threads are alice's
    waiting = threads.submit("alice", _job(done, "alice-2"))
    bob = threads.submit("bob", _job(done, "bob-0"))
    gates[0].set()  # one of alice's two threads is free: bob has none running, so it is his
    bob.result(timeout=DEADLINE)
    gates[1].set()
    wait([*running, waiting], timeout=DEADLINE)
    assert done.index("bob-0") < done.index("alice-2")  # in order of coming, alice's was first


def test_a_job_called_off_while_it_waited_never_runs() -> None:
    threads = FairThreads(1, name="test-fair")
    done: list[str] = []
    gate = threading.Event()
    first = threads.submit("alice", _job(done, "alice-0", gate))
    called_off: Future[str] = threads.submit("alice", _job(done, "alice-1"))
    assert called_off.cancel()
    after = threads.submit("alice", _job(done, "alice-2"))
    gate.set()
    wait([first, after], timeout=DEADLINE)
    assert done == ["alice-0", "alice-2"]
    assert threads.waiting() == {}


def test_a_job_that_fails_tells_its_caller_and_the_thread_goes_on() -> None:
    threads = FairThreads(1, name="test-fair")

    def fails() -> None:
        raise ValueError("the page was unreadable")

    with pytest.raises(ValueError, match="unreadable"):
        threads.submit("alice", fails).result(timeout=DEADLINE)
    assert threads.submit("alice", lambda: 42).result(timeout=DEADLINE) == 42
