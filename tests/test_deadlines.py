"""Run deadlines: past its deadline a run is interrupted with reason ``timeout``
and origin ``deadline``; the core stays clock-free (ArmDeadline out, DeadlineExpired in)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from run_support import assert_ended
from wire_support import Served, of_type, served, sse

from run_supervisor import (
    AsyncSupervisor,
    CloseAction,
    CloseMode,
    Gate,
    InterruptReason,
    InvalidRequest,
    Outcome,
    RejectCode,
    RunContext,
    RunState,
    Supervisor,
    UnknownRun,
)
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import (
    DEADLINE_EXPIRY,
    DEADLINE_ORIGIN,
    ArmDeadline,
    DeadlineExpired,
    DisarmDeadline,
    RunFinished,
    RunStarted,
    SignalInterrupt,
    StartRun,
)
from run_supervisor.protocol.testing import CoreShell, InvariantChecker, InvariantViolation

BOUND_S = 30.0


# --- the core: a command out, a report in ---------------------------------------------------------


def test_a_deadline_is_armed_when_the_run_becomes_active_not_while_it_waits_in_its_queue() -> None:
    shell = CoreShell("/w/a")
    shell.start("first", session="s")
    shell.request(StartRun(run_id="second", session="s", directory="/w/a", deadline_ms=500))
    assert shell.commands(ArmDeadline) == []  # queued: its deadline does not count yet

    batch = shell.finish("first")

    assert shell.commands(ArmDeadline, batch) == [ArmDeadline(run_id="second", deadline_ms=500)]
    assert shell.one(RunStarted, run_id="second").deadline_ms == 500
    snapshot = shell.core.run_snapshot("second")
    assert snapshot is not None and snapshot.deadline_ms == 500


def test_a_run_past_its_deadline_is_interrupted_with_reason_timeout_and_origin_deadline() -> None:
    shell = CoreShell("/w/a")
    shell.request(StartRun(run_id="r", session="s", directory="/w/a", deadline_ms=100))
    shell.tool("r")  # a bash call is running

    batch = shell.report(DeadlineExpired(run_id="r"))

    assert shell.commands(SignalInterrupt, batch) == [SignalInterrupt("r", InterruptReason.TIMEOUT)]
    shell.finish("r")
    finished = shell.finished("r")
    assert_ended(
        finished, Outcome.INTERRUPTED, reason=InterruptReason.TIMEOUT, origin=DEADLINE_ORIGIN, action_id=None
    )
    assert finished.parts[0].reason is InterruptReason.TIMEOUT  # its tool card says so too
    assert finished.parts[0].label == "Stopped: bash was interrupted by the run's deadline while it ran"
    assert shell.commands(DisarmDeadline) == [DisarmDeadline(run_id="r")]
    shell.shutdown()
    shell.checker.finish()


def test_an_expiry_for_a_run_already_being_interrupted_is_ignored_the_first_reason_stands() -> None:
    shell = CoreShell("/w/a")
    shell.request(StartRun(run_id="r", session="s", directory="/w/a", deadline_ms=100))
    shell.cancel("r", origin="stop-button")
    ignored = shell.core.statistics().reports_ignored

    assert shell.report(DeadlineExpired(run_id="r")) == []

    assert shell.core.statistics().reports_ignored == ignored + 1
    shell.finish("r")
    assert (shell.finished("r").reason, shell.finished("r").origin) == (
        InterruptReason.USER_CANCEL,
        "stop-button",
    )


def test_an_expiry_that_crosses_the_runs_end_is_ignored() -> None:
    shell = CoreShell("/w/a")
    shell.request(StartRun(run_id="r", session="s", directory="/w/a", deadline_ms=100))
    shell.finish("r")

    assert shell.report(DeadlineExpired(run_id="r")) == []

    assert shell.finished("r").outcome is Outcome.COMPLETED
    assert shell.commands(DisarmDeadline) == [DisarmDeadline(run_id="r")]


def test_only_an_active_run_can_pass_its_deadline_by_the_rules_table() -> None:
    assert {state for state, trigger in DEADLINE_EXPIRY.items() if trigger is not None} == {RunState.ACTIVE}
    assert set(DEADLINE_EXPIRY) == set(RunState)


def test_a_parents_deadline_interrupts_its_children_with_the_same_reason_and_origin() -> None:
    shell = CoreShell("/w/a")
    shell.request(StartRun(run_id="parent", session="s", directory="/w/a", deadline_ms=100))
    shell.start("child", parent="parent")

    shell.report(DeadlineExpired(run_id="parent"))
    shell.finish("child")
    shell.finish("parent")

    for run in ("child", "parent"):
        assert (shell.finished(run).reason, shell.finished(run).origin) == (
            InterruptReason.TIMEOUT,
            DEADLINE_ORIGIN,
        )
    shell.shutdown()
    shell.checker.finish()


def test_a_deadline_that_is_not_positive_is_rejected_by_the_core() -> None:
    shell = CoreShell("/w/a")
    answer = shell.request(StartRun(run_id="r", session="s", directory="/w/a", deadline_ms=0))
    assert answer is not None and answer.code is RejectCode.INVALID_REQUEST
    assert "deadline_ms" in (answer.error or "")


def test_the_checker_refuses_a_deadline_interrupt_nobody_reported() -> None:
    checker = InvariantChecker()
    shell = CoreShell("/w/a", checker=checker)
    shell.request(StartRun(run_id="r", session="s", directory="/w/a", deadline_ms=100))
    shell.carry_out(shell.core.report(DeadlineExpired(run_id="r")))  # past the shell: not told
    shell.finish("r")
    shell.shutdown()
    with pytest.raises(InvariantViolation, match="deadline that neither it nor a parent had"):
        checker.finish()


# --- the supervisor: the shared timer fires ------------------------------------------------------


def _barrier(supervisor: Supervisor) -> None:
    """Return once the supervisor has carried out every command it decided so far: a run's waiter
    wakes at its run.finished, before the rest of that batch (its DisarmDeadline) is carried out; a
    request answered afterwards went through the mailbox behind it."""
    with pytest.raises(UnknownRun):
        supervisor.cancel("no-such-run", timeout=BOUND_S)


def _held(gate: Gate) -> Callable[[RunContext], None]:
    def body(ctx: RunContext) -> None:
        with ctx.step("model"):
            ctx.wait(gate)

    return body


def test_a_run_past_its_deadline_ends_interrupted_timeout_with_origin_deadline(
    supervisor: Supervisor, events: EventLog
) -> None:
    never = Gate("never")
    handle = supervisor.start_run(_held(never), session="s", directory="/w/a", deadline_ms=50)

    snapshot = handle.wait(timeout=BOUND_S)

    assert snapshot is not None
    assert_ended(
        snapshot, Outcome.INTERRUPTED, reason=InterruptReason.TIMEOUT, origin=DEADLINE_ORIGIN, action_id=None
    )
    assert snapshot.deadline_ms == 50
    finished = events.wait_for("run.finished", run_id=handle.run_id, timeout=BOUND_S)
    assert isinstance(finished, RunFinished)
    assert (finished.reason, finished.origin) == (InterruptReason.TIMEOUT, DEADLINE_ORIGIN)


def test_a_run_that_ends_before_its_deadline_completes_and_its_timer_is_cancelled(
    supervisor: Supervisor,
) -> None:
    handle = supervisor.start_run(lambda ctx: None, session="s", directory="/w/a", deadline_ms=600_000)

    snapshot = handle.wait(timeout=BOUND_S)

    assert snapshot is not None and snapshot.outcome is Outcome.COMPLETED
    _barrier(supervisor)
    assert supervisor.timers.pending() == 0  # disarmed: no ten-minute entry left behind


def test_a_hundred_runs_with_deadlines_share_one_timer_thread(
    supervisor: Supervisor, events: EventLog
) -> None:
    gate = Gate("g")
    handles = [
        supervisor.start_run(_held(gate), session=f"s{n}", directory="/w/a", deadline_ms=600_000)
        for n in range(100)
    ]
    for handle in handles:
        # A body's first step is handled after the batch that armed its deadline.
        events.wait_for("run.step.started", run_id=handle.run_id, timeout=BOUND_S)
    assert supervisor.timers.pending() == 100
    names = [t.name for t in supervisor.threads.alive() if t.name == "run-supervisor-timer"]
    assert names == ["run-supervisor-timer"]

    gate.open()
    for handle in handles:
        snapshot = handle.wait(timeout=BOUND_S)
        assert snapshot is not None and snapshot.outcome is Outcome.COMPLETED
    _barrier(supervisor)
    assert supervisor.timers.pending() == 0


def test_a_deadline_that_is_not_a_positive_int_is_refused_naming_the_argument(supervisor: Supervisor) -> None:
    for bad in (0, -1, 1.5, "10", True, 10**12):
        with pytest.raises(InvalidRequest, match="deadline_ms"):
            supervisor.start_run(lambda ctx: None, session="s", directory="/w/a", deadline_ms=bad)  # type: ignore[arg-type]
    for bad in (0, -1, 86_400_001):  # one range in one message, whichever end is missed (as api.md says)
        with pytest.raises(InvalidRequest, match=r"must be between 1 and 86400000 ms \(None: no deadline\)"):
            supervisor.start_run(lambda ctx: None, session="s", directory="/w/a", deadline_ms=bad)
        with pytest.raises(InvalidRequest, match=r"stall_after_ms must be between 1 and 86400000 ms"):
            supervisor.start_run(lambda ctx: None, session="s", directory="/w/a", stall_after_ms=bad)


def test_a_deadline_interrupt_is_not_a_lifecycle_close_nor_a_lease_timeout(
    supervisor: Supervisor, events: EventLog
) -> None:
    # Three ways a run ends early, told apart by reason and origin (docs/api.md, "Why a run ended").
    never = Gate("never")
    late = supervisor.start_run(_held(never), session="s1", directory="/w/a", deadline_ms=30)
    closed = supervisor.start_run(_held(never), session="s2", directory="/w/b")
    late_end = late.wait(timeout=BOUND_S)
    supervisor.close(
        CloseAction.DISPOSE, mode=CloseMode.USER_CONFIRMED_INTERRUPT, origin="reload", directory="/w/b"
    )
    closed_end = closed.wait(timeout=BOUND_S)

    assert late_end is not None and closed_end is not None
    assert (late_end.reason, late_end.origin, late_end.action_id) == (
        InterruptReason.TIMEOUT,
        "deadline",
        None,
    )
    assert closed_end.reason is InterruptReason.LIFECYCLE_INTERRUPT
    assert closed_end.origin == "reload" and closed_end.action_id is not None


def test_the_async_facade_takes_a_deadline_too() -> None:
    async def main() -> None:
        async with AsyncSupervisor.start(directories=["/w/a"]) as supervisor:
            never = Gate("never")

            async def body(ctx: object) -> None:
                await ctx.wait(never)  # type: ignore[attr-defined]

            handle = await supervisor.start_run(body, session="s", directory="/w/a", deadline_ms=40)
            snapshot = await handle.wait(timeout=BOUND_S)
            assert snapshot is not None
            assert (snapshot.reason, snapshot.origin) == (InterruptReason.TIMEOUT, DEADLINE_ORIGIN)
            with pytest.raises(InvalidRequest, match="deadline_ms"):
                await supervisor.start_run(body, session="s", directory="/w/a", deadline_ms=0)

    asyncio.run(main())


def test_a_deadline_given_over_http_interrupts_the_external_run_and_tells_its_client() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            answer = await client.post(
                "/runs", json={"run_id": "r1", "session": "s1", "directory": "/w/a", "deadline_ms": 100}
            )
            assert answer.status_code == 201, answer.text
            started = await events.until(of_type("run.started", run_id="r1"))
            assert started.data["deadline_ms"] == 100
            notice = await events.until(of_type("external.interrupt", run_id="r1"))
            assert (notice.data["reason"], notice.data["origin"]) == ("timeout", "deadline")
            assert (await client.post("/runs/r1/reports", json={"type": "end"})).status_code == 200
            finished = await events.until(of_type("run.finished", run_id="r1"))
            assert (finished.data["reason"], finished.data["origin"]) == ("timeout", "deadline")
            bad = await client.post(
                "/runs", json={"run_id": "r2", "session": "s2", "directory": "/w/a", "deadline_ms": 0}
            )
            assert bad.status_code == 422 and "deadline_ms" in bad.text

    with served() as srv:
        asyncio.run(asyncio.wait_for(scenario(srv), 45))
