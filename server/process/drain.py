"""Graceful shutdown: on SIGTERM, finish the runs in progress before letting uvicorn stop.

Orchestrators send SIGTERM, wait, then SIGKILL. Stopping at once would cut every run; so the
first SIGTERM only starts a drain: ``/ready`` turns 503 (load balancers stop sending), new runs
are refused with 503 ``server_draining``, and the runs in progress go on for up to
``server.drain_seconds``. What is still running then is interrupted and recorded as stopped by
the shutdown, and the signal is handed to uvicorn, which closes the connections and exits. A
second SIGTERM skips the wait: the runs still going are interrupted at once, and the signal
handed on once they have ended (for at most a few seconds), so that the streams uvicorn then
closes carry their interrupted ending rather than stopping mid-answer. A third does not wait.

The handler wraps the one uvicorn installed, from the serving process's main thread (an app
served in a thread, as in some tests, has no signals to wrap and exits as before).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from types import FrameType

from server.services import Services

log = logging.getLogger("hermes.drain")


def install_drain(services: Services, seconds: float) -> None:
    """Wrap the process's SIGTERM handler with a drain of up to ``seconds``."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous):
        return  # nobody stops this process on SIGTERM by a handler: nothing to wrap
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []  # held, so that the drain is not collected
    cutting: list[int] = []  # the second signal, once received

    def exit_now(sig: int, frame: FrameType | None) -> None:
        previous(sig, frame)

    async def cut_then_exit(sig: int, frame: FrameType | None) -> None:
        log.warning("second SIGTERM: interrupting %d run(s) now", services.runs.live_runs())
        await services.runs.shutdown()  # each ends (its stream too) before connections close
        exit_now(sig, frame)

    async def drain_then_exit(sig: int, frame: FrameType | None) -> None:
        log.warning(
            "SIGTERM: draining %d run(s) for up to %g s", services.runs.live_runs(), seconds
        )
        cut = await services.runs.drain(seconds)
        if cut:
            log.warning("drain over: %d run(s) interrupted by the shutdown", cut)
        exit_now(sig, frame)

    def on_sigterm(sig: int, frame: FrameType | None) -> None:
        if cutting:  # a third signal: not even for the runs' endings
            exit_now(sig, frame)
            return
        if services.runs.draining:  # the second signal: no more waiting
            cutting.append(sig)

            def cut() -> None:
                tasks.append(loop.create_task(cut_then_exit(sig, frame), name="hermes-cut"))

            loop.call_soon_threadsafe(cut)
            return
        services.runs.draining = True  # /ready and new runs answer 503 from now on

        def start() -> None:
            tasks.append(loop.create_task(drain_then_exit(sig, frame), name="hermes-drain"))

        loop.call_soon_threadsafe(start)  # which also wakes a loop waiting for I/O

    signal.signal(signal.SIGTERM, on_sigterm)
