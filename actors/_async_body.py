"""Async run bodies: an ``async def`` body runs as a task on an event loop, with the same context
semantics in async form.

The loop is the host's when it started the run through ``AsyncSupervisor`` (the loop that awaited
``start_run``), otherwise a loop thread the supervisor owns, started with the first async body.
The run still has its ``RunActor`` (the design's owner of a run, with the same token, decisions and
events as a thread body's); at ``Go`` the supervisor's thread only posts the task's start to that
loop's inbox (``LoopInbox``: the starts and answers of one batch wake the loop once), and the task
reports ``BodyEnded`` when the body is done. An async run
costs no OS thread: not at its start (which never waits on the loop), not while it is open.

An interrupt cancels the task: the body sees ``asyncio.CancelledError`` at its next ``await`` (the
context's own waits raise ``RunInterrupted``, as in a thread body). A body that swallows the
cancellation goes on until it ends, or is abandoned at the shutdown deadline exactly like a thread
body: the supervisor stops waiting for it and leaves its task (and the owned loop) running.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeGuard, TypeVar, cast

import pykka

from run_supervisor.actors._context import (
    Ask,
    CancelToken,
    FormReply,
    Gate,
    PermissionReply,
    RunContext,
    ToolCall,
    _Decides,
    _LoadFailed,
    _Loading,
    _RunReports,
    _ToolReports,
)
from run_supervisor.actors._errors import RunInterrupted, SupervisorError, SupervisorTimeout
from run_supervisor.actors._instance_actor import GetCacheInto
from run_supervisor.actors._run_actor import RunActor, RunSlot, _describe
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.protocol import DeliverAnswer, InterruptReason, StepKind, WithdrawReason

__all__ = [
    "AsyncAsk",
    "AsyncBodies",
    "AsyncRunBody",
    "AsyncRunContext",
    "AsyncToolCall",
    "LoopInbox",
    "RunBody",
    "inbox_of",
    "is_async_body",
    "outcome_on",
]

R = TypeVar("R")

AsyncRunBody: TypeAlias = Callable[["AsyncRunContext"], Awaitable[Any]]
"""An ``async def`` run body: a coroutine function taking an ``AsyncRunContext``."""

RunBody: TypeAlias = Callable[["RunContext"], Any] | AsyncRunBody
"""A run body: a callable that does the run's work on its own thread, given its ``RunContext``;
or an ``async def`` that runs as a task on an event loop, given an ``AsyncRunContext``."""


def is_async_body(body: object) -> TypeGuard[AsyncRunBody]:
    """An ``async def`` function (or a partial of one, or an object with an ``async def __call__``)."""
    while isinstance(body, functools.partial):
        body = body.func
    if inspect.iscoroutinefunction(body):
        return True
    return callable(body) and inspect.iscoroutinefunction(type(body).__call__)


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


_Posted: TypeAlias = tuple[Callable[..., object], tuple[Any, ...]]


class LoopInbox:
    """What other threads hand one event loop, run there in order, with one wake-up per batch:
    ``post`` from any thread queues a call, and only the first call of a batch wakes the loop
    (one ``call_soon_threadsafe``); the loop then runs every call queued meanwhile in one go.
    The supervisor's thread answers a batch of starts and starts their tasks (200 at once, say)
    with one wake of the host's loop, not one or two per run."""

    __slots__ = ("__weakref__", "_calls", "_lock", "_loop", "_woken")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # the loop's registry holds the inbox: it must not hold the loop
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., object], tuple[Any, ...]]] = []  # guarded by _lock
        self._woken = False  # a drain is scheduled on the loop; guarded by _lock

    def post(self, call: Callable[..., object], *args: Any) -> None:
        """Run ``call(*args)`` on the loop, after what was posted before it. ``RuntimeError`` if the
        loop is closed (nothing of it will run)."""
        with self._lock:
            if self._woken:
                loop = self._loop()
                if loop is not None and not loop.is_closed():
                    self._calls.append((call, args))
                    return
                self._woken = False  # closed with a wake-up still queued: that drain never runs
                self._calls.clear()
                raise RuntimeError("the event loop is closed")
            self._calls.append((call, args))
            self._woken = True
        loop = self._loop()
        try:
            if loop is None:
                raise RuntimeError("the event loop is gone")
            if asyncio._get_running_loop() is loop:
                loop.call_soon(self._drain)  # on the loop's own thread: nothing to wake
            else:
                loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            with self._lock:
                self._woken = False
                self._calls.clear()  # the loop is closed: none of them can run
            raise

    def _drain(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
            self._woken = False
        for index, (call, args) in enumerate(calls):
            try:
                call(*args)
            except BaseException as exc:  # as a loop's own callback would be: reported, the rest go on
                loop = self._loop()
                if isinstance(exc, KeyboardInterrupt | SystemExit) or loop is None:
                    self._put_back(calls[index + 1 :], loop)
                    raise
                loop.call_exception_handler(
                    {"message": f"exception in a posted call {call!r}", "exception": exc}
                )

    def _put_back(self, calls: list[_Posted], loop: asyncio.AbstractEventLoop | None) -> None:
        """The calls a ``KeyboardInterrupt`` or ``SystemExit`` left unrun go first in the next drain
        (if the loop turns again); a closed loop's later ``post`` raises, as ever."""
        if not calls:
            return
        with self._lock:
            self._calls[:0] = calls
            if self._woken or loop is None or loop.is_closed():
                return
            self._woken = True
        loop.call_soon(self._drain)


_INBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopInbox] = weakref.WeakKeyDictionary()
_INBOXES_LOCK = threading.Lock()


