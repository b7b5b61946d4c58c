"""SessionSupervisor: the actor that owns every RunActor and InstanceActor.

It feeds each message to the decision core (``protocol.SupervisorCore``) and carries out the
commands the core returns, in order. It never asks another actor (and never itself): children get
``tell``s, answers travel in futures carried inside the messages.

It works in batches, one per drain of its mailbox: the core decides on each request and report as it
comes, and once the mailbox is empty (or ``_BATCH`` messages in), it publishes the read side
(``View``) once, then carries out every decided message's commands in order, then delivers the
batch's events (one delivery per subscriber) and, after them, its answers. So queries never need its
mailbox and always see the effect of a request already answered and of an event already delivered;
a busy supervisor publishes once per batch, not once per message. A message that reads the shell's
own state (a query, a wait, a preload, a stall check) first finishes the batch before it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, ClassVar, get_args

import msgspec
import pykka

from run_supervisor.actors._errors import SupervisorClosed, SupervisorError
from run_supervisor.actors._instance_actor import Dispose, InstanceActor, InstanceHooks, NoInstanceHooks
from run_supervisor.actors._logging import logger
from run_supervisor.actors._run_actor import Go, RunSlot
from run_supervisor.actors._subscription import Publisher
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.actors._timers import TimerHandle, Timers
from run_supervisor.actors._view import View
from run_supervisor.protocol import (
    AbandonRun,
    ArmDeadline,
    BodyEnded,
    Command,
    DeadlineExpired,
    DeliverAnswer,
    DisarmDeadline,
    DisposeDone,
    DisposeInstance,
    Emit,
    Event,
    GraceExpired,
    InterruptGraceExpired,
    LoadDone,
    LoadInstance,
    NoProgress,
    ReleaseRun,
    Reply,
    Report,
    Request,
    RequestResult,
    RunFinished,
    RunSnapshot,
    RunStalled,
    RunState,
    RunUnstalled,
    ShutdownComplete,
    SignalInterrupt,
    SpawnRun,
    StartGraceTimer,
    StartInterruptGrace,
    StartRun,
    StopInterruptGrace,
    SupervisorCore,
)

__all__ = ["CheckStall", "Loading", "Preload", "Query", "SessionSupervisor", "Submit", "WaitRun"]

_BATCH = 64
"""At most this many decided messages wait for one publication (bounds a batch's latency)."""

@dataclass(frozen=True, slots=True)
class Submit:
    request: Request
    reply: Future[Any]
    run: RunSlot | None = None
    """For a StartRun: the run's actor, already started (idle) on the caller's thread."""
    finished: Future[Any] | None = None
    """For a StartRun: completed with the run's final snapshot when it finishes (its handle waits on
    it, so a wait costs the supervisor nothing and works even when finished runs are not retained)."""
    at: float = field(default_factory=time.monotonic)
    """When it was sent (monotonic, on the caller's thread): a grace counts from here, not from when
    the supervisor got to it, nor from after the interrupts it decided."""


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
class CheckStall:
    """From the timer: has this run made progress within its stall setting?"""

    run_id: str


@dataclass(frozen=True, slots=True)
class Preload:
    """Load (or only declare) directories; answered with the ``Loading`` of each one's current
    instance, so the host can wait for the load hooks off the supervisor's thread."""

    directories: tuple[str, ...]
    load: bool
    reply: Future[Any]
    fingerprint: str | None = None
    """What the host loads them with (the no-op gate compares a close's fingerprint with it)."""


@dataclass(frozen=True, slots=True)
class Loading:
    """One instance's load: ``done`` gets the load hook's error (None: it returned) when it ends;
    past ``deadline`` (monotonic) the load counts as overrun."""

    directory: str
    generation: int
    done: Future[str | None]
    deadline: float


def _settle(future: Future[Any], value: Any) -> None:
    try:
        future.set_result(value)
    except InvalidStateError:
        pass  # the caller gave up (cancelled) or it was already rejected at close


def _fail(future: Future[Any], error: BaseException) -> None:
    try:
        future.set_exception(error)
    except InvalidStateError:
        pass


@dataclass(frozen=True, slots=True)
class _Answer:
    """An answer the publisher gives once the events before it are delivered (``Publisher.after``);
    if those could not be committed to the journal, it is failed with the journal's error instead."""

    future: Future[Any]
    value: Any

    def __call__(self) -> None:
        _settle(self.future, self.value)

    def fail(self, error: BaseException) -> None:
        _fail(self.future, error)


@dataclass(frozen=True, slots=True)
class _Tell:
    """A tell made after the batch's delivery (``SessionSupervisor._after``); to a stopped actor, dropped."""

    ref: pykka.ActorRef[Any]
    message: Any

    def __call__(self) -> None:
        try:
            self.ref.tell(self.message)
        except pykka.ActorDeadError:
            pass


def _snapshot_of(event: RunFinished, session: str, directory: str) -> RunSnapshot:
    return RunSnapshot(
        run_id=event.run_id,
        session=session,
        directory=directory,
        generation=event.generation,
        state=RunState(event.outcome.value),  # a finished state is spelled as its outcome
        outcome=event.outcome,
        reason=event.reason,
        origin=event.origin,
        action_id=event.action_id,
        phase=event.phase,
        error=event.error,
        abandoned=event.abandoned,
        parts=event.parts,
    )


class SessionSupervisor(pykka.ThreadingActor):
    use_daemon_thread: ClassVar[bool] = True

    @staticmethod
    def _create_actor_inbox() -> Any:
        # pykka's inbox is a queue.Queue (a lock and two conditions per put and get); nothing here
        # needs its bound or task counting: the C SimpleQueue costs a fraction of it per message.
        return queue.SimpleQueue()

    def __init__(
        self,
        core: SupervisorCore,
        hooks: InstanceHooks,
        threads: ThreadBook,
        publisher: Publisher,
        *,
        view: View,
        ask_timeout: float,
        load_budget_ms: int,
        on_shutdown_complete: Callable[[ShutdownComplete, float | None], None],
        on_stopped: Callable[[], None],
        timers: Timers | None = None,
        stall_after_ms: int | None = None,
    ) -> None:
        super().__init__()
        self.core = core
        self._stall_after_ms = stall_after_ms
        self._hooks = hooks
        self._no_hooks = type(hooks) is NoInstanceHooks  # nothing to dispose: no hop to do it
        self._threads = threads
        self._ask_timeout = ask_timeout
        self._load_budget_ms = load_budget_ms
        self._on_shutdown_complete = on_shutdown_complete
        self._on_stopped = on_stopped
        self._runs: dict[str, RunSlot] = {}
        self._instances: dict[tuple[str, int], pykka.ActorRef[InstanceActor]] = {}
        self._waiters: dict[str, list[Future[Any]]] = {}
        self._finishing: dict[str, tuple[Future[Any], str, str]] = {}  # run -> (future, session, dir)
        self._loads: dict[str, Loading] = {}  # directory -> the load of its latest instance
        self._loaded: dict[tuple[str, int], Future[str | None]] = {}  # each instance's load
        self._load_waits: dict[tuple[str, int], Future[str | None]] = {}  # loads not yet told the core
        self._publisher = publisher
        self._view = view
        self.timers = Timers(threads) if timers is None else timers
        """The one timer thread of this supervisor (grace, deadlines, stall checks): callbacks only
        ``tell`` this actor. Closed when it stops."""
        self._run_deadlines: dict[str, TimerHandle] = {}  # run -> its armed deadline
        self._run_graces: dict[str, TimerHandle] = {}  # interrupted run -> its own grace (abandon)
        self._deadline: float | None = None
        self._sent_at: float | None = None  # when the request being handled was sent
        # The batch: messages decided, not yet published nor carried out (with when each was sent),
        # and the events and answers carried out, not yet delivered.
        self._staged: list[tuple[Any, list[Command], float | None]] = []
        self._events: list[Event] = []
        self._calls: list[Callable[[], object]] = []
        # Tells that answer nobody (an instance with no dispose hook told to stop): made once the
        # batch's events and answers are delivered, so the threads they wake never run ahead of the
        # callers and subscribers the batch wakes.
        self._after: list[Callable[[], object]] = []
        self._closing: set[tuple[str, int]] = set()  # closes decided at once, ``_dispose`` not yet run

    def on_start(self) -> None:
        self._threads.add(threading.current_thread())

    def on_stop(self) -> None:
        self._finish_batch()  # what was decided is carried out and delivered, then nothing more
        self.timers.close()
        self._threads.workers.close()  # idle run threads end now, busy ones when their body returns
        self._settle_leftovers()
        self._on_stopped()

    def _settle_leftovers(self) -> None:
        """Nothing more will finish: whoever still waits learns the supervisor has closed."""
        for waiters in self._waiters.values():
            for waiter in waiters:
                _settle(waiter, None)
        self._waiters.clear()
        for run_id, (future, _, _) in self._finishing.items():
            _fail(future, SupervisorClosed(f"the supervisor shut down before run {run_id!r} finished"))
        self._finishing.clear()

    # --- the mailbox -------------------------------------------------------------------------

    def on_receive(self, message: Any) -> None:
        try:
            self._receive(message)
        except BaseException:  # contained: pykka would otherwise stop every actor in the process
            logger.opt(exception=True).error(f"the supervisor could not handle {type(message).__name__}")
            reply = getattr(message, "reply", None)
            if isinstance(reply, Future):
                _fail(reply, SupervisorError(f"the supervisor failed on {type(message).__name__}"))
        if len(self._staged) >= _BATCH or self.actor_inbox.empty():
            self._finish_batch()

    def _finish_batch(self) -> None:
        """Publish the view once for every message decided since the last batch, carry out their
        commands in order, then deliver the events and, after them, the answers."""
        try:
            while self._staged:  # carrying out a batch may decide more (a dispose with no hook)
                staged, self._staged = self._staged, []
                self._view.refresh_batch(self.core, [(message, commands) for message, commands, _ in staged])
                for message, commands, sent_at in staged:
                    self._sent_at = sent_at
                    try:
                        self._execute(commands)
                    except BaseException:  # contained, as for a message on its own: the rest go on
                        name = type(message).__name__
                        logger.opt(exception=True).error(f"the supervisor could not carry out {name}")
                        reply = getattr(message, "reply", None)
                        if isinstance(reply, Future):
                            _fail(reply, SupervisorError(f"the supervisor failed on {name}"))
                    finally:
                        self._sent_at = None
        except BaseException:
            logger.opt(exception=True).error("the supervisor could not publish a batch")
        finally:
            self._closing.clear()  # every staged message was carried out (or failed): none is left
            self._deliver()

    def _deliver(self) -> None:
        events, calls = self._events, self._calls
        if events or calls:
            self._events, self._calls = [], []
            self._publisher.deliver(events, calls)
        while self._after:
            after, self._after = self._after, []
            for tell in after:
                tell()

    def _receive(self, message: Any) -> None:
        # A lookup by type (``_RECEIVE``, then the method by name), as ``_execute`` carries out commands.
        getattr(self, _RECEIVE[type(message)])(message)

    def _on_report(self, message: Report) -> None:
        commands = self.core.report(message)
        self._staged.append((message, commands, None))
        self._close_at_once(commands)
        if isinstance(message, LoadDone):
            self._loaded_answer(message)

    def _on_check_stall(self, message: CheckStall) -> None:
        self._finish_batch()  # it reads the published view
        self._check_stall(message.run_id)

    def _on_query(self, message: Query) -> None:
        self._finish_batch()  # its answer comes after every event of the messages before it
        _settle(message.reply, message.read(self.core))

    def _on_wait_run(self, message: WaitRun) -> None:
        self._finish_batch()
        snapshot = self.core.run_snapshot(message.run)
        if snapshot is None or snapshot.outcome is not None:
            _settle(message.reply, snapshot)
        else:
            # Waits that timed out cancelled their futures: drop them, so polling stays flat.
            waiters = [w for w in self._waiters.get(message.run, ()) if not w.done()]
            waiters.append(message.reply)
            self._waiters[message.run] = waiters

    def _on_preload(self, message: Preload) -> None:
        self._finish_batch()  # it reads the loads its commands start, at once
        loads: list[Loading] = []
        for directory in message.directories:
            if message.load:
                commands = self.core.preload(directory, message.fingerprint)
                self._view.refresh(self.core, message, commands)
                self._execute(commands)
                loading = self._loads.get(directory)
                if loading is not None:
                    loads.append(loading)
            else:
                self.core.declare(directory)
        self._view.refresh(self.core, message, ())
        self._deliver()
        _settle(message.reply, tuple(loads))

    def _submit(self, message: Submit) -> None:
        request = message.request
        commands = self.core.request(request, message.reply)
        # Published (with its batch) before any reply or event; its grace, if any, counts from ``at``.
        self._staged.append((message, commands, message.at))
        if isinstance(request, StartRun) and message.run is not None:
            accepted = any(
                isinstance(c, Reply) and c.reply_to is message.reply and c.answer.result is RequestResult.OK
                for c in commands
            )
            if accepted:
                message.run.stall_after_ms = request.stall_after_ms
                self._runs[request.run_id] = message.run  # before its SpawnRun (if it starts now) runs
                if message.finished is not None:
                    self._finishing[request.run_id] = (message.finished, request.session, request.directory)
            else:
                message.run.ref.stop(block=False)
        self._close_at_once(commands)

    def _close_at_once(self, commands: list[Command]) -> None:
        """With no dispose hook, an instance whose (empty) load has returned is closed as soon as the
        core disposes of it: its ``DisposeDone`` is decided now and joins this batch, published once
        with the message that disposed it (no second publication, no hop). ``_dispose`` then only
        lets the instance's actor go."""
        if not self._no_hooks:
            return
        for command in commands:
            if type(command) is not DisposeInstance or not command.report:
                continue
            key = (command.directory, command.generation)
            loaded = self._loaded.get(key)
            if key not in self._instances or key in self._closing or loaded is None or not loaded.done():
                continue
            done = DisposeDone(directory=command.directory, generation=command.generation)
            more = self.core.report(done)
            self._closing.add(key)
            self._staged.append((done, more, None))
            self._close_at_once(more)

    # --- carrying out the core's commands ----------------------------------------------------

    def _execute(self, commands: list[Command]) -> None:
        # A lookup by type (``_CARRY_OUT``, then the method by name), not a chain of isinstance: a
        # shutdown's deadline carries out four commands per abandoned body.
        carry_out = _CARRY_OUT
        for command in commands:
            getattr(self, carry_out[type(command)])(command)

    def _emit(self, command: Emit) -> None:
        self._publish(command.event)

    def _reply(self, command: Reply) -> None:
        self._calls.append(_Answer(command.reply_to, command.answer))

    def _release_command(self, command: ReleaseRun) -> None:
        self._release(command.run_id)

    def _load(self, command: LoadInstance) -> None:
        done: Future[str | None] = Future()  # answered once the core has heard the load end
        hook: Future[str | None] = Future()  # the load hook's end, on its thread: told as LoadDone
        self._load_waits[(command.directory, command.generation)] = done
        hook.add_done_callback(self._tell_loaded(command, done))
        loading = Loading(
            directory=command.directory,
            generation=command.generation,
            done=done,
            deadline=time.monotonic() + self._load_budget_ms / 1000.0,
        )
        self._loads[command.directory] = loading
        self._loaded[(command.directory, command.generation)] = done
        self._instances[(command.directory, command.generation)] = InstanceActor.start(
            command.directory,
            command.generation,
            self._hooks,
            self.actor_ref,
            self._threads,
            loaded=hook,
            load_deadline=loading.deadline,
            load_budget_ms=self._load_budget_ms,
        )

    def _tell_loaded(
        self, command: LoadInstance, done: Future[str | None]
    ) -> Callable[[Future[str | None]], None]:
        """What tells the core a load ended (``LoadDone``: ``instance.ready`` if it returned), on
        whichever thread ends it. Whoever waits for the load (``done``) learns it after the core's
        events of it (``_loaded_answer``), or at once when this actor has stopped."""
        me = self.actor_ref

        def told(hook: Future[str | None]) -> None:
            error = hook.result()
            try:
                me.tell(LoadDone(directory=command.directory, generation=command.generation, error=error))
            except pykka.ActorDeadError:
                _settle(done, error)

        return told

    def _loaded_answer(self, report: LoadDone) -> None:
        """Whoever waits for this load is answered after the batch's events (``instance.ready``)."""
        done = self._load_waits.pop((report.directory, report.generation), None)
        if done is not None:
            self._calls.append(_Answer(done, report.error))

    def _publish(self, event: Event) -> None:
        self._events.append(event)  # delivered with the batch (``_deliver``)
        if isinstance(event, RunUnstalled):
            self._unstalled(event)
        if isinstance(event, RunFinished):
            finishing = self._finishing.pop(event.run_id, None)
            waiters = self._waiters.pop(event.run_id, ())
            if finishing is None and not waiters:
                return
            snapshot = self._view.runs.get(event.run_id)  # published already: the core's, no rebuild
            if finishing is not None:
                future, session, directory = finishing
                # Not retained (retain_finished_runs=0): the event says everything a snapshot does.
                self._calls.append(_Answer(future, snapshot or _snapshot_of(event, session, directory)))
            for waiter in waiters:
                self._calls.append(_Answer(waiter, snapshot))

    def _spawn(self, command: SpawnRun) -> None:
        slot = self._runs.get(command.run_id)
        if slot is None:  # a raw StartRun that came without a run actor: nothing to run
            self.actor_ref.tell(BodyEnded(run_id=command.run_id, error="no body was given for this run"))
            return
        instance = self._instances.get((command.directory, command.generation))
        slot.started = True
        slot.token.progress.restart()
        self._arm_stall_check(command.run_id, slot)
        slot.ref.tell(Go(spawn=command, instance=instance))

    def _control(self, command: SignalInterrupt | DeliverAnswer | AbandonRun) -> None:
        """Reach the body through its token: thread-safe, never blocks, no mailbox hop."""
        slot = self._runs.get(command.run_id)
        if slot is None:
            return
        if isinstance(command, SignalInterrupt):
            slot.token.cancel(command.reason)
        elif isinstance(command, DeliverAnswer):
            slot.token.progress.restart()  # the body waited for the user, not stalled: count from now
            slot.token.deliver(command)
        else:
            slot.token.abandon()  # O(1); from now on the thread book never joins its thread

    def _release(self, run: str) -> None:
        slot = self._runs.pop(run, None)
        if slot is not None and slot.stall_check is not None:
            slot.stall_check.cancel()
        if slot is not None and not slot.started:
            # Never started (cancelled in its queue): nothing else will stop it. A started one stops
            # itself when its body returns -- an abandoned one too: a stop sent now would only wait
            # behind its body in the mailbox, so none is sent (O(1) per abandoned body).
            slot.ref.stop(block=False)

    def _dispose(self, command: DisposeInstance) -> None:
        key = (command.directory, command.generation)
        ref = self._instances.pop(key, None)
        loaded = self._loaded.pop(key, None)
        loading = self._loads.get(command.directory)
        if loading is not None and loading.generation == command.generation:
            del self._loads[command.directory]
        if ref is None:
            if command.report and key not in self._closing:
                self.actor_ref.tell(DisposeDone(directory=command.directory, generation=command.generation))
            self._closing.discard(key)
            return
        if command.report and self._no_hooks and loaded is not None and loaded.done():
            # No dispose hook, and the (empty) load has returned: closed now. The core learns it in
            # this same batch (no two hops: decided with the message that disposed it, if it could be
            # then, ``_close_at_once``); the actor is told to stop without reporting once the batch is
            # delivered (its two threads then wake behind whoever waits for the close).
            quiet = Dispose(msgspec.structs.replace(command, report=False), self._deadline)
            self._after.append(_Tell(ref, quiet))
            if key in self._closing:
                self._closing.discard(key)
                return
            done = DisposeDone(directory=command.directory, generation=command.generation)
            self._staged.append((done, self.core.report(done), None))
            return
        try:
            ref.tell(Dispose(command, self._deadline))  # at shutdown, nothing waits past its deadline
        except pykka.ActorDeadError:
            if command.report:
                self.actor_ref.tell(
                    DisposeDone(
                        directory=command.directory,
                        generation=command.generation,
                        error="the instance actor was gone",
                    )
                )

    def tell_later(self, delay_s: float, message: Any) -> TimerHandle:
        """Send ``message`` to this actor ``delay_s`` seconds from now, on the shared timer (dropped
        if the actor has stopped meanwhile). Cancel the handle when it is no longer wanted."""
        me = self.actor_ref

        def deliver() -> None:
            try:
                me.tell(message)
            except pykka.ActorDeadError:
                pass

        return self.timers.schedule(delay_s, deliver)

    # --- stalls: the shell measures, the core decides ------------------------------------------

    def _stall_limit_ms(self, slot: RunSlot) -> int | None:
        return slot.stall_after_ms if slot.stall_after_ms is not None else self._stall_after_ms

    def _arm_stall_check(self, run_id: str, slot: RunSlot, delay_s: float | None = None) -> None:
        """One pending check per active, unflagged run: re-armed only when it comes due or the
        run's flag clears, never per report (a report only records the time, in ``Progress``)."""
        limit = self._stall_limit_ms(slot)
        if limit is None:
            return
        if slot.stall_check is not None:
            slot.stall_check.cancel()
        delay = limit / 1000.0 if delay_s is None else delay_s
        slot.stall_check = self.tell_later(delay, CheckStall(run_id))

    def _check_stall(self, run_id: str) -> None:
        slot = self._runs.get(run_id)
        limit = self._stall_limit_ms(slot) if slot is not None else None
        if slot is None or not slot.started or limit is None:
            return
        slot.stall_check = None
        flagged, seconds = slot.token.progress.flag_if_idle(limit / 1000.0)
        if not flagged:
            self._arm_stall_check(run_id, slot, seconds)
            return
        now_ms = int(time.time() * 1000)  # an announced retry's next_at_ms is wall-clock time
        report = NoProgress(run_id=run_id, idle_ms=int(seconds * 1000), now_ms=now_ms)
        commands = self.core.report(report)
        self._view.refresh(self.core, report, commands)
        self._execute(commands)
        if not any(isinstance(c, Emit) and isinstance(c.event, RunStalled) for c in commands):
            # Not flagged: it waits for the user, its children or its retry's next attempt (measure
            # again), or it is no longer active.
            slot.token.progress.stalled = False
            snapshot = self._view.runs.get(run_id)
            if snapshot is not None and snapshot.state is RunState.ACTIVE and run_id in self._runs:
                session = self._view.sessions.get(snapshot.session)
                next_at = session.next_at_ms if session is not None and session.active == run_id else None
                # Waiting out a retry's backoff: the stall setting counts from the next attempt.
                backoff_s = max(0, next_at - now_ms) / 1000.0 if next_at is not None else 0.0
                self._arm_stall_check(run_id, slot, backoff_s + limit / 1000.0)

    def _unstalled(self, event: RunUnstalled) -> None:
        slot = self._runs.get(event.run_id)
        if slot is None:
            return
        slot.token.progress.stalled = False
        if event.progress:  # measure again from its last progress (just now)
            self._arm_stall_check(event.run_id, slot)

    def _start_timer(self, command: StartGraceTimer) -> None:
        # The shutdown has begun (its queued runs ended, its interrupts follow): no run starts any
        # more, so a body that ends from now on lets its thread end instead of parking it, and idle
        # threads end now -- each interrupted body's thread is woken once, as a host's own stop wakes
        # each of its threads once (not again at the end to be let go of).
        self._threads.workers.close()
        # From the request (when its caller sent it): a shutdown's grace includes its wait in the
        # mailbox and its interrupts' decisions, so it returns within grace + stop_timeout_s of the call.
        sent = self._sent_at if self._sent_at is not None else time.monotonic()
        self._deadline = sent + command.grace_ms / 1000.0
        # Not kept: closing the timers at the end cancels it.
        delay = max(0.0, self._deadline - time.monotonic())
        self.tell_later(delay, GraceExpired(action_id=command.action_id))

    def _deadline_timer(self, command: ArmDeadline | DisarmDeadline) -> None:
        """A run's deadline on the shared timer: armed when it becomes active, cancelled at its
        end. An expiry that crosses the run's end is ignored by the core (``DEADLINE_EXPIRY``)."""
        if isinstance(command, ArmDeadline):
            self._arm(self._run_deadlines, command.run_id, command.deadline_ms, DeadlineExpired)
        else:
            self._disarm(self._run_deadlines, command.run_id)

    def _grace_timer(self, command: StartInterruptGrace | StopInterruptGrace) -> None:
        """An interrupted run's own grace on the shared timer: past it the core abandons the run if
        its body still runs (``protocol.GRACE_EXPIRY``); cancelled at the run's end."""
        if isinstance(command, StartInterruptGrace):
            self._arm(self._run_graces, command.run_id, command.grace_ms, InterruptGraceExpired)
        else:
            self._disarm(self._run_graces, command.run_id)

    def _arm(
        self,
        armed: dict[str, TimerHandle],
        run_id: str,
        delay_ms: int,
        expired: type[DeadlineExpired] | type[InterruptGraceExpired],
    ) -> None:
        """Tell the core ``expired(run_id)`` ``delay_ms`` from now, unless disarmed first."""
        armed[run_id] = self.tell_later(delay_ms / 1000.0, expired(run_id=run_id))

    @staticmethod
    def _disarm(armed: dict[str, TimerHandle], run_id: str) -> None:
        handle = armed.pop(run_id, None)
        if handle is not None:
            handle.cancel()

    def _shutdown_complete(self, command: ShutdownComplete) -> None:
        self.timers.close()  # nothing scheduled matters any more (grace, deadlines)
        self._threads.workers.close()  # no run starts any more: idle run threads end now
        self._run_deadlines.clear()
        # Stop every child at once (in parallel), then ourselves; never ActorRegistry.stop_all.
        for slot in self._runs.values():
            slot.ref.stop(block=False)
        for instance_ref in self._instances.values():
            instance_ref.stop(block=False)
        self._runs.clear()
        self._instances.clear()
        self._loads.clear()
        self._loaded.clear()
        for done in self._load_waits.values():  # their hooks' ends will not be heard now
            _settle(done, "the supervisor stopped before the load hook returned")
        self._load_waits.clear()
        self._deliver()  # the last events and answers, before every subscription closes
        self._settle_leftovers()
        self._publisher.close_all()  # after the last event; the host joins the callback threads
        self._on_shutdown_complete(command, self._deadline)
        self.stop()


_RECEIVE: dict[type, str] = {
    **dict.fromkeys(get_args(Report), "_on_report"),  # every input from a body, an instance or a timer
    Submit: "_submit",
    CheckStall: "_on_check_stall",
    Query: "_on_query",
    WaitRun: "_on_wait_run",
    Preload: "_on_preload",
}
"""How the supervisor handles each message type it is sent (``SessionSupervisor._receive``): the
name of the method, looked up on the supervisor, as ``_CARRY_OUT``'s; a message of another type
fails on its own, logged and contained (``on_receive``), never ignored in silence."""


_CARRY_OUT: dict[type, str] = {
    Emit: "_emit",
    Reply: "_reply",
    SpawnRun: "_spawn",
    SignalInterrupt: "_control",
    DeliverAnswer: "_control",
    AbandonRun: "_control",
    ReleaseRun: "_release_command",
    LoadInstance: "_load",
    DisposeInstance: "_dispose",
    StartGraceTimer: "_start_timer",
    ArmDeadline: "_deadline_timer",
    DisarmDeadline: "_deadline_timer",
    StartInterruptGrace: "_grace_timer",
    StopInterruptGrace: "_grace_timer",
    ShutdownComplete: "_shutdown_complete",
}
"""How the shell carries out each command type of the core (``SessionSupervisor._execute``): the
name of the method, looked up on the supervisor, so that a subclass or a test's patch of it holds; a
command type missing here fails its batch loudly (``tests/test_bulk_commands.py`` checks that every
one is here)."""
