"""A few threads that run the jobs of several tenants in turn.

A plain thread pool runs jobs in the order they came: a tenant that queues twenty slow jobs
makes every other tenant's job wait behind all twenty. Here each tenant has a queue of its own,
and a free thread takes the next job of the tenant with the fewest jobs running, of those the
one served longest ago: another tenant's job is next as soon as a thread is free, never behind
the whole queue.

The threads are started as jobs come and then live as long as the process: what a job starts
may be tied to its thread (a child process asking the kernel to end it with the thread that
started it, ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_Queued = tuple[Future[Any], Callable[[], Any]]


class FairThreads:
    def __init__(self, threads: int, *, name: str) -> None:
        self.threads = threads
        self.name = name
        self._waiting: dict[str, deque[_Queued]] = {}
        """Each tenant's jobs waiting for a thread."""
        self._running: dict[str, int] = {}
        self._served: dict[str, int] = {}
        """When each tenant with jobs waiting or running was last given a thread."""
        self._turns = 0
        self._condition = threading.Condition()
        self._started = 0

    def submit(self, tenant: str, job: Callable[[], T]) -> Future[T]:
        """``job`` run on one of the threads in ``tenant``'s turn; cancelling the future
        before then means it never runs."""
        future: Future[T] = Future()
        with self._condition:
            self._waiting.setdefault(tenant, deque()).append((future, job))
            if self._started < self.threads:
                self._started += 1
                worker = threading.Thread(
                    target=self._work, name=f"{self.name}-{self._started}", daemon=True
                )
                worker.start()
            self._condition.notify()
        return future

    def waiting(self) -> dict[str, int]:
        """Jobs waiting for a thread, by tenant (for tests and diagnostics)."""
        with self._condition:
            return {tenant: len(jobs) for tenant, jobs in self._waiting.items()}

    def _next(self) -> tuple[str, _Queued]:
        with self._condition:
            while not self._waiting:
                self._condition.wait()
            tenant = min(
                self._waiting, key=lambda t: (self._running.get(t, 0), self._served.get(t, -1))
            )
            jobs = self._waiting[tenant]
            queued = jobs.popleft()
            if not jobs:
                del self._waiting[tenant]
            self._running[tenant] = self._running.get(tenant, 0) + 1
            self._turns += 1
            self._served[tenant] = self._turns
            return tenant, queued

    def _done(self, tenant: str) -> None:
        with self._condition:
            self._running[tenant] -= 1
            if not self._running[tenant]:
                del self._running[tenant]
                if tenant not in self._waiting:  # nothing of it left: its record goes too
                    del self._served[tenant]

    def _work(self) -> None:
        while True:
            tenant, (future, job) = self._next()
            try:
                if not future.set_running_or_notify_cancel():
                    continue  # called off while it waited
                try:
                    result = job()
                except BaseException as error:  # the caller's to see, not this thread's end
                    future.set_exception(error)
                else:
                    future.set_result(result)
            finally:
                self._done(tenant)
