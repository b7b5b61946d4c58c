"""The supervisor through its public API, with real actors and threads.

The first group is the seed incident's acceptance criteria, one by one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from run_supervisor import (
    AsyncRunHandle,
    AsyncSupervisor,
    CloseResult,
    Gate,
    InterruptReason,
    InvalidConfig,
    InvalidRequest,
    LoadFailed,
    NothingPending,
    Outcome,
    PartState,
    Phase,
    RequestResult,
    RunAlreadyExists,
    RunAlreadyFinished,
    RunContext,
    SessionStatus,
    Supervisor,
    SupervisorClosed,
    SupervisorConfig,
    SupervisorError,
    SupervisorTimeout,
    UnknownDirectory,
    UnknownRun,
)
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import AskRequested, CancelRun, RunFinished, SupervisorCore


def held_at(
    gate: Gate, *, tool: str | None = "bash", phase: str = "generating"
) -> Callable[[RunContext], None]:
    """A body: one model step, then a tool part held at ``phase`` until the gate opens."""

    def body(ctx: RunContext) -> None:
        with ctx.step("model"):
            pass
        if tool is None:
            with ctx.step("model"):
                ctx.wait(gate)
            return
        call = ctx.tool(tool)
        with ctx.step("tool_input"):
            if phase == "generating":
                ctx.wait(gate)
        call.prepared()
        with ctx.step("tool_exec"):
            if phase == "prepared":
                ctx.wait(gate)
            call.running()
            if phase == "running":
                ctx.wait(gate)
        call.completed()

    return body


def reached(events: EventLog, run: str, step: str = "tool_input") -> None:
    events.wait_for("run.step.started", run_id=run, step=step, timeout=2)


# --- the seed's acceptance criteria -----------------------------------------------------------


def test_provider_connect_dispose_all_does_not_interrupt_an_active_run(
    supervisor: Supervisor, events: EventLog, gate: Gate
) -> None:
    run = supervisor.start_run(held_at(gate), session="s1", directory="/w/a", run_id="r1")
    reached(events, "r1")

    result = supervisor.close("dispose_all", mode="maintenance", origin="settings.provider.connect")

    assert result.result is CloseResult.DEFERRED
    assert result.completed_directories == ("/w/b",)
    assert result.pending_directories == ("/w/a",)
    assert result.blocking_runs == ("r1",)
    gate.open()
    finished = run.wait(timeout=2)
    assert finished.outcome is Outcome.COMPLETED
    assert [p.state for p in finished.parts] == [PartState.COMPLETED]
    completed = events.wait_for("lifecycle.completed", action_id=result.action_id)
    assert events.collect().index(completed) > events.collect().index(
        events.wait_for("run.finished", run_id="r1")
    )


def test_dispose_all_with_active_runs_in_two_directories_interrupts_neither(
    supervisor: Supervisor, events: EventLog
) -> None:
    gate_a, gate_b = Gate("a"), Gate("b")
    run_a = supervisor.start_run(held_at(gate_a), session="s1", directory="/w/a", run_id="ra")
    run_b = supervisor.start_run(held_at(gate_b), session="s2", directory="/w/b", run_id="rb")
    reached(events, "ra")
    reached(events, "rb")

    result = supervisor.close("dispose_all", mode="maintenance", origin="global.dispose")

    assert result.result is CloseResult.DEFERRED
    assert result.pending_directories == ("/w/a", "/w/b")
    assert result.blocking_runs == ("ra", "rb")
    gate_a.open()
    assert run_a.wait(timeout=2).outcome is Outcome.COMPLETED
    # /w/a closes as soon as its own run ends, while /w/b still waits.
    events.wait_for("instance.closed", directory="/w/a", generation=1)
    assert not events.of("instance.closed", directory="/w/b")
    assert not events.of("lifecycle.completed", action_id=result.action_id)
    gate_b.open()
    assert run_b.wait(timeout=2).outcome is Outcome.COMPLETED
    events.wait_for("lifecycle.completed", action_id=result.action_id)
    assert len(events.of("lifecycle.completed", action_id=result.action_id)) == 1


def test_a_reload_while_a_run_is_active_leaves_it_alone_and_new_runs_get_the_next_generation(
    supervisor: Supervisor, events: EventLog, gate: Gate
) -> None:
    run = supervisor.start_run(held_at(gate, phase="prepared"), session="s1", directory="/w/a", run_id="r1")
    reached(events, "r1", "tool_exec")

    result = supervisor.close("reload", mode="maintenance", origin="project.reload", directory="/w/a")

    assert result.result is CloseResult.DEFERRED
    later = supervisor.start_run(held_at(Gate("open")), session="s2", directory="/w/a", run_id="r2")
    events.wait_for("run.started", run_id="r2", generation=2)
    later.cancel()
    gate.open()
    assert run.wait(timeout=2).generation == 1
    assert run.wait(timeout=2).outcome is Outcome.COMPLETED
    events.wait_for("lifecycle.completed", action_id=result.action_id)
    assert [e.generation for e in events.of("instance.closed", directory="/w/a")] == [1]


def test_config_invalidation_while_a_run_is_active_does_not_interrupt_it(
    supervisor: Supervisor, events: EventLog, gate: Gate
) -> None:
    run = supervisor.start_run(held_at(gate, phase="running"), session="s1", directory="/w/b", run_id="r1")
    reached(events, "r1", "tool_exec")

    result = supervisor.close("invalidate_config", mode="maintenance", origin="config.update")

    assert result.result is CloseResult.DEFERRED
    assert result.completed_directories == ("/w/a",)
    gate.open()
    assert run.wait(timeout=2).outcome is Outcome.COMPLETED
    events.wait_for("lifecycle.completed", action_id=result.action_id)
    assert not [e for e in events.of("run.finished") if e.reason is not None]


def test_directory_a_busy_while_b_is_loaded_closes_b_at_once(
    supervisor: Supervisor, events: EventLog, gate: Gate
) -> None:
    supervisor.start_run(held_at(gate), session="s1", directory="/w/a", run_id="r1")
    reached(events, "r1")

    result = supervisor.close("dispose_all", mode="maintenance", origin="settings.provider.connect")

    # The immediate close finished, dispose hook included, before the result was given.
    assert events.of("instance.closed", directory="/w/b", generation=1)
    assert not events.of("instance.closed", directory="/w/a")
    assert result.completed_directories == ("/w/b",)
    gate.open()
    events.wait_for("lifecycle.completed", action_id=result.action_id)


def test_an_explicit_user_cancel_still_cancels_at_once_even_while_a_close_is_pending(
    supervisor: Supervisor, events: EventLog, gate: Gate
) -> None:
    run = supervisor.start_run(held_at(gate), session="s1", directory="/w/a", run_id="r1")
    reached(events, "r1")
    close = supervisor.close("dispose", mode="maintenance", origin="config", directory="/w/a")
    assert close.result is CloseResult.DEFERRED

    run.cancel()

    finished = run.wait(timeout=2)
    assert finished.outcome is Outcome.INTERRUPTED
    assert finished.reason is InterruptReason.USER_CANCEL
    assert finished.origin == "user"
    assert finished.phase is Phase.GENERATING
    assert [p.state for p in finished.parts] == [PartState.INTERRUPTED]
    assert finished.parts[0].tool_started is False
    events.wait_for("lifecycle.completed", action_id=close.action_id)


class RecordingHooks:
    def __init__(self) -> None:
        self.loaded: list[tuple[str, int]] = []
        self.disposed: list[tuple[str, int]] = []

    def load(self, directory: str, generation: int) -> Any:
        self.loaded.append((directory, generation))
        return {"provider": f"{directory}#{generation}"}

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        self.disposed.append((directory, generation))


def test_shutdown_and_test_teardown_still_dispose_every_instance_and_stop_every_thread() -> None:
    hooks = RecordingHooks()
    sup = Supervisor.start(
        SupervisorConfig(shutdown_at_exit=False), hooks=hooks, directories=["/w/a", "/w/b"]
    )
    events = EventLog(sup)
    sup.start_run(held_at(Gate("never")), session="s1", directory="/w/a", run_id="r1")
    reached(events, "r1")

    outcome = sup.shutdown(grace_ms=1000, reason="test_teardown")

    assert outcome.result is CloseResult.FORCED
    assert outcome.completed
    assert sorted(hooks.disposed) == [("/w/a", 1), ("/w/b", 1)]
    finished = events.wait_for("run.finished", run_id="r1")
    assert isinstance(finished, RunFinished)
    assert finished.reason is InterruptReason.TEST_TEARDOWN
    assert sup.threads.alive() == []


def test_session_status_returns_to_idle_after_the_run_completes_naturally(
    supervisor: Supervisor, events: EventLog
) -> None:
    run = supervisor.start_run(held_at(Gate("x"), tool=None), session="s1", directory="/w/a", run_id="r1")
    events.wait_for("session.status", session="s1", status=SessionStatus.BUSY)
    run.cancel()
    run.wait(timeout=2)
    second = supervisor.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r2")
    assert second.wait(timeout=2).outcome is Outcome.COMPLETED
    events.wait_for("run.finished", run_id="r2")
    statuses = [e.status for e in events.of("session.status", session="s1")]
    assert statuses == [SessionStatus.BUSY, SessionStatus.IDLE, SessionStatus.BUSY, SessionStatus.IDLE]
    snapshot = supervisor.session("s1")
    assert snapshot is not None and snapshot.status is SessionStatus.IDLE


# --- modes, reasons and user decisions --------------------------------------------------------


def test_a_user_confirmed_close_interrupts_with_lifecycle_interrupt_and_names_its_origin(
    supervisor: Supervisor, events: EventLog, gate: Gate
) -> None:
    run = supervisor.start_run(held_at(gate), session="s1", directory="/w/a", run_id="r1")
    reached(events, "r1")

    result = supervisor.close(
        "reload", mode="user_confirmed_interrupt", origin="dialog.reload", directory="/w/a"
    )

    assert result.result is CloseResult.INTERRUPTED
    assert result.interrupted_runs == ("r1",)
    finished = run.wait(timeout=2)
    assert (finished.reason, finished.origin, finished.action_id) == (
        InterruptReason.LIFECYCLE_INTERRUPT,
        "dialog.reload",
        result.action_id,
    )
    events.wait_for("lifecycle.completed", action_id=result.action_id)
    types = events.types()
    assert types.index("run.finished") < types.index("instance.closed")


def permission_body(results: list[Any]) -> Callable[[RunContext], None]:
    def body(ctx: RunContext) -> None:
        call = ctx.tool("bash")
        call.prepared()
        call.running()
        with ctx.step("permission", call=call):
            results.append(call.ask_permission(timeout=5, command="git push"))
        call.completed()

    return body


def asked(events: EventLog, run: str) -> str:
    """The id of the run's ask, once ``ask.requested`` says it waits (a reply to it never races)."""
    event = events.wait_for("ask.requested", run_id=run, timeout=2)
    assert isinstance(event, AskRequested)
    return event.ask_id


