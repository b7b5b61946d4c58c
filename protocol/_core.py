"""The decision core: plain state in, commands out. No threads, no clocks, no pykka.

``SupervisorCore`` holds everything the supervisor knows (runs, sessions, instances, pending
lifecycle actions) and turns each input -- a host request, a body's report, a finished dispose, an
expired deadline -- into a list of commands for its shell. Moves of runs, parts and instances are
looked up in ``protocol._rules``; this module decides *when* to make them.

Costs: a request touches only the runs and instances of the directories and session it names
(indexes by directory and by instance), so deciding a close does not grow with unrelated runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeVar

import msgspec

from run_supervisor.protocol._asks import AskBook, AsksMixin, part_updated, part_view
from run_supervisor.protocol._commands import (
    AbandonRun,
    Command,
    DisposeInstance,
    Emit,
    LoadInstance,
    ReleaseRun,
    Reply,
    ShutdownComplete,
    SignalInterrupt,
    SpawnRun,
    StartInterruptGrace,
    StopInterruptGrace,
)
from run_supervisor.protocol._deadlines import DeadlinesMixin
from run_supervisor.protocol._enums import (
    CloseMode,
    CloseResult,
    InstanceState,
    InterruptReason,
    LoadCause,
    Outcome,
    PartState,
    QueuePolicy,
    RejectCode,
    ReloadPolicy,
    RequestResult,
    ResumeVerdict,
    RunState,
    SessionStatus,
    WithdrawReason,
)
from run_supervisor.protocol._events import (
    Event,
    InstanceReady,
    InstanceStarted,
    RunFinished,
    RunQueued,
    RunRecovered,
    RunStarted,
    StepFinished,
    StepStarted,
)
from run_supervisor.protocol._lifecycle import ActionSnapshot, LifecycleMixin, _Action
from run_supervisor.protocol._parts import RUN_ENDED_ORIGIN, RUN_FAILED_ORIGIN, PartSnapshot
from run_supervisor.protocol._records import (
    Ask,
    Journal,
    _Directory,
    _Instance,
    _Interrupt,
    _Part,
    _Run,
    _RunEnding,
    _Session,
)
from run_supervisor.protocol._requests import (
    AnswerForm,
    AskRaised,
    BodyEnded,
    CancelRun,
    CancelSession,
    CloseOutcome,
    CloseRequest,
    ConfirmClose,
    DeadlineExpired,
    DeleteSession,
    DismissForm,
    DisposeDone,
    GraceExpired,
    Heartbeat,
    InterruptGraceExpired,
    LoadDone,
    NoProgress,
    PartReport,
    RecoveredRun,
    ReplyPermission,
    Request,
    RequestOutcome,
    RetryBudget,
    RetryReport,
    RunSnapshot,
    SessionSnapshot,
    SetQueuePolicy,
    Shutdown,
    StartRun,
    StepReport,
    WithdrawAsk,
)
from run_supervisor.protocol._rules import (
    BODY_RULES,
    CANCEL_REASONS,
    FINISHED_RUN_STATES,
    GRACE_EXPIRY,
    INTERRUPT_GRACE,
    PART_PHASE,
    PART_TRANSITIONS,
    QUEUE_RULES,
    RUN_OUTCOMES,
    UNFINISHED_PART_STATES,
    BodyState,
    BodyTrigger,
    GraceClock,
    InstanceTrigger,
    QueuedFate,
    RunTrigger,
    SessionTrigger,
    WhenBusy,
    next_body_state,
    next_instance_state,
    next_run_state,
)
from run_supervisor.protocol._stalls import StallsMixin

__all__ = ["ActionSnapshot", "CoreStatistics", "Report", "ReportEcho", "SupervisorCore", "resume_verdict"]

Report = (
    StepReport
    | PartReport
    | AskRaised
    | WithdrawAsk
    | BodyEnded
    | DisposeDone
    | LoadDone
    | GraceExpired
    | DeadlineExpired
    | InterruptGraceExpired
    | RetryReport
    | Heartbeat
    | NoProgress
)
"""Inputs that come from inside the supervisor (bodies, instances, timers), not from hosts."""


class ReportEcho(msgspec.Struct, frozen=True, kw_only=True):
    """What a run's body may learn of its reports, read behind them (``SupervisorCore.report_echo``):
    a body that reads this after each report knows whether the core applied it."""

    state: RunState
    refused: int
    """How many of its body's reports the core did not apply, ever: one more than last read means
    the reports since did nothing (a late report, a part move its state does not allow...)."""
    part: PartSnapshot | None = None
    """The card of the part asked about (None: not asked, or the run has no such part)."""


class CoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of the decision core (``Supervisor.statistics()``): runs, closes, asks and instances
    by state, and the policies in force."""

    runs_active: int
    runs_queued: int
    runs_finished: int
    sessions_busy: int
    instances_open: int
    actions_pending: int
    events_emitted: int
    reports_ignored: int
    """Body reports that arrived after their run was decided (late, or out of order): dropped."""
    shutting_down: bool
    closed: bool
    runs_known: int = 0
    """Runs the core remembers: unfinished ones, and up to ``retain_finished`` finished ones."""
    sessions_known: int = 0
    """Sessions it remembers: busy ones, and up to ``retain_finished`` idle ones."""
    directories_known: int = 0
    """Directories it remembers: open or declared ones, and up to ``retain_finished`` closed ones."""
    loads_deferred: int = 0
    """Directories whose next generation a lazy reload deferred: it loads when a run needs it or the
    old generation has closed (``ReloadPolicy.LAZY``). Not counted in ``instances_open``."""
    reload_policy: ReloadPolicy = ReloadPolicy.EAGER
    """The reload policy in force: what a reload that names none does (``SupervisorCore``'s
    ``reload_policy``; ``SupervisorConfig.reload_policy`` for a supervisor, lazy by default)."""
    queue_policy: QueuePolicy = QueuePolicy.QUEUE
    """Every session's default queue policy until it is given its own (``SupervisorConfig.queue_policy``)."""
    runs_abandoned: int = 0
    """Runs finished without their body, ever: past their own grace (``INTERRUPT_GRACE``) or the
    shutdown's. Each body may still be running (a thread or a task the host cannot kill); its later
    reports are refused."""
    interrupt_grace_ms: int | None = None
    """The grace an interrupted body gets before its run is abandoned, when neither the request nor
    the run names one (None: it is waited for)."""


