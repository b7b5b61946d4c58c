"""InstanceActor: one per (directory, generation). Owns the disposable caches and the hooks' thread.

It knows nothing of runs: closing it can never reach a RunActor. The host's load hook and, later, its
dispose hook run one after the other on the instance's own hook thread, never on the actor's: the
actor's mailbox never waits on host code for longer than a budget. A load that raises or overruns
``load_budget_ms`` counts as failed (runs that read the instance fail with its error); a dispose that
raises or overruns its budget still closes the instance, with an error the supervisor reports. A
dispose that arrives while the load still runs waits for the load (until the load's deadline), then
gives the dispose hook its budget; should the load return later than that, the hook thread still
disposes what it made.

Async hooks (``HooksOnLoop``: coroutines and the host's loop) need no hook thread: each hook is a
task on that loop, and its end is picked up by a callback, the same steps in the same order. No
thread ever waits for such a task, so a loop that ends before a hook ran (``asyncio.run`` closing
it with the hook's task, or its call, still queued) leaves nothing behind. The thread book watches
each such task, so a shutdown names one still running in ``overran`` as it names a hook thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import pykka

from run_supervisor.actors._context import Gate, _GetCache, _LoadFailed, _Loading
from run_supervisor.actors._logging import logger
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.protocol import DisposeDone, DisposeInstance

__all__ = ["Dispose", "HooksOnLoop", "InstanceActor", "InstanceHooks", "NoInstanceHooks", "hook_deadline"]

_running_hook = threading.local()  # on a hook thread, while a sync hook runs: the deadline it is judged by


def hook_deadline() -> float | None:
    """In a sync load or dispose hook: the ``time.monotonic()`` past which the supervisor counts the
    hook overran (a hook that judges its own lateness, as the out-of-process caches do, uses the
    supervisor's clock, not a later one of its own); None elsewhere."""
    deadline: float | None = getattr(_running_hook, "deadline", None)
    return deadline

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GetCacheInto:
    """Ask for the cache (as ``_GetCache``) with a plain future for the answer: an async body awaits
    it on its loop, so no thread waits on the instance actor."""

    reply: Future[Any]


class InstanceHooks(Protocol):
    """What a host plugs in to build and tear down one instance's caches."""

    def load(self, directory: str, generation: int) -> Any:
        """Build the caches (config, provider, watchers...) of a new instance; the result is what
        ``RunContext.instance()`` returns to the runs pinned to it. Bounded by the load budget;
        may raise."""

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        """Tear the caches down. Bounded by the dispose budget; may raise."""


class NoInstanceHooks:
    """The default: no caches, nothing to dispose."""

    def load(self, directory: str, generation: int) -> Any:
        """Keep nothing for this generation."""
        return None

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        """Nothing to tear down."""
        return None


class _AsyncHooks(Protocol):
    async def load(self, directory: str, generation: int) -> Any: ...

    async def dispose(self, directory: str, generation: int, cache: Any) -> None: ...


class HooksOnLoop:
    """Async hooks and the loop they run on (the one that awaited ``AsyncSupervisor.start``). The
    instance actor runs each coroutine as a task there and keeps no thread for it; the budgets are
    the actor's own, as for sync hooks. ``load`` and ``dispose`` are the same hooks seen as sync
    ones, for a caller on another thread (they wait for the task there, never on the loop)."""

    def __init__(self, hooks: _AsyncHooks, loop: asyncio.AbstractEventLoop) -> None:
        self.hooks = hooks
        self.loop = loop

    def run(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule the coroutine as a task on the loop; ``RuntimeError`` if the loop has ended."""
        try:
            return asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        except RuntimeError:  # the host's loop has closed: nothing can run the hook now
            coroutine.close()
            raise RuntimeError("the event loop the async hooks run on has ended") from None

    def load(self, directory: str, generation: int) -> Any:
        return self.run(self.hooks.load(directory, generation)).result()

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        self.run(self.hooks.dispose(directory, generation, cache)).result()


@dataclass(frozen=True, slots=True)
class Dispose:
    """The supervisor's order to close: the core's command, plus shutdown's deadline if one runs
    (monotonic; nothing here waits past it)."""

    command: DisposeInstance
    deadline: float | None = None


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _error_of(task: Future[Any], hook: str) -> str | None:
    """How a hook's finished task ended, as ``_host_code`` words it (None: it returned)."""
    if task.cancelled():
        return f"the {hook} hook was cancelled"
    exc = task.exception()
    return None if exc is None else _describe(exc)


class InstanceActor(pykka.ThreadingActor):
    use_daemon_thread: ClassVar[bool] = True

    def __init__(
        self,
        directory: str,
        generation: int,
        hooks: InstanceHooks,
        supervisor: pykka.ActorRef[Any],
        threads: ThreadBook,
        *,
        loaded: Future[str | None] | None = None,
        load_deadline: float | None = None,
        load_budget_ms: int = 5000,
    ) -> None:
        super().__init__()
        self._threads = threads
        self.directory = directory
        self.generation = generation
        self._hooks = hooks
        self._supervisor = supervisor
        self._loaded_future = loaded
        self._load_budget_ms = load_budget_ms
        self.load_deadline = (
            load_deadline if load_deadline is not None else time.monotonic() + load_budget_ms / 1000.0
        )
        self._cache: Any = None
        self.load_error: str | None = None
        self._loaded = threading.Event()
        self._load_done = Gate("load")  # wakes the bodies waiting for this load the moment it ends
        self._order = threading.Event()  # dispose (or quit without disposing) was decided
        self._dispose_wanted = False
        self._disposed = threading.Event()
        self._dispose_error: str | None = None
        self._dispose_budget_s = 0.0  # the order's budget and shutdown's hard deadline, once it came
        self._dispose_hard = float("inf")
        self._dispose_deadline: float | None = None  # fixed once, by the hook thread or the actor
        self._on_loop = hooks if isinstance(hooks, HooksOnLoop) else None
        self._dispose_lock = threading.Lock()  # the load's end and the order race to start the dispose
        self._dispose_begun = False
        self.hook_thread: threading.Thread | None = None
        """The thread the sync hooks run on (None for async hooks: they are tasks on their loop)."""
        # Started here, before the actor's own thread: the load begins as soon as the core decided it.
        if self._on_loop is not None:
            self._load_on_loop(self._on_loop)
            return
        self.hook_thread = threading.Thread(
            target=self._host_code, name=f"run-supervisor-instance-{generation}", daemon=True
        )
        self._threads.add(self.hook_thread, f"the load hook of {self._name()}")
        self.hook_thread.start()

    def _name(self) -> str:
        return f"{self.directory} (generation {self.generation})"

    def on_start(self) -> None:
        self._threads.add(threading.current_thread())

    def on_stop(self) -> None:
        self._order.set()  # not disposed (stopped at shutdown): the hook thread just ends
        if self._loaded_future is not None and not self._loaded.is_set():
            try:  # whoever waits for this load stops waiting: nothing will use it any more
                self._loaded_future.set_result(
                    f"the supervisor stopped before the load hook of {self._name()} returned"
                )
            except InvalidStateError:
                pass

    # --- the hook thread: host code only runs here --------------------------------------------

    def _host_code(self) -> None:
        me = threading.current_thread()
        error: str | None = None
        _running_hook.deadline = self.load_deadline
        try:
            self._cache = self._hooks.load(self.directory, self.generation)
        except BaseException as exc:  # contained: host code must not stop every actor
            error = _describe(exc)
            logger.opt(exception=True).warning(f"loading {self._name()} failed")
        finally:
            _running_hook.deadline = None
        self._load_returned(error)
        self._threads.label(me, None)
        self._order.wait()
        if not self._dispose_wanted:
            return
        self._threads.label(me, f"the dispose hook of {self._name()}")
        _running_hook.deadline = self._fix_dispose_deadline()
        try:
            self._hooks.dispose(self.directory, self.generation, self._cache)
        except BaseException as exc:
            self._dispose_error = _describe(exc)
        finally:
            _running_hook.deadline = None
        self._threads.label(me, None)
        self._disposed.set()

    def _load_returned(self, error: str | None) -> None:
        """The load hook has ended (``error``: it raised): say so to whoever waits for it."""
        if error is None and time.monotonic() > self.load_deadline:
            error = self._overran()  # too late: whoever waited has counted it failed already
        self.load_error = error
        self._loaded.set()
        self._load_done.open()
        if self._loaded_future is not None:
            try:
                self._loaded_future.set_result(error)
            except InvalidStateError:
                pass

    def _overran(self) -> str:
        return f"the load hook overran its {self._load_budget_ms} ms budget"

    def _fix_dispose_deadline(self) -> float:
        """The dispose hook's deadline: its budget from when both the order and the load's end have
        come, fixed by whichever of the hook thread and the actor asks first, so the hook is told the
        very deadline the actor judges it by (not one its later wake-up would start)."""
        with self._dispose_lock:
            if self._dispose_deadline is None:
                self._dispose_deadline = min(time.monotonic() + self._dispose_budget_s, self._dispose_hard)
            return self._dispose_deadline

    # --- async hooks: tasks on the host's loop, and callbacks when they end --------------------
    # The callbacks run on the loop's thread (or here, if the task has ended already): they only set
    # flags and futures, and schedule the next task; nothing on this side waits on the loop.

    def _load_on_loop(self, on_loop: HooksOnLoop) -> None:
        try:
            task = on_loop.run(on_loop.hooks.load(self.directory, self.generation))
        except RuntimeError as exc:
            self._load_returned(_describe(exc))
            return
        self._threads.watch(task, f"the load hook of {self._name()}", on_loop.loop)
        task.add_done_callback(self._load_task_ended)

    def _load_task_ended(self, task: Future[Any]) -> None:
        error = _error_of(task, "load")
        if error is None:
            self._cache = task.result()
        else:
            logger.warning(f"loading {self._name()} failed: {error}")
        self._load_returned(error)
        self._dispose_on_loop_if_due()

    def _dispose_on_loop_if_due(self) -> None:
        """Start the dispose task once both the order and the load's end have come (either may be
        last: whichever is runs this, and the lock lets only one of them start it)."""
        on_loop = self._on_loop
        if on_loop is None:
            return
        with self._dispose_lock:
            if self._dispose_begun or not (self._dispose_wanted and self._loaded.is_set()):
                return
            self._dispose_begun = True
        try:
            task = on_loop.run(on_loop.hooks.dispose(self.directory, self.generation, self._cache))
        except RuntimeError as exc:
            self._dispose_error = _describe(exc)
            self._disposed.set()
            return
        self._threads.watch(task, f"the dispose hook of {self._name()}", on_loop.loop)
        task.add_done_callback(self._dispose_task_ended)

    def _dispose_task_ended(self, task: Future[None]) -> None:
        self._dispose_error = _error_of(task, "dispose")
        self._disposed.set()

    def _load_result(self) -> Any:
        """The cache, or ``_LoadFailed`` (the load raised, overran, or still runs past its deadline)."""
        if not self._loaded.is_set():
            return _LoadFailed(f"loading {self._name()} failed: {self._overran()}")
        if self.load_error is not None:
            return _LoadFailed(f"loading {self._name()} failed: {self.load_error}")
        return self._cache

    # --- the mailbox --------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, GetCacheInto):  # an async body's ask: answered into its future
            try:
                message.reply.set_result(self.on_receive(_GetCache()))
            except InvalidStateError:
                pass  # it stopped waiting
            return None
        if isinstance(message, _GetCache):
            if self._loaded.is_set() or time.monotonic() > self.load_deadline:
                return self._load_result()
            # Still loading: the run waits for it on its own thread (interruptibly), not here.
            return _Loading(self._load_done, self.load_deadline, self._load_result)
        if isinstance(message, Dispose):
            self._dispose(message)
        elif isinstance(message, DisposeInstance):
            self._dispose(Dispose(message))
        return None

    def _dispose(self, order: Dispose) -> None:
        command = order.command
        hard = order.deadline if order.deadline is not None else float("inf")
        self._dispose_budget_s, self._dispose_hard = command.budget_ms / 1000.0, hard
        self._dispose_wanted = True
        self._order.set()
        self._dispose_on_loop_if_due()
        if not command.report:
            self.stop()
            return
        if not self._loaded.wait(timeout=max(0.0, min(self.load_deadline, hard) - time.monotonic())):
            error: str | None = (
                f"the load hook had not returned by its {self._load_budget_ms} ms budget; the instance "
                "closed without its dispose hook (which runs if the load ever returns)"
            )
        else:
            budget_end = self._fix_dispose_deadline()
            if self._disposed.wait(timeout=max(0.0, budget_end - time.monotonic())):
                error = self._dispose_error
            else:
                error = f"the dispose hook overran its {command.budget_ms} ms budget"
        if not self._disposed.is_set() and self.hook_thread is not None:
            # Overran and reported: shutdown will not wait for it again (it still names it in overran).
            self._threads.abandoned.add(self.hook_thread)
        try:
            self._supervisor.tell(
                DisposeDone(directory=self.directory, generation=self.generation, error=error)
            )
        except pykka.ActorDeadError:
            pass
        self.stop()
