"""Resume after a restart, as a policy: the shell's half (offering recovered runs to the host).

At its start a supervisor with a journal recovers the runs the dead process left unfinished; each
ends ``interrupted``/``crash`` (``run.recovered``). A host that starts it with a resume callback
(``Supervisor.start(resume=...)``) gets each of those turns offered once, for a continuation: the
callback answers a :class:`Continuation` (the body of the run that continues the turn) or None.

What is decided, and where:

* Which runs are offered is the core's decision (``SupervisorCore.recover(resume_budget=)``,
  ``protocol.resume_verdict``): a top-level run whose turn has been continued after a crash fewer
  than ``SupervisorConfig.resume_budget`` times in a row (its ``resume_count``, which the journal
  keeps across restarts) is ``offered``; one that reached the budget is ``exhausted`` -- not offered,
  its turn ends there, and its ``run.recovered`` says so. A child run is never offered (its parent's
  continuation starts children of its own).
* This module only asks and starts: each offered run, in the journal's order, is handed to the
  callback on a thread of its own (an ``async def`` callback of ``AsyncSupervisor`` as a task on the
  awaiting loop), bounded by the config's ``request_timeout_s``. A callback that raises, overruns
  (its late answer is dropped), or answers something else is reported ``failed`` with the reason,
  and the start goes on. A continuation is started with ``resume_of`` naming the recovered run, in
  its session and (unless it names one) its directory; a refused start is ``failed`` too.
* What became of each is kept (``Supervisor.resumes()``, :class:`ResumeOffer`) and logged.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass
from os import PathLike
from typing import Any, Protocol

import msgspec

from run_supervisor.actors._async_body import RunBody
from run_supervisor.actors._errors import SupervisorError, SupervisorTimeout
from run_supervisor.actors._logging import logger
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.actors._validate import QueuePolicyName
from run_supervisor.protocol import QueuePolicy, ResumeResult, ResumeVerdict, RetryBudget, RunRecovered

__all__ = [
    "AsyncResumeCallback",
    "Continuation",
    "OfferedOnLoop",
    "ResumeCallback",
    "ResumeOffer",
    "keep",
    "kept",
    "offer_resumes",
    "offer_resumes_async",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Continuation:
    """A resume callback's answer: continue the recovered turn with this body.

    The run is started with ``resume_of`` naming the recovered run, in its session. ``directory``
    defaults to the recovered run's (a run that was still queued at the crash has none recorded:
    name one). The other fields are ``start_run``'s, for the continuation (None: the defaults)."""

    body: RunBody
    directory: str | PathLike[str] | None = None
    run_id: str | None = None
    deadline_ms: int | None = None
    queue_policy: QueuePolicyName | QueuePolicy | None = None
    stall_after_ms: int | None = None
    interrupt_grace_ms: int | None = None
    retry_budget: RetryBudget | None = None


ResumeCallback = Callable[[RunRecovered], Continuation | None]
"""``Supervisor.start(resume=)``: given a recovered run's ``run.recovered`` (its session, directory,
settled tool cards and withdrawn asks), answer a :class:`Continuation` or None (the turn ends)."""

AsyncResumeCallback = Callable[[RunRecovered], Continuation | Awaitable[Continuation | None] | None]
"""``AsyncSupervisor.start(resume=)``: a resume callback, sync or ``async def`` (run on the loop)."""


class OfferedOnLoop:
    """The resume callback of ``AsyncSupervisor.start``, handed to the sync start so that the core
    decides with the budget, but offered afterwards on the awaiting loop (``offer_resumes_async``),
    never by the sync start."""

    __slots__ = ("callback",)

    def __init__(self, callback: AsyncResumeCallback) -> None:
        self.callback = callback

    def __call__(self, event: RunRecovered) -> Continuation | None:
        raise RuntimeError("an asyncio resume callback is offered on its loop, not by the sync start")


class ResumeOffer(msgspec.Struct, frozen=True, kw_only=True):
    """What became of one run recovered under a resume policy (``Supervisor.resumes()``)."""

    run_id: str
    """The recovered run."""
    session: str
    """The recovered run's session (a continuation runs in it)."""
    result: ResumeResult
    """``resumed``, ``declined``, ``failed`` or ``exhausted`` (not offered: the budget was spent)."""
    resume_count: int
    """How many times in a row its turn had been continued after a crash before this restart."""
    continued_by: str | None = None
    """``resumed``: the run that continues it (its ``run.started`` has ``resume_of`` = ``run_id``)."""
    error: str | None = None
    """``failed``: why (the callback raised, overran its bound, answered no continuation, or the
    continuation's start was refused)."""


class _Starter(Protocol):
    """What the offering needs of a sync supervisor (``Supervisor``)."""

    @property
    def threads(self) -> ThreadBook: ...

    def recovered(self) -> tuple[RunRecovered, ...]: ...

    @property
    def start_run(self) -> Callable[..., Any]: ...


