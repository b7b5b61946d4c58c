"""RunActor: one per run. Its own thread runs the body; control reaches the body through its token.

The actor is started by the host's call (``Supervisor.start_run``), on the caller's thread, so the
supervisor never pays for a thread start, and a run costs exactly one actor (one OS thread). It
waits, idle, until the supervisor tells it ``Go`` (the run may first be queued behind its
session's active run), then runs the body *in that message's handler*, on the actor's own thread.

While the body runs, the actor's mailbox is frozen -- by design nothing needs it then: the
supervisor cancels, answers and abandons the body through the ``CancelToken``, which is
thread-safe and needs no hop; a stop sent at shutdown simply waits behind the body. When the body
ends, the actor reports ``BodyEnded`` to the supervisor and stops itself. A body abandoned at
shutdown's deadline keeps its thread until it returns; nobody joins it (``ThreadBook`` skips a
thread whose token is abandoned).

``RunActor._run`` is the one place where "run the body" happens: a subclass may run it elsewhere
(a task on an event loop, say) as long as it calls ``_ended`` exactly once when the body is done.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import pykka

from run_supervisor.actors._context import CancelToken, RunBody, RunContext
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

    ref: pykka.ActorRef[RunActor]
    token: CancelToken
    started: bool = False
    """The supervisor has told it ``Go``: from then on the actor stops itself when the body ends."""
    stall_after_ms: int | None = None
    """This run's own stall setting (``start_run(..., stall_after_ms=...)``); None: the config's."""
    stall_check: TimerHandle | None = None
    """Its pending stall check on the supervisor's timer, while it is active and not flagged."""
    thread: threading.Thread | None = None
    """The actor's thread (booked in the supervisor's ``ThreadBook`` from its start)."""

    def wait_thread_end(self, timeout: float) -> None:
        """Wait (bounded) until the actor's thread has ended: a start the supervisor never took on
        returns to its caller only once the thread launched for it is gone."""
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=timeout)


class RunActor(pykka.ThreadingActor):
    use_daemon_thread: ClassVar[bool] = True

    def __init__(
        self,
        run_id: str,
        body: RunBody | None,
        supervisor: pykka.ActorRef[Any],
        ask_timeout: float,
        threads: ThreadBook,
        token: CancelToken,
        started: list[threading.Thread] | None = None,
    ) -> None:
        super().__init__()
        self._started = started  # where _start_actor_loop leaves the thread for launch()
        self.run_id = run_id
        self.token = token
        self._body = body
        self._supervisor = supervisor
        self._ask_timeout = ask_timeout
        self._threads = threads
        self.context: RunContext | None = None

    @classmethod
    def launch(
        cls,
        run_id: str,
        body: RunBody | None,
        supervisor: pykka.ActorRef[Any],
        ask_timeout: float,
        threads: ThreadBook,
    ) -> RunSlot:
        """Start the actor (idle until ``Go``) and return what the supervisor keeps of it."""
        token = CancelToken()
        started: list[threading.Thread] = []
        ref = cls.start(run_id, body, supervisor, ask_timeout, threads, token, started)
        return RunSlot(ref=ref, token=token, thread=started[0] if started else None)

    def _start_actor_loop(self) -> None:
        # pykka's own, except that the thread is booked here, on the launching (supervisor) thread,
        # not in on_start: a shutdown that completes after this launch then always joins it (from
        # on_start, a thread slow to be scheduled could book itself after shutdown's join began).
        thread = threading.Thread(target=self._actor_loop, name=f"run-supervisor-run-{self.run_id}")
        thread.daemon = self.use_daemon_thread
        thread.start()
        self._threads.add(thread, token=self.token)  # joined at shutdown unless abandoned
        if self._started is not None:
            self._started.append(thread)

    def on_receive(self, message: Any) -> None:
        if isinstance(message, Go) and self.context is None:
            spawn = message.spawn
            self.context = RunContext(
                run_id=spawn.run_id,
                session=spawn.session,
                directory=spawn.directory,
                generation=spawn.generation,
                token=self.token,
                supervisor=self._supervisor,
                instance=message.instance,
                ask_timeout=self._ask_timeout,
            )
            self._run(self.context)

    # --- the seam: where the body runs ---------------------------------------------------------

    def _run(self, context: RunContext) -> None:
        """Run the body to its end, here, on this actor's thread; then ``_ended``."""
        error: str | None = None
        try:
            if self._body is None:
                error = "no body was given for this run"
            elif inspect.iscoroutine(result := cast("Callable[[RunContext], Any]", self._body)(context)):
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
        except BaseException as exc:  # a body's BaseException stays here: it must not stop pykka
            error = _describe(exc)
        self._ended(error)

    def _ended(self, error: str | None) -> None:
        """The body is done: report it, then stop this actor (a plain tell: no future to make)."""
        try:
            self._supervisor.tell(BodyEnded(run_id=self.run_id, error=error))
        except pykka.ActorDeadError:
            pass  # abandoned at shutdown: nobody is listening any more
        try:
            self.stop()
        except pykka.ActorDeadError:
            pass  # cannot happen on its own thread; kept so a subclass calling from elsewhere is safe
