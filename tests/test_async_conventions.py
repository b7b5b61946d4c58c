"""The asyncio facade keeps asyncio's conventions: ``timeout=None`` waits unbounded and
``asyncio.timeout()`` composes; cancelling an awaited ``start_run`` never leaves a started run
without its handle."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
from async_support import CONFIG, run_async

from run_supervisor import AsyncSupervisor, CloseOutcome, Outcome
from run_supervisor.actors._async_body import AsyncRunContext
from run_supervisor.actors.testing import EventLog

SHORT_S = 0.2
T = TypeVar("T")


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


async def _outlasts_the_request_timeout(waiting: asyncio.Task[T], release: asyncio.Event) -> T:
    """``waiting`` (a wait without a timeout, inside ``requests_bounded_to``) is still waiting
    past the request timeout, then ends once ``release`` lets what it waits for happen."""
    # The fallback bound (0.2 s) would fire before this 0.5 s one: both are timers of this loop.
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await asyncio.shield(waiting)
    assert not waiting.done()
    release.set()
    return await waiting


@pytest.mark.parametrize("wait", ["run.wait", "await_idle"])
def test_an_awaited_wait_without_a_timeout_outlasts_the_request_timeout(wait: str) -> None:
    async def host() -> bool:
        release = asyncio.Event()
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            run = await sup.start_run(gated(release), session="s1", directory="/w/a")
            with requests_bounded_to(sup, SHORT_S):
                waited: Any = run.wait() if wait == "run.wait" else sup.await_idle("s1")
                result = await _outlasts_the_request_timeout(asyncio.create_task(waited), release)
                finished = await run.wait()
            return finished.outcome is Outcome.COMPLETED and result is not None

    assert run_async(host)


def test_an_awaited_wait_closed_without_a_timeout_outlasts_the_request_timeout() -> None:
    async def host() -> tuple[CloseOutcome, CloseOutcome]:
        release = asyncio.Event()

        async def deaf_until_released(ctx: AsyncRunContext) -> None:
            while not release.is_set():  # the shutdown waits for it: its grace is long
                with contextlib.suppress(asyncio.CancelledError):
                    await release.wait()

        sup = await AsyncSupervisor.start(CONFIG, directories=["/w/a"])
        run = await sup.start_run(deaf_until_released, session="s1", directory="/w/a")
        log = EventLog(sup)
        elsewhere = asyncio.create_task(asyncio.to_thread(sup.sync.shutdown, grace_ms=20_000))
        try:
            with requests_bounded_to(sup, SHORT_S):
                closing = asyncio.create_task(sup.wait_closed())
                await log.wait_for_async("lifecycle.requested", timeout=None)  # another thread's shutdown
                final = await _outlasts_the_request_timeout(closing, release)
        finally:
            release.set()  # whatever failed, the body ends and the shutdown with it
            same = await elsewhere
        assert (await run.wait()).outcome is Outcome.INTERRUPTED
        return final, same

    final, same = run_async(host)
    assert final.completed and final == same and final.abandoned_runs == ()


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
