"""Runs owned by the client ("external runs"): the agent loop lives in another process.

An external run is a normal run whose Python body is a small *driver*: it takes the client's reports
(steps, tool parts, asks, the end) from a queue and makes the same ``RunContext`` calls an in-process
body would, so closes, deferral, queueing and shutdown treat it exactly like any other run. What the
supervisor tells the run reaches the client as host events on the event stream:

- ``external.interrupt`` ``{run_id, reason, origin, action_id}``: the run was interrupted; the client
  should stop, and report ``end`` (its last reports before that still count if they are ``end``).
- ``external.answer`` ``{run_id, ask_id, form, dismissed, approved, message, answer}``: the user
  answered its ask. ``form`` says what was asked (a form, or a permission), ``dismissed`` that a form
  was dismissed (with a message: feedback for the model) -- never the same shape as a permission
  rejected with feedback.
- ``external.refused`` ``{run_id, report, code, error, call_id}``: a report kept while the run was
  queued (answered ``ok`` with ``queued: true``) was not applied when the run started.

**The answer to a report is the truth.** A report is answered ``ok`` only once it took effect: the
driver hands it to the supervisor and reads, behind it, whether the core applied it
(``SupervisorCore.report_echo``). A tool part reported in opencode's states (``pending -> running
-> completed | error``) or this library's (with ``prepared``) moves through every state the report
stands for (``protocol._rules.PART_REPORTS``); one that cannot (a part does not go back, and
``completed`` is final) is rejected, naming the part's state, and changes nothing.

**Retries.** Reports a client may send again after a timeout are idempotent: a report equal to the
run's previous one (heartbeats aside) is answered as that one was and does nothing more; a part
state the part is in already is ``ok`` and changes nothing (``pending`` again for a known
``call_id`` included); an ask equal to one the run raised for the same ``call_id`` answers that
ask's id and opens nothing (without a ``call_id``: while that ask is open); an ``end`` equal to the
one that ended the run is ``ok``. Not idempotent beyond the previous-report rule: a ``pending``
without ``call_id`` (it begins a new part) and a ``step`` without ``step`` id (it numbers a new one).

**The lease rule.** Every report (``heartbeat`` included) renews the run's lease for ``lease_ms``.
If the lease runs out while the run is active, the run is interrupted with reason ``timeout`` (origin
``lease``), exactly like a cancel. If a further lease passes after any interrupt without an ``end``,
the driver ends the run itself (it finishes ``interrupted`` with the interrupt's reason). So a client
that crashed never leaves its session busy for more than two leases. At shutdown, a run that does
not end within the grace deadline is abandoned like any body that ignores its cancellation.

**A queued run** keeps the reports sent to it, in order, and applies them when it starts: each is
answered at once ``ok`` with ``queued: true`` (not applied yet; ``external.refused`` tells of one
that then does nothing), up to ``HELD_REPORTS`` reports and ``HELD_BYTES`` bytes per run and
``HELD_BYTES_TOTAL`` in all; past that a report is rejected ``session_busy`` (report again once the
run has started). Heartbeats to a queued run are ``ok`` and not kept: its lease starts with it.

**A finished run** answers a report as it answers a cancel: ``run_finished`` while the supervisor
remembers it (a run recovered after a crash included), ``unknown_run`` once it is forgotten.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from run_supervisor.actors import _validate as check
from run_supervisor.actors._api import Supervisor
from run_supervisor.actors._async_body import AsyncCancelToken, AsyncRunContext
from run_supervisor.actors._context import RunContext, ToolCall
from run_supervisor.actors._errors import RunInterrupted, SupervisorError
from run_supervisor.actors._link import link_of
from run_supervisor.actors._supervisor import Query
from run_supervisor.protocol import (
    AskKind,
    CancelRun,
    DeliverAnswer,
    InterruptReason,
    PartState,
    Question,
    RejectCode,
    RequestResult,
    RunState,
    StartRun,
    StepKind,
)
from run_supervisor.protocol._core import ReportEcho, SupervisorCore
from run_supervisor.protocol._payloads import FormAnswer
from run_supervisor.protocol._rules import PART_REPORTS

__all__ = [
    "DEFAULT_LEASE_MS",
    "HELD_BYTES",
    "HELD_BYTES_TOTAL",
    "HELD_REPORTS",
    "MAX_LEASE_MS",
    "MIN_LEASE_MS",
    "AnswerNotice",
    "AskReport",
    "EndReport",
    "ExternalReport",
    "ExternalRuns",
    "HeartbeatReport",
    "InterruptNotice",
    "PartUpdate",
    "RefusedNotice",
    "ReportOutcome",
    "RetryUpdate",
    "StepUpdate",
    "decode_report",
]

DEFAULT_LEASE_MS = 30_000
MIN_LEASE_MS = 50
MAX_LEASE_MS = 3_600_000
HELD_REPORTS = 64
"""Reports a queued run keeps for when it starts (each answered ``ok``, ``queued: true``)."""
HELD_BYTES = 1 << 20
"""Bytes of reports (as JSON) a queued run keeps."""
HELD_BYTES_TOTAL = 16 << 20
"""Bytes of reports every queued run together keeps."""


class _Report(msgspec.Struct, frozen=True, tag_field="type", kw_only=True, forbid_unknown_fields=True):
    pass


class StepUpdate(_Report, frozen=True, tag="step"):
    """The client's loop entered (``finished=false``) or left (``finished=true``) a step."""

    kind: StepKind
    step: str | None = None
    """Defaults to the kind, then ``kind-2``... (as in-process); give it to pair start and finish."""
    finished: bool = False
    tool: str | None = None
    """The tool whose call this step serves (``tool_input``, ``tool_exec``...), as in-process."""
    call_id: str | None = None
    """The call it serves: ``run.step.started`` / ``run.step.finished`` name it, so a UI puts the step
    on that tool card."""


