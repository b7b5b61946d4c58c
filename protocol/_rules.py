"""Every rule that moves a run, a tool part, an ask, an instance or a lifecycle action, and what each
close mode may do.

This file is the whole state machine, as data (h11's ``_state.py`` is the model). The core
(``protocol._core``) only looks rules up here; the docs' state tables are generated from these
mappings (``scripts/gen_state_tables.py``), so they cannot drift.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TypeVar

from run_supervisor.protocol._enums import (
    ActionState,
    AskKind,
    AskState,
    CloseAction,
    CloseMode,
    CloseResult,
    InstanceState,
    InterruptReason,
    Outcome,
    PartState,
    Phase,
    QueuePolicy,
    ReloadPolicy,
    RunState,
    SessionStatus,
    ShutdownReason,
)

__all__ = [
    "ACTION_TRANSITIONS",
    "ASK_TRANSITIONS",
    "BODY_RULES",
    "BODY_TRANSITIONS",
    "CANCEL_REASONS",
    "CLOSE_ACTION_SCOPE",
    "CLOSE_ANSWERS",
    "CLOSE_REQUEST_ACTIONS",
    "CLOSE_REQUEST_MODES",
    "CLOSE_RULES",
    "CONFIRM_RULES",
    "DEADLINE_EXPIRY",
    "DEADLINE_ORIGIN",
    "DEADLINE_REASON",
    "DECLINE_ORIGINS",
    "DECLINE_RULES",
    "FINISHED_RUN_STATES",
    "GRACE_EXPIRY",
    "INSTANCE_TRANSITIONS",
    "INTERRUPT_GRACE",
    "PART_PHASE",
    "PART_REPORTS",
    "PART_TRANSITIONS",
    "QUEUE_REASONS",
    "QUEUE_RULES",
    "RELOAD_RULES",
    "RETRY_BUDGET_ORIGIN",
    "RETRY_BUDGET_REASON",
    "RETRY_REPORTED_IN",
    "RUNNING_RUN_STATES",
    "RUN_OUTCOMES",
    "RUN_TRANSITIONS",
    "SESSION_TRANSITIONS",
    "SHUTDOWN_ACTIONS",
    "SHUTDOWN_INTERRUPT_REASONS",
    "SHUTDOWN_RULES",
    "STALLABLE_RUN_STATES",
    "STALL_TRANSITIONS",
    "ActionTrigger",
    "AskTrigger",
    "BodyRule",
    "BodyState",
    "BodyTrigger",
    "ClosePolicy",
    "CloseScope",
    "DeclineEffect",
    "DeclineRule",
    "GraceClock",
    "IllegalTransitionError",
    "InstanceTrigger",
    "QueueRule",
    "QueuedFate",
    "ReloadLoad",
    "RunTrigger",
    "SessionTrigger",
    "ShutdownRule",
    "StallTrigger",
    "WhenBusy",
    "decline_rule",
    "fingerprint_unchanged",
    "next_action_state",
    "next_ask_state",
    "next_body_state",
    "next_instance_state",
    "next_part_state",
    "next_run_state",
    "next_session_status",
    "next_stall_state",
    "reload_loads",
    "retry_budget_exhausted",
    "retry_waiting",
    "session_status_announced",
    "stall_applies",
]


class IllegalTransitionError(Exception):
    """A state machine was asked to make a move its table does not allow (a bug in the caller)."""


_State = TypeVar("_State", bound=StrEnum)
_Trigger = TypeVar("_Trigger", bound=StrEnum)


def _move(
    machine: str,
    table: Mapping[_State, Mapping[_Trigger, _State]],
    state: _State,
    trigger: _Trigger,
    where: str = "in state",
) -> _State:
    """The state ``trigger`` moves ``state`` to in ``table``; a move the table lacks is a bug."""
    try:
        return table[state][trigger]
    except KeyError:
        raise IllegalTransitionError(f"{machine}: {trigger.value} {where} {state.value}") from None


class RunTrigger(StrEnum):
    START = "start"
    INTERRUPT = "interrupt"
    """An interrupt is decided; its reason is fixed from here on (the first reason wins)."""
    BODY_RETURNED = "body_returned"
    BODY_RAISED = "body_raised"
    CANCEL_QUEUED = "cancel_queued"
    ABANDON = "abandon"
    """The interrupt's grace passed and the body still runs (the shutdown's grace, or the run's own:
    ``INTERRUPT_GRACE``): the run is finished without it, ``abandoned``."""


RUN_TRANSITIONS: Mapping[RunState, Mapping[RunTrigger, RunState]] = MappingProxyType(
    {
        RunState.QUEUED: {
            RunTrigger.START: RunState.ACTIVE,
            RunTrigger.CANCEL_QUEUED: RunState.INTERRUPTED,
        },
        RunState.ACTIVE: {
            RunTrigger.INTERRUPT: RunState.INTERRUPTING,
            RunTrigger.BODY_RETURNED: RunState.COMPLETED,
            RunTrigger.BODY_RAISED: RunState.FAILED,
        },
        RunState.INTERRUPTING: {
            # Whatever the body does once interrupted, the decided interrupt is the outcome.
            RunTrigger.BODY_RETURNED: RunState.INTERRUPTED,
            RunTrigger.BODY_RAISED: RunState.INTERRUPTED,
            RunTrigger.ABANDON: RunState.INTERRUPTED,
        },
        RunState.COMPLETED: {},
        RunState.INTERRUPTED: {},
        RunState.FAILED: {},
    }
)

RUN_OUTCOMES: Mapping[RunState, Outcome] = MappingProxyType(
    {
        RunState.COMPLETED: Outcome.COMPLETED,
        RunState.INTERRUPTED: Outcome.INTERRUPTED,
        RunState.FAILED: Outcome.FAILED,
    }
)
"""The outcome a finished run reports (``run.finished``, a run's result), by its final state: the
final states are exactly its keys."""

FINISHED_RUN_STATES = frozenset(RUN_OUTCOMES)

RUNNING_RUN_STATES = frozenset({RunState.ACTIVE, RunState.INTERRUPTING})
"""A run in these states has a body that still runs (started, not finished): a parent waits for a
running child that is not flagged stalled."""

CANCEL_REASONS = frozenset({InterruptReason.USER_CANCEL, InterruptReason.TIMEOUT})
"""The reasons a ``CancelRun`` may give (a user's cancel, a watchdog's); every other interrupt
reason is the supervisor's own decision (a decline, a close, a shutdown, a queue policy)."""


def next_run_state(state: RunState, trigger: RunTrigger) -> RunState:
    return _move("run", RUN_TRANSITIONS, state, trigger)


class BodyState(StrEnum):
    """A started run's body, beside its ``RunState``: a sub-state of the rules only. To a host a run
    waiting for its children is still ``active`` or ``interrupting`` (its snapshot's ``state``),
    since the wait decides nothing of its outcome: that is its ``RunState``'s, whether or not an
    interrupt came before its body ended."""

    RUNNING = "running"
    """Its body has not ended (or the run has not started)."""
    AWAITING_CHILDREN = "awaiting_children"
    """Its body ended while children of it were unfinished: how it ended is kept (``_Run.ended``),
    and the run is reported finished once the last of them has."""
    ENDED = "ended"
    """Its body's end was applied: the run finished with it."""


class BodyTrigger(StrEnum):
    BODY_ENDED = "body_ended"
    """Its body returned or raised, and no child of it is unfinished."""
    BODY_ENDED_BEFORE_CHILDREN = "body_ended_before_children"
    """Its body returned or raised while a child of it is unfinished."""
    LAST_CHILD_FINISHED = "last_child_finished"


BODY_TRANSITIONS: Mapping[BodyState, Mapping[BodyTrigger, BodyState]] = MappingProxyType(
    {
        BodyState.RUNNING: {
            BodyTrigger.BODY_ENDED: BodyState.ENDED,
            BodyTrigger.BODY_ENDED_BEFORE_CHILDREN: BodyState.AWAITING_CHILDREN,
        },
        BodyState.AWAITING_CHILDREN: {BodyTrigger.LAST_CHILD_FINISHED: BodyState.ENDED},
        BodyState.ENDED: {},
    }
)


@dataclass(frozen=True, slots=True)
class BodyRule:
    """What a run may still do, by its body's state (``BODY_RULES``)."""

    takes_body_end: bool
    """A ``BodyEnded`` of it is applied (else refused: its body ended already)."""
    starts_children: bool
    """It may be the parent of a new child run (while ``active``)."""
    abandoned_at_grace: bool
    """Past its interrupt's grace it is abandoned (a parent awaiting its children is not: it
    finishes with its last child, which the grace abandons first)."""
    may_stall: bool
    """No progress may flag it stalled (one awaiting its children is not stuck)."""


BODY_RULES: Mapping[BodyState, BodyRule] = MappingProxyType(
    {
        BodyState.RUNNING: BodyRule(
            takes_body_end=True, starts_children=True, abandoned_at_grace=True, may_stall=True
        ),
        BodyState.AWAITING_CHILDREN: BodyRule(
            takes_body_end=False, starts_children=False, abandoned_at_grace=False, may_stall=False
        ),
        BodyState.ENDED: BodyRule(
            takes_body_end=False, starts_children=False, abandoned_at_grace=False, may_stall=False
        ),
    }
)


def next_body_state(state: BodyState, trigger: BodyTrigger) -> BodyState:
    return _move("run body", BODY_TRANSITIONS, state, trigger)


PART_TRANSITIONS: Mapping[PartState, frozenset[PartState]] = MappingProxyType(
    {
        PartState.PENDING: frozenset({PartState.PREPARED, PartState.ERROR, PartState.INTERRUPTED}),
        PartState.PREPARED: frozenset({PartState.RUNNING, PartState.ERROR, PartState.INTERRUPTED}),
        PartState.RUNNING: frozenset({PartState.COMPLETED, PartState.ERROR, PartState.INTERRUPTED}),
        # A permission rejected with a message turns a running part to ``error`` while the tool
        # call goes on to its end; the part stays ``error``.
        PartState.ERROR: frozenset({PartState.ERROR}),
        PartState.COMPLETED: frozenset(),
        PartState.INTERRUPTED: frozenset(),
    }
)

UNFINISHED_PART_STATES = frozenset({PartState.PENDING, PartState.PREPARED, PartState.RUNNING})

PART_PHASE: Mapping[PartState, Phase] = MappingProxyType(
    {
        PartState.PENDING: Phase.GENERATING,
        PartState.PREPARED: Phase.PREPARED,
        PartState.RUNNING: Phase.RUNNING,
    }
)
"""The phase an interruption is reported with, by the state of the open tool part."""


def next_part_state(state: PartState, target: PartState) -> PartState:
    if target not in PART_TRANSITIONS[state]:
        raise IllegalTransitionError(f"tool part: {state.value} -> {target.value}")
    return target


PART_REPORTS: Mapping[PartState, Mapping[PartState, tuple[PartState, ...]]] = MappingProxyType(
    {
        PartState.PENDING: {
            PartState.PENDING: (),
            PartState.PREPARED: (PartState.PREPARED,),
            # opencode's tool states have no ``prepared``: its ``running`` follows ``pending``, and
            # the call's input was complete when the tool started.
            PartState.RUNNING: (PartState.PREPARED, PartState.RUNNING),
            # A tool that completed ran, whatever its client left unsaid.
            PartState.COMPLETED: (PartState.PREPARED, PartState.RUNNING, PartState.COMPLETED),
            PartState.ERROR: (PartState.ERROR,),
        },
        PartState.PREPARED: {
            PartState.PREPARED: (),
            PartState.RUNNING: (PartState.RUNNING,),
            PartState.COMPLETED: (PartState.RUNNING, PartState.COMPLETED),
            PartState.ERROR: (PartState.ERROR,),
        },
        PartState.RUNNING: {
            PartState.RUNNING: (),
            PartState.COMPLETED: (PartState.COMPLETED,),
            PartState.ERROR: (PartState.ERROR,),
        },
        PartState.COMPLETED: {PartState.COMPLETED: ()},
        # ``error`` again: the tool's message replaces the last one (a user's feedback stays).
        PartState.ERROR: {PartState.ERROR: (PartState.ERROR,)},
        PartState.INTERRUPTED: {},
    }
)
"""What a client's report of a tool part's state stands for (an external run's ``part`` report),
by the state the part is in: the moves to make, in order, each one a ``PART_TRANSITIONS`` move.
Both vocabularies are covered: opencode's ``pending -> running -> completed | error`` and this
library's, which has ``prepared`` between. ``()``: the part is in that state already (a retried
report): nothing moves, and the report stands. A state missing from a row is no move at all (a part
never goes back, and ``completed`` is final); ``interrupted`` is in no row: the supervisor decides
it. The answer to the report says which it was: ``ok`` only once the part is in the reported state."""


class InstanceTrigger(StrEnum):
    RETIRE = "retire"
    """A close covers it: no new run is pinned to it any more."""
    DISPOSE = "dispose"
    """No run pinned to it is active: its dispose hook runs."""
    DISPOSED = "disposed"
    """The hook returned, raised or overran its budget: closed either way."""


INSTANCE_TRANSITIONS: Mapping[InstanceState, Mapping[InstanceTrigger, InstanceState]] = MappingProxyType(
    {
        InstanceState.LIVE: {InstanceTrigger.RETIRE: InstanceState.RETIRING},
        InstanceState.RETIRING: {InstanceTrigger.DISPOSE: InstanceState.DISPOSING},
        InstanceState.DISPOSING: {InstanceTrigger.DISPOSED: InstanceState.CLOSED},
        InstanceState.CLOSED: {},
    }
)


def next_instance_state(state: InstanceState, trigger: InstanceTrigger) -> InstanceState:
    return _move("instance", INSTANCE_TRANSITIONS, state, trigger)


class ActionTrigger(StrEnum):
    HOLD_ANSWER = "hold_answer"
    """An instance it covers is disposing at once: the requester is answered once it has closed."""
    ANSWER = "answer"
    """The requester is answered (``action.result``); some instance still waits for its runs."""
    INSTANCE_CLOSED = "instance_closed"
    """One of its instances closed; others are still awaited."""
    COMPLETE = "complete"
    """The last instance it covers closed (``lifecycle.completed``; answered now if not yet)."""
    JOIN = "join"
    """A later shutdown joins this one: answered with its result, completed with it."""
    SUPERSEDE = "supersede"
    """A shutdown takes over: it still completes when its instances have closed."""
    NOOP = "noop"
    """The no-op gate (``fingerprint_unchanged``) held: answered ``noop``, completed at once, nothing
    touched."""


ACTION_TRANSITIONS: Mapping[ActionState, Mapping[ActionTrigger, ActionState]] = MappingProxyType(
    {
        ActionState.REQUESTED: {
            ActionTrigger.HOLD_ANSWER: ActionState.ANNOUNCING,
            ActionTrigger.ANSWER: ActionState.PENDING,
            ActionTrigger.COMPLETE: ActionState.COMPLETED,
            ActionTrigger.NOOP: ActionState.COMPLETED,
        },
        ActionState.ANNOUNCING: {
            ActionTrigger.INSTANCE_CLOSED: ActionState.ANNOUNCING,
            ActionTrigger.ANSWER: ActionState.PENDING,
            ActionTrigger.COMPLETE: ActionState.COMPLETED,
            ActionTrigger.JOIN: ActionState.ANNOUNCING,
            ActionTrigger.SUPERSEDE: ActionState.ANNOUNCING,
        },
        ActionState.PENDING: {
            ActionTrigger.INSTANCE_CLOSED: ActionState.PENDING,
            ActionTrigger.COMPLETE: ActionState.COMPLETED,
            ActionTrigger.JOIN: ActionState.PENDING,
            ActionTrigger.SUPERSEDE: ActionState.PENDING,
        },
        # A shutdown stays joinable once completed: a later one is answered with its outcome.
        ActionState.COMPLETED: {ActionTrigger.JOIN: ActionState.COMPLETED},
    }
)
"""A lifecycle action is answered on leaving ``requested``/``announcing`` and completes exactly once."""

ANSWERED_ACTION_STATES = frozenset({ActionState.PENDING, ActionState.COMPLETED})


def fingerprint_unchanged(fingerprint: str | None, loaded_with: Collection[str | None]) -> bool:
    """The no-op gate: a close carrying ``fingerprint`` changes nothing when at least one live
    instance it covers exists and every one was loaded with that same fingerprint. Instances
    already retiring are closing anyway and do not count; with nothing live the close goes ahead
    (it completes at once, and records the fingerprint for the next load)."""
    return fingerprint is not None and bool(loaded_with) and all(f == fingerprint for f in loaded_with)


def next_action_state(state: ActionState, trigger: ActionTrigger) -> ActionState:
    return _move("lifecycle action", ACTION_TRANSITIONS, state, trigger)


class AskTrigger(StrEnum):
    REPLY = "reply"
    """``reply_permission`` (approve or reject) or ``answer_form``."""
    DISMISS = "dismiss"
    """``dismiss_form``, with or without a message."""
    WITHDRAW = "withdraw"
    """The body stopped waiting (timeout, ``Ask.withdraw()``), or its run was interrupted or ended."""


ASK_TRANSITIONS: Mapping[AskState, Mapping[AskTrigger, AskState]] = MappingProxyType(
    {
        AskState.OPEN: {
            AskTrigger.REPLY: AskState.REPLIED,
            AskTrigger.DISMISS: AskState.DISMISSED,
            AskTrigger.WITHDRAW: AskState.WITHDRAWN,
        },
        # The first decision stands: a later reply is rejected (ask_already_answered or
        # ask_withdrawn) and never reaches another ask.
        AskState.REPLIED: {},
        AskState.DISMISSED: {},
        AskState.WITHDRAWN: {},
    }
)


def next_ask_state(state: AskState, trigger: AskTrigger) -> AskState:
    return _move("ask", ASK_TRANSITIONS, state, trigger)


class DeclineEffect(StrEnum):
    """What a user's "no" does: a permission rejected or a form dismissed."""

    INTERRUPT_RUN = "interrupt_run"
    """The run is interrupted (with the rule's reason and origin); like every interrupt, it withdraws
    every other open ask of the run (``withdrawn``, reason ``interrupted``)."""
    FEEDBACK = "feedback"
    """The message is that call's answer: delivered to the body, the call's tool part ends ``error``
    with it (model-visible); the run goes on and its other open asks stay open."""


@dataclass(frozen=True, slots=True)
class DeclineRule:
    """What one kind of declined ask does, with or without a message."""

    effect: DeclineEffect
    interrupts_with: InterruptReason | None = None
    """For ``interrupt_run``: the interrupt's reason..."""
    origin: str | None = None
    """...and its origin."""


DECLINE_RULES: Mapping[AskKind, Mapping[bool, DeclineRule]] = MappingProxyType(
    {
        AskKind.PERMISSION: {
            False: DeclineRule(
                effect=DeclineEffect.INTERRUPT_RUN,
                interrupts_with=InterruptReason.PERMISSION_REJECTED,
                origin="permission",
            ),
            True: DeclineRule(effect=DeclineEffect.FEEDBACK),
        },
        AskKind.FORM: {
            False: DeclineRule(
                effect=DeclineEffect.INTERRUPT_RUN,
                interrupts_with=InterruptReason.FORM_DISMISSED,
                origin="form",
            ),
            True: DeclineRule(effect=DeclineEffect.FEEDBACK),
        },
    }
)
"""A declined ask (a permission rejected, a form dismissed), by its kind and whether the user gave a
message (an empty message is none): without one the user stops the run, with one the user talks to
the model about that one call. With several asks open, only a decline that interrupts reaches the
others (it withdraws them)."""


def decline_rule(kind: AskKind, message: str | None) -> DeclineRule:
    """The rule for an ask of ``kind`` declined with ``message`` (None or empty: no message)."""
    return DECLINE_RULES[kind][bool(message)]


DECLINE_ORIGINS: Mapping[InterruptReason, str] = MappingProxyType(
    {
        rule.interrupts_with: rule.origin
        for by_message in DECLINE_RULES.values()
        for rule in by_message.values()
        if rule.interrupts_with is not None and rule.origin is not None
    }
)
"""The origin a decline's interrupt carries, by its reason (derived from ``DECLINE_RULES``)."""


@dataclass(frozen=True, slots=True)
class ClosePolicy:
    """What a close mode does to the active runs of the directories it covers."""

    interrupts_with: InterruptReason | None
    """The reason active runs are interrupted with, or None: they are left alone and waited for."""
    covers_everything: bool
    """Shutdown-like: every directory, every queued run, a grace deadline; asked with ``Shutdown``,
    never with a ``CloseRequest``. (A stronger mode takes over a weaker pending close because it
    acts on the runs themselves: a ``user_confirmed_interrupt`` interrupts the runs a maintenance
    close waits for; a maintenance close joining a pending one changes nothing.)"""


CLOSE_RULES: Mapping[CloseMode, ClosePolicy] = MappingProxyType(
    {
        CloseMode.MAINTENANCE: ClosePolicy(interrupts_with=None, covers_everything=False),
        CloseMode.USER_CONFIRMED_INTERRUPT: ClosePolicy(
            interrupts_with=InterruptReason.LIFECYCLE_INTERRUPT, covers_everything=False
        ),
        CloseMode.SHUTDOWN: ClosePolicy(interrupts_with=InterruptReason.SHUTDOWN, covers_everything=True),
        CloseMode.TEST_TEARDOWN: ClosePolicy(
            interrupts_with=InterruptReason.TEST_TEARDOWN, covers_everything=True
        ),
    }
)


def _close_answers(policy: ClosePolicy) -> frozenset[CloseResult]:
    if policy.covers_everything:
        return frozenset({CloseResult.FORCED})
    answers = {CloseResult.COMPLETED, CloseResult.DEFERRED, CloseResult.NOOP}
    if policy.interrupts_with is not None:
        answers.add(CloseResult.INTERRUPTED)
    return frozenset(answers)


CLOSE_ANSWERS: Mapping[CloseMode, frozenset[CloseResult]] = MappingProxyType(
    {mode: _close_answers(policy) for mode, policy in CLOSE_RULES.items()}
)
"""What an accepted lifecycle action may be answered with, by mode (derived from ``CLOSE_RULES``): a
shutdown-like mode is ``forced``; a close is ``completed``, ``deferred`` (runs to wait for) or
``noop`` (the fingerprint gate), and ``interrupted`` too when its mode interrupts runs."""

CLOSE_REQUEST_MODES: tuple[CloseMode, ...] = tuple(
    mode for mode, policy in CLOSE_RULES.items() if not policy.covers_everything
)
"""The modes a ``CloseRequest`` may carry, in ``CLOSE_RULES`` order (a shutdown-like mode is asked
with ``Shutdown``). Hosts, validators and tools read the list here."""


class CloseScope(StrEnum):
    """Which directories a lifecycle action covers."""

    ONE_DIRECTORY = "one_directory"
    """Exactly one directory, named, and known (``unknown_directory`` otherwise)."""
    OPEN_DIRECTORIES = "open_directories"
    """Every directory with an open instance when it is requested."""
    EVERYTHING = "everything"
    """A shutdown: every open directory and every queued run; asked with ``Shutdown``, never with a
    ``CloseRequest``."""


CLOSE_ACTION_SCOPE: Mapping[CloseAction, CloseScope] = MappingProxyType(
    {
        CloseAction.DISPOSE: CloseScope.ONE_DIRECTORY,
        CloseAction.DISPOSE_ALL: CloseScope.OPEN_DIRECTORIES,
        CloseAction.RELOAD: CloseScope.ONE_DIRECTORY,
        CloseAction.INVALIDATE_CONFIG: CloseScope.OPEN_DIRECTORIES,
        CloseAction.SHUTDOWN: CloseScope.EVERYTHING,
        CloseAction.TEST_TEARDOWN: CloseScope.EVERYTHING,
    }
)
"""What each lifecycle action covers. An ``everything`` action goes with a shutdown-like mode
(``ClosePolicy.covers_everything``) and the others with a close mode (``CLOSE_REQUEST_MODES``)."""

CLOSE_REQUEST_ACTIONS: tuple[CloseAction, ...] = tuple(
    do for do, scope in CLOSE_ACTION_SCOPE.items() if scope is not CloseScope.EVERYTHING
)
"""The actions a ``CloseRequest`` may ask for (derived from ``CLOSE_ACTION_SCOPE``)."""

SHUTDOWN_ACTIONS = frozenset(do for do, scope in CLOSE_ACTION_SCOPE.items() if scope is CloseScope.EVERYTHING)
"""The actions a ``Shutdown`` is announced as (derived from ``CLOSE_ACTION_SCOPE``)."""


@dataclass(frozen=True, slots=True)
class ShutdownRule:
    """What a shutdown asked with a reason is: the action and close mode it is announced as; every
    run it interrupts carries the reason's ``ShutdownReason.interrupt_reason``."""

    do: CloseAction
    mode: CloseMode


SHUTDOWN_RULES: Mapping[ShutdownReason, ShutdownRule] = MappingProxyType(
    {
        ShutdownReason.SHUTDOWN: ShutdownRule(do=CloseAction.SHUTDOWN, mode=CloseMode.SHUTDOWN),
        ShutdownReason.TEST_TEARDOWN: ShutdownRule(
            do=CloseAction.TEST_TEARDOWN, mode=CloseMode.TEST_TEARDOWN
        ),
        # A watchdog (the scenario runner's --timeout) tearing down what hung: a shutdown that says why.
        ShutdownReason.TIMEOUT: ShutdownRule(do=CloseAction.SHUTDOWN, mode=CloseMode.SHUTDOWN),
    }
)
"""One rule per shutdown reason: the core looks a ``Shutdown`` up here."""

SHUTDOWN_INTERRUPT_REASONS: Mapping[CloseMode, frozenset[InterruptReason]] = MappingProxyType(
    {
        mode: frozenset(r.interrupt_reason for r, rule in SHUTDOWN_RULES.items() if rule.mode is mode)
        for mode in dict.fromkeys(rule.mode for rule in SHUTDOWN_RULES.values())
    }
)
"""The reasons the runs a shutdown interrupts may carry, by its mode (derived from
``SHUTDOWN_RULES``): one shutdown's runs all carry the same one."""


# --- abandoning a body that ignores its interrupt ---------------------------------------------------


class GraceClock(StrEnum):
    """Whose grace a body gets once its run is interrupted: past it the run is finished without the
    body (``RunTrigger.ABANDON``: ``interrupted``, its reason kept, ``abandoned = true``)."""

    RUN = "run"
    """The run's own grace: the interrupt's request's ``grace_ms`` (a cancel, a confirmed close),
    else the run's ``interrupt_grace_ms`` (``StartRun``), else the supervisor's
    (``SupervisorCore(interrupt_grace_ms=)``); None at every level: no grace, the body is waited
    for. The core says ``StartInterruptGrace`` and the shell reports ``InterruptGraceExpired``."""
    SHUTDOWN = "shutdown"
    """The shutdown's grace deadline (``Shutdown.grace_ms``): every body it interrupted is abandoned
    together (``GraceExpired``). An interrupt decided while a shutdown is under way is the shutdown's."""
    NONE = "none"
    """The run never started (a queue policy's decision, a crash): no body to wait for."""


INTERRUPT_GRACE: Mapping[InterruptReason, GraceClock] = MappingProxyType(
    {
        InterruptReason.USER_CANCEL: GraceClock.RUN,
        InterruptReason.PERMISSION_REJECTED: GraceClock.RUN,
        InterruptReason.FORM_DISMISSED: GraceClock.RUN,
        InterruptReason.LIFECYCLE_INTERRUPT: GraceClock.RUN,
        # A deadline, a watchdog's cancel (a shutdown by a watchdog is the shutdown's).
        InterruptReason.TIMEOUT: GraceClock.RUN,
        InterruptReason.SHUTDOWN: GraceClock.SHUTDOWN,
        InterruptReason.TEST_TEARDOWN: GraceClock.SHUTDOWN,
        InterruptReason.CRASH: GraceClock.NONE,
        InterruptReason.COALESCED: GraceClock.NONE,
        InterruptReason.DROPPED: GraceClock.NONE,
    }
)
"""Which grace an interrupted body gets, by the interrupt's reason (the core looks every interrupt of
an active run up here)."""

GRACE_EXPIRY: Mapping[RunState, RunTrigger | None] = MappingProxyType(
    {
        # Still being interrupted and its body has not ended: finished without it.
        RunState.INTERRUPTING: RunTrigger.ABANDON,
        # Its body stopped in time (or it was never interrupted): the expiry changes nothing.
        RunState.QUEUED: None,
        RunState.ACTIVE: None,
        RunState.COMPLETED: None,
        RunState.INTERRUPTED: None,
        RunState.FAILED: None,
    }
)
"""What a run's own grace passing (``InterruptGraceExpired``) does, by the run's state: the trigger
to apply to it (and first to each of its descendants still being interrupted, deepest first), or
None: ignored. A run whose body ended while it waits for its children is not abandoned: it finishes
with its last child."""


# --- deadlines ------------------------------------------------------------------

DEADLINE_REASON = InterruptReason.TIMEOUT
"""A run past its deadline is interrupted with this reason..."""
DEADLINE_ORIGIN = "deadline"
"""...and this origin, which tells it apart from an external run's lease watchdog (``lease``) and a
shutdown by a watchdog (``timeout`` reason, a shutdown's origin)."""

DEADLINE_EXPIRY: Mapping[RunState, RunTrigger | None] = MappingProxyType(
    {
        # The deadline counts from run.started: only an active run can pass it.
        RunState.ACTIVE: RunTrigger.INTERRUPT,
        # Already being interrupted (the first reason stands), or already finished (a timer that
        # fired while the run's end was being decided): the expiry changes nothing.
        RunState.QUEUED: None,
        RunState.INTERRUPTING: None,
        RunState.COMPLETED: None,
        RunState.INTERRUPTED: None,
        RunState.FAILED: None,
    }
)
"""What an expired deadline (``DeadlineExpired``) does to a run, by the run's state: the trigger to
apply (with ``DEADLINE_REASON`` and ``DEADLINE_ORIGIN``), or None: ignored (counted in
``reports_ignored``)."""


# --- session status and retries -------------------------------------------------


class SessionTrigger(StrEnum):
    START = "start"
    """A run becomes active in an idle session."""
    RETRY = "retry"
    """Its active run reports that it is retrying (``RetryReport``): a new attempt is announced
    each time, with its attempt, message and next time."""
    PROGRESS = "progress"
    """Its active run goes on: a step, a tool-part change, an ask or a heartbeat; or it is interrupted (no
    attempt will come)."""
    STOP = "stop"
    """Its active run is interrupted: no attempt will come, but nothing is announced until the run's
    end (``idle``, or ``busy`` for the next run): a UI never says "working" between a stop and
    ``idle``. A retry's status and details are kept until then (the last provider error stands)."""
    HAND_OVER = "hand_over"
    """Its active run finished and the next queued run starts."""
    END = "end"
    """Its active run finished and nothing is queued."""


SESSION_TRANSITIONS: Mapping[SessionStatus, Mapping[SessionTrigger, SessionStatus]] = MappingProxyType(
    {
        SessionStatus.IDLE: {SessionTrigger.START: SessionStatus.BUSY},
        SessionStatus.BUSY: {
            SessionTrigger.RETRY: SessionStatus.RETRY,
            SessionTrigger.PROGRESS: SessionStatus.BUSY,
            SessionTrigger.STOP: SessionStatus.BUSY,
            SessionTrigger.HAND_OVER: SessionStatus.BUSY,
            SessionTrigger.END: SessionStatus.IDLE,
        },
        SessionStatus.RETRY: {
            SessionTrigger.RETRY: SessionStatus.RETRY,
            SessionTrigger.PROGRESS: SessionStatus.BUSY,
            SessionTrigger.STOP: SessionStatus.RETRY,
            SessionTrigger.HAND_OVER: SessionStatus.BUSY,
            SessionTrigger.END: SessionStatus.IDLE,
        },
    }
)
"""How a session's status moves; ``session_status_announced`` says when a move is a
``session.status`` event."""

RETRY_REPORTED_IN = frozenset({RunState.ACTIVE})
"""A retry report counts only from a run in these states (an interrupting or finished run's report
is ignored: its attempt will not come)."""


def next_session_status(status: SessionStatus, trigger: SessionTrigger) -> SessionStatus:
    return _move("session", SESSION_TRANSITIONS, status, trigger, where="while")


def session_status_announced(
    old: SessionStatus, new: SessionStatus, trigger: SessionTrigger | None = None
) -> bool:
    """A move is announced when the status changes, and every retry is (a new attempt); a stop
    never is (the session's next word is its run's end)."""
    if trigger is SessionTrigger.STOP:
        return False
    return new is not old or new is SessionStatus.RETRY


RETRY_BUDGET_REASON = InterruptReason.TIMEOUT
"""A run that exhausts its retry budget is interrupted with this reason (a budget is a limit, as a
deadline is)..."""
RETRY_BUDGET_ORIGIN = "retry_budget"
"""...and this origin, which tells it apart from a deadline (``deadline``) and a watchdog's cancel.
Its ``run.finished`` carries the retry that exhausted it (``retry_attempt``, ``retry_message``)."""


def retry_budget_exhausted(
    attempts: int | None, backoff_ms: int | None, attempt: int, backoff_total_ms: int
) -> bool:
    """A retry report of ``attempt`` (the attempt to come, 1 for the first retry), after
    ``backoff_total_ms`` of announced backoff in all (this report's included), exhausts a budget of
    ``attempts`` retries and ``backoff_ms`` of backoff (None: that bound is not set): the attempt is
    not made, the run is interrupted (``RETRY_BUDGET_REASON``, ``RETRY_BUDGET_ORIGIN``)."""
    return (attempts is not None and attempt > attempts) or (
        backoff_ms is not None and backoff_total_ms > backoff_ms
    )


# --- queue policies: what a start does while its session is busy ----------------------------------


class WhenBusy(StrEnum):
    """What a start does when its session already has an active run."""

    QUEUE = "queue"
    """Queued at the back of the session's queue (``run.queued``)."""
    REPLACE = "replace"
    """Queued at the back, replacing every still-queued run of its session queued under the same
    policy: each ends unstarted, ``interrupted`` with reason ``coalesced`` and the new run's id as
    origin (reported before the new run's ``run.queued``)."""
    REJECT = "reject"
    """Rejected ``session_busy``; nothing changes."""


class QueuedFate(StrEnum):
    """What becomes of a queued run when its session's active run is interrupted (any reason)."""

    KEEP = "keep"
    """It stays queued and starts when the interrupted run has finished."""
    DROP = "drop"
    """It ends unstarted at once, ``interrupted`` with reason ``dropped``, the interrupted run's id
    as origin and its interrupt's action (upstream opencode drops a pending follow-up when the
    active run is aborted)."""


@dataclass(frozen=True, slots=True)
class QueueRule:
    """What a queue policy does; a run keeps the policy it was started with."""

    when_busy: WhenBusy
    """A start under this policy while its session has an active run (an idle session starts it
    at once, whatever the policy)."""
    on_interrupt: QueuedFate
    """A run queued under this policy, when the active run it waits behind is interrupted."""


QUEUE_RULES: Mapping[QueuePolicy, QueueRule] = MappingProxyType(
    {
        QueuePolicy.QUEUE: QueueRule(when_busy=WhenBusy.QUEUE, on_interrupt=QueuedFate.KEEP),
        QueuePolicy.COALESCE: QueueRule(when_busy=WhenBusy.REPLACE, on_interrupt=QueuedFate.DROP),
        # Never queued: its fate is moot; ``keep`` says an interrupt ends nothing more.
        QueuePolicy.REJECT_IF_BUSY: QueueRule(when_busy=WhenBusy.REJECT, on_interrupt=QueuedFate.KEEP),
    }
)
"""One rule per queue policy: the core looks a start and an interrupt up here."""

QUEUE_REASONS = frozenset({InterruptReason.COALESCED, InterruptReason.DROPPED})
"""The interrupt reasons the queue policies decide (``WhenBusy.REPLACE``: ``coalesced``,
``QueuedFate.DROP``: ``dropped``); each ends a run that never started, not one a request named."""


class ReloadLoad(StrEnum):
    """The moments a reload's next generation may be loaded at (the first that comes wins)."""

    AT_REQUEST = "at_request"
    """With the reload itself, before it is answered."""
    FIRST_RUN = "first_run"
    """When a run starts in the directory (a run always loads a directory with no live generation)."""
    PREVIOUS_CLOSED = "previous_closed"
    """When the directory's last open (old) generation closes; at once if none is open."""


RELOAD_RULES: Mapping[ReloadPolicy, Mapping[CloseMode, frozenset[ReloadLoad]]] = MappingProxyType(
    {
        ReloadPolicy.EAGER: {
            CloseMode.MAINTENANCE: frozenset({ReloadLoad.AT_REQUEST}),
            CloseMode.USER_CONFIRMED_INTERRUPT: frozenset({ReloadLoad.AT_REQUEST}),
        },
        # The old generation is closing either way (waiting for its runs, or for the interrupted
        # ones to stop): the new one waits for a run that needs it or for the old one's close.
        ReloadPolicy.LAZY: {
            CloseMode.MAINTENANCE: frozenset({ReloadLoad.FIRST_RUN, ReloadLoad.PREVIOUS_CLOSED}),
            CloseMode.USER_CONFIRMED_INTERRUPT: frozenset({ReloadLoad.FIRST_RUN, ReloadLoad.PREVIOUS_CLOSED}),
        },
    }
)
"""When a reload (``maintenance`` or ``user_confirmed_interrupt``) loads its directory's next
generation, by reload policy and close mode. A close that covers the directory later (a dispose, an
invalidation, another reload, the shutdown) cancels a load still deferred: what it asks replaces it.
Shutdown modes never load."""


def reload_loads(policy: ReloadPolicy, mode: CloseMode, moment: ReloadLoad, *, open_generations: int) -> bool:
    """Whether a reload asked with ``policy`` in ``mode`` loads the next generation at ``moment``.
    ``open_generations``: how many generations of the directory are still open then (with none, the
    previous generation has closed already, so ``previous_closed`` holds at the request too)."""
    rules = RELOAD_RULES[policy][mode]
    if moment is ReloadLoad.AT_REQUEST and ReloadLoad.PREVIOUS_CLOSED in rules and open_generations == 0:
        return True
    if moment is ReloadLoad.PREVIOUS_CLOSED and open_generations != 0:
        return False
    return moment in rules


# --- progress and stalls ---------------------------------------------------------


class StallTrigger(StrEnum):
    """What moves a run's ``stalled`` flag. The core never reads a clock: the shell measures the
    time since the run's last progress and reports ``NoProgress``; everything else is progress."""

    NO_PROGRESS = "no_progress"
    """The shell measured ``stall_after_ms`` without progress (``NoProgress``)."""
    PROGRESS = "progress"
    """The body reported a step, a tool-part change, an ask raised or withdrawn, or a heartbeat."""
    LEFT_ACTIVE = "left_active"
    """The run was interrupted or ended: a stalled flag means "you may interrupt it", so it goes."""


STALL_TRANSITIONS: Mapping[bool, Mapping[StallTrigger, bool]] = MappingProxyType(
    {
        # not stalled
        False: {
            StallTrigger.NO_PROGRESS: True,  # run.stalled
            StallTrigger.PROGRESS: False,
            StallTrigger.LEFT_ACTIVE: False,
        },
        # stalled
        True: {
            StallTrigger.NO_PROGRESS: True,  # flagged already: nothing new to say
            StallTrigger.PROGRESS: False,  # run.unstalled (progress=true)
            StallTrigger.LEFT_ACTIVE: False,  # run.unstalled (progress=false)
        },
    }
)
"""The ``stalled`` flag of a run: ``False -> True`` is announced by ``run.stalled``, ``True -> False``
by ``run.unstalled``."""

STALLABLE_RUN_STATES = frozenset({RunState.ACTIVE})
"""Only an active run may be flagged stalled (an interrupting one is already being stopped)."""


def stall_applies(
    state: RunState,
    open_asks: int,
    body_ended: bool = False,
    working_children: int = 0,
    retry_waiting: bool = False,
) -> bool:
    """A ``NoProgress`` report flags a run only while it is active and waits for nobody: a run with
    an open ask waits for the user, who is slow, not the run; a parent whose body has ended waits for
    its children, which are measured themselves; so does a parent with a working child (an active
    child not flagged stalled -- one that waits for the user is never flagged, so a subagent's open
    ask counts for its whole tree); a run that announced a retry whose next attempt is still to come
    (``retry_waiting``: session status ``retry``, ``next_at_ms`` not yet passed) waits out its
    backoff. In each case the shell measures again later."""
    return (
        state in STALLABLE_RUN_STATES
        and open_asks == 0
        and not body_ended
        and working_children == 0
        and not retry_waiting
    )


def retry_waiting(next_at_ms: int | None, now_ms: int | None) -> bool:
    """A run whose session says ``retry`` waits (is not stuck) while its announced next attempt is
    still to come: ``next_at_ms`` is set and not yet passed at ``now_ms`` (the shell's wall clock
    when it measured; None: unknown, so the announced wait is believed). A retry with no next
    attempt time is not a wait: normal stall timing."""
    return next_at_ms is not None and (now_ms is None or now_ms < next_at_ms)


def next_stall_state(stalled: bool, trigger: StallTrigger) -> bool:
    return STALL_TRANSITIONS[stalled][trigger]


CONFIRM_RULES: Mapping[CloseMode, CloseMode] = MappingProxyType(
    {CloseMode.MAINTENANCE: CloseMode.USER_CONFIRMED_INTERRUPT}
)
"""``confirm_close``: a pending close of the key's mode may be turned into a confirmed one, acting on
its blocking runs as the value's mode does on its runs (``CLOSE_RULES``: ``lifecycle_interrupt``) --
the same rule by which a ``user_confirmed_interrupt`` close takes over a pending maintenance close.
A close of any other mode is not confirmable (``not_confirmable``)."""