def test_a_permission_rejected_without_feedback_is_permission_rejected_never_shutdown(
    supervisor: Supervisor, events: EventLog
) -> None:
    run = supervisor.start_run(permission_body([]), session="s1", directory="/w/a", run_id="r1")
    supervisor.reply_permission(asked(events, "r1"), approve=False)

    finished = run.wait(timeout=2)
    assert finished.reason is InterruptReason.PERMISSION_REJECTED
    assert finished.origin == "permission"
    # The session stays usable.
    assert supervisor.start_run(lambda ctx: None, session="s1", directory="/w/a").wait(2).outcome is (
        Outcome.COMPLETED
    )


def test_a_permission_rejected_with_feedback_fails_the_tool_and_the_run_goes_on(
    supervisor: Supervisor, events: EventLog
) -> None:
    replies: list[Any] = []
    run = supervisor.start_run(permission_body(replies), session="s1", directory="/w/a", run_id="r1")
    supervisor.reply_permission(asked(events, "r1"), approve=False, message="use git status")

    finished = run.wait(timeout=2)
    assert finished.outcome is Outcome.COMPLETED
    assert finished.parts[0].state is PartState.ERROR
    assert finished.parts[0].message == "use git status"
    assert replies[0].approved is False and replies[0].message == "use git status"


