"""Deadlines and retries, the part of the decision core that reacts to time passing -- without a clock.

**Deadlines.** A run started with ``deadline_ms`` gets an ``ArmDeadline`` command when it becomes
active (``run.started``: time spent queued does not count); the shell arms its shared timer and,
when it fires, reports ``DeadlineExpired``. ``protocol._rules.DEADLINE_EXPIRY`` says what that does
by the run's state: an active run is interrupted with reason ``timeout`` and origin ``deadline``
(its children with it, as for any interrupt); a run already interrupting or finished is left alone.
The run's end sends ``DisarmDeadline``.

**Retries.** A body reports that it is retrying (``RetryReport``: attempt, message, next attempt
time); its session's status becomes ``retry`` with those (``session.status``), and goes back to
``busy`` at the run's next progress (a step, a tool-part change, an ask, a heartbeat), and to
``idle`` (or ``busy`` for the next queued run) at its end. An interrupt says nothing (``STOP``): a
run stopped during a backoff shows ``retry -> idle``, never ``busy`` after the stop. The moves are
``protocol._rules.SESSION_TRANSITIONS``.

**Retry budgets.** A run's budget (``StartRun.retry_budget``, else ``SupervisorCore(retry_budget=)``)
bounds its retries and their total backoff: the report that exceeds it is not announced; the run is
interrupted with reason ``timeout`` and origin ``retry_budget`` (``RETRY_BUDGET_REASON``,
``RETRY_BUDGET_ORIGIN``). Every accepted retry is remembered on the run: ``run.finished`` carries the
last one's attempt and message.

``DeadlinesMixin`` is one part of ``SupervisorCore`` (it shares the core's tables).
"""

from __future__ import annotations

from run_supervisor.protocol._commands import ArmDeadline, DisarmDeadline
from run_supervisor.protocol._core_state import CoreState
from run_supervisor.protocol._enums import RunState, SessionStatus
from run_supervisor.protocol._events import SessionStatusChanged
from run_supervisor.protocol._records import _Run, _Session
from run_supervisor.protocol._requests import DeadlineExpired, RetryReport
from run_supervisor.protocol._rules import (
    DEADLINE_EXPIRY,
    DEADLINE_ORIGIN,
    DEADLINE_REASON,
    RETRY_BUDGET_ORIGIN,
    RETRY_BUDGET_REASON,
    RETRY_REPORTED_IN,
    RunTrigger,
    SessionTrigger,
    next_session_status,
    retry_budget_exhausted,
    session_status_announced,
)

__all__ = ["DeadlinesMixin"]


class DeadlinesMixin(CoreState):
    """Run deadlines and the session's retry status. Mixed into ``SupervisorCore``; what it uses of
    the rest of the core is ``CoreState``'s."""

    # --- deadlines -----------------------------------------------------------------------------

    def _arm_deadline(self, run: _Run) -> None:
        """``run`` just became active: its deadline starts counting now."""
        if run.deadline_ms is not None:
            self._out.append(ArmDeadline(run_id=run.id, deadline_ms=run.deadline_ms))

    def _disarm_deadline(self, run: _Run, was_active: bool) -> None:
        """``run`` finished: a deadline that was armed is not needed any more."""
        if run.deadline_ms is not None and was_active:
            self._out.append(DisarmDeadline(run_id=run.id))

    def _deadline_expired(self, report: DeadlineExpired) -> None:
        run = self._runs.get(report.run_id)
        trigger = DEADLINE_EXPIRY[run.state] if run is not None and run.deadline_ms is not None else None
        if run is None or trigger is None:
            self._ignore()  # finished, forgotten, or already being interrupted: the first reason stands
            return
        assert trigger is RunTrigger.INTERRUPT
        self._interrupt(run, DEADLINE_REASON, DEADLINE_ORIGIN, None)

    # --- the session's status: retries -----------------------------------------------------------

    @staticmethod
    def _status_of(session: _Session) -> SessionStatus:
        if session.retry is not None:
            return SessionStatus.RETRY
        return SessionStatus.IDLE if session.active is None else SessionStatus.BUSY

    def _retry(self, report: RetryReport) -> None:
        run = self._runs.get(report.run_id)
        session = self._sessions.get(run.session) if run is not None else None
        if (
            run is None
            or session is None
            or run.state not in RETRY_REPORTED_IN
            or session.active != run.id
            or report.attempt < 1
        ):
            self._ignore()  # late (interrupting, finished) or malformed: no attempt will come
            return
        self._touch(run)
        run.last_retry = (report.attempt, report.message)
        run.backoff_total_ms += max(0, report.backoff_ms or 0)
        budget = run.retry_budget if run.retry_budget is not None else self.retry_budget
        if budget is not None and retry_budget_exhausted(*budget, report.attempt, run.backoff_total_ms):
            self._interrupt(run, RETRY_BUDGET_REASON, RETRY_BUDGET_ORIGIN, None)
            return
        self._move_session(session, SessionTrigger.RETRY, (report.attempt, report.message, report.next_at_ms))

    def _progressed(self, run: _Run) -> None:
        """The run went on (a step, a tool-part change, an ask, a heartbeat): a retry it reported is
        over. Once it is interrupted nothing more is announced (``STOP``)."""
        session = self._sessions.get(run.session)
        if session is None or session.active != run.id or session.retry is None:
            return
        # An interrupted run's session says nothing until the run's end (``STOP``).
        trigger = SessionTrigger.PROGRESS if run.state is RunState.ACTIVE else SessionTrigger.STOP
        self._move_session(session, trigger, session.retry if trigger is SessionTrigger.STOP else None)

    def _move_session(
        self, session: _Session, trigger: SessionTrigger, retry: tuple[int, str, int | None] | None
    ) -> None:
        old = self._status_of(session)
        new = next_session_status(old, trigger)
        self._touch(session)
        session.retry = retry if new is SessionStatus.RETRY else None
        if session_status_announced(old, new, trigger):
            attempt, message, next_at = session.retry if session.retry is not None else (None, None, None)
            self._emit(
                SessionStatusChanged(
                    seq=self._next_seq(),
                    session=session.id,
                    status=new,
                    attempt=attempt,
                    message=message,
                    next_at_ms=next_at,
                )
            )
