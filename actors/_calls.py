"""The calls both facades make, written once, without their waits (sans-IO, as h11 keeps its rules).

Each call here takes the public parameters, checks them (``InvalidRequest`` naming the argument;
nothing has changed then) and returns a ``Call``: the request to send, how long to wait for its
answer and what the answer means to the caller. It sends nothing and waits for nothing: a facade
binds it to its own way of waiting -- ``Supervisor`` blocks on the link, ``AsyncSupervisor`` awaits
the same link -- so a parameter, a check or a docstring is written once and the two cannot drift::

    class Supervisor:
        cancel = taking(calls.cancel)(_answer)   # _answer: send through the link, block

    class AsyncSupervisor:
        cancel = taking(calls.cancel)(_answer)   # _answer: send through the link, await
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from os import PathLike
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, cast

import msgspec

from run_supervisor.actors import _validate as check
from run_supervisor.actors._async_body import RunBody
from run_supervisor.actors._errors import RunAlreadyExists, SupervisorError
from run_supervisor.actors._validate import (
    CloseActionName,
    CloseModeName,
    QueuePolicyName,
    ReloadPolicyName,
    ShutdownReasonName,
)
from run_supervisor.protocol import (
    CloseAction,
    CloseMode,
    CloseOutcome,
    QueuePolicy,
    ReloadPolicy,
    Request,
    RequestOutcome,
    RetryBudget,
    Shutdown,
    ShutdownReason,
    StartRun,
)

__all__ = ["Call", "ShutdownCall", "StartCall", "next_run_number", "saw_run_id", "taking", "taking_later"]

P = ParamSpec("P")
T = TypeVar("T")
C = TypeVar("C")
R = TypeVar("R")
S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One facade call without its wait: the checked request, the bound on waiting for its answer
    (None: the config's ``request_timeout_s``) and what an accepted answer means to the caller (a
    rejection raises before ``read`` sees it)."""

    request: Request
    timeout: float | None
    read: Callable[[Any], T]