def test_a_dismissed_form_ends_the_run_with_form_dismissed(supervisor: Supervisor, events: EventLog) -> None:
    def body(ctx: RunContext) -> None:
        call = ctx.tool("question")
        call.prepared()
        call.running()
        with ctx.step("form", call=call):
            call.ask_form(timeout=5, questions=["Which branch?"])

    run = supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1")
    supervisor.dismiss_form(asked(events, "r1"))
    finished = run.wait(timeout=2)
    assert (finished.reason, finished.origin) == (InterruptReason.FORM_DISMISSED, "form")


def test_an_answer_with_nothing_pending_is_rejected(
    supervisor: Supervisor, gate: Gate, events: EventLog
) -> None:
    supervisor.start_run(held_at(gate), session="s1", directory="/w/a", run_id="r1")
    reached(events, "r1")
    with pytest.raises(NothingPending, match="no permission waiting"):
        supervisor.reply_permission(run_id="r1", approve=True)
    gate.open()


def test_a_second_run_in_a_busy_session_queues_and_starts_when_the_first_ends(
    supervisor: Supervisor, events: EventLog, gate: Gate
) -> None:
    first = supervisor.start_run(held_at(gate), session="s1", directory="/w/a", run_id="r1")
    second = supervisor.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r2")
    events.wait_for("run.queued", run_id="r2", session="s1")
    gate.open()
    assert first.wait(2).outcome is Outcome.COMPLETED
    assert second.wait(2).outcome is Outcome.COMPLETED
    types = [(type(e).__name__, getattr(e, "run_id", None)) for e in events.collect()]
    assert types.index(("RunFinished", "r1")) < types.index(("RunStarted", "r2"))