class _AsyncStarter(Protocol):
    """What the offering needs of an asyncio supervisor (``AsyncSupervisor``)."""

    @property
    def threads(self) -> ThreadBook: ...

    def recovered(self) -> tuple[RunRecovered, ...]: ...

    @property
    def start_run(self) -> Callable[..., Awaitable[Any]]: ...


def offer_resumes(
    supervisor: _Starter, callback: ResumeCallback, *, timeout: float
) -> tuple[ResumeOffer, ...]:
    """Offer each run the core marked ``offered`` to ``callback`` (on a thread, bounded by
    ``timeout`` seconds), start each continuation, and report every run under the policy."""
    offers: list[ResumeOffer] = []
    for step in _offering(supervisor.recovered(), offers):
        if isinstance(step, _Ask):
            step.answer, step.error = _ask_on_thread(supervisor.threads, callback, step.event, timeout)
        else:
            with step.starting():
                step.run_id = supervisor.start_run(step.continuation.body, **step.options).run_id
    return tuple(offers)


async def offer_resumes_async(
    supervisor: _AsyncStarter, callback: AsyncResumeCallback, *, timeout: float
) -> tuple[ResumeOffer, ...]:
    """``offer_resumes`` for an asyncio supervisor: an ``async def`` callback (or one that returns
    an awaitable) runs as a task on this loop, a plain one on a thread; each bounded by ``timeout``."""
    offers: list[ResumeOffer] = []
    for step in _offering(supervisor.recovered(), offers):
        if isinstance(step, _Ask):
            step.answer, step.error = await _ask_on_loop(supervisor.threads, callback, step.event, timeout)
        else:
            with step.starting():
                step.run_id = (await supervisor.start_run(step.continuation.body, **step.options)).run_id
    return tuple(offers)


# --- the offering, once for both facades: what to ask, what to start, what became of each -------------


@dataclass(slots=True)
class _Ask:
    """Ask the callback about ``event``; the facade puts its answer (or why there is none) here."""

    event: RunRecovered
    answer: Any = None
    error: str | None = None


@dataclass(slots=True)
class _Start:
    """Start ``continuation`` with ``options``; the facade puts the started run's id here, inside
    ``starting()`` (which records a refused start)."""

    continuation: Continuation
    options: dict[str, Any]
    run_id: str | None = None
    refused: str | None = None

    @contextmanager
    def starting(self) -> Iterator[None]:
        try:
            yield
        except SupervisorTimeout as late:  # not a refusal: the run may well have started
            self.refused = f"the continuation's start was not answered in time (it may have started): {late}"
        except SupervisorError as refused:
            self.refused = f"the continuation's start was refused: {refused}"


def _offering(recovered: Iterable[RunRecovered], offers: list[ResumeOffer]) -> Iterator[_Ask | _Start]:
    """The steps a facade carries out, in order, each done before the next is asked for; what
    became of every run under the policy is appended to ``offers`` (and logged) as it is known."""
    for event in recovered:
        if event.resume is None:
            continue
        if event.resume is ResumeVerdict.EXHAUSTED:
            offers.append(_exhausted(event))
            continue
        ask = _Ask(event)
        yield ask
        offer = _checked(event, ask.answer, ask.error)
        if offer is None:
            assert isinstance(ask.answer, Continuation)
            start = _Start(ask.answer, _options(event, ask.answer))
            yield start
            if start.refused is not None:
                offer = _failed(event, start.refused)
            else:
                assert start.run_id is not None
                offer = _resumed(event, start.run_id)
        offers.append(_told(offer))


_KEPT: weakref.WeakKeyDictionary[object, tuple[ResumeOffer, ...]] = weakref.WeakKeyDictionary()
"""What became of each supervisor's offers (by its sync facade), read by both facades' ``resumes()``."""


def keep(supervisor: object, offers: tuple[ResumeOffer, ...]) -> None:
    """Record ``offers`` as what became of ``supervisor``'s recovered runs."""
    _KEPT[supervisor] = offers


def kept(supervisor: object) -> tuple[ResumeOffer, ...]:
    """What ``keep`` recorded for ``supervisor`` (empty: no resume policy, or nothing recovered)."""
    return _KEPT.get(supervisor, ())


# --- asking, bounded ----------------------------------------------------------------------------------


def _spawn(
    threads: ThreadBook, callback: Callable[[RunRecovered], Any], event: RunRecovered, into: Future[Any]
) -> threading.Thread:
    def ask() -> None:
        try:
            answer = callback(event)
        except BaseException as exc:  # the host's code: whatever it raises is its answer
            _settle(into, error=exc)
        else:
            _settle(into, answer)

    thread = threading.Thread(target=ask, name=f"run-supervisor-resume-{event.run_id}", daemon=True)
    threads.add(thread, f"the resume callback for run {event.run_id}")
    thread.start()
    return thread


def _give_up(threads: ThreadBook, thread: threading.Thread) -> None:
    """An overrunning callback is reported failed: shutdown does not wait for its thread again (as
    for an overrun dispose hook's)."""
    threads.abandoned.add(thread)