def inbox_of(loop: asyncio.AbstractEventLoop) -> LoopInbox:
    """The loop's one inbox (made on first use; it goes with the loop)."""
    inbox = _INBOXES.get(loop)
    if inbox is None:
        with _INBOXES_LOCK:
            inbox = _INBOXES.get(loop)
            if inbox is None:
                inbox = _INBOXES[loop] = LoopInbox(loop)
    return inbox


def copy_outcome(source: Future[Any], into: asyncio.Future[Any]) -> None:
    """On the loop: give ``into`` the outcome of the (done) concurrent future ``source``."""
    if into.done():
        return
    if source.cancelled():
        into.cancel()
        return
    error = source.exception()
    if error is None:
        into.set_result(source.result())
    else:
        into.set_exception(error)


def outcome_on(loop: asyncio.AbstractEventLoop, source: Future[Any]) -> asyncio.Future[Any]:
    """``asyncio.wrap_future(source)`` through the loop's inbox: an asyncio future of the loop that
    gets ``source``'s outcome, the completions of one batch waking the loop once. Cancelling it does
    not cancel ``source``."""
    into: asyncio.Future[Any] = loop.create_future()
    if source.done():  # called on the loop: no need to go through its inbox
        copy_outcome(source, into)
        return into
    inbox = inbox_of(loop)

    def done(finished: Future[Any]) -> None:
        try:
            inbox.post(copy_outcome, finished, into)
        except RuntimeError:
            pass  # the loop is closed: nobody awaits it any more

    source.add_done_callback(done)
    return into


class AsyncCancelToken(CancelToken):
    """A ``CancelToken`` whose changes also wake coroutines waiting on it, on their own loops, and
    cancel the body's task."""

    def __init__(self) -> None:
        super().__init__()
        self._waiters: list[asyncio.Future[None]] = []  # guarded by self._cond
        self._on_interrupt: Callable[[], None] | None = None

    def _notify(self, *, interrupt: bool = False) -> None:
        with self._cond:
            waiters, self._waiters = self._waiters, []
            on_interrupt = self._on_interrupt if interrupt else None
        for waiter in waiters:
            try:
                inbox_of(waiter.get_loop()).post(_release, waiter)
            except RuntimeError:
                pass  # its loop is closed: nobody waits there any more
        if on_interrupt is not None:
            on_interrupt()

    def cancel(self, reason: InterruptReason) -> None:
        super().cancel(reason)
        self._notify(interrupt=True)

    def abandon(self) -> None:
        super().abandon()
        self._notify(interrupt=True)

    def deliver(self, answer: DeliverAnswer) -> None:
        super().deliver(answer)
        self._notify()

    def wake(self) -> None:
        super().wake()
        self._notify()

    async def wait_until_async(
        self, ready: Callable[[], bool], timeout: float | None = None, *, interruptible: bool = True
    ) -> bool:
        """``wait_until`` for a coroutine: wait until ``ready()`` or (when ``interruptible``) an
        interrupt, without blocking the loop. Returns whether ``ready()`` held; raises
        ``RunInterrupted`` when woken by an interrupt or abandonment."""
        deadline = None if timeout is None else time.monotonic() + timeout
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if self._abandoned or (interruptible and self._reason is not None):
                    raise RunInterrupted._for(self._reason, self)
                if ready():
                    return True
                waiter = loop.create_future()
                self._waiters.append(waiter)
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            try:
                await asyncio.wait({waiter}, timeout=remaining)
            finally:
                with self._cond:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)