class SupervisorCore(LifecycleMixin, AsksMixin, DeadlinesMixin, StallsMixin):
    """Decides everything; does nothing. Feed it with ``request`` and ``report``; carry out what
    they return, in order.

    ``dispose_budget_ms`` bounds each dispose hook (the shell enforces it); ``retain_finished`` is
    how many finished runs stay queryable (and guarded against id reuse) before the oldest is
    forgotten -- and how many idle sessions and closed directories are remembered (a forgotten
    directory is new again: its next instance is generation 1, and a close naming it is rejected as
    an unknown directory until it is loaded or declared again).

    Every input applies fully or not at all: if deciding it raises (a bug), the core is left exactly
    as before the call (an undo journal, ``protocol._records.Journal``) and the exception propagates
    to the caller, which may go on feeding the core -- and shut it down.

    The close logic (``_close``, ``_shutdown_request``, ``_cover``, ``_answer``, ``_complete``,
    ``_closed_instance``) lives in ``protocol._lifecycle``; the asks (``_ask_raised``, the replies,
    withdrawal, ``run.part.updated``) in ``protocol._asks``.
    """

    def __init__(
        self,
        *,
        dispose_budget_ms: int = 1000,
        retain_finished: int = 10_000,
        reload_policy: ReloadPolicy = ReloadPolicy.EAGER,
        queue_policy: QueuePolicy = QueuePolicy.QUEUE,
        interrupt_grace_ms: int | None = None,
        retry_budget: RetryBudget | None = None,
        epoch: int | None = None,
    ) -> None:
        self.dispose_budget_ms = dispose_budget_ms
        self.epoch = epoch
        """Which life of its journal this core is (the journal's boot, or its PostgreSQL lease
        epoch; None without one): every generation it loads, and every run it starts, carries it
        (``instance.*``, ``run.started``, ``run.finished``, ``RunSnapshot``), so generation 1 of one
        life and generation 1 of the next are told apart."""
        problem = _budget_problem(retry_budget)
        if problem is not None:
            raise ValueError(problem)
        self.retry_budget = None if retry_budget is None else (retry_budget.attempts, retry_budget.backoff_ms)
        """Every run's retry budget (attempts, backoff ms) unless it names its own
        (``StartRun.retry_budget``); None: unbounded."""
        if interrupt_grace_ms is not None and interrupt_grace_ms < 0:
            raise ValueError(f"interrupt_grace_ms must be >= 0 or None, got {interrupt_grace_ms}")
        self.interrupt_grace_ms = interrupt_grace_ms
        """The grace an interrupted body gets before its run is abandoned (``INTERRUPT_GRACE``), when
        neither the interrupt's request nor the run (``StartRun.interrupt_grace_ms``) names one; None:
        bodies are waited for (only the shutdown's grace abandons)."""
        self._abandoned = 0
        self._session_actions = 0
        self.queue_policy = QueuePolicy(queue_policy)
        """Every session's default queue policy until ``SetQueuePolicy`` gives it one of its own."""
        self.retain_finished = retain_finished
        self.reload_policy = ReloadPolicy(reload_policy)
        """When a reload that names no policy loads the next generation (``protocol.RELOAD_RULES``).
        The bare core's default is ``eager``, the public scenario contract's reading;
        ``SupervisorConfig`` (the host-facing default) says ``lazy``."""
        self._out: list[Command] = []
        self._seq = 0
        self._action_count = 0
        self._runs: dict[str, _Run] = {}
        self._finished: deque[str] = deque()
        self._sessions: dict[str, _Session] = {}
        self._dirs: dict[str, _Directory] = {}
        self._actions: dict[str, _Action] = {}  # pending (not completed) lifecycle actions
        self._shutdown: _Action | None = None
        self._deadline_passed = False
        self._closed = False
        self._shutdown_announced = False
        # Counted where states move (``_move_run``, ``_move_instance``), nowhere else: a finished
        # run stays counted after it is forgotten.
        self._runs_in: dict[RunState, int] = dict.fromkeys(RunState, 0)
        self._instances_in: dict[InstanceState, int] = dict.fromkeys(InstanceState, 0)
        self._reports_ignored = 0
        # Remembered for retain_finished entries each, oldest (first inserted) forgotten first.
        self._idle_sessions: dict[str, None] = {}
        self._closed_dirs: dict[str, None] = {}
        self._journal = Journal()
        self._touch = self._journal.touch
        self._asks = AskBook(self._journal)
        # The last invalidate_config's fingerprint: directories met later load with it (a table,
        # so the undo journal covers it).
        self._config: dict[str, str] = {}
        # Sessions' own default queue policies (``SetQueuePolicy``), where they differ from the
        # core's ``queue_policy``: kept apart from the session records so that forgetting an idle
        # session never forgets its policy.
        self._policies: dict[str, QueuePolicy] = {}
        # "Always" grants (``ReplyPermission(always=True)``): (session, ask key) -> None, kept until
        # the session is deleted (a table, so the undo journal covers it).
        self._grants: dict[tuple[str, str], None] = {}
        # Directory -> the lazy reload (action id) whose next generation waits for a run or for
        # the old generation's close (a table, so the undo journal covers it).
        self._deferred_loads: dict[str, tuple[str, ReloadPolicy, CloseMode]] = {}

    # --- entry points ------------------------------------------------------------------------

    def declare(self, directory: str) -> None:
        """Make a directory known without loading it (closes may then name it)."""
        self._atomically(self._directory, directory)

    def preload(self, directory: str, fingerprint: str | None = None) -> list[Command]:
        """Load the directory's instance now if it has no current generation. A ``fingerprint``
        (what the host loads it with) is recorded for this and later loads of the directory: a close
        carrying the same one is a no-op."""
        return self._atomically(self._preload, directory, fingerprint)

    def _preload(self, directory: str, fingerprint: str | None = None) -> None:
        known = self._directory(directory)
        if fingerprint is not None:
            self._touch(known)
            known.fingerprint = fingerprint
        if self._shutdown is None and known.current is None:
            self._load(directory, LoadCause.LOAD)

    def recover(self, runs: Iterable[RecoveredRun], *, resume_budget: int | None = None) -> list[Command]:
        """Take on the runs a dead process left unfinished (read from its journal); call it before
        any request. Each is known from now on as finished, ``interrupted`` with reason ``crash``
        (so ``resume_of`` may name it and its id is not reused while it is remembered), and is
        announced by a ``run.recovered`` event.

        ``resume_budget`` (None: no resume policy) decides, for each top-level run, whether the
        host's resume callback is offered it (``resume_verdict``): its ``run.recovered`` says
        ``offered`` or ``exhausted``."""
        if resume_budget is not None and resume_budget < 0:
            raise ValueError(f"resume_budget must be >= 0 or None, got {resume_budget}")
        return self._atomically(self._recover, tuple(runs), resume_budget)

    def _recover(self, runs: tuple[RecoveredRun, ...], resume_budget: int | None = None) -> None:
        for recovered in runs:
            if recovered.run_id in self._runs:
                continue
            interrupt = _Interrupt(
                reason=InterruptReason.CRASH, origin="crash", action=None, phase=recovered.phase
            )
            run = _Run(
                id=recovered.run_id,
                session=recovered.session,
                directory=recovered.directory or "",
                parent=recovered.parent_run_id,
                state=RunState.INTERRUPTED,
                generation=recovered.generation,
                epoch=recovered.epoch if recovered.generation is not None else None,
                resume_count=recovered.resume_count,
                interrupt=interrupt,
                parts=[
                    _Part(
                        tool=p.tool,
                        state=p.state,
                        call_id=p.call_id or f"call-{n}",
                        ran=p.tool_started,
                        message=p.message,
                        reason=p.reason,
                        origin=p.origin,
                        phase=p.phase,
                        declined=p.declined,
                    )
                    for n, p in enumerate(recovered.parts, 1)
                ],
            )
            run.calls = {part.call_id: part for part in run.parts}
            self._journal.put(self._runs, run.id, run)
            for ask in recovered.asks:  # a late reply is told what became of it, as before the crash
                self._asks.restore(
                    Ask(
                        ask_id=ask.ask_id,
                        run_id=run.id,
                        session=run.session,
                        kind=ask.kind,
                        tool=ask.tool,
                        call_id=ask.call_id,
                        payload=ask.payload,
                        state=ask.state,
                        withdraw_reason=ask.withdraw_reason,
                        interrupt_reason=(
                            InterruptReason.CRASH if ask.ask_id in recovered.withdrawn_asks else None
                        ),
                    )
                )
            self._runs_in[run.state] += 1  # it enters the core already finished: no move to make
            self._remember_finished(run.id)
            if run.session not in self._sessions:  # its session is known, and idle: nothing runs there
                session = _Session(run.session)
                self._journal.fresh(session)
                self._journal.put(self._sessions, session.id, session)
                self._remember(self._idle_sessions, session.id, self._sessions)
            for part in recovered.parts:  # a card the crash settled: the UI redraws it, as for any change
                if part.reason is InterruptReason.CRASH:  # drawn waiting for nobody: the crash ended its asks
                    shown = msgspec.structs.replace(part, ask_id=None, waiting_for=None)
                    self._emit(part_updated(self._next_seq(), run, part.call_id or "", shown))
            self._emit(
                RunRecovered(
                    **self._stamp(run),
                    directory=recovered.directory,
                    generation=recovered.generation,
                    outcome=Outcome.INTERRUPTED,
                    reason=InterruptReason.CRASH,
                    origin=interrupt.origin,
                    phase=recovered.phase,
                    parent_run_id=recovered.parent_run_id,
                    parts=recovered.parts,
                    withdrawn_asks=recovered.withdrawn_asks,
                    epoch=run.epoch,
                    resume_count=run.resume_count,
                    resume=resume_verdict(recovered, resume_budget),
                )
            )

    def request(self, request: Request, reply_to: Any) -> list[Command]:
        """Handle a host request. Its answer is a ``Reply(reply_to, ...)`` among the commands --
        right away, or for a close with instances disposing at once, when they have closed."""
        return self._atomically(self._request, request, reply_to)

    def _request(self, request: Request, reply_to: Any) -> None:
        if self._shutdown is not None and not isinstance(request, Shutdown):
            self._reject(
                reply_to,
                RejectCode.SUPERVISOR_CLOSED,
                f"the supervisor has shut down ({self._shutdown.id}); no request is accepted any more",
                close=isinstance(request, CloseRequest | ConfirmClose),
            )
            return
        _routed(_REQUEST_HANDLERS, request)(self, request, reply_to)

    def report(self, report: Report) -> list[Command]:
        """Handle what a body, an instance or a timer reports."""
        return self._atomically(self._report, report)

    def _report(self, report: Report) -> None:
        route = _routed(_REPORT_ROUTES, report)
        ignored = self._reports_ignored
        if route.progress:
            self._stall_progress(report.run_id)  # type: ignore[union-attr]  # a body's report
        route.handle(self, report)
        if route.body and self._reports_ignored != ignored:
            run = self._runs.get(report.run_id)  # type: ignore[union-attr]  # a body's report
            if run is not None:  # its body learns it (``report_echo``)
                self._touch(run)
                run.refused += 1

    def _atomically(self, decide: Callable[..., object], *args: Any) -> list[Command]:
        """Decide one input; on any exception, undo all of it (records, tables, counters, the
        commands decided so far) and let the exception go on."""
        saved = _undone_values(self)
        counts = self._runs_in.copy(), self._instances_in.copy()
        try:
            decide(*args)
        except BaseException:
            self._journal.rollback()
            for name, value in zip(_UNDONE_ATTRIBUTES, saved, strict=True):
                setattr(self, name, value)
            self._runs_in, self._instances_in = counts
            self._out.clear()
            raise
        self._journal.clear()
        return self._flush()

    # --- queries -----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Shutdown has completed."""
        return self._closed

    @property
    def shutting_down(self) -> bool:
        return self._shutdown is not None

    def run_snapshot(self, run_id: str) -> RunSnapshot | None:
        run = self._runs.get(run_id)
        if run is None:
            return None
        outcome = RUN_OUTCOMES.get(run.state)
        # An interrupt is fixed when decided: an interrupting run already shows its reason and origin.
        interrupt = run.interrupt if run.state in (RunState.INTERRUPTED, RunState.INTERRUPTING) else None
        return RunSnapshot(
            run_id=run.id,
            session=run.session,
            directory=run.directory,
            state=run.state,
            outcome=outcome,
            **self._ending(run, interrupt),
            parent_run_id=run.parent,
            children=tuple(run.children),
            deadline_ms=run.deadline_ms,
            stalled=run.stalled,
            resume_count=run.resume_count,
        )

    def _ending(self, run: _Run, interrupt: _Interrupt | None) -> _RunEnding:
        """How ``run`` ended, or is ending -- what its snapshot and its ``run.finished`` both tell:
        ``interrupt`` (None: not interrupted), its error, generation, cards and last retry."""
        retry = run.last_retry
        return {
            "reason": interrupt.reason if interrupt else None,
            "origin": interrupt.origin if interrupt else None,
            "action_id": interrupt.action if interrupt else None,
            "phase": interrupt.phase if interrupt else None,
            "error": run.error,
            "abandoned": run.abandoned,
            "generation": run.generation,
            "parts": self._part_snapshots(run),
            "retry_attempt": retry[0] if retry is not None else None,
            "retry_message": retry[1] if retry is not None else None,
            "epoch": run.epoch if run.generation is not None else None,
        }

    def report_echo(self, run_id: str, call_id: str | None = None) -> ReportEcho | None:
        """What the body of ``run_id`` may learn of its reports so far: the run's state, how many
        of them the core refused, and the card of its part ``call_id`` (None: no such run)."""
        run = self._runs.get(run_id)
        if run is None:
            return None
        part = run.calls.get(call_id) if call_id is not None else None
        return ReportEcho(state=run.state, refused=run.refused, part=part_view(part) if part else None)

    @staticmethod
    def _part_snapshots(run: _Run) -> tuple[PartSnapshot, ...]:
        return tuple(part_view(p) for p in run.parts)

    def session_snapshot(self, session_id: str) -> SessionSnapshot | None:
        """None for a session no run named (or forgotten while idle) that has no policy set."""
        session = self._sessions.get(session_id)
        policy = self._policies.get(session_id, self.queue_policy)
        if session is None:
            if session_id not in self._policies:
                return None
            return SessionSnapshot(
                session=session_id, status=SessionStatus.IDLE, active=None, queued=(), queue_policy=policy
            )
        attempt, message, next_at = session.retry if session.retry is not None else (None, None, None)
        return SessionSnapshot(
            session=session.id,
            status=self._status_of(session),
            active=session.active,
            queued=tuple(session.queue),
            attempt=attempt,
            message=message,
            next_at_ms=next_at,
            queue_policy=policy,
        )

    def pending_actions(self) -> tuple[ActionSnapshot, ...]:
        return tuple(self._action_snapshot(a) for a in self._actions.values())

    def action_snapshot(self, action_id: str) -> ActionSnapshot | None:
        action = self._actions.get(action_id)
        return None if action is None else self._action_snapshot(action)

    def statistics(self) -> CoreStatistics:
        runs_active = self._runs_in[RunState.ACTIVE] + self._runs_in[RunState.INTERRUPTING]
        return CoreStatistics(
            runs_active=runs_active,
            runs_queued=self._runs_in[RunState.QUEUED],
            runs_finished=sum(self._runs_in[state] for state in FINISHED_RUN_STATES),
            sessions_busy=runs_active,  # a session is busy exactly while it has an active run
            instances_open=self._instances_in[InstanceState.LIVE]
            + self._instances_in[InstanceState.RETIRING]
            + self._instances_in[InstanceState.DISPOSING],
            actions_pending=len(self._actions),
            events_emitted=self._seq,
            reports_ignored=self._reports_ignored,
            shutting_down=self._shutdown is not None,
            closed=self._closed,
            runs_known=len(self._runs),
            sessions_known=len(self._sessions),
            directories_known=len(self._dirs),
            loads_deferred=len(self._deferred_loads),
            reload_policy=self.reload_policy,
            queue_policy=self.queue_policy,
            runs_abandoned=self._abandoned,
            interrupt_grace_ms=self.interrupt_grace_ms,
        )

    def live_instances(self) -> tuple[tuple[str, int], ...]:
        return tuple(key for d in self._dirs.values() for key in ((d.name, g) for g in d.open))

    # --- runs --------------------------------------------------------------------------------

    def _start_run(self, req: StartRun, reply_to: Any) -> None:
        for key, value in (("run", req.run_id), ("session", req.session), ("directory", req.directory)):
            if not value:
                self._reject(reply_to, RejectCode.INVALID_REQUEST, f"start_run needs a non-empty {key}")
                return
        if req.run_id in self._runs:
            self._reject(
                reply_to,
                RejectCode.RUN_ALREADY_EXISTS,
                f"run {req.run_id!r} already exists; run ids are unique",
            )
            return
        if req.resume_of is not None:
            resumed = self._runs.get(req.resume_of)
            if resumed is None or resumed.state not in RUN_OUTCOMES:
                self._reject(
                    reply_to,
                    RejectCode.UNKNOWN_RUN if resumed is None else RejectCode.INVALID_REQUEST,
                    f"run {req.resume_of!r} to resume "
                    + ("is not known (or was forgotten)" if resumed is None else "has not finished"),
                )
                return
        if req.deadline_ms is not None and req.deadline_ms <= 0:
            self._reject(
                reply_to, RejectCode.INVALID_REQUEST, f"deadline_ms must be positive, got {req.deadline_ms}"
            )
            return
        problem = _budget_problem(req.retry_budget)
        if problem is not None:
            self._reject(reply_to, RejectCode.INVALID_REQUEST, problem)
            return
        if req.interrupt_grace_ms is not None and req.interrupt_grace_ms < 0:
            self._reject(
                reply_to,
                RejectCode.INVALID_REQUEST,
                f"interrupt_grace_ms must be >= 0, got {req.interrupt_grace_ms}",
            )
            return
        parent = None
        if req.parent_run_id is not None:
            parent = self._parent_for(req, reply_to)
            if parent is None:
                return
        policy = req.queue_policy or self._policies.get(req.session, self.queue_policy)
        rule = QUEUE_RULES[policy]
        busy = self._sessions.get(req.session)
        if busy is not None and busy.active is not None and rule.when_busy is WhenBusy.REJECT:
            queued = f" and {len(busy.queue)} queued" if busy.queue else ""
            self._reject(
                reply_to,
                RejectCode.SESSION_BUSY,
                f"session {req.session!r} is busy (run {busy.active!r} active{queued}); queue policy "
                f"{policy.value} starts a run only in an idle session",
            )
            return
        resumed = self._runs.get(req.resume_of) if req.resume_of is not None else None
        run = _Run(
            id=req.run_id,
            session=req.session,
            directory=req.directory,
            resume_of=req.resume_of,
            resume_count=_resume_count(resumed),
            parent=req.parent_run_id,
            deadline_ms=req.deadline_ms,
            interrupt_grace_ms=req.interrupt_grace_ms,
            retry_budget=(
                None if req.retry_budget is None else (req.retry_budget.attempts, req.retry_budget.backoff_ms)
            ),
            queue_policy=policy,
        )
        self._journal.fresh(run)
        self._journal.put(self._runs, run.id, run)
        if parent is not None:
            self._touch(parent)
            parent.children.append(run.id)
        self._runs_in[run.state] += 1
        self._directory(run.directory)
        session = self._sessions.get(run.session)
        if session is None:
            session = _Session(run.session)
            self._journal.fresh(session)
            self._journal.put(self._sessions, session.id, session)
        if session.deleted:  # deleted while its last run stops: a new run makes it known again
            self._touch(session)
            session.deleted = False
        if session.active is None:
            self._activate(run, session)
        else:
            if rule.when_busy is WhenBusy.REPLACE:
                self._coalesce(session, run, req.tag)
            self._journal.append(session.queue, run.id)
            self._emit(
                RunQueued(
                    **self._stamp(run),
                    parent_run_id=run.parent,
                    queue_policy=policy,
                    resume_of=run.resume_of,
                    resume_count=run.resume_count,
                )
            )
        self._reply(reply_to, _OK)

    def _coalesce(self, session: _Session, run: _Run, tag: str | None) -> None:
        """``run`` replaces the runs of its session still queued under its own policy: each ends
        unstarted, ``coalesced``, its origin naming ``run`` (announced right after)."""
        for queued_id in [q for q in session.queue if self._runs[q].queue_policy is run.queue_policy]:
            self._end_queued(self._runs[queued_id], InterruptReason.COALESCED, run.id, tag)

    def _drop_follow_ups(self, run: _Run, action: str | None) -> None:
        """``run``, its session's active run, is being interrupted: a queued run whose policy drops
        it then (``QUEUE_RULES``) ends unstarted, ``dropped``, its origin naming ``run``."""
        session = self._sessions.get(run.session)
        if session is None or session.active != run.id:
            return
        for queued_id in list(session.queue):
            queued = self._runs[queued_id]
            if QUEUE_RULES[queued.queue_policy].on_interrupt is QueuedFate.DROP:
                self._end_queued(queued, InterruptReason.DROPPED, run.id, action)

    def _end_queued(self, run: _Run, reason: InterruptReason, origin: str, action: str | None) -> None:
        self._unqueue(run)
        self._end_unstarted(run, reason, origin, action)

    def _end_unstarted(self, run: _Run, reason: InterruptReason, origin: str, action: str | None) -> None:
        """A run already out of its session's queue ends without having started."""
        self._decide_interrupt(run, reason, origin, action)
        self._move_run(run, RunTrigger.CANCEL_QUEUED)
        self._finish(run)

    def _set_queue_policy(self, req: SetQueuePolicy, reply_to: Any) -> None:
        if not req.session:
            self._reject(reply_to, RejectCode.INVALID_REQUEST, "set_queue_policy needs a non-empty session")
            return
        if req.queue_policy is self.queue_policy:
            self._journal.drop(self._policies, req.session)
        else:
            self._journal.put(self._policies, req.session, req.queue_policy)
        self._reply(reply_to, _OK)

    def _parent_for(self, req: StartRun, reply_to: Any) -> _Run | None:
        """The active run ``req`` names as its parent, or None (rejected: the reason is answered)."""
        assert req.parent_run_id is not None
        parent = self._known_unfinished(req.parent_run_id, reply_to, "start a child of")
        if parent is None:
            return None
        problem = None
        if parent.state is not RunState.ACTIVE or not BODY_RULES[parent.body].starts_children:
            state = f"is {parent.state.value}" if parent.ended is None else "has ended (waits for children)"
            problem = f"parent run {parent.id!r} {state}: only an active run starts children"
        elif req.session == parent.session:
            problem = (
                f"a child runs in a session of its own: in its parent's ({parent.session!r}) it would "
                "wait behind its parent, which waits for it"
            )
        elif req.directory != parent.directory:
            problem = (
                f"a child runs in its parent's directory ({parent.directory!r}), on its generation; "
                f"got {req.directory!r}"
            )
        if problem is not None:
            self._reject(reply_to, RejectCode.INVALID_REQUEST, problem)
            return None
        return parent

    def _activate(self, run: _Run, session: _Session) -> None:
        """Start ``run`` as its session's active run. A session that just finished its active run
        stays busy through the hand-over to the next one (no status change)."""
        self._move_run(run, RunTrigger.START)
        directory = self._directory(run.directory)  # (re)made if it was forgotten while the run queued
        parent = self._runs.get(run.parent) if run.parent is not None else None
        if parent is not None and parent.generation is not None:
            instance = directory.open[parent.generation]  # pinned to its parent's generation
        else:
            instance = directory.current or self._load(run.directory, LoadCause.RUN)
        self._touch(instance)
        self._touch(session)
        run.generation = instance.generation
        run.epoch = instance.epoch
        self._journal.add(instance.runs, run.id)
        if session.active is None:
            self._move_session(session, SessionTrigger.START, None)  # announced busy
            self._journal.drop(self._idle_sessions, session.id)
        session.active = run.id
        if parent is not None:
            self._stall_progress(parent.id)  # a child starting is its parents' progress
        self._emit(
            RunStarted(
                **self._stamp(run),
                directory=run.directory,
                generation=instance.generation,
                resume_of=run.resume_of,
                parent_run_id=run.parent,
                deadline_ms=run.deadline_ms,
                epoch=run.epoch,
                resume_count=run.resume_count,
            )
        )
        self._out.append(
            SpawnRun(
                run_id=run.id, session=run.session, directory=run.directory, generation=instance.generation
            )
        )
        self._arm_deadline(run)

    def _cancel(self, req: CancelRun, reply_to: Any) -> None:
        if req.reason not in CANCEL_REASONS:
            self._reject(
                reply_to,
                RejectCode.INVALID_REQUEST,
                f"a cancel's reason is {' or '.join(r for r in InterruptReason if r in CANCEL_REASONS)}, "
                f"not {req.reason.value}",
            )
            return
        if req.grace_ms is not None and req.grace_ms < 0:
            self._reject(reply_to, RejectCode.INVALID_REQUEST, f"grace_ms must be >= 0, got {req.grace_ms}")
            return
        run = self._known_unfinished(req.run_id, reply_to, "cancel")
        if run is None:
            return
        if run.state is RunState.QUEUED:
            self._end_queued(run, req.reason, req.origin, req.tag)
        elif run.state is RunState.INTERRUPTING:
            assert run.interrupt is not None
            self._reject(
                reply_to,
                RejectCode.ALREADY_INTERRUPTING,
                f"run {run.id!r} is already being interrupted ({run.interrupt.reason.value}); "
                "the first reason stands",
            )
            return
        else:
            self._interrupt(run, req.reason, req.origin, req.tag, req.grace_ms)
        self._reply(reply_to, _OK)

    def _cancel_session(self, req: CancelSession, reply_to: Any) -> None:
        problem = self._session_request_problem(req.session, req.grace_ms)
        if problem is None and req.reason not in CANCEL_REASONS:
            problem = (
                f"a session cancel's reason is {' or '.join(sorted(CANCEL_REASONS))}, not {req.reason.value}"
            )
        if problem is not None:
            self._reject(reply_to, RejectCode.INVALID_REQUEST, problem)
            return
        action, stopped = self._stop_session(req.session, req.reason, req.origin, req.grace_ms)
        self._reply(
            reply_to, RequestOutcome(result=RequestResult.OK, action_id=action, interrupted_runs=stopped)
        )

    def _delete_session(self, req: DeleteSession, reply_to: Any) -> None:
        problem = self._session_request_problem(req.session, req.grace_ms)
        if problem is not None:
            self._reject(reply_to, RejectCode.INVALID_REQUEST, problem)
            return
        session = self._sessions.get(req.session)
        if session is not None and (session.active is not None or session.queue) and not req.confirm:
            queued = f" and {len(session.queue)} queued" if session.queue else ""
            self._reject(
                reply_to,
                RejectCode.SESSION_BUSY,
                f"session {req.session!r} has run {session.active!r} active{queued}; delete it with "
                "confirm to stop them first",
            )
            return
        action, stopped = self._stop_session(
            req.session, InterruptReason.USER_CANCEL, req.origin, req.grace_ms
        )
        session = self._sessions.get(req.session)
        self._journal.drop(self._policies, req.session)
        self._forget_grants(req.session)
        if session is not None and session.active is not None:
            self._touch(session)
            session.deleted = True  # forgotten at its active run's end
        elif session is not None:
            self._journal.drop(self._idle_sessions, session.id)
            self._journal.drop(self._sessions, session.id)
        self._reply(
            reply_to, RequestOutcome(result=RequestResult.OK, action_id=action, interrupted_runs=stopped)
        )

    def _session_request_problem(self, session: str, grace_ms: int | None) -> str | None:
        if not session:
            return "a session request needs a non-empty session"
        if grace_ms is not None and grace_ms < 0:
            return f"grace_ms must be >= 0, got {grace_ms}"
        return None

    def _stop_session(
        self, name: str, reason: InterruptReason, origin: str, grace_ms: int | None
    ) -> tuple[str | None, tuple[str, ...]]:
        """End the session's queued runs unstarted, then interrupt its active run: one reason, one
        origin, one action id (None: nothing to stop)."""
        session = self._sessions.get(name)
        active = self._runs.get(session.active) if session is not None and session.active else None
        if session is None or (not session.queue and (active is None or active.state is not RunState.ACTIVE)):
            return None, ()
        self._session_actions += 1
        action = f"cs-{self._session_actions}"
        stopped: list[str] = []
        for queued_id in list(session.queue):
            self._end_queued(self._runs[queued_id], reason, origin, action)
            stopped.append(queued_id)
        if active is not None and active.state is RunState.ACTIVE:
            self._interrupt(active, reason, origin, action, grace_ms)
            stopped.append(active.id)
        return action, tuple(stopped)

    def _forget_grants(self, session: str) -> None:
        """The session's "always" grants go with it."""
        for key in [k for k in self._grants if k[0] == session]:
            self._journal.drop(self._grants, key)

    def _known_unfinished(self, run_id: str, reply_to: Any, verb: str) -> _Run | None:
        run = self._runs.get(run_id)
        if run is None:
            self._reject(
                reply_to,
                RejectCode.UNKNOWN_RUN,
                f"no run {run_id!r} has started (or it finished long ago and was forgotten); "
                f"nothing to {verb}",
            )
            return None
        if run.state in FINISHED_RUN_STATES:
            self._reject(
                reply_to,
                RejectCode.RUN_FINISHED,
                f"run {run_id!r} has already finished ({run.state.value}); the {verb} does nothing",
            )
            return None
        return run

    def _interrupt(
        self, run: _Run, reason: InterruptReason, origin: str, action: str | None, grace_ms: int | None = None
    ) -> None:
        """Decide an interrupt of an active run now; it takes effect when its body stops, or when
        its grace (``grace_ms``, else the run's, else the core's) has passed without it."""
        self._decide_interrupt(run, reason, origin, action)
        self._move_run(run, RunTrigger.INTERRUPT)
        self._progressed(run)  # no attempt will come: silently (``STOP``), until the run's end
        self._withdraw_open_asks(run, WithdrawReason.INTERRUPTED, reason)
        self._out.append(SignalInterrupt(run_id=run.id, reason=reason))
        self._arm_grace(run, reason, grace_ms)
        self._drop_follow_ups(run, action)
        self._interrupt_children(run, reason, origin, action, grace_ms)

    def _arm_grace(self, run: _Run, reason: InterruptReason, grace_ms: int | None) -> None:
        """The body of ``run``, just interrupted, gets its own grace when ``INTERRUPT_GRACE`` says so
        and one is set (a shutdown's interrupts share the shutdown's grace)."""
        if INTERRUPT_GRACE[reason] is not GraceClock.RUN or self._shutdown is not None:
            return
        for grace in (grace_ms, run.interrupt_grace_ms, self.interrupt_grace_ms):
            if grace is not None:
                self._touch(run)
                run.grace_armed = True
                self._out.append(StartInterruptGrace(run_id=run.id, grace_ms=grace))
                return

    def _interrupt_grace_expired(self, report: InterruptGraceExpired) -> None:
        run = self._runs.get(report.run_id)
        trigger = GRACE_EXPIRY[run.state] if run is not None and run.grace_armed else None
        if run is None or trigger is None or not BODY_RULES[run.body].abandoned_at_grace:
            self._ignore()  # its body stopped in time (or it waits for its children): nothing to abandon
            return
        assert trigger is RunTrigger.ABANDON
        for stuck in self._stuck_descendants(run):  # deepest first: a parent finishes after them
            if stuck.state is RunState.INTERRUPTING:
                self._abandon(stuck)
        if run.state is RunState.INTERRUPTING:
            self._abandon(run)

    def _stuck_descendants(self, run: _Run) -> list[_Run]:
        """``run``'s descendants still being interrupted whose body has not ended, deepest first."""
        found: list[tuple[int, str, _Run]] = []
        level = [(1, c) for c in run.children]
        while level:
            depth, child_id = level.pop()
            child = self._runs.get(child_id)
            if child is None:
                continue
            if child.state is RunState.INTERRUPTING and BODY_RULES[child.body].abandoned_at_grace:
                found.append((depth, child.id, child))
            level.extend((depth + 1, c) for c in child.children)
        return [r for _, _, r in sorted(found, key=lambda item: (-item[0], item[1]))]

    def _abandon(self, run: _Run) -> None:
        """Finish ``run`` without its body (its grace passed): ``interrupted`` with its decided reason,
        ``abandoned``; its session moves on, and whatever its body reports later is refused."""
        self._move_run(run, RunTrigger.ABANDON)
        run.abandoned = True
        self._abandoned += 1
        self._out.append(AbandonRun(run_id=run.id))
        interrupt = run.interrupt
        closing = interrupt is not None and interrupt.reason is InterruptReason.LIFECYCLE_INTERRUPT
        action = self._actions.get(interrupt.action or "") if interrupt is not None and closing else None
        if action is not None and run.id not in action.abandoned_runs:  # a confirmed close's run
            self._touch(action)
            action.abandoned_runs.append(run.id)
        self._finish(run)

    def _interrupt_children(
        self, run: _Run, reason: InterruptReason, origin: str, action: str | None, grace_ms: int | None = None
    ) -> None:
        """An interrupt of a parent, whatever its reason, is its children's too (same reason,
        origin and action): a queued child ends unstarted, an active one is interrupted (and so
        its own children); one already interrupting keeps its first reason."""
        for child_id in run.children:
            child = self._runs.get(child_id)
            if child is None or child.state in FINISHED_RUN_STATES:
                continue
            if child.state is RunState.QUEUED:
                self._end_queued(child, reason, origin, action)
            elif child.state is RunState.ACTIVE:
                self._interrupt(child, reason, origin, action, grace_ms)

    def _decide_interrupt(self, run: _Run, reason: InterruptReason, origin: str, action: str | None) -> None:
        self._touch(run)
        part = run.open_part()
        run.interrupt = _Interrupt(
            reason=reason, origin=origin, action=action, phase=PART_PHASE[part.state] if part else None
        )

    def _unqueue(self, run: _Run) -> None:
        self._journal.remove(self._sessions[run.session].queue, run.id)

    def _move_run(self, run: _Run, trigger: RunTrigger) -> RunState:
        """Every move of a run's state goes through here (the per-state counts stay exact)."""
        old, new = run.state, next_run_state(run.state, trigger)
        self._touch(run)
        run.state = new
        self._runs_in[old] -= 1
        self._runs_in[new] += 1
        self._left_active(run)
        return new

    # --- body reports ------------------------------------------------------------------------

    def _live_run(self, run_id: str) -> _Run | None:
        run = self._runs.get(run_id)
        if run is None or run.state is not RunState.ACTIVE:
            self._ignore()
            return None
        return run

    def _step(self, report: StepReport) -> None:
        live = self._live_run(report.run_id)
        if live is None:
            return
        self._progressed(live)
        cls = StepFinished if report.finished else StepStarted
        self._emit(
            cls(
                **self._stamp(live),
                step=report.step,
                kind=report.kind,
                tool=report.tool,
                call_id=report.call_id,
            )
        )

    def _part(self, report: PartReport) -> None:
        run = self._live_run(report.run_id)
        if run is None:
            return
        self._touch(run)
        if report.state is PartState.PENDING:
            call_id = report.call_id or f"call-{len(run.parts) + 1}"
            if call_id in run.calls:
                self._ignore()  # a call id used twice in one run: a body bug
                return
            part = _Part(tool=report.tool, state=PartState.PENDING, call_id=call_id)
            run.parts.append(part)
            run.calls[call_id] = part
            self._progressed(run)
            self._part_changed(run, part)
            return
        if report.call_id is not None:
            found = run.calls.get(report.call_id)
        else:
            found = run.parts[-1] if run.parts else None
        if found is None or report.state not in PART_TRANSITIONS[found.state]:
            # Out of order, or the part already ended (an ``error`` set by a permission
            # rejected with a message stays ``error`` when the call later ends).
            self._ignore()
            return
        found.state = report.state
        if report.state is PartState.RUNNING:
            found.ran = True
        if report.message is not None and found.declined is None:  # the user's feedback stays
            found.message = report.message
        self._progressed(run)
        self._part_changed(run, found)

    def _body_ended(self, report: BodyEnded) -> None:
        run = self._runs.get(report.run_id)
        if run is None or run.state not in (RunState.ACTIVE, RunState.INTERRUPTING):
            self._ignore()  # an abandoned body that finally stopped
            return
        trigger = RunTrigger.BODY_RETURNED if report.error is None else RunTrigger.BODY_RAISED
        if not BODY_RULES[run.body].takes_body_end:
            self._ignore()  # its body ended already
            return
        if self._unfinished_children(run):
            self._move_body(run, BodyTrigger.BODY_ENDED_BEFORE_CHILDREN)
            run.ended = (trigger, report.error)  # reported finished after its children
            return
        self._move_body(run, BodyTrigger.BODY_ENDED)
        self._end(run, trigger, report.error)

    def _move_body(self, run: _Run, trigger: BodyTrigger) -> None:
        """Every move of a run's body state goes through here (``BODY_TRANSITIONS``)."""
        self._touch(run)
        run.body = next_body_state(run.body, trigger)

    def _end(self, run: _Run, trigger: RunTrigger, error: str | None) -> None:
        if self._move_run(run, trigger) is RunState.FAILED:
            run.error = error
        self._finish(run)

    def _unfinished_children(self, run: _Run) -> bool:
        return any(
            (child := self._runs.get(c)) is not None and child.state not in FINISHED_RUN_STATES
            for c in run.children
        )

    def _finish(self, run: _Run) -> None:
        """The run has ended (its state says how): settle its parts, tell, and move on."""
        self._touch(run)
        was_active = run.generation is not None
        interrupt = run.interrupt if run.state is RunState.INTERRUPTED else None
        self._withdraw_open_asks(run, WithdrawReason.RUN_ENDED)  # left open by a body that ended
        for part in run.parts:
            if part.state not in UNFINISHED_PART_STATES:
                continue
            if interrupt is not None:
                part.phase = PART_PHASE[part.state]
                part.state = PartState.INTERRUPTED
                part.reason, part.origin = interrupt.reason, interrupt.origin
            elif not part.tool_started:  # lost to the run's own end (a dropped stream): it never ran
                # Not a tool failure (``error``): cut off by its run, which no interrupt ended, so
                # no reason; the origin says how the run ended, the message keeps its raw error.
                part.phase = PART_PHASE[part.state]
                part.state = PartState.INTERRUPTED
                part.origin = RUN_FAILED_ORIGIN if run.error is not None else RUN_ENDED_ORIGIN
                part.message = run.error
            else:
                part.state = PartState.ERROR
                part.message = run.error or "the run ended before this tool call finished"
            self._part_changed(run, part)
        self._emit(
            RunFinished(
                **self._stamp(run),
                outcome=RUN_OUTCOMES[run.state],
                **self._ending(run, interrupt),
            )
        )
        self._remember_finished(run.id)
        self._disarm_deadline(run, was_active)
        if run.grace_armed:
            self._out.append(StopInterruptGrace(run_id=run.id))
        self._out.append(ReleaseRun(run_id=run.id))
        session = self._sessions[run.session]
        if not was_active:
            self._child_finished(run)
            return
        assert run.generation is not None
        directory = self._dirs.get(run.directory)
        instance = directory.open.get(run.generation) if directory is not None else None
        if instance is not None:
            self._journal.discard(instance.runs, run.id)
            if instance.state is InstanceState.RETIRING and not instance.runs and not self._deadline_passed:
                self._dispose(instance)
        self._touch(session)
        if session.queue:  # busy through the hand-over (a retry of the finished run is over)
            self._move_session(session, SessionTrigger.HAND_OVER, None)
            self._activate(self._runs[self._journal.popleft(session.queue)], session)
        else:
            self._move_session(session, SessionTrigger.END, None)  # announced idle, retry cleared
            session.active = None
            if session.deleted:  # deleted while its run was stopping: forgotten now
                self._journal.drop(self._sessions, session.id)
            else:
                self._remember(self._idle_sessions, session.id, self._sessions)
        self._child_finished(run)

    def _child_finished(self, run: _Run) -> None:
        """A parent whose body ended while ``run`` was its last unfinished child is finished now."""
        parent = self._runs.get(run.parent) if run.parent is not None else None
        waiting = parent is not None and parent.body is BodyState.AWAITING_CHILDREN
        if parent is None or not waiting or parent.state in FINISHED_RUN_STATES:
            return
        if not self._unfinished_children(parent):
            assert parent.ended is not None
            self._move_body(parent, BodyTrigger.LAST_CHILD_FINISHED)
            self._end(parent, *parent.ended)

    def _remember_finished(self, run_id: str) -> None:
        self._journal.append(self._finished, run_id)
        while len(self._finished) > self.retain_finished:
            forgotten = self._journal.popleft(self._finished)
            self._journal.drop(self._runs, forgotten)
            self._asks.forget_run(forgotten)

    def _remember(self, retained: dict[str, None], key: str, table: dict[str, Any]) -> None:
        """``key`` (an idle session, a closed directory) is kept in ``table`` while it is among
        the ``retain_finished`` latest of ``retained``; the oldest is forgotten."""
        self._journal.drop(retained, key)
        self._journal.put(retained, key, None)
        while len(retained) > self.retain_finished:
            oldest = next(iter(retained))
            self._journal.drop(retained, oldest)
            self._journal.drop(table, oldest)

    # --- instances ---------------------------------------------------------------------------

    def _directory(self, name: str) -> _Directory:
        directory = self._dirs.get(name)
        if directory is None:
            directory = _Directory(name, fingerprint=self._config.get("fingerprint"))
            self._journal.fresh(directory)
            self._journal.put(self._dirs, name, directory)
        return directory

    def _load(self, name: str, cause: LoadCause) -> _Instance:
        directory = self._directory(name)
        self._touch(directory)
        self._journal.drop(self._closed_dirs, name)
        self._journal.drop(self._deferred_loads, name)  # whatever loads it, a deferred load is done
        directory.last_generation += 1
        instance = _Instance(
            directory=name,
            generation=directory.last_generation,
            fingerprint=directory.fingerprint,
            epoch=self.epoch,
        )
        self._journal.fresh(instance)
        directory.current = instance
        directory.open[instance.generation] = instance
        self._instances_in[instance.state] += 1
        self._emit(
            InstanceStarted(**self._instance_stamp(instance), fingerprint=instance.fingerprint, cause=cause)
        )
        self._out.append(LoadInstance(directory=name, generation=instance.generation))
        return instance

    def _retire(self, instance: _Instance) -> None:
        self._move_instance(instance, InstanceTrigger.RETIRE)
        directory = self._dirs[instance.directory]
        if directory.current is instance:
            self._touch(directory)
            directory.current = None

    def _dispose(self, instance: _Instance) -> None:
        self._move_instance(instance, InstanceTrigger.DISPOSE)
        self._out.append(
            DisposeInstance(
                directory=instance.directory, generation=instance.generation, budget_ms=self.dispose_budget_ms
            )
        )

    def _load_done(self, report: LoadDone) -> None:
        """A generation's load hook ended: once it returned, its caches are usable (``instance.ready``,
        once); a failed load says nothing more (the runs that read it fail with its error)."""
        directory = self._dirs.get(report.directory)
        instance = directory.open.get(report.generation) if directory else None
        if instance is None or instance.ready:
            return  # closed already (at shutdown's deadline, or before its load was reported)
        if report.error is not None:
            return
        self._touch(instance)
        instance.ready = True
        self._emit(InstanceReady(**self._instance_stamp(instance)))

    def _dispose_done(self, report: DisposeDone) -> None:
        directory = self._dirs.get(report.directory)
        instance = directory.open.get(report.generation) if directory else None
        if instance is None or instance.state is not InstanceState.DISPOSING:
            self._ignore()  # closed at shutdown's deadline already
            return
        self._closed_instance(instance, report.error)

    def _move_instance(self, instance: _Instance, trigger: InstanceTrigger) -> None:
        """Every move of an instance's state goes through here (the per-state counts stay exact)."""
        old = instance.state
        self._touch(instance)
        instance.state = next_instance_state(old, trigger)
        self._instances_in[old] -= 1
        self._instances_in[instance.state] += 1

    def _directory_closed(self, directory: _Directory) -> None:
        """An instance of ``directory`` closed: once none is open, the directory may be forgotten."""
        if not directory.open and directory.current is None:
            self._remember(self._closed_dirs, directory.name, self._dirs)

    # --- plumbing ----------------------------------------------------------------------------

    def _next_seq(self) -> int:
        """The ``seq`` of the event about to be emitted: build it, then ``_emit`` it at once."""
        self._seq += 1
        return self._seq

    def _emit(self, event: Event) -> None:
        self._out.append(Emit(event))

    def _ignore(self) -> None:
        self._reports_ignored += 1

    def _reply(self, reply_to: Any, answer: CloseOutcome | RequestOutcome) -> None:
        self._out.append(Reply(reply_to=reply_to, answer=answer))

    def _reject(self, reply_to: Any, code: RejectCode, error: str, *, close: bool = False) -> None:
        answer: CloseOutcome | RequestOutcome
        if close:
            answer = CloseOutcome(result=CloseResult.REJECTED, error=error, code=code)
        else:
            answer = RequestOutcome(result=RequestResult.REJECTED, error=error, code=code)
        self._reply(reply_to, answer)

    def _flush(self) -> list[Command]:
        out, self._out = self._out, []
        if self._closed and not self._shutdown_announced and self._shutdown is not None:
            # Last of all: the shell stops everything on it, so nothing may follow it.
            self._shutdown_announced = True
            outcome = self._close_outcome(self._shutdown)
            out.append(ShutdownComplete(action_id=self._shutdown.id, outcome=outcome))
        return out


