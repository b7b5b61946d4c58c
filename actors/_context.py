"""What a run body sees: its context, its cancellation token, tool parts, permission and form asks.

A body runs on its run actor's thread. Everything it reports goes to the supervisor by ``tell``
(never blocking the body on an actor); everything it waits for -- a gate, an answer, a pause --
also wakes on cancellation, so an interrupt takes effect at the next wait or check.

Asks: ``open_permission`` / ``open_form`` register an ask (its id is the body's own, so it waits
for exactly that ask) and return an ``Ask`` handle; ``ask_permission`` / ``ask_form`` open one and
wait for it. The supervisor registers the ask before it publishes ``ask.requested``, so a reply
fired from that event always finds it. Any number of asks may be open at once (one per parallel
tool call, from the body's own threads if it likes: the context is thread-safe).

The non-blocking calls (checks, steps, tool parts, opening an ask, retries) are written once, in
``_RunReports`` and ``_ToolReports``, and shared by ``RunContext`` and the async body's
``AsyncRunContext`` (actors/_async_body.py), which adds only its awaitable waits.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

import pykka

from run_supervisor.actors._errors import (
    InvalidRequest,
    RunInterrupted,
    SupervisorError,
    SupervisorTimeout,
)
from run_supervisor.actors._progress import Progress
from run_supervisor.protocol import (
    AskKind,
    AskPayload,
    AskRaised,
    DeliverAnswer,
    Heartbeat,
    InterruptReason,
    PartReport,
    PartState,
    Question,
    RetryReport,
    StepKind,
    StepReport,
    WithdrawAsk,
    WithdrawReason,
)
from run_supervisor.protocol._payloads import FormAnswer, make_payload

__all__ = [
    "Ask",
    "CancelToken",
    "FormReply",
    "Gate",
    "PermissionReply",
    "RunContext",
    "ToolCall",
]

R = TypeVar("R")
P = TypeVar("P", bound="_Decides")  # how a body holds an open permission ask (Ask, or AsyncAsk)
F = TypeVar("F", bound="_Decides")  # how a body holds an open form ask
C = TypeVar("C")  # how a body holds a tool part (ToolCall, or AsyncToolCall)
WP = TypeVar("WP")  # what waiting for a permission gives it (PermissionReply, or an awaitable of one)
WF = TypeVar("WF")  # what waiting for a form gives it


class CancelToken:
    """Set once when the run is interrupted; every wait of the body wakes on it.

    Also carries the user's answers to the body (they wake the same waits) and the abandon flag
    set at shutdown's deadline.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._waiting = 0  # threads in ``wait_until``, counted under the lock: none, nobody to wake
        self._reason: InterruptReason | None = None
        self._answers: dict[str, DeliverAnswer] = {}  # by ask id, until the asker takes it
        self._abandoned = False
        self.progress = Progress()
        """When the body last made progress (the supervisor's stall check reads it)."""

    @property
    def cancelled(self) -> bool:
        """Whether the run was interrupted or abandoned: its body should stop."""
        return self._reason is not None or self._abandoned

    @property
    def reason(self) -> InterruptReason | None:
        """Why the run was interrupted (None while it was not)."""
        return self._reason

    @property
    def abandoned(self) -> bool:
        """Whether a deadline gave up on the body: its run has ended without it."""
        return self._abandoned

    def cancel(self, reason: InterruptReason) -> None:
        """The supervisor's side: interrupt the run with ``reason`` (the first reason wins)."""
        with self._lock:
            if self._reason is None:
                self._reason = reason
            self._wake_waiting()

    def abandon(self) -> None:
        """The supervisor's side: give up on the body; every wait raises ``RunInterrupted``."""
        with self._lock:
            self._abandoned = True
            self._wake_waiting()

    def deliver(self, answer: DeliverAnswer) -> None:
        """The supervisor's side: hand the user's answer to an ask to the body, waking its waits."""
        with self._lock:
            self._answers[answer.ask_id] = answer
            self._wake_waiting()

    def wake(self) -> None:
        """Wake every wait so it re-checks its condition (nothing else changes)."""
        with self._lock:
            self._wake_waiting()

    def _wake_waiting(self) -> None:
        """Under the lock: wake the threads waiting on this token, if any. Most changes find none
        (a shutdown abandons 1,000 deaf bodies that wait on something else), and then cost no
        ``notify_all``. A wait counts itself under the lock before it reads its condition, so a
        change made before that is seen by the read, and one made after it wakes the wait."""
        if self._waiting:
            self._cond.notify_all()

    def wait_until(
        self, ready: Callable[[], bool], timeout: float | None = None, *, interruptible: bool = True
    ) -> bool:
        """Wait until ``ready()`` or (when ``interruptible``) cancellation; abandonment always wakes.

        Returns whether ``ready()`` held. Raises ``RunInterrupted`` when woken by cancellation.
        """
        with self._lock:
            self._waiting += 1
            try:
                woke = self._cond.wait_for(
                    lambda: ready() or self._abandoned or (interruptible and self._reason is not None),
                    timeout,
                )
            finally:
                self._waiting -= 1
            if self._abandoned or (interruptible and self._reason is not None):
                raise RunInterrupted._for(self._reason, self)
            return bool(woke)

    def take_answer(self, ask_id: str) -> DeliverAnswer | None:
        """The answer delivered for this ask, once (None if none has come)."""
        with self._lock:
            return self._answers.pop(ask_id, None)


