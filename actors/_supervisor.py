"""SessionSupervisor: the actor that owns every RunActor and InstanceActor.

It feeds each message to the decision core (``protocol.SupervisorCore``) and carries out the
commands the core returns, in order. It never asks another actor (and never itself): children get
``tell``s, answers travel in futures carried inside the messages.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, ClassVar

import pykka
from loguru import logger

from run_supervisor.actors._instance_actor import InstanceActor, InstanceHooks
from run_supervisor.actors._run_actor import Go, RunSlot
from run_supervisor.actors._subscription import Publisher
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.protocol import (
    AbandonRun,
    BodyEnded,
    CloseResult,
    Command,
    DeliverAnswer,
    DisposeDone,
    DisposeInstance,
    Emit,
    Event,
    GraceExpired,
    LoadInstance,
    PartReport,
    ReleaseRun,
    Reply,
    Request,
    RunFinished,
    ShutdownComplete,
    SignalInterrupt,
    SpawnRun,
    StartGraceTimer,
    StartRun,
    StepReport,
    SupervisorCore,
    WaitingForUser,
)

__all__ = ["Preload", "Query", "SessionSupervisor", "Submit", "WaitRun"]

_REPORTS = (StepReport, PartReport, WaitingForUser, BodyEnded, DisposeDone, GraceExpired)


@dataclass(frozen=True, slots=True)
class Submit:
    request: Request
    reply: Future[Any]
    run: RunSlot | None = None
    """For a StartRun: the run's actor, already started (idle) on the caller's thread."""


@dataclass(frozen=True, slots=True)
class Query:
    """Run ``read(core)`` on the supervisor's thread and answer with its result."""

    read: Callable[[SupervisorCore], Any]
    reply: Future[Any]


@dataclass(frozen=True, slots=True)
class WaitRun:
    """Answer with the run's snapshot once it has finished (at once if it already has)."""

    run: str
    reply: Future[Any]


@dataclass(frozen=True, slots=True)
class Preload:
    directories: tuple[str, ...]
    load: bool
    reply: Future[Any]


def _settle(future: Future[Any], value: Any) -> None:
    try:
        future.set_result(value)
    except InvalidStateError:
        pass  # the caller gave up (cancelled) or it was already rejected at close