class PartUpdate(_Report, frozen=True, tag="part"):
    """A tool part moved to ``state``; ``pending`` begins a new part of that tool."""

    tool: str
    state: PartState
    call_id: str | None = None
    """Names the part (unique in the run; default ``call-1``, ``call-2``...); without it, a state
    applies to the latest part of ``tool``."""
    message: str | None = None
    """With ``error``: what the tool said."""


class AskReport(_Report, frozen=True, tag="ask"):
    """The client asks the user: a permission (``form=false``) or a form, with what to show (the
    ``ask.requested`` event carries it). The answer comes back as an ``external.answer`` event (or,
    for a rejection without feedback, an interrupt). Answered with its ``ask_id``."""

    form: bool = False
    tool: str | None = None
    call_id: str | None = None
    """The tool part it gates (default: the run's latest unfinished part)."""
    title: str | None = None
    command: str | None = None
    options: tuple[str, ...] = ()
    questions: tuple[str | Question, ...] = ()
    """Form questions: text, or objects with the fields of ``Question``."""
    data: dict[str, Any] | None = None
    key: str | None = None
    """Permission: what an "always" grant of this ask covers (``payload.key``, e.g. ``bash:git
    status``): a reply ``always: true`` approves the session's open and later asks with this key."""


class RetryUpdate(_Report, frozen=True, tag="retry"):
    """The client's loop is retrying a provider call: the session's status shows ``retry`` with
    these until the loop's next step, part change or ask (``RunContext.retrying``)."""

    attempt: int
    """1 for the first retry."""
    message: str
    """Why (the provider's error), for the user."""
    next_at_ms: int | None = None
    """When the next attempt is due, Unix epoch milliseconds (null: unknown)."""


class HeartbeatReport(_Report, frozen=True, tag="heartbeat"):
    """Nothing happened, but the client is alive: renews the lease."""

    progress: bool = False
    """The client's loop made progress (e.g. a chunk of its provider stream arrived): as
    ``ctx.heartbeat()`` in-process, the run is not stalled (it clears ``run.stalled``). False: only
    the lease is renewed -- a client's keep-alive timer says nothing about its loop."""


class EndReport(_Report, frozen=True, tag="end"):
    """The client's loop is done: ``error`` null means it returned, else it failed with it."""

    error: str | None = None


ExternalReport = StepUpdate | PartUpdate | AskReport | RetryUpdate | HeartbeatReport | EndReport


# --- What the host tells the client (events on the stream; ``seq`` is the supervisor event they follow)


class _Notice(msgspec.Struct, frozen=True, tag_field="type", kw_only=True, forbid_unknown_fields=True):
    seq: int = 0
    """Set by the event hub when it publishes the notice."""


class InterruptNotice(_Notice, frozen=True, tag="external.interrupt"):
    """The run was interrupted: stop and report ``end``."""

    run_id: str
    reason: InterruptReason
    origin: str | None
    action_id: str | None


