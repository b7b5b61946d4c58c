"""One oracle for the decision core: a synchronous shell and an invariant checker.

``InvariantChecker`` consumes what a supervisor publishes -- its events, and optionally the
requests a host made and the answers it got, or a core's whole command batches -- and checks the
invariants every supervisor must keep, whatever drives it: the core alone (``CoreShell``), the
real actor shell (``run_supervisor.actors``), the soak script, the scenario player, the model
checker. It never predicts a particular outcome; it checks what must hold of any outcome:

* ``seq`` strictly increases (by one, on a complete stream);
* generations count 1, 2, 3... per directory; each instance closes once, only once a close or the
  shutdown covered it and after every run pinned to it finished; nothing loads after shutdown;
* a run is queued only behind an active run of its session, starts once, first in first out, on
  its directory's live generation (never on a retired or closed one), never after shutdown, and
  finishes once, on the generation it started on; a session runs one run at a time and says
  ``busy``/``idle`` only on change, ``idle`` only with nothing active or queued;
* queue policies: a run is queued under ``queue`` or ``coalesce``, never ``reject_if_busy`` (nor
  under another policy than its start named); a session never holds two queued ``coalesce`` runs; a
  run ends ``coalesced`` only while queued, replaced by a later run of its session under the same
  policy (its ``origin``), and ``dropped`` only while queued under a policy that drops (``QUEUE_RULES``)
  when its session's active run (its ``origin``) is interrupted, naming that interrupt's action; after
  a batch that signals a session's active run, no run that policy drops is still queued behind it;
  a start rejected ``session_busy`` asked ``reject_if_busy`` (or its session's default);
* every interrupt carries a reason, and a run that was not interrupted carries none; an interrupt
  names a cause that may interrupt: a ``lifecycle_interrupt`` comes from a
  ``user_confirmed_interrupt`` close of the run's directory, a shutdown reason from the shutdown; a
  maintenance close never interrupts a run;
* exactly one ``lifecycle.completed`` per accepted lifecycle request (a joined shutdown has its own);
  a close never completes while a run that existed at its request in its directories is active, nor
  while an instance it covered is open; an action pending when shutdown came is completed as
  ``superseded_by`` it; no lifecycle action starts after shutdown except shutdowns joining it;
* shutdown ends everything: when it completes no run is active or queued, no instance is open and
  every other action has completed;
* a new generation of a directory starts while an older one is open only when something asked for
  it (``instance.started``'s ``cause`` is checked): a run needed it (its ``run.started`` follows at
  once), an eager reload loaded it with its request, or the host loaded it; a reload's load comes
  when ``protocol.RELOAD_RULES`` says (an eager one before its answer; a lazy one when a run needs
  it or, at once, when the directory's last old generation closes, unless a later close or the
  shutdown cancelled it);
* with requests: every request is answered exactly once, with an answer of its kind (``rejected``
  with a code, else no code); a close's answer agrees with its mode (maintenance never
  ``interrupted``, ``deferred`` names what it waits for, a shutdown is ``forced`` and a second one
  joins the first); after shutdown every other request is rejected; each accepted interrupting
  request (a cancel, a rejected permission, a dismissed form, a confirmed close, the shutdown) is
  the one the run's ``run.finished`` names;
* stalls (``run.stalled``/``run.unstalled``): only an active run is flagged, never twice in a row;
  only a stalled run is cleared; a step or an ask of a stalled run comes after its ``run.unstalled``
  (progress clears the flag), and so does its interrupt signal or its ``run.finished`` (a run leaving
  ``active`` is not stalled); a run is not flagged while it has an open ask or an active child
  not flagged stalled (it waits for the user or its children), and a step or an ask of a child
  comes after its stalled ancestors' ``run.unstalled`` (a child's progress is theirs); the actions
  it holds are pending ones. A ``lifecycle.confirmed`` is for
  a pending maintenance close, and the runs its ``confirm_close`` interrupted end
  ``lifecycle_interrupt`` naming that action and the confirm's origin;
* abandons, stops and cards: a run is abandoned only past a grace -- the shutdown's, or one
  ``StartInterruptGrace`` armed for it (or an ancestor) when it was interrupted, which the driver said
  passed (``interrupt_grace_passed``); a run's own grace is armed only for an interrupt
  ``INTERRUPT_GRACE`` gives one and never during a shutdown, and stopped once, after the run finished;
  after a session's active run is signalled the session says nothing (no ``busy``, no ``retry``) until
  that run's end; a run ended by its retry budget (origin ``retry_budget``) carries the retry that
  exhausted it; once the user declined a call's ask, no update of that call says ``running``; a
  session cancel's or delete's runs each end with its reason, origin and action id;
* with command batches: a reply comes after its ``action.result`` (and after its
  ``lifecycle.completed`` when it says ``completed``); a run is spawned once, on the instance it
  started on; an instance is disposed once, with no run on it; a run is signalled once (the first
  reason wins), abandoned only after it was signalled; ``ShutdownComplete`` ends its batch;
* deadlines and retries: a run interrupted by a deadline (origin ``deadline``) has reason
  ``timeout`` and no action, and it (or the ancestor it inherited the interrupt from) had a
  deadline -- with commands, one that was armed when the run started and that passed
  (``deadline_passed``); an armed deadline is disarmed once, after the run finished; a session says
  ``retry`` only while busy with an active, uninterrupted run, with an attempt and a message (and
  says nothing of a retry otherwise); a retry never outlives its attempt: the run's next step, ask
  or interrupt comes after ``busy``, and no session ends retrying.

``CoreShell`` drives a ``SupervisorCore`` synchronously -- requests, body reports, dispose
completions, the grace deadline -- records every command and event and feeds them to a checker::

    shell = CoreShell("/w/a")
    shell.start("r1", session="s1", directory="/w/a")
    shell.close(CloseAction.DISPOSE, "/w/a", mode=CloseMode.MAINTENANCE)
    shell.finish("r1")
    shell.shutdown()
    shell.checker.finish()  # raises AssertionError naming every broken invariant

Pure: no threads, no clocks.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from run_supervisor.protocol import (
    CLOSE_RULES,
    CONFIRM_RULES,
    DEADLINE_ORIGIN,
    INTERRUPT_GRACE,
    QUEUE_RULES,
    RETRY_BUDGET_ORIGIN,
    AbandonRun,
    ActionResult,
    AnswerForm,
    ArmDeadline,
    AskDismissed,
    AskKind,
    AskPayload,
    AskRaised,
    AskReplied,
    AskRequested,
    AskWithdrawn,
    BodyEnded,
    CancelRun,
    CancelSession,
    CloseAction,
    CloseMode,
    CloseOutcome,
    CloseRequest,
    CloseResult,
    Command,
    ConfirmClose,
    DeadlineExpired,
    DeleteSession,
    DeliverAnswer,
    DisarmDeadline,
    DismissForm,
    DisposeDone,
    DisposeInstance,
    Emit,
    Event,
    GraceClock,
    GraceExpired,
    Heartbeat,
    InstanceClosed,
    InstanceReady,
    InstanceStarted,
    InterruptGraceExpired,
    InterruptReason,
    LifecycleCompleted,
    LifecycleConfirmed,
    LifecycleDeferred,
    LifecycleRequested,
    LoadCause,
    LoadInstance,
    NoProgress,
    Outcome,
    PartReport,
    PartState,
    QueuedFate,
    QueuePolicy,
    RejectCode,
    ReleaseRun,
    ReloadLoad,
    ReloadPolicy,
    Reply,
    ReplyPermission,
    Report,
    Request,
    RequestOutcome,
    RequestResult,
    RunFinished,
    RunPartUpdated,
    RunQueued,
    RunStalled,
    RunStarted,
    RunUnstalled,
    SessionStatus,
    SessionStatusChanged,
    Shutdown,
    ShutdownComplete,
    ShutdownReason,
    SignalInterrupt,
    SpawnRun,
    StartGraceTimer,
    StartInterruptGrace,
    StartRun,
    StepFinished,
    StepStarted,
    StopInterruptGrace,
    SupervisorCore,
)
from run_supervisor.protocol._rules import (
    CLOSE_ACTION_SCOPE,
    CLOSE_ANSWERS,
    DEADLINE_REASON,
    DECLINE_ORIGINS,
    QUEUE_REASONS,
    RETRY_BUDGET_REASON,
    SHUTDOWN_ACTIONS,
    SHUTDOWN_INTERRUPT_REASONS,
    CloseScope,
    DeclineEffect,
    DeclineRule,
    decline_rule,
    fingerprint_unchanged,
    reload_loads,
)

__all__ = ["CoreShell", "ExpectedInterrupt", "InvariantChecker", "InvariantViolation"]

Answer = CloseOutcome | RequestOutcome
E = TypeVar("E")

_SHUTDOWN_REASONS = frozenset(r for reasons in SHUTDOWN_INTERRUPT_REASONS.values() for r in reasons)
"""Every reason a shutdown may interrupt a run with (``SHUTDOWN_RULES``)."""


def _decline_of(request: ReplyPermission | DismissForm) -> DeclineRule | None:
    """The ``DECLINE_RULES`` rule a reply is declined under (None: a permission granted)."""
    if isinstance(request, DismissForm):
        return decline_rule(AskKind.FORM, request.message)
    return None if request.approve else decline_rule(AskKind.PERMISSION, request.message)


@dataclass(frozen=True, slots=True)
class ExpectedInterrupt:
    """What a model-based driver expects the ``run.finished`` of a run it interrupted to name: its
    ``reason``, ``origin`` and lifecycle ``action`` id (None: no lifecycle action's). A driver keeps
    the first interrupt the supervisor accepted for a run; a later one does not replace it."""

    reason: InterruptReason
    origin: str
    action: str | None


class InvariantViolation(AssertionError):
    """An invariant did not hold; the message names every violation found."""


@dataclass(slots=True)
class _Clock:
    """One of a run's own timers, as the commands arm and stop it and the driver says it passed."""

    armed: bool = False
    stopped: bool = False
    passed: bool = False


@dataclass(slots=True)
class _Run:
    id: str
    session: str
    directory: str
    state: str = "queued"  # queued -> active -> finished, or active -> finished
    generation: int | None = None
    signalled: InterruptReason | None = None
    abandoned: bool = False
    released: bool = False
    finished: RunFinished | None = None
    parent: str | None = None
    children: list[str] = field(default_factory=list)
    deadline_ms: int | None = None  # from run.started
    deadline: _Clock = field(default_factory=_Clock)  # ArmDeadline, DisarmDeadline
    policy: QueuePolicy = QueuePolicy.QUEUE  # what it was queued under (``run.queued``)
    stalled: bool = False
    grace: _Clock = field(default_factory=_Clock)  # its own: StartInterruptGrace, StopInterruptGrace


@dataclass(slots=True)
class _Session:
    active: str | None = None
    queue: deque[str] = field(default_factory=deque)
    status: SessionStatus | None = None
    stopped: str | None = None
    """Its active run, once signalled: no ``busy`` (nor a new ``retry``) until that run's end."""


@dataclass(slots=True)
class _Instance:
    state: str = "live"  # live -> retired -> disposing -> closed
    runs: set[str] = field(default_factory=set)
    fingerprint: str | None = None
    ready: bool = False  # its instance.ready came


@dataclass(slots=True)
class _Action:
    id: str
    do: CloseAction
    mode: CloseMode
    origin: str
    directories: tuple[str, ...]
    covered: frozenset[tuple[str, int]]
    blocking: frozenset[str]
    """The runs active in its directories when it was requested: it may not complete before them."""
    requested: int = 1
    completed: int = 0
    results: list[CloseResult] = field(default_factory=list)
    supersede: str | None = None
    """The shutdown that came while it was pending: its completion must say so."""
    noop: bool = False
    """Its fingerprint equals every live instance's it covers: it must be answered ``noop``."""
    confirmed: str | None = None
    """The origin of the ``lifecycle.confirmed`` that turned it (a maintenance close) into a confirmed one."""


@dataclass(slots=True)
class _Asked:
    request: Request
    after_shutdown: bool
    answers: int = 0
    answer: Answer | None = None


@dataclass(frozen=True, slots=True)
class _Decision:
    """An interrupt a request was accepted for: what the run's ``run.finished`` must say."""

    reason: InterruptReason
    origin: str | None
    action: str | None
    by: str


class InvariantChecker:
    """Checks a supervisor's published behaviour against the invariants of the protocol.

    Feed it in the order things happened: ``event`` for each event (or ``commands`` for a whole
    batch of a ``SupervisorCore``, which also checks the commands), ``request``/``answer`` for the
    requests and their answers when the driver knows them. Call ``finish`` once the supervisor has
    shut down and every event was fed: it checks that everything ended. Violations are collected in
    ``violations``; with ``raise_at_once`` the first one raises ``InvariantViolation`` right away
    (what a unit test wants), and ``finish``/``assert_ok`` raise one naming all of them.

    ``gapless``: the stream is complete from the first event, so ``seq`` grows by exactly one.
    """

    def __init__(self, *, gapless: bool = True, raise_at_once: bool = False) -> None:
        self.gapless = gapless
        self.raise_at_once = raise_at_once
        self.violations: list[str] = []
        self.events = 0
        self.last_seq = 0
        self.runs: dict[str, _Run] = {}
        self.sessions: dict[str, _Session] = {}
        self.instances: dict[tuple[str, int], _Instance] = {}
        self.newest: dict[str, int] = {}
        self.actions: dict[str, _Action] = {}
        self.shutdown_id: str | None = None
        self.shutdown_reasons: frozenset[InterruptReason] = frozenset()
        """What the shutdown's interrupts may say (a ``shutdown`` may be a watchdog's ``timeout``)."""
        self.shutdown_done = False
        self.shutdown_queued: set[str] = set()
        self.asked: dict[Hashable, _Asked] = {}
        self.ask_runs: dict[str, str] = {}  # ask id -> its run, from ask.requested
        self.ask_calls: dict[str, tuple[str, str]] = {}  # ask id -> (run, call id), from ask.requested
        self.will_not_run: set[tuple[str, str]] = set()
        """(run, call id) of calls a user's decline decided will not run: no update says running."""
        self.cards_started: set[tuple[str, str]] = set()
        """(run, call id) of cards that said ``tool_started``: no later update of them says not."""
        self.asks_ended: set[str] = set()  # replied, dismissed or withdrawn
        self.start_requests: dict[str, StartRun] = {}
        self.grace_expired = False
        self.commands_seen = False
        self.shutdown_complete_sent = False
        # Reloads (protocol.RELOAD_RULES): directory -> the action id of a reload whose load is owed
        # with its request (eager, or nothing open) / deferred by a lazy reload.
        self.load_owed: dict[str, str] = {}
        self.load_deferred: dict[str, str] = {}
        self.load_now: str | None = None
        """A directory whose last old generation just closed with a load deferred: the next event
        must be its next generation's ``instance.started``."""
        self.run_owed: tuple[str, int] | None = None
        """A generation loaded because a run needed it: that run's ``run.started`` must follow."""
        self.fingerprints: dict[str, str | None] = {}
        """What each directory's next generation will be loaded with, as far as the events tell."""

    # --- reporting ---------------------------------------------------------------------------

    def violation(self, text: str) -> None:
        self.violations.append(text)
        if self.raise_at_once:
            raise InvariantViolation(text)

    def assert_ok(self) -> None:
        """Raise ``InvariantViolation`` naming every violation found so far."""
        if self.violations:
            shown = "\n  ".join(self.violations[:20])
            more = f"\n  ... and {len(self.violations) - 20} more" if len(self.violations) > 20 else ""
            raise InvariantViolation(f"{len(self.violations)} invariant violation(s):\n  {shown}{more}")

    # --- inputs ------------------------------------------------------------------------------

    def request(self, token: Hashable, request: Request) -> None:
        """A host made ``request``; its answer will be filed under ``token``."""
        if token in self.asked:
            self.violation(f"request token {token!r} used twice")
            return
        self.asked[token] = _Asked(request, after_shutdown=self.shutdown_id is not None)
        if isinstance(request, StartRun) and request.run_id not in self.start_requests:
            self.start_requests[request.run_id] = request

    def answer(self, token: Hashable, answer: Answer) -> None:
        """The request made under ``token`` was answered."""
        asked = self.asked.get(token)
        if asked is None:
            if self.asked:  # the driver tells its requests: this one is not among them
                self.violation(f"an answer to {token!r}, which was never asked: {answer}")
            return
        asked.answers += 1
        if asked.answers > 1:
            self.violation(f"{token!r} answered {asked.answers} times: {asked.answer} then {answer}")
            return
        asked.answer = answer
        self._check_answer(token, asked.request, answer, asked.after_shutdown)

    def commands(self, batch: Sequence[Command]) -> None:
        """A core's command batch, in order: its events, its replies and what it asks the shell."""
        self.commands_seen = True
        for index, command in enumerate(batch):
            if isinstance(command, ShutdownComplete) and index != len(batch) - 1:
                self.violation("ShutdownComplete is not the last command of its batch")
            self.command(command)
        for command in batch:
            if isinstance(command, SignalInterrupt):
                self._follow_ups_dropped(command.run_id)

    def _follow_ups_dropped(self, run_id: str) -> None:
        """``run_id`` was signalled: if it is its session's active run, no queued run whose policy
        drops it then may wait behind it any more."""
        run = self.runs.get(run_id)
        session = self.sessions.get(run.session) if run is not None else None
        if run is None or session is None or session.active != run.id:
            return
        kept = [q for q in session.queue if QUEUE_RULES[self.runs[q].policy].on_interrupt is QueuedFate.DROP]
        if kept:
            self.violation(f"{kept} still queued after {run.id}, their session's active run, was interrupted")

    def command(self, command: Command) -> None:
        """One command of a core (``commands`` is the usual entry: it also checks batch order)."""
        self.commands_seen = True
        check = _COMMAND_HANDLERS.get(type(command))
        if check is not None:
            check(self, command)

    def _emit_command(self, command: Emit) -> None:
        self.event(command.event)

    def _reply_command(self, command: Reply) -> None:
        asked = self.asked.get(command.reply_to) if command.reply_to is not None else None
        confirm = asked is not None and isinstance(asked.request, ConfirmClose)
        self._reply_order(command.answer, confirm=confirm)
        if command.reply_to is not None:
            self.answer(command.reply_to, command.answer)

    def _load_command(self, command: LoadInstance) -> None:
        if self.newest.get(command.directory) != command.generation:
            self.violation(
                f"LoadInstance {command.directory} {command.generation} without its instance.started"
            )

    def _abandon_command(self, command: AbandonRun) -> None:
        run = self.runs.get(command.run_id)
        if run is None or run.signalled is None or not (self.grace_expired or self._own_grace_passed(run)):
            self.violation(f"{command.run_id} abandoned without an interrupt and an expired grace")
        elif run.finished is not None:
            self.violation(f"{command.run_id} abandoned after it finished")
        else:
            run.abandoned = True

    def _own_grace_passed(self, run: _Run) -> bool:
        """The run's own grace passed, or that of an ancestor it was abandoned with."""
        walk: _Run | None = run
        while walk is not None:
            if walk.grace.passed:
                return True
            walk = self.runs.get(walk.parent) if walk.parent is not None else None
        return False

    def _interrupt_grace_command(self, command: StartInterruptGrace | StopInterruptGrace) -> None:
        run = self.runs.get(command.run_id)
        if isinstance(command, StartInterruptGrace):
            if run is None or run.signalled is None or run.finished is not None or run.grace.armed:
                self.violation(f"a grace armed for {command.run_id}, which was not just interrupted")
            elif INTERRUPT_GRACE[run.signalled] is not GraceClock.RUN or self.shutdown_id is not None:
                self.violation(
                    f"{command.run_id} given a grace of its own for {run.signalled.value} "
                    f"(shutdown: {self.shutdown_id}), which INTERRUPT_GRACE does not give one"
                )
            elif command.grace_ms < 0:
                self.violation(f"{command.run_id} given a negative grace ({command.grace_ms} ms)")
            else:
                run.grace.armed = True
            return
        self._clock_stopped(run, run.grace if run else None, f"the grace of {command.run_id} stopped")

    def _clock_stopped(self, run: _Run | None, clock: _Clock | None, what: str) -> None:
        """``what``: one of ``run``'s clocks stopped -- once, once armed, after its run finished."""
        if run is None or clock is None or not clock.armed or run.finished is None or clock.stopped:
            self.violation(f"{what} while not armed or not finished")
        else:
            clock.stopped = True

    def _release_command(self, command: ReleaseRun) -> None:
        run = self.runs.get(command.run_id)
        if run is None or run.finished is None:
            self.violation(f"{command.run_id} released before it finished")
        elif run.released:
            self.violation(f"{command.run_id} released twice")
        else:
            run.released = True

    def _deliver_command(self, command: DeliverAnswer) -> None:
        run = self.runs.get(command.run_id)
        if run is None or run.state != "active" or run.signalled is not None:
            self.violation(f"an answer delivered to {command.run_id}, which is not running undisturbed")

    def _grace_timer_command(self, command: StartGraceTimer) -> None:
        if command.action_id != self.shutdown_id:
            self.violation(f"a grace timer for {command.action_id}, which is not the shutdown")

    def _shutdown_complete_command(self, command: ShutdownComplete) -> None:
        if self.shutdown_complete_sent:
            self.violation("ShutdownComplete sent twice")
        self.shutdown_complete_sent = True
        if command.action_id != self.shutdown_id or not self.shutdown_done:
            self.violation(f"ShutdownComplete for {command.action_id} before the shutdown completed")

    def grace_passed(self) -> None:
        """Shutdown's grace deadline passed (the driver delivered ``GraceExpired``)."""
        self.grace_expired = True

    def deadline_passed(self, run_id: str) -> None:
        """A run's deadline passed (the driver delivered ``DeadlineExpired``). A driver that feeds
        command batches must say so: a deadline interrupt nobody reported is a violation."""
        run = self.runs.get(run_id)
        if run is not None:
            if not run.deadline.armed:
                self.violation(f"a deadline of {run_id} passed, but none was armed")
            run.deadline.passed = True

    def interrupt_grace_passed(self, run_id: str) -> None:
        """A run's own grace passed (the driver delivered ``InterruptGraceExpired``). A driver that
        feeds command batches must say so: an abandon nobody's grace allowed is a violation."""
        run = self.runs.get(run_id)
        if run is not None:
            if self.commands_seen and not run.grace.armed:
                self.violation(f"the grace of {run_id} passed, but none was armed")
            run.grace.passed = True

    def _timer_passed(self, report: Report) -> None:
        """What a driver that feeds the core a timer's report (the three above) tells first."""
        if isinstance(report, GraceExpired):
            self.grace_passed()
        if isinstance(report, DeadlineExpired):
            self.deadline_passed(report.run_id)
        if isinstance(report, InterruptGraceExpired):
            self.interrupt_grace_passed(report.run_id)

    def event(self, event: Event) -> None:
        """One published event, in ``seq`` order."""
        self.events += 1
        if event.seq <= self.last_seq or (self.gapless and event.seq != self.last_seq + 1):
            rule = "by one" if self.gapless else "strictly"
            self.violation(f"seq {event.seq} after {self.last_seq}: seq must increase {rule}")
        self.last_seq = max(self.last_seq, event.seq)
        self._check_owed_loads(event)
        self._check_session(event)
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def _check_session(self, event: Event) -> None:
        """An event of a run names the session that run was started in."""
        run_id, session = getattr(event, "run_id", None), getattr(event, "session", None)
        run = self.runs.get(run_id) if run_id is not None else None
        if run is not None and session is not None and session != run.session:
            kind = type(event).__struct_config__.tag
            self.violation(f"{kind} of {run_id} names session {session!r}, its run is in {run.session!r}")

    def events_of(self, events: Iterable[Event]) -> None:
        for event in events:
            self.event(event)

    # --- events ------------------------------------------------------------------------------

    def _ask_requested(self, event: AskRequested) -> None:
        if event.ask_id in self.ask_runs:
            self.violation(f"ask {event.ask_id} requested twice")
        run = self.runs.get(event.run_id)
        if run is None or run.state != "active":
            self.violation(f"ask {event.ask_id} raised by {event.run_id}, which is not active")
        self._no_retry_left(event.run_id, f"ask {event.ask_id}")
        self.ask_runs[event.ask_id] = event.run_id
        if event.call_id is not None:
            self.ask_calls[event.ask_id] = (event.run_id, event.call_id)
        self._progress(event.run_id, f"ask {event.ask_id}")

    def _ask_ended(self, event: AskReplied | AskDismissed | AskWithdrawn) -> None:
        """An ask is decided once: replied, dismissed or withdrawn, never two of them."""
        what = f"ask {event.ask_id}: {type(event).__struct_config__.tag}"
        if event.ask_id not in self.ask_runs:
            self.violation(f"{what}, but it was never requested")
        elif event.ask_id in self.asks_ended:
            self.violation(f"{what}, after it was already decided")
        self.asks_ended.add(event.ask_id)
        declined = isinstance(event, AskDismissed) or (isinstance(event, AskReplied) and not event.approved)
        if declined and event.ask_id in self.ask_calls:
            self.will_not_run.add(self.ask_calls[event.ask_id])

    def _part_updated(self, event: RunPartUpdated) -> None:
        card = (event.run_id, event.call_id)
        if event.state is PartState.RUNNING and card in self.will_not_run:
            self.violation(
                f"{event.run_id} {event.call_id}: an update says running after the user's decline decided "
                "the call will not run"
            )
        if event.tool_started:
            self.cards_started.add(card)
        elif card in self.cards_started:
            self.violation(
                f"{event.run_id} {event.call_id}: tool_started went from true back to false "
                f"(seq {event.seq}, {event.state.value}: {event.label!r})"
            )

    def _check_owed_loads(self, event: Event) -> None:
        """A load that must come right now (a lazy reload's, once the old generation closed; a run's
        ``run.started`` right after the generation it needed) is not skipped by this event."""
        if self.load_now is not None and not (
            isinstance(event, InstanceStarted) and event.directory == self.load_now
        ):
            self.violation(
                f"the last old generation of {self.load_now} closed with a lazy reload's load deferred, "
                f"but its next generation did not start at once (seq {event.seq})"
            )
            self.load_now = None
        if self.run_owed is not None and not isinstance(event, SessionStatusChanged | RunStarted):
            self.violation(
                f"{self.run_owed} was loaded for a run, but no run started on it (seq {event.seq})"
            )
            self.run_owed = None

    def _instance_started(self, event: InstanceStarted) -> None:
        key = (event.directory, event.generation)
        expected = self.newest.get(event.directory, 0) + 1
        if event.generation != expected:
            self.violation(f"{event.directory} started generation {event.generation}, expected {expected}")
        if self.shutdown_id is not None:
            self.violation(f"{key} started after shutdown was requested")
        older = sorted(k for k in self._open_keys((event.directory,)))
        live = [k for k in older if self.instances[k].state == "live"]
        if live:
            self.violation(f"{key} started ({event.cause.value}) while {live} is still live")
        owed = self.load_owed.pop(event.directory, None)
        deferred = self.load_deferred.pop(event.directory, None)
        now, self.load_now = self.load_now == event.directory, None
        if event.cause is LoadCause.RELOAD and owed is None:
            self.violation(f"{key} started for a reload, but no reload of {event.directory} loads now")
        elif event.cause is LoadCause.PREVIOUS_CLOSED and (deferred is None or not now or older):
            self.violation(
                f"{key} started as its previous generation closed, but no lazy reload deferred it "
                f"or {older} are still open"
            )
        elif event.cause is LoadCause.RUN:
            self.run_owed = key
        if owed is not None and event.cause is not LoadCause.RELOAD:
            self.violation(f"{key} started ({event.cause.value}) while {owed} owed its own load")
        if now and event.cause is not LoadCause.PREVIOUS_CLOSED:
            self.violation(f"{key} started ({event.cause.value}), not as its previous generation closed")
        self.fingerprints[event.directory] = event.fingerprint
        self.newest[event.directory] = event.generation
        self.instances[key] = _Instance(fingerprint=event.fingerprint)

    def _instance_ready(self, event: InstanceReady) -> None:
        """A generation's caches are usable: said once, after it started and before it closed."""
        key, instance = self._generation(event, "said ready")
        if instance is None:
            return
        if instance.state == "closed":
            self.violation(f"{key} said ready after it closed")
        if instance.ready:
            self.violation(f"{key} said ready twice")
        instance.ready = True

    def _generation(
        self, event: InstanceReady | InstanceClosed, what: str
    ) -> tuple[tuple[str, int], _Instance | None]:
        """The generation ``event`` speaks of, and what the checker knows of it (None, a violation:
        it never started)."""
        key = (event.directory, event.generation)
        instance = self.instances.get(key)
        if instance is None:
            self.violation(f"{key} {what} but never started")
        return key, instance

    def _instance_closed(self, event: InstanceClosed) -> None:
        key, instance = self._generation(event, "closed")
        if instance is None:
            return
        if instance.state == "closed":
            self.violation(f"{key} closed twice")
            return
        if instance.state == "live":
            self.violation(f"{key} closed while no close or shutdown covered it")
        if self.commands_seen and instance.state != "disposing" and not self.grace_expired:
            self.violation(f"{key} closed without being disposed")
        if instance.runs:
            self.violation(f"{key} closed while {sorted(instance.runs)} still ran on it")
        instance.state = "closed"
        if (
            event.directory in self.load_deferred
            and self.shutdown_id is None
            and not self._open_keys((event.directory,))
        ):
            self.load_now = event.directory

    def _session(self, name: str) -> _Session:
        session = self.sessions.get(name)
        if session is None:
            session = self.sessions[name] = _Session()
        return session

    def _new_run(self, run_id: str, session: str, directory: str, seq: int) -> _Run | None:
        if run_id in self.runs and self.runs[run_id].finished is None:
            self.violation(f"run {run_id} announced twice (seq {seq})")
            return None
        if self.shutdown_id is not None:
            self.violation(f"run {run_id} started or queued after shutdown was requested (seq {seq})")
        run = self.runs[run_id] = _Run(run_id, session, directory)
        return run

    def _run_queued(self, event: RunQueued) -> None:
        asked = self._start_request(event.run_id)
        directory = asked.directory if asked else ""
        run = self._new_run(event.run_id, event.session, directory, event.seq)
        if run is None:
            return
        self._adopt(run, event.parent_run_id)
        session = self._session(event.session)
        if session.active is None:
            self.violation(f"{event.run_id} queued although session {event.session} had no active run")
        run.policy = event.queue_policy
        if event.queue_policy is QueuePolicy.REJECT_IF_BUSY:
            self.violation(f"{run.id} queued under reject_if_busy")
        if asked is not None and asked.queue_policy not in (None, event.queue_policy):
            self.violation(f"{run.id} queued under {event.queue_policy.value}, asked {asked.queue_policy}")
        if event.queue_policy is QueuePolicy.COALESCE:
            twins = [q for q in session.queue if self.runs[q].policy is QueuePolicy.COALESCE]
            if twins:
                self.violation(f"{run.id} queued (coalesce) while {twins} still queued in {event.session}")
        session.queue.append(run.id)

    def _adopt(self, run: _Run, parent_id: str | None) -> None:
        if parent_id is None or run.parent == parent_id:
            return
        parent = self.runs.get(parent_id)
        if parent is None or parent.finished is not None or parent.state != "active":
            self.violation(f"{run.id} is a child of {parent_id}, which is not an active run")
            return
        run.parent = parent_id
        parent.children.append(run.id)
        if not run.directory:  # seen only as run.queued: a child is pinned to its parent's directory
            run.directory = parent.directory
        # A close that waits for the parent waits for its children, also those born after it.
        for action in self.actions.values():
            if parent_id in action.blocking and action.completed < action.requested:
                action.blocking = action.blocking | {run.id}

    def _start_request(self, run_id: str) -> StartRun | None:
        return self.start_requests.get(run_id)

    def _run_started(self, event: RunStarted) -> None:
        run = self.runs.get(event.run_id)
        session = self._session(event.session)
        if run is not None and run.state == "queued" and run.finished is None:
            if not session.queue or session.queue[0] != run.id:
                self.violation(f"{run.id} started out of its session's queue order {list(session.queue)}")
            if run.id in session.queue:
                session.queue.remove(run.id)
            if run.session != event.session:
                self.violation(f"{run.id} queued in {run.session} but started in {event.session}")
            run.directory = event.directory
        else:
            new = self._new_run(event.run_id, event.session, event.directory, event.seq)
            if new is None:
                return
            run = new
            if session.queue:
                self.violation(f"{run.id} started at once although {event.session} had {list(session.queue)}")
        asked = self._start_request(run.id)
        if asked is not None and (asked.session, asked.directory) != (event.session, event.directory):
            self.violation(f"{run.id} started in {event.session}/{event.directory}, asked for {asked}")
        if self.run_owed is not None:
            if self.run_owed != (event.directory, event.generation) or run.parent is not None:
                self.violation(
                    f"{self.run_owed} was loaded for a run, but {run.id} started on {event.generation}"
                )
            self.run_owed = None
        if session.active is not None:
            self.violation(f"session {event.session} starts {run.id} while {session.active} is active")
        if session.status is not SessionStatus.BUSY:
            self.violation(f"{run.id} started but session {event.session} did not say busy")
        self._adopt(run, event.parent_run_id)
        key = (event.directory, event.generation)
        instance = self.instances.get(key)
        parent = self.runs.get(run.parent) if run.parent is not None else None
        if parent is not None:  # a child: pinned to its parent's generation, whatever is current
            if (parent.directory, parent.generation) != key or instance is None or instance.state == "closed":
                self.violation(
                    f"child {run.id} started on {key}, not on its parent {parent.id}'s "
                    f"{(parent.directory, parent.generation)}"
                )
        elif (
            instance is None
            or instance.state != "live"
            or self.newest.get(event.directory) != event.generation
        ):
            state = "never started" if instance is None else instance.state
            self.violation(
                f"{run.id} started on {key}, which is not its directory's live generation ({state})"
            )
        if instance is not None:
            instance.runs.add(run.id)
        run.state = "active"
        run.generation = event.generation
        run.deadline_ms = event.deadline_ms
        asked_deadline = asked.deadline_ms if asked is not None else event.deadline_ms
        if event.deadline_ms != asked_deadline:
            self.violation(f"{run.id} started with deadline {event.deadline_ms}, asked {asked_deadline}")
        session.active = run.id

    def _step(self, event: StepStarted | StepFinished) -> None:
        run = self.runs.get(event.run_id)
        if run is None or run.state != "active":
            self.violation(f"a step of {event.run_id} while it is not active (seq {event.seq})")
        self._no_retry_left(event.run_id, "a step")
        self._progress(event.run_id, "a step")

    def _no_retry_left(self, run_id: str, what: str) -> None:
        """The run went on: its session must have said ``busy`` before (the attempt is over)."""
        run = self.runs.get(run_id)
        session = self.sessions.get(run.session) if run is not None else None
        if session is not None and session.active == run_id and session.status is SessionStatus.RETRY:
            self.violation(f"{what} of {run_id} while its session still says retry")

    def _run_finished(self, event: RunFinished) -> None:
        run = self.runs.get(event.run_id)
        if run is None:
            self.violation(f"{event.run_id} finished but never started nor queued")
            return
        if run.finished is not None:
            self.violation(f"{event.run_id} finished twice")
            return
        unfinished = [c for c in run.children if self.runs[c].finished is None]
        if unfinished:
            self.violation(f"{run.id} reported finished before its children {unfinished}")
        if run.stalled:
            self.violation(f"{run.id} finished while still flagged stalled (no run.unstalled first)")
        run.finished = event
        for part in event.parts:
            if not part.tool_started and (run.id, part.call_id or "") in self.cards_started:
                self.violation(
                    f"{run.id} {part.call_id}: its card said tool_started, its run.finished part does not"
                )
        was = run.state
        run.state = "finished"
        self._check_ending(run, event, was)
        session = self._session(run.session)
        if was == "queued":
            if run.id in session.queue:
                session.queue.remove(run.id)
            if event.generation is not None:
                self.violation(f"{run.id} finished unstarted with generation {event.generation}")
            return
        if event.generation != run.generation:
            self.violation(f"{run.id} finished on generation {event.generation}, started on {run.generation}")
        instance = self.instances.get((run.directory, run.generation or 0))
        if instance is not None:
            instance.runs.discard(run.id)
        if session.stopped == run.id:
            session.stopped = None
        if session.active == run.id:
            session.active = None
        else:
            self.violation(f"{run.id} finished but was not its session's active run")

    def _check_ending(self, run: _Run, event: RunFinished, was: str) -> None:
        interrupted = event.outcome is Outcome.INTERRUPTED
        if not interrupted:
            if (event.reason, event.origin, event.action_id, event.phase) != (None, None, None, None):
                self.violation(f"{run.id} ended {event.outcome.value} but names an interrupt: {event}")
            if event.abandoned:
                self.violation(f"{run.id} abandoned although it was not interrupted")
            if run.signalled is not None:
                self.violation(
                    f"{run.id} was signalled ({run.signalled.value}) but ended {event.outcome.value}"
                )
            if (event.outcome is Outcome.FAILED) != (event.error is not None):
                self.violation(f"{run.id} ended {event.outcome.value} with error {event.error!r}")
            return
        if event.reason is None:
            self.violation(f"{run.id} was interrupted without a reason")
            return
        if event.origin == RETRY_BUDGET_ORIGIN and run.parent is None and event.retry_attempt is None:
            self.violation(f"{run.id} ended by its retry budget without the retry that exhausted it")
        if self.commands_seen and was == "active" and run.signalled is not event.reason:
            self.violation(
                f"{run.id} ended interrupted ({event.reason.value}) but was signalled {run.signalled}"
            )
        if self.commands_seen and event.abandoned != run.abandoned:
            self.violation(f"{run.id} abandoned={event.abandoned} but the shell was told {run.abandoned}")
        if event.abandoned and was != "active":
            self.violation(f"{run.id} abandoned although it never started")
        action = self.actions.get(event.action_id or "")
        if event.reason is InterruptReason.LIFECYCLE_INTERRUPT and action is not None and action.confirmed:
            if event.origin != action.confirmed or run.id not in action.blocking:
                self.violation(
                    f"{run.id} interrupted by the confirmed {action.id} with origin {event.origin!r}, "
                    f"confirmed by {action.confirmed!r} (blocking: {sorted(action.blocking)})"
                )
        elif event.reason is InterruptReason.LIFECYCLE_INTERRUPT:
            if action is None or CLOSE_RULES[action.mode].interrupts_with is not event.reason:
                self.violation(
                    f"{run.id} interrupted ({event.reason.value}) by {event.action_id}, not a confirmed close"
                )
            elif run.directory not in action.directories or event.origin != action.origin:
                self.violation(
                    f"{run.id} in {run.directory} interrupted by {action.id} of {action.directories}"
                )
            elif run.id not in action.blocking:
                self.violation(f"{run.id} interrupted by {action.id}, which came before it started")
        elif event.reason is InterruptReason.TIMEOUT and (
            event.action_id is None or event.action_id != self.shutdown_id
        ):
            pass  # a watchdog's cancel or a run's deadline, not the shutdown: checked with the decisions
        elif event.reason in _SHUTDOWN_REASONS:
            if event.action_id is None or event.action_id != self.shutdown_id:
                self.violation(
                    f"{run.id} interrupted ({event.reason.value}) by {event.action_id}, not the shutdown"
                )
            elif event.reason not in self.shutdown_reasons:
                self.violation(
                    f"{run.id} interrupted ({event.reason.value}) by a shutdown that may not say so"
                )
            else:
                self.shutdown_reasons = frozenset({event.reason})  # every run names the same one
        elif event.reason in DECLINE_ORIGINS and event.origin != DECLINE_ORIGINS[event.reason]:
            self.violation(f"{run.id} interrupted ({event.reason.value}) with origin {event.origin!r}")
        elif event.reason in QUEUE_REASONS:
            self._check_queue_ending(run, event, was)
        if action is not None and CLOSE_RULES[action.mode].interrupts_with is None and not action.confirmed:
            self.violation(f"{run.id} interrupted by the maintenance close {action.id}")

    def _check_queue_ending(self, run: _Run, event: RunFinished, was: str) -> None:
        """A run ended by a queue policy was queued; a dropped one's origin is its session's active
        run, being interrupted now (its interrupt's action is checked at ``finish``)."""
        if was != "queued":
            self.violation(f"{run.id} ended {event.reason} although it was {was}, not queued")
            return
        if event.reason is InterruptReason.DROPPED:
            session = self._session(run.session)
            if QUEUE_RULES[run.policy].on_interrupt is not QueuedFate.DROP:
                self.violation(f"{run.id} dropped although its policy {run.policy.value} keeps it")
            if event.origin is None or session.active != event.origin:
                self.violation(f"{run.id} dropped for {event.origin!r}, not its session's active run")
            elif self.commands_seen and self.runs[event.origin].signalled is None:
                self.violation(f"{run.id} dropped for {event.origin}, which was not interrupted")

    def _check_queue_endings(self) -> None:
        """What ended a coalesced or a dropped run is known once the stream has ended."""
        for run in self.runs.values():
            event = run.finished
            if event is None or event.reason not in QUEUE_REASONS:
                continue
            origin = self.runs.get(event.origin or "")
            if event.reason is InterruptReason.COALESCED:
                if origin is None or origin.session != run.session or origin.policy is not run.policy:
                    self.violation(f"{run.id} coalesced into {event.origin!r}, not a run of its session")
                continue
            ended = origin.finished if origin is not None else None
            want = (Outcome.INTERRUPTED, event.action_id)
            if ended is not None and (ended.outcome, ended.action_id) != want:
                self.violation(f"{run.id} dropped ({event.action_id}) for {origin}, which ended {ended}")

    def _session_status(self, event: SessionStatusChanged) -> None:
        session = self._session(event.session)
        retry = (event.attempt, event.message, event.next_at_ms)
        if event.status is SessionStatus.RETRY:
            run = self.runs.get(session.active or "")
            if session.status not in (SessionStatus.BUSY, SessionStatus.RETRY):
                self.violation(f"session {event.session} said retry while {session.status}")
            if run is None or run.state != "active" or run.finished is not None or run.signalled is not None:
                self.violation(f"session {event.session} said retry without an active, uninterrupted run")
            if event.attempt is None or event.attempt < 1 or event.message is None:
                self.violation(
                    f"session {event.session} said retry without an attempt and a message: {retry}"
                )
        elif retry != (None, None, None):
            self.violation(f"session {event.session} said {event.status.value} with a retry's fields {retry}")
        stopped = session.stopped is not None and session.stopped == session.active
        if stopped and event.status is not SessionStatus.IDLE:
            self.violation(
                f"session {event.session} said {event.status.value} after its run {session.stopped} was "
                "stopped: the next word after a stop is the run's end"
            )
        if session.status is event.status and event.status is not SessionStatus.RETRY:
            self.violation(f"session {event.session} said {event.status.value} twice in a row")
        if event.status is SessionStatus.IDLE and (session.active is not None or session.queue):
            self.violation(
                f"session {event.session} idle with {session.active} active, {list(session.queue)} queued"
            )
        session.status = event.status

    def _open_keys(self, directories: Iterable[str]) -> frozenset[tuple[str, int]]:
        names = set(directories)
        return frozenset(k for k, i in self.instances.items() if k[0] in names and i.state != "closed")

    def _active_in(self, directories: Iterable[str]) -> frozenset[str]:
        """What a close of ``directories`` waits for: their active runs and every unfinished
        descendant of those (a child, even one still queued, is pinned to its parent's instance)."""
        names = set(directories)
        waited = {r.id for r in self.runs.values() if r.state == "active" and r.directory in names}
        todo = list(waited)
        while todo:
            for child in self.runs[todo.pop()].children:
                if child not in waited and self.runs[child].finished is None:
                    waited.add(child)
                    todo.append(child)
        return frozenset(waited)

    def _loaded(self) -> tuple[str, ...]:
        return tuple(sorted({k[0] for k, i in self.instances.items() if i.state != "closed"}))

    def _lifecycle_requested(self, event: LifecycleRequested) -> None:
        known = self.actions.get(event.action_id)
        shutdown_like = event.do in SHUTDOWN_ACTIONS
        if known is not None:
            if not shutdown_like or known.id != self.shutdown_id:
                self.violation(f"{event.action_id} requested twice, and not as a shutdown joining the first")
            known.requested += 1
            return
        if self.shutdown_id is not None:
            self.violation(f"lifecycle action {event.action_id} ({event.do.value}) after the shutdown")
        if shutdown_like != CLOSE_RULES[event.mode].covers_everything:
            self.violation(f"{event.action_id}: {event.do.value} in mode {event.mode.value}")
        loaded = self._loaded()
        if shutdown_like or CLOSE_ACTION_SCOPE[event.do] is not CloseScope.ONE_DIRECTORY:
            if event.directories != loaded:
                self.violation(
                    f"{event.action_id} ({event.do.value}) covers {event.directories}, loaded: {loaded}"
                )
        elif len(event.directories) != 1:
            self.violation(f"{event.action_id} ({event.do.value}) names {event.directories}")
        covered = self._open_keys(event.directories)
        live = [self.instances[k].fingerprint for k in covered if self.instances[k].state == "live"]
        # A generation a lazy reload deferred counts as live, with what it will be loaded with.
        live.extend(
            self.fingerprints.get(d)
            for d in event.directories
            if d in self.load_deferred
            and not any(k[0] == d and self.instances[k].state == "live" for k in covered)
        )
        noop = fingerprint_unchanged(event.fingerprint, live)
        if noop:  # the no-op gate: nothing may be touched, so it covers nothing
            covered = frozenset()
        action = self.actions[event.action_id] = _Action(
            id=event.action_id,
            do=event.do,
            mode=event.mode,
            origin=event.origin,
            directories=event.directories,
            covered=covered,
            blocking=frozenset() if noop else self._active_in(event.directories),
            noop=noop,
        )
        for key in covered:
            if self.instances[key].state == "live":
                self.instances[key].state = "retired"
        if not noop:
            self._reload_requested(event, covered)
        if shutdown_like:
            self.shutdown_id = action.id
            self.shutdown_reasons = SHUTDOWN_INTERRUPT_REASONS.get(event.mode, frozenset())
            self.shutdown_queued = {r.id for r in self.runs.values() if r.state == "queued"}
            for other in self.actions.values():
                if other is not action and other.completed < other.requested:
                    other.supersede = action.id

    def _reload_requested(self, event: LifecycleRequested, covered: frozenset[tuple[str, int]]) -> None:
        """A close that goes ahead: it cancels the loads deferred in its directories; a reload owes
        its load now or defers it (``RELOAD_RULES``)."""
        names = (
            event.directories if event.do is not CloseAction.INVALIDATE_CONFIG else tuple(self.fingerprints)
        )
        for name in event.directories:
            self.load_deferred.pop(name, None)
        if event.fingerprint is not None:
            for name in names:
                self.fingerprints[name] = event.fingerprint
        if event.do is not CloseAction.RELOAD and event.reload_policy is not None:
            self.violation(f"{event.action_id} ({event.do.value}) has reload_policy {event.reload_policy}")
        if event.do is not CloseAction.RELOAD or event.reload_policy is None:
            return  # (a reload without a policy: a stream older than reload policies; nothing to check)
        name = event.directories[0]
        open_now = sum(1 for k in covered if k[0] == name)
        policy = ReloadPolicy(event.reload_policy)
        if reload_loads(policy, event.mode, ReloadLoad.AT_REQUEST, open_generations=open_now):
            self.load_owed[name] = event.action_id
        else:
            self.load_deferred[name] = event.action_id

    def _reload_done(self, action_id: str, when: str) -> None:
        """An eager reload loads before it says anything more of itself."""
        late = [d for d, owner in self.load_owed.items() if owner == action_id]
        if late:
            self.violation(f"{action_id} {when} before it loaded the next generation of {late}")
            for name in late:
                del self.load_owed[name]

    def _requested(self, action_id: str, when: str, unknown: str) -> _Action | None:
        """The action an event says it ``when`` (its eager reload checked); if it was never
        requested, None and the violation ``unknown`` (its id in the braces)."""
        self._reload_done(action_id, when)
        action = self.actions.get(action_id)
        if action is None:
            self.violation(unknown.format(action_id))
        return action

    def _lifecycle_deferred(self, event: LifecycleDeferred) -> None:
        self._reload_done(event.action_id, "deferred")
        action = self.actions.get(event.action_id)
        if action is None or action.completed:
            self.violation(f"{event.action_id} deferred but it is not pending")
            return
        if not event.pending_directories or not event.blocking_runs:
            self.violation(f"{event.action_id} deferred without pending directories or blocking runs")
        if not set(event.pending_directories) <= set(action.directories):
            self.violation(
                f"{event.action_id} waits for {event.pending_directories} outside {action.directories}"
            )
        if not set(event.blocking_runs) <= action.blocking:
            self.violation(f"{event.action_id} waits for {event.blocking_runs}, not all there at its request")

    def _lifecycle_completed(self, event: LifecycleCompleted) -> None:
        action = self._requested(event.action_id, "completed", "{} completed but was never requested")
        if action is None:
            return
        action.completed += 1
        if action.completed > action.requested:
            self.violation(
                f"{event.action_id} completed {action.completed} times, requested {action.requested}"
            )
            return
        still_active = sorted(r for r in action.blocking if self.runs[r].finished is None)
        if still_active:
            self.violation(
                f"{event.action_id} completed while {still_active}, there at its request, are active"
            )
        still_open = sorted(k for k in action.covered if self.instances[k].state != "closed")
        if still_open:
            self.violation(f"{event.action_id} completed while {still_open} it covered are open")
        if event.superseded_by != action.supersede:
            self.violation(
                f"{event.action_id} completed superseded_by {event.superseded_by}, not {action.supersede}"
            )
        if action.id == self.shutdown_id and not self.shutdown_done:
            self.shutdown_done = True
            self._everything_ended(f"the shutdown {action.id} completed")

    def _everything_ended(self, when: str) -> None:
        running = sorted(r.id for r in self.runs.values() if r.finished is None)
        if running:
            self.violation(f"{when} while {running} had not finished")
        open_instances = sorted(k for k, i in self.instances.items() if i.state != "closed")
        if open_instances:
            self.violation(f"{when} while {open_instances} were open")
        pending = sorted(a.id for a in self.actions.values() if a.id != self.shutdown_id and not a.completed)
        if pending:
            self.violation(f"{when} while {pending} had not completed")

    def _action_result(self, event: ActionResult) -> None:
        action = self._requested(
            event.action_id, "resulted", "action.result of {}, which was never requested"
        )
        if action is None:
            return
        action.results.append(event.result)
        if len(action.results) > action.requested:
            self.violation(
                f"{event.action_id}: {len(action.results)} action.result for {action.requested} requests"
            )
        if event.result not in CLOSE_ANSWERS[action.mode] or event.result is not action.results[0]:
            self.violation(f"{event.action_id} ({action.mode.value}) resulted {event.result.value}")
        if action.noop != (event.result is CloseResult.NOOP):
            self.violation(
                f"{event.action_id} resulted {event.result.value}, but its fingerprint "
                + ("changes nothing" if action.noop else "is not every live instance's")
            )

    # --- commands ----------------------------------------------------------------------------

    def _reply_order(self, answer: Answer, *, confirm: bool = False) -> None:
        if not isinstance(answer, CloseOutcome) or answer.action_id is None:
            return
        action = self.actions.get(answer.action_id)
        if action is None:
            self.violation(f"a reply names {answer.action_id}, which was never requested")
            return
        replied = sum(
            1
            for asked in self.asked.values()
            if isinstance(asked.answer, CloseOutcome)
            and asked.answer.action_id == answer.action_id
            and not isinstance(asked.request, ConfirmClose)  # answered with the result given before
        )
        if not confirm and len(action.results) <= replied:
            self.violation(f"a reply about {answer.action_id} before its action.result")
        if answer.completed and not action.completed:
            self.violation(f"a reply says {answer.action_id} completed before its lifecycle.completed")

    def _spawn(self, command: SpawnRun) -> None:
        run = self.runs.get(command.run_id)
        if run is None or run.state != "active" or run.generation != command.generation:
            self.violation(f"{command.run_id} spawned without starting on generation {command.generation}")
            return
        key = (command.directory, command.generation)
        # A child runs on its parent's instance, which may be waiting to close (never closed).
        allowed = ("live",) if run.parent is None else ("live", "retired")
        if self.instances[key].state not in allowed:
            self.violation(f"{command.run_id} spawned on {key}, which is {self.instances[key].state}")

    def _dispose(self, command: DisposeInstance) -> None:
        key = (command.directory, command.generation)
        instance = self.instances.get(key)
        if instance is None or instance.state in ("live", "disposing", "closed"):
            state = "never started" if instance is None else instance.state
            self.violation(f"{key} disposed while {state}")
            return
        if instance.runs:
            self.violation(f"{key} disposed while {sorted(instance.runs)} still run on it")
        if command.report == self.grace_expired:
            self.violation(
                f"{key} disposed with report={command.report} (grace expired: {self.grace_expired})"
            )
        instance.state = "disposing"

    def _deadline_command(self, command: ArmDeadline | DisarmDeadline) -> None:
        run = self.runs.get(command.run_id)
        if isinstance(command, ArmDeadline):
            if run is None or run.state != "active" or run.deadline.armed or run.signalled is not None:
                self.violation(f"a deadline armed for {command.run_id}, which did not just start")
            elif command.deadline_ms <= 0 or command.deadline_ms != run.deadline_ms:
                self.violation(
                    f"{command.run_id} armed for {command.deadline_ms} ms, its run.started says "
                    f"{run.deadline_ms}"
                )
            else:
                run.deadline.armed = True
            return
        self._clock_stopped(run, run.deadline if run else None, f"a deadline of {command.run_id} disarmed")

    def _signal(self, command: SignalInterrupt) -> None:
        run = self.runs.get(command.run_id)
        session = self.sessions.get(run.session) if run is not None else None
        if session is not None and session.active == command.run_id:
            session.stopped = command.run_id  # from now on it says nothing until the run's end
        if run is None or run.state != "active":
            self.violation(f"{command.run_id} signalled while it is not active")
        elif run.signalled is not None:
            self.violation(
                f"{command.run_id} signalled twice ({run.signalled.value}, then {command.reason.value})"
            )
        else:
            run.signalled = command.reason
            if run.stalled:
                self.violation(f"{command.run_id} signalled while still flagged stalled")

    # --- answers -----------------------------------------------------------------------------

    def _check_answer(self, token: Hashable, request: Request, answer: Answer, after_shutdown: bool) -> None:
        closing = isinstance(request, CloseRequest | Shutdown | ConfirmClose)
        if closing != isinstance(answer, CloseOutcome):
            self.violation(f"{token!r}: {type(request).__name__} answered with {type(answer).__name__}")
        if answer.rejected:
            if answer.code is None or not answer.error:
                self.violation(f"{token!r} rejected without a code and a message: {answer}")
            if answer.code is RejectCode.SESSION_BUSY and isinstance(request, DeleteSession):
                if request.confirm:
                    self.violation(f"{token!r}: a confirmed delete_session rejected session_busy")
            elif answer.code is RejectCode.SESSION_BUSY and (
                not isinstance(request, StartRun)
                or request.queue_policy not in (None, QueuePolicy.REJECT_IF_BUSY)
            ):
                self.violation(f"{token!r} rejected session_busy without asking reject_if_busy: {request}")
            if isinstance(request, StartRun) and self.start_requests.get(request.run_id) is request:
                del self.start_requests[request.run_id]  # not taken: a later start may use the id
            return
        if answer.code is not None or answer.error is not None:
            self.violation(f"{token!r} accepted ({answer.result.value}) with an error: {answer}")
        if after_shutdown and not isinstance(request, Shutdown):
            self.violation(f"{token!r}: {type(request).__name__} accepted after the shutdown")
        if not isinstance(answer, CloseOutcome):
            if answer.result is not RequestResult.OK:
                self.violation(f"{token!r} answered {answer.result.value}")
            return
        if isinstance(request, Shutdown):
            if answer.result is not CloseResult.FORCED:
                self.violation(f"{token!r}: the shutdown answered {answer.result.value}")
            if self.shutdown_id is not None and answer.action_id != self.shutdown_id:
                self.violation(
                    f"{token!r}: a shutdown answered as {answer.action_id}, not {self.shutdown_id}"
                )
            return
        if isinstance(request, ConfirmClose):
            self._check_confirm_answer(token, request, answer)
            return
        assert isinstance(request, CloseRequest)
        if answer.result not in CLOSE_ANSWERS[request.mode]:
            self.violation(
                f"{token!r}: a {request.mode.value} {request.do.value} answered {answer.result.value}"
            )
        if (answer.result is CloseResult.INTERRUPTED) != bool(answer.interrupted_runs):
            self.violation(
                f"{token!r} answered {answer.result.value} with interrupted {answer.interrupted_runs}"
            )
        if answer.result is CloseResult.DEFERRED and not (
            answer.pending_directories and answer.blocking_runs
        ):
            self.violation(f"{token!r} deferred without pending directories or blocking runs")
        if answer.result is CloseResult.COMPLETED and (answer.pending_directories or answer.blocking_runs):
            self.violation(f"{token!r} completed but waits for {answer.blocking_runs}")
        if answer.result is CloseResult.NOOP and (
            not answer.completed
            or answer.completed_directories
            or answer.pending_directories
            or answer.blocking_runs
        ):
            self.violation(f"{token!r} answered noop but touched something: {answer}")

    def _check_confirm_answer(self, token: Hashable, request: ConfirmClose, answer: CloseOutcome) -> None:
        action = self.actions.get(request.action_id)
        if answer.action_id != request.action_id or action is None:
            self.violation(f"{token!r}: confirm_close of {request.action_id} answered as {answer.action_id}")
            return
        if action.mode not in CONFIRM_RULES:
            self.violation(f"{token!r}: a {action.mode.value} action {action.id} was confirmed")
        if action.results and answer.result is not action.results[0]:
            self.violation(
                f"{token!r}: confirm_close answered {answer.result.value}, "
                f"{action.id} resulted {action.results[0].value}"
            )
        strays = sorted(set(answer.interrupted_runs) - action.blocking)
        if strays:
            self.violation(
                f"{token!r}: confirm_close of {action.id} interrupted {strays}, which it never waited for"
            )

    # --- stalls ------------------------------------------------------------------------------

    def _progress(self, run_id: str, what: str) -> None:
        run = self.runs.get(run_id)
        if run is not None and run.stalled:
            self.violation(f"{what} of {run_id} while it is still flagged stalled: progress clears the flag")
        seen = {run_id}
        while run is not None and run.parent is not None and run.parent not in seen:
            seen.add(run.parent)
            run = self.runs.get(run.parent)
            if run is not None and run.stalled and run.state == "active" and run.signalled is None:
                self.violation(
                    f"{what} of {run_id} while its ancestor {run.id} is still flagged stalled: "
                    "a child's progress is its parents'"
                )

    def _run_stalled(self, event: RunStalled) -> None:
        run = self.runs.get(event.run_id)
        if run is None or run.state != "active" or run.signalled is not None:
            self.violation(f"{event.run_id} flagged stalled while it is not active (seq {event.seq})")
            return
        if run.stalled:
            self.violation(f"{event.run_id} flagged stalled twice in a row")
        asking = [a for a, r in self.ask_runs.items() if r == run.id and a not in self.asks_ended]
        if asking:
            self.violation(f"{event.run_id} flagged stalled while it waits for the user ({asking[0]})")
        working = [
            c
            for c in run.children
            if (child := self.runs.get(c)) is not None and child.state == "active" and not child.stalled
        ]
        if working:
            self.violation(f"{event.run_id} flagged stalled while its child {working[0]} works")
        run.stalled = True
        for action_id in event.holding:
            action = self.actions.get(action_id)
            if action is None or action.completed >= action.requested:
                self.violation(f"stalled {event.run_id} said to hold {action_id}, which is not pending")
            elif event.run_id not in action.blocking:
                self.violation(f"stalled {event.run_id} said to hold {action_id}, which never waited for it")

    def _run_unstalled(self, event: RunUnstalled) -> None:
        run = self.runs.get(event.run_id)
        if run is None or not run.stalled:
            self.violation(f"{event.run_id} unstalled but it was not flagged stalled (seq {event.seq})")
            return
        run.stalled = False

    def _lifecycle_confirmed(self, event: LifecycleConfirmed) -> None:
        action = self.actions.get(event.action_id)
        if action is None or action.completed >= action.requested:
            self.violation(f"{event.action_id} confirmed but it is not pending")
            return
        if action.mode not in CONFIRM_RULES:
            self.violation(f"{event.action_id} ({action.mode.value}) confirmed: only a maintenance close is")
        if action.confirmed is not None and action.confirmed != event.origin:
            self.violation(
                f"{event.action_id} confirmed by "
                f" {event.origin!r} after {action.confirmed!r}: the first holds"
            )
            return
        action.confirmed = event.origin
        strays = sorted(set(event.interrupted_runs) - action.blocking)
        if strays:
            self.violation(f"{event.action_id} confirmed: it interrupts {strays}, which it never waited for")

    def _asked_run(self, ask_id: str | None, run_id: str | None) -> str:
        """The run a reply reached: named, or the run of the ask it names."""
        return run_id if run_id is not None else self.ask_runs.get(ask_id or "", "")

    def _decisions(self) -> dict[str, list[_Decision]]:
        """The interrupts requests were accepted for, by run."""
        decided: dict[str, list[_Decision]] = {}

        def add(run_id: str, decision: _Decision) -> None:
            decided.setdefault(run_id, []).append(decision)

        for token, asked in self.asked.items():
            request, answer = asked.request, asked.answer
            if answer is None or answer.rejected:
                continue
            by = f"{type(request).__name__} {token!r}"
            if isinstance(request, CancelRun):
                add(request.run_id, _Decision(request.reason, request.origin, request.tag, by))
            elif isinstance(request, CancelSession | DeleteSession) and isinstance(answer, RequestOutcome):
                stop = request.reason if isinstance(request, CancelSession) else InterruptReason.USER_CANCEL
                if bool(answer.interrupted_runs) != (answer.action_id is not None):
                    self.violation(f"{by}: stopped {answer.interrupted_runs} as action {answer.action_id}")
                for run_id in answer.interrupted_runs:  # one reason, one origin, one action id
                    add(run_id, _Decision(stop, request.origin, answer.action_id, by))
            elif isinstance(request, ReplyPermission | DismissForm):
                rule = _decline_of(request)
                if rule is not None and rule.effect is DeclineEffect.INTERRUPT_RUN:
                    assert rule.interrupts_with is not None
                    add(
                        self._asked_run(request.ask_id, request.run_id),
                        _Decision(rule.interrupts_with, rule.origin, request.tag, by),
                    )
            elif isinstance(request, ConfirmClose) and isinstance(answer, CloseOutcome):
                for run_id in answer.interrupted_runs:
                    add(
                        run_id,
                        # its origin is checked against the lifecycle.confirmed (the first confirm's)
                        _Decision(InterruptReason.LIFECYCLE_INTERRUPT, None, answer.action_id, by),
                    )
            elif isinstance(request, CloseRequest) and isinstance(answer, CloseOutcome):
                reason = CLOSE_RULES[request.mode].interrupts_with
                for run_id in answer.interrupted_runs:
                    if reason is None:
                        self.violation(f"{by}: a {request.mode.value} close interrupted {run_id}")
                    else:
                        add(run_id, _Decision(reason, request.origin, answer.action_id, by))
        shutdown = next(
            (
                a
                for a in self.asked.values()
                if isinstance(a.request, Shutdown)
                and isinstance(a.answer, CloseOutcome)
                and a.answer.result is CloseResult.FORCED
            ),
            None,
        )
        if shutdown is not None and isinstance(shutdown.answer, CloseOutcome):
            assert isinstance(shutdown.request, Shutdown)
            reason = ShutdownReason(shutdown.request.reason).interrupt_reason
            for run_id in shutdown.answer.interrupted_runs:
                add(run_id, _Decision(reason, None, self.shutdown_id, "the shutdown"))
        return decided

    def _check_decisions(self) -> None:
        decided = self._decisions()
        for run_id, decisions in sorted(decided.items()):
            if len(decisions) > 1:
                self.violation(f"{run_id}: more than one interrupt accepted: {[d.by for d in decisions]}")
            run = self.runs.get(run_id)
            event = run.finished if run else None
            if event is None:
                continue
            want = decisions[0]
            got = (event.outcome, event.reason, event.action_id)
            if got != (Outcome.INTERRUPTED, want.reason, want.action) or (
                want.origin is not None and event.origin != want.origin
            ):
                self.violation(f"{run_id} ended {got} origin {event.origin!r}; {want.by} decided {want}")
        for run in self.runs.values():
            event = run.finished
            if event is None or event.outcome is not Outcome.INTERRUPTED or run.id in decided:
                continue
            if event.reason in QUEUE_REASONS:  # decided by a queue policy (checked at the end)
                continue
            inherited = self._inherited(run, decided)
            if inherited is not None:  # its parent's interrupt: the same reason, origin and action
                mine = (event.reason, event.origin, event.action_id)
                up = self.runs[inherited].finished
                if up is not None and mine != (up.reason, up.origin, up.action_id):
                    self.violation(f"child {run.id} ended {mine}, its ancestor {inherited} {up}")
                continue
            if run.id in self.shutdown_queued and event.reason in _SHUTDOWN_REASONS:
                continue
            if event.origin == RETRY_BUDGET_ORIGIN:  # no request decided it: a retry past its budget did
                if event.reason is not RETRY_BUDGET_REASON or event.action_id is not None:
                    self.violation(
                        f"{run.id} interrupted by its retry budget with reason {event.reason}, "
                        f"action {event.action_id} (timeout, none expected)"
                    )
                elif not self._retried_up(run):
                    self.violation(
                        f"{run.id} interrupted by a retry budget, but neither it nor a parent ended "
                        "with the retry that exhausted it (retry_attempt, retry_message)"
                    )
                continue
            if event.origin == DEADLINE_ORIGIN:  # no request decided it: its deadline did
                if event.reason is not DEADLINE_REASON or event.action_id is not None:
                    self.violation(
                        f"{run.id} interrupted by its deadline with reason {event.reason}, "
                        f"action {event.action_id} (timeout, none expected)"
                    )
                elif self._deadline_owner(run) is None:
                    self.violation(f"{run.id} interrupted by a deadline that neither it nor a parent had")
                continue
            self.violation(f"{run.id} ended interrupted ({event.reason}) but no accepted request decided it")

    def _retried_up(self, run: _Run) -> bool:
        """``run`` or an ancestor finished carrying the retry that exhausted its budget."""
        seen: set[str] = set()
        here: _Run | None = run
        while here is not None and here.id not in seen:
            seen.add(here.id)
            end = here.finished
            if end is not None and end.origin == RETRY_BUDGET_ORIGIN and end.retry_attempt is not None:
                return end.retry_message is not None
            here = self.runs.get(here.parent) if here.parent is not None else None
        return False

    def _deadline_owner(self, run: _Run) -> str | None:
        """The run (itself or the nearest ancestor) whose deadline interrupted ``run``: one that had
        a deadline, which passed (when the driver feeds commands, it says so)."""
        seen: set[str] = set()
        here: _Run | None = run
        while here is not None and here.id not in seen:
            seen.add(here.id)
            if here.deadline_ms is not None and (here.deadline.passed or not self.commands_seen):
                return here.id
            here = self.runs.get(here.parent) if here.parent is not None else None
        return None

    def _inherited(self, run: _Run, decided: dict[str, list[_Decision]]) -> str | None:
        """The nearest ancestor of ``run`` an accepted request interrupted, if any."""
        seen: set[str] = set()
        while run.parent is not None and run.parent not in seen:
            seen.add(run.parent)
            parent = self.runs.get(run.parent)
            if parent is None:
                return None
            if parent.id in decided:
                return parent.id
            run = parent
        return None

    # --- the end -----------------------------------------------------------------------------

    def finish(self, *, require_shutdown: bool = True) -> None:
        """The stream has ended (the supervisor shut down and every event was fed): check that
        everything ended and every request was answered once, then raise if anything was violated."""
        if require_shutdown and not self.shutdown_done:
            self.violation("the stream ended before a shutdown completed")
        self._everything_ended("the stream ended")
        for action in self.actions.values():
            if action.completed != action.requested:
                self.violation(
                    f"{action.id}: {action.completed} lifecycle.completed for {action.requested} requests"
                )
        for name, session in sorted(self.sessions.items()):
            if session.status in (SessionStatus.BUSY, SessionStatus.RETRY):
                self.violation(f"session {name} ended {session.status.value}")
        for run in self.runs.values():
            started = self.commands_seen and run.deadline_ms is not None and run.generation is not None
            if started and (
                not run.deadline.armed or (run.finished is not None and not run.deadline.stopped)
            ):
                self.violation(
                    f"{run.id}'s deadline: armed {run.deadline.armed}, disarmed {run.deadline.stopped} "
                    f"(finished: {run.finished is not None})"
                )
            if session.status is SessionStatus.BUSY:
                self.violation(f"session {name} ended busy")
        self._check_queue_endings()
        unanswered = [token for token, asked in self.asked.items() if asked.answers == 0]
        if unanswered:
            self.violation(f"requests never answered: {unanswered[:10]}")
        if self.asked:
            self._check_decisions()
        self.assert_ok()


_HANDLERS: dict[type, Callable[[InvariantChecker, Any], None]] = {
    InstanceStarted: InvariantChecker._instance_started,
    InstanceReady: InvariantChecker._instance_ready,
    InstanceClosed: InvariantChecker._instance_closed,
    RunQueued: InvariantChecker._run_queued,
    RunStarted: InvariantChecker._run_started,
    StepStarted: InvariantChecker._step,
    StepFinished: InvariantChecker._step,
    RunFinished: InvariantChecker._run_finished,
    SessionStatusChanged: InvariantChecker._session_status,
    LifecycleRequested: InvariantChecker._lifecycle_requested,
    LifecycleDeferred: InvariantChecker._lifecycle_deferred,
    LifecycleCompleted: InvariantChecker._lifecycle_completed,
    ActionResult: InvariantChecker._action_result,
    AskRequested: InvariantChecker._ask_requested,
    AskReplied: InvariantChecker._ask_ended,
    AskDismissed: InvariantChecker._ask_ended,
    AskWithdrawn: InvariantChecker._ask_ended,
    RunStalled: InvariantChecker._run_stalled,
    RunUnstalled: InvariantChecker._run_unstalled,
    LifecycleConfirmed: InvariantChecker._lifecycle_confirmed,
    RunPartUpdated: InvariantChecker._part_updated,
}


_COMMAND_HANDLERS: dict[type, Callable[[InvariantChecker, Any], None]] = {
    Emit: InvariantChecker._emit_command,
    Reply: InvariantChecker._reply_command,
    SpawnRun: InvariantChecker._spawn,
    DisposeInstance: InvariantChecker._dispose,
    LoadInstance: InvariantChecker._load_command,
    SignalInterrupt: InvariantChecker._signal,
    AbandonRun: InvariantChecker._abandon_command,
    ReleaseRun: InvariantChecker._release_command,
    DeliverAnswer: InvariantChecker._deliver_command,
    StartGraceTimer: InvariantChecker._grace_timer_command,
    ArmDeadline: InvariantChecker._deadline_command,
    DisarmDeadline: InvariantChecker._deadline_command,
    StartInterruptGrace: InvariantChecker._interrupt_grace_command,
    StopInterruptGrace: InvariantChecker._interrupt_grace_command,
    ShutdownComplete: InvariantChecker._shutdown_complete_command,
}
"""What the oracle checks of each command a core gives (``InvariantChecker.command``)."""


# --- the synchronous shell -------------------------------------------------------------------------


class CoreShell:
    """Carries out a ``SupervisorCore``'s commands the way the actor shell does, synchronously, and
    checks every batch with an ``InvariantChecker`` (``checker``; violations raise at once).

    Every command is logged in order (``log``; the latest batch is ``last``) and every event kept
    (``events``). Answers are filed by request token in ``answers``. A ``DisposeInstance`` is
    acknowledged with ``DisposeDone`` once the batch that asked for it has been carried out (the
    instance actor answers with a later message), unless ``hold_disposes``: then it waits in
    ``held`` until ``release``. Bodies never move by themselves: ``finish``, ``tool``, ``ask`` and
    ``report`` say what they do; ``expire`` passes shutdown's grace deadline.
    """

    def __init__(
        self,
        *directories: str,
        hold_disposes: bool = False,
        declare: Iterable[str] = (),
        core: SupervisorCore | None = None,
        checker: InvariantChecker | None = None,
    ) -> None:
        self.core = core or SupervisorCore()
        self.checker = checker or InvariantChecker(raise_at_once=True)
        self.log: list[Command] = []
        self.events: list[Event] = []
        self.answers: dict[str, Answer] = {}
        self.asks_raised = 0
        self.last: list[Command] = []
        self.last_token = ""
        self.hold_disposes = hold_disposes
        self.held: list[DisposeInstance] = []
        self.spawned: dict[str, SpawnRun] = {}
        self._tokens = itertools.count(1)
        for directory in declare:
            self.core.declare(directory)
        for directory in directories:
            self.carry_out(self.core.preload(directory))

    # carrying commands out

    def carry_out(self, commands: list[Command]) -> list[Command]:
        """Check and carry out one batch of commands; acknowledge the disposes it asks for."""
        self.checker.commands(commands)
        acks: list[DisposeInstance] = []
        for command in commands:
            self.log.append(command)
            if isinstance(command, Emit):
                self.events.append(command.event)
            elif isinstance(command, Reply):
                self.answers[command.reply_to] = command.answer
            elif isinstance(command, SpawnRun):
                self.spawned[command.run_id] = command
            elif isinstance(command, DisposeInstance) and command.report:
                (self.held if self.hold_disposes else acks).append(command)
        for command in acks:
            self.carry_out(self.core.report(DisposeDone(command.directory, command.generation)))
        return commands

    # driving the core

    def request(self, request: Request) -> Answer | None:
        """Send a request; its answer, or None while it is not answered yet."""
        self.last_token = token = f"t{next(self._tokens)}"
        self.checker.request(token, request)
        self.last = self.carry_out(self.core.request(request, token))
        return self.answers.get(token)

    def report(self, report: Report) -> list[Command]:
        self.checker._timer_passed(report)
        self.last = self.carry_out(self.core.report(report))
        return self.last

    def start(
        self, run: str, session: str | None = None, directory: str = "/w/a", *, parent: str | None = None
    ) -> Answer | None:
        return self.request(
            StartRun(run_id=run, session=session or f"s-{run}", directory=directory, parent_run_id=parent)
        )

    def close(
        self,
        do: CloseAction,
        *directories: str,
        mode: CloseMode = CloseMode.MAINTENANCE,
        origin: str = "config.update",
        tag: str | None = None,
        fingerprint: str | None = None,
        reload_policy: ReloadPolicy | None = None,
    ) -> Any:
        return self.request(
            CloseRequest(
                do=do,
                mode=mode,
                origin=origin,
                directories=directories,
                tag=tag,
                fingerprint=fingerprint,
                reload_policy=reload_policy,
            )
        )

    def cancel(self, run: str, origin: str = "user", tag: str | None = None) -> Any:
        return self.request(CancelRun(run_id=run, origin=origin, tag=tag))

    def shutdown(
        self,
        reason: ShutdownReason = ShutdownReason.SHUTDOWN,
        origin: str = "shutdown",
        grace_ms: int = 1000,
        tag: str | None = None,
    ) -> Any:
        return self.request(Shutdown(reason=reason, origin=origin, grace_ms=grace_ms, tag=tag))

    def reply(self, run: str, *, approve: bool, message: str | None = None, tag: str | None = None) -> Any:
        return self.request(ReplyPermission(run_id=run, approve=approve, message=message, tag=tag))

    def answer_form(self, run: str, answer: str = "yes", tag: str | None = None) -> Any:
        return self.request(AnswerForm(run_id=run, answer=answer, tag=tag))

    def dismiss_form(self, run: str, tag: str | None = None) -> Any:
        return self.request(DismissForm(run_id=run, tag=tag))

    def stall(self, run: str, idle_ms: int = 60_000) -> list[Command]:
        """The shell measured ``idle_ms`` without progress of ``run`` (``NoProgress``)."""
        return self.report(NoProgress(run_id=run, idle_ms=idle_ms))

    def heartbeat(self, run: str) -> list[Command]:
        """The body of ``run`` says it makes progress while flagged (``Heartbeat``)."""
        return self.report(Heartbeat(run_id=run))

    def confirm(self, action_id: str, origin: str | None = None, tag: str | None = None) -> Any:
        """``confirm_close``: turn a pending maintenance close into a confirmed one."""
        return self.request(ConfirmClose(action_id=action_id, origin=origin, tag=tag))

    def finish(self, run: str, error: str | None = None) -> list[Command]:
        """The run's body returns (or raises ``error``)."""
        return self.report(BodyEnded(run_id=run, error=error))

    def tool(self, run: str, tool: str = "bash", upto: PartState = PartState.RUNNING) -> None:
        """The body walks a tool part from ``pending`` up to ``upto``."""
        walk = [PartState.PENDING, PartState.PREPARED, PartState.RUNNING, PartState.COMPLETED]
        for state in walk[: walk.index(upto) + 1]:
            self.report(PartReport(run_id=run, tool=tool, state=state))

    def ask(self, run: str, *, form: bool = False) -> str:
        """The body's running tool raises a permission ask (or a form) and waits; its ask id."""
        self.tool(run, tool="question" if form else "bash")
        self.asks_raised += 1
        ask_id = f"{run}:ask-{self.asks_raised}"
        kind = AskKind.FORM if form else AskKind.PERMISSION
        self.report(AskRaised(run_id=run, ask_id=ask_id, kind=kind, payload=AskPayload()))
        return ask_id

    def release(self, error: str | None = None) -> None:
        """The held dispose hooks return (or raise ``error``), oldest first."""
        held, self.held = self.held, []
        for command in held:
            self.report(DisposeDone(command.directory, command.generation, error=error))

    def release_one(self, index: int = 0, error: str | None = None) -> list[Command]:
        """One held dispose hook returns (or raises ``error``)."""
        command = self.held.pop(index)
        return self.report(DisposeDone(command.directory, command.generation, error=error))

    def expire_grace(self, run: str) -> list[Command]:
        """Pass ``run``'s own grace (its ``StartInterruptGrace``)."""
        return self.report(InterruptGraceExpired(run_id=run))

    def expire(self) -> list[Command]:
        """Shutdown's grace deadline passes."""
        (timer,) = self.commands(StartGraceTimer)
        return self.report(GraceExpired(action_id=timer.action_id))

    # reading what happened

    def of(self, kind: type[E], **fields: Any) -> list[E]:
        return [
            e
            for e in self.events
            if isinstance(e, kind) and all(getattr(e, k) == v for k, v in fields.items())
        ]

    def one(self, kind: type[E], **fields: Any) -> E:
        found = self.of(kind, **fields)
        assert len(found) == 1, f"expected one {kind.__name__} {fields}, got {found}"
        return found[0]

    def seq(self, kind: type[Any], **fields: Any) -> int:
        seq: int = self.one(kind, **fields).seq
        return seq

    def finished(self, run: str) -> RunFinished:
        return self.one(RunFinished, run_id=run)

    def commands(self, kind: type[E], within: list[Command] | None = None) -> list[E]:
        return [c for c in (self.log if within is None else within) if isinstance(c, kind)]

    def events_in(self, commands: list[Command]) -> list[Event]:
        return [c.event for c in commands if isinstance(c, Emit)]

    def position(self, predicate: Callable[[Command], bool]) -> int:
        (index,) = [i for i, c in enumerate(self.log) if predicate(c)]
        return index

    def event_position(self, kind: type[Any], **fields: Any) -> int:
        event = self.one(kind, **fields)
        return self.position(lambda c: isinstance(c, Emit) and c.event is event)

    def reply_position(self, token: str) -> int:
        return self.position(lambda c: isinstance(c, Reply) and c.reply_to == token)

    def assert_every_action_completed_once(self) -> None:
        """One ``lifecycle.completed`` per accepted lifecycle request (a second shutdown included)."""
        requested = Counter(e.action_id for e in self.of(LifecycleRequested))
        completed = Counter(e.action_id for e in self.of(LifecycleCompleted))
        assert completed == requested, f"completed {dict(completed)}, requested {dict(requested)}"
