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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from run_supervisor.protocol._commands import (
    AbandonRun,
    Command,
    DeliverAnswer,
    DisposeInstance,
    Emit,
    LoadInstance,
    ReleaseRun,
    Reply,
    ShutdownComplete,
    SignalInterrupt,
    SpawnRun,
    StartGraceTimer,
)
from run_supervisor.protocol._enums import (
    CloseAction,
    CloseMode,
    CloseResult,
    InstanceState,
    InterruptReason,
    Outcome,
    PartState,
    Phase,
    RejectCode,
    RunState,
    SessionStatus,
)
from run_supervisor.protocol._events import (
    ActionResult,
    InstanceClosed,
    InstanceStarted,
    LifecycleCompleted,
    LifecycleDeferred,
    LifecycleRequested,
    RunFinished,
    RunQueued,
    RunStarted,
    SessionStatusChanged,
    StepFinished,
    StepStarted,
)
from run_supervisor.protocol._parts import PartSnapshot
from run_supervisor.protocol._requests import (
    AnswerForm,
    BodyEnded,
    CancelRun,
    CloseOutcome,
    CloseRequest,
    DismissForm,
    DisposeDone,
    GraceExpired,
    PartReport,
    ReplyPermission,
    Request,
    RequestOutcome,
    RunSnapshot,
    SessionSnapshot,
    Shutdown,
    StartRun,
    StepReport,
    WaitingForUser,
)
from run_supervisor.protocol._rules import (
    CLOSE_RULES,
    FINISHED_RUN_STATES,
    PART_PHASE,
    PART_TRANSITIONS,
    UNFINISHED_PART_STATES,
    InstanceTrigger,
    RunTrigger,
    next_instance_state,
    next_run_state,
)

__all__ = ["ActionSnapshot", "CoreStatistics", "Report", "SupervisorCore"]

Report = StepReport | PartReport | WaitingForUser | BodyEnded | DisposeDone | GraceExpired
"""Inputs that come from inside the supervisor (bodies, instances, timers), not from hosts."""

_LIFECYCLE_CLOSES = frozenset(
    {CloseAction.DISPOSE, CloseAction.DISPOSE_ALL, CloseAction.RELOAD, CloseAction.INVALIDATE_CONFIG}
)
_ONE_DIRECTORY = frozenset({CloseAction.DISPOSE, CloseAction.RELOAD})
_SHUTDOWN_MODES = {
    InterruptReason.SHUTDOWN: (CloseAction.SHUTDOWN, CloseMode.SHUTDOWN),
    InterruptReason.TEST_TEARDOWN: (CloseAction.TEST_TEARDOWN, CloseMode.TEST_TEARDOWN),
    # A watchdog (the scenario runner's --timeout) tearing down what hung: a shutdown that says why.
    InterruptReason.TIMEOUT: (CloseAction.SHUTDOWN, CloseMode.SHUTDOWN),
}


class ActionSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A lifecycle action that has not completed yet."""

    action_id: str
    do: CloseAction
    mode: CloseMode
    origin: str
    result: CloseResult
    pending_directories: tuple[str, ...]
    blocking_runs: tuple[str, ...]
    """The runs it still waits for, now."""
    tag: str | None = None


class CoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
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


@dataclass(slots=True)
class _Part:
    tool: str
    state: PartState
    tool_started: bool = False
    message: str | None = None
    reason: InterruptReason | None = None
    origin: str | None = None
    phase: Phase | None = None


@dataclass(slots=True)
class _Interrupt:
    reason: InterruptReason
    origin: str
    action: str | None
    phase: Phase | None


@dataclass(slots=True)
class _Run:
    id: str
    session: str
    directory: str
    state: RunState = RunState.QUEUED
    generation: int | None = None
    parts: list[_Part] = field(default_factory=list)
    waiting_for: str | None = None  # "permission" | "form"
    interrupt: _Interrupt | None = None
    error: str | None = None
    abandoned: bool = False

    def open_part(self) -> _Part | None:
        if self.parts and self.parts[-1].state in UNFINISHED_PART_STATES:
            return self.parts[-1]
        return None


@dataclass(slots=True)
class _Session:
    id: str
    active: str | None = None
    queue: deque[str] = field(default_factory=deque)
    busy: bool = False


@dataclass(slots=True)
class _Instance:
    directory: str
    generation: int
    state: InstanceState = InstanceState.LIVE
    runs: set[str] = field(default_factory=set)  # runs pinned here that have not finished
    closers: list[str] = field(default_factory=list)  # actions waiting for it to close

    @property
    def key(self) -> tuple[str, int]:
        return (self.directory, self.generation)


@dataclass(slots=True)
class _Directory:
    name: str
    current: _Instance | None = None
    last_generation: int = 0
    open: dict[int, _Instance] = field(default_factory=dict)  # not closed yet, by generation


@dataclass(slots=True)
class _Action:
    id: str
    do: CloseAction
    mode: CloseMode
    origin: str
    directories: tuple[str, ...]
    tag: str | None
    reply_to: Any
    result: CloseResult = CloseResult.COMPLETED
    completed_directories: tuple[str, ...] = ()
    pending_directories: tuple[str, ...] = ()
    blocking_runs: tuple[str, ...] = ()
    interrupted_runs: tuple[str, ...] = ()
    awaiting: set[tuple[str, int]] = field(default_factory=set)  # instances that must close first
    announcing: set[tuple[str, int]] = field(default_factory=set)  # closing "at once": answer after
    announced: bool = False
    completed: bool = False
    superseded_by: str | None = None
    errors: list[str] = field(default_factory=list)
    abandoned_runs: list[str] = field(default_factory=list)
    joiners: list[str | None] = field(default_factory=list)  # tags of later shutdowns that joined
    joiner_answers: list[tuple[str | None, Any]] = field(default_factory=list)  # answered after ours


class SupervisorCore:
    """Decides everything; does nothing. Feed it with ``request`` and ``report``; carry out what
    they return, in order.

    ``dispose_budget_ms`` bounds each dispose hook (the shell enforces it); ``retain_finished`` is
    how many finished runs stay queryable (and guarded against id reuse) before the oldest is
    forgotten.
    """

    def __init__(self, *, dispose_budget_ms: int = 1000, retain_finished: int = 10_000) -> None:
        self.dispose_budget_ms = dispose_budget_ms
        self.retain_finished = retain_finished
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
        self._runs_active = 0
        self._runs_queued = 0
        self._runs_finished = 0
        self._reports_ignored = 0
        self._sessions_busy = 0
        self._instances_open = 0

    # --- entry points ------------------------------------------------------------------------

    def declare(self, directory: str) -> None:
        """Make a directory known without loading it (closes may then name it)."""
        self._directory(directory)

    def preload(self, directory: str) -> list[Command]:
        """Load the directory's instance now if it has no current generation."""
        if self._shutdown is None and self._directory(directory).current is None:
            self._load(directory)
        return self._flush()

    def request(self, request: Request, reply_to: Any) -> list[Command]:
        """Handle a host request. Its answer is a ``Reply(reply_to, ...)`` among the commands --
        right away, or for a close with instances disposing at once, when they have closed."""
        if self._shutdown is not None and not isinstance(request, Shutdown):
            self._reject(
                reply_to,
                RejectCode.SUPERVISOR_CLOSED,
                f"the supervisor has shut down ({self._shutdown.id}); no request is accepted any more",
                close=isinstance(request, CloseRequest),
            )
            return self._flush()
        if isinstance(request, StartRun):
            self._start_run(request, reply_to)
        elif isinstance(request, CancelRun):
            self._cancel(request, reply_to)
        elif isinstance(request, CloseRequest):
            self._close(request, reply_to)
        elif isinstance(request, Shutdown):
            self._shutdown_request(request, reply_to)
        elif isinstance(request, ReplyPermission):
            self._reply_permission(request, reply_to)
        elif isinstance(request, AnswerForm):
            self._answer_form(request, reply_to)
        else:
            self._dismiss_form(request, reply_to)
        return self._flush()

    def report(self, report: Report) -> list[Command]:
        """Handle what a body, an instance or a timer reports."""
        if isinstance(report, StepReport):
            self._step(report)
        elif isinstance(report, PartReport):
            self._part(report)
        elif isinstance(report, WaitingForUser):
            self._waiting(report)
        elif isinstance(report, BodyEnded):
            self._body_ended(report)
        elif isinstance(report, DisposeDone):
            self._dispose_done(report)
        else:
            self._grace_expired(report)
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
        outcome = _OUTCOMES.get(run.state)
        interrupt = run.interrupt if run.state is RunState.INTERRUPTED else None
        return RunSnapshot(
            run_id=run.id,
            session=run.session,
            directory=run.directory,
            generation=run.generation,
            state=run.state.value,
            outcome=outcome,
            reason=interrupt.reason if interrupt else None,
            origin=interrupt.origin if interrupt else None,
            action_id=interrupt.action if interrupt else None,
            phase=interrupt.phase if interrupt else None,
            error=run.error,
            abandoned=run.abandoned,
            parts=self._part_snapshots(run),
        )

    @staticmethod
    def _part_snapshots(run: _Run) -> tuple[PartSnapshot, ...]:
        return tuple(
            PartSnapshot(
                tool=p.tool,
                state=p.state,
                tool_started=p.tool_started,
                message=p.message,
                reason=p.reason,
                origin=p.origin,
                phase=p.phase,
            )
            for p in run.parts
        )

    def session_snapshot(self, session_id: str) -> SessionSnapshot | None:
        session = self._sessions.get(session_id)
        if session is None:
            return None
        return SessionSnapshot(
            session=session.id,
            status=SessionStatus.BUSY if session.busy else SessionStatus.IDLE,
            active=session.active,
            queued=tuple(session.queue),
        )

    def pending_actions(self) -> tuple[ActionSnapshot, ...]:
        return tuple(self._action_snapshot(a) for a in self._actions.values())

    def action_snapshot(self, action_id: str) -> ActionSnapshot | None:
        action = self._actions.get(action_id)
        return None if action is None else self._action_snapshot(action)

    def statistics(self) -> CoreStatistics:
        return CoreStatistics(
            runs_active=self._runs_active,
            runs_queued=self._runs_queued,
            runs_finished=self._runs_finished,
            sessions_busy=self._sessions_busy,
            instances_open=self._instances_open,
            actions_pending=len(self._actions),
            events_emitted=self._seq,
            reports_ignored=self._reports_ignored,
            shutting_down=self._shutdown is not None,
            closed=self._closed,
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
        run = _Run(id=req.run_id, session=req.session, directory=req.directory)
        self._runs[run.id] = run
        self._directory(run.directory)
        session = self._sessions.get(run.session)
        if session is None:
            session = self._sessions[run.session] = _Session(run.session)
        if session.active is None:
            self._activate(run, session)
        else:
            session.queue.append(run.id)
            self._runs_queued += 1
            self._emit(RunQueued(seq=0, run_id=run.id, session=run.session))
        self._reply(reply_to, RequestOutcome(result=CloseResult.OK))

    def _activate(self, run: _Run, session: _Session) -> None:
        run.state = next_run_state(run.state, RunTrigger.START)
        directory = self._dirs[run.directory]
        instance = directory.current or self._load(run.directory)
        run.generation = instance.generation
        instance.runs.add(run.id)
        session.active = run.id
        self._runs_active += 1
        if not session.busy:
            session.busy = True
            self._sessions_busy += 1
            self._emit(SessionStatusChanged(seq=0, session=session.id, status=SessionStatus.BUSY))
        self._emit(
            RunStarted(
                seq=0,
                run_id=run.id,
                session=run.session,
                directory=run.directory,
                generation=instance.generation,
            )
        )
        self._out.append(
            SpawnRun(
                run_id=run.id, session=run.session, directory=run.directory, generation=instance.generation
            )
        )

    def _cancel(self, req: CancelRun, reply_to: Any) -> None:
        run = self._known_unfinished(req.run_id, reply_to, "cancel")
        if run is None:
            return
        if run.state is RunState.QUEUED:
            self._unqueue(run)
            self._decide_interrupt(run, InterruptReason.USER_CANCEL, req.origin, req.tag)
            run.state = next_run_state(run.state, RunTrigger.CANCEL_QUEUED)
            self._finish(run)
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
            self._interrupt(run, InterruptReason.USER_CANCEL, req.origin, req.tag)
        self._reply(reply_to, RequestOutcome(result=CloseResult.OK))

    def _reply_permission(self, req: ReplyPermission, reply_to: Any) -> None:
        run = self._waiting_run(req.run_id, "permission", reply_to)
        if run is None:
            return
        run.waiting_for = None
        if req.approve:
            self._out.append(DeliverAnswer(run_id=run.id, approved=True))
        elif req.message:
            part = run.open_part()
            if part is not None:
                part.state = PartState.ERROR
                part.message = req.message
            self._out.append(DeliverAnswer(run_id=run.id, approved=False, message=req.message))
        else:
            self._interrupt(run, InterruptReason.PERMISSION_REJECTED, "permission", req.tag)
        self._reply(reply_to, RequestOutcome(result=CloseResult.OK))

    def _answer_form(self, req: AnswerForm, reply_to: Any) -> None:
        run = self._waiting_run(req.run_id, "form", reply_to)
        if run is None:
            return
        run.waiting_for = None
        self._out.append(DeliverAnswer(run_id=run.id, approved=True, answer=req.answer))
        self._reply(reply_to, RequestOutcome(result=CloseResult.OK))

    def _dismiss_form(self, req: DismissForm, reply_to: Any) -> None:
        run = self._waiting_run(req.run_id, "form", reply_to)
        if run is None:
            return
        self._interrupt(run, InterruptReason.FORM_DISMISSED, "form", req.tag)
        self._reply(reply_to, RequestOutcome(result=CloseResult.OK))

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

    def _waiting_run(self, run_id: str, ask: str, reply_to: Any) -> _Run | None:
        run = self._known_unfinished(run_id, reply_to, f"answer to a {ask}")
        if run is None:
            return None
        if run.state is not RunState.ACTIVE or run.waiting_for != ask:
            self._reject(
                reply_to, RejectCode.NOTHING_PENDING, f"run {run_id!r} has no {ask} waiting for an answer"
            )
            return None
        return run

    def _interrupt(self, run: _Run, reason: InterruptReason, origin: str, action: str | None) -> None:
        """Decide an interrupt of an active run now; it takes effect when its body stops."""
        self._decide_interrupt(run, reason, origin, action)
        run.state = next_run_state(run.state, RunTrigger.INTERRUPT)
        run.waiting_for = None
        self._out.append(SignalInterrupt(run_id=run.id, reason=reason))

    @staticmethod
    def _decide_interrupt(run: _Run, reason: InterruptReason, origin: str, action: str | None) -> None:
        part = run.open_part()
        run.interrupt = _Interrupt(
            reason=reason, origin=origin, action=action, phase=PART_PHASE[part.state] if part else None
        )

    def _unqueue(self, run: _Run) -> None:
        self._sessions[run.session].queue.remove(run.id)
        self._runs_queued -= 1

    # --- body reports ------------------------------------------------------------------------

    def _live_run(self, run_id: str) -> _Run | None:
        run = self._runs.get(run_id)
        if run is None or run.state is not RunState.ACTIVE:
            self._reports_ignored += 1
            return None
        return run

    def _step(self, report: StepReport) -> None:
        if self._live_run(report.run_id) is None:
            return
        cls = StepFinished if report.finished else StepStarted
        self._emit(cls(seq=0, run_id=report.run_id, step=report.step, kind=report.kind))

    def _part(self, report: PartReport) -> None:
        run = self._live_run(report.run_id)
        if run is None:
            return
        if report.state is PartState.PENDING:
            run.parts.append(_Part(tool=report.tool, state=PartState.PENDING))
            return
        part = run.parts[-1] if run.parts else None
        if part is None or report.state not in PART_TRANSITIONS[part.state]:
            # Out of order, or the part already ended (an ``error`` set by a permission
            # rejected with a message stays ``error`` when the call later ends).
            self._reports_ignored += 1
            return
        part.state = report.state
        if report.state is PartState.RUNNING:
            part.tool_started = True
        if report.message is not None:
            part.message = report.message

    def _waiting(self, report: WaitingForUser) -> None:
        run = self._live_run(report.run_id)
        if run is not None:
            run.waiting_for = "form" if report.form else "permission"

    def _body_ended(self, report: BodyEnded) -> None:
        run = self._runs.get(report.run_id)
        if run is None or run.state not in (RunState.ACTIVE, RunState.INTERRUPTING):
            self._reports_ignored += 1  # an abandoned body that finally stopped
            return
        trigger = RunTrigger.BODY_RETURNED if report.error is None else RunTrigger.BODY_RAISED
        run.state = next_run_state(run.state, trigger)
        if run.state is RunState.FAILED:
            run.error = report.error
        self._finish(run)

    def _finish(self, run: _Run) -> None:
        """The run has ended (its state says how): settle its parts, tell, and move on."""
        was_active = run.generation is not None
        interrupt = run.interrupt if run.state is RunState.INTERRUPTED else None
        for part in run.parts:
            if part.state not in UNFINISHED_PART_STATES:
                continue
            if interrupt is not None:
                part.phase = PART_PHASE[part.state]
                part.state = PartState.INTERRUPTED
                part.reason, part.origin = interrupt.reason, interrupt.origin
            else:
                part.state = PartState.ERROR
                part.message = run.error or "the run ended before this tool call finished"
        self._emit(
            RunFinished(
                seq=0,
                run_id=run.id,
                outcome=_OUTCOMES[run.state],
                reason=interrupt.reason if interrupt else None,
                origin=interrupt.origin if interrupt else None,
                action_id=interrupt.action if interrupt else None,
                phase=interrupt.phase if interrupt else None,
                error=run.error,
                abandoned=run.abandoned,
                generation=run.generation,
                parts=self._part_snapshots(run),
            )
        )
        self._runs_finished += 1
        self._remember_finished(run.id)
        self._out.append(ReleaseRun(run_id=run.id))
        session = self._sessions[run.session]
        if not was_active:
            return
        self._runs_active -= 1
        assert run.generation is not None
        instance = self._dirs[run.directory].open.get(run.generation)
        if instance is not None:
            instance.runs.discard(run.id)
            if instance.state is InstanceState.RETIRING and not instance.runs and not self._deadline_passed:
                self._dispose(instance)
        session.active = None
        if session.queue:
            next_run = self._runs[session.queue.popleft()]
            self._runs_queued -= 1
            self._activate(next_run, session)
        elif session.busy:
            session.busy = False
            self._sessions_busy -= 1
            self._emit(SessionStatusChanged(seq=0, session=session.id, status=SessionStatus.IDLE))

    def _remember_finished(self, run_id: str) -> None:
        self._finished.append(run_id)
        while len(self._finished) > self.retain_finished:
            self._runs.pop(self._finished.popleft(), None)

    # --- instances ---------------------------------------------------------------------------

    def _directory(self, name: str) -> _Directory:
        directory = self._dirs.get(name)
        if directory is None:
            directory = self._dirs[name] = _Directory(name)
        return directory

    def _load(self, name: str) -> _Instance:
        directory = self._directory(name)
        directory.last_generation += 1
        instance = _Instance(directory=name, generation=directory.last_generation)
        directory.current = instance
        directory.open[instance.generation] = instance
        self._instances_open += 1
        self._emit(InstanceStarted(seq=0, directory=name, generation=instance.generation))
        self._out.append(LoadInstance(directory=name, generation=instance.generation))
        return instance

    def _retire(self, instance: _Instance) -> None:
        instance.state = next_instance_state(instance.state, InstanceTrigger.RETIRE)
        directory = self._dirs[instance.directory]
        if directory.current is instance:
            directory.current = None

    def _dispose(self, instance: _Instance) -> None:
        instance.state = next_instance_state(instance.state, InstanceTrigger.DISPOSE)
        self._out.append(
            DisposeInstance(
                directory=instance.directory, generation=instance.generation, budget_ms=self.dispose_budget_ms
            )
        )

    def _dispose_done(self, report: DisposeDone) -> None:
        directory = self._dirs.get(report.directory)
        instance = directory.open.get(report.generation) if directory else None
        if instance is None or instance.state is not InstanceState.DISPOSING:
            self._reports_ignored += 1  # closed at shutdown's deadline already
            return
        self._closed_instance(instance, report.error)

    def _closed_instance(self, instance: _Instance, error: str | None) -> None:
        instance.state = next_instance_state(instance.state, InstanceTrigger.DISPOSED)
        del self._dirs[instance.directory].open[instance.generation]
        self._instances_open -= 1
        self._emit(
            InstanceClosed(seq=0, directory=instance.directory, generation=instance.generation, error=error)
        )
        for action_id in instance.closers:
            action = self._actions.get(action_id)
            if action is None:
                continue
            action.awaiting.discard(instance.key)
            action.announcing.discard(instance.key)
            if error is not None:
                action.errors.append(f"{instance.directory} (generation {instance.generation}): {error}")
            if not action.announced:
                if not action.announcing:
                    self._announce(action)
            elif not action.awaiting:
                self._complete(action)

    # --- lifecycle actions -------------------------------------------------------------------

    def _new_action(
        self,
        *,
        do: CloseAction,
        mode: CloseMode,
        origin: str,
        directories: Iterable[str],
        tag: str | None,
        reply_to: Any,
    ) -> _Action:
        self._action_count += 1
        action = _Action(
            id=f"lc-{self._action_count}",
            do=do,
            mode=mode,
            origin=origin,
            directories=tuple(sorted(directories)),
            tag=tag,
            reply_to=reply_to,
        )
        self._actions[action.id] = action
        self._emit_requested(action, do=do, mode=mode, origin=origin, tag=tag)
        return action

    def _close(self, req: CloseRequest, reply_to: Any) -> None:
        if req.do not in _LIFECYCLE_CLOSES or CLOSE_RULES[req.mode].covers_everything:
            self._reject(
                reply_to,
                RejectCode.INVALID_REQUEST,
                f"a close is {', '.join(sorted(_LIFECYCLE_CLOSES))} in mode maintenance or "
                f"user_confirmed_interrupt (got {req.do.value} / {req.mode.value}); shut down with Shutdown",
                close=True,
            )
            return
        if req.do in _ONE_DIRECTORY:
            if len(req.directories) != 1:
                self._reject(
                    reply_to,
                    RejectCode.INVALID_REQUEST,
                    f"{req.do.value} names exactly one directory",
                    close=True,
                )
                return
            if req.directories[0] not in self._dirs:
                self._reject(
                    reply_to,
                    RejectCode.UNKNOWN_DIRECTORY,
                    f"directory {req.directories[0]!r} is unknown: "
                    "no instance was ever loaded or declared for it",
                    close=True,
                )
                return
            names: list[str] = list(req.directories)
        else:
            names = sorted(d.name for d in self._dirs.values() if d.open)
        action = self._new_action(
            do=req.do, mode=req.mode, origin=req.origin, directories=names, tag=req.tag, reply_to=reply_to
        )
        self._cover(action, names, CLOSE_RULES[req.mode].interrupts_with)
        if req.do is CloseAction.RELOAD:
            self._load(names[0])
        if action.interrupted_runs:
            action.result = CloseResult.INTERRUPTED
        elif action.pending_directories:
            action.result = CloseResult.DEFERRED
        if not action.announcing:
            self._announce(action)

    def _cover(self, action: _Action, names: Iterable[str], interrupt: InterruptReason | None) -> None:
        """Retire every open instance of these directories for ``action``; interrupt their active
        runs when the mode says so; dispose at once the instances no run holds."""
        done: list[str] = []
        pending: list[str] = []
        blocking: set[str] = set()
        interrupted: set[str] = set()
        for name in names:
            directory = self._dirs[name]
            instances = sorted(directory.open.values(), key=lambda i: i.generation)
            if interrupt is not None:
                for instance in instances:
                    for run_id in sorted(instance.runs):
                        run = self._runs[run_id]
                        if run.state is RunState.ACTIVE:
                            self._interrupt(run, interrupt, action.origin, action.id)
                            interrupted.add(run_id)
            waits = False
            for instance in instances:
                if instance.state is InstanceState.LIVE:
                    self._retire(instance)
                if instance.state is InstanceState.RETIRING:
                    if instance.runs:
                        waits = True
                        blocking.update(instance.runs)
                    else:
                        self._dispose(instance)
                if instance.state is InstanceState.DISPOSING:
                    action.announcing.add(instance.key)
                instance.closers.append(action.id)
                action.awaiting.add(instance.key)
            (pending if waits else done).append(name)
        action.completed_directories = tuple(sorted(done))
        action.pending_directories = tuple(sorted(pending))
        action.blocking_runs = tuple(sorted(blocking))
        action.interrupted_runs = tuple(sorted(interrupted))

    def _announce(self, action: _Action) -> None:
        """Everything closing at once has closed: tell the requester."""
        action.announced = True
        if action.result is CloseResult.DEFERRED:
            self._emit(
                LifecycleDeferred(
                    seq=0,
                    action_id=action.id,
                    pending_directories=action.pending_directories,
                    blocking_runs=action.blocking_runs,
                    tag=action.tag,
                )
            )
        if not action.awaiting:
            self._complete(action)
        self._emit(ActionResult(seq=0, action_id=action.id, result=action.result, tag=action.tag))
        self._reply(action.reply_to, self._close_outcome(action))
        for tag, reply_to in action.joiner_answers:  # later shutdowns: never answered before the first
            self._emit(ActionResult(seq=0, action_id=action.id, result=action.result, tag=tag))
            self._reply(reply_to, self._close_outcome(action))
        action.joiner_answers.clear()

    def _complete(self, action: _Action) -> None:
        action.completed = True
        del self._actions[action.id]
        for tag in (action.tag, *action.joiners):
            self._emit_completed(action, tag)
        if action is self._shutdown:
            self._closed = True  # ShutdownComplete goes out last in this batch (see _flush)

    def _emit_requested(
        self, action: _Action, *, do: CloseAction, mode: CloseMode, origin: str, tag: str | None
    ) -> None:
        """``do``, ``mode``, ``origin`` and ``tag`` are the request's own: a second shutdown joining
        the first names itself, with the first one's action id."""
        self._emit(
            LifecycleRequested(
                seq=0,
                action_id=action.id,
                do=do,
                mode=mode,
                origin=origin,
                directories=action.directories,
                tag=tag,
            )
        )

    def _emit_completed(self, action: _Action, tag: str | None) -> None:
        self._emit(
            LifecycleCompleted(
                seq=0,
                action_id=action.id,
                superseded_by=action.superseded_by,
                error="; ".join(action.errors) or None,
                abandoned_runs=tuple(sorted(action.abandoned_runs)),
                tag=tag,
            )
        )

    def _close_outcome(self, action: _Action) -> CloseOutcome:
        return CloseOutcome(
            result=action.result,
            action_id=action.id,
            completed=action.completed,
            completed_directories=action.completed_directories,
            pending_directories=action.pending_directories,
            blocking_runs=action.blocking_runs,
            interrupted_runs=action.interrupted_runs,
            abandoned_runs=tuple(sorted(action.abandoned_runs)),
        )

    def _action_snapshot(self, action: _Action) -> ActionSnapshot:
        blocking = sorted(
            run_id
            for directory, generation in action.awaiting
            if (instance := self._dirs[directory].open.get(generation)) is not None
            for run_id in instance.runs
        )
        return ActionSnapshot(
            action_id=action.id,
            do=action.do,
            mode=action.mode,
            origin=action.origin,
            result=action.result,
            pending_directories=tuple(sorted({directory for directory, _ in action.awaiting})),
            blocking_runs=tuple(blocking),
            tag=action.tag,
        )

    # --- shutdown ----------------------------------------------------------------------------

    def _shutdown_request(self, req: Shutdown, reply_to: Any) -> None:
        if req.reason not in _SHUTDOWN_MODES:
            self._reject(
                reply_to,
                RejectCode.INVALID_REQUEST,
                f"a shutdown's reason is shutdown, test_teardown or timeout, not {req.reason.value}",
                close=True,
            )
            return
        if req.grace_ms < 0:
            self._reject(reply_to, RejectCode.INVALID_REQUEST, "grace_ms cannot be negative", close=True)
            return
        do, mode = _SHUTDOWN_MODES[req.reason]
        origin = req.origin or req.reason.value
        first = self._shutdown
        if first is not None:
            # A second shutdown is never rejected: it joins the first.
            self._emit_requested(first, do=do, mode=mode, origin=origin, tag=req.tag)
            if first.completed:
                self._emit_completed(first, req.tag)
            else:
                first.joiners.append(req.tag)
            if first.announced:
                self._emit(ActionResult(seq=0, action_id=first.id, result=first.result, tag=req.tag))
                self._reply(reply_to, self._close_outcome(first))
            else:
                first.joiner_answers.append((req.tag, reply_to))
            return
        names = sorted(d.name for d in self._dirs.values() if d.open)
        action = self._new_action(
            do=do, mode=mode, origin=origin, directories=names, tag=req.tag, reply_to=reply_to
        )
        for other in self._actions.values():
            if other is not action:
                other.superseded_by = action.id
        self._shutdown = action
        action.result = CloseResult.FORCED
        # Queued runs end without starting; then every active run is interrupted.
        for session in self._sessions.values():
            while session.queue:
                run = self._runs[session.queue.popleft()]
                self._runs_queued -= 1
                self._decide_interrupt(run, req.reason, origin, action.id)
                run.state = next_run_state(run.state, RunTrigger.CANCEL_QUEUED)
                self._finish(run)
        self._out.append(StartGraceTimer(action_id=action.id, grace_ms=req.grace_ms))
        self._cover(action, names, req.reason)
        if not action.announcing:
            self._announce(action)

    def _grace_expired(self, report: GraceExpired) -> None:
        action = self._shutdown
        if action is None or action.id != report.action_id or action.completed:
            self._reports_ignored += 1
            return
        self._deadline_passed = True
        stuck = sorted(
            (run for run in self._runs.values() if run.state is RunState.INTERRUPTING),
            key=lambda r: r.id,
        )
        for run in stuck:
            run.state = next_run_state(run.state, RunTrigger.ABANDON)
            run.abandoned = True
            action.abandoned_runs.append(run.id)
            self._out.append(AbandonRun(run_id=run.id))
            self._finish(run)
        for directory in sorted(self._dirs.values(), key=lambda d: d.name):
            for instance in sorted(directory.open.values(), key=lambda i: i.generation):
                if instance.state is InstanceState.RETIRING:
                    # Its runs were abandoned just now: its hook never ran. Run it, unwatched.
                    instance.state = next_instance_state(instance.state, InstanceTrigger.DISPOSE)
                    self._out.append(
                        DisposeInstance(
                            directory=instance.directory,
                            generation=instance.generation,
                            budget_ms=0,
                            report=False,
                        )
                    )
                self._closed_instance(instance, "the dispose did not finish before the shutdown deadline")

    # --- plumbing ----------------------------------------------------------------------------

    def _emit(self, event: Any) -> None:
        self._seq += 1
        self._out.append(Emit(msgspec.structs.replace(event, seq=self._seq)))

    def _reply(self, reply_to: Any, answer: CloseOutcome | RequestOutcome) -> None:
        self._out.append(Reply(reply_to=reply_to, answer=answer))

    def _reject(self, reply_to: Any, code: RejectCode, error: str, *, close: bool = False) -> None:
        answer: CloseOutcome | RequestOutcome
        if close:
            answer = CloseOutcome(result=CloseResult.REJECTED, error=error, code=code)
        else:
            answer = RequestOutcome(result=CloseResult.REJECTED, error=error, code=code)
        self._reply(reply_to, answer)

    def _flush(self) -> list[Command]:
        out, self._out = self._out, []
        if self._closed and not self._shutdown_announced and self._shutdown is not None:
            # Last of all: the shell stops everything on it, so nothing may follow it.
            self._shutdown_announced = True
            outcome = self._close_outcome(self._shutdown)
            out.append(ShutdownComplete(action_id=self._shutdown.id, outcome=outcome))
        return out


_OUTCOMES = {
    RunState.COMPLETED: Outcome.COMPLETED,
    RunState.INTERRUPTED: Outcome.INTERRUPTED,
    RunState.FAILED: Outcome.FAILED,
}
