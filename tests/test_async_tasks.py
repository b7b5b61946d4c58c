"""An async run is a task, and only a task: its actor lives on the host's loop (or on the one loop
thread the supervisor owns when the host has none), it costs no OS thread, and starting it never
blocks the loop.

Each test drives its own loop under ``asyncio.timeout``; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from async_support import CONFIG, run_async

from run_supervisor import AsyncSupervisor, Outcome, Supervisor
from run_supervisor.actors._async_body import AsyncRunContext


def test_a_hundred_open_async_runs_add_no_os_thread() -> None:
    async def host() -> tuple[int, int, list[Outcome]]:
        release = asyncio.Event()
        running = 0
        all_running = asyncio.Event()

        async def turn(ctx: AsyncRunContext) -> None:
            nonlocal running
            running += 1
            if running == 100:
                all_running.set()
            await release.wait()

        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            # One short run first: whatever the supervisor starts once (its own threads) is counted
            # in the baseline, not in the 100.
            first = await sup.start_run(turn, session="warm", directory="/w/a")
            before = threading.active_count()
            runs = [await sup.start_run(turn, session=f"s{i}", directory="/w/a") for i in range(100)]
            await asyncio.wait_for(all_running.wait(), 20)
            during = threading.active_count()
            release.set()
            finished = [await run.wait(timeout=20) for run in [first, *runs]]
            return before, during, [snapshot.outcome for snapshot in finished]

    before, during, outcomes = run_async(host, bound=60)
    assert outcomes == [Outcome.COMPLETED] * 101
    assert during - before <= 0, f"100 open async runs added {during - before} OS threads"


def test_an_async_start_runs_no_thread_on_the_loop_and_no_body_off_it() -> None:
    started_on: list[str] = []
    original = threading.Thread.start

    def spy(self: threading.Thread) -> None:
        started_on.append(threading.current_thread().name)
        original(self)

    async def host() -> list[bool]:
        loop_thread = threading.current_thread()
        seen: list[bool] = []

        async def turn(ctx: AsyncRunContext) -> None:
            seen.append(threading.current_thread() is loop_thread)

        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            await (await sup.start_run(turn, session="warm", directory="/w/a")).wait(timeout=10)
            threading.Thread.start = spy  # type: ignore[method-assign]
            try:
                runs = [await sup.start_run(turn, session=f"s{i}", directory="/w/a") for i in range(20)]
                for run in runs:
                    await run.wait(timeout=10)
            finally:
                threading.Thread.start = original  # type: ignore[method-assign]
        return seen

    seen = run_async(host, bound=60)
    assert seen == [True] * 21
    assert started_on == [], f"threads were started from {started_on}"


def test_the_loop_stays_prompt_while_two_hundred_async_runs_start() -> None:
    async def host() -> tuple[float, list[Outcome]]:
        worst = 0.0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal worst
            while not stop.is_set():
                before = time.monotonic()
                await asyncio.sleep(0.005)
                worst = max(worst, time.monotonic() - before - 0.005)

        async def turn(ctx: AsyncRunContext) -> None:
            for _ in range(5):
                ctx.heartbeat()
                await asyncio.sleep(0.01)

        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            tick = asyncio.create_task(ticker())
            runs = await asyncio.gather(
                *(sup.start_run(turn, session=f"s{i}", directory="/w/a") for i in range(200))
            )
            finished = [await run.wait(timeout=30) for run in runs]
            stop.set()
            await tick
        return worst, [snapshot.outcome for snapshot in finished]

    worst, outcomes = run_async(host, bound=60)
    assert outcomes == [Outcome.COMPLETED] * 200
    # Generous for a loaded 2-core machine; the figure itself is scripts/bench.py's.
    assert worst < 1.0, f"the loop was {worst:.3f} s late"


def test_async_bodies_given_to_the_sync_facade_share_one_loop_thread_and_no_other() -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    async def turn(ctx: AsyncRunContext) -> None:
        started.release()
        while not release.is_set():
            await asyncio.sleep(0.005)

    with Supervisor.start(CONFIG, directories=["/w/a"]) as sup:
        first = sup.start_run(turn, session="warm", directory="/w/a")
        assert started.acquire(timeout=10)
        before = threading.active_count()
        runs = [sup.start_run(turn, session=f"s{i}", directory="/w/a") for i in range(50)]
        for _ in runs:
            assert started.acquire(timeout=10)
        during = threading.active_count()
        release.set()
        assert [run.wait(timeout=20).outcome for run in [first, *runs]] == [Outcome.COMPLETED] * 51
    assert during - before <= 0


class _Caches:
    def load(self, directory: str, generation: int) -> Any:
        return {"directory": directory, "generation": generation}

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        pass


def test_an_async_bodys_instance_is_awaited_without_a_thread() -> None:
    started_on: list[str] = []
    original = threading.Thread.start

    def spy(self: threading.Thread) -> None:
        started_on.append(self.name)
        original(self)

    async def host() -> list[Any]:
        got: list[Any] = []

        async def turn(ctx: AsyncRunContext) -> None:
            got.append(await ctx.instance())

        async with AsyncSupervisor.start(CONFIG, hooks=_Caches(), directories=["/w/a"]) as sup:
            await (await sup.start_run(turn, session="warm", directory="/w/a")).wait(timeout=10)
            threading.Thread.start = spy  # type: ignore[method-assign]
            try:
                for i in range(5):
                    await (await sup.start_run(turn, session=f"s{i}", directory="/w/a")).wait(timeout=10)
            finally:
                threading.Thread.start = original  # type: ignore[method-assign]
        return got

    got = run_async(host, bound=60)
    assert got == [{"directory": "/w/a", "generation": 1}] * 6
    assert started_on == [], f"threads were started: {started_on}"


def test_shutdown_hands_the_host_the_task_of_an_async_body_it_abandoned() -> None:
    async def host() -> tuple[tuple[str, ...], list[str], bool, bool]:
        release = asyncio.Event()
        running = asyncio.Event()

        async def deaf(ctx: AsyncRunContext) -> None:
            running.set()
            while not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    pass  # ignores its interrupt, keeps going

        sup = await AsyncSupervisor.start(CONFIG, directories=["/w/a"])
        await sup.start_run(deaf, session="s1", directory="/w/a", run_id="deaf")
        assert sup.abandoned_tasks() == ()
        await running.wait()
        outcome = await sup.shutdown(grace_ms=100)
        tasks = sup.abandoned_tasks()
        names = [task.get_name() for task in tasks]
        still = all(not task.done() for task in tasks)
        release.set()  # the host settles it: here it lets it end
        await asyncio.gather(*tasks)
        return outcome.abandoned_runs, names, still, all(task.done() for task in tasks)

    abandoned, names, still_running, ended = run_async(host, bound=60)
    assert abandoned == ("deaf",)
    assert names == ["run-supervisor-run-deaf"] and still_running and ended
