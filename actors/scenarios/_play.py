"""Plays a scenario against a real supervisor (real actors, real threads) and reports what happened.

The play is one loop on the calling thread, a host like any other: it reaches the supervisor only
through the public API. It keeps its own timeline, which merges two sources:

- the library's events, read from a subscription in the library's order (the authority on order);
- the runner's own records: the answer to each request it fired (``Supervisor.submit`` returns a
  future per request), and what it does itself (opening a gate).

An answer is recorded once its future is done, *after* every event already delivered: the supervisor
publishes a request's events before it answers the request, so an answer never precedes an event its
request caused. While an answer is awaited the loop waits for events in short slices, so it notices the
answer even when the request caused no event (a rejected cancel).

Every play is checked by the protocol's oracle, ``run_supervisor.protocol.testing.InvariantChecker``:
every library event enters the play through one method, :meth:`_Player._on_event`, which feeds it to the
checker, as :meth:`_Player._submit` and :meth:`_Player._collect_answers` feed it the requests and their
answers. A broken invariant is a failure of the scenario, whatever its ``[expect]`` says.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar, cast

import msgspec
from msgspec import UNSET, UnsetType

from run_supervisor.actors import (
    Continuation,
    Gate,
    LoadFailed,
    RunContext,
    RunHandle,
    Subscription,
    Supervisor,
    SupervisorConfig,
    SupervisorError,
    SupervisorTimeout,
    simulate_crash,
)
from run_supervisor.actors.scenarios._bodies import ScenarioHooks, make_body
from run_supervisor.actors.scenarios._format import (
    CLOSES,
    SHUTDOWNS,
    ActionSpec,
    Decision,
    RunSpec,
    RunStart,
    Scenario,
    ScenarioResult,
    UserAction,
    WhenKind,
    shutdown_reason,
)
from run_supervisor.actors.scenarios._report import (
    ActionReport,
    PartReport,
    RunReport,
    ScenarioReport,
    check_event_expectations,
    check_expectations,
)
from run_supervisor.protocol import (
    ActionResult,
    AnswerForm,
    CancelRun,
    CancelSession,
    CloseAction,
    CloseOutcome,
    CloseRequest,
    CloseResult,
    ConfirmClose,
    DeleteSession,
    DismissForm,
    Event,
    InterruptReason,
    LifecycleCompleted,
    LifecycleConfirmed,
    LifecycleRequested,
    PartSnapshot,
    PartState,
    QueuePolicy,
    ReplyPermission,
    Request,
    RequestOutcome,
    RequestResult,
    RetryBudget,
    RunFinished,
    RunQueued,
    RunRecovered,
    RunSnapshot,
    RunStalled,
    RunStarted,
    RunUnstalled,
    SessionStatus,
    SessionStatusChanged,
    Shutdown,
    ShutdownReason,
    StartRun,
    StepFinished,
    StepStarted,
    part_label,
)
from run_supervisor.protocol.testing import InvariantChecker, InvariantViolation

__all__ = ["play"]


_ANSWER_SLICE_S = 0.002
"""While an answer is awaited, events are waited for in slices this long (then the answers are looked at)."""
_TEARDOWN_GRACE_MS = 500
_CRASH_PROBE = CancelRun(run_id="crash.probe", origin="scenario.crash")
"""Asked just before a crash, answered (``unknown_run``: no scenario id holds a '.') behind every answer
the supervisor has already given; it changes nothing and publishes nothing."""
_CRASH_PROBE_S = 2.0


_NEW_LIFE = frozenset({UserAction.CRASH, UserAction.RESTART})
"""The actions after which a new supervisor starts on the same run journal."""
_RESTART_ANSWERS_S = 2.0
"""How long a restart waits for the answers to requests the old supervisor still had."""
_CALLER_END_S = 2.0
"""How long the play's end waits for each ``wait_run`` caller's thread (its run has finished or its
supervisor has closed by then, so the wait has returned)."""


def _config(scenario: Scenario) -> SupervisorConfig:
    """The supervisor a scenario plays against: its reload policy is the file's (``eager``, the
    contract's reading, unless the file opts into ``lazy``), and so is its stall setting (none: stalls
    are not measured), and so are its extensions' supervisor settings (load budget, interrupt grace,
    retry budget)."""
    config = SupervisorConfig(shutdown_at_exit=False, **{name: getattr(scenario, name) for name in _SETTINGS})
    given = {name: getattr(scenario, name) for name in _SETTINGS_IF_GIVEN}
    return config.replace(**{name: value for name, value in given.items() if value is not None})


_SETTINGS = ("reload_policy", "stall_after_ms", "interrupt_grace_ms", "retry_attempts", "retry_backoff_ms")
"""The supervisor settings a scenario file states, by their names in both (None is a setting: off)."""
_SETTINGS_IF_GIVEN = ("resume_budget", "load_budget_ms")
"""Settings the file may leave out (None): the supervisor's default then stands."""


