"""Many async starts at once: they are told to the supervisor a batch at a time (the next batch once
the last is answered), and every one still gets its answer, its bound and an atomic cancellation.

Each test drives its own loop with ``asyncio.run`` under ``asyncio.timeout`` (``run_async``), so
every wait is bounded; the autouse fixture fails a test that leaves a thread or an actor behind.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

import pytest
from async_support import CONFIG, run_async

from run_supervisor import (
    AsyncRunHandle,
    AsyncSupervisor,
    InvalidRequest,
    Outcome,
    RunAlreadyExists,
    SupervisorConfig,
    SupervisorTimeout,
)
from run_supervisor.actors._async_body import AsyncRunContext
from run_supervisor.actors._link import START_BATCH

MANY = 5 * START_BATCH + 3  # several batches and a partial one


async def streaming(ctx: AsyncRunContext) -> None:
    for _ in range(5):
        ctx.heartbeat()
        await asyncio.sleep(0)


def test_many_starts_gathered_at_once_each_get_their_run_and_it_completes() -> None:
    async def host() -> list[Outcome]:
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            runs = await asyncio.gather(
                *(sup.start_run(streaming, session=f"s{i}", directory="/w/a") for i in range(MANY))
            )
            assert len({run.run_id for run in runs}) == MANY
            return [(await run.wait(timeout=10)).outcome for run in runs]

    assert run_async(host) == [Outcome.COMPLETED] * MANY


def test_a_refused_start_among_many_raises_its_own_error_and_the_others_go_on() -> None:
    async def host() -> None:
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:

            def start(i: int) -> Coroutine[Any, Any, AsyncRunHandle]:
                if i == 7:  # a run id taken by another start
                    return sup.start_run(streaming, session="s7", directory="/w/a", run_id="r1")
                if i == 11:  # fails its checks
                    return sup.start_run(streaming, session="", directory="/w/a")
                return sup.start_run(streaming, session=f"s{i}", directory="/w/a", run_id=f"r{i}")

            calls = [start(i) for i in range(MANY)]
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert isinstance(results[7], RunAlreadyExists)
            assert isinstance(results[11], InvalidRequest)
            handles = [r for r in results if isinstance(r, AsyncRunHandle)]
            assert len(handles) == MANY - 2
            for run in handles:
                assert (await run.wait(timeout=10)).outcome is Outcome.COMPLETED

    run_async(host)


def test_cancelling_starts_queued_behind_a_batch_leaves_no_start_without_its_handle() -> None:
    async def host() -> None:
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            tasks = [
                asyncio.create_task(
                    sup.start_run(streaming, session=f"s{i}", directory="/w/a", run_id=f"r{i}")
                )
                for i in range(MANY)
            ]
            await asyncio.sleep(0)  # every start is queued: most wait behind the first batch
            for task in tasks[::2]:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for i, result in enumerate(results):
                snapshot = await sup.run(f"r{i}")
                if isinstance(result, asyncio.CancelledError):
                    assert snapshot is None  # refused: nothing of it started
                else:  # taken: the task (the call is its whole coroutine) ends with the handle
                    assert isinstance(result, AsyncRunHandle) and result.run_id == f"r{i}"
                    assert (await result.wait(timeout=10)).outcome is Outcome.COMPLETED
            assert all(isinstance(r, AsyncRunHandle) for r in results[1::2])  # not cancelled: started

    run_async(host)


@pytest.mark.parametrize("given", [True, False], ids=["its-own-timeout", "request-timeout"])
def test_a_start_the_supervisor_does_not_answer_raises_within_its_bound(given: bool) -> None:
    config = SupervisorConfig(shutdown_at_exit=False, request_timeout_s=0.2 if not given else 30.0)
    busy, release = threading.Event(), threading.Event()

    def hold(core: object) -> None:  # runs on the supervisor's thread: nothing else is decided
        busy.set()
        release.wait(10)

    async def host() -> None:
        async with AsyncSupervisor.start(config, directories=["/w/a"]) as sup:
            held = sup._link.query_future(hold)
            try:
                await asyncio.to_thread(busy.wait, 10)
                timeout = {"timeout": 0.2} if given else {}
                results = await asyncio.gather(
                    *(
                        sup.start_run(streaming, session=f"s{i}", directory="/w/a", **timeout)
                        for i in range(3)
                    ),
                    return_exceptions=True,
                )
                assert all(isinstance(r, SupervisorTimeout) for r in results), results
            finally:
                release.set()
            await asyncio.wrap_future(held)
            run = await sup.start_run(streaming, session="after", directory="/w/a")  # it answers again
            assert (await run.wait(timeout=10)).outcome is Outcome.COMPLETED

    run_async(host, bound=20.0)
