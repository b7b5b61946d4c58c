"""InstanceActor: one per (directory, generation). Owns the disposable caches and the hooks' thread.

It knows nothing of runs: closing it can never reach a RunActor. The host's load hook and, later, its
dispose hook run one after the other on the instance's own hook thread, never on the actor's: the
actor's mailbox never waits on host code for longer than a budget. A load that raises or overruns
``load_budget_ms`` counts as failed (runs that read the instance fail with its error); a dispose that
raises or overruns its budget still closes the instance, with an error the supervisor reports. A
dispose that arrives while the load still runs waits for the load (until the load's deadline), then
gives the dispose hook its budget; should the load return later than that, the hook thread still
disposes what it made.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import pykka

from run_supervisor.actors._context import Gate, _GetCache, _LoadFailed, _Loading
from run_supervisor.actors._logging import logger
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.protocol import DisposeDone, DisposeInstance

__all__ = ["Dispose", "InstanceActor", "InstanceHooks", "NoInstanceHooks"]


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


@dataclass(frozen=True, slots=True)
class Dispose:
    """The supervisor's order to close: the core's command, plus shutdown's deadline if one runs
    (monotonic; nothing here waits past it)."""

    command: DisposeInstance
    deadline: float | None = None


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


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
        self.hook_thread = threading.Thread(
            target=self._host_code, name=f"run-supervisor-instance-{generation}", daemon=True
        )
        # Started here, before the actor's own thread: the load begins as soon as the core decided it.
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
        try:
            self._cache = self._hooks.load(self.directory, self.generation)
        except BaseException as exc:  # contained: host code must not stop every actor
            error = _describe(exc)
            logger.opt(exception=True).warning(f"loading {self._name()} failed")
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
        self._threads.label(me, None)
        self._order.wait()
        if not self._dispose_wanted:
            return
        self._threads.label(me, f"the dispose hook of {self._name()}")
        try:
            self._hooks.dispose(self.directory, self.generation, self._cache)
        except BaseException as exc:
            self._dispose_error = _describe(exc)
        self._threads.label(me, None)
        self._disposed.set()

    def _overran(self) -> str:
        return f"the load hook overran its {self._load_budget_ms} ms budget"

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
        self._dispose_wanted = True
        self._order.set()
        if not command.report:
            self.stop()
            return
        hard = order.deadline if order.deadline is not None else float("inf")
        if not self._loaded.wait(timeout=max(0.0, min(self.load_deadline, hard) - time.monotonic())):
            error: str | None = (
                f"the load hook had not returned by its {self._load_budget_ms} ms budget; the instance "
                "closed without its dispose hook (which runs if the load ever returns)"
            )
        else:
            budget_end = min(time.monotonic() + command.budget_ms / 1000.0, hard)
            if self._disposed.wait(timeout=max(0.0, budget_end - time.monotonic())):
                error = self._dispose_error
            else:
                error = f"the dispose hook overran its {command.budget_ms} ms budget"
        if not self._disposed.is_set():
            # Overran and reported: shutdown will not wait for it again (it still names it in overran).
            self._threads.abandoned.add(self.hook_thread)
        try:
            self._supervisor.tell(
                DisposeDone(directory=self.directory, generation=self.generation, error=error)
            )
        except pykka.ActorDeadError:
            pass
        self.stop()