def taking(spec: Callable[P, C]) -> Callable[[Callable[[S, C], R]], Callable[Concatenate[S, P], R]]:
    """A facade method made of ``spec`` (its parameters and its docstring) and of ``wait``, the
    facade's way of carrying out what ``spec`` returns (a coroutine function makes a coroutine
    method). Introspection (``inspect.signature``, ``help``, the reference page) sees ``spec``'s
    parameters after ``self``, and ``wait``'s return type (a ``Call[X]`` read through a generic
    ``wait`` returns ``X``)."""

    def bind(wait: Callable[[S, C], R]) -> Callable[Concatenate[S, P], R]:
        def blocking(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return wait(self, spec(*args, **kwargs))

        async def awaiting(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Any:
            return await cast("Callable[[S, C], Awaitable[Any]]", wait)(self, spec(*args, **kwargs))

        method: Callable[..., Any] = awaiting if inspect.iscoroutinefunction(wait) else blocking
        functools.update_wrapper(method, spec, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
        method.__signature__ = _signature(spec, wait)  # type: ignore[attr-defined]
        return cast("Callable[Concatenate[S, P], R]", method)

    return bind


def taking_later(
    spec: Callable[P, C],
) -> Callable[[Callable[[S, Callable[[], C]], Awaitable[R]]], Callable[Concatenate[S, P], Awaitable[R]]]:
    """``taking`` for a coroutine ``wait`` that runs ``spec`` itself, later (given ``spec`` bound to
    the call's arguments): an async start's checks then run with the other starts of its loop's
    turn, a few at a time, not all in the turn that made them. The method is ``spec``'s as
    ``taking`` makes it (parameters, docstring, ``__wrapped__``)."""

    def bind(wait: Callable[[S, Callable[[], C]], Awaitable[R]]) -> Callable[Concatenate[S, P], Awaitable[R]]:
        async def awaiting(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return await wait(self, functools.partial(spec, *args, **kwargs))

        functools.update_wrapper(
            awaiting, spec, assigned=("__module__", "__name__", "__qualname__", "__doc__")
        )
        awaiting.__signature__ = _signature(spec, wait)  # type: ignore[attr-defined]
        return awaiting

    return bind


def _signature(spec: Callable[..., Any], wait: Callable[..., Any]) -> inspect.Signature:
    own = inspect.signature(spec)
    returns = inspect.signature(wait).return_annotation
    if returns == "T":  # a generic wait gives what the Call reads
        returns = str(own.return_annotation).removeprefix("Call[").removesuffix("]")
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return own.replace(parameters=[this, *own.parameters.values()], return_annotation=returns)


def _nothing(outcome: object) -> None:
    return None


def _stopped(outcome: RequestOutcome) -> tuple[str, ...]:
    return outcome.interrupted_runs


def _close_outcome(outcome: object) -> CloseOutcome:
    assert isinstance(outcome, CloseOutcome)
    return outcome


# --- runs and sessions ---------------------------------------------------------------------------


class _RunNumbers:
    """Automatic run ids (``run-N``), kept above every ``run-N`` a host chose itself."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 1

    def take(self) -> int:
        with self._lock:
            number, self._next = self._next, self._next + 1
            return number

    def saw(self, run_id: str) -> None:
        if run_id.startswith("run-") and run_id[4:].isascii() and run_id[4:].isdigit() and len(run_id) < 24:
            with self._lock:
                self._next = max(self._next, int(run_id[4:]) + 1)


_run_numbers = _RunNumbers()
next_run_number = _run_numbers.take
saw_run_id = _run_numbers.saw


def _no_body(context: object) -> None:
    """Stands in for the body when only the request is checked (the body is checked apart)."""


def start_run_request(*, session: object, directory: object, run_id: object, **options: object) -> StartRun:
    """Checked (``InvalidRequest`` naming the argument), every option of ``check.START_OPTIONS`` (None:
    not given); without ``run_id``, a fresh ``run-N`` no host id has taken."""
    fresh = run_id is None
    request = check.start_run(
        _no_body,
        session=session,
        directory=directory,
        run_id=f"run-{next_run_number()}" if fresh else run_id,
    )
    if not fresh:
        saw_run_id(request.run_id)
    unknown = set(options) - {name for name, _ in check.START_OPTIONS}
    assert not unknown, f"not an option of a start: {sorted(unknown)}"
    checked = {
        name: checks(name, options[name])
        for name, checks in check.START_OPTIONS
        if options.get(name) is not None
    }
    return msgspec.structs.replace(request, **checked) if checked else request


def renamed(request: StartRun) -> StartRun:
    """The same start under the next fresh ``run-N`` (a host took the name meanwhile)."""
    return msgspec.structs.replace(request, run_id=f"run-{next_run_number()}")


@dataclass(frozen=True, slots=True)
class StartCall:
    """A start without its wait: the checked request and body, the bound on waiting for the answer,
    and whether the run id was made here (then a start refused because a host took that name
    meanwhile is sent again under the next one: ``again``)."""

    request: StartRun
    body: RunBody
    timeout: float | None
    fresh: bool

    def again(self, refusal: SupervisorError) -> StartCall | None:
        """What to send after ``refusal``: the same start under the next fresh ``run-N`` when a
        host took the id made here meanwhile (a raw submit, say); None: the refusal stands."""
        if isinstance(refusal, RunAlreadyExists) and self.fresh:
            return replace(self, request=renamed(self.request))
        return None


def start_run(
    body: RunBody,
    *,
    session: str,
    directory: str | PathLike[str],
    run_id: str | None = None,
    resume_of: str | None = None,
    parent_run_id: str | None = None,
    deadline_ms: int | None = None,
    queue_policy: QueuePolicyName | QueuePolicy | None = None,
    stall_after_ms: int | None = None,
    interrupt_grace_ms: int | None = None,
    retry_budget: RetryBudget | None = None,
    timeout: float | None = None,
) -> StartCall:
    """Start a run (or queue it behind the session's active run), pinned to the directory's current
    instance generation; returns its handle. A plain body runs on its own thread with a
    ``RunContext``; an ``async def`` body runs as a task with an ``AsyncRunContext`` (through
    ``AsyncSupervisor``, on the awaiting loop; else on a loop the supervisor owns). Without
    ``run_id`` one is made (``run-N``), never one a host already used.

    ``resume_of`` names the finished run it continues (``UnknownRun`` if none is known).

    ``parent_run_id`` makes it a child (a subagent, a background job) of that active run: in
    the parent's directory, in a session of its own, pinned to the parent's generation; an
    interrupt of the parent interrupts it with the same reason; the parent is reported finished
    only after its children; its own failure does not end the parent.

    ``deadline_ms`` gives the run a deadline, counted from when it becomes active (time spent
    queued behind the session's active run does not count): past it the run is interrupted
    with reason ``timeout`` and origin ``deadline`` (its children with it), as a cancel would.

    ``queue_policy`` says what the start does while the session is busy: ``"queue"`` (behind
    the active run), ``"coalesce"`` (queued, replacing the session's still-queued ``coalesce``
    run, which ends ``coalesced``; dropped if the active run is interrupted before it starts)
    or ``"reject_if_busy"`` (``SessionBusy``). None: the session's default
    (``set_queue_policy``), else the config's ``queue_policy`` (``"queue"`` unless set).

    ``stall_after_ms`` overrides the config's setting for this run: it is flagged stalled
    (``run.stalled``) after this long without progress.

    ``interrupt_grace_ms`` overrides the config's ``interrupt_grace_ms`` for this run: once it is
    interrupted (not by a shutdown), its body may go on this long before the run is abandoned.

    ``retry_budget`` (``RetryBudget(attempts=, backoff_ms=)``) replaces the config's
    ``retry_attempts``/``retry_backoff_ms`` for this run: the retry past it interrupts the run
    (reason ``timeout``, origin ``retry_budget``).

    Awaited (``AsyncSupervisor``), cancelling the await is atomic: the caller still learns the
    handle. From the call's first step on (the start is then on its way: queued on the loop, made
    and sent at a later turn, a few starts a turn) the call waits, whatever cancels it, for the
    supervisor's answer (bounded by ``timeout``, default ``request_timeout_s``). A start refused
    (by the supervisor or by its checks) raises ``CancelledError`` (nothing started); a start it
    took returns the handle, and the cancellation is delivered again at the caller's next ``await`` (so
    ``asyncio.timeout()`` still raises its ``TimeoutError``, with the handle already in the
    caller's hands); when the call is a task's whole coroutine (``asyncio.wait_for(sup.start_run(
    ...), t)``), that task ends with the handle as its result. Either way no start is left
    without its handle."""
    limit = check.timeout("timeout", timeout)
    check.callback("body", body)
    request = start_run_request(
        session=session,
        directory=directory,
        run_id=run_id,
        queue_policy=queue_policy,
        resume_of=resume_of,
        parent_run_id=parent_run_id,
        deadline_ms=deadline_ms,
        stall_after_ms=stall_after_ms,
        interrupt_grace_ms=interrupt_grace_ms,
        retry_budget=retry_budget,
    )
    return StartCall(request, body, limit, fresh=run_id is None)


def cancel(
    run_id: str, *, origin: str = "user", grace_ms: int | None = None, timeout: float | None = None
) -> Call[None]:
    """Interrupt a run now (``user_cancel``), or end it unstarted if it is queued. ``grace_ms``:
    how long its body (and its children's) may go on before the run is abandoned (reported
    ``interrupted``, ``abandoned``, its session moving on); None: the run's
    ``interrupt_grace_ms``, else the config's."""
    limit = check.timeout("timeout", timeout)
    return Call(check.cancel(run_id, origin=origin, grace_ms=grace_ms), limit, _nothing)


def cancel_session(
    session: str, *, origin: str = "user", grace_ms: int | None = None, timeout: float | None = None
) -> Call[tuple[str, ...]]:
    """Stop a whole session: its queued runs end unstarted and its active run is interrupted
    (``user_cancel``), all naming one action id; ``grace_ms`` as for ``cancel``. Returns the runs it
    stopped (queued ones first); an idle or unknown session: ``()``."""
    limit = check.timeout("timeout", timeout)
    return Call(check.cancel_session(session, origin=origin, grace_ms=grace_ms), limit, _stopped)


def delete_session(
    session: str,
    *,
    confirm: bool = False,
    origin: str = "user",
    grace_ms: int | None = None,
    timeout: float | None = None,
) -> Call[tuple[str, ...]]:
    """Forget a session (its queue policy, its "always" grants). ``SessionBusy`` while it has an
    active or queued run, unless ``confirm``: then it is stopped first, as ``cancel_session``
    (its open asks withdrawn), and forgotten once its active run has ended. Returns the runs it
    stopped."""
    limit = check.timeout("timeout", timeout)
    request = check.delete_session(session, confirm=confirm, origin=origin, grace_ms=grace_ms)
    return Call(request, limit, _stopped)


def set_queue_policy(
    session: str, queue_policy: QueuePolicyName | QueuePolicy, *, timeout: float | None = None
) -> Call[None]:
    """Set the session's default queue policy: what its starts that name none do while it is
    busy (see ``start_run``). Later starts only; queued runs keep theirs. The session need not
    have run yet; the default holds until set back to the config's ``queue_policy`` (it is not
    journaled: set it again after a restart, or use the config's default for every session).
    ``session(...)`` shows it (``SessionSnapshot.queue_policy``)."""
    limit = check.timeout("timeout", timeout)
    return Call(check.set_queue_policy(session, queue_policy), limit, _nothing)


# --- lifecycle closes ----------------------------------------------------------------------------


def close(
    do: CloseActionName | CloseAction,
    *,
    mode: CloseModeName | CloseMode,
    origin: str,
    directory: str | PathLike[str] | None = None,
    tag: str | None = None,
    fingerprint: str | None = None,
    reload_policy: ReloadPolicyName | ReloadPolicy | None = None,
    timeout: float | None = None,
) -> Call[CloseOutcome]:
    """Request a lifecycle close (dispose, dispose_all, reload, invalidate_config) and get its
    structured result: ``completed``, ``deferred`` or ``interrupted`` (``noop``: see
    ``fingerprint``). Rejections raise.

    ``reload_policy`` (a reload only; ``InvalidRequest`` for another close): when the next
    generation loads, overriding ``SupervisorConfig.reload_policy`` for this reload. ``lazy``:
    when the first run needs it or when the old generation has closed, whichever comes first
    (an idle directory's old generation closes at once: the next one is loaded before the
    answer); ``eager``: at once, next to the old generation still serving its runs.

    ``fingerprint`` (the no-op gate): a digest of what the close would change to, e.g. the new
    config's for ``invalidate_config``. If every live instance it covers was loaded with that
    same fingerprint (``load(..., fingerprint=...)`` or an earlier close), the close is answered
    ``noop`` at once and touches nothing; otherwise it goes ahead and later loads in its
    directories record the new fingerprint."""
    limit = check.timeout("timeout", timeout)
    request = check.close(
        do,
        mode=mode,
        origin=origin,
        directory=directory,
        tag=tag,
        fingerprint=fingerprint,
        reload_policy=reload_policy,
    )
    return Call(request, limit, _close_outcome)


def confirm_close(
    action_id: str, *, origin: str | None = None, tag: str | None = None, timeout: float | None = None
) -> Call[CloseOutcome]:
    """Turn a pending maintenance close into a confirmed one: the runs it waits for (e.g. one
    flagged stalled, see ``pending_actions()``' ``stalled_runs``) are interrupted now with
    ``lifecycle_interrupt``, their ``action_id`` this action's and their ``origin`` the given one
    (by default the action's own), and the close completes as their bodies stop
    (``lifecycle.completed``). Answered with the action's outcome: its result as announced
    (typically ``deferred``) and ``interrupted_runs``, the runs this confirm interrupted.

    Raises ``UnknownAction`` (no such action), ``ActionAlreadyCompleted`` (nothing waits any more)
    or ``NotConfirmable`` (not a maintenance close). A second confirm of the same action changes
    nothing (its runs are interrupting already)."""
    limit = check.timeout("timeout", timeout)
    return Call(check.confirm_close(action_id, origin=origin, tag=tag), limit, _close_outcome)


# --- asks: what waits for the user ---------------------------------------------------------------
# Address a reply by its ask id (from ``ask.requested`` or ``pending_asks()``): that is exact and
# never races. ``run_id=`` instead is a convenience for a run with exactly one open ask of that
# kind (``NothingPending`` if none, ``InvalidRequest`` if several).


def reply_permission(
    ask_id: str | None = None,
    *,
    approve: bool,
    message: str | None = None,
    run_id: str | None = None,
    always: bool = False,
    timeout: float | None = None,
) -> Call[None]:
    """Approve or reject a permission ask. A rejection with a ``message`` is model-visible
    feedback and the run goes on; without one the run is interrupted (``permission_rejected``)
    and its other open asks are withdrawn. ``always`` (with ``approve``) grants the ask's
    ``payload.key`` in its session: its matching open asks are approved now, later ones as they
    come, until ``delete_session``. Raises ``UnknownAsk``, ``AskWithdrawn`` (it timed out, or its
    run was interrupted or ended), ``AskAlreadyAnswered``."""
    limit = check.timeout("timeout", timeout)
    request = check.reply_permission(ask_id, run_id=run_id, approve=approve, message=message, always=always)
    return Call(request, limit, _nothing)


def answer_form(
    ask_id: str | None = None,
    *,
    answer: str | Sequence[str | Sequence[str]],
    run_id: str | None = None,
    timeout: float | None = None,
) -> Call[None]:
    """Answer a form ask; raises like ``reply_permission``. ``answer``: one entry per question, in
    order (a list of the picks for a ``multiple`` question), or one string for the whole form; a
    list that does not fit the form's questions is refused (``InvalidRequest``, naming the entry)."""
    limit = check.timeout("timeout", timeout)
    return Call(check.answer_form(ask_id, run_id=run_id, answer=answer), limit, _nothing)


def dismiss_form(
    ask_id: str | None = None,
    *,
    message: str | None = None,
    run_id: str | None = None,
    timeout: float | None = None,
) -> Call[None]:
    """Dismiss a form ask. With a ``message`` it is model-visible feedback and the run goes on;
    without one the run is interrupted (``form_dismissed``) and its other open asks are
    withdrawn. Raises like ``reply_permission``."""
    limit = check.timeout("timeout", timeout)
    return Call(check.dismiss_form(ask_id, run_id=run_id, message=message), limit, _nothing)


# --- shutdown ------------------------------------------------------------------------------------


class _Settings(Protocol):
    """What a shutdown reads of the supervisor's ``SupervisorConfig``."""

    @property
    def default_grace_ms(self) -> int: ...

    @property
    def request_timeout_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class ShutdownCall:
    """A shutdown without its wait: the checked request, whose grace the config gives when the
    caller named none (``for_config``)."""

    request: Shutdown
    default_grace: bool

    def for_config(self, config: _Settings) -> tuple[Shutdown, float]:
        """The request with its grace, and how long to wait for its answer (the grace, then the
        config's ``request_timeout_s``)."""
        request = self.request
        if self.default_grace:
            request = msgspec.structs.replace(request, grace_ms=config.default_grace_ms)
        return request, request.grace_ms / 1000.0 + config.request_timeout_s


def shutdown(
    *,
    grace_ms: int | None = None,
    reason: ShutdownReasonName | ShutdownReason = "shutdown",
    origin: str | None = None,
    tag: str | None = None,
) -> ShutdownCall:
    """Interrupt everything with ``reason`` and stop every actor and thread we started (``origin``
    and ``tag`` name who asked and why, in the lifecycle events); return once the shutdown has
    completed, with its final outcome. Returns within ``grace_ms`` (None: the config's
    ``default_grace_ms``) plus ``stop_timeout_s`` whatever host code does, plus the supervisor's own
    work at the deadline: bodies that ignore cancellation are abandoned (``abandoned_runs``); load
    and dispose hooks, subscriber callbacks and future callbacks still running are left behind and
    named in ``overran``. Abandoning costs the supervisor's thread some CPU per stuck body (about 40
    to 50 ms past the grace for 1,000 deaf bodies on two busy cores: ``uncooperative_overrun_1000_ms``
    in docs/performance.md). Idempotent: a second call returns the first one's outcome."""
    grace = 0 if grace_ms is None else grace_ms
    request = check.shutdown(grace_ms=grace, reason=reason, origin=origin, tag=tag)
    return ShutdownCall(request, default_grace=grace_ms is None)