_OK = RequestOutcome(result=RequestResult.OK)


_UNDONE_ATTRIBUTES = (
    "_seq",
    "_action_count",
    "_shutdown",
    "_deadline_passed",
    "_closed",
    "_reports_ignored",
    "_abandoned",
    "_session_actions",
)
"""The core's values outside the journal that ``_atomically`` puts back when an input fails (with
the two state counters, copied): the records and tables the journal undoes itself."""
_undone_values = attrgetter(*_UNDONE_ATTRIBUTES)
"""Those values, as a tuple in that order: read once per decision, so in one C call, not a loop."""


def resume_verdict(recovered: RecoveredRun, budget: int | None) -> ResumeVerdict | None:
    """The resume policy's decision for a run recovered after a crash: None without a policy
    (``budget`` None) and for a child run (its parent's continuation starts its own children);
    ``offered`` while its turn has been continued fewer than ``budget`` times in a row
    (``RecoveredRun.resume_count``), else ``exhausted``."""
    if budget is None or recovered.parent_run_id is not None:
        return None
    return ResumeVerdict.OFFERED if recovered.resume_count < budget else ResumeVerdict.EXHAUSTED


def _resume_count(resumed: _Run | None) -> int:
    """A new run's ``resume_count``: one more than the run it resumes if that run ended ``crash``
    (a continuation after a restart), else 0 (a fresh turn, or a host continuing a turn a user, a
    close or a deadline stopped)."""
    crashed = (
        resumed is not None
        and resumed.interrupt is not None
        and resumed.state is RunState.INTERRUPTED
        and resumed.interrupt.reason is InterruptReason.CRASH
    )
    return resumed.resume_count + 1 if crashed and resumed is not None else 0


