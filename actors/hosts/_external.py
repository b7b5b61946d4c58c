"""Runs owned by the client ("external runs"): the agent loop lives in another process.

An external run is a normal run whose Python body is a small *driver*: it takes the client's reports
(steps, tool parts, asks, the end) from a queue and makes the same ``RunContext`` calls an in-process
body would, so closes, deferral, queueing and shutdown treat it exactly like any other run. What the
supervisor tells the run reaches the client as host events on the event stream:

- ``external.interrupt`` ``{run_id, reason, origin, action_id}``: the run was interrupted; the client
  should stop, and report ``end`` (its last reports before that still count if they are ``end``).
- ``external.answer`` ``{run_id, form, approved, message, answer}``: the user answered its ask.

**The lease rule.** Every report (``heartbeat`` included) renews the run's lease for ``lease_ms``.
If the lease runs out while the run is active, the run is interrupted with reason ``timeout`` (origin
``lease``), exactly like a cancel. If a further lease passes after any interrupt without an ``end``,
the driver ends the run itself (it finishes ``interrupted`` with the interrupt's reason). So a client
that crashed never leaves its session busy for more than two leases. At shutdown, a run that does
not end within the grace deadline is abandoned like any body that ignores its cancellation.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

import msgspec

from run_supervisor.actors._api import Supervisor
from run_supervisor.actors._context import RunContext, ToolCall
from run_supervisor.actors._errors import RunInterrupted, SupervisorError
from run_supervisor.protocol import (
    CancelRun,
    DeliverAnswer,
    InterruptReason,
    PartState,
    RejectCode,
    RequestResult,
    StartRun,
    StepKind,
)

__all__ = [
    "DEFAULT_LEASE_MS",
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
    "ReportOutcome",
    "RetryUpdate",
    "StepUpdate",
    "decode_report",
]

DEFAULT_LEASE_MS = 30_000
MIN_LEASE_MS = 50
MAX_LEASE_MS = 3_600_000


class _Report(msgspec.Struct, frozen=True, tag_field="type", kw_only=True, forbid_unknown_fields=True):
    pass


class StepUpdate(_Report, frozen=True, tag="step"):
    """The client's loop entered (``finished=false``) or left (``finished=true``) a step."""

    kind: StepKind
    step: str | None = None
    """Defaults to the kind, then ``kind-2``... (as in-process); give it to pair start and finish."""
    finished: bool = False


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
    questions: tuple[Any, ...] = ()
    """Form questions: text, or objects with the fields of ``Question``."""
    data: dict[str, Any] | None = None


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
    """The user answered one of the run's asks."""

    run_id: str
    ask_id: str
    form: bool
    approved: bool
    message: str | None
    answer: str | None


def _notice(notice: _Notice) -> dict[str, Any]:
    payload: dict[str, Any] = msgspec.to_builtins(notice)
    del payload["seq"]
    return payload


_DECODER = msgspec.json.Decoder(ExternalReport)
_CONVERT_TYPE: Any = ExternalReport


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


class ReportOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a report: a ``RequestOutcome`` plus what the report made (an ask's id, a part's
    call id), so the client can address it."""

    result: RequestResult
    error: str | None = None
    code: RejectCode | None = None
    ask_id: str | None = None
    call_id: str | None = None


def _settle(future: Future[ReportOutcome], outcome: ReportOutcome) -> None:
    try:
        future.set_result(outcome)
    except InvalidStateError:
        pass  # answered already (a report taken while the run was still queued)


def _has_ended(run_id: str) -> ReportOutcome:
    return _rejected(RejectCode.RUN_FINISHED, f"run {run_id!r} has ended; the report does nothing")


def _ok(*, ask_id: str | None = None, call_id: str | None = None) -> ReportOutcome:
    return ReportOutcome(result=RequestResult.OK, ask_id=ask_id, call_id=call_id)


def _rejected(code: RejectCode, error: str) -> ReportOutcome:
    return ReportOutcome(result=RequestResult.REJECTED, code=code, error=error)


@dataclass
class _External:
    run_id: str
    lease_s: float
    deadline: float
    queue: collections.deque[tuple[ExternalReport, Future[ReportOutcome]]] = field(
        default_factory=collections.deque
    )
    ctx: RunContext | None = None
    ended: bool = False
    parts: dict[str, ToolCall] = field(default_factory=dict)  # by call id
    latest: dict[str, ToolCall] = field(default_factory=dict)  # the latest part of each tool
    asks: list[str] = field(default_factory=list)  # the ids of its open asks, oldest first


class ExternalRuns:
    """The external runs of one supervisor, shared by the HTTP and stdio hosts."""

    def __init__(self, supervisor: Supervisor, publish: Callable[[dict[str, Any]], object]) -> None:
        self._supervisor = supervisor
        self._publish = publish
        self._lock = threading.Lock()
        self._runs: dict[str, _External] = {}
        self._ended: collections.deque[str] = collections.deque()
        self._ended_set: set[str] = set()

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

        future = self._supervisor.submit(request, body=lambda ctx: self._drive(run, ctx))
        future.add_done_callback(forget_if_rejected)
        return future

    @property
    def live(self) -> int:
        """External runs started and not finished."""
        return len(self._runs)

    def is_external(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._runs

    def report(self, run_id: str, report: ExternalReport) -> Future[ReportOutcome]:
        """Queue a report for the run's driver; resolves once the driver has taken it. Reports sent
        while the run waits in its session's queue are answered ``ok`` at once and applied, in order,
        when it starts."""
        answer: Future[ReportOutcome] = Future()
        with self._lock:
            run = self._runs.get(run_id)
            ended = run_id in self._ended_set
            if run is not None and not run.ended:
                run.deadline = time.monotonic() + run.lease_s
                run.queue.append((report, answer))
                ctx = run.ctx
        if run is None or run.ended:
            if ended or (run is not None and run.ended):
                _settle(answer, _has_ended(run_id))
            else:
                _settle(
                    answer,
                    _rejected(
                        RejectCode.UNKNOWN_RUN, f"no external run {run_id!r} is known here; nothing to report"
                    ),
                )
        elif ctx is None:
            _settle(answer, _ok())
        else:
            ctx.token.wake()
        return answer

    def finished(self, run_id: str) -> None:
        """The run has finished (its ``run.finished`` event): forget it; later reports are refused."""
        with self._lock:
            run = self._runs.pop(run_id, None)
            if run is None:
                return
            run.ended = True
            left = list(run.queue)
            run.queue.clear()
            self._ended.append(run_id)
            self._ended_set.add(run_id)
            while len(self._ended) > _REMEMBER_ENDED:
                self._ended_set.discard(self._ended.popleft())
        for _, answer in left:
            _settle(answer, _has_ended(run_id))

    # --- the driver (the run's body thread) -------------------------------------------------------

    def _drive(self, run: _External, ctx: RunContext) -> None:
        with self._lock:
            run.ctx = ctx
            run.deadline = time.monotonic() + run.lease_s  # the lease starts when the run does
        token = ctx.token
        announced = False
        try:
            while True:
                if token.reason is not None and not announced:
                    announced = True
                    self._announce_interrupt(run, token.reason)
                    with self._lock:
                        run.deadline = time.monotonic() + run.lease_s
                item = self._next(run, ctx)
                if item is None:  # an answer was relayed, or something to look at again
                    continue
                if item == "lapsed":
                    if token.reason is not None:
                        return  # interrupted and silent for a lease: end it with the interrupt's reason
                    self._lease_lapsed(run)
                    continue
                report, answer = item
                if isinstance(report, EndReport):
                    _settle(answer, _ok())
                    if report.error is not None:
                        raise _ClientFailed(report.error)
                    return
                _settle(answer, self._apply(run, ctx, report))
        finally:
            with self._lock:
                run.ended = True
                left = list(run.queue)
                run.queue.clear()
            for _, answer in left:
                _settle(answer, _has_ended(run.run_id))

    def _next(self, run: _External, ctx: RunContext) -> Any:
        """Wait for a report, an answer, an interrupt or the lease's end. Abandonment (shutdown's
        deadline) always wakes the wait with ``RunInterrupted``, which ends the driver."""
        token = ctx.token
        answers: list[DeliverAnswer] = []
        seen_reason = token.reason

        def ready() -> bool:
            if run.queue or token.reason is not seen_reason:
                return True
            for ask_id in list(run.asks):
                got = token.take_answer(ask_id)
                if got is not None:
                    run.asks.remove(ask_id)
                    answers.append(got)
                    break
            return bool(answers) or time.monotonic() >= run.deadline

        timeout = max(0.0, run.deadline - time.monotonic())
        token.wait_until(ready, timeout, interruptible=False)
        if answers:
            answer = answers[0]
            self._publish(
                _notice(
                    AnswerNotice(
                        run_id=run.run_id,
                        ask_id=answer.ask_id,
                        form=answer.answer is not None,
                        approved=answer.approved,
                        message=answer.message,
                        answer=answer.answer,
                    )
                )
            )
            return None
        with self._lock:
            if run.queue:
                return run.queue.popleft()
        if token.reason is not seen_reason:
            return None
        if time.monotonic() >= run.deadline:
            return "lapsed"
        return None

    def _apply(self, run: _External, ctx: RunContext, report: ExternalReport) -> ReportOutcome:
        if isinstance(report, HeartbeatReport) and not report.progress:
            return _ok()
        if ctx.token.reason is not None:
            return _rejected(
                RejectCode.ALREADY_INTERRUPTING,
                f"run {run.run_id!r} is being interrupted ({ctx.token.reason.value}); report end",
            )
        try:
            if isinstance(report, StepUpdate):
                step = report.step or ctx.next_step_id(report.kind)
                if report.finished:
                    ctx.step_finished(step, report.kind)
                else:
                    ctx.step_started(step, report.kind)
            elif isinstance(report, PartUpdate):
                return self._part(run, ctx, report)
            elif isinstance(report, AskReport):
                return self._ask(run, ctx, report)
            elif isinstance(report, HeartbeatReport):
                ctx.heartbeat()
            elif isinstance(report, RetryUpdate):
                next_at = None if report.next_at_ms is None else report.next_at_ms / 1000.0
                ctx.retrying(report.attempt, report.message, next_at)
        except SupervisorError as exc:  # a malformed payload, an unknown call id...
            code = exc.code or RejectCode.INVALID_REQUEST
            return _rejected(code, str(exc))
        except RunInterrupted:
            reason = ctx.token.reason.value if ctx.token.reason else "abandoned"
            return _rejected(
                RejectCode.ALREADY_INTERRUPTING,
                f"run {run.run_id!r} is being interrupted ({reason}); report end",
            )
        return _ok()

    @staticmethod
    def _ask(run: _External, ctx: RunContext, report: AskReport) -> ReportOutcome:
        ask: Any
        if report.form:
            ask = ctx.open_form(
                tool=report.tool,
                call_id=report.call_id,
                title=report.title,
                questions=report.questions,
                data=report.data,
            )
        else:
            ask = ctx.open_permission(
                tool=report.tool,
                call_id=report.call_id,
                title=report.title,
                command=report.command,
                options=report.options,
                data=report.data,
            )
        run.asks.append(ask.ask_id)
        return _ok(ask_id=ask.ask_id, call_id=report.call_id)

    @staticmethod
    def _part(run: _External, ctx: RunContext, report: PartUpdate) -> ReportOutcome:
        if report.state is PartState.PENDING:
            call = ctx.tool(report.tool, call_id=report.call_id)
            run.parts[call.call_id] = call
            run.latest[report.tool] = call
            return _ok(call_id=call.call_id)
        found = run.parts.get(report.call_id) if report.call_id else run.latest.get(report.tool)
        if found is None:
            named = f"call {report.call_id!r}" if report.call_id else f"tool {report.tool!r}"
            return _rejected(
                RejectCode.INVALID_REQUEST,
                f"run {run.run_id!r} has no part of {named}: report state pending first",
            )
        call = found
        if report.state is PartState.PREPARED:
            call.prepared()
        elif report.state is PartState.RUNNING:
            call.running()
        elif report.state is PartState.COMPLETED:
            call.completed()
        elif report.state is PartState.ERROR:
            call.failed(report.message or "the tool failed")
        else:
            return _rejected(
                RejectCode.INVALID_REQUEST,
                "a client does not report a part interrupted: the supervisor decides that",
            )
        return _ok(call_id=call.call_id)

    def _announce_interrupt(self, run: _External, reason: InterruptReason) -> None:
        snapshot = None
        try:
            snapshot = self._supervisor.run(run.run_id)
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

    def _lease_lapsed(self, run: _External) -> None:
        """The client stopped reporting: interrupt the run with reason ``timeout`` (a cancel from
        the host's watchdog; it may lose to an interrupt already decided, which then stands)."""
        self._supervisor.submit(CancelRun(run_id=run.run_id, origin="lease", reason=InterruptReason.TIMEOUT))
        with self._lock:
            run.deadline = time.monotonic() + run.lease_s
        ctx = run.ctx
        if ctx is not None:
            ctx.token.wait_until(lambda: ctx.token.reason is not None, run.lease_s, interruptible=False)


class _ClientFailed(Exception):
    """The client ended its run with an error: the run fails with the client's message."""

    def __str__(self) -> str:
        return str(self.args[0])