class Gate:
    """A one-way latch: waits hold until ``open()``; it stays open. Waits on it wake on cancel too."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._open = False
        self._waiters: set[CancelToken] = set()

    @property
    def is_open(self) -> bool:
        """Whether ``open()`` was called."""
        return self._open

    def open(self) -> None:
        """Open the gate for good, waking every wait on it."""
        with self._lock:
            self._open = True
            waiters = list(self._waiters)
        for token in waiters:
            token.wake()

    def wait(self, token: CancelToken, timeout: float | None = None, *, interruptible: bool = True) -> bool:
        """Wait until the gate opens (True) or ``timeout`` s pass (False); raises ``RunInterrupted``
        when ``token``'s run is interrupted first (unless ``interruptible=False``) or abandoned."""
        with self._lock:
            if self._open:
                return True
            self._waiters.add(token)
        try:
            return token.wait_until(lambda: self._open, timeout, interruptible=interruptible)
        finally:
            with self._lock:
                self._waiters.discard(token)


class PermissionReply:
    """The user's answer to a permission ask that did not end the run."""

    __slots__ = ("approved", "message")

    def __init__(self, approved: bool, message: str | None) -> None:
        self.approved = approved
        self.message = message
        """With ``approved=False``: the user's feedback, to show the model as the tool's output."""

    def __repr__(self) -> str:
        return f"PermissionReply(approved={self.approved!r}, message={self.message!r})"


@dataclass(frozen=True, slots=True)
class FormReply:
    """The user's answer to a form that did not end the run: an answer, or a dismissal with a
    message (model-visible feedback; a dismissal without one interrupts the run instead)."""

    answer: FormAnswer | None
    """As the user gave it: one entry per question (a tuple; a tuple of picks for a ``multiple``
    question), or one string for the whole form."""
    dismissed: bool = False
    message: str | None = None