@dataclass(frozen=True, slots=True)
class _Step:
    """``ctx.step(...)`` for an async body: usable with ``with`` and with ``async with``."""

    _ctx: RunContext
    _kind: StepKind
    step_id: str
    _tool: str | None
    _call_id: str | None

    def __enter__(self) -> str:
        self._ctx.step_started(self.step_id, self._kind, tool=self._tool, call_id=self._call_id)
        return self.step_id

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self._ctx.step_finished(self.step_id, self._kind, tool=self._tool, call_id=self._call_id)

    async def __aenter__(self) -> str:
        return self.__enter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self.__exit__(exc_type)


class AsyncAsk(Generic[R]):
    """An open ask of an async body (``Ask`` in async form): ``await ask.wait()`` for the decision,
    or ``await ask.withdraw()``. Same rules: a reply accepted before a withdrawal stands."""

    def __init__(self, ask: Ask[R], token: AsyncCancelToken) -> None:
        self.sync = ask
        self.ask_id = ask.ask_id
        self.kind = ask.kind
        self._token = token

    def __repr__(self) -> str:
        return f"AsyncAsk({self.ask_id!r}, {self.kind.value})"

    @property
    def done(self) -> bool:
        """A decision (or the withdrawal) has reached the body."""
        return self.sync.done

    async def wait(self, timeout: float | None = None) -> R:
        """Wait for the decision (see ``Ask.wait``): ``RunInterrupted`` if the run is interrupted,
        ``SupervisorTimeout`` if no reply came in time (the ask is then withdrawn)."""
        if not await self._arrived(timeout):
            await self._settle(WithdrawReason.TIMEOUT)
        return self.sync._decision(timeout)

    async def withdraw(self) -> bool:
        """Stop waiting for it: True if it was withdrawn, False if a reply came first."""
        return (await self._settle(WithdrawReason.BODY)).withdrawn

    # ``Ask``'s decision (withdrawing, reading what was settled) with awaitable waits around it.

    async def _settle(self, reason: WithdrawReason) -> DeliverAnswer:
        self.sync._withdraw_unless_answered(reason)
        await self._arrived(self.sync._ctx._ask_timeout)
        return self.sync._settled()

    async def _arrived(self, timeout: float | None) -> bool:
        return await self._token.wait_until_async(lambda: self.sync._taken() is not None, timeout)


class AsyncToolCall(
    _ToolReports[
        AsyncAsk[PermissionReply], AsyncAsk[FormReply], Awaitable[PermissionReply], Awaitable[FormReply]
    ]
):
    """A tool part of an async body (``ToolCall`` with awaitable asks): its reports and
    ``open_*`` are ``ToolCall``'s own (one implementation); only the waits here are coroutines."""

    def __init__(self, call: ToolCall, token: AsyncCancelToken) -> None:
        self.sync = call
        self._reporter = call
        self.tool = call.tool
        self.call_id = call.call_id
        self._token = token

    def __repr__(self) -> str:
        return f"AsyncToolCall({self.tool!r}, {self.call_id!r})"

    def _permission(self, ask: Ask[PermissionReply]) -> AsyncAsk[PermissionReply]:
        return AsyncAsk(ask, self._token)

    def _form(self, ask: Ask[FormReply]) -> AsyncAsk[FormReply]:
        return AsyncAsk(ask, self._token)

    async def _asked(self, ask: Callable[[], _Decides], timeout: float | None) -> Any:
        return await ask().wait(timeout)  # opened when awaited, as an async def opens it