def test_a_cancel_after_the_run_finished_is_rejected_and_never_reaches_the_next_run(
    supervisor: Supervisor, gate: Gate
) -> None:
    supervisor.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r1").wait(2)
    nxt = supervisor.start_run(held_at(gate), session="s1", directory="/w/a", run_id="r2")
    with pytest.raises(RunAlreadyFinished):
        supervisor.cancel("r1")
    gate.open()
    assert nxt.wait(2).outcome is Outcome.COMPLETED


# --- faults -----------------------------------------------------------------------------------


def test_a_run_body_that_raises_fails_that_run_only(
    supervisor: Supervisor, events: EventLog, gate: Gate
) -> None:
    def broken(ctx: RunContext) -> None:
        ctx.tool("bash")
        raise RuntimeError("model stream broke")

    other = supervisor.start_run(held_at(gate), session="s2", directory="/w/a", run_id="ok")
    failed = supervisor.start_run(broken, session="s1", directory="/w/a", run_id="bad").wait(2)
    assert failed.outcome is Outcome.FAILED
    assert failed.error == "model stream broke"
    assert failed.phase is None and failed.reason is None
    # Its call was cut off while generated: not run (not a failed tool), the raw error kept.
    assert [(p.state, p.origin, p.message) for p in failed.parts] == [
        (PartState.INTERRUPTED, "run_failed", "model stream broke")
    ]
    gate.open()
    assert other.wait(2).outcome is Outcome.COMPLETED


