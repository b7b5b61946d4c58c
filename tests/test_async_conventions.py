"""The asyncio facade keeps asyncio's conventions: ``timeout=None`` waits unbounded and
``asyncio.timeout()`` composes; cancelling an awaited ``start_run`` never leaves a started run
without its handle."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from async_support import CONFIG, run_async

from run_supervisor import AsyncSupervisor, Outcome
from run_supervisor.actors._async_body import AsyncRunContext
from run_supervisor.actors.testing import EventLog

SHORT_S = 0.2


@contextmanager
def requests_bounded_to(sup: AsyncSupervisor, seconds: float) -> Iterator[None]:
    """Within the block, a short request timeout: a wait that still fell back on it would end long
    before the run does. Only there: the start and the other calls keep the default bound (a loaded
    machine may take longer than a short one to answer them)."""
    sync = sup.sync
    saved = sync.config
    sync.config = sync._link.config = saved.replace(request_timeout_s=seconds)
    try:
        yield
    finally:
        sync.config = sync._link.config = saved


def gated(release: asyncio.Event) -> Callable[[AsyncRunContext], Coroutine[Any, Any, None]]:
    async def turn(ctx: AsyncRunContext) -> None:
        await release.wait()

    return turn


def test_an_awaited_run_wait_without_a_timeout_outlasts_the_request_timeout() -> None:
    async def host() -> Outcome | None:
        release = asyncio.Event()
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            run = await sup.start_run(gated(release), session="s1", directory="/w/a")
            with requests_bounded_to(sup, SHORT_S):
                waiting = asyncio.create_task(run.wait())
                log = EventLog(sup)
                # Past the request timeout (0.2 s) the wait still waits: a second event loop turn later...
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await asyncio.shield(waiting)
                assert not waiting.done()
                release.set()
                finished = await waiting
                await log.wait_for_async("run.finished", run_id=run.run_id, timeout=None)
                log.close()
            return finished.outcome

    assert run_async(host) is Outcome.COMPLETED


def test_asyncio_timeout_composes_with_run_wait_and_await_idle_and_leaves_the_run_as_it_was() -> None:
    async def host() -> tuple[Outcome | None, bool]:
        release = asyncio.Event()
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            run = await sup.start_run(gated(release), session="s1", directory="/w/a")
            with requests_bounded_to(sup, SHORT_S):
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.3):
                        await run.wait()
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.3):
                        await sup.await_idle("s1")
                idle = asyncio.create_task(sup.await_idle("s1"))  # no timeout: waits as long as it takes
                release.set()
                finished = await run.wait()
                snapshot = await idle
            return finished.outcome, snapshot is not None and snapshot.active is None

    assert run_async(host) == (Outcome.COMPLETED, True)


def test_a_cancelled_start_run_task_still_ends_with_the_handle_of_the_run_it_started() -> None:
    async def host() -> tuple[str, list[str], Outcome | None]:
        release = asyncio.Event()
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            starting = asyncio.create_task(sup.start_run(gated(release), session="s1", directory="/w/a"))
            await asyncio.sleep(0)  # its first step has sent the start
            starting.cancel()
            run = await starting  # as asyncio.wait_for(sup.start_run(...), t) would get it
            session = await sup.session("s1")
            assert session is not None
            active = [session.active] if session.active else []
            release.set()
            return run.run_id, active, (await run.wait()).outcome

    run_id, active, outcome = run_async(host)
    assert active == [run_id] and outcome is Outcome.COMPLETED


def test_a_start_run_cancelled_by_asyncio_timeout_hands_over_its_handle_and_the_timeout_still_fires() -> None:
    async def host() -> tuple[list[str], Outcome | None]:
        release = asyncio.Event()
        got: list[Any] = []
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0):  # expires while the start is awaited
                    got.append(await sup.start_run(gated(release), session="s1", directory="/w/a"))
                    await asyncio.sleep(5)  # the held-back cancellation lands here
            release.set()
            return [run.run_id for run in got], (await got[0].wait()).outcome if got else None

    ids, outcome = run_async(host)
    assert len(ids) == 1 and outcome is Outcome.COMPLETED


def test_a_start_run_cancelled_inside_a_task_group_still_gives_its_handle_and_is_cancelled() -> None:
    async def host() -> tuple[int, bool]:
        release = asyncio.Event()
        got: list[Any] = []
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:

            async def starter() -> None:
                got.append(await sup.start_run(gated(release), session="s1", directory="/w/a"))
                await asyncio.sleep(5)

            task = asyncio.create_task(starter())
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            release.set()
            for run in got:
                await run.wait()
            return len(got), task.cancelled()

    assert run_async(host) == (1, True)


def test_a_cancelled_start_the_supervisor_refused_raises_the_cancellation_and_started_nothing() -> None:
    async def host() -> tuple[bool, str | None, int, int]:
        release = asyncio.Event()
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            first = await sup.start_run(gated(release), session="s1", directory="/w/a")
            starting = asyncio.create_task(
                sup.start_run(gated(release), session="s1", directory="/w/a", queue_policy="reject_if_busy")
            )
            await asyncio.sleep(0)  # its first step has sent the start, which the busy session refuses
            starting.cancel()
            with pytest.raises(asyncio.CancelledError):  # not SessionBusy: the caller gave up first
                await starting
            session = await sup.session("s1")
            assert session is not None and first.run_id == session.active
            release.set()
            await first.wait()
            stats = await sup.statistics()
            return (
                starting.cancelled(),
                session.queued[0] if session.queued else None,
                stats.runs_finished,
                stats.runs_queued,
            )

    assert run_async(host) == (True, None, 1, 0)