class AsyncRunContext(
    _RunReports[
        AsyncAsk[PermissionReply],
        AsyncAsk[FormReply],
        AsyncToolCall,
        Awaitable[PermissionReply],
        Awaitable[FormReply],
    ]
):
    """Given to an ``async def`` run body: ``RunContext`` in async form. Reports (steps, tool parts,
    ``open_*``, retries) are ``RunContext``'s own non-blocking calls; waits are awaitable and wake
    on an interrupt."""

    token: AsyncCancelToken

    def __init__(self, context: RunContext) -> None:
        self.sync = context
        """The same run's ``RunContext`` (its waits block: use them only from another thread)."""
        self._reporter = context
        self.run_id = context.run_id
        self.session = context.session
        self.directory = context.directory
        self.generation = context.generation
        """The instance generation this run is pinned to; it stays loaded until the run ends."""
        self.token = context.token  # type: ignore[assignment]

    def _permission(self, ask: Ask[PermissionReply]) -> AsyncAsk[PermissionReply]:
        return AsyncAsk(ask, self.token)

    def _form(self, ask: Ask[FormReply]) -> AsyncAsk[FormReply]:
        return AsyncAsk(ask, self.token)

    def _tool_call(self, call: ToolCall) -> AsyncToolCall:
        return AsyncToolCall(call, self.token)

    async def _asked(self, ask: Callable[[], _Decides], timeout: float | None) -> Any:
        return await ask().wait(timeout)  # opened when awaited, as an async def opens it

    # --- waiting (awaitable) ---------------------------------------------------------------------

    async def sleep(self, seconds: float) -> None:
        """Pause, waking early (with ``RunInterrupted``) if the run is interrupted."""
        await self.token.wait_until_async(lambda: False, seconds)

    async def wait(self, gate: Gate, timeout: float | None = None) -> bool:
        """Wait for a gate to open (True) or the timeout (False); ``RunInterrupted`` on interrupt."""
        with gate._lock:
            if gate._open:
                return True
            gate._waiters.add(self.token)
        try:
            return await self.token.wait_until_async(lambda: gate._open, timeout)
        finally:
            with gate._lock:
                gate._waiters.discard(self.token)

    def step(
        self, kind: StepKind | str, step_id: str | None = None, *, call: AsyncToolCall | None = None
    ) -> _Step:
        """Report a step around a block (``with`` or ``async with``); the id defaults to the kind,
        then ``kind-2``... With ``call``, the step events name that call's tool and call id."""
        kind = StepKind(kind)
        tool, call_id = (call.tool, call.call_id) if call is not None else (None, None)
        return _Step(self.sync, kind, step_id or self.next_step_id(kind), tool, call_id)

    # --- the instance ----------------------------------------------------------------------------

    async def instance(self) -> Any:
        """The cache object of the instance this run is pinned to (see ``RunContext.instance``).
        Awaited: the instance actor answers into a future (no thread waits for it), and a load
        still running is awaited until it ends or its budget runs out, waking on an interrupt."""
        ctx = self.sync
        instance = ctx._instance
        if instance is None:
            return None
        reply: Future[Any] = Future()
        instance.tell(GetCacheInto(reply))
        try:
            async with asyncio.timeout(ctx._ask_timeout):
                cache = await asyncio.wrap_future(reply)
        except TimeoutError:
            raise SupervisorTimeout(f"the instance did not answer in {ctx._ask_timeout} s") from None
        if isinstance(cache, _Loading):  # its load hook still runs: wait here, interruptibly
            await self.wait(cache._done, max(0.0, cache._deadline - time.monotonic()))
            cache = cache._result()
        if isinstance(cache, _LoadFailed):
            raise SupervisorError(cache.error)  # the run fails with it, unless the body handles it
        return cache


class _OwnedLoop:
    """The event loop a supervisor runs async bodies on when no host loop is given."""

    def __init__(self, threads: ThreadBook) -> None:
        self.loop = asyncio.new_event_loop()
        self._threads = threads
        self.thread = threading.Thread(target=self._serve, name="run-supervisor-async-bodies", daemon=True)
        threads.add(self.thread)
        self.thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        if not asyncio.all_tasks(self.loop):
            self.loop.close()

    def stop(self) -> None:
        """Stop once the bodies have ended; with an abandoned body left, keep serving it, unjoined
        (as an abandoned thread body keeps its thread), and stop when it ends."""

        def stop_if_idle(*_: object) -> None:
            pending = asyncio.all_tasks(self.loop)
            if not pending:
                self.loop.stop()
                return
            self._threads.abandoned.add(self.thread)
            for task in pending:  # look again when each ends: the last one stops the loop
                task.add_done_callback(stop_if_idle)

        try:
            self.loop.call_soon_threadsafe(stop_if_idle)
        except RuntimeError:
            pass  # already closed


