"""The asyncio facade: the same supervisor, semantics and exceptions as the sync one, and a loop
that never waits for it.

Each test drives its own loop with ``asyncio.run`` under ``asyncio.timeout``, so every wait is
bounded; the autouse fixture fails a test that leaves a thread or an actor behind.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from async_support import CONFIG, run_async

from run_supervisor import (
    AsyncRunHandle,
    AsyncSupervisor,
    CloseOutcome,
    CloseResult,
    Gate,
    InvalidRequest,
    LoadFailed,
    NothingPending,
    Outcome,
    RequestOutcome,
    RequestResult,
    RunAlreadyExists,
    RunAlreadyFinished,
    RunContext,
    RunSnapshot,
    Supervisor,
    SupervisorClosed,
    SupervisorError,
    SupervisorTimeout,
    UnknownDirectory,
    UnknownRun,
)
from run_supervisor.actors._async_body import AsyncRunContext
from run_supervisor.actors.testing import EventLog, simulate_crash
from run_supervisor.protocol import CancelRun, Event, InterruptReason, RejectCode


def held(gate: Gate) -> Callable[[RunContext], None]:
    def body(ctx: RunContext) -> None:
        with ctx.step("model"):
            ctx.wait(gate)

    return body


@asynccontextmanager
async def one_held_run(gate: Gate) -> AsyncIterator[tuple[AsyncSupervisor, AsyncRunHandle]]:
    """An async supervisor on /w/a whose one run (session s) holds at ``gate``."""
    async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
        yield sup, await sup.start_run(held(gate), session="s", directory="/w/a")


def wire_type(event: Event) -> str:
    return type(event).__struct_config__.tag  # type: ignore[return-value]


class RecordingHooks:
    def __init__(self) -> None:
        self.disposed: list[tuple[str, int]] = []

    def load(self, directory: str, generation: int) -> Any:
        return {"directory": directory}

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        self.disposed.append((directory, generation))


# --- the facade's semantics -------------------------------------------------------------------


def test_an_async_host_keeps_its_run_through_a_maintenance_close_and_sees_it_in_the_event_stream() -> None:
    gate = Gate("model")

    async def host() -> None:
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            events = sup.events()
            run = await sup.start_run(held(gate), session="s1", directory="/w/a")
            result = await sup.close("dispose_all", mode="maintenance", origin="settings.provider.connect")
            assert result.result is CloseResult.DEFERRED
            assert result.blocking_runs == (run.run_id,)
            gate.open()
            finished = await run.wait(timeout=5)
            assert finished.outcome is Outcome.COMPLETED and finished.reason is None
            seen: list[str] = []
            async for event in events:
                seen.append(wire_type(event))
                if wire_type(event) == "lifecycle.completed":
                    break
            assert seen.index("lifecycle.deferred") < seen.index("run.finished") < len(seen) - 1
            events.close()

    run_async(host)


def test_awaiting_start_gives_a_supervisor_the_host_shuts_down_itself() -> None:
    async def host() -> CloseOutcome:
        sup = await AsyncSupervisor.start(CONFIG, directories=["/w/a"])
        run = await sup.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r1")
        assert (await run.wait(timeout=5)).outcome is Outcome.COMPLETED
        assert (await sup.run("r1")) == await run.snapshot()
        return await sup.shutdown(grace_ms=500)

    outcome = run_async(host)
    assert outcome.result is CloseResult.FORCED and outcome.completed


def test_an_async_start_on_a_journal_recovers_the_runs_a_dead_process_left(tmp_path: Path) -> None:
    journal = tmp_path / "runs.sqlite"
    gate = Gate("never")

    async def host() -> tuple[str, ...]:
        first = await AsyncSupervisor.start(CONFIG, directories=["/w/a"], journal=journal)
        log = EventLog(first)
        await first.start_run(held(gate), session="s1", directory="/w/a", run_id="r1")
        await log.wait_for_async("run.started", run_id="r1", timeout=5)  # seen: so journaled
        simulate_crash(first.sync)
        async with AsyncSupervisor.start(CONFIG, journal=journal, journal_sync="full") as second:
            return tuple(event.run_id for event in second.recovered())

    assert run_async(host) == ("r1",)


def test_a_failing_load_at_an_async_start_raises_load_failed_and_leaves_nothing_running() -> None:
    class BrokenLoad(RecordingHooks):
        def load(self, directory: str, generation: int) -> Any:
            raise RuntimeError("no provider configured")

    async def host() -> None:
        with pytest.raises(LoadFailed, match="no provider configured"):
            await AsyncSupervisor.start(CONFIG, hooks=BrokenLoad(), directories=["/w/a"])

    run_async(host)


def _mistakes(sup: Any) -> list[Callable[[], Any]]:
    """The same five wrong calls on either facade (the async one's give awaitables)."""
    return [
        lambda: sup.cancel("nobody"),
        lambda: sup.cancel("done"),
        lambda: sup.start_run(lambda ctx: None, session="s", directory="/w/a", run_id="done"),
        lambda: sup.answer_form(run_id="done", answer="yes"),
        lambda: sup.close("dispose", mode="maintenance", origin="t", directory="/nowhere"),
    ]


def _rejections_sync(sup: Supervisor) -> list[type[BaseException]]:
    seen: list[type[BaseException]] = []
    sup.start_run(lambda ctx: None, session="s", directory="/w/a", run_id="done").wait(timeout=5)
    for call in _mistakes(sup):
        try:
            call()
        except SupervisorError as exc:
            seen.append(type(exc))
    sup.shutdown(grace_ms=500)
    try:
        sup.cancel("done")
    except SupervisorError as exc:
        seen.append(type(exc))
    return seen


async def _rejections_async(sup: AsyncSupervisor) -> list[type[BaseException]]:
    seen: list[type[BaseException]] = []
    await (await sup.start_run(lambda ctx: None, session="s", directory="/w/a", run_id="done")).wait(5)
    for call in _mistakes(sup):
        try:
            await call()
        except SupervisorError as exc:
            seen.append(type(exc))
    await sup.shutdown(grace_ms=500)
    try:
        await sup.cancel("done")
    except SupervisorError as exc:
        seen.append(type(exc))
    return seen


def test_rejections_raise_the_same_exception_types_sync_or_async() -> None:
    expected = [UnknownRun, RunAlreadyFinished, RunAlreadyExists, RunAlreadyFinished, UnknownDirectory]
    expected.append(SupervisorClosed)
    sync_seen = _rejections_sync(Supervisor.start(CONFIG, directories=["/w/a"]))

    async def host() -> list[type[BaseException]]:
        return await _rejections_async(await AsyncSupervisor.start(CONFIG, directories=["/w/a"]))

    assert sync_seen == expected
    assert run_async(host) == expected


def test_bad_arguments_raise_invalid_request_naming_the_argument_sync_or_async() -> None:
    bad: list[tuple[str, dict[str, Any]]] = [
        ("mode", {"do": "dispose_all", "mode": "maintenace", "origin": "t"}),
        ("do", {"do": "dispose_everything", "mode": "maintenance", "origin": "t"}),
        ("timeout", {"do": "dispose_all", "mode": "maintenance", "origin": "t", "timeout": float("nan")}),
    ]
    with Supervisor.start(CONFIG, directories=["/w/a"]) as sync:
        for argument, kwargs in bad:
            with pytest.raises(InvalidRequest, match=argument):
                sync.close(**kwargs)

    async def host() -> None:
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            for argument, kwargs in bad:
                with pytest.raises(InvalidRequest, match=argument):
                    await sup.close(**kwargs)
            with pytest.raises(InvalidRequest, match="run_id"):
                await sup.cancel("")
            with pytest.raises(InvalidRequest, match="grace_ms"):
                await sup.shutdown(grace_ms=-1)

    run_async(host)


def test_an_answer_with_nothing_pending_raises_nothing_pending_from_the_async_facade() -> None:
    gate = Gate("g")

    async def host() -> None:
        async with one_held_run(gate) as (sup, run):
            with pytest.raises(NothingPending):
                await sup.reply_permission(run_id=run.run_id, approve=True)
            with pytest.raises(NothingPending):
                await sup.dismiss_form(run_id=run.run_id)
            gate.open()
            await run.wait(timeout=5)

    run_async(host)


def test_async_submit_returns_a_rejection_as_a_value_never_raising() -> None:
    async def host() -> tuple[CloseOutcome | RequestOutcome, CloseOutcome | RequestOutcome]:
        async with AsyncSupervisor.start(CONFIG) as sup:
            unknown = await sup.submit(CancelRun(run_id="nobody"))
        closed = await sup.submit(CancelRun(run_id="nobody"))
        return unknown, closed

    unknown, closed = run_async(host)
    assert unknown.result is RequestResult.REJECTED and unknown.code is RejectCode.UNKNOWN_RUN
    assert closed.result is RequestResult.REJECTED and closed.code is RejectCode.SUPERVISOR_CLOSED


def test_a_run_wait_that_runs_out_raises_supervisor_timeout_and_the_supervisor_keeps_serving() -> None:
    gate = Gate("g")

    async def host() -> None:
        async with one_held_run(gate) as (sup, run):
            with pytest.raises(SupervisorTimeout):
                await run.wait(timeout=0.05)
            waiting = asyncio.ensure_future(run.wait(timeout=5))
            await asyncio.sleep(0)
            waiting.cancel()  # a host giving up on a wait leaves the supervisor serving
            stats = await sup.statistics()
            assert stats.runs_active == 1
            await run.cancel()
            finished = await run.wait(timeout=5)
            assert finished.reason is InterruptReason.USER_CANCEL

    run_async(host)


def test_declare_and_load_make_directories_known_to_closes() -> None:
    async def host() -> None:
        async with AsyncSupervisor.start(CONFIG) as sup:
            with pytest.raises(UnknownDirectory):
                await sup.close("dispose", mode="maintenance", origin="t", directory="/w/b")
            await sup.declare("/w/b")
            await sup.load("/w/c")
            declared = await sup.close("dispose", mode="maintenance", origin="t", directory="/w/b")
            loaded = await sup.close("reload", mode="maintenance", origin="t", directory="/w/c")
            assert declared.result is CloseResult.COMPLETED
            assert loaded.result is CloseResult.COMPLETED and loaded.completed_directories == ("/w/c",)
            assert await sup.pending_actions() == ()
            assert await sup.session("nobody") is None

    run_async(host)


# --- shutdown that returns when it has completed ----------------------------------------------


def test_await_shutdown_returns_once_every_run_ended_every_dispose_ran_and_our_threads_stopped() -> None:
    hooks = RecordingHooks()
    gate = Gate("never")

    async def host() -> tuple[CloseOutcome, AsyncSupervisor]:
        sup = await AsyncSupervisor.start(CONFIG, hooks=hooks, directories=["/w/a", "/w/b"])
        await sup.start_run(held(gate), session="s1", directory="/w/a", run_id="r1")
        outcome = await sup.shutdown(grace_ms=2000, reason="test_teardown")
        return outcome, sup

    outcome, sup = run_async(host)
    assert outcome.completed and outcome.result is CloseResult.FORCED
    assert outcome.interrupted_runs == ("r1",)
    assert sorted(hooks.disposed) == [("/w/a", 1), ("/w/b", 1)]
    assert sup.closed and sup.threads.alive() == []


def test_an_async_shutdown_of_a_sync_supervisor_returns_only_once_the_shutdown_has_completed() -> None:
    hooks = RecordingHooks()
    sup = Supervisor.start(CONFIG, hooks=hooks, directories=["/w/a"])
    sup.start_run(held(Gate("never")), session="s1", directory="/w/a", run_id="r1")

    async def host() -> tuple[CloseOutcome, CloseOutcome]:
        first = await AsyncSupervisor(sup).shutdown(grace_ms=2000)
        return first, await AsyncSupervisor(sup).shutdown()  # idempotent: the first one's outcome

    outcome, again = run_async(host)
    assert isinstance(outcome, CloseOutcome)
    assert outcome.completed and outcome.interrupted_runs == ("r1",)
    assert hooks.disposed == [("/w/a", 1)]
    assert sup.closed and sup.threads.alive() == []
    assert again == outcome


def test_a_shutdown_requested_elsewhere_is_awaited_with_wait_closed() -> None:
    async def host() -> tuple[CloseOutcome, CloseOutcome]:
        sup = await AsyncSupervisor.start(CONFIG, directories=["/w/a"])
        closing: Future[CloseOutcome] = Future()
        elsewhere = threading.Thread(target=lambda: closing.set_result(sup.sync.shutdown(grace_ms=500)))
        elsewhere.start()  # a thread of the host's that shuts the supervisor down
        final = await sup.wait_closed(timeout=10)
        same = await asyncio.wrap_future(closing)
        elsewhere.join(5)
        return final, same

    final, same = run_async(host)
    assert final.completed and final == same


# --- events --------------------------------------------------------------------------------


def test_async_for_over_events_ends_when_the_shutdown_has_completed() -> None:
    async def host() -> list[str]:
        sup = await AsyncSupervisor.start(CONFIG, directories=["/w/a"])
        seen: list[str] = []
        events = sup.events()  # subscribed from here on, before anything happens

        async def read() -> None:
            async for event in events:
                seen.append(wire_type(event))

        reader = asyncio.create_task(read())
        await sup.start_run(lambda ctx: None, session="s", directory="/w/a")
        await sup.shutdown(grace_ms=500)
        await reader  # ends by itself: the subscription closes after the last event
        return seen

    seen = run_async(host)
    assert seen.index("run.started") < seen.index("run.finished") < seen.index("instance.closed")
    assert "lifecycle.completed" in seen  # the shutdown's, one of the last events


def test_a_bounded_event_stream_drops_its_oldest_events_and_counts_them() -> None:
    async def host() -> tuple[list[Event], list[Event], int]:
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            everything, bounded = sup.events(), sup.events(maxsize=2)
            for _ in range(3):
                await (await sup.start_run(lambda ctx: None, session="s", directory="/w/a")).wait(5)
            await sup.load("/w/z")  # answered after its instance.ready: the last event for now
            kept = [await bounded.get(timeout=1), await bounded.get(timeout=1)]
            with pytest.raises(SupervisorTimeout):
                await bounded.get(timeout=0.01)
            return everything.drain(), kept, bounded.dropped

    everything, kept, dropped = run_async(host)
    assert kept == everything[-2:] and wire_type(kept[-1]) == "instance.ready"
    assert dropped == len(everything) - 2 > 0


def test_events_cannot_be_opened_after_shutdown() -> None:
    async def host() -> None:
        sup = await AsyncSupervisor.start(CONFIG)
        await sup.shutdown()
        with pytest.raises(SupervisorClosed):
            sup.events()

    run_async(host)


# --- the loop never waits for the supervisor ---------------------------------------------------


def test_the_event_loop_keeps_ticking_while_hundreds_of_calls_are_in_flight() -> None:
    """A ticker measures how late the loop wakes it while 600 calls are in flight; the runs'
    gate is opened by the ticker itself, so a call that blocked the loop would stall every run
    (and the ticker) until its request timeout."""
    gate = Gate("opened by the ticker")
    runs = 200
    period = 0.005

    async def host() -> tuple[float, int, list[Outcome | None]]:
        async with AsyncSupervisor.start(CONFIG, directories=["/w/a", "/w/b"]) as sup:
            lateness: list[float] = []
            stop = asyncio.Event()

            async def ticker() -> None:
                ticks = 0
                while not stop.is_set():
                    due = time.monotonic() + period
                    await asyncio.sleep(period)
                    lateness.append(time.monotonic() - due)
                    ticks += 1
                    if ticks == 20:
                        gate.open()

            ticking = asyncio.create_task(ticker())
            await asyncio.sleep(0)

            async def one(i: int) -> Outcome | None:
                run = await sup.start_run(held(gate), session=f"s{i}", directory=f"/w/{'ab'[i % 2]}")
                await sup.statistics()
                await sup.close("reload", mode="maintenance", origin="load", directory=f"/w/{'ab'[i % 2]}")
                return (await run.wait(timeout=20)).outcome

            outcomes = await asyncio.gather(*(one(i) for i in range(runs)))
            stop.set()
            await ticking
            return max(lateness), len(lateness), outcomes

    worst, ticks, outcomes = run_async(host, bound=60)
    assert outcomes == [Outcome.COMPLETED] * runs
    assert ticks >= 20
    # Generous for a loaded 2-core machine (about 0.1-0.2 s on a quiet one: the burst of 200 run
    # starts); a call that waited on the supervisor would hold the loop, and so the gate, for the
    # 20 s of its wait.
    assert worst < 2.5, f"the loop was {worst:.3f} s late"


# --- async run bodies ---------------------------------------------------------------------------


def test_an_async_body_runs_as_a_task_on_the_hosts_loop_with_steps_and_tool_parts() -> None:
    async def host() -> tuple[RunSnapshot, list[bool]]:
        host_loop = asyncio.get_running_loop()
        on_host_loop: list[bool] = []

        async def turn(ctx: AsyncRunContext) -> None:
            on_host_loop.append(asyncio.get_running_loop() is host_loop)
            async with ctx.step("model"):
                await ctx.sleep(0.001)
            bash = ctx.tool("bash")
            bash.prepared()
            with ctx.step("tool_exec"):
                bash.running()
            bash.completed()

        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            run = await sup.start_run(turn, session="s1", directory="/w/a")
            return await run.wait(timeout=5), on_host_loop

    finished, on_host_loop = run_async(host)
    assert on_host_loop == [True]
    assert finished.outcome is Outcome.COMPLETED and finished.error is None
    assert [(p.tool, p.state.value, p.tool_started) for p in finished.parts] == [("bash", "completed", True)]


def test_an_async_body_given_to_the_sync_facade_runs_on_a_loop_thread_the_supervisor_owns() -> None:
    threads: list[str] = []

    async def turn(ctx: AsyncRunContext) -> str:
        threads.append(threading.current_thread().name)
        await asyncio.sleep(0)
        return "done"

    with Supervisor.start(CONFIG, directories=["/w/a"]) as sup:
        first = sup.start_run(turn, session="s1", directory="/w/a")
        second = sup.start_run(turn, session="s2", directory="/w/a")
        assert first.wait(timeout=5).outcome is Outcome.COMPLETED
        assert second.wait(timeout=5).outcome is Outcome.COMPLETED
    assert threads == ["run-supervisor-async-bodies"] * 2
    assert sup.threads.alive() == []  # the loop thread stopped with the supervisor


def test_an_interrupt_cancels_the_task_and_the_body_sees_it_at_its_next_await() -> None:
    seen: list[str] = []

    async def host() -> RunSnapshot:
        never, waiting = asyncio.Event(), asyncio.Event()

        async def turn(ctx: AsyncRunContext) -> None:
            waiting.set()  # the body runs on this loop: it can tell us
            try:
                await never.wait()  # any await, not only the context's
            except asyncio.CancelledError:
                seen.append(f"cancelled, run interrupted: {ctx.cancelled}")
                raise

        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            run = await sup.start_run(turn, session="s1", directory="/w/a")
            await waiting.wait()
            await run.cancel()
            return await run.wait(timeout=5)

    finished = run_async(host)
    assert finished.outcome is Outcome.INTERRUPTED and finished.reason is InterruptReason.USER_CANCEL
    assert seen == ["cancelled, run interrupted: True"]


def test_an_async_body_that_swallows_cancellation_is_abandoned_at_the_shutdown_deadline() -> None:
    held: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
    started = threading.Event()
    swallowed: list[int] = []

    async def deaf(ctx: AsyncRunContext) -> None:
        release = asyncio.get_running_loop().create_future()
        held.append((asyncio.get_running_loop(), release))
        started.set()
        while not release.done():
            try:
                await asyncio.shield(release)
            except asyncio.CancelledError:
                swallowed.append(1)  # ignores the interrupt, keeps going

    sup = Supervisor.start(CONFIG, directories=["/w/a"])
    log = EventLog(sup)
    try:
        sup.start_run(deaf, session="s1", directory="/w/a", run_id="r1")
        assert started.wait(5)
        begun = time.monotonic()
        outcome = sup.shutdown(grace_ms=200)
        took = time.monotonic() - begun
        assert outcome.abandoned_runs == ("r1",)
        finished = log.wait_for("run.finished", run_id="r1", timeout=2)
        assert finished.abandoned and finished.reason is InterruptReason.SHUTDOWN  # type: ignore[union-attr]
        assert swallowed and took < 5.0  # bounded by the grace deadline, whatever the body does
    finally:
        for loop, release in held:  # let it end: its loop thread then stops (the leak check joins it)
            loop.call_soon_threadsafe(release.set_result, None)


def test_the_async_contexts_waits_and_asks_are_awaitable_and_answered_by_the_user() -> None:
    gate = Gate("tool input")
    got: list[object] = []

    async def host() -> RunSnapshot:
        asked: asyncio.Queue[str] = asyncio.Queue()  # the body runs on this loop: it can tell us

        async def turn(ctx: AsyncRunContext) -> None:
            got.append(await ctx.wait(gate, timeout=5))
            got.append(await ctx.wait(Gate("never"), timeout=0.01))
            bash = ctx.tool("bash")
            permission = bash.open_permission(title="run rm -rf build?", command="rm -rf build")
            await asked.put(permission.ask_id)  # opened (registered) before the host hears of it
            reply = await permission.wait(timeout=5)
            got.append((reply.approved, reply.message))
            form = ctx.open_form(title="which branch?", questions=["branch"])
            await asked.put(form.ask_id)
            got.append((await form.wait(timeout=5)).answer)
            dismissed = ctx.open_form(title="anything else?")
            await asked.put(dismissed.ask_id)
            await dismissed.wait(timeout=5)  # dismissed without a message: the run ends here

        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            run = await sup.start_run(turn, session="s1", directory="/w/a", run_id="r1")
            gate.open()
            await sup.reply_permission(await asked.get(), approve=False, message="use rg instead")
            await sup.answer_form(await asked.get(), answer="main")
            await sup.dismiss_form(await asked.get())
            return await run.wait(timeout=5)

    finished = run_async(host)
    assert got == [True, False, (False, "use rg instead"), "main"]
    assert finished.outcome is Outcome.INTERRUPTED and finished.reason is InterruptReason.FORM_DISMISSED


def test_an_async_ask_that_times_out_is_withdrawn_and_a_withdrawal_can_lose_to_a_reply() -> None:
    results: list[object] = []

    async def host() -> None:
        asked: asyncio.Queue[str] = asyncio.Queue()

        async def turn(ctx: AsyncRunContext) -> None:
            with pytest.raises(SupervisorTimeout, match="withdrawn"):
                await ctx.ask_permission(timeout=0.01, title="nobody answers")
            ask = ctx.open_form(title="answered before the withdrawal")
            await asked.put(ask.ask_id)
            await asked.join()  # the host has answered
            results.append(await ask.withdraw())  # False: the reply came first and stands
            results.append((await ask.wait(timeout=1)).answer)

        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            run = await sup.start_run(turn, session="s1", directory="/w/a")
            await sup.answer_form(await asked.get(), answer="yes")
            asked.task_done()
            assert (await run.wait(timeout=5)).outcome is Outcome.COMPLETED

    run_async(host)
    assert results == [False, "yes"]


def test_a_sync_body_that_returns_a_coroutine_fails_with_a_clear_error_never_completed() -> None:
    async def turn(ctx: AsyncRunContext) -> None:
        raise AssertionError("never run")

    def wraps_it(ctx: RunContext) -> object:  # a sync body handing back a coroutine
        return turn(ctx)  # type: ignore[arg-type]

    with Supervisor.start(CONFIG, directories=["/w/a"]) as sup:
        finished = sup.start_run(wraps_it, session="s1", directory="/w/a").wait(timeout=5)
    assert finished.outcome is Outcome.FAILED
    assert "returned a coroutine" in (finished.error or "")


def test_an_async_body_cancelled_at_once_ends_interrupted_whether_or_not_its_task_had_run() -> None:
    async def host() -> list[RunSnapshot]:
        async def turn(ctx: AsyncRunContext) -> None:
            await asyncio.Event().wait()

        async with AsyncSupervisor.start(CONFIG, directories=["/w/a"]) as sup:
            runs = [await sup.start_run(turn, session=f"s{i}", directory="/w/a") for i in range(20)]
            for run in runs:  # some before their task took its first step, some after
                await run.cancel()
            return [await run.wait(timeout=5) for run in runs]

    for finished in run_async(host):
        assert finished.outcome is Outcome.INTERRUPTED and finished.reason is InterruptReason.USER_CANCEL