class Ask(Generic[R]):
    """An open ask of a run body. ``wait()`` for the decision, or ``withdraw()`` it.

    A reply addresses it by ``ask_id``. If the wait times out, the ask is withdrawn -- unless a
    reply was accepted first, which then stands and is returned: the supervisor decides which came
    first, so a reply the host was told ``ok`` is never lost, and a late one is rejected
    (``AskWithdrawn``) and never reaches another ask.
    """

    def __init__(
        self, ctx: RunContext, ask_id: str, kind: AskKind, convert: Callable[[DeliverAnswer], R]
    ) -> None:
        self._ctx = ctx
        self.ask_id = ask_id
        self.kind = kind
        self._convert = convert
        self._lock = threading.Lock()
        self._answer: DeliverAnswer | None = None

    def __repr__(self) -> str:
        return f"Ask({self.ask_id!r}, {self.kind.value})"

    def _taken(self) -> DeliverAnswer | None:
        with self._lock:
            if self._answer is None:
                self._answer = self._ctx.token.take_answer(self.ask_id)
            return self._answer

    @property
    def done(self) -> bool:
        """A decision (or the withdrawal) has reached the body."""
        return self._taken() is not None

    # --- the decision, without its waits (``AsyncAsk`` waits in its own way around these) --------

    def _withdraw_unless_answered(self, reason: WithdrawReason) -> None:
        """Ask the supervisor to withdraw it, unless its answer is here already; never waits."""
        if self._taken() is None:
            self._ctx._tell(WithdrawAsk(run_id=self._ctx.run_id, ask_id=self.ask_id, reason=reason))

    def _settled(self) -> DeliverAnswer:
        """What reached the body: the answer, or what the supervisor decided once asked to withdraw
        it (withdrawn, or a reply that came first); ``SupervisorTimeout`` if nothing did in time."""
        answer = self._taken()
        if answer is None:
            raise SupervisorTimeout(
                f"the supervisor did not settle ask {self.ask_id!r} within {self._ctx._ask_timeout} s"
            )
        return answer

    def _decision(self, timeout: float | None) -> R:
        """The reply, as the body gets it; ``SupervisorTimeout`` if the ask was withdrawn."""
        answer = self._settled()
        if answer.withdrawn:
            raise SupervisorTimeout(
                f"no answer to {self.kind.value} ask {self.ask_id!r} in {timeout} s; it was withdrawn"
            )
        return self._convert(answer)

    # --- the waits: blocking, woken by the answer or an interrupt ---------------------------------

    def wait(self, timeout: float | None = None) -> R:
        """Wait for the decision. ``RunInterrupted`` if the run is interrupted (a rejection or a
        dismissal without a message interrupts it); ``SupervisorTimeout`` if no reply came within
        ``timeout`` seconds (the ask is then withdrawn)."""
        if not self._arrived(timeout):
            self._settle(WithdrawReason.TIMEOUT)
        return self._decision(timeout)

    def withdraw(self) -> bool:
        """Stop waiting for it: True if it was withdrawn, False if a reply came first (``wait()``
        returns that reply)."""
        return self._settle(WithdrawReason.BODY).withdrawn

    def _arrived(self, timeout: float | None) -> bool:
        return self._ctx.token.wait_until(lambda: self._taken() is not None, timeout)

    def _settle(self, reason: WithdrawReason) -> DeliverAnswer:
        """Ask the supervisor to withdraw it; wait (up to the ask timeout) for what it decided."""
        self._withdraw_unless_answered(reason)
        self._arrived(self._ctx._ask_timeout)
        return self._settled()


def _permission_reply(answer: DeliverAnswer) -> PermissionReply:
    return PermissionReply(answer.approved, answer.message)


def _form_reply(answer: DeliverAnswer) -> FormReply:
    return FormReply(answer=answer.answer, dismissed=answer.dismissed, message=answer.message)


QuestionLike = Question | Mapping[str, Any] | str
"""A form question: a ``Question``, a mapping of its fields, or just its text."""


class _Decides(Protocol):
    """An open ask as a body holds it: ``Ask`` (its ``wait`` blocks) or ``AsyncAsk`` (awaited)."""

    def wait(self, timeout: float | None = None) -> Any: ...