class AsyncBodies:
    """A supervisor's async bodies: which loop runs them, and launching their run actors."""

    def __init__(self, threads: ThreadBook) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._owned: _OwnedLoop | None = None
        self._closed = False
        self._tasks: dict[str, asyncio.Task[Any]] = {}  # the bodies' tasks while they run, by run id

    def track(self, run_id: str, task: asyncio.Task[Any]) -> None:
        """A body's task has been made (on its loop): kept until it is done (``untrack``)."""
        with self._lock:
            self._tasks[run_id] = task

    def untrack(self, run_id: str, task: asyncio.Task[Any]) -> None:
        """A body's task is done."""
        with self._lock:
            if self._tasks.get(run_id) is task:
                del self._tasks[run_id]

    def running(self) -> tuple[asyncio.Task[Any], ...]:
        """The bodies' tasks that have not ended."""
        with self._lock:
            return tuple(task for task in self._tasks.values() if not task.done())

    def _loop(self, host_loop: asyncio.AbstractEventLoop | None) -> asyncio.AbstractEventLoop:
        if host_loop is not None:
            return host_loop
        with self._lock:
            if self._owned is None:
                self._owned = _OwnedLoop(self._threads)
            return self._owned.loop

    def launch(
        self,
        run_id: str,
        body: AsyncRunBody,
        supervisor: pykka.ActorRef[Any],
        ask_timeout: float,
        host_loop: asyncio.AbstractEventLoop | None,
    ) -> RunSlot:
        token = AsyncCancelToken()
        loop = self._loop(host_loop)
        return AsyncRunActor(run_id, body, supervisor, ask_timeout, self._threads, token, loop, self).slot()

    def close(self) -> None:
        """The supervisor has stopped: stop the owned loop (after its last body)."""
        with self._lock:
            owned, self._closed = self._owned, True
        if owned is not None:
            owned.stop()


class AsyncRunActor(RunActor):
    """A run whose body is an ``async def``: ``_run`` starts it as a task on its loop."""

    def __init__(
        self,
        run_id: str,
        body: AsyncRunBody,
        supervisor: pykka.ActorRef[Any],
        ask_timeout: float,
        threads: ThreadBook,
        token: AsyncCancelToken,
        loop: asyncio.AbstractEventLoop,
        bodies: AsyncBodies | None = None,
    ) -> None:
        super().__init__(run_id, None, supervisor, ask_timeout, threads, token)
        self._async_body = body
        self._loop = loop
        self._async_token = token
        self._bodies = bodies
        self._task: asyncio.Task[Any] | None = None

    def _begin(self, context: RunContext) -> None:
        """At ``Go`` (on the supervisor's thread): schedule the body's task on its loop, and
        nothing else: no pooled thread, no hop through one."""
        self._run(context)

    def _run(self, context: RunContext) -> None:
        ctx = AsyncRunContext(context)
        try:
            inbox_of(self._loop).post(self._start_task, ctx)  # one wake for the batch's starts
        except RuntimeError:  # the loop is closed
            self._ended("the event loop for this async body is closed")

    def _start_task(self, ctx: AsyncRunContext) -> None:
        task = self._loop.create_task(self._drive(ctx), name=f"run-supervisor-run-{self.run_id}")
        task.add_done_callback(self._task_done)  # also when cancelled before it ever ran
        self._task = task
        if self._bodies is not None:
            self._bodies.track(self.run_id, task)
        if getattr(self._async_body, "keeps_its_task", False):
            return  # a body that handles its interrupts itself (an external run's driver)
        token = self._async_token
        with token._cond:
            token._on_interrupt = self._interrupt
            already = token.cancelled
        if already:
            task.cancel()

    def _interrupt(self) -> None:
        """The run is interrupted (on the thread that interrupted it): cancel its task, on its loop."""
        try:
            inbox_of(self._loop).post(cast("asyncio.Task[Any]", self._task).cancel)
        except RuntimeError:
            pass  # the loop is closed: the task will never run again anyway

    async def _drive(self, ctx: AsyncRunContext) -> str | None:
        """Run the body; its error, if any (as ``RunActor._run`` would report it)."""
        try:
            await self._async_body(ctx)
        except RunInterrupted as exc:
            if exc._owner is not self.token or not self.token.cancelled:
                return "the body raised a RunInterrupted that was not its own run's interruption"
            return None
        except asyncio.CancelledError:
            return None if self.token.cancelled else _CANCELLED_OUTSIDE
        except BaseException as exc:  # contained, as for a thread body
            return _describe(exc)
        return None

    def _task_done(self, task: asyncio.Task[str | None]) -> None:
        if self._bodies is not None:
            self._bodies.untrack(self.run_id, task)
        if task.cancelled():
            self._ended(None if self.token.cancelled else _CANCELLED_OUTSIDE)
        else:
            self._ended(task.result())


CANCELLED_OUTSIDE = "the body's task was cancelled from outside (its event loop shut down?)"
"""The error of an async run whose task was cancelled by someone other than the supervisor."""
_CANCELLED_OUTSIDE = CANCELLED_OUTSIDE
