"""What a run body sees: its context, its cancellation token, tool parts, permission and form asks.

A body runs on its own worker thread. Everything it reports goes to the supervisor by ``tell``
(never blocking the body on an actor); everything it waits for -- a gate, an answer, a pause --
also wakes on cancellation, so an interrupt takes effect at the next wait or check.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pykka

from run_supervisor.actors._errors import RunInterrupted, SupervisorError, SupervisorTimeout
from run_supervisor.protocol import (
    DeliverAnswer,
    InterruptReason,
    PartReport,
    PartState,
    StepKind,
    StepReport,
    WaitingForUser,
)

__all__ = ["CancelToken", "Gate", "PermissionReply", "RunBody", "RunContext", "ToolCall"]


class CancelToken:
    """Set once when the run is interrupted; every wait of the body wakes on it.

    Also carries the user's answers to the body (they wake the same waits) and the abandon flag
    set at shutdown's deadline.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._reason: InterruptReason | None = None
        self._answer: DeliverAnswer | None = None
        self._abandoned = False

    @property
    def cancelled(self) -> bool:
        return self._reason is not None or self._abandoned

    @property
    def reason(self) -> InterruptReason | None:
        return self._reason

    @property
    def abandoned(self) -> bool:
        return self._abandoned

    def cancel(self, reason: InterruptReason) -> None:
        with self._cond:
            if self._reason is None:
                self._reason = reason
            self._cond.notify_all()

    def abandon(self) -> None:
        with self._cond:
            self._abandoned = True
            self._cond.notify_all()

    def deliver(self, answer: DeliverAnswer) -> None:
        with self._cond:
            self._answer = answer
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_until(
        self, ready: Callable[[], bool], timeout: float | None = None, *, interruptible: bool = True
    ) -> bool:
        """Wait until ``ready()`` or (when ``interruptible``) cancellation; abandonment always wakes.

        Returns whether ``ready()`` held. Raises ``RunInterrupted`` when woken by cancellation.
        """
        with self._cond:
            woke = self._cond.wait_for(
                lambda: ready() or self._abandoned or (interruptible and self._reason is not None), timeout
            )
            if self._abandoned or (interruptible and self._reason is not None):
                raise RunInterrupted._for(self._reason, self)
            return bool(woke)

    def take_answer(self) -> DeliverAnswer | None:
        with self._cond:
            answer, self._answer = self._answer, None
            return answer


class Gate:
    """A one-way latch: waits hold until ``open()``; it stays open. Waits on it wake on cancel too."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._open = False
        self._waiters: set[CancelToken] = set()

    @property
    def is_open(self) -> bool:
        return self._open

    def open(self) -> None:
        with self._lock:
            self._open = True
            waiters = list(self._waiters)
        for token in waiters:
            token.wake()

    def wait(self, token: CancelToken, timeout: float | None = None, *, interruptible: bool = True) -> bool:
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


class ToolCall:
    """One tool part of a run: generating its input, prepared, running, then completed or failed."""

    def __init__(self, ctx: RunContext, tool: str) -> None:
        self._ctx = ctx
        self.tool = tool
        self._report(PartState.PENDING)

    def _report(self, state: PartState, message: str | None = None) -> None:
        self._ctx._tell(PartReport(run_id=self._ctx.run_id, tool=self.tool, state=state, message=message))

    def prepared(self) -> None:
        """The call's input is complete (materialized); the tool has not started."""
        self._ctx.check()
        self._report(PartState.PREPARED)

    def running(self) -> None:
        """The tool starts to run."""
        self._ctx.check()
        self._report(PartState.RUNNING)

    def completed(self) -> None:
        self._report(PartState.COMPLETED)

    def failed(self, message: str) -> None:
        """The tool itself failed (not an interruption): the part ends ``error`` and the run goes on."""
        self._report(PartState.ERROR, message)


RunBody = Callable[["RunContext"], Any]
"""A run body: a callable that does the run's work on its own thread, given its context."""