def play(scenario: Scenario, *, timeout: float = 10.0) -> ScenarioReport:
    """Play one scenario against a fresh supervisor; return its report.

    Never hangs: after ``timeout`` seconds whatever is still going is torn down (active runs end
    ``interrupted`` / ``timeout``) and each thing left hanging is listed in the report's ``failures``.
    """
    hooks = ScenarioHooks(scenario)
    # A story with a crash plays on a run journal (a fresh file), so the next supervisor can recover.
    crashes = any(action.do in _NEW_LIFE for action in scenario.actions)
    with tempfile.TemporaryDirectory(prefix="run-supervisor-scenario-") as folder:
        journal = os.path.join(folder, "runs.journal") if crashes else None
        supervisor = Supervisor.start(_config(scenario), hooks=hooks, journal=journal)
        player = _Player(scenario, supervisor, timeout)
        player.journal = journal
        try:
            player.hooks = hooks
            player.declare()
            player.preload()
            for session, policy in scenario.queue_policies.items():
                supervisor.set_queue_policy(session, policy)
            player.run(hooks)
        finally:
            hooks.end()  # the story is over: a hook still sleeping or held at a gate may go
            if not player.supervisor.closed:
                try:
                    player.supervisor.shutdown(
                        grace_ms=_TEARDOWN_GRACE_MS,
                        reason=ShutdownReason.TEST_TEARDOWN,
                        origin="scenario.end",
                    )
                except SupervisorTimeout:
                    player.failures.append("the supervisor did not shut down within its grace deadline")
            player.end_of_stream()
            player.join_callers()
    return player.report()


# ----------------------------------------------------------------------------------------------------
# What the runner keeps


@dataclass(slots=True)
class _RunRecord:
    spec: RunSpec
    generation: int | None = None
    started: bool = False
    queued: bool = False
    finished: RunFinished | None = None
    """Its ``run.finished``; for a run recovered after a crash, its ``run.recovered`` as one."""
    stalled: bool = False
    """It was flagged stalled (``run.stalled``) at least once."""
    resume_of: str | None = None
    """The run its ``run.started`` said it resumes."""
    action: str | None = None
    """The file's id of the action that interrupted it, named when it finished (a supervisor
    started after a crash or a restart may give another action the same id)."""


@dataclass(slots=True)
class _ActionRecord:
    spec: ActionSpec
    fired: bool = False
    answered: bool = False
    outcome: CloseOutcome | RequestOutcome | None = None
    result_published: bool = False
    """The library published this action's ``action.result`` (lifecycle actions)."""
    completion: int | None = None
    """Index in the timeline of this action's ``lifecycle.completed``."""
    abandoned_runs: tuple[str, ...] = ()
    joined: RunSnapshot | None = None
    """A ``wait_run``: the final snapshot of the run it joined."""


@dataclass(frozen=True, slots=True)
class _Asked:
    """What a request in flight was for: a scenario action, or starting a ``begin`` run."""

    key: str
    begin: bool = False


