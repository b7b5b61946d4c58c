"""The asyncio facade: the same supervisor, the same semantics and the same exceptions as
``Supervisor``, with every call a coroutine that never blocks the event loop.

Nothing here waits on a thread: each call sends its message through the same link as the sync
facade (actors/_link.py: the same checks, the same refusals, the same exceptions) and awaits the
reply. What the supervisor's thread hands a loop (the answers to starts, the starts of async
bodies' tasks, runs' ends, subscribers' wake-ups) goes through the loop's inbox
(actors/_async_body.py ``LoopInbox``): one wake-up per batch, never one per run or per event. The
starts a loop sends during one turn are told to the supervisor together at the turn's end, so a
burst of starts wakes the supervisor's thread once, after it, not on each.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import inspect
import itertools
import math
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Generator, Iterable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from os import PathLike
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from run_supervisor.actors import _calls as calls
from run_supervisor.actors import _validate as check
from run_supervisor.actors._api import RunHandle, Supervisor, SupervisorConfig
from run_supervisor.actors._async_body import RunBody, inbox_of, outcome_on
from run_supervisor.actors._calls import Call, taking, taking_later
from run_supervisor.actors._errors import (
    InvalidRequest,
    JournalFailed,
    SupervisorClosed,
    SupervisorError,
    SupervisorTimeout,
)
from run_supervisor.actors._instance_actor import HooksOnLoop, InstanceHooks
from run_supervisor.actors._link import Link, QueuedStart, link_of
from run_supervisor.actors._relay import complete
from run_supervisor.actors._resume import (
    AsyncResumeCallback,
    OfferedOnLoop,
    ResumeOffer,
    keep,
    kept,
    offer_resumes_async,
)
from run_supervisor.actors._subscription import Subscription
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.protocol import (
    ActionSnapshot,
    AskSnapshot,
    CloseOutcome,
    CoreStatistics,
    Event,
    Request,
    RequestOutcome,
    RunRecovered,
    RunSnapshot,
    SessionSnapshot,
    SupervisorCore,
)

if TYPE_CHECKING:  # an annotation only: the journal is loaded where one is given
    from run_supervisor.actors._journal import JournalSync

__all__ = ["AsyncInstanceHooks", "AsyncRunHandle", "AsyncSubscription", "AsyncSupervisor"]

T = TypeVar("T")


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _same(call: calls.StartCall) -> calls.StartCall:
    return call


def _given_timeout(make: Callable[[], calls.StartCall]) -> float | None:
    """The ``timeout`` a start was called with (``make`` binds its arguments), if it is a valid one:
    its checks, run later, refuse any other."""
    keywords = getattr(make, "keywords", None)
    try:
        return check.timeout("timeout", keywords.get("timeout") if isinstance(keywords, dict) else None)
    except InvalidRequest:
        return None


class _Bounds:
    """The bounds of one loop's awaited starts: one timer, due at the earliest of them, not a timer
    each. Used on its loop only. Releasing a start's waiter wakes its caller, which looks at the
    time and the answer again (a start answered meanwhile is left as it is)."""

    __slots__ = ("_due", "_heap", "_order", "_timer", "_waiting")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, QueuedStart]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._due = math.inf
        self._waiting = 0

    def enter(self) -> None:
        """A start begins to wait."""
        self._waiting += 1

    def leave(self) -> None:
        """A start stops waiting: with none left, what is kept for them goes."""
        self._waiting -= 1
        if not self._waiting:
            self._heap.clear()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
                self._due = math.inf

    def add(self, loop: asyncio.AbstractEventLoop, at: float, queued: QueuedStart) -> None:
        """Wake the caller of ``queued`` at ``at`` (``loop.time()``) at the latest."""
        heapq.heappush(self._heap, (at, next(self._order), queued))
        if at < self._due:
            if self._timer is not None:
                self._timer.cancel()
            self._due = at
            self._timer = loop.call_at(at, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        heap = self._heap
        now = loop.time()
        while heap and heap[0][0] <= now:
            _release(heapq.heappop(heap)[2].waiter)
        if heap:
            self._due = heap[0][0]
            self._timer = loop.call_at(self._due, self._expire, loop)
        else:
            self._timer = None
            self._due = math.inf


_BOUNDS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Bounds] = weakref.WeakKeyDictionary()


def _bounds_of(loop: asyncio.AbstractEventLoop) -> _Bounds:
    """The loop's ``_Bounds`` (only its own thread uses them)."""
    bounds = _BOUNDS.get(loop)
    if bounds is None:
        bounds = _BOUNDS[loop] = _Bounds()
    return bounds