class _ToolReports(Generic[P, F, WP, WF]):
    """The calls of a tool part, shared by ``ToolCall`` and ``AsyncToolCall``: its reports, opening
    an ask tied to it (handed to the body as ``P`` or ``F``) and asking, which waits as the ask
    does (blocking, or awaited: ``WP``, ``WF``)."""

    tool: str
    call_id: str
    _reporter: ToolCall  # the part that tells the supervisor (a ToolCall is its own)

    def _permission(self, ask: Ask[PermissionReply]) -> P:
        raise NotImplementedError

    def _form(self, ask: Ask[FormReply]) -> F:
        raise NotImplementedError

    def _asked(self, ask: Callable[[], _Decides], timeout: float | None) -> Any:
        """Open an ask (``ask()``) and wait for its decision as this part waits: blocking, or (in an
        async body) as a coroutine that opens it when awaited."""
        raise NotImplementedError

    def prepared(self) -> None:
        """The call's input is complete (materialized); the tool has not started."""
        self._reporter._ctx.check()
        self._reporter._report(PartState.PREPARED)

    def running(self) -> None:
        """The tool starts to run."""
        self._reporter._ctx.check()
        self._reporter._report(PartState.RUNNING)

    def completed(self) -> None:
        """The tool ran and succeeded: the card settles ``completed``."""
        self._reporter._report(PartState.COMPLETED)

    def failed(self, message: str) -> None:
        """The tool itself failed (not an interruption): the part ends ``error`` and the run goes on."""
        self._reporter._report(PartState.ERROR, message)

    def open_permission(
        self,
        *,
        title: str | None = None,
        command: str | None = None,
        options: Iterable[str] = (),
        data: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> P:
        """``RunContext.open_permission`` for this call."""
        ask = self._reporter._ctx.open_permission(
            tool=self.tool,
            call_id=self.call_id,
            title=title,
            command=command,
            options=options,
            data=data,
            key=key,
        )
        return self._permission(ask)

    def open_form(
        self,
        *,
        title: str | None = None,
        questions: Iterable[QuestionLike] = (),
        data: Mapping[str, Any] | None = None,
    ) -> F:
        """``RunContext.open_form`` for this call."""
        ask = self._reporter._ctx.open_form(
            tool=self.tool, call_id=self.call_id, title=title, questions=questions, data=data
        )
        return self._form(ask)

    def ask_permission(
        self,
        timeout: float | None = None,
        *,
        title: str | None = None,
        command: str | None = None,
        options: Iterable[str] = (),
        data: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> WP:
        """``RunContext.ask_permission`` for this call: ask before the tool does its work (in an
        async body, await it)."""
        waited: WP = self._asked(
            lambda: self.open_permission(title=title, command=command, options=options, data=data, key=key),
            timeout,
        )
        return waited

    def ask_form(
        self,
        timeout: float | None = None,
        *,
        title: str | None = None,
        questions: Iterable[QuestionLike] = (),
        data: Mapping[str, Any] | None = None,
    ) -> WF:
        """``RunContext.ask_form`` for this call (in an async body, await it)."""
        waited: WF = self._asked(lambda: self.open_form(title=title, questions=questions, data=data), timeout)
        return waited


class ToolCall(_ToolReports[Ask[PermissionReply], Ask[FormReply], PermissionReply, FormReply]):
    """One tool part of a run: generating its input, prepared, running, then completed or failed.

    Its asks (``ask_permission``, ``ask_form``...) are tied to this call: the UI draws them on its
    card, and a declined permission says this call did not run."""

    def __init__(self, ctx: RunContext, tool: str, call_id: str) -> None:
        self._ctx = ctx
        self._reporter = self
        self.tool = tool
        self.call_id = call_id
        self._report(PartState.PENDING)

    def __repr__(self) -> str:
        return f"ToolCall({self.tool!r}, {self.call_id!r})"

    def _report(self, state: PartState, message: str | None = None) -> None:
        self._ctx._tell(
            PartReport(
                run_id=self._ctx.run_id, tool=self.tool, state=state, message=message, call_id=self.call_id
            )
        )

    def _permission(self, ask: Ask[PermissionReply]) -> Ask[PermissionReply]:
        return ask

    def _form(self, ask: Ask[FormReply]) -> Ask[FormReply]:
        return ask

    def _asked(self, ask: Callable[[], _Decides], timeout: float | None) -> Any:
        return ask().wait(timeout)


class _RunReports(Generic[P, F, C, WP, WF]):
    """The non-blocking calls of a run body's context, shared by ``RunContext`` and
    ``AsyncRunContext``: checks, steps, tool parts (handed to the body as ``C``), opening an ask
    (as ``P`` or ``F``) and retries. None of them waits; each tells the supervisor by ``tell``."""

    run_id: str
    token: CancelToken
    _reporter: RunContext  # the context that tells the supervisor (a RunContext is its own)

    def _permission(self, ask: Ask[PermissionReply]) -> P:
        raise NotImplementedError

    def _form(self, ask: Ask[FormReply]) -> F:
        raise NotImplementedError

    def _tool_call(self, call: ToolCall) -> C:
        raise NotImplementedError

    def _asked(self, ask: Callable[[], _Decides], timeout: float | None) -> Any:
        """Open an ask (``ask()``) and wait for its decision as this context waits: blocking, or (in an
        async body) as a coroutine that opens it when awaited."""
        raise NotImplementedError

    # --- cancellation ----------------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """Whether the run was interrupted (the body should stop; ``check()`` raises then)."""
        return self.token.cancelled

    def check(self) -> None:
        """Raise ``RunInterrupted`` if the run has been interrupted."""
        if self.token.cancelled:
            raise RunInterrupted._for(self.token.reason, self.token)

    # --- progress --------------------------------------------------------------------------------

    def next_step_id(self, kind: StepKind | str) -> str:
        """A fresh step id for a step of ``kind`` (``step_started`` / ``step_finished`` take it)."""
        kind = StepKind(kind)
        counts = self._reporter._step_counts
        count = counts.get(kind, 0) + 1
        counts[kind] = count
        return kind.value if count == 1 else f"{kind.value}-{count}"

    def step_started(
        self, step_id: str, kind: StepKind, *, tool: str | None = None, call_id: str | None = None
    ) -> None:
        """The first half of ``step()``, for a step that does not fit a block: announce it started."""
        self.check()
        self._reporter._tell(
            StepReport(
                run_id=self.run_id, step=step_id, kind=kind, finished=False, tool=tool, call_id=call_id
            )
        )

    def step_finished(
        self, step_id: str, kind: StepKind, *, tool: str | None = None, call_id: str | None = None
    ) -> None:
        """The second half of ``step()``: announce the step ``step_started`` began has ended."""
        self._reporter._tell(
            StepReport(run_id=self.run_id, step=step_id, kind=kind, finished=True, tool=tool, call_id=call_id)
        )

    def tool(self, tool: str, *, call_id: str | None = None) -> C:
        """Begin a tool part: the model starts generating this tool call's input. ``call_id``
        (unique within the run; default ``call-1``, ``call-2``...) names it in events and asks."""
        self.check()
        if not tool:
            raise InvalidRequest("tool: the tool name must not be empty")
        reporter = self._reporter
        with reporter._lock:
            if call_id is None:
                n = len(reporter._call_ids) + 1
                while f"call-{n}" in reporter._call_ids:
                    n += 1
                call_id = f"call-{n}"
            elif not call_id or call_id in reporter._call_ids:
                raise InvalidRequest(
                    f"tool: call_id {call_id!r} is empty or already used in run {self.run_id!r}"
                )
            reporter._call_ids.add(call_id)
        return self._tool_call(ToolCall(reporter, tool, call_id))

    def heartbeat(self) -> None:
        """Say the body is making progress (e.g. on each chunk of a provider stream), so the run is
        not flagged stalled (``stall_after_ms``). Cheap enough to call on every chunk: it records the
        time, and tells the supervisor only while the run is flagged (``run.unstalled`` follows).
        Steps, tool-part changes and asks count as progress already. After ``retrying()`` the first
        heartbeat is the attempt going on: it tells the supervisor too, and the session's ``retry``
        status ends. Like ``check()``, it raises ``RunInterrupted`` if the run has been interrupted."""
        self.check()
        if self.token.progress.beat():
            self._reporter._tell(Heartbeat(run_id=self.run_id))

    # --- asking the user -------------------------------------------------------------------------

    def open_permission(
        self,
        *,
        tool: str | None = None,
        call_id: str | None = None,
        title: str | None = None,
        command: str | None = None,
        options: Iterable[str] = (),
        data: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> P:
        """Ask the user to allow a tool call, without waiting: returns the open ask.

        ``tool`` and ``call_id`` tie it to a tool part (default: the run's latest unfinished
        part); ``title``, ``command``, ``options`` and ``data`` (a JSON object) are what the UI
        shows -- all of it travels in ``ask.requested``. ``key`` says what an "always" grant of this
        ask covers (``AskPayload.key``; None: it cannot be granted for always). Bad values raise
        ``InvalidRequest``."""
        payload = _payload(
            "open_permission", title=title, command=command, options=options, data=data, key=key
        )
        return self._permission(
            self._reporter._open(AskKind.PERMISSION, _permission_reply, payload, tool, call_id)
        )

    def open_form(
        self,
        *,
        tool: str | None = None,
        call_id: str | None = None,
        title: str | None = None,
        questions: Iterable[QuestionLike] = (),
        data: Mapping[str, Any] | None = None,
    ) -> F:
        """Raise a question form without waiting: returns the open ask. ``questions`` are
        ``Question``s, mappings of their fields, or plain text."""
        payload = _payload("open_form", title=title, questions=questions, data=data)
        return self._form(self._reporter._open(AskKind.FORM, _form_reply, payload, tool, call_id))

    def ask_permission(
        self,
        timeout: float | None = None,
        *,
        tool: str | None = None,
        call_id: str | None = None,
        title: str | None = None,
        command: str | None = None,
        options: Iterable[str] = (),
        data: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> WP:
        """Ask the user to allow a tool call and wait (in an async body, await it). Returns on
        approval or on a rejection with feedback (``PermissionReply(False, message)``: show the
        model the message); a rejection without feedback interrupts the run
        (``permission_rejected``: ``RunInterrupted``). After ``timeout`` seconds without a reply
        the ask is withdrawn (``SupervisorTimeout``). ``key`` is ``open_permission``'s."""
        waited: WP = self._asked(
            lambda: self.open_permission(
                tool=tool, call_id=call_id, title=title, command=command, options=options, data=data, key=key
            ),
            timeout,
        )
        return waited

    def ask_form(
        self,
        timeout: float | None = None,
        *,
        tool: str | None = None,
        call_id: str | None = None,
        title: str | None = None,
        questions: Iterable[QuestionLike] = (),
        data: Mapping[str, Any] | None = None,
    ) -> WF:
        """Raise a question form and wait (in an async body, await it). Returns the answer, or a
        dismissal with a message (``FormReply(None, dismissed=True, message=...)``: feedback for
        the model); a dismissal without a message interrupts the run (``form_dismissed``). Times
        out like ``ask_permission``."""
        waited: WF = self._asked(
            lambda: self.open_form(tool=tool, call_id=call_id, title=title, questions=questions, data=data),
            timeout,
        )
        return waited

    # --- retries -------------------------------------------------------------------------------

    def retrying(self, attempt: int, message: str, next_at: datetime | float | None = None) -> None:
        """Say that the run is retrying (a provider call failed and will be tried again): its
        session's status becomes ``retry`` with ``attempt`` (1 for the first retry), ``message``
        (why, for the user) and ``next_at`` (when the next attempt is due: an aware ``datetime``,
        or Unix epoch seconds as ``time.time()`` gives them; None: unknown). It goes back to
        ``busy`` at the run's next step, tool-part change, ask or heartbeat (the attempt goes on),
        and ends with the run. Never blocks; ``RunInterrupted`` if the run was interrupted meanwhile."""
        self.check()
        next_at_ms = _epoch_ms(next_at)
        # The wait it announces counts against a retry budget's backoff_ms (the core reads no clock).
        backoff_ms = None if next_at_ms is None else max(0, next_at_ms - int(time.time() * 1000))
        self._reporter._tell(
            RetryReport(
                run_id=self.run_id,
                attempt=_attempt(attempt),
                message=_retry_message(message),
                next_at_ms=next_at_ms,
                backoff_ms=backoff_ms,
            )
        )
        self.token.progress.retrying = True  # the next heartbeat is the attempt going on: say so once


def _payload(verb: str, **fields: Any) -> AskPayload:
    try:
        return make_payload(verb, **fields)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


class RunContext(_RunReports[Ask[PermissionReply], Ask[FormReply], ToolCall, PermissionReply, FormReply]):
    """Given to a run body. Report progress, wait interruptibly, ask the user, read the instance."""

    def __init__(
        self,
        *,
        run_id: str,
        session: str,
        directory: str,
        generation: int,
        token: CancelToken,
        supervisor: pykka.ActorRef[Any],
        instance: pykka.ActorRef[Any] | None,
        ask_timeout: float,
    ) -> None:
        self.run_id = run_id
        self.session = session
        self.directory = directory
        self.generation = generation
        """The instance generation this run is pinned to; it stays loaded until the run ends."""
        self.token = token
        self._reporter = self
        self._supervisor = supervisor
        self._instance = instance
        self._ask_timeout = ask_timeout
        self._step_counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._call_ids: set[str] = set()
        self._ask_numbers = itertools.count(1)

    def _permission(self, ask: Ask[PermissionReply]) -> Ask[PermissionReply]:
        return ask

    def _form(self, ask: Ask[FormReply]) -> Ask[FormReply]:
        return ask

    def _tool_call(self, call: ToolCall) -> ToolCall:
        return call

    def _asked(self, ask: Callable[[], _Decides], timeout: float | None) -> Any:
        return ask().wait(timeout)

    # --- waiting ---------------------------------------------------------------------------------

    def sleep(self, seconds: float) -> None:
        """Pause, waking early (with ``RunInterrupted``) if the run is interrupted."""
        self.token.wait_until(lambda: False, seconds)

    def wait(self, gate: Gate, timeout: float | None = None) -> bool:
        """Wait for a gate to open (True) or the timeout (False); ``RunInterrupted`` on interrupt."""
        return gate.wait(self.token, timeout)

    # --- progress --------------------------------------------------------------------------------

    def _tell(self, message: Any) -> None:
        self.token.progress.beat()  # every report is progress (the core clears a stall on it)
        try:
            self._supervisor.tell(message)
        except pykka.ActorDeadError:
            # The supervisor is gone: this body was abandoned at shutdown. Unwind it.
            raise RunInterrupted._for(self.token.reason, self.token) from None

    @contextmanager
    def step(
        self, kind: StepKind | str, step_id: str | None = None, *, call: ToolCall | None = None
    ) -> Iterator[str]:
        """Report a step around a block; the step id defaults to the kind, then ``kind-2``...
        With ``call``, the step events name that call's tool and call id."""
        kind = StepKind(kind)
        step_id = step_id or self.next_step_id(kind)
        tool, call_id = (call.tool, call.call_id) if call is not None else (None, None)
        self.step_started(step_id, kind, tool=tool, call_id=call_id)
        yield step_id
        self.step_finished(step_id, kind, tool=tool, call_id=call_id)

    # --- asking the user -------------------------------------------------------------------------

    def _open(
        self,
        kind: AskKind,
        convert: Callable[[DeliverAnswer], R],
        payload: AskPayload,
        tool: str | None,
        call_id: str | None,
    ) -> Ask[R]:
        self.check()
        ask = Ask(self, f"{self.run_id}:ask-{next(self._ask_numbers)}", kind, convert)
        self._tell(
            AskRaised(
                run_id=self.run_id, ask_id=ask.ask_id, kind=kind, payload=payload, tool=tool, call_id=call_id
            )
        )
        return ask

    # --- the instance ----------------------------------------------------------------------------

    def instance(self) -> Any:
        """The cache object of the instance this run is pinned to (what ``InstanceHooks.load`` made)."""
        if self._instance is None:
            return None
        try:
            cache = self._instance.ask(_GetCache(), timeout=self._ask_timeout)
        except pykka.Timeout:
            raise SupervisorTimeout(f"the instance did not answer in {self._ask_timeout} s") from None
        if isinstance(cache, _Loading):  # its load hook still runs: wait here, interruptibly
            cache = cache.wait(self.token)
        if isinstance(cache, _LoadFailed):
            raise SupervisorError(cache.error)  # the run fails with it, unless the body handles it
        return cache


def _attempt(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31:
        raise InvalidRequest(f"attempt must be an int from 1 (the first retry), not {value!r}")
    return value


def _retry_message(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest("message must be a non-empty str saying why the run retries")
    return value


def _epoch_ms(value: object) -> int | None:
    """``next_at`` as Unix epoch milliseconds (what ``session.status`` carries)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidRequest("next_at must be an aware datetime (with a tzinfo), or epoch seconds")
        seconds = value.timestamp()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidRequest(f"next_at must be a datetime or Unix epoch seconds, not {type(value).__name__}")
    if not math.isfinite(seconds) or not 0 <= seconds < 2**41 / 1000:
        raise InvalidRequest(f"next_at must be a time since 1970 in epoch seconds, not {value!r}")
    return round(seconds * 1000)


class _GetCache:
    """Ask an InstanceActor for its cache object."""


class _Loading:
    """An InstanceActor's answer while its load hook runs: the body waits for it on its own thread
    (until the load's deadline, waking on cancellation), so the actor never waits on host code."""

    def __init__(self, done: Gate, deadline: float, result: Callable[[], Any]) -> None:
        self._done = done
        self._deadline = deadline
        self._result = result

    def wait(self, token: CancelToken) -> Any:
        # The gate wakes this token when the load ends (an Event would not: the token sleeps on
        # its own condition, so only the deadline or a cancel would wake it).
        self._done.wait(token, max(0.0, self._deadline - time.monotonic()))
        return self._result()


class _LoadFailed:
    """The InstanceActor's answer when ``InstanceHooks.load`` raised."""

    def __init__(self, error: str) -> None:
        self.error = error
