"""Progress, stalls and the one-request confirm: the part of the decision core for progress and stalls.

The core never reads a clock. The shell records when each run last made progress and, when a run
has made none for its stall setting, reports ``NoProgress``; the core flags the run stalled
(``run.stalled``) if it is active and waits for nobody (``protocol._rules.stall_applies``): not for
the user (an open ask), not for its children (its body ended, or a child is active and not flagged
stalled), not for an announced retry's next attempt (``retry_waiting``). Any progress -- a step, a
tool-part change, an ask raised or withdrawn, a heartbeat (``Heartbeat``), a retry -- clears the
flag (``run.unstalled``), of the run and of its stalled ancestors (a child's progress, or a child
starting, is progress of its parents too); so does the run's leaving ``active``. The flag's moves
are the table ``protocol._rules.STALL_TRANSITIONS``.

``confirm_close`` (``ConfirmClose``) turns a pending maintenance close into a confirmed one: the
runs it waits for are interrupted with ``lifecycle_interrupt`` and the action's id, by the rule a
``user_confirmed_interrupt`` close follows (``protocol._rules.CONFIRM_RULES``).

``StallsMixin`` is one part of ``SupervisorCore`` (it shares the core's tables).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from run_supervisor.protocol._core_state import CoreState
from run_supervisor.protocol._enums import RejectCode
from run_supervisor.protocol._events import LifecycleConfirmed, RunStalled, RunUnstalled
from run_supervisor.protocol._records import _Run
from run_supervisor.protocol._requests import (
    CloseOutcome,
    ConfirmClose,
    Heartbeat,
    NoProgress,
)
from run_supervisor.protocol._rules import (
    BODY_RULES,
    CLOSE_RULES,
    CONFIRM_RULES,
    RUNNING_RUN_STATES,
    STALLABLE_RUN_STATES,
    StallTrigger,
    next_stall_state,
    retry_waiting,
    stall_applies,
)

if TYPE_CHECKING:
    from run_supervisor.protocol._asks import AskBook
    from run_supervisor.protocol._lifecycle import _Action, _ActionStamp

__all__ = ["StallsMixin"]


class StallsMixin(CoreState):
    """Stalls and confirms. Mixed into ``SupervisorCore``."""

    if TYPE_CHECKING:  # what this part uses of other parts' own (the rest is ``CoreState``'s)
        _actions: dict[str, _Action]
        _asks: AskBook

        @staticmethod
        def _close_outcome(action: _Action) -> CloseOutcome: ...
        def _action_stamp(self, action: _Action) -> _ActionStamp: ...

    # --- the stalled flag --------------------------------------------------------------------

    def _no_progress(self, report: NoProgress) -> None:
        run = self._runs.get(report.run_id)
        if run is None or run.state not in STALLABLE_RUN_STATES:
            self._ignore()  # it stopped being active while the shell measured
            return
        session = self._sessions.get(run.session)
        retry = session.retry if session is not None and session.active == run.id else None
        if not stall_applies(
            run.state,
            len(self._asks.open_of(run.id)),
            not BODY_RULES[run.body].may_stall,
            self._working_children(run),
            retry is not None and retry_waiting(retry[2], report.now_ms),
        ):
            return  # it waits for the user, its children or its backoff: not stuck (measured again)
        if self._move_stall(run, StallTrigger.NO_PROGRESS):
            self._emit(
                RunStalled(
                    **self._stamp(run),
                    idle_ms=report.idle_ms,
                    holding=self._holding(run),
                )
            )

    def _working_children(self, run: _Run) -> int:
        """The children of ``run`` that are running (active or being interrupted) and not flagged
        stalled: each is measured itself (one waiting for the user is never flagged; one being
        interrupted is ending), so their parent waits for them."""
        return sum(
            1
            for child_id in run.children
            if (child := self._runs.get(child_id)) is not None
            and child.state in RUNNING_RUN_STATES
            and not child.stalled
        )

    def _stall_progress(self, run_id: str) -> None:
        """A progress report of ``run_id`` arrived (before it is handled): a stalled flag clears --
        its own and its ancestors' (a child's progress is its parents' progress too)."""
        run = self._runs.get(run_id)
        while run is not None:  # parent chains end: a child needs an active parent, which outlives it
            if run.stalled and run.state in STALLABLE_RUN_STATES:
                self._move_stall(run, StallTrigger.PROGRESS)
                self._emit(RunUnstalled(**self._stamp(run), progress=True))
            run = self._runs.get(run.parent) if run.parent is not None else None

    def _heartbeat(self, report: Heartbeat) -> None:
        run = self._runs.get(report.run_id)
        if run is None or run.state not in STALLABLE_RUN_STATES:
            self._ignore()  # late: the run was interrupted or ended (``_stall_progress`` did the rest)
            return
        self._progressed(run)  # the attempt goes on (a retried stream's chunks): a retry status is over

    def _left_active(self, run: _Run) -> None:
        """``run`` just left ``active`` (``_move_run``): a stalled flag goes with it, announced."""
        if run.stalled and run.state not in STALLABLE_RUN_STATES:
            self._move_stall(run, StallTrigger.LEFT_ACTIVE)
            self._emit(RunUnstalled(**self._stamp(run), progress=False))

    def _move_stall(self, run: _Run, trigger: StallTrigger) -> bool:
        """Every move of a run's stalled flag goes through here; True if it changed."""
        new = next_stall_state(run.stalled, trigger)
        if new is run.stalled:
            return False
        self._touch(run)
        run.stalled = new
        return True

    def _holding(self, run: _Run) -> tuple[str, ...]:
        """The pending actions that wait for ``run`` (its instance is among those they await)."""
        if run.generation is None:
            return ()
        key = (run.directory, run.generation)
        return tuple(action.id for action in self._actions.values() if key in action.awaiting)

    def _stalled_of(self, runs: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(r for r in runs if (run := self._runs.get(r)) is not None and run.stalled)

    # --- confirm_close -------------------------------------------------------------------------

    def _issued(self, action_id: str) -> bool:
        """This core made ``action_id`` (``lc-N``, numbered from 1 in creation order)."""
        number = action_id[3:] if action_id.startswith("lc-") else ""
        return number.isascii() and number.isdigit() and 1 <= int(number) <= self._action_count

    def _confirm_close(self, req: ConfirmClose, reply_to: Any) -> None:
        action = self._actions.get(req.action_id)
        if action is None:
            if self._issued(req.action_id):
                self._reject(
                    reply_to,
                    RejectCode.ACTION_ALREADY_COMPLETED,
                    f"lifecycle action {req.action_id!r} has completed already: nothing waits any more",
                    close=True,
                )
            else:
                self._reject(
                    reply_to,
                    RejectCode.UNKNOWN_ACTION,
                    f"no lifecycle action {req.action_id!r} was asked of this supervisor",
                    close=True,
                )
            return
        confirmed = CONFIRM_RULES.get(action.mode)
        reason = CLOSE_RULES[confirmed].interrupts_with if confirmed is not None else None
        if reason is None:
            self._reject(
                reply_to,
                RejectCode.NOT_CONFIRMABLE,
                f"lifecycle action {action.id!r} is a {action.do.value} in mode {action.mode.value}, "
                f"not a maintenance close: there is nothing to confirm",
                close=True,
            )
            return
        # A second confirm changes nothing of the first (its runs are interrupting already).
        origin = action.confirmed_by or req.origin or action.origin
        targets = [
            run_id
            for key in sorted(action.awaiting)
            if (instance := self._dirs[key[0]].open.get(key[1])) is not None
            for run_id in self._active_runs(instance)
        ]
        self._touch(action)
        action.confirmed_by = origin
        self._emit(
            LifecycleConfirmed(
                **self._action_stamp(action),
                origin=origin,
                interrupted_runs=tuple(targets),
                tag=req.tag,
            )
        )
        self._interrupt_each(targets, reason, origin, action.id, req.grace_ms)
        self._reply(
            reply_to,
            msgspec.structs.replace(self._close_outcome(action), interrupted_runs=tuple(targets)),
        )