@dataclass(slots=True)
class _Timeline:
    """The report's ordered events: library events and the runner's own records, in the order seen."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    names: list[tuple[int, str]] = field(default_factory=list)
    """(row index, ``when`` name it stands for), for ``completed_after``."""

    def add(self, kind: str, fields: dict[str, Any]) -> int:
        self.rows.append({"seq": len(self.rows) + 1, "type": kind, **fields})
        return len(self.rows) - 1


class _Player:
    def __init__(self, scenario: Scenario, supervisor: Supervisor, timeout: float) -> None:
        """Plays ``scenario`` on ``supervisor``, subscribed from now, until ``timeout`` seconds from now."""
        self.scenario = scenario
        self.supervisor = supervisor
        self.inbox = supervisor.subscribe()
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.gates = {name: Gate(name) for name in scenario.gates}
        self.timeline = _Timeline()
        self.runs = {run.id: _RunRecord(run) for run in scenario.runs}
        self.actions = {action.id: _ActionRecord(action) for action in scenario.actions}
        self.sessions = dict.fromkeys(scenario.sessions, SessionStatus.IDLE)
        self.lifecycle_ids: dict[str, str] = {}  # the supervisor's action id -> the file's
        self.begin_pending: set[str] = set()
        self.awaiting: dict[Future[CloseOutcome | RequestOutcome], tuple[_Asked, int]] = {}
        """Requests in flight, in firing order, with the checker's token for each."""
        self.ask_ids: dict[tuple[str, str], str] = {}
        """(run, ask name) -> the supervisor's ask id, recorded by the run's body as it opens the ask."""
        self.checker = InvariantChecker()
        """The protocol's oracle: fed every event, request and answer, in order."""
        self.delivered: deque[Event] = deque()
        """Events the subscription has handed over and the play has not entered yet (see _enter_delivered)."""
        self.tokens = itertools.count(1)
        self.ended = False
        self.failures: list[str] = []
        self.journal: str | None = None
        self.hooks: ScenarioHooks | None = None
        self.joins: dict[Future[CloseOutcome | RequestOutcome], str] = {}
        """The answers of ``wait_run`` actions in flight, with the run each joined."""
        self.joiners: list[threading.Thread] = []
        """The callers' threads (each waits on ``RunHandle.wait``); joined at the play's end."""
        self.held: list[str] | None = None
        """While a restart stops the old supervisor: the ``when`` names seen, fired on the new one."""

    def _body(self, spec: RunSpec) -> Callable[[RunContext], None]:
        fault = self.scenario.instance_faults.get(spec.directory)
        reads = fault is not None and fault.loads_badly  # the run reads its instance, which may fail
        return make_body(spec, self.gates, self.ask_ids, reads_instance=reads)

    def preload(self) -> None:
        """Load the file's ``directories`` (those with a ``fingerprint`` with it), as a host does at
        its start; a load that fails is the runner's ``instance.load_failed`` row (the host's call
        raised ``LoadFailed``), after the events the loads published."""
        scenario = self.scenario
        failed: dict[str, str] = {}
        plain = [d for d in scenario.directories if d not in scenario.fingerprints]
        loads: list[tuple[tuple[str, ...], str | None]] = [(tuple(plain), None)] if plain else []
        loads += [((directory,), fingerprint) for directory, fingerprint in scenario.fingerprints.items()]
        for directories, fingerprint in loads:
            try:
                self.supervisor.load(*directories, fingerprint=fingerprint)
            except LoadFailed as failure:
                failed.update(failure.errors)
        if failed:
            self._enter_delivered()
            for directory, error in sorted(failed.items()):
                self._record_own("instance.load_failed", {"directory": directory, "error": error})

    def declare(self) -> None:
        scenario = self.scenario
        known = {*scenario.directories, *(run.directory for run in scenario.runs), *scenario.instance_faults}
        self.supervisor.declare(*sorted(known))

    # --- the loop -------------------------------------------------------------------------------

    def run(self, hooks: ScenarioHooks) -> None:
        self.hooks = hooks
        for spec in self.scenario.runs:
            if spec.start is RunStart.BEGIN:
                self.begin_pending.add(spec.id)
                self._submit(_start(spec), _Asked(spec.id, begin=True), self._body(spec))
        if not self.begin_pending:
            self._fire(WhenKind.BEGIN.value)
        while True:
            self._collect_answers()
            if self._finished():
                return
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                self._time_out(hooks)
                return
            if self.ended:  # no event can come any more: only answers
                if not self.awaiting:
                    return
                wait_futures(list(self.awaiting), timeout=remaining, return_when=FIRST_COMPLETED)
                continue
            try:
                event = self.inbox.get(
                    timeout=min(remaining, _ANSWER_SLICE_S) if self.awaiting else remaining
                )
            except SupervisorTimeout:
                continue
            except EOFError:
                self.ended = True
                continue
            self._on_event(event)

    def _finished(self) -> bool:
        """Nothing more can happen: every request answered, every started run finished, none queued,
        every accepted lifecycle action completed."""
        if self.begin_pending or self.awaiting or (self.inbox.pending and not self.ended):
            return False
        if any(r.queued or (r.started and r.finished is None) for r in self.runs.values()):
            return False
        return not any(self._never_completed(action) for action in self.actions.values())

    @staticmethod
    def _never_completed(action: _ActionRecord) -> bool:
        return (
            isinstance(action.spec.do, CloseAction)
            and action.outcome is not None
            and not action.outcome.rejected
            and action.completion is None
        )

    def _submit(
        self, request: Request, asked: _Asked, body: Callable[[RunContext], None] | None = None
    ) -> None:
        token = next(self.tokens)
        self.checker.request(token, request)
        self.awaiting[self.supervisor.submit(request, body=body)] = (asked, token)

    def _collect_answers(self) -> None:
        done = [future for future in self.awaiting if future.done()]
        if not done:
            return
        self._enter_delivered()  # every event published before these answers comes first
        for future in done:
            run = self.joins.get(future)
            unseen = run is not None and not self.ended and self.runs[run].finished is None
            if unseen and not future.result().rejected:
                continue  # the run's result reached its caller before its run.finished reached us
            self._enter_answer(future)

    def _enter_delivered(self) -> None:
        """Enter every event the subscription has delivered, in its order. The batch is kept on the
        player, not in a local: a crash fired by one of its events enters the rest first (they reached
        the host before it killed the backend), so no event of the dead supervisor is read after the
        new one has taken its place."""
        self.delivered.extend(self.inbox.drain())
        while self.delivered:
            self._on_event(self.delivered.popleft())

    def _enter_answer(self, future: Future[CloseOutcome | RequestOutcome]) -> None:
        entry = self.awaiting.pop(future, None)
        if entry is None:
            return  # entered already, or asked of a supervisor that crashed: the answer died with it
        asked, token = entry
        outcome = future.result()
        if self.joins.pop(future, None) is None:  # a caller's wait is no request of the protocol's
            self.checker.answer(token, outcome)
        self._on_answer(asked, outcome)

    # --- firing actions -------------------------------------------------------------------------

    def _fire(self, name: str) -> None:
        for record in self.actions.values():
            if record.fired or record.spec.when.raw != name:
                continue
            record.fired = True
            spec = record.spec
            if spec.do is UserAction.OPEN_GATE:  # the runner's own action: no request
                assert spec.gate is not None
                self.gates[spec.gate].open()
                if self.hooks is not None:
                    self.hooks.open_gate(spec.gate)  # a load held at it (an instance fault)
                self._on_answer(_Asked(spec.id), RequestOutcome(result=RequestResult.OK))
                continue
            if spec.do is UserAction.CRASH:  # the runner's own action too: the process "dies"
                self._crash()
                self._on_answer(_Asked(spec.id), RequestOutcome(result=RequestResult.OK))
                continue
            if spec.do is UserAction.RESTART:  # a shutdown, then a new supervisor on the journal
                self._restart(spec)
                continue
            if spec.do is UserAction.WAIT_RUN:  # a caller joins the run's result
                self._join(spec)
                continue
            body = None
            if spec.do is UserAction.START_RUN:
                assert spec.run is not None
                body = self._body(self.runs[spec.run].spec)
            self._submit(self._request_for(spec), _Asked(spec.id), body)

    def _request_for(self, spec: ActionSpec) -> Request:
        do = spec.do
        if isinstance(do, CloseAction):
            assert spec.origin is not None
            if do in SHUTDOWNS:
                assert spec.grace_ms is not None
                return Shutdown(
                    reason=shutdown_reason(do), origin=spec.origin, grace_ms=spec.grace_ms, tag=spec.id
                )
            assert do in CLOSES and spec.mode is not None
            directories = (spec.directory,) if spec.directory is not None else ()
            return CloseRequest(
                do=do,
                mode=spec.mode,
                directories=directories,
                fingerprint=spec.fingerprint,
                reload_policy=spec.reload_policy,
                **_asked_by(spec),
            )
        if do is UserAction.CONFIRM:
            return self._confirm_request(spec)
        if do is UserAction.CANCEL_SESSION:
            assert spec.session is not None
            return CancelSession(session=spec.session, **_asked_by(spec))
        if do is UserAction.DELETE_SESSION:
            assert spec.session is not None
            return DeleteSession(session=spec.session, confirm=spec.confirm, **_asked_by(spec))
        assert spec.run is not None
        if do is UserAction.CANCEL:
            return CancelRun(run_id=spec.run, **_asked_by(spec))
        if do is UserAction.START_RUN:
            return _start(self.runs[spec.run].spec, tag=spec.id)
        # A reply names its ask when the file does, else its run (the run's one open ask of that kind).
        to = _AskAddress(run_id=spec.run, ask_id=None)
        if spec.ask is not None:
            to = _AskAddress(run_id=None, ask_id=self._ask_id(spec.run, spec.ask))
        if do is UserAction.REPLY_PERMISSION:
            approve, always = spec.decision is Decision.APPROVE, spec.always
            return ReplyPermission(approve=approve, always=always, message=spec.message, tag=spec.id, **to)
        if do is UserAction.ANSWER_FORM:
            return AnswerForm(answer=spec.answer or "", tag=spec.id, **to)
        assert do is UserAction.CANCEL_FORM, do
        return DismissForm(message=spec.message, tag=spec.id, **to)

    def _confirm_request(self, spec: ActionSpec) -> ConfirmClose:
        """``confirm_close`` of the file's close ``spec.action``, by the supervisor's id for it (a close
        not answered yet has none: the confirm names an id that does not exist, rejected
        ``unknown_action``, as it should be)."""
        assert spec.action is not None
        close = self.actions[spec.action].outcome
        known = close.action_id if isinstance(close, CloseOutcome) else None
        if known is None:  # its answer may come after its events: its lifecycle.requested names it
            known = next((own for own, file in self.lifecycle_ids.items() if file == spec.action), None)
        action_id = known or f"{spec.action} (not asked yet)"
        return ConfirmClose(action_id=action_id, origin=spec.origin, tag=spec.id, grace_ms=spec.grace_ms)

    def _ask_id(self, run: str, ask: str) -> str:
        """The supervisor's id of a named ask: its body records it when it opens the ask (before the
        step's event). An ask not opened yet has none: the reply names an id that does not exist and
        is rejected ``unknown_ask``, as it should be."""
        return self.ask_ids.get((run, ask), f"{run}:{ask} (not asked yet)")

    # --- what comes back ------------------------------------------------------------------------

    def _on_answer(self, asked: _Asked, outcome: CloseOutcome | RequestOutcome) -> None:
        if asked.begin:
            self.begin_pending.discard(asked.key)
            if not self.begin_pending:
                self._fire(WhenKind.BEGIN.value)
            return
        record = self.actions[asked.key]
        record.answered, record.outcome = True, outcome
        if isinstance(outcome, RequestOutcome) and outcome.action_id is not None:
            self._name_session_action(outcome.action_id, asked.key)
        if record.result_published:
            return  # the library's own action.result is already in the timeline
        spec = record.spec
        if (
            spec.do in SHUTDOWNS
            and isinstance(outcome, CloseOutcome)
            and outcome.result is CloseResult.FORCED
        ):
            # A shutdown asked after the supervisor had closed: the facade answers it with the first
            # shutdown's outcome and publishes nothing (its stream has ended). The contract still gives
            # it its own request and completion: the runner records them, as it witnessed them.
            self._record_own(
                "lifecycle.requested",
                {"action": spec.id, "do": spec.do, "mode": spec.do, "origin": spec.origin, "directories": []},
            )
            record.completion = self._record_own("lifecycle.completed", {"action": spec.id})
            record.abandoned_runs = outcome.abandoned_runs
            self._name(record.completion, f"{spec.id}.completed")
        fields: dict[str, Any] = {"action": spec.id, "result": outcome.result}
        if record.joined is not None:  # a wait_run: the result it joined
            joined = record.joined
            fields.update(run=joined.run_id, outcome=joined.outcome, reason=joined.reason)
        index = self._record_own("action.result", fields)
        self._name(index, f"{spec.id}.{outcome.result}")

    def _crash(self) -> None:
        """The supervisor dies as a kill would; a new one starts on the same journal.

        What a subscriber already received stays in the timeline (it was committed), and so does every
        answer the supervisor had given (a request answered before the kill is not in flight); what was
        not delivered is lost with the process, as are the answers to requests still in flight (a
        shutdown's, given at its completion). The new
        supervisor's ``run.recovered`` events enter the timeline as its first events, each standing for
        its run's ``<run>.finished``; its later events follow (the report's ``seq`` keeps increasing).
        The oracle checks the new supervisor from its start: the old one never ended, by definition."""
        self._enter_delivered()  # the rest of the batch whose event fired this crash, and what came since
        self._answers_given()
        answered = [future for future in self.awaiting if future.done()]  # held before the kill
        self._enter_delivered()  # every event published before those answers
        for future in answered:
            self._enter_answer(future)
        simulate_crash(self.supervisor)
        self._enter_delivered()  # delivered before the kill: committed, so seen
        self.inbox.close()
        lost = [asked for asked, _ in self.awaiting.values()]
        self.awaiting.clear()
        for asked in lost:  # a `begin` start whose answer died with the process still counts as asked
            if asked.begin:
                self.begin_pending.discard(asked.key)
                if not self.begin_pending:
                    self._fire(WhenKind.BEGIN.value)
        self.checker = InvariantChecker()
        self.sessions = dict.fromkeys(self.sessions, SessionStatus.IDLE)  # a new process: nothing busy
        self._next_life()

    def _name_session_action(self, action_id: str, file_id: str) -> None:
        """A session cancel or delete names its runs' ends by the supervisor's id (``cs-N``), known to
        the runner with its answer, after those ends: they are renamed to the file's id now, and
        later rows are named by it as they come."""
        self.lifecycle_ids.setdefault(action_id, file_id)
        for row in self.timeline.rows:
            if row.get("action") == action_id:
                row["action"] = file_id
        for run in self.runs.values():
            if run.action == action_id:
                run.action = file_id

    def _join(self, spec: ActionSpec) -> None:
        """A caller waits for the run's result on a thread of its own (``RunHandle.wait``, as a host
        thread would); its answer is ``ok`` with the run's final snapshot once the run has finished
        (entered after the run's ``run.finished``), or ``rejected`` with the wait's error."""
        assert spec.run is not None
        record = self.actions[spec.id]
        answer: Future[CloseOutcome | RequestOutcome] = Future()
        handle = RunHandle(self.supervisor, spec.run)
        budget = max(0.0, self.deadline - time.monotonic())

        def wait() -> None:
            try:
                record.joined = handle.wait(timeout=budget)
            except SupervisorError as error:
                answer.set_result(
                    RequestOutcome(result=RequestResult.REJECTED, error=str(error), code=error.code)
                )
            else:
                answer.set_result(RequestOutcome(result=RequestResult.OK))

        thread = threading.Thread(target=wait, name=f"scenario-wait-{spec.id}", daemon=True)
        self.joiners.append(thread)
        self.joins[answer] = spec.run
        self.awaiting[answer] = (_Asked(spec.id), 0)
        thread.start()

    def _restart(self, spec: ActionSpec) -> None:
        """A graceful restart: the supervisor shuts down (reason ``shutdown``, the action's grace and
        origin; its events and answer are the action's, as a ``shutdown``'s are), its stream is read to
        its end and its checker finishes; then a new supervisor starts on the same run journal and
        recovers what is unfinished (nothing, unless a body was abandoned). ``when`` names seen while
        the old one stopped fire on the new one, so ``<restart>.completed`` starts work after it."""
        assert spec.grace_ms is not None and spec.origin is not None and self.hooks is not None
        self.held = []
        request = Shutdown(
            reason=ShutdownReason.SHUTDOWN, origin=spec.origin, grace_ms=spec.grace_ms, tag=spec.id
        )
        self._submit(request, _Asked(spec.id))
        limit = spec.grace_ms / 1000.0 + _RESTART_ANSWERS_S
        try:
            self.supervisor.wait_closed(timeout=limit)
        except SupervisorTimeout:
            self.failures.append(f"action {spec.id} (restart): the supervisor did not shut down in time")
        self._read_to_end(limit)
        wait_futures(list(self.awaiting), timeout=_RESTART_ANSWERS_S)
        self._collect_answers()
        self.awaiting.clear()  # anything still unanswered died with the old supervisor
        self.inbox.close()
        self._finish_checker()
        self.checker = InvariantChecker()
        self.lifecycle_ids = {}  # the new supervisor names its actions afresh
        self.sessions = dict.fromkeys(self.sessions, SessionStatus.IDLE)
        self._next_life()
        held, self.held = self.held, None
        for name in held:
            self._fire(name)

    def _next_life(self) -> None:
        """A new supervisor on the same run journal: it recovers what is unfinished, then (with the
        file's ``resumes``) offers each recovered run to the runner's resume callback, which answers
        the run the file names. The runner subscribes before the offers (``on_start``), so every
        event after the recovery's is in the timeline; the recovery's enter it first."""
        assert self.hooks is not None
        inbox: list[Subscription] = []
        self.supervisor = Supervisor.start(
            _config(self.scenario),
            hooks=self.hooks,
            journal=self.journal,
            resume=None if self.scenario.resumes is None else self._continuation,
            on_start=lambda supervisor: inbox.append(supervisor.subscribe()),
        )
        (self.inbox,) = inbox
        self.ended = False
        self.declare()
        for recovered in self.supervisor.recovery_events():
            self._on_event(recovered)

    def _continuation(self, recovered: RunRecovered) -> Continuation | None:
        """The file's resume policy: the run that continues ``recovered`` (None: it is declined)."""
        assert self.scenario.resumes is not None
        follow = self.scenario.resumes.get(recovered.run_id)
        if follow is None:
            return None
        spec = self.runs[follow].spec
        return Continuation(body=self._body(spec), **_run_options(spec))

    def _read_to_end(self, limit: float) -> None:
        """Enter every event of the current subscription until its stream ends (bounded)."""
        end = min(self.deadline, time.monotonic() + limit)
        self._enter_delivered()
        while (left := end - time.monotonic()) > 0:
            try:
                self._on_event(self.inbox.get(timeout=left))
            except SupervisorTimeout:
                break
            except EOFError:
                return
        self.failures.append("the stream of the supervisor that restarted did not end in time")

    def _finish_checker(self) -> None:
        try:
            self.checker.finish()
        except InvariantViolation:
            pass  # each violation is listed in the report's failures
        self.failures.extend(f"invariant broken: {violation}" for violation in self.checker.violations)

    def _answers_given(self) -> None:
        """Wait (bounded) until every answer the supervisor has given so far has reached the runner:
        it answers in order and its answers reach a host in that order, so once a probe asked now is
        answered, so is every request it answered before. Which answers a crash loses is then the
        story's (those the supervisor had not given), not the machine's load (how late an answer's
        thread ran)."""
        probe = self.supervisor.submit(_CRASH_PROBE)
        wait_futures([probe], timeout=max(0.0, min(_CRASH_PROBE_S, self.deadline - time.monotonic())))

    def _record_own(self, kind: str, fields: dict[str, Any]) -> int:
        return self.timeline.add(kind, fields)

    def _name(self, index: int, name: str, *, fire: bool = True) -> None:
        self.timeline.names.append((index, name))
        if fire and self.held is not None:
            self.held.append(name)  # the old supervisor is stopping: fired on the new one
        elif fire:
            self._fire(name)

    def _on_event(self, event: Event, *, fire: bool = True) -> None:
        """Every library event enters the play here, in the library's order."""
        self.checker.event(event)
        if isinstance(event, LifecycleRequested) and event.tag is not None:
            self.lifecycle_ids.setdefault(event.action_id, event.tag)
        index = self.timeline.add(*self._row(event))
        for name in self._observe(event, index):
            self._name(index, name, fire=fire)

    def _file_action(self, action_id: str | None) -> str | None:
        return None if action_id is None else self.lifecycle_ids.get(action_id, action_id)

    def _row(self, event: Event) -> tuple[str, dict[str, Any]]:
        """The event as the report shows it: the contract's names (``run``, ``action``), the file's ids."""
        data: dict[str, Any] = msgspec.to_builtins(event)
        kind = data.pop("type")
        if isinstance(event, RunRecovered):
            # The contract's stream ends each started run with one run.finished: a recovered run's
            # is this one (reason crash), marked as recovered by the supervisor that came next.
            kind = "run.finished"
            data = {"action_id": None, **data, "recovered": True}
        data.pop("seq", None)
        data.pop("parts", None)
        tag = data.pop("tag", None)
        if "run_id" in data:
            data["run"] = data.pop("run_id")
        if kind.startswith("ask.") and tag is not None:
            data["action"] = tag  # the file's reply action that decided this ask
        if "action_id" in data:
            action = data.pop("action_id")
            data["action"] = tag if tag is not None else self._file_action(action)
        if data.get("superseded_by") is not None:
            data["superseded_by"] = self._file_action(data["superseded_by"])
        if isinstance(event, RunStalled):  # the closes it holds, by the file's ids
            data["holding"] = [self._file_action(action_id) for action_id in event.holding]
        if isinstance(event, LifecycleConfirmed):  # the close confirmed; `confirm` the file's action
            data["action"], data["confirm"] = self._file_action(event.action_id), tag
        return kind, data

    def _observe(self, event: Event, index: int) -> list[str]:
        """Update the records; return the ``when`` names the event stands for."""
        if isinstance(event, RunStarted):
            record = self.runs.get(event.run_id)
            if record is not None:
                record.started, record.queued, record.generation = True, False, event.generation
                record.resume_of = event.resume_of
            return [f"{event.run_id}.started"]
        if isinstance(event, RunQueued):
            if event.run_id in self.runs:
                self.runs[event.run_id].queued = True
            return []
        if isinstance(event, RunFinished | RunRecovered):
            if event.run_id in self.runs:
                self.runs[event.run_id].finished = _as_finished(event)
                self.runs[event.run_id].queued = False
                if isinstance(event, RunFinished):
                    self.runs[event.run_id].action = self._file_action(event.action_id)
            return [f"{event.run_id}.finished"]
        if isinstance(event, StepStarted):
            return [f"{event.run_id}.{event.step}.started"]
        if isinstance(event, StepFinished):
            return [f"{event.run_id}.{event.step}.finished"]
        if isinstance(event, SessionStatusChanged):
            self.sessions[event.session] = event.status
            return [f"{event.session}.retry"] if event.status is SessionStatus.RETRY else []
        if isinstance(event, RunStalled):
            if event.run_id in self.runs:
                self.runs[event.run_id].stalled = True
            return [f"{event.run_id}.stalled"]
        if isinstance(event, RunUnstalled):
            return [f"{event.run_id}.unstalled"]
        tag = event.tag if isinstance(event, LifecycleCompleted | ActionResult) else None
        action = self.actions.get(tag) if tag is not None else None
        if action is None:
            return []
        if isinstance(event, LifecycleCompleted):
            action.completion = index
            action.abandoned_runs = event.abandoned_runs
            return [f"{action.spec.id}.completed"]
        assert isinstance(event, ActionResult)
        action.result_published = True
        return [f"{action.spec.id}.{event.result}"]

    def _time_out(self, hooks: ScenarioHooks) -> None:
        for record in self.runs.values():
            if record.started and record.finished is None:
                self.failures.append(
                    f"run {record.spec.id} was still active at the timeout ({self.timeout:g} s)"
                )
            elif record.queued:
                self.failures.append(f"run {record.spec.id} was still queued at the timeout")
        for action in self.actions.values():
            if action.fired and not action.answered:
                self.failures.append(f"action {action.spec.id} ({action.spec.do}) was never answered")
            elif self._never_completed(action):
                self.failures.append(f"action {action.spec.id} ({action.spec.do}) never completed")
        if not self.failures:
            self.failures.append(f"the scenario did not end within {self.timeout:g} s")
        # Tear down what hung: active runs end interrupted / timeout; their events go in the report too.
        hooks.end()
        if not self.supervisor.closed:
            try:
                self.supervisor.shutdown(
                    grace_ms=_TEARDOWN_GRACE_MS, reason=ShutdownReason.TIMEOUT, origin="scenario.timeout"
                )
            except SupervisorTimeout:
                self.failures.append("the timeout teardown did not finish within its grace deadline")
        for event in self.inbox.drain():
            self._on_event(event, fire=False)

    def join_callers(self) -> None:
        """The ``wait_run`` callers' threads end once their run has finished or the supervisor has
        closed (bounded; a thread still waiting is a failure, never a hang)."""
        for thread in self.joiners:
            thread.join(_CALLER_END_S)
            if thread.is_alive():
                self.failures.append(f"the caller's thread {thread.name} was still waiting at the end")

    def end_of_stream(self) -> None:
        """The supervisor has shut down: the checker reads the rest of the stream (the teardown's
        events, which the report leaves out) and checks that everything ended."""
        for event in self.inbox.drain():
            self.checker.event(event)
        self.inbox.close()
        self._finish_checker()

    # --- the report -----------------------------------------------------------------------------

    def report(self) -> ScenarioReport:
        # An ask's row names the file's ask too (an extension): its body recorded the id as it opened
        # it, which may be after the row entered the timeline.
        ask_names = {ask_id: name for (_, name), ask_id in self.ask_ids.items()}
        for row in self.timeline.rows:
            if row["type"].startswith("ask.") and row.get("ask_id") in ask_names:
                row["ask"] = ask_names[row["ask_id"]]
        runs = {run_id: self._run_report(record) for run_id, record in self.runs.items()}
        actions = {action_id: _action_report(record) for action_id, record in self.actions.items()}
        draft = ScenarioReport(
            scenario=self.scenario.name,
            file=self.scenario.file,
            passed=False,
            runs=runs,
            actions=actions,
            sessions=dict(self.sessions),
            events=self.timeline.rows,
            failures=[],
            reload_policy=self.scenario.reload_policy,
        )
        completions = {aid: r.completion for aid, r in self.actions.items() if r.completion is not None}
        failures = [
            *check_expectations(self.scenario.expect, draft, self.timeline.names, completions),
            *check_event_expectations(self.scenario.expect_events, draft, self.timeline.names),
            *self.failures,
        ]
        return msgspec.structs.replace(draft, passed=not failures, failures=failures)

    def _run_report(self, record: _RunRecord) -> RunReport:
        done = record.finished
        if done is None:
            return RunReport(
                session=record.spec.session,
                directory=record.spec.directory,
                generation=record.generation,
                outcome=None,
                reason=None,
                origin=None,
                action=None,
                phase=None,
                error=None,
                tool_parts=[],
                stalled=record.stalled,
            )
        return RunReport(
            session=record.spec.session,
            directory=record.spec.directory,
            generation=record.generation,
            outcome=done.outcome,
            reason=self._contract_reason(done),
            origin=done.origin,
            action=record.action,
            phase=done.phase,
            error=done.error,
            tool_parts=[_part_report(part) for part in done.parts],
            abandoned=done.abandoned,
            queue_reason=done.reason if done.reason in _QUEUE_REASONS else UNSET,
            stalled=record.stalled,
            resume_of=_given(record.resume_of),
        )

    def _contract_reason(self, done: RunFinished) -> InterruptReason | None:
        """The report keeps the contract's reasons: a run a queue policy ended is reported as the
        cancel it amounts to -- ``coalesced``: ``user_cancel`` (the user's newer prompt replaced
        it); ``dropped``: the reason its session's active run (its ``origin``) was interrupted with.
        The library's own reason is the extension ``queue_reason`` (and stays on ``run.finished``)."""
        if done.reason is InterruptReason.DROPPED:
            record = self.runs.get(done.origin or "")
            ended = record.finished if record is not None else None
            cause = ended.reason if ended is not None else None
            return InterruptReason.USER_CANCEL if cause is None or cause in _QUEUE_REASONS else cause
        if done.reason is InterruptReason.COALESCED:
            return InterruptReason.USER_CANCEL
        return done.reason


