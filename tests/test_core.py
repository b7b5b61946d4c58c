"""The decision core, thread-free: the test plays the shell, feeding reports back as bodies, instances
and timers would, and checks the commands and the event stream against the public contract
(``/work/shared/contracts/scenario-format.md``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import pytest

from run_supervisor import (
    CloseAction,
    CloseMode,
    CloseOutcome,
    CloseResult,
    InterruptReason,
    Outcome,
    PartSnapshot,
    PartState,
    Phase,
    QueuePolicy,
    RejectCode,
    RequestOutcome,
    RequestResult,
    RunState,
    SessionStatus,
    StepKind,
    part_label,
)
from run_supervisor.protocol import (
    CLOSE_RULES,
    INSTANCE_TRANSITIONS,
    PART_PHASE,
    PART_TRANSITIONS,
    RUN_TRANSITIONS,
    AbandonRun,
    ActionResult,
    AnswerForm,
    CancelRun,
    CancelSession,
    CloseRequest,
    Command,
    ConfirmClose,
    DeleteSession,
    DeliverAnswer,
    DismissForm,
    DisposeDone,
    DisposeInstance,
    Emit,
    GraceExpired,
    IllegalTransitionError,
    InstanceClosed,
    InstanceStarted,
    InstanceState,
    InstanceTrigger,
    LifecycleCompleted,
    LifecycleDeferred,
    LifecycleRequested,
    LoadInstance,
    PartReport,
    ProtocolDecodeError,
    ReleaseRun,
    Reply,
    ReplyPermission,
    Request,
    RetryBudget,
    RunFinished,
    RunQueued,
    RunStarted,
    RunTrigger,
    SessionStatusChanged,
    SetQueuePolicy,
    Shutdown,
    ShutdownComplete,
    SignalInterrupt,
    StartGraceTimer,
    StartRun,
    StepFinished,
    StepReport,
    StepStarted,
    decode_event,
    decode_request,
    encode,
)
from run_supervisor.protocol._rules import next_instance_state, next_part_state, next_run_state
from run_supervisor.protocol.testing import CoreShell

A, B, C = "/w/a", "/w/b", "/w/c"
MAINTENANCE = CloseMode.MAINTENANCE
CONFIRMED = CloseMode.USER_CONFIRMED_INTERRUPT
DISPOSE, DISPOSE_ALL = CloseAction.DISPOSE, CloseAction.DISPOSE_ALL
RELOAD, INVALIDATE = CloseAction.RELOAD, CloseAction.INVALIDATE_CONFIG

E = TypeVar("E")
Answer = CloseOutcome | RequestOutcome


# --- the harness: the one synchronous shell, whose checker checks every batch --------------------

Shell = CoreShell
"""Carries out the core's commands synchronously; its ``InvariantChecker`` raises at the first
broken invariant (see ``run_supervisor.protocol.testing``)."""


def _states(shell: Shell, run: str) -> list[PartState]:
    return [p.state for p in shell.finished(run).parts]


# --- the transition tables ------------------------------------------------------------------------

# The run and the instance machines are trigger tables (state, trigger -> state), checked alike with
# the step function of each; parts move straight to a target state.
TRIGGER_MOVES = [
    *((next_run_state, s, t, target) for s, moves in RUN_TRANSITIONS.items() for t, target in moves.items()),
    *(
        (next_instance_state, s, t, target)
        for s, moves in INSTANCE_TRANSITIONS.items()
        for t, target in moves.items()
    ),
]
TRIGGER_FORBIDDEN = [
    *((next_run_state, s, t) for s in RunState for t in RunTrigger if t not in RUN_TRANSITIONS[s]),
    *(
        (next_instance_state, s, t)
        for s in InstanceState
        for t in InstanceTrigger
        if t not in INSTANCE_TRANSITIONS[s]
    ),
]
PART_MOVES = [(s, target) for s, targets in PART_TRANSITIONS.items() for target in sorted(targets)]
PART_FORBIDDEN = [(s, t) for s in PartState for t in PartState if t not in PART_TRANSITIONS[s]]


def test_every_state_has_a_row_in_its_transition_table() -> None:
    assert set(RUN_TRANSITIONS) == set(RunState)
    assert set(PART_TRANSITIONS) == set(PartState)
    assert set(INSTANCE_TRANSITIONS) == set(InstanceState)


@pytest.mark.parametrize(("step", "state", "trigger", "target"), TRIGGER_MOVES)
def test_every_run_and_instance_move_its_table_lists_is_made(
    step: Callable[[Any, Any], Any], state: Any, trigger: Any, target: Any
) -> None:
    assert step(state, trigger) is target


@pytest.mark.parametrize(("step", "state", "trigger"), TRIGGER_FORBIDDEN)
def test_every_run_and_instance_move_its_table_does_not_list_is_illegal(
    step: Callable[[Any, Any], Any], state: Any, trigger: Any
) -> None:
    with pytest.raises(IllegalTransitionError, match=f"{trigger.value} in state {state.value}"):
        step(state, trigger)


@pytest.mark.parametrize(("state", "target"), PART_MOVES)
def test_every_part_move_the_table_lists_is_made(state: PartState, target: PartState) -> None:
    assert next_part_state(state, target) is target


@pytest.mark.parametrize(("state", "target"), PART_FORBIDDEN)
def test_every_part_move_the_table_does_not_list_is_illegal(state: PartState, target: PartState) -> None:
    with pytest.raises(IllegalTransitionError, match=f"{state.value} -> {target.value}"):
        next_part_state(state, target)


def test_a_finished_run_has_no_way_out_and_an_interrupting_run_always_ends_interrupted() -> None:
    for state in (RunState.COMPLETED, RunState.INTERRUPTED, RunState.FAILED):
        assert RUN_TRANSITIONS[state] == {}
    assert set(RUN_TRANSITIONS[RunState.INTERRUPTING].values()) == {RunState.INTERRUPTED}
    assert PART_TRANSITIONS[PartState.COMPLETED] == frozenset()
    assert PART_TRANSITIONS[PartState.INTERRUPTED] == frozenset()


def test_the_phase_table_covers_exactly_the_unfinished_part_states() -> None:
    assert dict(PART_PHASE) == {
        PartState.PENDING: Phase.GENERATING,
        PartState.PREPARED: Phase.PREPARED,
        PartState.RUNNING: Phase.RUNNING,
    }


def test_only_the_confirmed_and_shutdown_modes_interrupt_and_only_shutdowns_cover_everything() -> None:
    assert CLOSE_RULES[MAINTENANCE].interrupts_with is None
    assert CLOSE_RULES[CONFIRMED].interrupts_with is InterruptReason.LIFECYCLE_INTERRUPT
    assert CLOSE_RULES[CloseMode.SHUTDOWN].interrupts_with is InterruptReason.SHUTDOWN
    assert CLOSE_RULES[CloseMode.TEST_TEARDOWN].interrupts_with is InterruptReason.TEST_TEARDOWN
    assert [m for m, rule in CLOSE_RULES.items() if rule.covers_everything] == [
        CloseMode.SHUTDOWN,
        CloseMode.TEST_TEARDOWN,
    ]


# --- maintenance closes ----------------------------------------------------------------------------


def test_a_maintenance_dispose_of_an_idle_directory_closes_at_once_and_completes_in_its_answer() -> None:
    shell = Shell(A, B)
    out = shell.close(DISPOSE, A, tag="ui-1")
    assert out.result is CloseResult.COMPLETED and out.completed
    assert (out.completed_directories, out.pending_directories, out.blocking_runs) == ((A,), (), ())
    after_preload = shell.events[2:]
    assert [type(e) for e in after_preload] == [
        LifecycleRequested,
        InstanceClosed,
        LifecycleCompleted,
        ActionResult,
    ]
    assert shell.one(LifecycleRequested).tag == "ui-1" and shell.one(LifecycleCompleted).tag == "ui-1"
    assert shell.core.live_instances() == ((B, 1),)


@pytest.mark.parametrize("do", [DISPOSE, DISPOSE_ALL, RELOAD, INVALIDATE])
def test_no_maintenance_close_ever_interrupts_a_run(do: CloseAction) -> None:
    shell = Shell(A, B)
    shell.start("r1", directory=A)
    shell.start("r2", directory=B)
    shell.tool("r1", upto=PartState.PENDING)
    one_directory = do in (DISPOSE, RELOAD)
    out = shell.close(do, *((A,) if one_directory else ()), origin="settings.provider.connect")
    assert out.result is CloseResult.DEFERRED and out.interrupted_runs == ()
    assert out.blocking_runs == (("r1",) if one_directory else ("r1", "r2"))
    assert shell.commands(SignalInterrupt) == []
    for state in (PartState.PREPARED, PartState.RUNNING, PartState.COMPLETED):
        shell.report(PartReport(run_id="r1", tool="bash", state=state))
    shell.finish("r1")
    shell.finish("r2")
    assert shell.commands(SignalInterrupt) == []
    assert shell.finished("r1").outcome is Outcome.COMPLETED and shell.finished("r1").reason is None
    assert shell.finished("r2").outcome is Outcome.COMPLETED
    assert _states(shell, "r1") == [PartState.COMPLETED]
    assert shell.core.pending_actions() == ()
    shell.assert_every_action_completed_once()


def test_a_maintenance_dispose_of_a_busy_directory_is_deferred_and_closes_when_its_last_run_ends() -> None:
    shell = Shell(A)
    shell.start("r2", directory=A)
    shell.start("r1", directory=A)
    out = shell.close(DISPOSE, A)
    assert out.result is CloseResult.DEFERRED and not out.completed
    assert (out.completed_directories, out.pending_directories, out.blocking_runs) == ((), (A,), ("r1", "r2"))
    deferred = shell.one(LifecycleDeferred, action_id=out.action_id)
    assert (deferred.pending_directories, deferred.blocking_runs) == ((A,), ("r1", "r2"))

    shell.finish("r1")
    assert shell.commands(DisposeInstance) == [] and shell.of(LifecycleCompleted) == []
    shell.finish("r2")
    assert shell.commands(DisposeInstance) == [DisposeInstance(A, 1, budget_ms=1000)]
    assert shell.seq(RunFinished, run_id="r2") < shell.seq(InstanceClosed, directory=A)
    assert shell.seq(InstanceClosed, directory=A) < shell.seq(LifecycleCompleted, action_id=out.action_id)
    shell.assert_every_action_completed_once()


def test_dispose_all_closes_idle_directories_at_once_and_defers_busy_ones_with_sorted_blocking_runs() -> None:
    shell = Shell(C, A, B)
    shell.start("r9", directory=B)
    shell.start("r1", directory=A)
    shell.start("r5", directory=B)
    out = shell.close(DISPOSE_ALL, origin="settings.provider.connect")
    assert out.result is CloseResult.DEFERRED
    assert out.completed_directories == (C,)
    assert out.pending_directories == (A, B)
    assert out.blocking_runs == ("r1", "r5", "r9")
    assert shell.one(LifecycleRequested).directories == (A, B, C)
    assert [(e.directory, e.generation) for e in shell.of(InstanceClosed)] == [(C, 1)]


def test_each_deferred_directory_closes_as_soon_as_its_own_last_run_ends_not_when_all_are_idle() -> None:
    shell = Shell(A, B)
    shell.start("r1", directory=A)
    shell.start("r2", directory=B)
    out = shell.close(INVALIDATE)
    shell.finish("r1")
    assert [e.directory for e in shell.of(InstanceClosed)] == [A]
    assert shell.of(LifecycleCompleted) == []
    assert shell.core.action_snapshot(out.action_id).pending_directories == (B,)
    assert shell.core.action_snapshot(out.action_id).blocking_runs == ("r2",)
    shell.finish("r2")
    assert [e.directory for e in shell.of(InstanceClosed)] == [A, B]
    assert shell.seq(RunFinished, run_id="r2") < shell.seq(LifecycleCompleted, action_id=out.action_id)
    assert shell.core.action_snapshot(out.action_id) is None
    shell.assert_every_action_completed_once()


def test_an_immediate_close_emits_instance_closed_then_lifecycle_then_action_result_then_replies() -> None:
    shell = Shell(A, B)
    shell.start("r1", directory=B)
    out = shell.close(DISPOSE_ALL)
    token = shell.last_token
    order = [
        shell.event_position(LifecycleRequested, action_id=out.action_id),
        shell.event_position(InstanceClosed, directory=A),
        shell.event_position(LifecycleDeferred, action_id=out.action_id),
        shell.event_position(ActionResult, action_id=out.action_id),
        shell.reply_position(token),
    ]
    assert order == sorted(order)

    closing = Shell(A)
    done = closing.close(DISPOSE, A)
    order = [
        closing.event_position(InstanceClosed, directory=A),
        closing.event_position(LifecycleCompleted, action_id=done.action_id),
        closing.event_position(ActionResult, action_id=done.action_id),
        closing.reply_position(closing.last_token),
    ]
    assert order == sorted(order)


def test_the_answer_to_a_close_waits_for_its_immediate_dispose_to_finish() -> None:
    shell = Shell(A, hold_disposes=True)
    assert shell.close(DISPOSE, A) is None
    token = shell.last_token
    assert shell.commands(DisposeInstance, within=shell.last) == [DisposeInstance(A, 1, budget_ms=1000)]
    assert shell.of(InstanceClosed) == [] and shell.of(LifecycleCompleted) == []
    assert shell.of(ActionResult) == [] and token not in shell.answers

    shell.release()
    out = shell.answers[token]
    assert out.result is CloseResult.COMPLETED and out.completed
    assert [type(e) for e in shell.events_in(shell.last)] == [
        InstanceClosed,
        LifecycleCompleted,
        ActionResult,
    ]
    assert isinstance(shell.last[-1], Reply)


def test_a_deferred_close_announces_deferred_only_after_its_idle_directory_has_closed() -> None:
    shell = Shell(A, B, hold_disposes=True)
    shell.start("r1", directory=B)
    assert shell.close(DISPOSE_ALL) is None
    token = shell.last_token
    assert shell.of(LifecycleDeferred) == [] and token not in shell.answers
    shell.release()
    out = shell.answers[token]
    assert out.result is CloseResult.DEFERRED and out.pending_directories == (B,)
    assert [type(e) for e in shell.events_in(shell.last)] == [InstanceClosed, LifecycleDeferred, ActionResult]


def test_a_failing_dispose_still_closes_with_its_error_on_instance_closed_and_lifecycle_completed() -> None:
    shell = Shell(A, hold_disposes=True)
    shell.close(DISPOSE, A)
    token = shell.last_token
    shell.release(error="watcher hung")
    assert shell.one(InstanceClosed).error == "watcher hung"
    assert "watcher hung" in (shell.one(LifecycleCompleted).error or "")
    assert shell.answers[token].result is CloseResult.COMPLETED
    assert shell.core.live_instances() == ()


def test_a_close_of_a_directory_that_was_declared_but_never_loaded_completes_at_once() -> None:
    shell = Shell(declare=[A])
    out = shell.close(DISPOSE, A)
    assert out.result is CloseResult.COMPLETED and out.completed
    assert shell.commands(DisposeInstance) == [] and shell.of(InstanceClosed) == []


def test_dispose_all_with_nothing_loaded_completes_at_once() -> None:
    shell = Shell()
    out = shell.close(DISPOSE_ALL)
    assert out.result is CloseResult.COMPLETED and out.completed
    assert shell.one(LifecycleRequested).directories == ()
    shell.assert_every_action_completed_once()


def test_a_close_never_touches_runs_or_instances_of_directories_it_does_not_name() -> None:
    shell = Shell(A, B)
    shell.start("r1", directory=B)
    out = shell.close(DISPOSE, A, mode=CONFIRMED)
    assert out.result is CloseResult.COMPLETED and out.interrupted_runs == ()
    assert shell.commands(SignalInterrupt) == []
    assert shell.core.live_instances() == ((B, 1),)
    assert shell.core.run_snapshot("r1").state == RunState.ACTIVE


# --- generations -----------------------------------------------------------------------------------


def test_a_run_started_in_a_directory_waiting_to_close_gets_a_fresh_generation_and_never_delays_it() -> None:
    shell = Shell(A)
    shell.start("r1", directory=A)
    out = shell.close(DISPOSE, A)
    shell.start("r2", directory=A)
    assert {type(e) for e in shell.events_in(shell.last)} == {
        SessionStatusChanged,
        InstanceStarted,
        RunStarted,
    }
    assert shell.one(InstanceStarted, generation=2).directory == A
    assert shell.one(RunStarted, run_id="r2").generation == 2
    assert shell.spawned["r2"].generation == 2
    assert shell.core.action_snapshot(out.action_id).blocking_runs == ("r1",)

    shell.finish("r1")
    assert shell.one(InstanceClosed).generation == 1
    assert shell.of(LifecycleCompleted, action_id=out.action_id)
    assert shell.core.run_snapshot("r2").state == RunState.ACTIVE
    shell.finish("r2")
    assert len(shell.of(InstanceClosed)) == 1
    assert shell.core.live_instances() == ((A, 2),)


def test_a_run_started_while_the_old_instance_is_still_disposing_gets_a_fresh_generation() -> None:
    shell = Shell(A, hold_disposes=True)
    shell.close(DISPOSE, A)
    token = shell.last_token
    shell.start("r1", directory=A)
    assert shell.spawned["r1"].generation == 2
    shell.release()
    assert shell.answers[token].completed
    assert shell.one(InstanceClosed).generation == 1
    assert shell.core.live_instances() == ((A, 2),)


def test_a_queued_run_that_starts_after_a_close_was_asked_is_pinned_to_a_fresh_generation() -> None:
    shell = Shell(A)
    shell.start("r1", session="s1", directory=A)
    shell.start("r2", session="s1", directory=A)
    out = shell.close(DISPOSE, A)
    assert out.blocking_runs == ("r1",)
    shell.finish("r1")
    assert shell.spawned["r2"].generation == 2
    assert shell.one(RunStarted, run_id="r2").generation == 2
    assert shell.one(InstanceClosed).generation == 1
    assert shell.of(LifecycleCompleted, action_id=out.action_id)


def test_a_maintenance_reload_of_an_idle_directory_loads_the_next_generation_at_once() -> None:
    shell = Shell(A)
    out = shell.close(RELOAD, A)
    assert out.result is CloseResult.COMPLETED and out.completed
    assert LoadInstance(A, 2) in shell.last
    assert shell.one(InstanceStarted, generation=2).seq < shell.one(ActionResult).seq
    assert shell.one(InstanceClosed).generation == 1
    shell.start("r1", directory=A)
    assert shell.spawned["r1"].generation == 2
    assert shell.core.live_instances() == ((A, 2),)


def test_a_maintenance_reload_of_a_busy_directory_loads_the_next_generation_while_the_old_one_waits() -> None:
    shell = Shell(A)
    shell.start("r1", directory=A)
    out = shell.close(RELOAD, A)
    assert out.result is CloseResult.DEFERRED and out.blocking_runs == ("r1",)
    assert LoadInstance(A, 2) in shell.last
    shell.start("r2", directory=A)
    assert shell.spawned["r2"].generation == 2
    assert len(shell.of(InstanceStarted, directory=A)) == 2
    shell.finish("r1")
    assert shell.one(InstanceClosed).generation == 1
    assert shell.of(LifecycleCompleted, action_id=out.action_id)


def test_a_reload_of_a_directory_with_nothing_loaded_completes_and_loads_it() -> None:
    shell = Shell(declare=[A])
    out = shell.close(RELOAD, A)
    assert out.result is CloseResult.COMPLETED and out.completed
    assert shell.one(InstanceStarted).generation == 1
    assert shell.core.live_instances() == ((A, 1),)


def test_a_reload_retires_every_live_generation_of_its_directory() -> None:
    shell = Shell(A)
    shell.start("r1", directory=A)
    shell.close(RELOAD, A)
    shell.start("r2", directory=A)
    out = shell.close(RELOAD, A)
    assert out.blocking_runs == ("r1", "r2")
    assert shell.core.live_instances() == ((A, 1), (A, 2), (A, 3))
    shell.finish("r2")
    shell.finish("r1")
    assert sorted(e.generation for e in shell.of(InstanceClosed)) == [1, 2]
    assert shell.core.live_instances() == ((A, 3),)
    shell.assert_every_action_completed_once()


def test_no_run_is_ever_pinned_to_a_retired_or_closed_generation() -> None:
    shell = Shell(A, hold_disposes=True)
    shell.start("r1", session="s1")
    shell.start("r2", session="s1")  # queued behind r1
    shell.close(RELOAD, A)  # generation 1 waits for r1; generation 2 is loaded
    shell.close(DISPOSE, A)  # generation 2 is idle: disposing (held); 1 still waits
    shell.start("r3")  # nothing current: generation 3
    shell.finish("r1")  # generation 1 disposes; r2 takes over s1 on the current generation
    assert {run: spawn.generation for run, spawn in shell.spawned.items()} == {"r1": 1, "r3": 3, "r2": 3}
    assert {(c.directory, c.generation) for c in shell.commands(DisposeInstance)} == {(A, 1), (A, 2)}
    shell.release()
    assert shell.core.live_instances() == ((A, 3),)
    shell.assert_every_action_completed_once()


# --- joining a pending close ------------------------------------------------------------------------


def test_a_second_maintenance_close_joins_the_pending_close_and_the_instance_closes_once() -> None:
    shell = Shell(A)
    shell.start("r1", directory=A)
    first = shell.close(DISPOSE, A, origin="config.update")
    second = shell.close(DISPOSE_ALL, origin="settings.provider.connect")
    assert first.action_id != second.action_id
    assert second.result is CloseResult.DEFERRED
    assert (second.pending_directories, second.blocking_runs) == ((A,), ("r1",))
    assert shell.commands(DisposeInstance) == []

    shell.finish("r1")
    assert len(shell.of(InstanceClosed)) == 1
    closed = shell.seq(InstanceClosed)
    for out in (first, second):
        assert shell.one(ActionResult, action_id=out.action_id).result is CloseResult.DEFERRED
        assert shell.seq(LifecycleCompleted, action_id=out.action_id) > closed
    shell.assert_every_action_completed_once()


def test_a_close_of_an_instance_that_is_already_disposing_joins_that_dispose() -> None:
    shell = Shell(A, hold_disposes=True)
    shell.close(DISPOSE, A)
    first = shell.last_token
    shell.close(DISPOSE_ALL)
    second = shell.last_token
    assert first not in shell.answers and second not in shell.answers
    assert len(shell.held) == 1
    shell.release()
    assert len(shell.of(InstanceClosed)) == 1
    assert shell.answers[first].completed and shell.answers[second].completed
    assert shell.answers[first].action_id != shell.answers[second].action_id
    shell.assert_every_action_completed_once()


def test_a_later_close_covers_the_waiting_and_the_fresh_generation_and_each_close_ends_on_its_own() -> None:
    shell = Shell(A)
    shell.start("r1", directory=A)
    first = shell.close(DISPOSE, A)
    shell.start("r2", directory=A)
    second = shell.close(DISPOSE_ALL)
    assert second.blocking_runs == ("r1", "r2")
    shell.finish("r1")
    assert shell.of(LifecycleCompleted, action_id=first.action_id)
    assert not shell.of(LifecycleCompleted, action_id=second.action_id)
    shell.finish("r2")
    assert shell.of(LifecycleCompleted, action_id=second.action_id)
    assert [e.generation for e in shell.of(InstanceClosed)] == [1, 2]


# --- user_confirmed_interrupt ------------------------------------------------------------------------


def test_a_user_confirmed_interrupt_interrupts_every_active_run_with_lifecycle_interrupt() -> None:
    shell = Shell(A, B)
    shell.start("r1", directory=A)
    shell.tool("r1", upto=PartState.PENDING)
    shell.start("r2", directory=B)
    out = shell.close(DISPOSE_ALL, mode=CONFIRMED, origin="settings.provider.connect.confirmed")
    assert out.result is CloseResult.INTERRUPTED
    assert out.interrupted_runs == ("r1", "r2")
    assert shell.commands(SignalInterrupt, within=shell.last) == [
        SignalInterrupt("r1", InterruptReason.LIFECYCLE_INTERRUPT),
        SignalInterrupt("r2", InterruptReason.LIFECYCLE_INTERRUPT),
    ]
    shell.finish("r1")
    shell.finish("r2")
    r1 = shell.finished("r1")
    assert (r1.outcome, r1.reason, r1.origin, r1.action_id, r1.phase, r1.generation) == (
        Outcome.INTERRUPTED,
        InterruptReason.LIFECYCLE_INTERRUPT,
        "settings.provider.connect.confirmed",
        out.action_id,
        Phase.GENERATING,
        1,
    )
    assert [(p.state, p.tool_started) for p in r1.parts] == [(PartState.INTERRUPTED, False)]
    assert shell.finished("r2").phase is None
    assert shell.of(LifecycleCompleted, action_id=out.action_id)
    shell.assert_every_action_completed_once()


def test_an_interrupted_runs_run_finished_comes_before_its_instances_instance_closed() -> None:
    shell = Shell(A, hold_disposes=True)
    shell.start("r1", directory=A)
    out = shell.close(DISPOSE, A, mode=CONFIRMED)
    assert out.result is CloseResult.INTERRUPTED and not out.completed
    assert shell.commands(DisposeInstance) == []
    shell.finish("r1")
    assert shell.commands(DisposeInstance, within=shell.last) == [DisposeInstance(A, 1, budget_ms=1000)]
    shell.release()
    assert shell.seq(RunFinished, run_id="r1") < shell.seq(InstanceClosed) < shell.seq(LifecycleCompleted)


def test_a_user_confirmed_interrupt_takes_over_a_pending_maintenance_close() -> None:
    shell = Shell(A)
    shell.start("r1", directory=A)
    shell.tool("r1", upto=PartState.PREPARED)
    pending = shell.close(DISPOSE, A, origin="config.update")
    confirmed = shell.close(DISPOSE, A, mode=CONFIRMED, origin="project.close.confirmed")
    assert confirmed.result is CloseResult.INTERRUPTED and confirmed.interrupted_runs == ("r1",)
    assert shell.commands(SignalInterrupt) == [SignalInterrupt("r1", InterruptReason.LIFECYCLE_INTERRUPT)]
    shell.finish("r1")
    r1 = shell.finished("r1")
    assert (r1.origin, r1.action_id, r1.phase) == (
        "project.close.confirmed",
        confirmed.action_id,
        Phase.PREPARED,
    )
    assert len(shell.of(InstanceClosed)) == 1
    for out in (pending, confirmed):
        assert shell.seq(LifecycleCompleted, action_id=out.action_id) > r1.seq
    assert shell.one(ActionResult, action_id=pending.action_id).result is CloseResult.DEFERRED
    assert shell.one(LifecycleCompleted, action_id=pending.action_id).superseded_by is None
    shell.assert_every_action_completed_once()


def test_a_user_confirmed_interrupt_with_no_active_run_is_completed() -> None:
    shell = Shell(A, B)
    out = shell.close(DISPOSE_ALL, mode=CONFIRMED)
    assert out.result is CloseResult.COMPLETED and out.completed and out.interrupted_runs == ()
    assert shell.commands(SignalInterrupt) == []
    assert len(shell.of(InstanceClosed)) == 2


def test_a_user_confirmed_interrupt_reaches_the_runs_of_every_generation_of_its_directory() -> None:
    shell = Shell(A)
    shell.start("r1", directory=A)
    shell.close(DISPOSE, A)
    shell.start("r2", directory=A)
    out = shell.close(DISPOSE, A, mode=CONFIRMED)
    assert out.interrupted_runs == ("r1", "r2")
    assert {c.run_id for c in shell.commands(SignalInterrupt)} == {"r1", "r2"}
    shell.finish("r2")
    shell.finish("r1")
    assert shell.core.live_instances() == ()
    shell.assert_every_action_completed_once()


def test_a_user_confirmed_reload_interrupts_then_loads_the_next_generation_at_once() -> None:
    shell = Shell(A)
    shell.start("r1", directory=A)
    out = shell.close(RELOAD, A, mode=CONFIRMED)
    assert out.result is CloseResult.INTERRUPTED
    assert SignalInterrupt("r1", InterruptReason.LIFECYCLE_INTERRUPT) in shell.last
    assert LoadInstance(A, 2) in shell.last
    shell.start("r2", directory=A)
    assert shell.spawned["r2"].generation == 2
    shell.finish("r1")
    assert shell.one(InstanceClosed).generation == 1
    assert shell.core.run_snapshot("r2").state == RunState.ACTIVE


def test_a_run_already_being_cancelled_keeps_its_reason_when_a_confirmed_close_comes() -> None:
    shell = Shell(A)
    shell.start("r1", directory=A)
    shell.cancel("r1", tag="c1")
    out = shell.close(DISPOSE, A, mode=CONFIRMED)
    assert out.interrupted_runs == () and out.blocking_runs == ("r1",)
    assert len(shell.commands(SignalInterrupt)) == 1
    shell.finish("r1")
    assert (shell.finished("r1").reason, shell.finished("r1").action_id) == (
        InterruptReason.USER_CANCEL,
        "c1",
    )
    assert shell.of(LifecycleCompleted, action_id=out.action_id)


# --- user cancel -----------------------------------------------------------------------------------


def test_a_user_cancel_interrupts_the_run_at_once_with_user_cancel() -> None:
    shell = Shell(A)
    shell.start("r1", directory=A)
    shell.tool("r1", upto=PartState.RUNNING)
    out = shell.cancel("r1", tag="c1")
    assert out == RequestOutcome(result=RequestResult.OK)
    assert shell.commands(SignalInterrupt, within=shell.last) == [
        SignalInterrupt("r1", InterruptReason.USER_CANCEL)
    ]
    assert shell.core.run_snapshot("r1").state == RunState.INTERRUPTING
    shell.finish("r1")
    r1 = shell.finished("r1")
    assert (r1.outcome, r1.reason, r1.origin, r1.action_id, r1.phase) == (
        Outcome.INTERRUPTED,
        InterruptReason.USER_CANCEL,
        "user",
        "c1",
        Phase.RUNNING,
    )
    assert [(p.state, p.tool_started) for p in r1.parts] == [(PartState.INTERRUPTED, True)]


def test_a_user_cancel_while_a_close_is_pending_acts_at_once_and_the_close_completes_after_the_run() -> None:
    shell = Shell(A)
    shell.start("r1", directory=A)
    shell.ask("r1")
    close = shell.close(DISPOSE_ALL, origin="settings.provider.connect")
    shell.cancel("r1", tag="c1")
    assert SignalInterrupt("r1", InterruptReason.USER_CANCEL) in shell.last
    assert not shell.of(LifecycleCompleted)
    shell.finish("r1")
    assert shell.finished("r1").phase is Phase.RUNNING
    assert shell.seq(RunFinished, run_id="r1") < shell.seq(LifecycleCompleted, action_id=close.action_id)
    assert shell.one(ActionResult, action_id=close.action_id).result is CloseResult.DEFERRED


def test_a_cancel_of_a_finished_run_is_rejected_and_never_reaches_the_next_run_of_its_session() -> None:
    shell = Shell(A)
    shell.start("r1", session="s1")
    shell.start("r2", session="s1")
    shell.finish("r1")
    assert shell.spawned["r2"]
    out = shell.cancel("r1", tag="c1")
    assert out.result is RequestResult.REJECTED and out.code is RejectCode.RUN_FINISHED
    assert "r1" in (out.error or "")
    assert shell.last == [Reply(shell.last_token, out)]
    assert shell.commands(SignalInterrupt) == []
    shell.finish("r2")
    assert shell.finished("r2").outcome is Outcome.COMPLETED and shell.finished("r2").reason is None


def test_a_cancel_of_a_queued_run_ends_it_interrupted_without_starting_it() -> None:
    shell = Shell(A)
    shell.start("r1", session="s1")
    shell.start("r2", session="s1")
    out = shell.cancel("r2", tag="c1")
    assert out.result is RequestResult.OK
    r2 = shell.finished("r2")
    assert (r2.outcome, r2.reason, r2.origin, r2.action_id, r2.generation, r2.phase, r2.parts) == (
        Outcome.INTERRUPTED,
        InterruptReason.USER_CANCEL,
        "user",
        "c1",
        None,
        None,
        (),
    )
    assert shell.commands(SignalInterrupt) == [] and "r2" not in shell.spawned
    assert shell.commands(ReleaseRun) == [ReleaseRun("r2")]  # its idle actor may go
    assert shell.core.session_snapshot("s1").status is SessionStatus.BUSY
    shell.finish("r1")
    assert "r2" not in shell.spawned and shell.of(RunStarted, run_id="r2") == []
    assert shell.finished("r1").outcome is Outcome.COMPLETED
    assert shell.core.session_snapshot("s1").status is SessionStatus.IDLE


def test_a_cancel_of_an_unknown_run_is_rejected_as_unknown_run() -> None:
    shell = Shell(A)
    out = shell.cancel("ghost")
    assert out.result is RequestResult.REJECTED and out.code is RejectCode.UNKNOWN_RUN
    assert shell.events_in(shell.last) == []


def test_a_second_interrupt_of_the_same_run_keeps_the_first_reason() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.ask("r1")
    shell.cancel("r1", tag="c1")
    again = shell.cancel("r1", tag="c2", origin="keyboard")
    assert again.result is RequestResult.REJECTED and again.code is RejectCode.ALREADY_INTERRUPTING
    late_reply = shell.request(ReplyPermission(run_id="r1", approve=False, tag="p1"))
    assert late_reply.code is RejectCode.NOTHING_PENDING
    assert len(shell.commands(SignalInterrupt)) == 1
    shell.finish("r1")
    r1 = shell.finished("r1")
    assert (r1.reason, r1.origin, r1.action_id) == (InterruptReason.USER_CANCEL, "user", "c1")


def test_an_interrupted_run_ends_interrupted_even_when_its_body_raises() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.cancel("r1")
    shell.finish("r1", error="CancelledError")
    r1 = shell.finished("r1")
    assert r1.outcome is Outcome.INTERRUPTED and r1.reason is InterruptReason.USER_CANCEL
    assert r1.error is None


# --- permission asks and forms ----------------------------------------------------------------------


def test_a_permission_rejected_without_a_message_interrupts_the_run_with_origin_permission() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.ask("r1")
    out = shell.request(ReplyPermission(run_id="r1", approve=False))
    assert out.result is RequestResult.OK
    assert shell.commands(SignalInterrupt) == [SignalInterrupt("r1", InterruptReason.PERMISSION_REJECTED)]
    assert shell.commands(DeliverAnswer) == []
    shell.finish("r1")
    r1 = shell.finished("r1")
    assert (r1.outcome, r1.reason, r1.origin, r1.phase) == (
        Outcome.INTERRUPTED,
        InterruptReason.PERMISSION_REJECTED,
        "permission",
        Phase.RUNNING,
    )
    # The permission gated the tool: it never ran, and its card says the user declined it.
    assert [(p.state, p.tool_started, p.label) for p in r1.parts] == [
        (PartState.INTERRUPTED, False, "Did not run: the user declined bash")
    ]


def test_a_permission_rejected_with_a_message_turns_the_open_part_to_error_and_the_run_goes_on() -> None:
    shell = Shell(A)
    shell.start("r1")
    ask_id = shell.ask("r1")
    out = shell.request(ReplyPermission(run_id="r1", approve=False, message="use rg instead"))
    assert out.result is RequestResult.OK
    assert shell.commands(DeliverAnswer) == [
        DeliverAnswer(run_id="r1", ask_id=ask_id, approved=False, message="use rg instead")
    ]
    assert shell.commands(SignalInterrupt) == []
    (part,) = shell.core.run_snapshot("r1").parts
    assert (part.state, part.message) == (PartState.ERROR, "use rg instead")
    shell.report(
        PartReport(run_id="r1", tool="bash", state=PartState.COMPLETED)
    )  # the call ends: stays error
    shell.report(StepReport(run_id="r1", step="model", kind=StepKind.MODEL, finished=False))
    shell.finish("r1")
    r1 = shell.finished("r1")
    assert r1.outcome is Outcome.COMPLETED and r1.reason is None
    # Declined: the tool never ran; the card and the model both get the user's feedback.
    assert [(p.state, p.message, p.tool_started, p.label, p.note) for p in r1.parts] == [
        (
            PartState.ERROR,
            "use rg instead",
            False,
            "Did not run: the user declined bash: use rg instead",
            "The user declined this bash call: use rg instead.",
        )
    ]


def test_an_approved_permission_is_delivered_to_the_body_and_the_run_completes() -> None:
    shell = Shell(A)
    shell.start("r1")
    ask_id = shell.ask("r1")
    assert shell.request(ReplyPermission(run_id="r1", approve=True)).result is RequestResult.OK
    assert shell.commands(DeliverAnswer) == [DeliverAnswer(run_id="r1", ask_id=ask_id, approved=True)]
    shell.report(PartReport(run_id="r1", tool="bash", state=PartState.COMPLETED))
    shell.finish("r1")
    assert shell.finished("r1").outcome is Outcome.COMPLETED
    assert _states(shell, "r1") == [PartState.COMPLETED]


@pytest.mark.parametrize(
    ("waiting", "req"),
    [
        (None, ReplyPermission(run_id="r1", approve=True)),
        (None, AnswerForm(run_id="r1", answer="yes")),
        (None, DismissForm(run_id="r1")),
        ("form", ReplyPermission(run_id="r1", approve=False)),
        ("permission", AnswerForm(run_id="r1", answer="yes")),
        ("permission", DismissForm(run_id="r1")),
    ],
    ids=[
        "reply-no-ask",
        "answer-no-form",
        "dismiss-no-form",
        "reply-to-form",
        "answer-to-ask",
        "dismiss-ask",
    ],
)
def test_a_reply_when_nothing_of_its_kind_is_pending_is_rejected_as_nothing_pending(
    waiting: str | None, req: Request
) -> None:
    shell = Shell(A)
    shell.start("r1")
    if waiting is not None:
        shell.ask("r1", form=waiting == "form")
    out = shell.request(req)
    assert out.result is RequestResult.REJECTED and out.code is RejectCode.NOTHING_PENDING
    assert shell.commands(DeliverAnswer) == [] and shell.commands(SignalInterrupt) == []


def test_a_second_answer_to_the_same_ask_finds_nothing_pending() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.ask("r1")
    shell.request(ReplyPermission(run_id="r1", approve=True))
    assert shell.request(ReplyPermission(run_id="r1", approve=False)).code is RejectCode.NOTHING_PENDING
    assert shell.request(ReplyPermission(run_id="ghost", approve=True)).code is RejectCode.UNKNOWN_RUN


def test_an_answered_form_is_delivered_to_the_body_and_the_run_completes() -> None:
    shell = Shell(A)
    shell.start("r1")
    ask_id = shell.ask("r1", form=True)
    assert shell.request(AnswerForm(run_id="r1", answer="blue")).result is RequestResult.OK
    assert shell.commands(DeliverAnswer) == [
        DeliverAnswer(run_id="r1", ask_id=ask_id, approved=True, answer="blue")
    ]
    shell.report(PartReport(run_id="r1", tool="question", state=PartState.COMPLETED))
    shell.finish("r1")
    assert shell.finished("r1").outcome is Outcome.COMPLETED


def test_a_dismissed_form_interrupts_the_run_with_form_dismissed_and_origin_form() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.ask("r1", form=True)
    assert shell.request(DismissForm(run_id="r1")).result is RequestResult.OK
    assert shell.commands(SignalInterrupt) == [SignalInterrupt("r1", InterruptReason.FORM_DISMISSED)]
    shell.finish("r1")
    r1 = shell.finished("r1")
    assert (r1.reason, r1.origin, r1.phase) == (InterruptReason.FORM_DISMISSED, "form", Phase.RUNNING)


@pytest.mark.parametrize(
    ("form", "req", "reason"),
    [
        (False, CancelRun(run_id="r1", tag="ui-42"), InterruptReason.USER_CANCEL),
        (
            False,
            ReplyPermission(run_id="r1", approve=False, tag="ui-42"),
            InterruptReason.PERMISSION_REJECTED,
        ),
        (True, DismissForm(run_id="r1", tag="ui-42"), InterruptReason.FORM_DISMISSED),
    ],
    ids=["cancel", "reject", "dismiss"],
)
def test_the_tag_of_a_request_that_interrupts_becomes_the_action_of_run_finished(
    form: bool, req: Request, reason: InterruptReason
) -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.ask("r1", form=form)
    shell.request(req)
    shell.finish("r1")
    assert (shell.finished("r1").reason, shell.finished("r1").action_id) == (reason, "ui-42")


# --- tool parts -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("upto", "phase"),
    [
        (None, None),
        (PartState.PENDING, Phase.GENERATING),
        (PartState.PREPARED, Phase.PREPARED),
        (PartState.RUNNING, Phase.RUNNING),
        (PartState.COMPLETED, None),
    ],
    ids=["no-part", "generating", "prepared", "running", "after-the-part"],
)
def test_the_phase_of_an_interruption_is_that_of_the_open_tool_part(
    upto: PartState | None, phase: Phase | None
) -> None:
    shell = Shell(A)
    shell.start("r1")
    if upto is not None:
        shell.tool("r1", upto=upto)
    shell.cancel("r1")
    shell.report(PartReport(run_id="r1", tool="bash", state=PartState.COMPLETED))  # too late: ignored
    shell.finish("r1")
    assert shell.finished("r1").phase is phase
    if upto not in (None, PartState.COMPLETED):
        (part,) = shell.finished("r1").parts
        assert (part.state, part.phase) == (PartState.INTERRUPTED, phase)


def test_an_interrupt_turns_unfinished_parts_interrupted_never_error_and_leaves_finished_ones_alone() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.tool("r1", tool="read", upto=PartState.COMPLETED)
    shell.tool("r1", tool="bash", upto=PartState.PREPARED)
    shell.close(DISPOSE, A, mode=CONFIRMED, origin="project.close.confirmed")
    shell.finish("r1")
    read, bash = shell.finished("r1").parts
    assert (read.state, read.tool_started) == (PartState.COMPLETED, True)
    assert (bash.state, bash.tool_started, bash.phase) == (PartState.INTERRUPTED, False, Phase.PREPARED)
    assert (bash.reason, bash.origin) == (InterruptReason.LIFECYCLE_INTERRUPT, "project.close.confirmed")
    assert part_label(bash) == "Did not run: interrupted by project.close.confirmed before the tool started"


def test_a_body_failure_ends_the_run_failed_with_its_error_and_unfinished_parts_in_error() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.tool("r1", upto=PartState.RUNNING)
    shell.finish("r1", error="disk full")
    r1 = shell.finished("r1")
    assert (r1.outcome, r1.error, r1.reason, r1.origin, r1.action_id, r1.phase) == (
        Outcome.FAILED,
        "disk full",
        None,
        None,
        None,
        None,
    )
    assert [(p.state, p.message) for p in r1.parts] == [(PartState.ERROR, "disk full")]
    assert shell.core.run_snapshot("r1").error == "disk full"


def test_a_tool_that_fails_on_its_own_leaves_its_part_in_error_and_the_run_may_complete() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.tool("r1", upto=PartState.RUNNING)
    shell.report(PartReport(run_id="r1", tool="bash", state=PartState.ERROR, message="exit status 1"))
    shell.finish("r1")
    r1 = shell.finished("r1")
    assert r1.outcome is Outcome.COMPLETED
    assert [(p.state, p.message, p.tool_started) for p in r1.parts] == [
        (PartState.ERROR, "exit status 1", True)
    ]


def test_tool_started_is_set_once_the_tool_is_running_and_nothing_can_gate_it_any_more() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.tool("r1", upto=PartState.PREPARED)
    assert shell.core.run_snapshot("r1").parts[0].tool_started is False
    shell.report(PartReport(run_id="r1", tool="bash", state=PartState.RUNNING))
    running = shell.core.run_snapshot("r1").parts[0]
    assert (running.tool_started, running.label) == (False, "bash running")  # a first ask may follow
    shell.report(PartReport(run_id="r1", tool="bash", state=PartState.COMPLETED))
    assert shell.core.run_snapshot("r1").parts[0].tool_started is True


def test_run_finished_carries_the_generation_and_the_parts_in_order() -> None:
    shell = Shell(A)
    shell.close(RELOAD, A)
    shell.start("r1")
    shell.tool("r1", tool="grep", upto=PartState.COMPLETED)
    shell.tool("r1", tool="edit", upto=PartState.COMPLETED)
    shell.finish("r1")
    r1 = shell.finished("r1")
    assert r1.generation == 2
    assert [(p.tool, p.state, p.tool_started) for p in r1.parts] == [
        ("grep", PartState.COMPLETED, True),
        ("edit", PartState.COMPLETED, True),
    ]


def test_part_reports_out_of_order_are_ignored_and_counted() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.report(PartReport(run_id="r1", tool="bash", state=PartState.RUNNING))  # no part yet
    shell.report(PartReport(run_id="r1", tool="bash", state=PartState.PENDING))
    shell.report(PartReport(run_id="r1", tool="bash", state=PartState.RUNNING))  # skipped prepared
    shell.report(StepReport(run_id="ghost", step="model", kind=StepKind.MODEL, finished=False))
    assert shell.core.statistics().reports_ignored == 3
    assert shell.core.run_snapshot("r1").parts[0].state is PartState.PENDING


def test_step_reports_become_step_events_while_the_run_is_active() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.report(StepReport(run_id="r1", step="gen", kind=StepKind.TOOL_INPUT, finished=False))
    shell.report(StepReport(run_id="r1", step="gen", kind=StepKind.TOOL_INPUT, finished=True))
    assert shell.one(StepStarted).step == "gen" and shell.one(StepFinished).kind is StepKind.TOOL_INPUT
    shell.cancel("r1")
    shell.report(StepReport(run_id="r1", step="model", kind=StepKind.MODEL, finished=False))
    assert len(shell.of(StepStarted)) == 1


def _part(state: PartState, **fields: Any) -> PartSnapshot:
    return PartSnapshot(tool="bash", state=state, tool_started=fields.pop("tool_started", False), **fields)


def _interrupted(
    phase: Phase, reason: InterruptReason, origin: str | None = None, *, tool_started: bool = False
) -> PartSnapshot:
    return _part(PartState.INTERRUPTED, tool_started=tool_started, phase=phase, reason=reason, origin=origin)


@pytest.mark.parametrize(
    ("part", "label"),
    [
        (_part(PartState.COMPLETED, tool_started=True), "bash ran"),
        (_part(PartState.ERROR, tool_started=True, message="exit 1"), "bash failed: exit 1"),
        (
            _interrupted(Phase.PREPARED, InterruptReason.LIFECYCLE_INTERRUPT, "settings.provider.connect"),
            "Did not run: interrupted by settings.provider.connect before the tool started",
        ),
        (
            _interrupted(Phase.GENERATING, InterruptReason.SHUTDOWN, "shutdown"),
            "Did not run: interrupted by shutdown while the call was being generated",
        ),
        (
            _interrupted(Phase.RUNNING, InterruptReason.USER_CANCEL, "user", tool_started=True),
            "Stopped: bash was interrupted by the user's cancel while it ran",
        ),
        (
            _interrupted(Phase.PREPARED, InterruptReason.TEST_TEARDOWN),
            "Did not run: interrupted by test_teardown before the tool started",
        ),
        (_part(PartState.PENDING), "bash call being generated"),
        (_part(PartState.PREPARED), "bash call prepared, not started"),
        (_part(PartState.RUNNING, tool_started=True), "bash running"),
    ],
)
def test_a_part_label_says_what_happened_and_never_says_aborted(part: PartSnapshot, label: str) -> None:
    assert part_label(part) == label
    assert "abort" not in label.lower()


# --- sessions ---------------------------------------------------------------------------------------


def test_a_session_has_one_active_run_and_starts_queued_runs_first_in_first_out() -> None:
    shell = Shell(A)
    for run in ("r1", "r2", "r3"):
        shell.start(run, session="s1")
    assert [e.run_id for e in shell.of(RunQueued, session="s1")] == ["r2", "r3"]
    assert list(shell.spawned) == ["r1"]
    snapshot = shell.core.session_snapshot("s1")
    assert (snapshot.active, snapshot.queued) == ("r1", ("r2", "r3"))
    shell.finish("r1")
    assert list(shell.spawned) == ["r1", "r2"]
    assert shell.seq(RunFinished, run_id="r1") < shell.seq(RunStarted, run_id="r2")
    shell.finish("r2")
    shell.finish("r3")
    assert [e.run_id for e in shell.of(RunStarted)] == ["r1", "r2", "r3"]


def test_session_status_is_busy_once_and_idle_only_when_nothing_is_left_to_run() -> None:
    shell = Shell(A)
    for run in ("r1", "r2", "r3"):
        shell.start(run, session="s1")
    shell.finish("r1")
    shell.finish("r2")
    assert [e.status for e in shell.of(SessionStatusChanged)] == [SessionStatus.BUSY]
    shell.finish("r3")
    assert [e.status for e in shell.of(SessionStatusChanged)] == [SessionStatus.BUSY, SessionStatus.IDLE]
    shell.start("r4", session="s1")
    assert shell.of(RunQueued) == shell.of(RunQueued, session="s1") and len(shell.of(RunQueued)) == 2
    assert [e.status for e in shell.of(SessionStatusChanged)][-1] is SessionStatus.BUSY


@pytest.mark.parametrize("ending", ["completed", "failed", "cancelled", "rejected", "dismissed", "confirmed"])
def test_a_session_is_idle_after_any_outcome(ending: str) -> None:
    shell = Shell(A)
    shell.start("r1", session="s1")
    shell.ask("r1", form=ending == "dismissed")
    if ending == "cancelled":
        shell.cancel("r1")
    elif ending == "rejected":
        shell.request(ReplyPermission(run_id="r1", approve=False))
    elif ending == "dismissed":
        shell.request(DismissForm(run_id="r1"))
    elif ending == "confirmed":
        shell.close(DISPOSE, A, mode=CONFIRMED)
    shell.finish("r1", error="boom" if ending == "failed" else None)
    assert shell.core.session_snapshot("s1").status is SessionStatus.IDLE
    assert shell.of(SessionStatusChanged)[-1].status is SessionStatus.IDLE
    assert shell.commands(ReleaseRun) == [ReleaseRun("r1")]


# --- shutdown and test_teardown ---------------------------------------------------------------------


@pytest.mark.parametrize("reason", [InterruptReason.SHUTDOWN, InterruptReason.TEST_TEARDOWN])
def test_shutdown_ends_queued_runs_without_starting_them_and_interrupts_the_active_ones(
    reason: InterruptReason,
) -> None:
    shell = Shell(A, B)
    shell.start("r1", session="s1", directory=A)
    shell.start("r2", session="s1", directory=A)
    shell.start("r3", session="s3", directory=B)
    out = shell.shutdown(reason=reason, origin="app.quit", grace_ms=500, tag="bye")
    assert out.result is CloseResult.FORCED and out.interrupted_runs == ("r1", "r3")
    assert shell.one(LifecycleRequested).do.value == reason.value
    assert StartGraceTimer(action_id=out.action_id, grace_ms=500) in shell.last
    assert shell.commands(SignalInterrupt) == [SignalInterrupt("r1", reason), SignalInterrupt("r3", reason)]
    r2 = shell.finished("r2")
    assert (r2.outcome, r2.reason, r2.origin, r2.action_id, r2.generation) == (
        Outcome.INTERRUPTED,
        reason,
        "app.quit",
        out.action_id,
        None,
    )
    shell.finish("r1")
    assert "r2" not in shell.spawned
    shell.finish("r3")
    assert shell.finished("r1").reason is reason and shell.finished("r3").reason is reason
    assert shell.core.closed
    (done,) = shell.commands(ShutdownComplete)
    assert done.action_id == out.action_id and done.outcome.completed
    assert shell.one(LifecycleCompleted).tag == "bye"
    assert shell.core.session_snapshot("s1").status is SessionStatus.IDLE
    shell.assert_every_action_completed_once()


def test_shutdown_completes_pending_closes_as_superseded_by_it() -> None:
    shell = Shell(A, B)
    shell.start("r1", directory=A)
    shell.start("r2", directory=B)
    pending = shell.close(DISPOSE, A)
    confirmed = shell.close(DISPOSE, B, mode=CONFIRMED)
    out = shell.shutdown()
    assert shell.commands(SignalInterrupt, within=shell.last) == [
        SignalInterrupt("r1", InterruptReason.SHUTDOWN)
    ]
    shell.finish("r1")
    shell.finish("r2")
    for close in (pending, confirmed):
        assert shell.one(LifecycleCompleted, action_id=close.action_id).superseded_by == out.action_id
    assert shell.one(ActionResult, action_id=pending.action_id).result is CloseResult.DEFERRED
    assert shell.finished("r2").reason is InterruptReason.LIFECYCLE_INTERRUPT
    assert shell.one(LifecycleCompleted, action_id=out.action_id).superseded_by is None
    assert len(shell.commands(ShutdownComplete)) == 1
    shell.assert_every_action_completed_once()


def test_at_the_grace_deadline_bodies_that_never_ended_are_abandoned() -> None:
    shell = Shell(A, B)
    shell.start("r1", directory=A)
    shell.tool("r1", upto=PartState.RUNNING)
    shell.start("r2", directory=B)
    out = shell.shutdown(tag="quit")
    shell.finish("r2")
    assert not shell.core.closed
    shell.expire()
    assert AbandonRun("r1") in shell.last
    r1 = shell.finished("r1")
    assert (r1.outcome, r1.reason, r1.abandoned, r1.generation) == (
        Outcome.INTERRUPTED,
        InterruptReason.SHUTDOWN,
        True,
        1,
    )
    assert _states(shell, "r1") == [PartState.INTERRUPTED]
    assert shell.finished("r2").abandoned is False
    assert r1.seq < shell.seq(InstanceClosed, directory=A)
    assert DisposeInstance(A, 1, budget_ms=0, report=False) in shell.last
    assert shell.one(InstanceClosed, directory=A).error
    completed = shell.one(LifecycleCompleted, action_id=out.action_id)
    assert completed.abandoned_runs == ("r1",) and completed.tag == "quit"
    (done,) = shell.commands(ShutdownComplete)
    assert done.outcome.abandoned_runs == ("r1",)
    assert shell.core.closed and shell.core.statistics().runs_active == 0


def test_at_the_grace_deadline_an_instance_still_disposing_counts_as_closed_with_an_error() -> None:
    shell = Shell(A, hold_disposes=True)
    assert shell.shutdown() is None
    token = shell.last_token
    shell.expire()
    assert shell.one(InstanceClosed).error
    assert shell.one(LifecycleCompleted).error
    assert shell.answers[token].result is CloseResult.FORCED and shell.answers[token].completed
    assert len(shell.commands(ShutdownComplete)) == 1
    shell.release()  # the hook finally returns: too late, ignored
    assert shell.core.statistics().reports_ignored == 1
    assert len(shell.of(InstanceClosed)) == 1


def test_a_shutdown_with_nothing_to_wait_for_completes_at_once_and_says_so_once() -> None:
    shell = Shell(A)
    out = shell.shutdown()
    assert out.result is CloseResult.FORCED and out.completed
    assert len(shell.commands(ShutdownComplete)) == 1 and shell.core.closed
    shell.expire()
    assert shell.last == [] and len(shell.commands(ShutdownComplete)) == 1
    assert shell.core.statistics().reports_ignored == 1


def test_a_grace_expired_for_another_action_is_ignored() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.shutdown()
    assert shell.report(GraceExpired(action_id="lc-999")) == []
    assert shell.core.run_snapshot("r1").state == RunState.INTERRUPTING
    assert shell.core.statistics().reports_ignored == 1


def test_a_run_already_being_cancelled_at_shutdown_keeps_user_cancel() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.cancel("r1", tag="c1")
    out = shell.shutdown()
    assert out.interrupted_runs == () and len(shell.commands(SignalInterrupt)) == 1
    shell.expire()
    r1 = shell.finished("r1")
    assert (r1.reason, r1.action_id, r1.abandoned) == (InterruptReason.USER_CANCEL, "c1", True)


REQUESTS_AFTER_SHUTDOWN: list[Request] = [
    StartRun(run_id="r9", session="s9", directory=A),
    CancelRun(run_id="r1"),
    CloseRequest(do=DISPOSE, mode=MAINTENANCE, origin="x", directories=(A,)),
    CloseRequest(do=DISPOSE_ALL, mode=CONFIRMED, origin="x"),
    ReplyPermission(run_id="r1", approve=True),
    AnswerForm(run_id="r1", answer="a"),
    DismissForm(run_id="r1"),
]


@pytest.mark.parametrize("req", REQUESTS_AFTER_SHUTDOWN, ids=lambda r: type(r).__name__)
@pytest.mark.parametrize("when", ["while-shutting-down", "after-shutdown"])
def test_every_request_after_a_shutdown_is_rejected_as_supervisor_closed(req: Request, when: str) -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.ask("r1")
    shell.shutdown()
    if when == "after-shutdown":
        shell.finish("r1")
        assert shell.core.closed
    events = len(shell.events)
    out = shell.request(req)
    assert out.rejected and out.code is RejectCode.SUPERVISOR_CLOSED
    assert isinstance(out, CloseOutcome) == isinstance(req, CloseRequest)
    assert len(shell.events) == events and shell.last == [Reply(shell.last_token, out)]
    assert shell.core.preload(B) == []


def test_a_second_shutdown_during_the_first_gets_its_result_and_its_own_lifecycle_completed() -> None:
    shell = Shell(A)
    shell.start("r1")
    first = shell.shutdown(tag="first")
    second = shell.shutdown(reason=InterruptReason.TEST_TEARDOWN, origin="pytest", tag="second")
    assert (second.result, second.action_id) == (first.result, first.action_id)
    assert [e.tag for e in shell.of(LifecycleRequested, action_id=first.action_id)] == ["first", "second"]
    assert [e.tag for e in shell.of(ActionResult, action_id=first.action_id)] == ["first", "second"]
    assert len(shell.commands(SignalInterrupt)) == 1 and len(shell.commands(StartGraceTimer)) == 1
    shell.finish("r1")
    assert [e.tag for e in shell.of(LifecycleCompleted, action_id=first.action_id)] == ["first", "second"]
    assert len(shell.commands(ShutdownComplete)) == 1
    shell.assert_every_action_completed_once()


def test_a_second_shutdown_after_the_first_ended_gets_its_result_and_its_own_lifecycle_completed() -> None:
    shell = Shell(A)
    shell.start("r1")
    first = shell.shutdown(tag="first")
    shell.expire()
    second = shell.shutdown(tag="second")
    assert (second.result, second.action_id, second.completed) == (CloseResult.FORCED, first.action_id, True)
    assert second.abandoned_runs == ("r1",)
    assert shell.one(LifecycleCompleted, tag="second").action_id == first.action_id
    assert shell.one(ActionResult, tag="second").result is CloseResult.FORCED
    assert len(shell.commands(ShutdownComplete)) == 1
    shell.assert_every_action_completed_once()


def test_every_lifecycle_completed_of_one_shutdown_names_the_same_abandoned_runs_and_error() -> None:
    joined_late = Shell(A)
    joined_late.start("r1")
    joined_late.shutdown(tag="first")
    joined_late.expire()
    joined_late.shutdown(tag="second")
    first, second = joined_late.of(LifecycleCompleted)
    assert first.abandoned_runs == ("r1",) and first.error
    assert (second.abandoned_runs, second.error) == (first.abandoned_runs, first.error)


def test_a_second_shutdown_is_answered_only_after_the_first_ones_immediate_closes() -> None:
    shell = Shell(A, hold_disposes=True)
    shell.shutdown(tag="first")
    shell.shutdown(tag="second")
    second = shell.last_token
    shell.release()
    closed = shell.seq(InstanceClosed)
    assert [e.tag for e in shell.of(ActionResult)] == ["first", "second"]
    assert all(e.seq > closed for e in shell.of(ActionResult))
    assert shell.reply_position(second) > shell.event_position(InstanceClosed)


def test_a_watchdog_shutdown_interrupts_with_timeout_and_is_a_shutdown() -> None:
    shell = Shell(A)
    shell.start("r1")
    shell.start("r2", session="s-r1")
    out = shell.shutdown(reason=InterruptReason.TIMEOUT, origin="scenario.timeout")
    assert out.result is CloseResult.FORCED
    assert (shell.one(LifecycleRequested).do, shell.one(LifecycleRequested).mode) == (
        CloseAction.SHUTDOWN,
        CloseMode.SHUTDOWN,
    )
    assert shell.commands(SignalInterrupt) == [SignalInterrupt("r1", InterruptReason.TIMEOUT)]
    shell.finish("r1")
    for run in ("r1", "r2"):
        assert (shell.finished(run).reason, shell.finished(run).origin) == (
            InterruptReason.TIMEOUT,
            "scenario.timeout",
        )


def test_late_reports_after_shutdown_are_ignored_and_counted() -> None:
    shell = Shell(A, hold_disposes=True)
    shell.start("r1")
    shell.close(DISPOSE, A, mode=CONFIRMED)
    shell.shutdown()
    shell.expire()
    assert shell.core.closed
    ignored = shell.core.statistics().reports_ignored
    assert shell.finish("r1") == []
    assert shell.report(DisposeDone(A, 1)) == []
    assert shell.report(StepReport(run_id="r1", step="model", kind=StepKind.MODEL, finished=True)) == []
    assert shell.report(GraceExpired(action_id=shell.commands(StartGraceTimer)[0].action_id)) == []
    assert shell.core.statistics().reports_ignored == ignored + 4
    assert len(shell.of(RunFinished)) == 1


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "req",
    [
        StartRun(run_id="", session="s1", directory=A),
        StartRun(run_id="r1", session="", directory=A),
        StartRun(run_id="r1", session="s1", directory=""),
    ],
    ids=["run", "session", "directory"],
)
def test_a_start_run_with_an_empty_field_is_an_invalid_request(req: StartRun) -> None:
    shell = Shell(A)
    out = shell.request(req)
    assert out.result is RequestResult.REJECTED and out.code is RejectCode.INVALID_REQUEST
    assert shell.events_in(shell.last) == [] and shell.spawned == {}


def test_a_run_id_can_be_used_only_once() -> None:
    shell = Shell(A)
    shell.start("r1")
    assert shell.start("r1", session="other").code is RejectCode.RUN_ALREADY_EXISTS
    shell.finish("r1")
    assert shell.start("r1").code is RejectCode.RUN_ALREADY_EXISTS
    assert list(shell.spawned) == ["r1"]


@pytest.mark.parametrize("do", [DISPOSE, RELOAD])
def test_a_one_directory_close_of_an_unknown_directory_is_rejected(do: CloseAction) -> None:
    shell = Shell(A)
    out = shell.close(do, "/w/nowhere")
    assert isinstance(out, CloseOutcome)
    assert out.result is CloseResult.REJECTED and out.code is RejectCode.UNKNOWN_DIRECTORY
    assert shell.events_in(shell.last) == []


@pytest.mark.parametrize("do", [DISPOSE, RELOAD])
@pytest.mark.parametrize("directories", [(), (A, B)], ids=["none", "two"])
def test_a_one_directory_close_that_names_zero_or_two_directories_is_invalid(
    do: CloseAction, directories: tuple[str, ...]
) -> None:
    shell = Shell(A, B)
    out = shell.close(do, *directories)
    assert out.result is CloseResult.REJECTED and out.code is RejectCode.INVALID_REQUEST
    assert shell.events_in(shell.last) == [] and shell.core.live_instances() == ((A, 1), (B, 1))


@pytest.mark.parametrize(
    ("do", "mode"),
    [
        (DISPOSE_ALL, CloseMode.SHUTDOWN),
        (DISPOSE, CloseMode.TEST_TEARDOWN),
        (CloseAction.SHUTDOWN, MAINTENANCE),
        (CloseAction.TEST_TEARDOWN, CloseMode.TEST_TEARDOWN),
    ],
)
def test_a_close_request_in_a_shutdown_mode_is_invalid(do: CloseAction, mode: CloseMode) -> None:
    shell = Shell(A)
    shell.start("r1")
    out = shell.close(do, A, mode=mode)
    assert out.result is CloseResult.REJECTED and out.code is RejectCode.INVALID_REQUEST
    assert shell.last == [Reply(shell.last_token, out)]
    assert not shell.core.shutting_down and shell.core.run_snapshot("r1").state == RunState.ACTIVE


@pytest.mark.parametrize(
    "req",
    [Shutdown(reason=InterruptReason.USER_CANCEL), Shutdown(grace_ms=-1)],
    ids=["not-a-shutdown-reason", "negative-grace"],
)
def test_a_malformed_shutdown_is_invalid_and_shuts_nothing_down(req: Shutdown) -> None:
    shell = Shell(A)
    out = shell.request(req)
    assert out.result is CloseResult.REJECTED and out.code is RejectCode.INVALID_REQUEST
    assert not shell.core.shutting_down and shell.events_in(shell.last) == []


# --- seq and statistics -----------------------------------------------------------------------------


def _busy_story() -> Shell:
    shell = Shell(A, B)
    shell.start("r1", session="s1", directory=A)
    shell.start("r2", session="s1", directory=A)
    shell.start("r3", session="s3", directory=B)
    shell.tool("r1", upto=PartState.PREPARED)
    shell.report(StepReport(run_id="r1", step="gen", kind=StepKind.TOOL_INPUT, finished=False))
    shell.close(DISPOSE_ALL, origin="settings.provider.connect", tag="ui-1")
    shell.close(RELOAD, B, mode=CONFIRMED)
    shell.finish("r3")
    shell.cancel("r2")
    shell.finish("r1", error="boom")
    shell.start("r4", session="s4", directory=A)
    shell.ask("r4")
    shell.shutdown(tag="quit")
    shell.expire()
    return shell


def test_seq_strictly_increases_across_every_emitted_event() -> None:
    shell = _busy_story()
    seqs = [e.seq for e in shell.events]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1
    assert shell.core.statistics().events_emitted == seqs[-1] == len(seqs)
    assert {type(e) for e in shell.events} >= {
        InstanceStarted,
        InstanceClosed,
        RunQueued,
        RunStarted,
        StepStarted,
        RunFinished,
        SessionStatusChanged,
        LifecycleRequested,
        LifecycleDeferred,
        LifecycleCompleted,
        ActionResult,
    }
    shell.assert_every_action_completed_once()


def test_statistics_match_the_situation() -> None:
    shell = Shell(A, B)
    stats = shell.core.statistics()
    assert (stats.runs_active, stats.runs_queued, stats.instances_open, stats.actions_pending) == (0, 0, 2, 0)
    shell.start("r1", session="s1", directory=A)
    shell.start("r2", session="s1", directory=A)
    shell.start("r3", session="s3", directory=B)
    stats = shell.core.statistics()
    assert (stats.runs_active, stats.runs_queued, stats.sessions_busy) == (2, 1, 2)
    shell.close(DISPOSE, A)
    shell.start("r4", session="s4", directory=A)  # a fresh generation 2 next to the waiting 1
    stats = shell.core.statistics()
    assert (stats.runs_active, stats.instances_open, stats.actions_pending) == (3, 3, 1)
    shell.finish("r1")  # generation 1 closes; r2 takes over s1 on generation 2
    stats = shell.core.statistics()
    assert (stats.runs_active, stats.runs_queued, stats.runs_finished) == (3, 0, 1)
    assert (stats.instances_open, stats.actions_pending) == (2, 0)
    for run in ("r2", "r3", "r4"):
        shell.finish(run)
    stats = shell.core.statistics()
    assert (stats.runs_active, stats.sessions_busy, stats.runs_finished) == (0, 0, 4)
    assert not stats.shutting_down and not stats.closed
    shell.shutdown()
    stats = shell.core.statistics()
    assert stats.shutting_down and stats.closed and stats.instances_open == 0 and stats.actions_pending == 0


# --- the codec --------------------------------------------------------------------------------------

EVERY_REQUEST: list[Request] = [
    StartRun(run_id="r1", session="s1", directory=A, tag="t"),
    CancelRun(run_id="r1", origin="keyboard"),
    CloseRequest(do=RELOAD, mode=CONFIRMED, origin="project.close", directories=(A,), tag="ui-7"),
    CloseRequest(do=INVALIDATE, mode=MAINTENANCE, origin="config.update"),
    Shutdown(reason=InterruptReason.TEST_TEARDOWN, origin="pytest", grace_ms=250),
    ReplyPermission(run_id="r1", approve=False, message="no"),
    AnswerForm(run_id="r1", answer="blue"),
    DismissForm(run_id="r1", tag="x"),
    SetQueuePolicy(session="s1", queue_policy=QueuePolicy.COALESCE),
    StartRun(run_id="r2", session="s1", directory=A, queue_policy=QueuePolicy.REJECT_IF_BUSY),
    ConfirmClose(action_id="lc-1", origin="ui.confirm", tag="c"),
    CancelSession(session="s1", origin="ui.stop", grace_ms=500),
    DeleteSession(session="s1", confirm=True),
    StartRun(
        run_id="r3",
        session="s1",
        directory=A,
        interrupt_grace_ms=0,
        retry_budget=RetryBudget(attempts=3, backoff_ms=60_000),
    ),
]


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize("req", EVERY_REQUEST, ids=lambda r: type(r).__name__)
def test_every_request_type_survives_a_round_trip(req: Request, fmt: Any) -> None:
    assert decode_request(encode(req, fmt), fmt) == req


def test_the_codec_covers_every_request_type() -> None:
    assert {type(r) for r in EVERY_REQUEST} == set(Request.__args__)  # type: ignore[attr-defined]


def test_a_json_request_is_tagged_by_type_and_its_defaults_may_be_left_out() -> None:
    assert b'"type":"close"' in encode(EVERY_REQUEST[2])
    assert decode_request('{"type":"shutdown"}') == Shutdown()
    assert decode_request(b'{"type":"cancel","run_id":"r1"}') == CancelRun(run_id="r1", origin="user")


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_every_event_of_a_story_survives_a_round_trip(fmt: Any) -> None:
    shell = _busy_story()
    for event in shell.events:
        assert decode_event(encode(event, fmt), fmt) == event


GARBAGE_JSON = [
    b"",
    b"not json",
    b"[1, 2]",
    b"{}",
    b'{"type": "explode"}',
    b'{"type": "start_run", "run_id": "r1"}',
    b'{"type": "close", "do": "explode", "mode": "maintenance", "origin": "x"}',
    b'{"type": "close", "do": "dispose", "mode": "gently", "origin": "x"}',
    b'{"type": "shutdown", "grace_ms": "soon"}',
    b'{"type": "reply_permission", "run_id": "r1", "approve": "yes"}',
]


@pytest.mark.parametrize("data", GARBAGE_JSON)
def test_garbage_json_raises_protocol_decode_error_not_a_msgspec_error(data: bytes) -> None:
    with pytest.raises(ProtocolDecodeError, match="not a valid request") as caught:
        decode_request(data)
    assert type(caught.value) is ProtocolDecodeError
    assert not isinstance(caught.value, msgspec.MsgspecError)


@pytest.mark.parametrize(
    "data",
    [b"\xc1", b"", msgspec.msgpack.encode({"type": "start_run"}), msgspec.msgpack.encode([1])],
    ids=["bad-opcode", "empty", "missing-fields", "array"],
)
def test_garbage_msgpack_raises_protocol_decode_error(data: bytes) -> None:
    with pytest.raises(ProtocolDecodeError) as caught:
        decode_request(data, "msgpack")
    assert not isinstance(caught.value, msgspec.MsgspecError)


def test_a_garbage_event_raises_protocol_decode_error() -> None:
    with pytest.raises(ProtocolDecodeError, match="not a valid event") as caught:
        decode_event(b'{"type": "run.finished", "seq": 1}')
    assert not isinstance(caught.value, msgspec.MsgspecError)


def test_an_unknown_format_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        decode_request(b"{}", "xml")  # type: ignore[arg-type]


# --- cost: a decision touches only what it names ----------------------------------------------------


def _crowd(directories: int, runs_per_directory: int) -> tuple[Shell, list[str]]:
    names = [f"/w/d{i:03}" for i in range(directories)]
    shell = Shell(*names)
    for i, name in enumerate(names):
        for k in range(runs_per_directory):
            shell.start(f"r-{i:03}-{k}", session=f"s-{i:03}-{k}", directory=name)
    return shell, names


def test_a_maintenance_close_of_one_directory_among_a_thousand_runs_emits_commands_only_for_it() -> None:
    shell, names = _crowd(100, 10)
    assert shell.core.statistics().runs_active == 1000
    target = names[0]
    mine = {f"r-000-{k}" for k in range(10)}

    out = shell.close(DISPOSE, target)
    assert out.blocking_runs == tuple(sorted(mine))
    assert [type(c) for c in shell.last] == [Emit, Emit, Emit, Reply]
    requested, deferred, _result = shell.events_in(shell.last)
    assert requested.directories == (target,) and deferred.pending_directories == (target,)

    small, _ = _crowd(1, 10)
    small.close(DISPOSE, "/w/d000")
    assert len(small.last) == len(shell.last)  # the decision does not grow with unrelated runs

    touched: list[Command] = []
    for run in sorted(mine):
        touched += shell.finish(run)
    assert {c.run_id for c in touched if isinstance(c, ReleaseRun)} == mine
    assert {(c.directory, c.generation) for c in shell.commands(DisposeInstance)} == {(target, 1)}
    assert [e.directory for e in shell.of(InstanceClosed)] == [target]
    assert shell.core.statistics().runs_active == 990
    assert len(shell.core.live_instances()) == 99


def test_a_confirmed_close_of_one_directory_among_a_thousand_runs_interrupts_only_its_runs() -> None:
    shell, names = _crowd(100, 10)
    out = shell.close(DISPOSE, names[42], mode=CONFIRMED)
    mine = tuple(f"r-042-{k}" for k in range(10))
    assert out.interrupted_runs == mine
    assert [c.run_id for c in shell.commands(SignalInterrupt, within=shell.last)] == list(mine)
    assert len(shell.last) == 10 + 3  # lifecycle.requested, the interrupts, action.result, the reply
    assert shell.core.statistics().runs_active == 1000
    assert all(shell.core.run_snapshot(f"r-041-{k}").state == RunState.ACTIVE for k in range(10))