class SessionSupervisor(pykka.ThreadingActor):
    use_daemon_thread: ClassVar[bool] = True

    def __init__(
        self,
        core: SupervisorCore,
        hooks: InstanceHooks,
        threads: ThreadBook,
        publisher: Publisher,
        *,
        ask_timeout: float,
        on_shutdown_complete: Callable[[ShutdownComplete], None],
        on_stopped: Callable[[], None],
    ) -> None:
        super().__init__()
        self.core = core
        self._hooks = hooks
        self._threads = threads
        self._ask_timeout = ask_timeout
        self._on_shutdown_complete = on_shutdown_complete
        self._on_stopped = on_stopped
        self._runs: dict[str, RunSlot] = {}
        self._instances: dict[tuple[str, int], pykka.ActorRef[InstanceActor]] = {}
        self._waiters: dict[str, list[Future[Any]]] = {}
        self._publisher = publisher
        self._timer: threading.Timer | None = None
        self._deadline: float | None = None

    def on_start(self) -> None:
        self._threads.add(threading.current_thread())

    def on_stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._on_stopped()

    # --- the mailbox -------------------------------------------------------------------------

    def on_receive(self, message: Any) -> None:
        try:
            self._receive(message)
        except BaseException:  # contained: pykka would otherwise stop every actor in the process
            logger.opt(exception=True).error(f"the supervisor could not handle {type(message).__name__}")
            reply = getattr(message, "reply", None)
            if isinstance(reply, Future) and not reply.done():
                reply.set_exception(RuntimeError(f"the supervisor failed on {type(message).__name__}"))

    def _receive(self, message: Any) -> None:
        if isinstance(message, _REPORTS):
            self._execute(self.core.report(message))
        elif isinstance(message, Submit):
            self._submit(message)
        elif isinstance(message, Query):
            _settle(message.reply, message.read(self.core))
        elif isinstance(message, WaitRun):
            snapshot = self.core.run_snapshot(message.run)
            if snapshot is None or snapshot.outcome is not None:
                _settle(message.reply, snapshot)
            else:
                self._waiters.setdefault(message.run, []).append(message.reply)
        elif isinstance(message, Preload):
            for directory in message.directories:
                if message.load:
                    self._execute(self.core.preload(directory))
                else:
                    self.core.declare(directory)
            _settle(message.reply, None)

    def _submit(self, message: Submit) -> None:
        request = message.request
        commands = self.core.request(request, message.reply)
        if isinstance(request, StartRun) and message.run is not None:
            accepted = any(
                isinstance(c, Reply) and c.reply_to is message.reply and c.answer.result is CloseResult.OK
                for c in commands
            )
            if accepted:
                self._runs[request.run_id] = message.run  # before its SpawnRun (if it starts now) runs
            else:
                message.run.ref.stop(block=False)
        self._execute(commands)

    # --- carrying out the core's commands ----------------------------------------------------

    def _execute(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, Emit):
                self._publish(command.event)
            elif isinstance(command, Reply):
                _settle(command.reply_to, command.answer)
            elif isinstance(command, SpawnRun):
                self._spawn(command)
            elif isinstance(command, SignalInterrupt | DeliverAnswer | AbandonRun):
                self._control(command)
            elif isinstance(command, ReleaseRun):
                self._release(command.run_id)
            elif isinstance(command, LoadInstance):
                instance_ref = InstanceActor.start(
                    command.directory, command.generation, self._hooks, self.actor_ref, self._threads
                )
                self._instances[(command.directory, command.generation)] = instance_ref
            elif isinstance(command, DisposeInstance):
                self._dispose(command)
            elif isinstance(command, StartGraceTimer):
                self._start_timer(command)
            else:
                self._shutdown_complete(command)

    def _publish(self, event: Event) -> None:
        self._publisher.publish(event)
        if isinstance(event, RunFinished):
            waiters = self._waiters.pop(event.run_id, ())
            if waiters:
                snapshot = self.core.run_snapshot(event.run_id)
                for waiter in waiters:
                    _settle(waiter, snapshot)

    def _spawn(self, command: SpawnRun) -> None:
        slot = self._runs.get(command.run_id)
        if slot is None:  # a raw StartRun that came without a run actor: nothing to run
            self.actor_ref.tell(BodyEnded(run_id=command.run_id, error="no body was given for this run"))
            return
        instance = self._instances.get((command.directory, command.generation))
        slot.started = True
        slot.ref.tell(Go(spawn=command, instance=instance))

    def _control(self, command: SignalInterrupt | DeliverAnswer | AbandonRun) -> None:
        """Reach the body through its token: thread-safe, never blocks, no mailbox hop."""
        slot = self._runs.get(command.run_id)
        if slot is None:
            return
        if isinstance(command, SignalInterrupt):
            slot.token.cancel(command.reason)
        elif isinstance(command, DeliverAnswer):
            slot.token.deliver(command)
        else:
            slot.token.abandon()  # O(1); from now on the thread book never joins its thread

    def _release(self, run: str) -> None:
        slot = self._runs.pop(run, None)
        if slot is not None and (not slot.started or slot.token.abandoned):
            # Never started (cancelled in its queue), or abandoned: its body will not stop it soon.
            slot.ref.stop(block=False)

    def _dispose(self, command: DisposeInstance) -> None:
        key = (command.directory, command.generation)
        ref = self._instances.pop(key, None)
        budget = command.budget_ms
        if self._deadline is not None:
            budget = max(0, min(budget, int((self._deadline - time.monotonic()) * 1000)))
        if ref is None:
            if command.report:
                self.actor_ref.tell(DisposeDone(directory=command.directory, generation=command.generation))
            return
        try:
            ref.tell(
                DisposeInstance(
                    directory=command.directory,
                    generation=command.generation,
                    budget_ms=budget,
                    report=command.report,
                )
            )
        except pykka.ActorDeadError:
            if command.report:
                self.actor_ref.tell(
                    DisposeDone(
                        directory=command.directory,
                        generation=command.generation,
                        error="the instance actor was gone",
                    )
                )

    def _start_timer(self, command: StartGraceTimer) -> None:
        self._deadline = time.monotonic() + command.grace_ms / 1000.0
        me = self.actor_ref

        def expire() -> None:
            try:
                me.tell(GraceExpired(action_id=command.action_id))
            except pykka.ActorDeadError:
                pass

        self._timer = threading.Timer(command.grace_ms / 1000.0, expire)
        self._timer.daemon = True
        self._timer.name = "run-supervisor-grace"
        self._timer.start()
        self._threads.add(self._timer)

    def _shutdown_complete(self, command: ShutdownComplete) -> None:
        if self._timer is not None:
            self._timer.cancel()
        # Stop every child at once (in parallel), then ourselves; never ActorRegistry.stop_all.
        for slot in self._runs.values():
            slot.ref.stop(block=False)
        for instance_ref in self._instances.values():
            instance_ref.stop(block=False)
        self._runs.clear()
        self._instances.clear()
        for waiters in self._waiters.values():
            for waiter in waiters:
                _settle(waiter, None)
        self._waiters.clear()
        self._publisher.close_all()  # after the last event; the host joins the callback threads
        self._on_shutdown_complete(command)
        self.stop()