_QUEUE_REASONS = frozenset({InterruptReason.COALESCED, InterruptReason.DROPPED})


_RECOVERED_AS_FINISHED = tuple(
    name for name in RunFinished.__struct_fields__ if name in RunRecovered.__struct_fields__
)
"""The fields a ``run.recovered`` shares with ``run.finished`` (its seq and epoch, run, session, outcome,
reason, origin, phase, generation and parts): a recovered run is entered as finished with these."""


def _as_finished(event: RunFinished | RunRecovered) -> RunFinished:
    if isinstance(event, RunFinished):
        return event
    return RunFinished(action_id=None, **{name: getattr(event, name) for name in _RECOVERED_AS_FINISHED})


class _AskedBy(TypedDict):
    """Who asks a close or a cancel (its origin), with what grace, tagged with the file's action id."""

    origin: str
    grace_ms: int | None
    tag: str


def _asked_by(spec: ActionSpec) -> _AskedBy:
    assert spec.origin is not None
    return _AskedBy(origin=spec.origin, grace_ms=spec.grace_ms, tag=spec.id)


class _AskAddress(TypedDict):
    """Whom a reply is for: an ask by its id, or (``ask_id`` None) the run's one open ask of its kind."""

    run_id: str | None
    ask_id: str | None


class _RunOptions(TypedDict):
    """What a run of the file starts with, the same in its ``StartRun`` and in the ``Continuation``
    that resumes it after a crash."""

    run_id: str
    directory: str
    queue_policy: QueuePolicy | None
    deadline_ms: int | None
    interrupt_grace_ms: int | None
    retry_budget: RetryBudget | None