class RunContext:
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
        self._supervisor = supervisor
        self._instance = instance
        self._ask_timeout = ask_timeout
        self._step_counts: dict[str, int] = {}

    # --- cancellation ----------------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        return self.token.cancelled

    def check(self) -> None:
        """Raise ``RunInterrupted`` if the run has been interrupted."""
        if self.token.cancelled:
            raise RunInterrupted._for(self.token.reason, self.token)

    def sleep(self, seconds: float) -> None:
        """Pause, waking early (with ``RunInterrupted``) if the run is interrupted."""
        self.token.wait_until(lambda: False, seconds)

    def wait(self, gate: Gate, timeout: float | None = None) -> bool:
        """Wait for a gate to open (True) or the timeout (False); ``RunInterrupted`` on interrupt."""
        return gate.wait(self.token, timeout)

    # --- progress --------------------------------------------------------------------------------

    def _tell(self, message: Any) -> None:
        try:
            self._supervisor.tell(message)
        except pykka.ActorDeadError:
            # The supervisor is gone: this body was abandoned at shutdown. Unwind it.
            raise RunInterrupted._for(self.token.reason, self.token) from None

    def next_step_id(self, kind: StepKind | str) -> str:
        kind = StepKind(kind)
        count = self._step_counts.get(kind, 0) + 1
        self._step_counts[kind] = count
        return kind.value if count == 1 else f"{kind.value}-{count}"

    def step_started(self, step_id: str, kind: StepKind) -> None:
        self.check()
        self._tell(StepReport(run_id=self.run_id, step=step_id, kind=kind, finished=False))

    def step_finished(self, step_id: str, kind: StepKind) -> None:
        self._tell(StepReport(run_id=self.run_id, step=step_id, kind=kind, finished=True))

    @contextmanager
    def step(self, kind: StepKind | str, step_id: str | None = None) -> Iterator[str]:
        """Report a step around a block; the step id defaults to the kind, then ``kind-2``..."""
        kind = StepKind(kind)
        step_id = step_id or self.next_step_id(kind)
        self.step_started(step_id, kind)
        yield step_id
        self.step_finished(step_id, kind)

    def tool(self, tool: str) -> ToolCall:
        """Begin a tool part: the model starts generating this tool call's input."""
        self.check()
        return ToolCall(self, tool)

    # --- asking the user -------------------------------------------------------------------------

    def raise_ask(self, *, form: bool) -> None:
        """Tell the supervisor a permission ask (or form) is pending, before waiting for it."""
        self.check()
        self._tell(WaitingForUser(run_id=self.run_id, form=form))

    def _await_answer(self, form: bool, timeout: float | None, raised: bool) -> DeliverAnswer:
        if not raised:
            self.raise_ask(form=form)
        answer: list[DeliverAnswer] = []

        def arrived() -> bool:
            got = self.token.take_answer()
            if got is not None:
                answer.append(got)
            return bool(answer)

        if not self.token.wait_until(arrived, timeout):
            raise SupervisorTimeout(f"no answer to the {'form' if form else 'permission ask'} in {timeout} s")
        return answer[0]

    def ask_permission(self, timeout: float | None = None, *, raised: bool = False) -> PermissionReply:
        """Ask the user to allow the running tool. Returns on approval or on a rejection with
        feedback; a rejection without feedback interrupts the run (``permission_rejected``).
        ``raised=True``: ``raise_ask`` already announced it."""
        answer = self._await_answer(False, timeout, raised)
        return PermissionReply(answer.approved, answer.message)

    def ask_form(self, timeout: float | None = None, *, raised: bool = False) -> str:
        """Raise a question form and wait for the answer; a dismissal interrupts the run."""
        answer = self._await_answer(True, timeout, raised)
        return answer.answer or ""

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


class _GetCache:
    """Ask an InstanceActor for its cache object."""


class _Loading:
    """An InstanceActor's answer while its load hook runs: the body waits for it on its own thread
    (until the load's deadline, waking on cancellation), so the actor never waits on host code."""

    def __init__(self, ready: threading.Event, deadline: float, result: Callable[[], Any]) -> None:
        self._ready = ready
        self._deadline = deadline
        self._result = result

    def wait(self, token: CancelToken) -> Any:
        token.wait_until(self._ready.is_set, max(0.0, self._deadline - time.monotonic()))
        return self._result()


class _LoadFailed:
    """The InstanceActor's answer when ``InstanceHooks.load`` raised."""

    def __init__(self, error: str) -> None:
        self.error = error