class AnswerNotice(_Notice, frozen=True, tag="external.answer"):
    """The user answered one of the run's asks: a permission approved (``approved``) or rejected
    with feedback (``message``); a form answered (``answer``) or dismissed with a message
    (``dismissed``, ``message``). A rejection or dismissal without a message interrupts the run
    instead (``external.interrupt``)."""

    run_id: str
    ask_id: str
    form: bool
    """The ask was a form (else a permission)."""
    dismissed: bool
    """A form dismissed (with a message); false for everything else."""
    approved: bool
    message: str | None
    answer: FormAnswer | None
    """A form's answer as the user gave it: one entry per question (a list of the picks for a
    ``multiple`` question), or one string."""


class RefusedNotice(_Notice, frozen=True, tag="external.refused"):
    """A report kept while the run was queued (answered ``ok`` with ``queued: true``) did nothing
    when the run started (or the run ended unstarted): what its answer would have said."""

    run_id: str
    report: str
    """The report's ``type``."""
    code: RejectCode
    error: str
    call_id: str | None = None


def _notice(notice: _Notice) -> dict[str, Any]:
    payload: dict[str, Any] = msgspec.to_builtins(notice)
    del payload["seq"]
    return payload


_DECODER = msgspec.json.Decoder(ExternalReport)
_CONVERT_TYPE: Any = ExternalReport
_ENCODE = msgspec.json.encode


def decode_report(data: bytes | str | dict[str, Any]) -> ExternalReport:
    """Decode one report (JSON text or an already parsed object); ``ValueError`` names the problem."""
    try:
        if isinstance(data, dict):
            report: ExternalReport = msgspec.convert(data, _CONVERT_TYPE)
        else:
            report = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"not a valid report: {exc}") from None
    return report


_REMEMBER_ENDED = 10_000
T = TypeVar("T")


class ReportOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a report: a ``RequestOutcome`` plus what the report made (an ask's id, a part's
    call id), so the client can address it. ``ok`` means it took effect -- except with ``queued``."""

    result: RequestResult
    error: str | None = None
    code: RejectCode | None = None
    ask_id: str | None = None
    call_id: str | None = None
    queued: bool = False
    """The run has not started: the report is kept, in order, and applied when it starts (an
    ``external.refused`` event tells of one that then does nothing)."""


def _settle(future: Future[ReportOutcome], outcome: ReportOutcome) -> None:
    try:
        future.set_result(outcome)
    except InvalidStateError:
        pass  # answered already (a report taken while the run was still queued)


def _has_ended(run_id: str) -> ReportOutcome:
    return _rejected(RejectCode.RUN_FINISHED, f"run {run_id!r} has ended; the report does nothing")


def _ok(*, ask_id: str | None = None, call_id: str | None = None) -> ReportOutcome:
    return ReportOutcome(result=RequestResult.OK, ask_id=ask_id, call_id=call_id)


_QUEUED = ReportOutcome(result=RequestResult.OK, queued=True)


def _rejected(code: RejectCode, error: str) -> ReportOutcome:
    return ReportOutcome(result=RequestResult.REJECTED, code=code, error=error)


@dataclass(slots=True)
class _Taken:
    """A report on its way to the driver, with the future its answer goes to."""

    report: ExternalReport
    answer: Future[ReportOutcome]
    held: int = 0
    """Bytes it counts against the bounds of a queued run (0: sent while the run was active)."""


@dataclass
class _External:
    run_id: str
    lease_s: float
    deadline: float
    queue: collections.deque[_Taken] = field(default_factory=collections.deque)
    held: int = 0  # reports kept while it is queued
    held_bytes: int = 0
    ctx: RunContext | None = None
    ended: bool = False
    end: EndReport | None = None  # the report that ended it (a retried one is answered ok)
    # What only the driver's thread reads and writes:
    parts: dict[str, ToolCall] = field(default_factory=dict)  # by call id
    latest: dict[str, ToolCall] = field(default_factory=dict)  # the latest part of each tool
    states: dict[str, PartState] = field(default_factory=dict)  # each part's state, as last read
    refused: int = 0  # ReportEcho.refused, as last read
    asks: dict[str, AskKind] = field(default_factory=dict)  # its open asks, oldest first
    ask_keys: dict[bytes, str] = field(default_factory=dict)  # an ask report (JSON) -> its ask id
    last: tuple[ExternalReport, ReportOutcome] | None = None  # the previous report (not a heartbeat)


class ExternalRuns:
    """The external runs of one supervisor, shared by the HTTP and stdio hosts."""

    def __init__(
        self,
        supervisor: Supervisor,
        publish: Callable[[dict[str, Any]], object],
        *,
        held_reports: int = HELD_REPORTS,
        held_bytes: int = HELD_BYTES,
        held_bytes_total: int = HELD_BYTES_TOTAL,
    ) -> None:
        self._supervisor = supervisor
        link = link_of(supervisor)
        if link is None:
            raise TypeError(f"ExternalRuns needs a Supervisor, not {type(supervisor).__name__}")
        self._link = link
        self._publish = publish
        self._lock = threading.Lock()
        self._runs: dict[str, _External] = {}
        self._ends: collections.OrderedDict[str, EndReport] = collections.OrderedDict()
        self._held_reports = held_reports
        self._held_bytes = held_bytes
        self._held_bytes_total = held_bytes_total
        self._held_total = 0  # bytes kept by every queued run

    def start(self, request: StartRun, *, lease_ms: int = DEFAULT_LEASE_MS) -> Future[Any]:
        """Submit the start; the future resolves to its outcome (never raises)."""
        if not MIN_LEASE_MS <= lease_ms <= MAX_LEASE_MS:
            done: Future[Any] = Future()
            done.set_result(
                _rejected(
                    RejectCode.INVALID_REQUEST,
                    f"lease_ms must be between {MIN_LEASE_MS} and {MAX_LEASE_MS}, got {lease_ms}",
                )
            )
            return done
        lease_s = lease_ms / 1000.0
        run = _External(run_id=request.run_id, lease_s=lease_s, deadline=time.monotonic() + lease_s)
        with self._lock:
            known = self._runs.get(request.run_id)
            if known is None:
                self._runs[request.run_id] = run
        if known is not None:  # let the supervisor give its own answer (run_already_exists)
            return self._supervisor.submit(request, body=lambda ctx: None)

        def forget_if_rejected(outcome: Future[Any]) -> None:
            if outcome.result().code is not None:
                with self._lock:
                    if self._runs.get(request.run_id) is run:
                        del self._runs[request.run_id]

        future = self._supervisor.submit(request, body=_Driver(self, run))
        future.add_done_callback(forget_if_rejected)
        return future

    @property
    def live(self) -> int:
        """External runs started and not finished."""
        return len(self._runs)

    @property
    def held(self) -> int:
        """Bytes of reports kept by queued runs, for when they start."""
        return self._held_total

    def is_external(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._runs

    def report(self, run_id: str, report: ExternalReport) -> Future[ReportOutcome]:
        """Hand a report to the run's driver; resolves once the driver has applied it (or refused
        it), with what became of it. A report to a queued run is answered at once (see the module's
        docstring), one to a finished run as a cancel would be."""
        answer: Future[ReportOutcome] = Future()
        try:
            run_id = check.identifier("run_id", run_id)
        except SupervisorError as exc:
            _settle(answer, _rejected(RejectCode.INVALID_REQUEST, str(exc)))
            return answer
        now: ReportOutcome | None = None
        wake = None
        # Published before the start is answered: a run that started, and whose driver is not
        # running yet, is told apart from one waiting in its session's queue.
        snapshot = self._supervisor.run(run_id)
        queued = snapshot is None or snapshot.state is RunState.QUEUED
        with self._lock:
            run = self._runs.get(run_id)
            live = run is not None and not run.ended
            if run is not None and live:
                run.deadline = time.monotonic() + run.lease_s
                if run.ctx is None and queued:
                    now = self._hold(run, report, answer)
                else:  # (a driver that has not begun yet takes it when it does)
                    run.queue.append(_Taken(report, answer))
                    wake = run.ctx.token if run.ctx is not None else None
        if not live:
            now = self._after_the_end(run_id, run, report)
        if now is not None:
            _settle(answer, now)
        elif wake is not None:
            wake.wake()
        return answer

    def _hold(self, run: _External, report: ExternalReport, answer: Future[ReportOutcome]) -> ReportOutcome:
        """(Under the lock.) Keep a report for a queued run, within the bounds; its answer now."""
        if isinstance(report, HeartbeatReport):
            return _QUEUED  # its lease starts when it starts: nothing to keep
        size = len(_ENCODE(report))
        if (
            run.held >= self._held_reports
            or run.held_bytes + size > self._held_bytes
            or self._held_total + size > self._held_bytes_total
        ):
            return _rejected(
                RejectCode.SESSION_BUSY,
                f"run {run.run_id!r} is queued behind its session's active run and keeps no more "
                f"reports (it holds {run.held} of at most {self._held_reports}, {run.held_bytes} of "
                f"at most {self._held_bytes} bytes; all queued runs together at most "
                f"{self._held_bytes_total}): report again once it has started (run.started)",
            )
        run.queue.append(_Taken(report, answer, held=size))
        run.held += 1
        run.held_bytes += size
        self._held_total += size
        return _QUEUED

    def _unhold(self, run: _External, taken: _Taken) -> None:
        """(Under the lock.) A kept report leaves the queue."""
        if taken.held:
            run.held -= 1
            run.held_bytes -= taken.held
            self._held_total -= taken.held

    def _after_the_end(self, run_id: str, run: _External | None, report: ExternalReport) -> ReportOutcome:
        """A report to a run that is not (or no longer) driven here: what a cancel would say."""
        end = run.end if run is not None else self._ends.get(run_id)
        if isinstance(report, EndReport) and end is not None and report == end:
            return _ok()  # a retried end: the run ended as it said
        snapshot = self._supervisor.run(run_id)
        if snapshot is None:
            if run is not None:
                return _has_ended(run_id)
            return _rejected(
                RejectCode.UNKNOWN_RUN,
                f"no run {run_id!r} has started (or it finished long ago and was forgotten); "
                "nothing to report",
            )
        if snapshot.outcome is None and run is None:
            return _rejected(
                RejectCode.INVALID_REQUEST,
                f"run {run_id!r} is not an external run (its body runs in the supervisor's process); "
                "nothing can report for it",
            )
        how = snapshot.outcome.value if snapshot.outcome is not None else "its body has ended"
        if snapshot.reason is not None:
            how += f": {snapshot.reason.value}"
        return _rejected(
            RejectCode.RUN_FINISHED, f"run {run_id!r} has already finished ({how}); the report does nothing"
        )

    def finished(self, run_id: str) -> None:
        """The run has finished (its ``run.finished`` event): forget it; later reports are answered
        as a cancel would be (``run_finished``)."""
        with self._lock:
            run = self._runs.pop(run_id, None)
            if run is None:
                return
            run.ended = True
            left = list(run.queue)
            run.queue.clear()
            for taken in left:
                self._unhold(run, taken)
            if run.end is not None:
                self._ends[run_id] = run.end
                while len(self._ends) > _REMEMBER_ENDED:
                    self._ends.popitem(last=False)
        for taken in left:
            self._answer(run, taken, _left_behind(run, taken))

    def _answer(self, run: _External, taken: _Taken, outcome: ReportOutcome) -> None:
        """Answer a report; one kept for a queued run was answered already: a refusal is told as
        an ``external.refused`` event instead."""
        if taken.held and outcome.code is not None:
            report = taken.report
            self._publish(
                _notice(
                    RefusedNotice(
                        run_id=run.run_id,
                        report=_type(report),
                        code=outcome.code,
                        error=outcome.error or "",
                        call_id=getattr(report, "call_id", None),
                    )
                )
            )
        _settle(taken.answer, outcome)

    # --- the driver (the run's body: a task on the supervisor's loop thread) -------------------------

    async def _drive(self, run: _External, actx: AsyncRunContext) -> None:
        ctx = actx.sync
        token = actx.token
        with self._lock:
            run.ctx = ctx
            run.deadline = time.monotonic() + run.lease_s  # the lease starts when the run does
        announced = False
        try:
            while True:
                if token.reason is not None and not announced:
                    announced = True
                    await self._announce_interrupt(run, token.reason)
                    with self._lock:
                        run.deadline = time.monotonic() + run.lease_s
                item = await self._next(run, token)
                if item is None:  # an answer was relayed, or something to look at again
                    continue
                if item == "lapsed":
                    if token.reason is not None:
                        return  # interrupted and silent for a lease: end it with the interrupt's reason
                    await self._lease_lapsed(run, token)
                    continue
                taken: _Taken = item
                report = taken.report
                if isinstance(report, EndReport):
                    run.end = report
                    self._answer(run, taken, _ok())
                    if report.error is not None:
                        raise _ClientFailed(report.error)
                    return
                self._answer(run, taken, await self._take(run, ctx, report))
        finally:
            with self._lock:
                run.ended = True
                left = list(run.queue)
                run.queue.clear()
                for taken in left:
                    self._unhold(run, taken)
            for taken in left:
                self._answer(run, taken, _left_behind(run, taken))

    async def _next(self, run: _External, token: AsyncCancelToken) -> Any:
        """Wait for a report, an answer, an interrupt or the lease's end (awaiting: no thread is
        parked here). Abandonment (shutdown's deadline) always wakes the wait with
        ``RunInterrupted``, which ends the driver."""
        answers: list[DeliverAnswer] = []
        seen_reason = token.reason

        def ready() -> bool:
            if run.queue or token.reason is not seen_reason:
                return True
            for ask_id in list(run.asks):
                got = token.take_answer(ask_id)
                if got is not None:
                    answers.append(got)
                    break
            return bool(answers) or time.monotonic() >= run.deadline

        timeout = max(0.0, run.deadline - time.monotonic())
        await token.wait_until_async(ready, timeout, interruptible=False)
        if answers:
            answer = answers[0]
            kind = run.asks.pop(answer.ask_id, AskKind.PERMISSION)
            if not answer.withdrawn:  # (withdrawn: the body stopped waiting; this driver never does)
                self._publish(
                    _notice(
                        AnswerNotice(
                            run_id=run.run_id,
                            ask_id=answer.ask_id,
                            form=kind is AskKind.FORM,
                            dismissed=answer.dismissed,
                            approved=answer.approved,
                            message=answer.message,
                            answer=answer.answer,
                        )
                    )
                )
            return None
        with self._lock:
            if run.queue:
                taken = run.queue.popleft()
                self._unhold(run, taken)
                return taken
        if token.reason is not seen_reason:
            return None
        if time.monotonic() >= run.deadline:
            return "lapsed"
        return None

    async def _take(self, run: _External, ctx: RunContext, report: ExternalReport) -> ReportOutcome:
        """Apply one report, once: the same report again right after (a client's retry after a
        timeout) is answered as it was and does nothing more. Heartbeats are left out of that."""
        if isinstance(report, HeartbeatReport):
            return await self._apply(run, ctx, report)
        if run.last is not None and run.last[0] == report:
            return run.last[1]
        outcome = await self._apply(run, ctx, report)
        run.last = (report, outcome)
        return outcome

    async def _apply(self, run: _External, ctx: RunContext, report: ExternalReport) -> ReportOutcome:
        if isinstance(report, HeartbeatReport) and not report.progress:
            return _ok()
        if ctx.token.reason is not None:
            return self._interrupting(run, ctx)
        try:
            if isinstance(report, PartUpdate):
                return await self._part(run, ctx, report)
            if isinstance(report, AskReport):
                return await self._ask(run, ctx, report)
            if isinstance(report, StepUpdate):
                step = report.step or ctx.next_step_id(report.kind)
                if report.finished:
                    ctx.step_finished(step, report.kind, tool=report.tool, call_id=report.call_id)
                else:
                    ctx.step_started(step, report.kind, tool=report.tool, call_id=report.call_id)
            elif isinstance(report, HeartbeatReport):
                ctx.heartbeat()
            elif isinstance(report, RetryUpdate):
                next_at = None if report.next_at_ms is None else report.next_at_ms / 1000.0
                ctx.retrying(report.attempt, report.message, next_at)
            echo = await self._echo(run)
            if self._was_refused(run, echo):
                return self._refusal(run, ctx, echo, f"the {_type(report)} report")
        except SupervisorError as exc:  # a malformed payload, an unknown call id...
            code = exc.code or RejectCode.INTERNAL_ERROR
            return _rejected(code, str(exc))
        except RunInterrupted:
            return self._interrupting(run, ctx)
        return _ok()

    # --- what the core made of a report ---------------------------------------------------------------

    async def _query(self, read: Callable[[SupervisorCore], T]) -> T:
        """``read(core)`` on the supervisor's thread, behind every message told so far: awaited (one
        hop there, one wake back), bounded by the request timeout; ``SupervisorClosed`` once it
        has stopped."""
        link = self._link
        result: T = await link.wait(link.post(lambda reply: Query(read, reply)), None)
        return result

    async def _echo(self, run: _External, call_id: str | None = None) -> ReportEcho | None:
        """What the core knows of the run's reports, read behind every report told so far."""
        run_id = run.run_id
        return await self._query(lambda core: core.report_echo(run_id, call_id))

    @staticmethod
    def _was_refused(run: _External, echo: ReportEcho | None) -> bool:
        """The reports told since the last echo did nothing (the core counted them refused)."""
        if echo is None:
            return True
        refused = echo.refused != run.refused
        run.refused = echo.refused
        return refused

    @staticmethod
    def _interrupting(run: _External, ctx: RunContext) -> ReportOutcome:
        reason = ctx.token.reason.value if ctx.token.reason else "abandoned"
        return _rejected(
            RejectCode.ALREADY_INTERRUPTING,
            f"run {run.run_id!r} is being interrupted ({reason}); the report does nothing: report end",
        )

    def _refusal(self, run: _External, ctx: RunContext, echo: ReportEcho | None, what: str) -> ReportOutcome:
        if echo is None or echo.state is not RunState.ACTIVE:
            return self._interrupting(run, ctx)
        return _rejected(RejectCode.INVALID_REQUEST, f"{what} of run {run.run_id!r} did nothing")

    # --- asks -----------------------------------------------------------------------------------------

    async def _ask(self, run: _External, ctx: RunContext, report: AskReport) -> ReportOutcome:
        key = _ENCODE(report)
        known = run.ask_keys.get(key)
        if known is not None and (report.call_id is not None or known in run.asks):
            return _ok(ask_id=known, call_id=report.call_id)  # asked already: the same ask
        if report.form and report.key is not None:
            return _rejected(
                RejectCode.INVALID_REQUEST, "a form has no key: only a permission is granted always"
            )
        if report.call_id is not None and report.call_id not in run.parts:
            return _rejected(
                RejectCode.INVALID_REQUEST,
                f"run {run.run_id!r} has no part {report.call_id!r} to ask for: report its pending "
                "first (or leave call_id out: the ask is then for the latest unfinished part)",
            )
        ask: Any
        asked: dict[str, Any] = {
            "tool": report.tool,
            "call_id": report.call_id,
            "title": report.title,
            "data": report.data,
        }
        if report.form:
            ask = ctx.open_form(**asked, questions=report.questions)
        else:
            ask = ctx.open_permission(**asked, command=report.command, options=report.options, key=report.key)
        echo = await self._echo(run)
        if self._was_refused(run, echo):
            return self._refusal(run, ctx, echo, "the ask")
        run.asks[ask.ask_id] = AskKind.FORM if report.form else AskKind.PERMISSION
        run.ask_keys[key] = ask.ask_id
        return _ok(ask_id=ask.ask_id, call_id=report.call_id)

    # --- tool parts -----------------------------------------------------------------------------------

    async def _part(self, run: _External, ctx: RunContext, report: PartUpdate) -> ReportOutcome:
        if report.state is PartState.PENDING and (report.call_id is None or report.call_id not in run.parts):
            return await self._begin(run, ctx, report)
        call = run.parts.get(report.call_id) if report.call_id else run.latest.get(report.tool)
        if call is None:
            return _rejected(
                RejectCode.INVALID_REQUEST,
                f"run {run.run_id!r} has no part of tool {report.tool!r}: report state pending first",
            )
        if call.tool != report.tool:
            return _rejected(
                RejectCode.INVALID_REQUEST,
                f"part {call.call_id!r} of run {run.run_id!r} is a {call.tool!r} call, not {report.tool!r}",
            )
        if report.state is PartState.INTERRUPTED:
            return _rejected(
                RejectCode.INVALID_REQUEST,
                "a client does not report a part interrupted: the supervisor decides that",
            )
        moves = PART_REPORTS[run.states[call.call_id]].get(report.state)
        if moves is None:  # no move gets there from where the part was last seen: nothing is told
            return self._part_refusal(run, ctx, call, report.state, await self._echo(run, call.call_id))
        for state in moves:
            _PART_MOVES[state](call, report)
        echo = await self._echo(run, call.call_id)
        refused = self._was_refused(run, echo)
        if echo is not None and echo.part is not None:
            run.states[call.call_id] = echo.part.state
        if refused or echo is None or echo.part is None or echo.part.state is not report.state:
            return self._part_refusal(run, ctx, call, report.state, echo)
        return _ok(call_id=call.call_id)

    async def _begin(self, run: _External, ctx: RunContext, report: PartUpdate) -> ReportOutcome:
        call = ctx.tool(report.tool, call_id=report.call_id)
        echo = await self._echo(run, call.call_id)
        if self._was_refused(run, echo) or echo is None or echo.part is None:
            return self._refusal(run, ctx, echo, f"the pending report of part {call.call_id!r}")
        run.parts[call.call_id] = call
        run.latest[report.tool] = call
        run.states[call.call_id] = echo.part.state
        return _ok(call_id=call.call_id)

    def _part_refusal(
        self, run: _External, ctx: RunContext, call: ToolCall, reported: PartState, echo: ReportEcho | None
    ) -> ReportOutcome:
        if echo is None or echo.state is not RunState.ACTIVE:
            return self._interrupting(run, ctx)
        state = echo.part.state if echo.part is not None else run.states[call.call_id]
        label = f" ({echo.part.label})" if echo.part is not None and echo.part.label else ""
        onward = (
            ", ".join(s.value for s in PART_REPORTS[state] if s is not state) or "nothing more: it has ended"
        )
        return _rejected(
            RejectCode.INVALID_REQUEST,
            f"part {call.call_id!r} ({call.tool}) of run {run.run_id!r} is {state.value}{label}: a report "
            f"of {reported.value} does not apply and changes nothing (it may be reported {onward})",
        )

    async def _announce_interrupt(self, run: _External, reason: InterruptReason) -> None:
        snapshot = None
        run_id = run.run_id
        try:
            snapshot = await self._query(lambda core: core.run_snapshot(run_id))
        except Exception:  # the notice still goes out, with what the token knows
            pass
        self._publish(
            _notice(
                InterruptNotice(
                    run_id=run.run_id,
                    reason=reason,
                    origin=snapshot.origin if snapshot else None,
                    action_id=snapshot.action_id if snapshot else None,
                )
            )
        )

    async def _lease_lapsed(self, run: _External, token: AsyncCancelToken) -> None:
        """The client stopped reporting: interrupt the run with reason ``timeout`` (a cancel from
        the host's watchdog; it may lose to an interrupt already decided, which then stands)."""
        self._supervisor.submit(CancelRun(run_id=run.run_id, origin="lease", reason=InterruptReason.TIMEOUT))
        with self._lock:
            run.deadline = time.monotonic() + run.lease_s
        await token.wait_until_async(lambda: token.reason is not None, run.lease_s, interruptible=False)