def test_a_body_raising_a_base_exception_is_contained_and_stops_no_other_actor(
    supervisor: Supervisor, gate: Gate
) -> None:
    def exits(ctx: RunContext) -> None:
        raise SystemExit("bye")

    other = supervisor.start_run(held_at(gate), session="s2", directory="/w/a", run_id="ok")
    failed = supervisor.start_run(exits, session="s1", directory="/w/a", run_id="bad").wait(2)
    assert failed.outcome is Outcome.FAILED and failed.error == "bye"
    gate.open()
    assert other.wait(2).outcome is Outcome.COMPLETED
    assert supervisor.statistics().runs_finished == 2


def test_a_body_that_ignores_cancellation_is_abandoned_at_the_grace_deadline() -> None:
    release = threading.Event()

    def stubborn(ctx: RunContext) -> None:
        with ctx.step("model"):
            release.wait(10)  # looks at nothing: a misbehaving body

    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/w/a"])
    events = EventLog(sup)
    sup.start_run(stubborn, session="s1", directory="/w/a", run_id="r1")
    events.wait_for("run.step.started", run_id="r1")
    try:
        outcome = sup.shutdown(grace_ms=200)
        assert outcome.abandoned_runs == ("r1",)
        finished = events.wait_for("run.finished", run_id="r1")
        assert isinstance(finished, RunFinished)
        assert finished.abandoned and finished.reason is InterruptReason.SHUTDOWN
        completed = events.wait_for("lifecycle.completed", action_id=outcome.action_id)
        assert completed.abandoned_runs == ("r1",)  # type: ignore[union-attr]
    finally:
        release.set()


class FaultyHooks(RecordingHooks):
    def __init__(self, *, raises: str | None = None, hang: threading.Event | None = None) -> None:
        super().__init__()
        self.raises = raises
        self.hang = hang

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        if self.hang is not None:
            self.hang.wait(10)
        if self.raises:
            raise RuntimeError(self.raises)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


@pytest.mark.parametrize(
    ("faults", "error"),
    [
        ({"raises": "watcher crashed"}, "watcher crashed"),
        ({"hang": True}, "overran its 200 ms budget"),
    ],
    ids=["a dispose hook that raises", "a dispose hook that hangs"],
)
def test_a_failing_dispose_hook_still_completes_the_close_and_reports_the_error(
    faults: dict[str, Any], error: str, release: threading.Event
) -> None:
    hooks = FaultyHooks(raises=faults.get("raises"), hang=release if faults.get("hang") else None)
    config = SupervisorConfig(shutdown_at_exit=False, dispose_budget_ms=200)
    with Supervisor.start(config, hooks=hooks, directories=["/w/a"]) as sup:
        events = EventLog(sup)
        result = sup.close("dispose", mode="maintenance", origin="config", directory="/w/a")
        assert result.result is CloseResult.COMPLETED and result.completed
        closed = events.wait_for("instance.closed", directory="/w/a")
        assert error in (closed.error or "")  # type: ignore[union-attr]
        completed = events.wait_for("lifecycle.completed", action_id=result.action_id)
        assert error in (completed.error or "")  # type: ignore[union-attr]
        release.set()


# --- bad input and after shutdown -------------------------------------------------------------


def test_bad_requests_get_typed_errors(supervisor: Supervisor) -> None:
    with pytest.raises(UnknownRun):
        supervisor.cancel("nope")
    with pytest.raises(UnknownDirectory, match="/nowhere"):
        supervisor.close("dispose", mode="maintenance", origin="x", directory="/nowhere")
    with pytest.raises(InvalidRequest):
        supervisor.close("dispose", mode="maintenance", origin="x")
    with pytest.raises(InvalidRequest):
        supervisor.start_run(lambda ctx: None, session="", directory="/w/a")
    with pytest.raises(InvalidRequest, match="mode must be one of maintenance, user_confirmed_interrupt"):
        supervisor.close("dispose_all", mode="not_a_mode", origin="x")  # type: ignore[arg-type]
    supervisor.start_run(lambda ctx: None, session="s", directory="/w/a", run_id="dup").wait(2)
    with pytest.raises(RunAlreadyExists):
        supervisor.start_run(lambda ctx: None, session="s", directory="/w/a", run_id="dup")


