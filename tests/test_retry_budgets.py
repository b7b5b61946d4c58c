"""Bounded retries and truthful statuses: a run's retry budget (its own, else the supervisor's)
bounds its retries and their total backoff; the retry past it interrupts the run (reason
``timeout``, origin ``retry_budget``); ``run.finished`` carries the last retry's attempt and message
whenever the run ended during or after a retry; a stop says nothing until the run's end (no
``busy`` between a stop and ``idle``)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest
from run_support import assert_ended

from run_supervisor.actors import Gate, InvalidRequest, RunContext, Supervisor
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import (
    RETRY_BUDGET_ORIGIN,
    InterruptReason,
    Outcome,
    RejectCode,
    RetryBudget,
    RetryReport,
    RunFinished,
    SessionStatus,
    SessionStatusChanged,
    SignalInterrupt,
    StartRun,
    StepKind,
    StepReport,
    SupervisorCore,
)
from run_supervisor.protocol.testing import CoreShell, InvariantChecker, InvariantViolation


def _retry(shell: CoreShell, attempt: int, run: str = "r", backoff_ms: int | None = None) -> None:
    shell.report(
        RetryReport(run_id=run, attempt=attempt, message=f"529 overloaded #{attempt}", backoff_ms=backoff_ms)
    )


RETRIED_TWICE = [SessionStatus.BUSY, SessionStatus.RETRY, SessionStatus.RETRY, SessionStatus.IDLE]
"""A session's statuses through a run whose first two retries were announced, then its end."""


def _statuses(shell: CoreShell, session: str = "s") -> list[SessionStatus]:
    return [e.status for e in shell.of(SessionStatusChanged, session=session)]


def test_a_run_that_exhausts_its_attempts_is_interrupted_timeout_retry_budget_with_the_last_error() -> None:
    shell = CoreShell("/w/a")
    shell.request(StartRun(run_id="r", session="s", directory="/w/a", retry_budget=RetryBudget(attempts=2)))
    _retry(shell, 1)
    _retry(shell, 2)
    assert shell.commands(SignalInterrupt) == []

    _retry(shell, 3)  # the third retry is past the budget: not announced, the run is stopped

    assert shell.commands(SignalInterrupt) == [SignalInterrupt(run_id="r", reason=InterruptReason.TIMEOUT)]
    shell.finish("r")
    finished = shell.finished("r")
    assert_ended(
        finished,
        Outcome.INTERRUPTED,
        reason=InterruptReason.TIMEOUT,
        origin=RETRY_BUDGET_ORIGIN,
        action_id=None,
    )
    assert (finished.retry_attempt, finished.retry_message) == (3, "529 overloaded #3")
    assert _statuses(shell) == RETRIED_TWICE


def test_the_supervisors_budget_bounds_total_backoff_when_the_run_names_none() -> None:
    shell = CoreShell("/w/a", core=SupervisorCore(retry_budget=RetryBudget(backoff_ms=1_000)))
    shell.start("r", session="s")
    _retry(shell, 1, backoff_ms=400)
    _retry(shell, 2, backoff_ms=600)  # 1000 in all: still within
    assert shell.commands(SignalInterrupt) == []
    _retry(shell, 3, backoff_ms=1)
    assert [c.run_id for c in shell.commands(SignalInterrupt)] == ["r"]


def test_a_runs_own_budget_replaces_the_supervisors() -> None:
    shell = CoreShell("/w/a", core=SupervisorCore(retry_budget=RetryBudget(attempts=0)))
    shell.request(StartRun(run_id="r", session="s", directory="/w/a", retry_budget=RetryBudget(attempts=5)))
    _retry(shell, 1)
    assert shell.commands(SignalInterrupt) == []
    shell.start("other", session="t")
    _retry(shell, 1, run="other")  # the supervisor's budget allows no retry at all
    assert [c.run_id for c in shell.commands(SignalInterrupt)] == ["other"]


def test_a_run_stopped_during_a_backoff_keeps_the_providers_error_on_its_finish() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    _retry(shell, 1)
    _retry(shell, 2)
    shell.cancel("r")
    shell.finish("r")
    finished = shell.finished("r")
    assert (finished.reason, finished.retry_attempt, finished.retry_message) == (
        InterruptReason.USER_CANCEL,
        2,
        "529 overloaded #2",
    )
    assert _statuses(shell) == RETRIED_TWICE


def test_a_run_that_retried_then_went_on_still_says_its_last_retry_when_it_ends() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    _retry(shell, 1)
    shell.report(StepReport(run_id="r", step="model", kind=StepKind.MODEL, finished=False))
    shell.finish("r", error="still overloaded")
    finished = shell.finished("r")
    assert (finished.outcome, finished.retry_attempt) == (Outcome.FAILED, 1)
    snapshot = shell.core.run_snapshot("r")
    assert snapshot is not None and snapshot.retry_message == "529 overloaded #1"