_PART_MOVES: dict[PartState, Callable[[ToolCall, PartUpdate], None]] = {
    PartState.PREPARED: lambda call, report: call.prepared(),
    PartState.RUNNING: lambda call, report: call.running(),
    PartState.COMPLETED: lambda call, report: call.completed(),
    PartState.ERROR: lambda call, report: call.failed(report.message or "the tool failed"),
}
"""How the driver tells each move of ``PART_REPORTS`` (``pending`` begins a part: ``ctx.tool``)."""


def _left_behind(run: _External, taken: _Taken) -> ReportOutcome:
    """The answer to a report still waiting when its run ended: a copy of the end that ended it (a
    retry sent before the first was answered) is ``ok``; anything else does nothing."""
    if isinstance(taken.report, EndReport) and taken.report == run.end:
        return _ok()
    return _has_ended(run.run_id)


def _type(report: ExternalReport) -> str:
    tag: str = type(report).__struct_config__.tag  # type: ignore[assignment]
    return tag


class _Driver:
    """An external run's body: an ``async def`` (so a task on the supervisor's loop thread, not a
    thread of its own) that applies the client's reports as they come. An interrupt does not cancel
    its task (``keeps_its_task``): the driver itself tells the client and waits a lease for its
    ``end``."""

    keeps_its_task = True
    __slots__ = ("_run", "_runs")

    def __init__(self, runs: ExternalRuns, run: _External) -> None:
        self._runs = runs
        self._run = run

    async def __call__(self, ctx: AsyncRunContext) -> None:
        await self._runs._drive(self._run, ctx)


class _ClientFailed(Exception):
    """The client ended its run with an error: the run fails with the client's message."""

    def __str__(self) -> str:
        return str(self.args[0])
