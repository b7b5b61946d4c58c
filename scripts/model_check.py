#!/usr/bin/env python3
"""Exhaustive model check of the decision core.

From the initial state (two directories: ``/w/a`` loaded, ``/w/b`` only declared), explore EVERY
interleaving of host requests and internal reports, breadth-first, merging states that are equal:

* requests: start a run (up to three runs: ``r1``, ``r2``, ``r3``, each in session ``s1`` or ``s2``
  and directory ``/w/a`` or ``/w/b``); cancel any run ever started; every close action (``dispose``
  and ``reload`` of each directory, ``dispose_all``, ``invalidate_config``) in both modes
  (``maintenance``, ``user_confirmed_interrupt``); shutdown with both reasons (``shutdown``,
  ``test_teardown``; a second shutdown joins the first); replies to a waiting permission (approve,
  reject, reject with a message) and form (answer, dismiss);
* reports: every running body returns or raises, or raises a permission ask or a form (once),
  at any moment -- also after it was told to stop; every dispose the core asked for completes, in
  every order; shutdown's grace deadline passes;
* scope ``stalls``: the shell's ``NoProgress`` and a body's ``Heartbeat`` at any moment,
  and ``confirm_close`` of any action id at any point (pending, completed, unknown, of any mode);
  scope ``stalled-trees``: the same with child runs, whose asks and progress count for their
  ancestors.
* the ``deadlines`` scope: runs start with or without a deadline; an armed deadline
  expires at any moment, also after its run ended or while it is being interrupted; a running body
  reports retries (twice at most) at any moment, before or after its steps.
* the ``abandons`` scope: the core gives every interrupted body a grace of its own
  (``interrupt_grace_ms``); an armed grace passes at any moment (the run is then abandoned if its
  body still runs), also after its body ended; an abandoned body goes on reporting (steps, retries,
  its end), which the core refuses; the session's next queued run starts; a retry budget of one
  attempt stops a run at its second retry; sessions are cancelled and deleted (confirmed or not) at
  any moment; permission asks share one key and may be approved "always".

After every step the one ``InvariantChecker`` (``run_supervisor.protocol.testing``) checks the new
command batch; with ``--drain`` (the default) every new state is also driven to its end (a test
teardown, then every body returns and every dispose completes) and ``checker.finish()`` checks that
everything ended and every request was answered exactly once. A violation, or an exception out of
the core, is reported with the shortest path that reaches it (breadth-first: no shorter one exists).

State hashing: a state is the core's own state (every attribute, walked generically, so a change of
the core's internals does not break the walk) plus the harness (running bodies, held disposes, the
grace timer) plus the checker's open obligations. Left out, because no decision depends on them:
event ``seq`` numbers and the counters behind ids (``lc-N`` action ids and request tokens are
renamed by rank, which keeps their order), ignored-report counters, the order runs finished in, and
what the checker keeps of settled history (answered requests, completed actions).

    python scripts/model_check.py                 # depth 8, the full alphabet
    python scripts/model_check.py --depth 10 --json

Exit status 1 when a violation was found, else 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from run_supervisor.protocol import (
    AbandonRun,
    AnswerForm,
    ArmDeadline,
    AskKind,
    AskPayload,
    AskRaised,
    BodyEnded,
    CancelRun,
    CancelSession,
    CloseAction,
    CloseMode,
    CloseRequest,
    Command,
    ConfirmClose,
    DeadlineExpired,
    DeleteSession,
    DeliverAnswer,
    DismissForm,
    DisposeDone,
    DisposeInstance,
    GraceExpired,
    Heartbeat,
    InterruptGraceExpired,
    NoProgress,
    QueuePolicy,
    ReleaseRun,
    ReloadPolicy,
    ReplyPermission,
    Request,
    RetryReport,
    SetQueuePolicy,
    Shutdown,
    ShutdownComplete,
    ShutdownReason,
    SignalInterrupt,
    SpawnRun,
    StartGraceTimer,
    StartInterruptGrace,
    StartRun,
    StepKind,
    StepReport,
    SupervisorCore,
    WithdrawAsk,
    WithdrawReason,
)
from run_supervisor.protocol._core import Report
from run_supervisor.protocol._rules import CLOSE_REQUEST_MODES
from run_supervisor.protocol.testing import InvariantChecker

A, B = "/w/a", "/w/b"
DIRECTORIES = (A, B)
SESSIONS = ("s1", "s2")
RUNS = ("r1", "r2", "r3")
CLOSES = (
    *((CloseAction.DISPOSE, (d,)) for d in DIRECTORIES),
    *((CloseAction.RELOAD, (d,)) for d in DIRECTORIES),
    (CloseAction.DISPOSE_ALL, ()),
    (CloseAction.INVALIDATE_CONFIG, ()),
)
MODES = CLOSE_REQUEST_MODES
REASONS = (ShutdownReason.SHUTDOWN, ShutdownReason.TEST_TEARDOWN)


# --- one state: the core, its checker and the world around it ---------------------------------------


@dataclass(slots=True)
class Body:
    """A running body, as the harness sees it."""

    waiting: str | None = None  # "permission" | "form": it raised an ask and waits
    asked: bool = False  # it raises at most one ask (bounds the alphabet)
    retried: int = 0  # retries it reported (at most two: bounds the alphabet)
    stepped: bool = False  # it reported a step (at most one: progress that clears a retry)


@dataclass(slots=True)
class World:
    core: SupervisorCore
    checker: InvariantChecker
    bodies: dict[str, Body] = field(default_factory=dict)
    held: list[tuple[str, int]] = field(default_factory=list)
    timer: str | None = None
    started: int = 0
    closes: int = 0
    shutdowns: int = 0
    policy_sets: int = 0
    confirms: int = 0
    tokens: dict[Request, int] = field(default_factory=dict)
    closed: bool = False
    deadlines: tuple[str, ...] = ()  # armed and not expired yet (kept after the run ends)
    graces: tuple[str, ...] = ()  # runs' own graces armed and not passed yet (kept after the end)

    # carrying out a batch

    def carry_out(self, batch: list[Command]) -> None:
        self.checker.commands(batch)
        for command in batch:
            if isinstance(command, SpawnRun):
                self.bodies[command.run_id] = Body()
            elif isinstance(command, DeliverAnswer):
                body = self.bodies.get(command.run_id)
                if body is not None:
                    body.waiting = None
            elif isinstance(command, DisposeInstance) and command.report:
                self.held.append((command.directory, command.generation))
            elif isinstance(command, StartGraceTimer):
                self.timer = command.action_id
            elif isinstance(command, ArmDeadline):
                self.deadlines = (*self.deadlines, command.run_id)
            elif isinstance(command, StartInterruptGrace):
                self.graces = (*self.graces, command.run_id)
            elif isinstance(command, ShutdownComplete):
                self.closed = True
            # SignalInterrupt, AbandonRun, ReleaseRun: the body goes on until it reports its end.
            elif isinstance(command, SignalInterrupt | AbandonRun | ReleaseRun):
                pass

    def request(self, request: Request) -> None:
        # A token named by its request (and how many equal ones came before), not by a counter: the
        # same pending request reached by two paths is the same state.
        self.tokens[request] = count = self.tokens.get(request, 0) + 1
        token = f"{count}:{request!r}"
        self.checker.request(token, request)
        self.carry_out(self.core.request(request, token))

    def report(self, report: Report) -> None:
        self.checker._timer_passed(report)
        self.carry_out(self.core.report(report))


def initial_world(
    core: Callable[[], SupervisorCore] = SupervisorCore,
    interrupt_grace_ms: int | None = None,
    retry_attempts: int | None = None,
) -> World:
    world = World(core=core(), checker=InvariantChecker())
    world.core.interrupt_grace_ms = interrupt_grace_ms
    if retry_attempts is not None:
        world.core.retry_budget = (retry_attempts, None)
    world.core.declare(B)
    world.carry_out(world.core.preload(A, "f0"))  # the no-op gate compares closes with it
    return world


# --- what may happen next ------------------------------------------------------------------------------

Move = tuple[str, Callable[[World], None]]


def _start(
    run_id: str,
    session: str,
    directory: str,
    parent: str | None = None,
    policy: QueuePolicy | None = None,
    deadline_ms: int | None = None,
) -> Callable[[World], None]:
    def move(world: World) -> None:
        world.started += 1
        world.request(
            StartRun(
                run_id=run_id,
                session=session,
                directory=directory,
                parent_run_id=parent,
                queue_policy=policy,
                deadline_ms=deadline_ms,
            )
        )

    return move


def _set_policy(session: str, policy: QueuePolicy) -> Callable[[World], None]:
    def move(world: World) -> None:
        world.policy_sets += 1
        world.request(SetQueuePolicy(session=session, queue_policy=policy))

    return move


def _deadline_passes(run_id: str) -> Callable[[World], None]:
    def move(world: World) -> None:
        world.deadlines = tuple(r for r in world.deadlines if r != run_id)
        world.report(DeadlineExpired(run_id=run_id))

    return move


def _grace_passes(run_id: str) -> Callable[[World], None]:
    def move(world: World) -> None:
        world.graces = tuple(r for r in world.graces if r != run_id)
        world.report(InterruptGraceExpired(run_id=run_id))

    return move


def _body_retries(run_id: str) -> Callable[[World], None]:
    def move(world: World) -> None:
        body = world.bodies[run_id]
        body.retried += 1
        world.report(RetryReport(run_id=run_id, attempt=body.retried, message="529 overloaded"))

    return move


def _body_steps(run_id: str) -> Callable[[World], None]:
    def move(world: World) -> None:
        world.bodies[run_id].stepped = True
        world.report(StepReport(run_id=run_id, step="model", kind=StepKind.MODEL, finished=False))

    return move


def _request(request: Request) -> Callable[[World], None]:
    return lambda world: world.request(request)


def _body_ends(run_id: str, error: str | None) -> Callable[[World], None]:
    def move(world: World) -> None:
        del world.bodies[run_id]
        world.report(BodyEnded(run_id=run_id, error=error))

    return move


def _ask_id(run_id: str) -> str:
    return f"{run_id}:ask"


def _body_asks(run_id: str, form: bool, key: str | None = None) -> Callable[[World], None]:
    def move(world: World) -> None:
        body = world.bodies[run_id]
        body.waiting, body.asked = ("form" if form else "permission"), True
        kind = AskKind.FORM if form else AskKind.PERMISSION
        payload = AskPayload(key=key)
        world.report(AskRaised(run_id=run_id, ask_id=_ask_id(run_id), kind=kind, payload=payload))

    return move


def _body_gives_up(run_id: str) -> Callable[[World], None]:
    def move(world: World) -> None:
        world.bodies[run_id].waiting = None
        world.report(WithdrawAsk(run_id=run_id, ask_id=_ask_id(run_id), reason=WithdrawReason.TIMEOUT))

    return move


def _dispose_done(index: int) -> Callable[[World], None]:
    def move(world: World) -> None:
        directory, generation = world.held.pop(index)
        world.report(DisposeDone(directory, generation))

    return move


def _grace(action_id: str) -> Callable[[World], None]:
    def move(world: World) -> None:
        world.timer = None
        world.report(GraceExpired(action_id=action_id))

    return move


ALL_PLACES = tuple((session, directory) for session in SESSIONS for directory in DIRECTORIES)


@dataclass(frozen=True, slots=True)
class Scope:
    """The alphabet explored and how much of each request one path may make (depth bounds the rest)."""

    name: str
    about: str
    runs: int = 3
    places: tuple[tuple[str, str], ...] = ALL_PLACES
    """Where a run may start: (session, directory)."""
    closes: tuple[tuple[CloseAction, tuple[str, ...]], ...] = CLOSES
    modes: tuple[CloseMode, ...] = MODES
    max_closes: int = 2
    reasons: tuple[ShutdownReason, ...] = REASONS
    max_shutdowns: int = 2
    cancel: bool = True
    asks: bool = True
    """Bodies raise permission asks and forms, and the user answers them every way."""
    raises: bool = True
    """Bodies may raise instead of returning."""
    children: bool = False
    """A run may start as a child of any started run, in a session of its own."""
    fingerprints: tuple[str | None, ...] = (None,)
    """What each close carries (the no-op gate; /w/a is loaded with ``f0``)."""
    policies: tuple[QueuePolicy | None, ...] = (None,)
    """The queue policy each start may name (None: its session's default)."""
    policy_sets: int = 0
    """How many ``SetQueuePolicy`` requests (any session of ``places``, any policy) one path may make."""
    stalls: bool = False
    """Running bodies may be reported without progress (``NoProgress``) or heartbeat, at any moment
    (stalls)."""
    confirms: int = 0
    """How many ``confirm_close`` requests (of ``lc-1``..``lc-3``: pending, completed, unknown or of
    any mode) one path may make."""
    reload_policies: tuple[ReloadPolicy | None, ...] = (None,)
    """The policy each reload names (None: the core's own, eager)."""
    deadlines: bool = False
    """Runs may start with a deadline, which expires at any moment; bodies report retries and a
    step."""
    interrupt_grace_ms: int | None = None
    """The core's own grace for an interrupted body (``SupervisorCore(interrupt_grace_ms=)``): each
    armed grace passes at any moment."""
    retry_attempts: int | None = None
    """The core's retry budget (``RetryBudget(attempts=)``): the retry past it interrupts the run."""
    session_requests: bool = False
    """``cancel_session`` and ``delete_session`` (unconfirmed and confirmed) of each session, any time."""
    grants: bool = False
    """Permission asks declare one key (``k``) and may be approved "always" (the session's matching
    asks, open and later, are granted)."""


FULL = Scope(
    "full",
    "3 runs anywhere in 2 sessions x 2 directories; every close action and mode (2 closes a path); cancel; "
    "permission asks and forms with every reply; shutdown and test_teardown (a second joins); bodies "
    "return or raise; disposes complete and the grace deadline passes in every order",
)
IN_A = (("s1", A), ("s2", A))
"""Two sessions in /w/a: where most narrow scopes start their runs."""
CONFIRMED_RELOAD: dict[str, Any] = {
    "closes": ((CloseAction.RELOAD, (A,)),),
    "modes": (CloseMode.USER_CONFIRMED_INTERRUPT,),
}
"""One close, a user-confirmed reload of /w/a."""


def _narrow(name: str, about: str, **limits: Any) -> Scope:
    """A scope of one close and one shutdown (``shutdown``) a path, unless ``limits`` say otherwise."""
    narrow: dict[str, Any] = {"max_closes": 1, "reasons": (ShutdownReason.SHUTDOWN,), "max_shutdowns": 1}
    return Scope(name, about, **(narrow | limits))


SCOPES = {
    scope.name: scope
    for scope in (
        FULL,
        Scope(
            "closes",
            "2 runs (s1 in /w/a, s2 in /w/a or /w/b); every close action and mode, 2 a path; bodies return; "
            "disposes complete in every order; shutdown with either reason",
            runs=2,
            places=(("s1", A), ("s2", A), ("s2", B)),
            max_shutdowns=1,
            cancel=False,
            asks=False,
            raises=False,
        ),
        _narrow(
            "decisions",
            "2 runs in /w/a (sessions s1, s2); cancel, permission asks and forms with every reply, bodies "
            "return or raise; one confirmed reload of /w/a; shutdown (a second joins) and the grace deadline",
            runs=2,
            places=IN_A,
            **CONFIRMED_RELOAD,
            max_shutdowns=2,
        ),
        _narrow(
            "queues",
            "3 runs in one session over /w/a and /w/b, each started with no queue policy, queue, "
            "coalesce or reject_if_busy; one session default a path (any policy); cancel; a maintenance "
            "dispose_all and a confirmed invalidate_config, one a path; test_teardown; bodies return or "
            "raise",
            runs=3,
            places=(("s1", A), ("s1", B)),
            closes=((CloseAction.DISPOSE_ALL, ()), (CloseAction.INVALIDATE_CONFIG, ())),
            modes=MODES,
            reasons=(ShutdownReason.TEST_TEARDOWN,),
            asks=False,
            policies=(None, *QueuePolicy),
            policy_sets=1,
        ),
        _narrow(
            "children",
            "3 runs in /w/a, each new one top-level (s1, s2) or a child of any started run; cancel; a "
            "dispose of /w/a and an invalidate_config in both modes, without a fingerprint, with /w/a's "
            "(a no-op) or another; shutdown and the grace deadline; bodies return or raise",
            runs=3,
            places=IN_A,
            closes=((CloseAction.DISPOSE, (A,)), (CloseAction.INVALIDATE_CONFIG, ())),
            asks=False,
            children=True,
            fingerprints=(None, "f0", "f1"),
        ),
        _narrow(
            "stalls",
            "2 runs in /w/a (s1, s2); each running body makes no progress (the shell's NoProgress) or "
            "heartbeats at any moment, raises a permission ask or a form (a run waiting for the user is "
            "not flagged) with every reply; a reload of /w/a or a dispose_all in either mode, one a path; "
            "confirm_close of lc-1..lc-3 at any point, twice a path; cancel; shutdown and the grace "
            "deadline; bodies return or raise",
            runs=2,
            places=IN_A,
            closes=((CloseAction.RELOAD, (A,)), (CloseAction.DISPOSE_ALL, ())),
            stalls=True,
            confirms=2,
        ),
        _narrow(
            "stalled-trees",
            "3 runs in /w/a, each new one top-level (s1, s2) or a child of any started run; each running "
            "body makes no progress or heartbeats at any moment, raises a permission ask or a form with "
            "every reply (a child's ask and progress count for its ancestors); a maintenance reload of "
            "/w/a; confirm_close of lc-1..lc-3 once a path; cancel; shutdown and the grace deadline; "
            "bodies return",
            runs=3,
            places=IN_A,
            closes=((CloseAction.RELOAD, (A,)),),
            modes=(CloseMode.MAINTENANCE,),
            raises=False,
            children=True,
            stalls=True,
            confirms=1,
        ),
        _narrow(
            "reloads",
            "3 runs (s1, s2 in /w/a, s2 in /w/b); a reload of /w/a, lazy or eager, in both modes, and a "
            "dispose of /w/a that may replace a deferred load, 2 a path; with /w/a's fingerprint (a no-op "
            "against a deferred generation too) or none; disposes complete in every order; shutdown and "
            "the grace deadline; bodies return or raise",
            runs=3,
            places=(("s1", A), ("s2", A), ("s2", B)),
            closes=((CloseAction.RELOAD, (A,)), (CloseAction.DISPOSE, (A,))),
            max_closes=2,
            cancel=False,
            asks=False,
            fingerprints=(None, "f0"),
            reload_policies=(ReloadPolicy.LAZY, ReloadPolicy.EAGER),
        ),
        _narrow(
            "deadlines",
            "3 runs in /w/a (s1, s2; queued behind each other), each with or without a deadline that "
            "expires at any moment (also after the run ended or while it is interrupted); bodies report "
            "retries (twice) and a step at any moment, return or raise; cancel; a confirmed reload; "
            "shutdown and the grace deadline",
            runs=3,
            places=IN_A,
            **CONFIRMED_RELOAD,
            asks=False,
            deadlines=True,
        ),
        _narrow(
            "abandons",
            "3 runs in /w/a (s1, s2; queued behind each other); every interrupted body gets a grace of its "
            "own, which passes at any moment (also after the body ended): cancel, permission asks and forms "
            "with every reply, deadlines, a confirmed reload; a retry budget of one attempt (the second "
            "retry stops the run); cancel_session and delete_session (confirmed or not) of s1 and s2; "
            "permission asks with one key, approved always or not; an abandoned body goes on stepping, "
            "retrying and ends; shutdown and the grace deadline",
            runs=3,
            places=IN_A,
            **CONFIRMED_RELOAD,
            raises=False,
            deadlines=True,
            interrupt_grace_ms=50,
            retry_attempts=1,
            session_requests=True,
            grants=True,
        ),
    )
}


def _close(request: CloseRequest) -> Callable[[World], None]:
    def move(world: World) -> None:
        world.closes += 1
        world.request(request)

    return move


CONFIRMED = ("lc-1", "lc-2", "lc-3")
"""The action ids a confirm may name: the first closes of a path, or none yet (unknown)."""


def _confirm(request: ConfirmClose) -> Callable[[World], None]:
    def move(world: World) -> None:
        world.confirms += 1
        world.request(request)

    return move


def _report(report: Report) -> Callable[[World], None]:
    return lambda world: world.report(report)


def _shutdown(request: Shutdown) -> Callable[[World], None]:
    def move(world: World) -> None:
        world.shutdowns += 1
        world.request(request)

    return move


def moves(world: World, scope: Scope) -> Iterator[Move]:
    """Every input the world may give the core now, labelled for a readable path."""
    if world.started < scope.runs:
        run_id = RUNS[world.started]
        for session, directory in scope.places:
            for policy in scope.policies:
                label = f"start {run_id} {session} {directory}" + (f" {policy.value}" if policy else "")
                yield label, _start(run_id, session, directory, policy=policy)
            if scope.deadlines:
                yield (
                    f"start {run_id} {session} {directory} with a deadline",
                    _start(run_id, session, directory, deadline_ms=100),
                )
        for parent in RUNS[: world.started] if scope.children else ():
            known = world.core.run_snapshot(parent)
            where = known.directory if known is not None else A
            yield f"start {run_id} as a child of {parent}", _start(run_id, f"c-{run_id}", where, parent)
    for session in sorted({s for s, _ in scope.places}) if world.policy_sets < scope.policy_sets else ():
        for queue_policy in QueuePolicy:
            yield f"set {session} queue_policy {queue_policy.value}", _set_policy(session, queue_policy)
    for run_id in RUNS[: world.started] if scope.cancel else ():
        yield f"cancel {run_id}", _request(CancelRun(run_id=run_id))
    for session in sorted({s for s, _ in scope.places}) if scope.session_requests else ():
        yield f"cancel session {session}", _request(CancelSession(session=session))
        yield f"delete session {session}", _request(DeleteSession(session=session))
        yield f"delete session {session} confirmed", _request(DeleteSession(session=session, confirm=True))
    for do, directories in scope.closes if world.closes < scope.max_closes else ():
        for mode in scope.modes:
            for fingerprint in scope.fingerprints:
                for reload_policy in scope.reload_policies if do is CloseAction.RELOAD else (None,):
                    label = f"{do.value} {' '.join(directories)} {mode.value}".replace("  ", " ")
                    label += f" fingerprint {fingerprint}" if fingerprint else ""
                    label += f" {reload_policy.value}" if reload_policy else ""
                    request = CloseRequest(
                        do=do,
                        mode=mode,
                        origin="mc",
                        directories=directories,
                        fingerprint=fingerprint,
                        reload_policy=reload_policy,
                    )
                    yield label, _close(request)
    for reason in scope.reasons if world.shutdowns < scope.max_shutdowns else ():
        yield f"shutdown {reason.value}", _shutdown(Shutdown(reason=reason, origin="mc", grace_ms=100))
    for run_id, body in sorted(world.bodies.items()):
        ask = _ask_id(run_id)
        if body.waiting == "permission":
            yield f"approve {ask}", _request(ReplyPermission(ask_id=ask, approve=True))
            if scope.grants:
                yield (
                    f"approve {ask} always",
                    _request(ReplyPermission(ask_id=ask, approve=True, always=True)),
                )
            yield f"reject {ask}", _request(ReplyPermission(ask_id=ask, approve=False))
            yield (
                f"reject {ask} with a message",
                _request(ReplyPermission(ask_id=ask, approve=False, message="no")),
            )
        elif body.waiting == "form":
            yield f"answer {ask}", _request(AnswerForm(ask_id=ask, answer="yes"))
            yield f"dismiss {ask}", _request(DismissForm(ask_id=ask))
            yield f"dismiss {ask} with a message", _request(DismissForm(ask_id=ask, message="later"))
        if body.waiting is not None:
            yield f"{run_id} stops waiting (timeout)", _body_gives_up(run_id)
        yield f"{run_id} returns", _body_ends(run_id, None)
        if scope.raises:
            yield f"{run_id} raises", _body_ends(run_id, "boom")
        if scope.asks and not body.asked:
            yield (
                f"{run_id} asks permission",
                _body_asks(run_id, form=False, key="k" if scope.grants else None),
            )
            yield f"{run_id} asks a form", _body_asks(run_id, form=True)
        if scope.deadlines and body.retried < 2:
            yield f"{run_id} retries", _body_retries(run_id)
        if scope.deadlines and not body.stepped:
            yield f"{run_id} starts a step", _body_steps(run_id)
    for run_id in world.deadlines:
        yield f"the deadline of {run_id} passes", _deadline_passes(run_id)
    for run_id in world.graces:
        yield f"the grace of {run_id} passes", _grace_passes(run_id)
    for run_id in sorted(world.bodies) if scope.stalls else ():
        yield f"{run_id} makes no progress", _report(NoProgress(run_id=run_id, idle_ms=1000))
        yield f"{run_id} heartbeats", _report(Heartbeat(run_id=run_id))
    for action_id in CONFIRMED if world.confirms < scope.confirms else ():
        yield f"confirm {action_id}", _confirm(ConfirmClose(action_id=action_id, origin="mc.confirm"))
    for index, (directory, generation) in enumerate(world.held):
        yield f"dispose of {directory}#{generation} done", _dispose_done(index)
    if world.timer is not None:
        yield "grace expires", _grace(world.timer)


def drain_world(world: World) -> None:
    """Drive the world to its end: a test teardown (or the shutdown under way), every body returns,
    every dispose completes, the grace deadline passes if anything still holds; then the checker
    checks that everything ended and every request was answered once."""
    if not world.core.shutting_down:
        world.request(Shutdown(reason=ShutdownReason.TEST_TEARDOWN, origin="drain", grace_ms=100))
    for _ in range(64):
        if world.bodies:
            run_id = min(world.bodies)
            del world.bodies[run_id]
            world.report(BodyEnded(run_id=run_id))
        elif world.held:
            directory, generation = world.held.pop(0)
            world.report(DisposeDone(directory, generation))
        elif world.timer is not None and not world.closed:
            _grace(world.timer)(world)
        else:
            break
    world.checker.finish()


# --- state hashing -------------------------------------------------------------------------------------

_SKIP = frozenset(
    {
        "_seq",
        "_out",
        "_action_count",
        "_session_actions",
        "_abandoned",
        "_finished",
        "_reports_ignored",
        "seq",
    }
)
"""Attributes no decision depends on (see the module docstring)."""
_FIELDS: dict[type, tuple[str, ...]] = {}
_PLAIN = frozenset({type(None), int, float, bool})


def _fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        declared = getattr(kind, "__struct_fields__", None) or getattr(kind, "__slots__", None) or ()
        names = _FIELDS[kind] = tuple(n for n in declared if n not in _SKIP)
    return names


def _canon(value: Any, ids: set[str]) -> Any:
    """A hashable, canonical copy: containers become tuples (sets sorted), objects their fields.
    Action ids met on the way are collected in ``ids`` (to be renamed by rank)."""
    kind = type(value)
    if kind is str:
        if value.startswith("lc-"):
            ids.add(value)
        return value
    if kind in _PLAIN:
        return value
    if isinstance(value, Enum):
        return value.value
    if kind is list or kind is tuple or kind is deque:
        return tuple([_canon(v, ids) for v in value])
    if kind is set or kind is frozenset:
        return ("set", *sorted([_canon(v, ids) for v in value], key=repr))
    if kind is dict:
        return ("dict", *[(_canon(k, ids), _canon(v, ids)) for k, v in value.items()])
    names = _fields(kind) or tuple(n for n in vars(value) if n not in _SKIP)
    return (kind.__name__, *[_canon(getattr(value, n, None), ids) for n in names])


def _checker_obligations(checker: InvariantChecker, ids: set[str]) -> Any:
    """What the checker still watches: settled history (answered requests, completed actions, how
    finished runs ended -- the core keeps that) is left out; everything else it knows is in."""
    runs = tuple(
        (r.id, r.session, r.directory, r.state, r.generation, r.signalled, r.abandoned, r.released, r.policy)
        for r in checker.runs.values()
    )
    pending = {k: v for k, v in checker.actions.items() if v.completed < v.requested}
    unanswered = [(k, v.request) for k, v in checker.asked.items() if v.answers == 0]
    return (
        runs,
        _canon(checker.sessions, ids),
        _canon(checker.instances, ids),
        _canon(checker.newest, ids),
        _canon(pending, ids),
        _canon(checker.shutdown_id, ids),
        _canon(checker.shutdown_reasons, ids),
        checker.shutdown_done,
        _canon(checker.shutdown_queued, ids),
        _canon(unanswered, ids),
        checker.grace_expired,
        checker.shutdown_complete_sent,
        _canon((checker.load_owed, checker.load_deferred, checker.load_now, checker.run_owed), ids),
        _canon(checker.fingerprints, ids),
    )


def state_key(world: World) -> int:
    """A hash of the canonical state, action ids renamed by rank (64 bits: a collision among a few
    million states is about one in a million)."""
    ids: set[str] = set()
    core = _canon(world.core, ids)
    harness = (
        _canon(world.bodies, ids),
        tuple(world.held),
        world.timer,
        world.deadlines,
        world.graces,
        (world.started, world.closes, world.shutdowns, world.policy_sets, world.confirms),
        world.closed,
    )
    state = (core, harness, _checker_obligations(world.checker, ids))
    ranked = sorted(ids, key=lambda i: int(i[3:]))
    renames = {name: f"lc-{rank + 1}" for rank, name in enumerate(ranked) if name != f"lc-{rank + 1}"}
    if renames:  # earlier actions completed and left no trace: name the ones left by their rank
        state = _rename(state, renames)
    return hash(state)


def _rename(value: Any, renames: dict[str, str]) -> Any:
    if type(value) is tuple:
        return tuple([_rename(v, renames) for v in value])
    if type(value) is str:
        return renames.get(value, value)
    return value


# --- the search ----------------------------------------------------------------------------------------


@dataclass
class Violation:
    path: tuple[str, ...]
    problems: list[str]


@dataclass
class Result:
    scope: str
    about: str
    depth: int
    states: int = 0
    transitions: int = 0
    drains: int = 0
    reached_depth: int = 0
    frontier: list[int] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "depth": self.depth,
            "states": self.states,
            "transitions": self.transitions,
            "drained_states": self.drains,
            "deepest_new_state": self.reached_depth,
            "new_states_per_depth": self.frontier,
            "violations": [{"path": list(v.path), "problems": v.problems} for v in self.violations],
            "seconds": round(self.seconds, 2),
        }


