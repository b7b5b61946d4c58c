"""The one oracle (``run_supervisor.protocol.testing``): the invariant checker flags each broken
invariant in a hand-made stream, and lets every stream the core really makes pass."""

from __future__ import annotations

from typing import Any

import pytest

from run_supervisor import (
    CloseAction,
    CloseMode,
    CloseOutcome,
    CloseResult,
    Event,
    InterruptReason,
    Outcome,
    RequestOutcome,
    RequestResult,
    SessionStatus,
)
from run_supervisor.protocol import (
    ActionResult,
    CancelRun,
    CloseRequest,
    InstanceClosed,
    InstanceStarted,
    LifecycleCompleted,
    LifecycleRequested,
    RunFinished,
    RunQueued,
    RunStarted,
    SessionStatusChanged,
    StartRun,
)
from run_supervisor.protocol.testing import CoreShell, InvariantChecker, InvariantViolation

A, B = "/w/a", "/w/b"
MAINTENANCE, CONFIRMED = CloseMode.MAINTENANCE, CloseMode.USER_CONFIRMED_INTERRUPT


class Stream:
    """Builds events with consecutive ``seq`` and feeds them to a checker that collects."""

    def __init__(self) -> None:
        self.checker = InvariantChecker()
        self.seq = 0
        self.sessions: dict[str, str] = {}  # run -> the session it started in

    def __call__(self, kind: type[Any], **fields: Any) -> Stream:
        self.seq += 1
        event: Event = kind(seq=self.seq, **fields)
        self.checker.event(event)
        return self

    def loaded(self, directory: str = A, generation: int = 1) -> Stream:
        return self(InstanceStarted, directory=directory, generation=generation)

    def started(self, run: str, session: str = "s1", directory: str = A, generation: int = 1) -> Stream:
        self.sessions[run] = session
        self(SessionStatusChanged, session=session, status=SessionStatus.BUSY)
        return self(RunStarted, run_id=run, session=session, directory=directory, generation=generation)

    def finished(self, run: str, outcome: Outcome = Outcome.COMPLETED, **fields: Any) -> Stream:
        ending: dict[str, Any] = {"reason": None, "origin": None, "action_id": None, "phase": None}
        ending.update(fields)
        if outcome is Outcome.FAILED:
            ending.setdefault("error", "boom")
        ending.setdefault("session", self.sessions.get(run, "s1"))
        return self(RunFinished, run_id=run, outcome=outcome, **ending)

    def requested(self, action: str, do: CloseAction, mode: CloseMode, *directories: str) -> Stream:
        return self(
            LifecycleRequested, action_id=action, do=do, mode=mode, origin="test", directories=directories
        )

    @property
    def violations(self) -> list[str]:
        return self.checker.violations


def flagged(stream: Stream, words: str) -> None:
    assert any(words in text for text in stream.violations), stream.violations


def test_a_seq_that_does_not_grow_by_one_is_flagged() -> None:
    stream = Stream().loaded()
    stream.seq = 5
    stream.loaded(B)
    flagged(stream, "seq 6 after 1")


def test_a_run_started_on_a_retired_instance_is_flagged() -> None:
    stream = Stream().loaded().requested("lc-1", CloseAction.DISPOSE, MAINTENANCE, A)
    stream.started("r1")
    flagged(stream, "not its directory's live generation (retired)")


def test_a_maintenance_close_that_interrupts_a_run_is_flagged() -> None:
    stream = Stream().loaded().started("r1").requested("lc-1", CloseAction.DISPOSE, MAINTENANCE, A)
    stream.finished(
        "r1", Outcome.INTERRUPTED, reason=InterruptReason.LIFECYCLE_INTERRUPT, origin="test", action_id="lc-1"
    )
    flagged(stream, "not a confirmed close")
    flagged(stream, "interrupted by the maintenance close lc-1")


def test_a_close_that_completes_while_a_run_of_its_request_is_active_is_flagged() -> None:
    stream = Stream().loaded().started("r1").requested("lc-1", CloseAction.DISPOSE, MAINTENANCE, A)
    stream(LifecycleCompleted, action_id="lc-1")
    flagged(stream, "completed while ['r1'], there at its request, are active")
    flagged(stream, "completed while [('/w/a', 1)] it covered are open")


def test_a_run_that_started_after_the_close_does_not_hold_it() -> None:
    stream = Stream().loaded().requested("lc-1", CloseAction.RELOAD, MAINTENANCE, A)
    stream(InstanceClosed, directory=A, generation=1).loaded(A, 2).started("r1", generation=2)
    stream(LifecycleCompleted, action_id="lc-1")
    assert stream.violations == []


def test_a_second_lifecycle_completed_is_flagged() -> None:
    stream = Stream().requested("lc-1", CloseAction.DISPOSE_ALL, MAINTENANCE)
    stream(LifecycleCompleted, action_id="lc-1")(LifecycleCompleted, action_id="lc-1")
    flagged(stream, "lc-1 completed 2 times, requested 1")


def test_an_interrupt_without_a_reason_and_an_ending_with_one_are_flagged() -> None:
    stream = Stream().loaded().started("r1").finished("r1", Outcome.INTERRUPTED)
    flagged(stream, "interrupted without a reason")
    stream = Stream().loaded().started("r1").finished("r1", reason=InterruptReason.USER_CANCEL)
    flagged(stream, "ended completed but names an interrupt")


