"""RunActor: one per run. Owns the run's worker thread and its cancellation token.

Its mailbox never blocks: the body runs on its own worker thread and reports to the supervisor by
``tell``; the actor only relays control (interrupt, the user's answers, abandonment) to the token.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import pykka

from actors._context import CancelToken, RunBody, RunContext
from actors._errors import RunInterrupted
from actors._threads import ThreadBook
from protocol import AbandonRun, BodyEnded, DeliverAnswer, SignalInterrupt, SpawnRun

__all__ = ["RunActor"]


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class RunActor(pykka.ThreadingActor):
    use_daemon_thread: ClassVar[bool] = True

    def __init__(
        self,
        spawn: SpawnRun,
        body: RunBody | None,
        supervisor: pykka.ActorRef[Any],
        instance: pykka.ActorRef[Any] | None,
        ask_timeout: float,
        threads: ThreadBook,
    ) -> None:
        super().__init__()
        self._threads = threads
        self.run_id = spawn.run
        self.token = CancelToken()
        self._body = body
        self._supervisor = supervisor
        self.context = RunContext(
            run_id=spawn.run,
            session=spawn.session,
            directory=spawn.directory,
            generation=spawn.generation,
            token=self.token,
            supervisor=supervisor,
            instance=instance,
            ask_timeout=ask_timeout,
        )
        self.worker = threading.Thread(target=self._work, name=f"run-supervisor-run-{spawn.run}", daemon=True)

    def on_start(self) -> None:
        self._threads.add(threading.current_thread())
        self._threads.add(self.worker)
        self.worker.start()

    def _work(self) -> None:
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
            self._supervisor.tell(BodyEnded(run=self.run_id, error=error))
        except pykka.ActorDeadError:
            pass  # abandoned at shutdown: nobody is listening any more

    def on_receive(self, message: Any) -> None:
        if isinstance(message, AbandonRun):
            self._threads.abandoned.add(self.worker)
            self.token.abandon()
        elif isinstance(message, SignalInterrupt):
            self.token.cancel(message.reason)
        elif isinstance(message, DeliverAnswer):
            self.token.deliver(message)

    def on_stop(self) -> None:
        # The body told us it ended just before its thread returns; an abandoned one is left be.
        if not self.token.abandoned and self.worker.is_alive():
            self.worker.join(timeout=1.0)