def _shape(problem: str) -> str:
    """A problem with its ids and numbers blanked: one report per kind of violation."""
    return "".join("N" if c.isdigit() else c for c in problem)


def _copy(world: World) -> World:
    copied: World = pickle.loads(pickle.dumps(world, pickle.HIGHEST_PROTOCOL))
    return copied


def _problems(world: World) -> list[str]:
    return list(world.checker.violations)


def explore(
    depth: int,
    scope: Scope = FULL,
    *,
    drain: str = "leaves",
    max_violations: int = 20,
    core: Callable[[], SupervisorCore] = SupervisorCore,
) -> Result:
    """Breadth-first over every interleaving up to ``depth`` steps, checking after every step."""
    started = time.perf_counter()
    result = Result(scope=scope.name, about=scope.about, depth=depth)
    root = initial_world(core, scope.interrupt_grace_ms, scope.retry_attempts)
    seen = {state_key(root)}
    frontier: list[tuple[World, tuple[str, ...]]] = [(root, ())]
    result.states = 1
    seen_problems: set[str] = set()

    def report(path: tuple[str, ...], problems: list[str]) -> None:
        fresh = [p for p in problems if _shape(p) not in seen_problems]
        if not fresh or len(result.violations) >= max_violations:
            return
        seen_problems.update(_shape(p) for p in fresh)
        result.violations.append(Violation(path, fresh))

    for level in range(1, depth + 1):
        next_frontier: list[tuple[World, tuple[str, ...]]] = []
        blob_cache: dict[int, bytes] = {}
        for world, path in frontier:
            blob = pickle.dumps(world, pickle.HIGHEST_PROTOCOL)
            blob_cache.clear()
            for label, move in list(moves(world, scope)):
                child: World = pickle.loads(blob)
                result.transitions += 1
                try:
                    move(child)
                except Exception as error:  # the core (or the checker) broke: a finding, with its path
                    report((*path, label), [f"{type(error).__name__}: {error}"])
                    continue
                if child.checker.violations:
                    report((*path, label), _problems(child))
                    continue
                key = state_key(child)
                if key in seen:
                    continue
                seen.add(key)
                result.states += 1
                result.reached_depth = level
                if drain == "all" or (drain == "leaves" and level == depth):
                    result.drains += 1
                    probe = _copy(child)
                    try:
                        drain_world(probe)
                    except Exception as error:
                        report(
                            (*path, label, "drain"),
                            [f"{type(error).__name__}: {error}", *probe.checker.violations],
                        )
                        continue
                next_frontier.append((child, (*path, label)))
        result.frontier.append(len(next_frontier))
        frontier = next_frontier
        if not frontier:
            break
    result.seconds = time.perf_counter() - started
    return result