def _budget_problem(budget: RetryBudget | None) -> str | None:
    """Why ``budget`` is not a retry budget (a bound below 0), or None."""
    if budget is None:
        return None
    for name, value in (("attempts", budget.attempts), ("backoff_ms", budget.backoff_ms)):
        if value is not None and value < 0:
            return f"retry_budget.{name} must be >= 0 or None, got {value}"
    return None


T = TypeVar("T")


def _routed(table: Mapping[type, T], value: object) -> T:
    """The entry of ``table`` for ``value``'s type (or the nearest base class that has one)."""
    for cls in type(value).__mro__:
        if cls in table:
            return table[cls]
    raise TypeError(f"the core takes no {type(value).__name__}: {value!r}")


_REQUEST_HANDLERS: Mapping[type, Callable[[SupervisorCore, Any, Any], None]] = {
    StartRun: SupervisorCore._start_run,
    CancelRun: SupervisorCore._cancel,
    CloseRequest: SupervisorCore._close,
    Shutdown: SupervisorCore._shutdown_request,
    ReplyPermission: SupervisorCore._reply_permission,
    AnswerForm: SupervisorCore._answer_form,
    DismissForm: SupervisorCore._dismiss_form,
    SetQueuePolicy: SupervisorCore._set_queue_policy,
    ConfirmClose: SupervisorCore._confirm_close,
    CancelSession: SupervisorCore._cancel_session,
    DeleteSession: SupervisorCore._delete_session,
}
"""Who decides each request (``SupervisorCore.request``)."""