def test_a_session_with_two_active_runs_is_flagged() -> None:
    stream = Stream().loaded().started("r1")
    stream(RunStarted, run_id="r2", session="s1", directory=A, generation=1)
    flagged(stream, "session s1 starts r2 while r1 is active")


def test_a_queued_run_that_jumps_its_queue_is_flagged() -> None:
    stream = Stream().loaded().started("r1")
    stream(RunQueued, run_id="r2", session="s1")(RunQueued, run_id="r3", session="s1").finished("r1")
    stream(RunStarted, run_id="r3", session="s1", directory=A, generation=1)
    flagged(stream, "r3 started out of its session's queue order ['r2', 'r3']")


def test_a_shutdown_that_completes_with_a_run_active_is_flagged() -> None:
    stream = Stream().started("r1", directory=B, generation=1)
    stream.requested("lc-1", CloseAction.SHUTDOWN, CloseMode.SHUTDOWN)
    stream(LifecycleCompleted, action_id="lc-1")
    flagged(stream, "the shutdown lc-1 completed while ['r1'] had not finished")


def test_nothing_starts_after_shutdown() -> None:
    stream = Stream().requested("lc-1", CloseAction.SHUTDOWN, CloseMode.SHUTDOWN).loaded()
    stream.started("r1")
    flagged(stream, "started after shutdown was requested")
    flagged(stream, "r1 started or queued after shutdown")


def test_an_action_pending_at_shutdown_must_say_it_was_superseded() -> None:
    stream = Stream().loaded().started("r1").requested("lc-1", CloseAction.DISPOSE, MAINTENANCE, A)
    stream.requested("lc-2", CloseAction.SHUTDOWN, CloseMode.SHUTDOWN, A)
    stream.finished(
        "r1", Outcome.INTERRUPTED, reason=InterruptReason.SHUTDOWN, origin="shutdown", action_id="lc-2"
    )
    stream(InstanceClosed, directory=A, generation=1)(LifecycleCompleted, action_id="lc-1")
    flagged(stream, "lc-1 completed superseded_by None, not lc-2")


def test_every_request_is_answered_exactly_once() -> None:
    checker = InvariantChecker()
    request = StartRun(run_id="r1", session="s1", directory=A)
    checker.request("t1", request)
    checker.request("t2", CancelRun(run_id="r1"))
    checker.answer("t1", RequestOutcome(result=RequestResult.OK))
    checker.answer("t1", RequestOutcome(result=RequestResult.OK))
    assert any("'t1' answered 2 times" in text for text in checker.violations)
    with pytest.raises(InvariantViolation, match="requests never answered: \\['t2'\\]"):
        checker.finish(require_shutdown=False)


def test_a_maintenance_answer_that_interrupted_runs_is_flagged() -> None:
    checker = InvariantChecker()
    checker.request("t1", _close(CloseAction.DISPOSE_ALL, MAINTENANCE))
    checker.answer(
        "t1", CloseOutcome(result=CloseResult.INTERRUPTED, action_id="lc-1", interrupted_runs=("r1",))
    )
    assert any("a maintenance dispose_all answered interrupted" in text for text in checker.violations)


def test_an_action_result_that_its_mode_cannot_give_is_flagged() -> None:
    stream = Stream().requested("lc-1", CloseAction.DISPOSE_ALL, MAINTENANCE)
    stream(ActionResult, action_id="lc-1", result=CloseResult.INTERRUPTED)
    flagged(stream, "lc-1 (maintenance) resulted interrupted")


@pytest.mark.parametrize(
    ("said", "words"),
    [
        ({"kind": LifecycleCompleted}, "lc-9 completed but was never requested"),
        (
            {"kind": ActionResult, "result": CloseResult.COMPLETED},
            "action.result of lc-9, which was never requested",
        ),
    ],
    ids=["completed", "action.result"],
)
def test_an_end_of_an_action_never_requested_is_flagged(said: dict[str, Any], words: str) -> None:
    fields = dict(said)
    stream = Stream()(fields.pop("kind"), action_id="lc-9", **fields)
    flagged(stream, words)


def test_a_whole_life_of_the_core_passes_every_check() -> None:
    shell = CoreShell(A, B)
    shell.start("r1", session="s1", directory=A)
    shell.start("r2", session="s1", directory=B)
    shell.start("r3", session="s2", directory=B)
    deferred = shell.close(CloseAction.DISPOSE, A, mode=MAINTENANCE)
    assert deferred.result is CloseResult.DEFERRED
    interrupted = shell.close(CloseAction.RELOAD, B, mode=CONFIRMED)
    assert interrupted.interrupted_runs == ("r3",)
    shell.cancel("r2")
    shell.finish("r3")
    shell.finish("r1")
    shell.shutdown(InterruptReason.TEST_TEARDOWN)
    shell.shutdown()
    shell.checker.finish()
    assert shell.checker.violations == []


def _close(do: CloseAction, mode: CloseMode, *directories: str) -> CloseRequest:
    return CloseRequest(do=do, mode=mode, origin="test", directories=directories)
