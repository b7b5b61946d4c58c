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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast

from run_supervisor.actors import _validate as check
from run_supervisor.actors._validate import CloseActionName, CloseModeName, QueuePolicyName, ReloadPolicyName
from run_supervisor.protocol import (
    CloseAction,
    CloseMode,
    CloseOutcome,
    QueuePolicy,
    ReloadPolicy,
    Request,
    RequestOutcome,
)

__all__ = ["Call", "taking"]

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
