"""Abandon on a grace for every interrupt, not only shutdown: a cancel, a decline, a confirmed close
and a deadline give the interrupted body a grace (the request's, else the run's, else the
supervisor's); past it the run is reported ``interrupted`` with its reason and ``abandoned = true``,
its session moves on, its cards settle, and the body's later reports are refused. The core stays
clock-free: ``StartInterruptGrace`` out, ``InterruptGraceExpired`` in."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from run_support import assert_ended

from run_supervisor.actors import InvalidRequest, RunContext, Supervisor
from run_supervisor.protocol import (
    AbandonRun,
    CancelRun,
    CloseAction,
    CloseMode,
    CloseRequest,
    ConfirmClose,
    DeadlineExpired,
    InterruptReason,
    LifecycleCompleted,
    Outcome,
    PartReport,
    PartState,
    Phase,
    RejectCode,
    RunFinished,
    RunStarted,
    SessionStatus,
    SessionStatusChanged,
    StartInterruptGrace,
    StartRun,
    StepKind,
    StepReport,
    StopInterruptGrace,
    SupervisorCore,
)
from run_supervisor.protocol.testing import CoreShell, InvariantChecker, InvariantViolation


def _shell(grace_ms: int | None = 100) -> CoreShell:
    return CoreShell("/w/a", core=SupervisorCore(interrupt_grace_ms=grace_ms))


def test_a_cancelled_body_ignoring_its_interrupt_is_abandoned_past_its_grace_and_its_session_moves_on() -> (
    None
):
    shell = _shell(100)
    shell.start("r1", session="s")
    shell.start("r2", session="s")  # queued behind r1
    shell.tool("r1")

    shell.cancel("r1")
    batch = shell.last
    assert shell.commands(StartInterruptGrace, batch) == [StartInterruptGrace(run_id="r1", grace_ms=100)]
    assert shell.of(RunStarted, run_id="r2") == []  # the body still runs: r1 holds its session

    batch = shell.expire_grace("r1")

    assert shell.commands(AbandonRun, batch) == [AbandonRun(run_id="r1")]
    assert shell.commands(StopInterruptGrace, batch) == [StopInterruptGrace(run_id="r1")]
    finished = shell.finished("r1")
    assert_ended(
        finished, Outcome.INTERRUPTED, reason=InterruptReason.USER_CANCEL, origin="user", abandoned=True
    )
    (part,) = finished.parts
    assert (part.state, part.phase, part.tool_started) == (PartState.INTERRUPTED, Phase.RUNNING, True)
    assert shell.one(RunStarted, run_id="r2").session == "s"  # the next queued run starts
    assert shell.core.statistics().runs_abandoned == 1


def test_an_abandoned_body_s_later_reports_are_refused() -> None:
    shell = _shell(0)
    shell.start("r1", session="s")
    shell.cancel("r1")
    shell.expire_grace("r1")
    ignored = shell.core.statistics().reports_ignored

    shell.report(StepReport(run_id="r1", step="late", kind=StepKind.MODEL, finished=False))
    shell.report(PartReport(run_id="r1", tool="bash", state=PartState.PENDING))
    shell.finish("r1")  # the body finally returns

    assert shell.core.statistics().reports_ignored == ignored + 3
    echo = shell.core.report_echo("r1")
    assert echo is not None and echo.refused == 3
    assert len(shell.of(RunFinished, run_id="r1")) == 1  # reported finished once


def test_an_abandoned_run_s_idle_session_says_idle_and_nothing_busy_after_the_stop() -> None:
    shell = _shell(50)
    shell.start("r1", session="s")
    shell.cancel("r1")
    shell.expire_grace("r1")
    statuses = [e.status for e in shell.of(SessionStatusChanged, session="s")]
    assert statuses == [SessionStatus.BUSY, SessionStatus.IDLE]
    snapshot = shell.core.session_snapshot("s")
    assert snapshot is not None and snapshot.active is None


def test_a_body_that_stops_within_its_grace_is_not_abandoned_and_a_late_expiry_is_ignored() -> None:
    shell = _shell(100)
    shell.start("r1", session="s")
    shell.cancel("r1")

    batch = shell.finish("r1")
    assert shell.commands(StopInterruptGrace, batch) == [StopInterruptGrace(run_id="r1")]
    assert shell.finished("r1").abandoned is False

    ignored = shell.core.statistics().reports_ignored
    assert shell.expire_grace("r1") == []
    assert shell.core.statistics().reports_ignored == ignored + 1
    assert shell.core.statistics().runs_abandoned == 0


def test_the_cancel_s_grace_wins_over_the_run_s_which_wins_over_the_supervisor_s() -> None:
    shell = _shell(100)
    shell.request(StartRun(run_id="own", session="a", directory="/w/a", interrupt_grace_ms=7))
    shell.request(StartRun(run_id="call", session="b", directory="/w/a", interrupt_grace_ms=7))
    shell.start("default", session="c")

    shell.cancel("own")
    shell.request(CancelRun(run_id="call", grace_ms=5))
    shell.cancel("default")

    assert shell.commands(StartInterruptGrace) == [
        StartInterruptGrace(run_id="own", grace_ms=7),
        StartInterruptGrace(run_id="call", grace_ms=5),
        StartInterruptGrace(run_id="default", grace_ms=100),
    ]


def test_without_any_grace_an_interrupted_body_is_waited_for() -> None:
    shell = _shell(None)
    shell.start("r1", session="s")
    shell.cancel("r1")
    assert shell.commands(StartInterruptGrace) == []
    shell.finish("r1")
    assert shell.finished("r1").abandoned is False


def test_a_confirmed_close_abandons_the_runs_it_interrupted_past_their_grace_and_completes() -> None:
    shell = _shell(None)
    shell.start("r1", session="s")
    shell.request(
        CloseRequest(
            do=CloseAction.RELOAD,
            mode=CloseMode.USER_CONFIRMED_INTERRUPT,
            origin="settings",
            directories=("/w/a",),
            grace_ms=30,
        )
    )
    assert shell.commands(StartInterruptGrace) == [StartInterruptGrace(run_id="r1", grace_ms=30)]

    shell.expire_grace("r1")

    assert_ended(
        shell.finished("r1"), Outcome.INTERRUPTED, reason=InterruptReason.LIFECYCLE_INTERRUPT, abandoned=True
    )
    (completed,) = shell.of(LifecycleCompleted)
    assert completed.abandoned_runs == ("r1",)


def test_a_confirm_close_gives_the_runs_it_interrupts_its_own_grace() -> None:
    shell = _shell(None)
    shell.start("r1", session="s")
    outcome = shell.close(CloseAction.DISPOSE, "/w/a", mode=CloseMode.MAINTENANCE)
    shell.request(ConfirmClose(action_id=outcome.action_id, grace_ms=12))
    assert shell.commands(StartInterruptGrace) == [StartInterruptGrace(run_id="r1", grace_ms=12)]
    shell.expire_grace("r1")
    assert shell.finished("r1").abandoned is True
    assert shell.of(LifecycleCompleted)[0].abandoned_runs == ("r1",)


def test_a_run_past_its_deadline_is_abandoned_past_its_own_grace_with_reason_timeout() -> None:
    shell = _shell(None)
    shell.request(StartRun(run_id="r1", session="s", directory="/w/a", deadline_ms=10, interrupt_grace_ms=20))
    shell.report(DeadlineExpired(run_id="r1"))
    assert shell.commands(StartInterruptGrace) == [StartInterruptGrace(run_id="r1", grace_ms=20)]

    shell.expire_grace("r1")

    assert_ended(
        shell.finished("r1"),
        Outcome.INTERRUPTED,
        reason=InterruptReason.TIMEOUT,
        origin="deadline",
        abandoned=True,
    )


def test_a_rejected_permission_gives_the_body_its_grace_too() -> None:
    shell = _shell(40)
    shell.start("r1", session="s")
    shell.ask("r1")
    shell.reply("r1", approve=False)
    assert shell.commands(StartInterruptGrace) == [StartInterruptGrace(run_id="r1", grace_ms=40)]
    shell.expire_grace("r1")
    assert_ended(
        shell.finished("r1"), Outcome.INTERRUPTED, reason=InterruptReason.PERMISSION_REJECTED, abandoned=True
    )


def test_a_shutdown_s_interrupts_wait_for_the_shutdown_s_grace_not_the_run_s() -> None:
    shell = _shell(10)
    shell.start("r1", session="s")
    shell.shutdown(grace_ms=500)
    assert shell.commands(StartInterruptGrace) == []
    shell.expire()
    assert shell.finished("r1").abandoned is True
    assert shell.core.statistics().runs_abandoned == 1


def test_a_cancelled_parent_past_its_grace_is_abandoned_after_its_stuck_children() -> None:
    shell = _shell(25)
    shell.start("parent", session="p")
    shell.start("child", session="c", parent="parent")
    shell.cancel("parent")
    assert [c.run_id for c in shell.commands(StartInterruptGrace)] == ["parent", "child"]

    batch = shell.expire_grace("parent")

    assert shell.commands(AbandonRun, batch) == [AbandonRun(run_id="child"), AbandonRun(run_id="parent")]
    assert shell.finished("child").abandoned and shell.finished("parent").abandoned
    assert shell.expire_grace("child") == []  # its own timer, crossing its end: ignored


def test_a_parent_whose_body_ended_is_not_abandoned_it_finishes_with_its_last_child() -> None:
    shell = _shell(25)
    shell.start("parent", session="p")
    shell.start("child", session="c", parent="parent")
    shell.cancel("parent")
    shell.finish("parent")  # its body stopped: it waits for its child

    assert shell.expire_grace("parent") == []
    shell.expire_grace("child")

    assert shell.finished("child").abandoned is True
    assert shell.finished("parent").abandoned is False


def test_a_negative_grace_is_rejected_naming_the_field() -> None:
    shell = _shell(None)
    answer = shell.request(StartRun(run_id="r1", session="s", directory="/w/a", interrupt_grace_ms=-1))
    assert answer is not None and answer.code is RejectCode.INVALID_REQUEST
    assert "interrupt_grace_ms" in (answer.error or "")
    shell.start("r2", session="s")
    answer = shell.request(CancelRun(run_id="r2", grace_ms=-5))
    assert answer is not None and answer.code is RejectCode.INVALID_REQUEST
    assert "grace_ms" in (answer.error or "")


# --- the supervisor: the shared timer fires, the body's thread is left to end by itself ------------

BOUND_S = 30.0


def _ignoring(release: threading.Event, started: threading.Event) -> Callable[[RunContext], None]:
    """A body that ignores its interrupt (a tool that does not check for cancellation)."""

    def body(ctx: RunContext) -> None:
        started.set()
        release.wait(BOUND_S)

    return body


def test_a_cancelled_body_that_ignores_the_interrupt_frees_its_session_past_its_grace(
    supervisor: Supervisor,
) -> None:
    release, started = threading.Event(), threading.Event()
    try:
        first = supervisor.start_run(
            _ignoring(release, started), session="s", directory="/w/a", interrupt_grace_ms=50
        )
        second = supervisor.start_run(lambda ctx: None, session="s", directory="/w/a")
        assert started.wait(BOUND_S)

        supervisor.cancel(first.run_id)
        snapshot = first.wait(timeout=BOUND_S)

        assert_ended(snapshot, Outcome.INTERRUPTED, reason=InterruptReason.USER_CANCEL, abandoned=True)
        assert second.wait(timeout=BOUND_S).outcome is Outcome.COMPLETED  # the session moved on
        assert supervisor.statistics().runs_abandoned == 1
    finally:
        release.set()  # the abandoned body returns: its thread ends with it


def test_a_cancel_s_own_grace_abandons_under_a_config_that_waits(supervisor: Supervisor) -> None:
    release, started = threading.Event(), threading.Event()
    try:
        handle = supervisor.start_run(_ignoring(release, started), session="s", directory="/w/a")
        assert started.wait(BOUND_S)
        handle.cancel(grace_ms=0)
        assert handle.wait(timeout=BOUND_S).abandoned is True
    finally:
        release.set()


@pytest.mark.run_supervisor(directories=["/w/a"], interrupt_grace_ms=30)
def test_the_config_s_grace_abandons_a_body_that_ignores_its_deadline(supervisor: Supervisor) -> None:
    assert supervisor.config.interrupt_grace_ms == 30
    release, started = threading.Event(), threading.Event()
    try:
        handle = supervisor.start_run(
            _ignoring(release, started), session="s", directory="/w/a", deadline_ms=30
        )
        snapshot = handle.wait(timeout=BOUND_S)
        assert (snapshot.reason, snapshot.origin, snapshot.abandoned) == (
            InterruptReason.TIMEOUT,
            "deadline",
            True,
        )
    finally:
        release.set()


def test_a_grace_that_is_not_a_non_negative_int_is_refused_naming_the_argument(
    supervisor: Supervisor,
) -> None:
    with pytest.raises(InvalidRequest, match="interrupt_grace_ms"):
        supervisor.start_run(lambda ctx: None, session="s", directory="/w/a", interrupt_grace_ms=-1)
    handle = supervisor.start_run(lambda ctx: None, session="t", directory="/w/a")
    with pytest.raises(InvalidRequest, match="grace_ms"):
        supervisor.cancel(handle.run_id, grace_ms=1.5)  # type: ignore[arg-type]
    handle.wait(timeout=BOUND_S)


def test_the_checker_refuses_an_abandon_that_no_grace_allowed() -> None:
    checker = InvariantChecker(raise_at_once=True)
    shell = CoreShell("/w/a", checker=InvariantChecker())
    shell.start("r1", session="s")
    shell.cancel("r1")
    for command in shell.log:
        checker.commands([command])
    with pytest.raises(InvariantViolation, match="abandoned without an interrupt and an expired grace"):
        checker.commands([AbandonRun(run_id="r1")])