def test_an_invalid_config_is_refused_with_a_validation_error() -> None:
    with pytest.raises(InvalidConfig):
        SupervisorConfig(request_timeout_s=0)
    with pytest.raises(InvalidConfig):
        SupervisorConfig(unknown_setting=True)  # type: ignore[call-arg]


def test_every_request_after_shutdown_is_rejected_and_a_second_shutdown_gets_the_first_outcome() -> None:
    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/w/a"])
    first = sup.shutdown(grace_ms=100)
    with pytest.raises(SupervisorClosed):
        sup.start_run(lambda ctx: None, session="s", directory="/w/a")
    with pytest.raises(SupervisorClosed):
        sup.close("dispose_all", mode="maintenance", origin="x")
    with pytest.raises(SupervisorClosed):
        sup.cancel("r1")
    raw = sup.submit(CancelRun(run_id="r1")).result(timeout=2)  # the raw API answers with a value
    assert raw.result is RequestResult.REJECTED and raw.error
    second = sup.shutdown(grace_ms=100, reason="test_teardown")
    assert second.action_id == first.action_id and second.result is CloseResult.FORCED


def test_waiting_for_a_run_is_bounded_by_its_timeout(supervisor: Supervisor, gate: Gate) -> None:
    run = supervisor.start_run(held_at(gate), session="s", directory="/w/a")
    with pytest.raises(SupervisorTimeout):
        run.wait(timeout=0.05)
    gate.open()
    assert run.wait(timeout=2).outcome is Outcome.COMPLETED


# --- subscribers, asyncio, the instance -------------------------------------------------------


def test_a_slow_subscriber_blocks_neither_the_supervisor_nor_other_subscribers(
    supervisor: Supervisor,
) -> None:
    held = threading.Event()
    called = threading.Event()
    calls: list[str] = []

    def slow(event: object) -> None:
        calls.append(type(event).__name__)
        called.set()
        held.wait(5)

    slow_sub = supervisor.subscribe(callback=slow)
    bounded = supervisor.subscribe(maxsize=2)
    log = EventLog(supervisor)
    try:
        for index in range(5):
            supervisor.start_run(
                lambda ctx: None, session=f"s{index}", directory="/w/a", run_id=f"r{index}"
            ).wait(2)
        log.wait_for("run.finished", run_id="r4")
        assert bounded.dropped > 0 and len(bounded.drain()) == 2  # the newest two are kept
        # Its own thread took the first event (when is up to the machine) and is held in it: the
        # slow one lags, and nobody waited for it.
        assert called.wait(5)
        assert len(calls) == 1 < len(log.collect())
    finally:
        held.set()
        slow_sub.close()
        bounded.close()
        log.close()


def test_a_subscriber_that_raises_is_counted_and_keeps_receiving(supervisor: Supervisor) -> None:
    seen: list[str] = []
    done = threading.Event()

    def flaky(event: object) -> None:
        seen.append(type(event).__name__)
        if isinstance(event, RunFinished):
            done.set()
        raise ValueError("subscriber bug")

    sub = supervisor.subscribe(callback=flaky)
    supervisor.start_run(lambda ctx: None, session="s1", directory="/w/a").wait(2)
    assert done.wait(2)
    assert sub.errors == len(seen) and sub.errors >= 3
    sub.close()


def test_cancelling_one_wait_leaves_the_runs_other_waiters_alone(supervisor: Supervisor, gate: Gate) -> None:
    run = supervisor.start_run(lambda ctx: ctx.wait(gate), session="s1", directory="/w/a")
    handle = AsyncRunHandle(AsyncSupervisor(supervisor), run)

    async def host() -> tuple[bool, Outcome | None, Outcome | None]:
        given_up = asyncio.create_task(handle.wait(timeout=5))
        still_waiting = asyncio.create_task(handle.wait(timeout=5))
        await asyncio.sleep(0)  # both are waiting now
        cancelled = given_up.cancel()  # the host stops waiting; the run and everyone else waiting go on
        gate.open()
        outcome = (await still_waiting).outcome
        return cancelled, outcome, (await handle.wait(timeout=5)).outcome

    cancelled, still, again = asyncio.run(asyncio.wait_for(host(), timeout=10))
    assert cancelled and still is Outcome.COMPLETED
    assert run.wait(timeout=5).outcome is Outcome.COMPLETED
    assert again is Outcome.COMPLETED