class AsyncSubscription(Subscription):
    """The supervisor's events from the moment of subscribing, in order, for one event loop:
    ``async for event in subscription`` ends when the supervisor has shut down (or on ``close()``).

    Bounded or unbounded exactly like ``Subscription``: with ``maxsize > 0`` a subscriber that falls
    behind loses its oldest events, counted in ``dropped``. The supervisor never waits for it. It is
    bound to no loop: each ``await`` wakes on the loop that awaits.
    """

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize=maxsize)
        self._waiters: list[asyncio.Future[None]] = []  # guarded by self._cond; each knows its loop

    # Called on the supervisor's thread: must never block.
    def _offer(self, event: Any) -> None:
        super()._offer(event)
        self._wake()

    def _end(self, *, timeout: float = 0.0) -> bool:
        ended = super()._end(timeout=timeout)
        self._wake()
        return ended

    def _wake(self) -> None:
        with self._cond:
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            try:
                inbox_of(waiter.get_loop()).post(_release, waiter)  # one wake per loop and batch
            except RuntimeError:
                pass  # the loop is closed: nobody waits on it any more

    async def get(self, timeout: float | None = None) -> Event:  # type: ignore[override]
        """The next event. ``SupervisorTimeout`` if none comes within ``timeout`` seconds (``None``:
        wait until one comes or the subscription closes); ``EOFError`` once closed and drained."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    with self._cond:
                        if self._items:
                            return self._items.popleft()
                        if self._closed:
                            raise EOFError("the subscription is closed")
                        waiter = asyncio.get_running_loop().create_future()
                        self._waiters.append(waiter)
                    await waiter
        except TimeoutError:
            raise SupervisorTimeout(f"no event within {timeout} s") from None

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self.get()
        except EOFError:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class AsyncRunHandle:
    """A started (or queued) run, for an asyncio host."""

    def __init__(self, supervisor: AsyncSupervisor, handle: RunHandle) -> None:
        self._supervisor = supervisor
        self._handle: RunHandle | None = handle
        self.run_id = handle.run_id
        self._source = supervisor._link.finished_of(handle)  # the run's own, if its handle has it
        self._finished: asyncio.Future[RunSnapshot] | None = None  # on the loop of the first wait

    @classmethod
    def _started(
        cls, supervisor: AsyncSupervisor, run_id: str, finished: Future[RunSnapshot]
    ) -> AsyncRunHandle:
        """The handle ``start_run`` returns: its sync handle is made when first asked for."""
        handle = cls.__new__(cls)
        handle._supervisor = supervisor
        handle._handle = None
        handle.run_id = run_id
        handle._source = finished
        handle._finished = None
        return handle

    @property
    def sync(self) -> RunHandle:
        """The same run's handle for code on other threads."""
        if self._handle is None:
            self._handle = RunHandle(self._supervisor.sync, self.run_id, self._source)
        return self._handle

    def _finished_on(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[RunSnapshot]:
        finished = self._finished
        if finished is None or finished.get_loop() is not loop:
            source = self._source
            if source is None:  # not made by start_run: ask the supervisor (cancelled on time-out)
                link = self._supervisor._link
                return asyncio.wrap_future(link.finished_future(self.run_id, None), loop=loop)
            finished = self._finished = outcome_on(loop, source)  # one wake per batch of ends
        return finished

    async def wait(self, timeout: float | None = None) -> RunSnapshot:
        """Wait until the run has finished; return its final snapshot. ``timeout=None`` (the
        default) waits as long as the run takes, as asyncio's own waits do (bound it with
        ``asyncio.timeout()``, which composes: its ``TimeoutError`` leaves the run as it was);
        with a number, ``SupervisorTimeout`` after that many seconds, which leaves nothing behind.
        ``SupervisorClosed`` if the supervisor stopped without it finishing."""
        limit = check.timeout("timeout", timeout)
        finished = self._finished_on(asyncio.get_running_loop())
        if not finished.done():
            done, _ = await asyncio.wait({finished}, timeout=limit)  # never cancels the shared future
            if not done:
                raise SupervisorTimeout(f"run {self.run_id!r} did not finish within {limit} s")
        return finished.result()

    async def cancel(
        self, *, origin: str = "user", grace_ms: int | None = None, timeout: float | None = None
    ) -> None:
        """Interrupt the run now (``user_cancel``), or end it unstarted if it is queued; see
        ``Supervisor.cancel`` for ``grace_ms``."""
        await self._supervisor.cancel(self.run_id, origin=origin, grace_ms=grace_ms, timeout=timeout)

    async def snapshot(self, timeout: float | None = None) -> RunSnapshot | None:
        """What is known of the run now (None once forgotten)."""
        return await self._supervisor.run(self.run_id, timeout=timeout)

    def __repr__(self) -> str:
        return f"AsyncRunHandle({self.run_id!r})"


class AsyncInstanceHooks(Protocol):
    """``InstanceHooks`` for an asyncio host: coroutines, run on the host's loop (the one that
    awaited ``AsyncSupervisor.start``), with the same budgets and the same meaning."""

    async def load(self, directory: str, generation: int) -> Any:
        """Build the caches of a new instance (see ``InstanceHooks.load``)."""
        ...

    async def dispose(self, directory: str, generation: int, cache: Any) -> None:
        """Tear down the caches of an instance no run uses any more (see ``InstanceHooks.dispose``)."""
        ...


def _on_loop(
    hooks: InstanceHooks | AsyncInstanceHooks | None, loop: asyncio.AbstractEventLoop
) -> InstanceHooks | None:
    """Hooks whose ``load`` and ``dispose`` are coroutine functions run on ``loop``; sync ones as
    they are (a mix of the two is refused, naming the sync one)."""
    if hooks is None:
        return None
    kinds = {name: inspect.iscoroutinefunction(getattr(hooks, name, None)) for name in ("load", "dispose")}
    if not any(kinds.values()):
        return cast("InstanceHooks", hooks)
    if not all(kinds.values()):
        sync = next(name for name, is_async in kinds.items() if not is_async)
        raise InvalidRequest(f"hooks: load and dispose must both be async def, or both not ({sync} is not)")
    return HooksOnLoop(cast("AsyncInstanceHooks", hooks), loop)


def _cancel_again(frame: FrameType | None) -> None:
    """Deliver a cancellation that a start held back, at the caller's next ``await`` (counted
    once, so ``asyncio.timeout()`` still takes it for its own); not when the holding call is its
    task's whole coroutine: that task then ends with the call's result."""
    task = asyncio.current_task()
    whole = getattr(task.get_coro(), "cr_frame", None) if task is not None else None
    if task is None or whole in (frame, getattr(frame, "f_back", None)):  # f_back: taking()'s method
        return
    task.uncancel()
    task.cancel()


def _shut_down_unwanted(started: Future[Supervisor]) -> None:
    """A start the host gave up on: shut it down, on a closer thread (this may run on the loop)."""
    if not started.cancelled() and started.exception() is None:
        supervisor = started.result()
        closer = threading.Thread(
            target=supervisor.shutdown, kwargs={"grace_ms": 0}, name="run-supervisor-closer", daemon=True
        )
        closer.start()


class _Starting:
    """What ``AsyncSupervisor.start()`` returns: await it, or use it with ``async with``."""

    def __init__(self, open_: Callable[[], Coroutine[Any, Any, AsyncSupervisor]]) -> None:
        self._open = open_
        self._supervisor: AsyncSupervisor | None = None

    def __await__(self) -> Generator[Any, None, AsyncSupervisor]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncSupervisor:
        self._supervisor = await self._open()
        return self._supervisor

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._supervisor is not None
        await self._supervisor.shutdown()


class AsyncSupervisor:
    """Owns run lifetime, for an asyncio host. Start it with ``async with AsyncSupervisor.start()
    as sup`` (or ``sup = await AsyncSupervisor.start()`` and ``await sup.shutdown()``).

    Every method is a coroutine that sends the same request as the sync ``Supervisor`` and awaits
    its answer without blocking the loop; rejections raise the same exceptions (``UnknownRun``,
    ``SupervisorClosed``...), a wait that runs out raises ``SupervisorTimeout``. ``sync`` is the
    same supervisor's thread-safe sync facade, for code running on other threads.
    """

    def __init__(self, supervisor: Supervisor) -> None:
        """Drive an existing ``Supervisor`` from asyncio (both facades then share its link)."""
        link = link_of(supervisor)
        if link is None:
            raise InvalidRequest(f"supervisor must be a Supervisor, not {type(supervisor).__name__}")
        self.sync = supervisor
        self._link: Link = link

    @classmethod
    def start(
        cls,
        config: SupervisorConfig | None = None,
        *,
        hooks: InstanceHooks | AsyncInstanceHooks | None = None,
        directories: Iterable[str | PathLike[str]] = (),
        journal: str | PathLike[str] | None = None,
        journal_sync: JournalSync = "normal",
        resume: AsyncResumeCallback | None = None,
        on_start: Callable[[AsyncSupervisor], object] | None = None,
    ) -> _Starting:
        """Start a supervisor, exactly as ``Supervisor.start`` (same arguments, same errors):
        ``directories`` are loaded (generation 1) before it is returned, and if a load fails the
        supervisor is shut down again and ``LoadFailed`` names each directory; ``journal`` recovers
        the runs a dead process left unfinished (``recovered()``). The start (opening the journal,
        waiting for the load hooks) runs on a short-lived thread, never on the loop.
        ``async with AsyncSupervisor.start(...) as sup:`` shuts it down on leaving the block.

        ``hooks`` may be ``AsyncInstanceHooks`` (``async def load`` and ``async def dispose``): they
        then run as coroutines on this (the awaiting) loop, with the same budgets as sync hooks (a
        load past ``load_budget_ms`` counts as failed and is left to finish; a dispose past
        ``dispose_budget_ms`` is reported overran), so an asyncio host's caches need no bridge.

        ``resume`` is the resume policy's callback, as ``Supervisor.start``'s; it may be ``async def``
        (run as a task on this loop) and its ``Continuation`` may carry an ``async def`` body. The
        offers are made on this loop once the supervisor has started, before it is returned.
        ``on_start`` (it may be ``async def``) is called on this loop with the new supervisor once it
        has recovered, before it loads ``directories`` or offers resumes: subscribe there to see
        every event after the recovery's."""

        async def open_() -> AsyncSupervisor:
            check.callback("resume", resume, optional=True)
            check.callback("on_start", on_start, optional=True)
            started: Future[Supervisor] = Future()
            loop = asyncio.get_running_loop()
            instance_hooks = _on_loop(hooks, loop)
            made: list[AsyncSupervisor] = []

            async def call_on_start(sync: Supervisor) -> None:
                assert on_start is not None
                made.append(cls(sync))
                result = on_start(made[0])
                if inspect.isawaitable(result):
                    await result

            def on_start_on_loop(sync: Supervisor) -> None:  # on the starting thread: the loop is free
                called = asyncio.run_coroutine_threadsafe(call_on_start(sync), loop)
                while not called.done():  # in slices: a loop closed before running it never will
                    if loop.is_closed() and not called.done():
                        called.cancel()
                        raise RuntimeError("the event loop starting this supervisor has ended")
                    wait_futures([called], timeout=0.1)
                called.result()

            def starting() -> None:
                try:
                    supervisor = Supervisor.start(
                        config,
                        hooks=instance_hooks,
                        directories=directories,
                        journal=journal,
                        journal_sync=journal_sync,
                        resume=None if resume is None else OfferedOnLoop(resume),
                        on_start=None if on_start is None else on_start_on_loop,
                    )
                except BaseException as exc:
                    complete(started, error=exc)
                else:
                    complete(started, supervisor)

            threading.Thread(target=starting, name="run-supervisor-starting", daemon=True).start()
            try:  # the sync start bounds itself (request timeout, load budget)
                sync = await asyncio.shield(asyncio.wrap_future(started))
                supervisor = made[0] if made else cls(sync)
                if resume is not None:  # each offer is bounded by the request timeout
                    timeout = supervisor.config.request_timeout_s
                    keep(sync, await offer_resumes_async(supervisor, resume, timeout=timeout))
                return supervisor
            except BaseException:  # the host gave up, or a callback raised: shut down what it will not get
                started.add_done_callback(_shut_down_unwanted)
                raise

        return _Starting(open_)

    async def __aenter__(self) -> AsyncSupervisor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    @property
    def config(self) -> SupervisorConfig:
        """The settings in force."""
        return self.sync.config

    @property
    def threads(self) -> ThreadBook:
        """Every thread the supervisor started (``threads.alive()``)."""
        return self.sync.threads

    @property
    def closed(self) -> bool:
        """Shutdown has completed."""
        return self.sync.closed

    @property
    def journal_failure(self) -> JournalFailed | None:
        """Why this supervisor stopped, if its journal failed (see ``Supervisor.journal_failure``)."""
        return self.sync.journal_failure

    @property
    def epoch(self) -> int | None:
        """Which life of its journal this supervisor is (see ``Supervisor.epoch``)."""
        return self.sync.epoch

    def recovered(self) -> tuple[RunRecovered, ...]:
        """The runs the previous process left unfinished in the journal (see
        ``Supervisor.recovered``); read at start, so this never waits."""
        return self.sync.recovered()

    def resumes(self) -> tuple[ResumeOffer, ...]:
        """What became of each run recovered under the resume policy (see ``Supervisor.resumes``)."""
        return kept(self.sync)

    def recovery_events(self) -> tuple[Event, ...]:
        """Every event the recovery published (see ``Supervisor.recovery_events``)."""
        return self.sync.recovery_events()

    # --- requests ----------------------------------------------------------------------------

    async def _answer(self, call: Call[T]) -> T:
        """Carry out a call written in actors/_calls.py: send it through the link, await the
        answer (within ``timeout``, default ``request_timeout_s``: ``SupervisorTimeout``)."""
        return await self._link.answer_async(call)

    async def submit(
        self, request: Request, *, body: RunBody | None = None, timeout: float | None = None
    ) -> CloseOutcome | RequestOutcome:
        """Send any request and return its outcome: a rejection is a value here, never an
        exception (the raw entry point for hosts that speak the wire protocol; a malformed request
        is rejected ``invalid_request``). Only a wait that runs out raises (``SupervisorTimeout``)."""
        limit = check.timeout("timeout", timeout)
        return await self._link.wait(self.sync.submit(request, body=body), limit)

    async def _start(self, make: Callable[[], calls.StartCall]) -> AsyncRunHandle:
        """Carry out a start (actors/_calls.py): queue it (``Link.start_later``: made, checked and
        sent at a later turn of the loop, a few starts at a time), await the answer, atomically."""
        link = self._link
        loop = asyncio.get_running_loop()
        bounds = _bounds_of(loop)
        cancelled = False
        given = _given_timeout(make)  # its bound from the start, before its checks run
        while True:
            queued = link.start_later(make, loop)  # from here on the start will be sent
            begun = loop.time()
            bounds.enter()
            try:
                bounds.add(loop, begun + link.timeout(given), queued)
                while not queued.settled:  # a cancellation waits on for the answer: never half a start
                    call = queued.call
                    limit = link.timeout(None if call is None else call.timeout)
                    if queued.waiter.done():  # woken by its bound, or a cancellation held back
                        if loop.time() >= begun + limit:
                            queued.withdraw(link)
                            if cancelled:
                                raise asyncio.CancelledError
                            raise SupervisorTimeout(f"the supervisor did not answer within {limit} s")
                        queued.waiter = loop.create_future()
                        bounds.add(loop, begun + limit, queued)
                    try:
                        await queued.waiter  # only this start's: cancelling it leaves the start as it is
                    except asyncio.CancelledError:
                        cancelled = True
            finally:
                bounds.leave()
            error = queued.error
            if error is not None:
                if cancelled:
                    raise asyncio.CancelledError  # its checks refused it: nothing started
                raise error  # the checks' error (InvalidRequest...)
            outcome = queued.outcome
            if outcome is None:
                raise asyncio.CancelledError  # its answer was dropped: nothing started
            call = cast("calls.StartCall", queued.call)
            try:
                link.raise_for_rejection(outcome)
            except SupervisorError as rejected:
                again = None if cancelled else call.again(rejected)
                if again is not None:
                    make = functools.partial(_same, again)
                    given = again.timeout
                    continue
                if cancelled:
                    raise asyncio.CancelledError from None
                raise
            finished = cast("Future[RunSnapshot]", queued.finished)
            handle = AsyncRunHandle._started(self, call.request.run_id, finished)
            if cancelled:
                _cancel_again(inspect.currentframe())
            return handle

    start_run = taking_later(calls.start_run)(_start)

    cancel = taking(calls.cancel)(_answer)

    cancel_session = taking(calls.cancel_session)(_answer)

    delete_session = taking(calls.delete_session)(_answer)

    set_queue_policy = taking(calls.set_queue_policy)(_answer)

    async def await_idle(self, session: str, *, timeout: float | None = None) -> SessionSnapshot | None:
        """Wait, without blocking the loop, until the session has no active and no queued run; its
        snapshot then (None if unknown). At once if idle now. ``timeout=None`` (the default) waits
        as long as that takes (``asyncio.timeout()`` composes); with a number,
        ``SupervisorTimeout`` after that many seconds. See ``Supervisor.await_idle``."""
        link = self._link
        limit = check.timeout("timeout", timeout)
        name, idle = link.idle_future(session)
        if idle.done():
            return idle.result()
        outer = link.relay.relayed(idle)  # completed off its thread
        try:
            async with asyncio.timeout(limit):
                return await asyncio.wrap_future(outer)  # cancelling the wait withdraws the waiter
        except TimeoutError:
            raise link.still_busy(name, limit or 0.0) from None

    close = taking(calls.close)(_answer)

    confirm_close = taking(calls.confirm_close)(_answer)

    reply_permission = taking(calls.reply_permission)(_answer)

    answer_form = taking(calls.answer_form)(_answer)

    dismiss_form = taking(calls.dismiss_form)(_answer)

    async def pending_asks(
        self, *, run_id: str | None = None, timeout: float | None = None
    ) -> tuple[AskSnapshot, ...]:
        """Every open ask (of one run, with ``run_id``), in the order raised."""
        run_id = None if run_id is None else check.identifier("run_id", run_id)
        asks = await self._query(lambda core: core.pending_asks(), timeout)
        return asks if run_id is None else tuple(a for a in asks if a.run_id == run_id)

    async def ask(self, ask_id: str, *, timeout: float | None = None) -> AskSnapshot | None:
        """What is known of an ask, open or not (None if unknown, or forgotten with its run)."""
        ask_id = check.identifier("ask_id", ask_id)
        return await self._query(lambda core: core.ask_snapshot(ask_id), timeout)

    async def load(
        self,
        *directories: str | PathLike[str],
        fingerprint: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Load these directories' instances now (those without a current generation) and wait for
        their load hooks; ``LoadFailed`` names each that raised or overran. ``fingerprint``: what
        they are loaded with (the no-op gate). See ``Supervisor.load``."""
        limit = check.timeout("timeout", timeout)
        if limit is None:  # as the sync call: an answer, then each load within its budget
            limit = self.config.request_timeout_s + self.config.load_budget_ms / 1000.0
        await self._link.wait(
            self._link.preload_future(directories, load=True, fingerprint=fingerprint), limit
        )

    async def declare(self, *directories: str | PathLike[str], timeout: float | None = None) -> None:
        """Make directories known without loading them, so closes may name them."""
        limit = check.timeout("timeout", timeout)
        await self._link.wait(self._link.preload_future(directories, load=False), limit)

    # --- shutdown ----------------------------------------------------------------------------

    async def _shut_down(self, call: calls.ShutdownCall) -> CloseOutcome:
        request, limit = call.for_config(self.config)  # as the sync shutdown's
        await self._link.request_async(request, limit)
        return await self.wait_closed(limit)

    shutdown = taking(calls.shutdown)(_shut_down)

    def abandoned_tasks(self) -> tuple[asyncio.Task[Any], ...]:
        """Once the supervisor has shut down: the tasks of the async bodies it abandoned that still
        run (bodies that swallowed their cancellation past the grace; their runs are in the final
        outcome's ``abandoned_runs``). They are the host's now: the supervisor no longer waits for
        them, and ``asyncio.run()`` would cancel them again and wait for them at exit (forever, for
        a body that never ends); see docs/api.md for a clean exit. Empty while it serves."""
        if not self.closed:
            return ()
        return self._link.async_bodies.running()

    async def wait_closed(self, timeout: float | None = None) -> CloseOutcome:
        """Wait until a shutdown (requested anywhere) has completed and our threads have ended;
        return its final outcome. ``timeout=None`` (the default) waits as long as that takes
        (``asyncio.timeout()`` composes); with a number, ``SupervisorTimeout`` if it has not
        completed in time. The threads' end is bounded by the shutdown itself (its grace plus
        ``stop_timeout_s``)."""
        sync = self.sync
        link = self._link
        limit = check.timeout("timeout", timeout)
        complete_: Future[Any] = link.shutdown_complete
        if not complete_.done():
            outer = link.relay.relayed(complete_, shared=True)
            try:
                async with asyncio.timeout(limit):
                    await asyncio.wrap_future(outer)  # cancelling the wait cancels only ours
            except TimeoutError:
                raise SupervisorTimeout(f"the supervisor did not shut down within {limit} s") from None
        # Completed: what is left (our threads' end) is bounded by the shutdown's grace deadline.
        limit = max(0.0, (link.deadline or 0.0) - time.monotonic()) + link.timeout(None)
        done: Future[CloseOutcome] = Future()

        def close_into() -> None:  # joining threads blocks: never on the loop
            try:
                complete(done, sync.wait_closed(timeout=limit))
            except BaseException as exc:
                complete(done, error=exc)

        threading.Thread(target=close_into, name="run-supervisor-closer", daemon=True).start()
        return await self._link.wait(done, limit + sync.config.stop_timeout_s + 1.0)

    # --- queries and events ------------------------------------------------------------------

    async def _query(self, read: Callable[[SupervisorCore], T], timeout: float | None) -> T:
        return await self._link.wait(self._link.query_future(read), check.timeout("timeout", timeout))

    async def run(self, run_id: str, *, timeout: float | None = None) -> RunSnapshot | None:
        """What is known of a run (None if unknown or forgotten)."""
        return await self._query(lambda core: core.run_snapshot(run_id), timeout)

    async def session(self, session_id: str, *, timeout: float | None = None) -> SessionSnapshot | None:
        """A session's status, its active run and its queue (None if unknown)."""
        return await self._query(lambda core: core.session_snapshot(session_id), timeout)

    async def pending_actions(self, *, timeout: float | None = None) -> tuple[ActionSnapshot, ...]:
        """Lifecycle actions that have not completed, with the runs each still waits for."""
        return await self._query(lambda core: core.pending_actions(), timeout)

    async def statistics(self, *, timeout: float | None = None) -> CoreStatistics:
        """Counters: runs active, queued and finished, open instances, pending actions..."""
        return await self._query(lambda core: core.statistics(), timeout)

    def events(self, *, maxsize: int = 0) -> AsyncSubscription:
        """Every event from now on, in order: ``async for event in sup.events():`` (it ends when
        the shutdown has completed). ``maxsize > 0`` bounds it: a subscriber that falls behind
        loses its oldest events (counted in ``dropped``). ``SupervisorClosed`` after shutdown."""
        size = check.size("maxsize", maxsize)
        if self._link.closed:
            raise SupervisorClosed("the supervisor has shut down; there are no more events")
        subscription = AsyncSubscription(maxsize=size)
        self._link.add_subscription(subscription)
        return subscription
