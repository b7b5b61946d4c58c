"""What other threads hand an event loop is never lost without a word: a loop's inbox raises once
the loop is closed (even with a wake-up of it still queued), a drain cut short by a
``KeyboardInterrupt`` keeps the calls it did not run, and the async starts of one loop never wait
for a turn of another loop (which may have stopped turning).

Every wait is bounded; loops are driven by hand or under ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import Future
from typing import Any

import pytest

from run_supervisor import AsyncSupervisor, Outcome, RunSnapshot, Supervisor, SupervisorConfig
from run_supervisor.actors import _calls as calls
from run_supervisor.actors._async_body import AsyncRunContext, RunContext, inbox_of

CONFIG = SupervisorConfig(shutdown_at_exit=False)


def _post_from_another_thread(loop: asyncio.AbstractEventLoop) -> None:
    poster = threading.Thread(target=lambda: inbox_of(loop).post(lambda: None))
    poster.start()
    poster.join(timeout=20)
    assert not poster.is_alive()


def test_a_post_to_a_loop_closed_with_a_wake_up_queued_raises() -> None:
    loop = asyncio.new_event_loop()
    _post_from_another_thread(loop)  # its drain is scheduled and will never run
    loop.close()
    with pytest.raises(RuntimeError):
        inbox_of(loop).post(lambda: None)
    with pytest.raises(RuntimeError):  # and so does every later one
        inbox_of(loop).post(lambda: None)


async def _returns(ctx: AsyncRunContext) -> None:
    return None


def test_an_async_run_pinned_to_a_loop_closed_with_a_wake_up_queued_ends_failed_naming_the_loop() -> None:
    loop = asyncio.new_event_loop()
    _post_from_another_thread(loop)
    loop.close()
    sup = Supervisor.start(CONFIG, directories=["/w/a"])
    try:
        call = calls.start_run(_returns, session="s", directory="/w/a")
        finished: Future[RunSnapshot] = Future()
        sup._link.call(call.request, call.body, finished, loop).result(20)
        snapshot = finished.result(20)
        assert snapshot.outcome is Outcome.FAILED
        assert "event loop" in (snapshot.error or "")
        sup.await_idle("s", timeout=20)
    finally:
        sup.shutdown(grace_ms=2000, reason="test_teardown")


def test_calls_a_keyboard_interrupt_left_unrun_in_a_drain_run_at_the_loop_s_next_turn() -> None:
    loop = asyncio.new_event_loop()
    ran: list[int] = []

    def interrupt() -> None:
        raise KeyboardInterrupt

    try:
        inbox = inbox_of(loop)
        poster = threading.Thread(
            target=lambda: [
                inbox.post(ran.append, 1),
                inbox.post(interrupt),
                inbox.post(ran.append, 2),
                inbox.post(ran.append, 3),
            ]
        )
        poster.start()
        poster.join(timeout=20)
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(asyncio.sleep(5))
        assert ran == [1]
        loop.run_until_complete(asyncio.sleep(0))  # the next turn runs the rest, in order
        assert ran == [1, 2, 3]
    finally:
        loop.close()


def _sync_returns(ctx: RunContext) -> None:
    return None


def test_a_start_on_one_loop_is_not_held_up_by_a_start_queued_on_a_loop_that_stopped() -> None:
    stopped = asyncio.new_event_loop()  # a host loop that queued a start and never turned again
    sup = Supervisor.start(
        SupervisorConfig(shutdown_at_exit=False, request_timeout_s=60), directories=["/w/a"]
    )
    try:
        sup._link.start_later(
            functools.partial(calls.start_run, _sync_returns, session="sa", directory="/w/a"), stopped
        )

        async def on_another_loop() -> str:
            async with asyncio.timeout(30):  # without its own turn, it waited for request_timeout_s
                run = await AsyncSupervisor(sup).start_run(_returns, session="sb", directory="/w/a")
                return (await run.wait(timeout=20)).outcome.value

        assert asyncio.run(on_another_loop()) == Outcome.COMPLETED.value
        sup.await_idle("sb", timeout=20)
    finally:
        sup.shutdown(grace_ms=2000, reason="test_teardown")
        stopped.close()


class _NoticingLoop(asyncio.SelectorEventLoop):
    """A loop that notes when another thread hands it a coroutine (``run_coroutine_threadsafe``)."""

    def __init__(self) -> None:
        super().__init__()
        self.may_hand = threading.Event()  # set once the loop has stopped turning
        self.handed = threading.Event()

    def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> Any:
        handing = "run_coroutine_threadsafe" in getattr(callback, "__qualname__", "")
        if handing:
            assert self.may_hand.wait(20)
        handle = super().call_soon_threadsafe(callback, *args, context=context)
        if handing:
            self.handed.set()
        return handle


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_a_start_whose_loop_closes_before_running_its_on_start_gives_up_and_shuts_the_supervisor_down() -> (
    None
):
    called: list[object] = []
    loop = _NoticingLoop()
    before = set(threading.enumerate())

    async def host() -> AsyncSupervisor:
        return await AsyncSupervisor.start(CONFIG, on_start=called.append)

    task = loop.create_task(host())
    loop.run_until_complete(asyncio.sleep(0))  # the start's thread is under way; the loop stops turning
    loop.may_hand.set()
    assert loop.handed.wait(20)  # the on_start is handed to the loop, which will never run it
    loop.close()
    starting = [t for t in set(threading.enumerate()) - before if t.name == "run-supervisor-starting"]
    assert starting
    for thread in starting:
        thread.join(timeout=20)  # without slices it waited for good, its supervisor left running
        assert not thread.is_alive()
    assert called == []
    task._log_destroy_pending = False  # type: ignore[attr-defined]  # its loop is closed: it never ends