def _run_options(spec: RunSpec) -> _RunOptions:
    """Each option is the spec's field of the same name, but ``run_id``: the spec's ``id``."""
    given = {name: getattr(spec, name) for name in _RunOptions.__annotations__ if name != "run_id"}
    return cast(_RunOptions, {**given, "run_id": spec.id})


def _start(spec: RunSpec, tag: str | None = None) -> StartRun:
    """``tag``: the ``start_run`` action, named as the action of a run this start coalesces."""
    return StartRun(
        session=spec.session,
        parent_run_id=spec.parent,
        tag=tag,
        resume_of=spec.resume_of,
        **_run_options(spec),
    )


_T = TypeVar("_T")


def _given(value: _T | None) -> _T | UnsetType:
    """A report's optional key: left out (``UNSET``) where the library has no value."""
    return UNSET if value is None else value


def _part_report(part: PartSnapshot) -> PartReport:
    interrupted = part.state is PartState.INTERRUPTED
    return PartReport(
        tool=part.tool,
        state=part.state,
        tool_started=part.tool_started,
        label=part_label(part),
        call_id=_given(part.call_id),
        note=_given(part.note),
        message=_given(part.message),
        reason=part.reason if interrupted else msgspec.UNSET,
        origin=part.origin if interrupted else msgspec.UNSET,
        phase=part.phase if interrupted else msgspec.UNSET,
    )