def test_a_run_that_never_retried_ends_with_no_retry_details() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    shell.finish("r")
    assert (shell.finished("r").retry_attempt, shell.finished("r").retry_message) == (None, None)


def test_a_stop_during_a_retry_hands_over_to_the_next_run_with_one_busy() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    shell.start("next", session="s")
    _retry(shell, 1)
    shell.cancel("r")
    assert _statuses(shell)[-1] is SessionStatus.RETRY
    shell.finish("r")
    assert _statuses(shell) == [SessionStatus.BUSY, SessionStatus.RETRY, SessionStatus.BUSY]


def test_a_negative_budget_is_rejected() -> None:
    shell = CoreShell("/w/a")
    answer = shell.request(
        StartRun(run_id="r", session="s", directory="/w/a", retry_budget=RetryBudget(attempts=-1))
    )
    assert answer is not None and answer.code is RejectCode.INVALID_REQUEST
    assert "retry_budget.attempts" in (answer.error or "")
    with pytest.raises(ValueError, match="backoff_ms"):
        SupervisorCore(retry_budget=RetryBudget(backoff_ms=-1))


def test_the_checker_refuses_a_busy_between_a_stop_and_idle() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    _retry(shell, 1)
    shell.cancel("r")
    checker = InvariantChecker(raise_at_once=True)
    for event in shell.events:
        checker.event(event)
    checker.commands([SignalInterrupt(run_id="r", reason=InterruptReason.USER_CANCEL)])
    busy = SessionStatusChanged(seq=checker.last_seq + 1, session="s", status=SessionStatus.BUSY)
    with pytest.raises(InvariantViolation, match="after its run r was stopped"):
        checker.event(busy)


def test_the_checker_refuses_a_retry_budget_interrupt_without_the_retry_that_exhausted_it() -> None:
    shell = CoreShell("/w/a", core=SupervisorCore(retry_budget=RetryBudget(attempts=0)))
    shell.start("r", session="s")
    _retry(shell, 1)
    shell.finish("r")
    checker = InvariantChecker()
    finished = shell.finished("r")
    for event in shell.events:
        checker.event(msgspec.structs.replace(finished, retry_attempt=None) if event is finished else event)
    assert any("without the retry that exhausted it" in v for v in checker.violations)


# --- the supervisor: a body's ctx.retrying meets the budget ------------------------------------------

BOUND_S = 30.0


def _retries_then_waits(times: int) -> Callable[[RunContext], None]:
    never = Gate("never")

    def body(ctx: RunContext) -> None:
        for attempt in range(1, times + 1):
            ctx.retrying(attempt, f"529 overloaded #{attempt}")
        ctx.wait(never)  # the backoff: woken by the interrupt

    return body


@pytest.mark.run_supervisor(directories=["/w/a"], retry_attempts=2)
def test_a_body_retrying_past_the_configs_budget_ends_timeout_retry_budget_with_the_providers_error(
    supervisor: Supervisor, events: EventLog
) -> None:
    handle = supervisor.start_run(_retries_then_waits(3), session="s", directory="/w/a")

    snapshot = handle.wait(timeout=BOUND_S)

    assert_ended(snapshot, Outcome.INTERRUPTED, reason=InterruptReason.TIMEOUT, origin=RETRY_BUDGET_ORIGIN)
    finished = events.wait_for("run.finished", run_id=handle.run_id, timeout=BOUND_S)
    assert isinstance(finished, RunFinished)
    assert (finished.retry_attempt, finished.retry_message) == (3, "529 overloaded #3")
    events.wait_for("session.status", session="s", status="idle", timeout=BOUND_S)
    statuses = [
        e.status for e in events.of("session.status", session="s") if isinstance(e, SessionStatusChanged)
    ]
    assert statuses == RETRIED_TWICE


def test_a_runs_own_budget_is_given_to_start_run_and_checked(supervisor: Supervisor) -> None:
    handle = supervisor.start_run(
        _retries_then_waits(1), session="s", directory="/w/a", retry_budget=RetryBudget(attempts=0)
    )
    snapshot = handle.wait(timeout=BOUND_S)
    assert (snapshot.origin, snapshot.retry_attempt) == (RETRY_BUDGET_ORIGIN, 1)
    with pytest.raises(InvalidRequest, match=r"retry_budget\.attempts"):
        supervisor.start_run(
            lambda ctx: None, session="t", directory="/w/a", retry_budget=RetryBudget(attempts=-1)
        )