# --- the command line ----------------------------------------------------------------------------------


def print_result(result: Result) -> None:
    print(f"model check of the decision core, scope {result.scope}: {result.about}")
    print(f"  depth              {result.depth} (new states found down to depth {result.reached_depth})")
    print(f"  states explored    {result.states:,}")
    print(f"  transitions        {result.transitions:,}")
    print(f"  drained to the end {result.drains:,}")
    print(f"  new states/depth   {', '.join(f'{n:,}' for n in result.frontier)}")
    print(f"  time               {result.seconds:.1f} s")
    print(f"  violations         {len(result.violations)}")
    for violation in result.violations:
        print(f"  - after {len(violation.path)} steps: " + " -> ".join(violation.path))
        for problem in violation.problems:
            print(f"      {problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=8, help="steps from the initial state (default 8)")
    parser.add_argument(
        "--scope", choices=sorted(SCOPES), default="full", help="the alphabet (default: full)"
    )
    parser.add_argument("--max-closes", type=int, help="close requests per path (default: the scope's)")
    parser.add_argument(
        "--drain",
        choices=("leaves", "all", "none"),
        default="leaves",
        help="which new states to drive to their end and check with checker.finish() (default: the deepest)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    scope = SCOPES[args.scope]
    if args.max_closes is not None:
        scope = dataclasses.replace(scope, max_closes=args.max_closes)
    result = explore(args.depth, scope, drain=args.drain)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print_result(result)
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