def _action_report(record: _ActionRecord) -> ActionReport:
    do = record.spec.do
    outcome = record.outcome
    if not record.fired:
        return ActionReport(do=do, result=ScenarioResult.NOT_FIRED)
    if outcome is None:
        return ActionReport(do=do, result=None)
    if outcome.rejected:
        return ActionReport(
            do=do,
            result=outcome.result,
            error=outcome.error or "rejected, without a reason",
            code=_given(outcome.code),
        )
    if record.joined is not None:
        return ActionReport(
            do=do, result=outcome.result, outcome=record.joined.outcome, reason=record.joined.reason
        )
    if not isinstance(outcome, CloseOutcome):
        if outcome.action_id is not None:  # a session cancel or delete: what it stopped
            return ActionReport(
                do=do,
                result=outcome.result,
                action_id=outcome.action_id,
                interrupted_runs=sorted(outcome.interrupted_runs),
            )
        return ActionReport(do=do, result=outcome.result)
    shutdown = do in SHUTDOWNS or do is UserAction.RESTART
    return ActionReport(
        do=do,
        result=outcome.result,
        action_id=outcome.action_id,
        completed=record.completion is not None,
        completed_directories=list(outcome.completed_directories),
        pending_directories=list(outcome.pending_directories),
        blocking_runs=list(outcome.blocking_runs),
        interrupted_runs=list(outcome.interrupted_runs),
        # Known at completion, after the answer: taken from the lifecycle.completed event.
        abandoned_runs=sorted(record.abandoned_runs or outcome.abandoned_runs) if shutdown else msgspec.UNSET,
    )