@dataclass(frozen=True, slots=True)
class _ReportRoute:
    handle: Callable[[SupervisorCore, Any], None]
    body: bool
    """Made by a run's body (the others come from instances and timers): one the core does not
    apply is counted on its run (``ReportEcho.refused``) as well as in ``reports_ignored``."""
    progress: bool
    """Progress of its run: it clears the run's stalled flag before it is handled. A retry is
    progress too (the body is alive and tries its provider call again); a body's end is not (the
    run leaves ``active`` or waits for its children)."""


_REPORT_ROUTES: Mapping[type, _ReportRoute] = {
    StepReport: _ReportRoute(SupervisorCore._step, body=True, progress=True),
    PartReport: _ReportRoute(SupervisorCore._part, body=True, progress=True),
    AskRaised: _ReportRoute(SupervisorCore._ask_raised, body=True, progress=True),
    WithdrawAsk: _ReportRoute(SupervisorCore._withdraw_request, body=True, progress=True),
    BodyEnded: _ReportRoute(SupervisorCore._body_ended, body=True, progress=False),
    RetryReport: _ReportRoute(SupervisorCore._retry, body=True, progress=True),
    Heartbeat: _ReportRoute(SupervisorCore._heartbeat, body=True, progress=True),
    DisposeDone: _ReportRoute(SupervisorCore._dispose_done, body=False, progress=False),
    LoadDone: _ReportRoute(SupervisorCore._load_done, body=False, progress=False),
    DeadlineExpired: _ReportRoute(SupervisorCore._deadline_expired, body=False, progress=False),
    NoProgress: _ReportRoute(SupervisorCore._no_progress, body=False, progress=False),
    GraceExpired: _ReportRoute(SupervisorCore._grace_expired, body=False, progress=False),
    InterruptGraceExpired: _ReportRoute(SupervisorCore._interrupt_grace_expired, body=False, progress=False),
}
"""Who decides each report (``SupervisorCore.report``), and what kind of report it is."""
