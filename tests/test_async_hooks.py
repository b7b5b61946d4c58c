"""Async instance hooks: an asyncio host's ``async def load`` and ``async def dispose`` run on its
own loop, with the budgets sync hooks have."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from async_support import run_async

from run_supervisor import AsyncSupervisor, InvalidRequest, LoadFailed, SupervisorConfig
from run_supervisor.actors._async_body import AsyncRunContext
from run_supervisor.actors.testing import EventLog, no_leaks

CONFIG = SupervisorConfig(shutdown_at_exit=False, load_budget_ms=300, dispose_budget_ms=300)


class LoopCaches:
    def __init__(self) -> None:
        self.loops: list[tuple[str, asyncio.AbstractEventLoop]] = []

    async def load(self, directory: str, generation: int) -> Any:
        self.loops.append(("load", asyncio.get_running_loop()))
        await asyncio.sleep(0)
        return {"directory": directory, "generation": generation}

    async def dispose(self, directory: str, generation: int, cache: Any) -> None:
        self.loops.append(("dispose", asyncio.get_running_loop()))
        await asyncio.sleep(0)


def test_async_hooks_load_and_dispose_on_the_hosts_loop() -> None:
    caches = LoopCaches()

    async def host() -> tuple[asyncio.AbstractEventLoop, Any]:
        seen: list[Any] = []

        async def turn(ctx: AsyncRunContext) -> None:
            seen.append(await ctx.instance())

        async with AsyncSupervisor.start(CONFIG, hooks=caches, directories=["/w/a"]) as sup:
            await (await sup.start_run(turn, session="s1", directory="/w/a")).wait(timeout=10)
        return asyncio.get_running_loop(), seen

    loop, seen = run_async(host)
    assert seen == [{"directory": "/w/a", "generation": 1}]
    assert [(what, used is loop) for what, used in caches.loops] == [("load", True), ("dispose", True)]


def test_an_async_load_past_its_budget_fails_the_start_as_a_sync_one_does() -> None:
    release = threading.Event()

    class Slow(LoopCaches):
        async def load(self, directory: str, generation: int) -> Any:
            while not release.is_set():  # past the 300 ms budget, on the host's loop
                await asyncio.sleep(0.01)
            return {}

    async def host() -> str:
        try:
            await AsyncSupervisor.start(CONFIG, hooks=Slow(), directories=["/w/a"])
        except LoadFailed as exc:
            return str(exc)
        finally:
            release.set()
        return "started"

    assert "budget" in run_async(host)
    # The hook ran past its budget as host code: the failed start left it running, so its instance
    # thread ends only once the hook returns (after the release). Wait for that, bounded.
    for thread in threading.enumerate():
        if thread.name.startswith("run-supervisor-instance"):
            thread.join(10)
            assert not thread.is_alive(), f"{thread.name} still runs 10 s after its hook was released"


def test_an_async_dispose_past_its_budget_is_reported_overran_as_a_sync_one_is() -> None:
    async def host() -> tuple[str | None, tuple[str, ...]]:
        release = asyncio.Event()

        class Slow(LoopCaches):
            async def dispose(self, directory: str, generation: int, cache: Any) -> None:
                await release.wait()  # past its 300 ms budget, on the host's loop

        sup = await AsyncSupervisor.start(CONFIG, hooks=Slow(), directories=["/w/a"])
        log = EventLog(sup)
        try:
            await sup.close("dispose", mode="maintenance", origin="t", directory="/w/a")
            closed = await log.wait_for_async("instance.closed", directory="/w/a", generation=1, timeout=None)
            outcome = await sup.shutdown(grace_ms=100)  # the hook still runs: named, not waited for
        finally:
            release.set()
        return closed.error, outcome.overran

    error, overran = run_async(host)
    assert error == "the dispose hook overran its 300 ms budget"
    assert overran == ("the dispose hook of /w/a (generation 1)",)


def test_an_instance_whose_hooks_are_async_holds_no_thread_for_them() -> None:
    async def host() -> list[str]:
        async with AsyncSupervisor.start(CONFIG, hooks=LoopCaches(), directories=["/w/a", "/w/b"]) as sup:
            return [thread.name for thread in sup.threads.alive()]

    names = run_async(host)
    assert not [name for name in names if name.startswith("run-supervisor-instance")], names


def test_a_loop_that_ends_before_its_async_hooks_did_leaves_nothing_waiting_for_them() -> None:
    class Deaf(LoopCaches):
        async def load(self, directory: str, generation: int) -> Any:
            await asyncio.Event().wait()  # past its budget, until the loop's end cancels it

    async def host() -> None:
        with pytest.raises(LoadFailed, match="budget"):
            await AsyncSupervisor.start(CONFIG, hooks=Deaf(), directories=["/w/a"])

    # The failed start ordered the instance disposed; the load's task is cancelled as the loop ends,
    # so the dispose hook is due just as the loop closes and must never run: nothing may wait for it.
    with no_leaks(timeout=2.0):
        run_async(host)


def test_a_shutdown_names_an_async_load_still_running_in_overran_as_it_names_a_sync_one() -> None:
    async def host() -> tuple[str, ...]:
        release = asyncio.Event()

        class Slow(LoopCaches):
            async def load(self, directory: str, generation: int) -> Any:
                if directory == "/w/slow":
                    await release.wait()  # past its budget, and past the shutdown's grace
                return {}

        sup = await AsyncSupervisor.start(CONFIG, hooks=Slow(), directories=["/w/a"])
        try:
            with pytest.raises(LoadFailed, match="budget"):
                await sup.load("/w/slow")
            # A grace the other instance's dispose cannot overrun on a loaded machine; the shutdown
            # does not wait for the hung load, so it returns once that dispose is done.
            outcome = await sup.shutdown(grace_ms=5000)
        finally:
            release.set()  # the host's loop lets it end; nothing of ours waits for it
        return outcome.overran

    assert run_async(host) == ("the load hook of /w/slow (generation 1)",)


def test_hooks_half_async_are_refused_naming_the_sync_one() -> None:
    class Half:
        async def load(self, directory: str, generation: int) -> Any:
            return {}

        def dispose(self, directory: str, generation: int, cache: Any) -> None:
            pass

    async def host() -> None:
        await AsyncSupervisor.start(CONFIG, hooks=Half(), directories=["/w/a"])  # type: ignore[arg-type]

    with pytest.raises(InvalidRequest, match="dispose is not"):
        run_async(host)
