"""The asyncio facade: the same supervisor, the same semantics and the same exceptions as
``Supervisor``, with every call a coroutine that never blocks the event loop.

Nothing here waits on a thread: each call sends its message exactly as the sync facade does and
awaits the reply's ``concurrent.futures.Future`` through ``asyncio.wrap_future``, whose result is
handed to the loop with ``call_soon_threadsafe``. Events reach the loop the same way, one wake-up
per idle wait, never one per event.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Generator, Iterable
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

from run_supervisor.actors._api import RunHandle, Supervisor, SupervisorConfig
from run_supervisor.actors._context import RunBody
from run_supervisor.actors._errors import SupervisorClosed, SupervisorTimeout, raise_for_rejection
from run_supervisor.actors._instance_actor import InstanceHooks, NoInstanceHooks
from run_supervisor.actors._subscription import Subscription
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.protocol import (
    ActionSnapshot,
    AnswerForm,
    CancelRun,
    CloseAction,
    CloseMode,
    CloseOutcome,
    CoreStatistics,
    DismissForm,
    Event,
    InterruptReason,
    ReplyPermission,
    Request,
    RequestOutcome,
    RunSnapshot,
    SessionSnapshot,
    SupervisorCore,
)

__all__ = ["AsyncRunHandle", "AsyncSubscription", "AsyncSupervisor"]

T = TypeVar("T")


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


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
    def _offer(self, event: Any, *, after_close: bool = False) -> None:
        super()._offer(event, after_close=after_close)
        self._wake()

    def _end(self, *, join: bool = True) -> None:
        super()._end(join=join)
        self._wake()

    def _wake(self) -> None:
        with self._cond:
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            try:
                waiter.get_loop().call_soon_threadsafe(_release, waiter)
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

    def __init__(self, supervisor: AsyncSupervisor, run_id: str) -> None:
        self._supervisor = supervisor
        self.run_id = run_id

    async def wait(self, timeout: float | None = None) -> RunSnapshot:
        """Wait until the run has finished; return what is known of it. ``SupervisorTimeout`` after
        ``timeout`` seconds (default: the config's ``request_timeout_s``)."""
        waiting = RunHandle(self._supervisor.sync, self.run_id).wait_async()
        snapshot = await self._supervisor._await(waiting, timeout)
        if snapshot is None:
            raise SupervisorClosed(f"the supervisor shut down before run {self.run_id!r} was known to finish")
        result: RunSnapshot = snapshot
        return result

    async def cancel(self, *, origin: str = "user", timeout: float | None = None) -> None:
        """Interrupt the run now (``user_cancel``), or end it unstarted if it is queued."""
        await self._supervisor.cancel(self.run_id, origin=origin, timeout=timeout)

    async def snapshot(self, timeout: float | None = None) -> RunSnapshot | None:
        """What is known of the run now (None once forgotten)."""
        return await self._supervisor.run(self.run_id, timeout=timeout)

    def __repr__(self) -> str:
        return f"AsyncRunHandle({self.run_id!r})"


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
        """Drive an existing ``Supervisor`` from asyncio (both facades then share it)."""
        self.sync = supervisor

    @classmethod
    def start(
        cls,
        config: SupervisorConfig | None = None,
        *,
        hooks: InstanceHooks | None = None,
        directories: Iterable[str] = (),
    ) -> _Starting:
        """Start a supervisor; ``directories`` are loaded (generation 1) before it is returned.
        ``async with AsyncSupervisor.start(...) as sup:`` shuts it down on leaving the block."""
        dirs = tuple(directories)

        async def open_() -> AsyncSupervisor:
            supervisor = cls(Supervisor(config or SupervisorConfig(), hooks or NoInstanceHooks()))
            if dirs:
                try:
                    await supervisor.load(*dirs)
                except BaseException:
                    await supervisor.shutdown(grace_ms=0)
                    raise
            return supervisor

        return _Starting(open_)

    async def __aenter__(self) -> AsyncSupervisor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    @property
    def config(self) -> SupervisorConfig:
        return self.sync.config

    @property
    def threads(self) -> ThreadBook:
        """Every thread the supervisor started (``threads.alive()``)."""
        return self.sync.threads

    @property
    def closed(self) -> bool:
        """Shutdown has completed."""
        return self.sync.closed

    # --- plumbing ----------------------------------------------------------------------------

    async def _await(self, future: Future[T], timeout: float | None) -> T:
        limit = self.sync._timeout(timeout)
        try:
            async with asyncio.timeout(limit):
                return await asyncio.wrap_future(future)  # cancelling the wait cancels the future
        except SupervisorTimeout:
            raise
        except TimeoutError:
            raise SupervisorTimeout(f"the supervisor did not answer within {limit} s") from None

    async def _request(self, request: Request, timeout: float | None, body: RunBody | None = None) -> Any:
        outcome = await self._await(self.sync.submit(request, body=body), timeout)
        raise_for_rejection(outcome)
        return outcome

    # --- requests ----------------------------------------------------------------------------

    async def submit(
        self, request: Request, *, body: RunBody | None = None, timeout: float | None = None
    ) -> CloseOutcome | RequestOutcome:
        """Send any request and return its outcome: a rejection is a value here, never an
        exception (the raw entry point for hosts that speak the wire protocol). Only a wait that
        runs out raises (``SupervisorTimeout``)."""
        return await self._await(self.sync.submit(request, body=body), timeout)

    async def start_run(
        self,
        body: RunBody,
        *,
        session: str,
        directory: str,
        run_id: str | None = None,
        timeout: float | None = None,
    ) -> AsyncRunHandle:
        """Start a run (or queue it behind the session's active run), pinned to the directory's
        current instance generation. See ``Supervisor.start_run``."""
        request = self.sync._start_run_request(session=session, directory=directory, run_id=run_id)
        await self._request(request, timeout, body)
        return AsyncRunHandle(self, request.run_id)

    async def cancel(self, run_id: str, *, origin: str = "user", timeout: float | None = None) -> None:
        """Interrupt a run now (``user_cancel``), or end it unstarted if it is queued."""
        await self._request(CancelRun(run_id=run_id, origin=origin), timeout)

    async def close(
        self,
        do: CloseAction | str,
        *,
        mode: CloseMode | str,
        origin: str,
        directory: str | None = None,
        tag: str | None = None,
        timeout: float | None = None,
    ) -> CloseOutcome:
        """Request a lifecycle close and get its structured result (``completed``, ``deferred`` or
        ``interrupted``); rejections raise. See ``Supervisor.close``."""
        request = self.sync._close_request(do, mode=mode, origin=origin, directory=directory, tag=tag)
        outcome = await self._request(request, timeout)
        assert isinstance(outcome, CloseOutcome)
        return outcome

    async def reply_permission(
        self, run_id: str, *, approve: bool, message: str | None = None, timeout: float | None = None
    ) -> None:
        """Answer a run's permission ask (a rejection without ``message`` interrupts the run)."""
        await self._request(ReplyPermission(run_id=run_id, approve=approve, message=message), timeout)

    async def answer_form(self, run_id: str, answer: str, *, timeout: float | None = None) -> None:
        """Answer a run's question form."""
        await self._request(AnswerForm(run_id=run_id, answer=answer), timeout)

    async def dismiss_form(self, run_id: str, *, timeout: float | None = None) -> None:
        """Dismiss a run's question form: the run ends ``interrupted`` / ``form_dismissed``."""
        await self._request(DismissForm(run_id=run_id), timeout)

    async def load(self, *directories: str, timeout: float | None = None) -> None:
        """Load these directories' instances now (those without a current generation)."""
        await self._await(self.sync._preload_future(directories, load=True), timeout)

    async def declare(self, *directories: str, timeout: float | None = None) -> None:
        """Make directories known without loading them, so closes may name them."""
        await self._await(self.sync._preload_future(directories, load=False), timeout)

    # --- shutdown ----------------------------------------------------------------------------

    async def shutdown(
        self,
        *,
        grace_ms: int | None = None,
        reason: InterruptReason | str = InterruptReason.SHUTDOWN,
        origin: str | None = None,
        tag: str | None = None,
    ) -> CloseOutcome:
        """Interrupt everything with ``reason`` and stop every actor and thread we started, within
        ``grace_ms``; return once the shutdown has completed, with its final outcome. Idempotent:
        a second call returns the first one's outcome."""
        request = self.sync._shutdown_request(grace_ms=grace_ms, reason=reason, origin=origin, tag=tag)
        config = self.sync.config
        limit = request.grace_ms / 1000.0 + config.request_timeout_s + config.stop_timeout_s
        outcome = await self._await(self.sync._shutdown_future(request), limit)
        raise_for_rejection(outcome)
        assert isinstance(outcome, CloseOutcome)
        return outcome

    async def wait_closed(self, timeout: float | None = None) -> CloseOutcome:
        """Wait until a shutdown (requested anywhere) has completed and our threads have ended;
        return its final outcome. ``SupervisorTimeout`` if it has not completed in time."""
        sync = self.sync
        limit = sync._timeout(timeout)
        done: Future[CloseOutcome] = Future()

        def close_into() -> None:  # joining threads blocks: never on the loop
            try:
                done.set_result(sync.wait_closed(timeout=limit))
            except BaseException as exc:
                done.set_exception(exc)

        threading.Thread(target=close_into, name="run-supervisor-closer", daemon=True).start()
        return await self._await(done, limit + sync.config.stop_timeout_s)

    # --- queries and events ------------------------------------------------------------------

    async def _query(self, read: Callable[[SupervisorCore], T], timeout: float | None) -> T:
        return await self._await(self.sync._query_future(read), timeout)

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
        subscription = AsyncSubscription(maxsize=maxsize)
        self.sync._add_subscription(subscription)
        return subscription