def test_closing_a_subscription_with_a_stuck_callback_waits_only_as_long_as_asked(
    supervisor: Supervisor,
) -> None:
    inside = threading.Event()
    release = threading.Event()

    def stuck(event: object) -> None:
        inside.set()
        release.wait(10)

    sub = supervisor.subscribe(callback=stuck)
    supervisor.start_run(lambda ctx: None, session="s1", directory="/w/a").wait(2)
    assert inside.wait(5)
    assert sub.close(timeout=0) is False  # a caller that must not block is not blocked
    assert sub.closed
    release.set()
    assert sub.close(timeout=5) is True  # closing again waits for the callback thread to end
    queue_sub = supervisor.subscribe()
    assert queue_sub.close(timeout=0) is True  # nothing to wait for
    with pytest.raises(ValueError, match="timeout"):
        queue_sub.close(timeout=-1)


def test_an_asyncio_host_awaits_a_close_without_blocking_its_loop(supervisor: Supervisor, gate: Gate) -> None:
    async def host() -> tuple[CloseResult, int]:
        ticks = 0
        future = asyncio.ensure_future(
            AsyncSupervisor(supervisor).close(
                "dispose_all", mode="maintenance", origin="settings.provider.connect"
            )
        )
        while not future.done():
            ticks += 1
            await asyncio.sleep(0)
        return (await future).result, ticks

    result, ticks = asyncio.run(asyncio.wait_for(host(), timeout=5))
    assert result is CloseResult.COMPLETED
    assert ticks >= 1  # the loop kept running while the supervisor decided


def test_a_run_reads_the_instance_it_is_pinned_to() -> None:
    hooks = RecordingHooks()
    seen: list[Any] = []
    with Supervisor.start(SupervisorConfig(shutdown_at_exit=False), hooks=hooks, directories=["/w/a"]) as sup:
        sup.start_run(lambda ctx: seen.append(ctx.instance()), session="s1", directory="/w/a").wait(2)
    assert seen == [{"provider": "/w/a#1"}]


def test_a_supervisor_bug_is_contained_answered_as_an_error_and_the_supervisor_keeps_serving(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = SupervisorCore.request

    def broken(self: SupervisorCore, request: Any, reply_to: Any) -> Any:
        if getattr(request, "run_id", None) == "boom":
            raise KeyError("a bug in the core")
        return real(self, request, reply_to)

    monkeypatch.setattr(SupervisorCore, "request", broken)
    with pytest.raises(SupervisorError, match="the supervisor failed"):
        supervisor.cancel("boom")
    assert supervisor.start_run(lambda ctx: None, session="s", directory="/w/a").wait(2).outcome is (
        Outcome.COMPLETED
    )


def test_a_run_on_an_instance_whose_load_failed_fails_with_that_error() -> None:
    class BrokenLoad(RecordingHooks):
        def load(self, directory: str, generation: int) -> Any:
            raise OSError("config file unreadable")

    with Supervisor.start(SupervisorConfig(shutdown_at_exit=False), hooks=BrokenLoad()) as sup:
        with pytest.raises(LoadFailed, match="/w/a failed: config file unreadable") as failed:
            sup.load("/w/a")
        assert failed.value.errors == {"/w/a": "config file unreadable"}
        finished = sup.start_run(lambda ctx: ctx.instance(), session="s1", directory="/w/a").wait(2)
    assert finished.outcome is Outcome.FAILED
    assert finished.error == "loading /w/a (generation 1) failed: config file unreadable"