def _settle(future: Future[Any], answer: object = None, *, error: BaseException | None = None) -> None:
    """Complete ``future`` unless the wait for it was given up (a late answer is dropped)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(answer)
    except InvalidStateError:
        pass


def _ask_on_thread(
    threads: ThreadBook, callback: ResumeCallback, event: RunRecovered, timeout: float
) -> tuple[Any, str | None]:
    """The sync facade's asking: on a thread, waited for ``timeout`` seconds at most."""
    answer: Future[Any] = Future()
    thread = _spawn(threads, callback, event, answer)
    try:
        result = answer.result(timeout=timeout)
    except FutureTimeout:
        _give_up(threads, thread)
        return None, _overran(timeout)
    except Exception as exc:
        return None, _raised(exc)
    if inspect.isawaitable(result):
        _close_awaitable(result)
        return None, "the resume callback returned an awaitable: a sync supervisor takes a plain answer"
    return result, None


async def _ask_on_loop(
    threads: ThreadBook, callback: AsyncResumeCallback, event: RunRecovered, timeout: float
) -> tuple[Any, str | None]:
    """The asyncio facade's asking: an ``async def`` callback as a task on this loop, a plain one on
    a thread (and an awaitable it returns on this loop), all within ``timeout`` seconds."""
    if inspect.iscoroutinefunction(callback):
        return await _await_bounded(callback(event), timeout)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    started: Future[Any] = Future()
    thread = _spawn(threads, callback, event, started)
    answer, error = await _await_bounded(asyncio.wrap_future(started), timeout, thread=True)
    if not started.done():
        _give_up(threads, thread)
    if error is None and inspect.isawaitable(answer):
        return await _await_bounded(answer, max(0.0, deadline - loop.time()))
    return answer, error


async def _await_bounded(
    awaitable: Awaitable[Any], timeout: float, *, thread: bool = False
) -> tuple[Any, str | None]:
    """Await ``awaitable`` for ``timeout`` seconds at most; a coroutine past it is cancelled and left
    (never awaited again: one that ignores its cancellation cannot hold the start)."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        if not thread:
            task.cancel()
        task.add_done_callback(_swallow)
        return None, _overran(timeout)
    try:
        return task.result(), None
    except asyncio.CancelledError:
        return None, "the resume callback was cancelled"
    except Exception as exc:
        return None, _raised(exc)


def _swallow(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # read, so a late failure is not logged as never retrieved


def _close_awaitable(value: object) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()  # a coroutine never awaited: closed, so Python does not warn about it


def _overran(timeout: float) -> str:
    return f"the resume callback did not answer within {timeout:g} s (its late answer is dropped)"


def _raised(exc: BaseException) -> str:
    return f"the resume callback raised {type(exc).__name__}: {exc}"


# --- what became of each ------------------------------------------------------------------------------


def _checked(event: RunRecovered, answer: object, error: str | None) -> ResumeOffer | None:
    """The offer's fate if it is decided without a start (None: start ``answer``)."""
    if error is not None:
        return _failed(event, error)
    if answer is None:
        return _offer(event, ResumeResult.DECLINED)
    if not isinstance(answer, Continuation):
        return _failed(
            event, f"the resume callback answered {type(answer).__name__}, not a Continuation or None"
        )
    if answer.directory is None and event.directory is None:
        return _failed(
            event, "the continuation names no directory, and the run was queued at the crash (none recorded)"
        )
    return None


def _options(event: RunRecovered, answer: Continuation) -> dict[str, Any]:
    return {
        "session": event.session,
        "directory": answer.directory if answer.directory is not None else event.directory,
        "run_id": answer.run_id,
        "resume_of": event.run_id,
        "deadline_ms": answer.deadline_ms,
        "queue_policy": answer.queue_policy,
        "stall_after_ms": answer.stall_after_ms,
        "interrupt_grace_ms": answer.interrupt_grace_ms,
        "retry_budget": answer.retry_budget,
    }


def _exhausted(event: RunRecovered) -> ResumeOffer:
    logger.info(
        "run {} (session {}) is not resumed: its turn was continued {} time(s) after a crash already "
        "(resume budget spent)",
        event.run_id,
        event.session,
        event.resume_count,
    )
    return _offer(event, ResumeResult.EXHAUSTED)


def _failed(event: RunRecovered, error: str) -> ResumeOffer:
    return _offer(event, ResumeResult.FAILED, error=error)


def _resumed(event: RunRecovered, run_id: str) -> ResumeOffer:
    return _offer(event, ResumeResult.RESUMED, continued_by=run_id)


def _offer(
    event: RunRecovered, result: ResumeResult, *, continued_by: str | None = None, error: str | None = None
) -> ResumeOffer:
    return ResumeOffer(
        run_id=event.run_id,
        session=event.session,
        result=result,
        resume_count=event.resume_count,
        continued_by=continued_by,
        error=error,
    )


def _told(offer: ResumeOffer) -> ResumeOffer:
    if offer.result is ResumeResult.FAILED:
        logger.warning("run {} was not resumed: {}", offer.run_id, offer.error)
    return offer
