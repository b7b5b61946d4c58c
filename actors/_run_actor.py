"""RunActor: one per run, the run's owner. Its body runs on a pooled thread from ``Go`` to its end;
control reaches the body through its token.

The actor is made by the host's call (``Supervisor.start_run``), on the caller's thread, and holds
no thread while it waits for the supervisor's ``Go`` (the run may first be queued behind its
session's active run, or be cancelled there). At ``Go`` its body takes a thread from the thread
book's ``WorkerPool`` (an idle one, else a new one) and runs there, named after the run; when the
body ends the actor reports ``BodyEnded`` to the supervisor, stops, and the thread goes back to the
pool. So N short runs cost a bounded number of threads, not N thread starts.

It is a plain object, not a pykka actor: nothing ever needs its mailbox (the supervisor cancels,
answers and abandons the body through the ``CancelToken``, which is thread-safe and needs no hop),
and a pykka actor per run cost a registry entry, a queue and a thread start each (measured in
scripts/bench.py, ``runs_per_s_thread_ratio``). It keeps the two calls the supervisor and the facades
make of a run's actor: ``tell(Go(...))`` and ``stop(block=False)``. A body abandoned at shutdown's
deadline keeps its thread until it returns; nobody joins it (``ThreadBook`` skips a thread whose
current body's token is abandoned) and the pool lets that thread end when the body returns.

``RunActor._run`` is the one place where "run the body" happens: a subclass may run it elsewhere
(a task on an event loop, say) as long as it calls ``_ended`` exactly once when the body is done.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pykka

from run_supervisor.actors._context import CancelToken, RunContext
from run_supervisor.actors._errors import RunInterrupted
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.actors._timers import TimerHandle
from run_supervisor.protocol import BodyEnded, SpawnRun

__all__ = ["Go", "RunActor", "RunSlot"]


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


@dataclass(frozen=True, slots=True)
class Go:
    """Start the body: the run is pinned to this generation (and its instance actor)."""

    spawn: SpawnRun
    instance: pykka.ActorRef[Any] | None


@dataclass(slots=True)
class RunSlot:
    """What the supervisor holds of a run it has accepted: its actor and its token."""

    ref: Any
    """The run's actor (a ``RunActor``): ``tell(Go(...))`` starts its body, ``stop(block=False)``
    lets go of one never started."""
    token: CancelToken
    started: bool = False
    """The supervisor has told it ``Go``: from then on the actor stops itself when the body ends."""
    stall_after_ms: int | None = None
    """This run's own stall setting (``start_run(..., stall_after_ms=...)``); None: the config's."""
    stall_check: TimerHandle | None = None
    """Its pending stall check on the supervisor's timer, while it is active and not flagged."""
    thread: threading.Thread | None = None
    """A thread launched for this run alone, if any (a pooled run has none until its ``Go``)."""

    def wait_thread_end(self, timeout: float) -> None:
        """Wait (bounded) until a thread launched for this run alone has ended: a start the
        supervisor never took on returns to its caller only once nothing of it runs."""
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=timeout)


class RunActor:
    """A run's owner: waits (threadless) for ``Go``, then runs the body on a pooled thread."""

    __slots__ = (
        "__weakref__",
        "_ask_timeout",
        "_body",
        "_stopped",
        "_supervisor",
        "_threads",
        "context",
        "run_id",
        "token",
    )

    def __init__(
        self,
        run_id: str,
        body: Callable[..., object] | None,
        supervisor: pykka.ActorRef[Any],
        ask_timeout: float,
        threads: ThreadBook,
        token: CancelToken | None = None,
    ) -> None:
        self.run_id = run_id
        self.token = CancelToken() if token is None else token
        self._body = body
        self._supervisor = supervisor
        self._ask_timeout = ask_timeout
        self._threads = threads
        self._stopped = False
        self.context: RunContext | None = None

    def slot(self) -> RunSlot:
        """What the supervisor keeps of this actor (idle until ``Go``, holding no thread): the actor
        and its token."""
        return RunSlot(ref=self, token=self.token)

    # --- what the supervisor and the facades call ----------------------------------------------

    def tell(self, message: Any) -> None:
        """``Go``: start the body (once; never after a stop). Called on the supervisor's thread:
        it only hands the body to a pooled thread."""
        if isinstance(message, Go) and self.context is None and not self._stopped:
            self.context = self._context(message)
            self._begin(self.context)

    def stop(self, block: bool = False, timeout: float | None = None) -> None:
        """Let go of the actor. One never started never will be; a started one stops by itself
        when its body ends (a stop cannot reach a running body: its token does)."""
        self._stopped = True

    def is_alive(self) -> bool:
        return not self._stopped

    def _context(self, go: Go) -> RunContext:
        spawn = go.spawn
        return RunContext(
            run_id=spawn.run_id,
            session=spawn.session,
            directory=spawn.directory,
            generation=spawn.generation,
            token=self.token,
            supervisor=self._supervisor,
            instance=go.instance,
            ask_timeout=self._ask_timeout,
        )

    def _begin(self, context: RunContext) -> None:
        """Hand the body to a pooled thread (named after the run while it runs it)."""
        self._threads.workers.run(
            partial(self._run, context), token=self.token, name=f"run-supervisor-run-{self.run_id}"
        )

    # --- the seam: where the body runs ---------------------------------------------------------

    def _run(self, context: RunContext) -> Callable[[], None] | None:
        """Run the body to its end, here, on this pooled thread; return its ``_ended`` (the pool
        calls it once the thread is parked again). A subclass that runs the body elsewhere returns
        None and calls ``_ended`` itself."""
        error: str | None = None
        try:
            if self._body is None:
                error = "no body was given for this run"
            elif inspect.iscoroutine(result := self._body(context)):
                result.close()  # never a silent "completed" for a body that did not run
                error = (
                    "the body returned a coroutine instead of running: pass the async def itself "
                    "as the body (it then gets an AsyncRunContext)"
                )
        except RunInterrupted as exc:
            if exc._owner is not self.token or not self.token.cancelled:
                # Not this run's own interruption (one caught in another run and re-raised): the
                # body failed; an interrupted run still ends interrupted (the core's rules).
                error = "the body raised a RunInterrupted that was not its own run's interruption"
        except BaseException as exc:  # a body's BaseException stays here: it must not end the thread
            error = _describe(exc)
        return partial(self._ended, error)

    def _ended(self, error: str | None) -> None:
        """The body is done: report it, then stop this actor (a plain tell: no future to make)."""
        try:
            self._supervisor.tell(BodyEnded(run_id=self.run_id, error=error))
        except pykka.ActorDeadError:
            pass  # abandoned at shutdown: nobody is listening any more
        self.stop()
