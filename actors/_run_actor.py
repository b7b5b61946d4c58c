"""RunActor: one per run. Owns the run's worker thread and its cancellation token.

The actor is started by the host's call (``Supervisor.start_run``), on the caller's thread, so the
supervisor never pays for a thread start. It waits, idle, until the supervisor tells it ``Go`` (the
run may first be queued behind its session's active run), then starts the body on its own worker
thread. Its mailbox never blocks. Control reaches the body through the ``CancelToken``, which is
thread-safe: the supervisor cancels, answers and abandons through it directly, without a hop. When
the body ends, the worker reports ``BodyEnded`` to the supervisor and stops this actor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pykka

from run_supervisor.actors._context import CancelToken, RunBody, RunContext
from run_supervisor.actors._errors import RunInterrupted
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.protocol import BodyEnded, SpawnRun

__all__ = ["Go", "RunActor", "RunSlot"]


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


@dataclass(frozen=True, slots=True)
class Go:
    """Start the body: the run is pinned to this generation (and its instance actor)."""

    spawn: SpawnRun
    instance: pykka.ActorRef[Any] | None


@dataclass(frozen=True, slots=True)
class RunSlot:
    """What the supervisor holds of a run it has accepted: its actor, its token, its worker."""

    ref: pykka.ActorRef[RunActor]
    token: CancelToken
    worker: threading.Thread


class _Worker(threading.Thread):
    """The body's thread; made before its actor, so the supervisor can hold it from the start."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.job: Callable[[], None] = lambda: None

    def run(self) -> None:
        self.job()


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
        worker: _Worker,
    ) -> None:
        super().__init__()
        self.run_id = run_id
        self.token = token
        self._body = body
        self._supervisor = supervisor
        self._ask_timeout = ask_timeout
        self._threads = threads
        self.context: RunContext | None = None
        self.worker = worker
        worker.job = self._work

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
        token, worker = CancelToken(), _Worker(f"run-supervisor-run-{run_id}")
        ref = cls.start(run_id, body, supervisor, ask_timeout, threads, token, worker)
        return RunSlot(ref=ref, token=token, worker=worker)

    def on_start(self) -> None:
        self._threads.add(threading.current_thread())

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
            self._threads.add(self.worker)
            self.worker.start()

    def _work(self) -> None:
        assert self.context is not None
        error: str | None = None
        try:
            if self._body is None:
                error = "no body was given for this run"
            else:
                self._body(self.context)
        except RunInterrupted:
            pass
        except BaseException as exc:  # a body's BaseException stays here: it must not stop pykka
            error = _describe(exc)
        try:
            self._supervisor.tell(BodyEnded(run_id=self.run_id, error=error))
        except pykka.ActorDeadError:
            pass  # abandoned at shutdown: nobody is listening any more
        try:
            self.stop()  # the run's actor goes with its body (a plain tell: no future to make)
        except pykka.ActorDeadError:
            pass  # already stopped at shutdown

    def on_stop(self) -> None:
        # Stopped by its own worker (which is returning), or at shutdown; an abandoned one is left be.
        if (
            self.worker.is_alive()
            and not self.token.abandoned
            and self.worker is not threading.current_thread()
        ):
            self.worker.join(timeout=1.0)
