"""The link: one connection to the supervisor actor, under both facades.

``Supervisor`` and ``AsyncSupervisor`` are two ways of waiting on the same link. The link sends a
checked request (or any message) carrying an internal ``concurrent.futures.Future``, answers what
is sent after the actor stopped (or after the journal failed) as the supervisor would, waits for an
answer within a bound -- blocking for the sync facade, awaiting for the async one -- and turns a
rejection into its exception (a refusal after the journal failed raises that ``JournalFailed``).
Host-facing futures it hands out are completed off the supervisor's thread (by the ``Relay``).
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar, cast

import pykka

from run_supervisor.actors import _validate as check
from run_supervisor.actors._async_body import AsyncBodies, RunBody, inbox_of, is_async_body
from run_supervisor.actors._calls import Call, StartCall
from run_supervisor.actors._errors import (
    JournalFailed,
    LoadFailed,
    SupervisorClosed,
    SupervisorError,
    SupervisorTimeout,
    UnknownRun,
    raise_for_rejection,
)
from run_supervisor.actors._relay import Relay, complete
from run_supervisor.actors._run_actor import RunActor, RunSlot
from run_supervisor.actors._subscription import Publisher, Subscription
from run_supervisor.actors._supervisor import Loading, Preload, Query, Submit, WaitRun
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.actors._view import View
from run_supervisor.protocol import (
    CloseOutcome,
    CloseRequest,
    CloseResult,
    ConfirmClose,
    RejectCode,
    Request,
    RequestOutcome,
    RequestResult,
    RunSnapshot,
    SessionSnapshot,
    Shutdown,
    ShutdownComplete,
    StartRun,
    SupervisorCore,
)

T = TypeVar("T")

__all__ = ["Link", "link_of"]


START_BATCH = 8
"""Queued async starts made and told at once (``Link.start_later``): the next batch is told once
the supervisor has answered this one, so its thread never has more than this many starts to decide
in one go (the GIL it holds meanwhile is what makes the host's loop late)."""


def _settle(
    queued: QueuedStart, outcome: CloseOutcome | RequestOutcome | None, error: BaseException | None = None
) -> None:
    """On the loop: give the awaited start its outcome (None, and no error: the caller gave up on
    it) and wake its caller."""
    if queued.settled:
        return
    queued.settled = True
    queued.outcome = outcome
    queued.error = error
    waiter = queued.waiter
    if not waiter.done():
        waiter.set_result(None)


class QueuedStart:
    """An async start queued on its loop (``Link.start_later``): made and told at a later turn.

    Its caller awaits ``waiter``, which is released once the start is ``settled`` (on the loop:
    ``outcome``, rejections included, or the ``error`` its checks raised); a caller woken for
    another reason (a cancellation it holds back, its bound) puts a fresh waiter in its place."""

    __slots__ = (
        "call",
        "error",
        "finished",
        "inbox",
        "loop",
        "make",
        "outcome",
        "sent",
        "settled",
        "waiter",
        "withdrawn",
    )

    def __init__(self, make: Callable[[], StartCall], loop: asyncio.AbstractEventLoop) -> None:
        self.make = make
        self.loop = loop
        self.inbox = inbox_of(loop)
        self.waiter: asyncio.Future[None] = loop.create_future()
        self.settled = False
        """``outcome`` and ``error`` are set: only on the loop."""
        self.outcome: CloseOutcome | RequestOutcome | None = None
        self.error: BaseException | None = None
        self.call: StartCall | None = None
        """The checked start, once made."""
        self.finished: Future[RunSnapshot] | None = None
        """Completed with the run's final snapshot (its handle waits on it), once made."""
        self.sent: Future[Any] | None = None
        self.withdrawn = False  # guarded by the link's lock

    def withdraw(self, link: Link) -> None:
        """The caller stops waiting (its bound ran out): a start not told yet never will be; one
        told has its answer dropped."""
        with link.lock:
            self.withdrawn = True
            sent = self.sent
        if sent is not None:
            sent.cancel()

    def fail(self, error: BaseException) -> None:
        try:
            self.inbox.post(_settle, self, None, error)
        except RuntimeError:
            pass  # the loop is closed: nobody awaits it

    def settle_from(
        self, sent: Future[Any], link: Link, run: RunSlot | None = None, *, told: bool = False
    ) -> None:
        """When ``sent`` (the internal future) is done, give the caller its outcome on the loop;
        a ``told`` start's answer also lets the link tell the next batch (``Link._answered``)."""
        request = cast("StartCall", self.call).request
        inbox = self.inbox

        def relay(done: Future[Any]) -> None:
            try:
                inbox.post(_settle, self, link._outcome(done, request, run))
            except RuntimeError:
                pass  # the loop is closed: nobody awaits the answer
            if told:
                link._answered()

        sent.add_done_callback(relay)


def rejected(request: object, code: RejectCode, error: str) -> CloseOutcome | RequestOutcome:
    """The outcome a request gets when it is refused before the core saw it."""
    if isinstance(request, CloseRequest | Shutdown | ConfirmClose):
        return CloseOutcome(result=CloseResult.REJECTED, error=error, code=code)
    return RequestOutcome(result=RequestResult.REJECTED, error=error, code=code)


class Link:
    """A supervisor actor's connection, shared by its sync and async facades.

    Made before the actor (its callbacks are the actor's ``on_stopped`` and
    ``on_shutdown_complete``, and the journal's ``on_failure``), then ``connect``ed to it."""

    publisher: Publisher
    view: View

    def __init__(self, config: Any, threads: ThreadBook) -> None:
        self.config = config  # a SupervisorConfig (typed loosely: that class lives with the facade)
        self.threads = threads
        self.lock = threading.Lock()
        """Guards the fields below (and what a facade keeps beside them)."""
        self.closed = False
        """The actor's mailbox is closed: nothing more is answered."""
        self.relay = Relay(threads)
        self.async_bodies = AsyncBodies(threads)
        self.shutdown_complete: Future[ShutdownComplete] = Future()
        self.final: CloseOutcome | None = None
        self.deadline: float | None = None
        self.journal_failure: JournalFailed | None = None
        self._outstanding: set[Future[Any]] = set()
        self._queued: deque[QueuedStart] = deque()
        """Async starts made, not yet told (``start_later``): guarded by ``lock``."""
        self._starting: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        """The loops with a ``_start_some`` scheduled: each loop that queues a start tells the queue
        at its own next turn, never waiting for another loop's (which may have stopped turning).
        Guarded by ``lock``."""
        self._unanswered = 0
        """Starts told by ``_start_some`` and not answered yet; guarded by ``lock``."""
        self._held: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        """The loops whose ``_start_some`` found a batch unanswered and left the queue to the
        answers: each is woken again when the last of them comes. Guarded by ``lock``."""
        self._ref: pykka.ActorRef[Any] | None = None
        self._finished: weakref.WeakKeyDictionary[object, Future[RunSnapshot]] = weakref.WeakKeyDictionary()

    def connect(self, ref: pykka.ActorRef[Any], publisher: Publisher, view: View) -> None:
        self._ref = ref
        self.publisher = publisher
        self.view = view

    # --- the actor's callbacks -----------------------------------------------------------------

    def on_journal_failure(self, failure: JournalFailed) -> None:
        """From the journal's writer: a batch did not commit. From now on every request is refused
        with the failure, and the supervisor shuts down (its runs interrupted within the default
        grace; nothing of it is delivered or journaled: the next start recovers them as crashes)."""
        with self.lock:
            self.journal_failure = failure
        shutdown = Shutdown(origin="journal", grace_ms=self.config.default_grace_ms)
        if self._ref is None:  # not started yet
            return
        try:
            self._ref.tell(Submit(shutdown, Future()))
        except pykka.ActorDeadError:  # already stopped
            pass

    def on_shutdown_complete(self, command: ShutdownComplete, deadline: float | None) -> None:
        with self.lock:
            self.final = command.outcome
            self.deadline = deadline
        complete(self.shutdown_complete, command)  # only our own waiters hold it: no host callback

    def on_stopped(self) -> None:
        """The supervisor's mailbox is closed: nothing still waiting will ever be answered."""
        self.async_bodies.close()
        with self.lock:
            self.closed = True
            waiting = list(self._outstanding)
        for future in waiting:
            complete(future, error=SupervisorClosed("the supervisor has shut down"))
        self.view.close_idle(SupervisorClosed("the supervisor stopped while the session was busy"))
        self.relay.close()

    # --- sending ---------------------------------------------------------------------------------

    def post(self, make: Callable[[Future[Any]], Any]) -> Future[Any]:
        """Send a message carrying a fresh internal future (completed on the supervisor's thread:
        never handed to a host as is). The async starts still queued (``start_later``) are told
        first: the order in which calls were made holds, from whichever thread."""
        reply: Future[Any] = Future()
        with self.lock:
            closed = self.closed
            if not closed:
                self._outstanding.add(reply)
                sending = self._prepare(len(self._queued))
                sending.append((make(reply), reply))
                refused = self._tell(sending)  # under the lock: in the order the calls were made
        if closed:
            reply.set_exception(SupervisorClosed("the supervisor has shut down"))
            return reply
        reply.add_done_callback(self._forget)
        self._refuse(refused)
        return reply

    def start_later(self, make: Callable[[], StartCall], loop: asyncio.AbstractEventLoop) -> QueuedStart:
        """Queue an async start made on ``loop`` (its thread). Its checks (``make``), its run's actor
        and its message are made, and it is told, at a later turn of the loop, ``START_BATCH`` starts
        a turn: 200 starts gathered at once cost the loop a few short turns, not one long one, and
        wake the supervisor's thread once a turn. Anything sent meanwhile is told after them. The
        answer (or the checks' error) comes through the loop's inbox (one wake per batch)."""
        queued = QueuedStart(make, loop)
        with self.lock:
            first = loop not in self._starting
            self._starting.add(loop)
            self._queued.append(queued)
        if first:
            loop.call_soon(self._start_some, loop)
        return queued

    def _start_some(self, loop: asyncio.AbstractEventLoop) -> None:
        with self.lock:
            if self._unanswered:  # a batch is being decided: the last of its answers wakes us
                self._held.add(loop)
                return
            sending = self._prepare(START_BATCH, told=True)
            refused = self._tell(sending)
            again = bool(self._queued)
            if not again:
                self._starting.discard(loop)
            elif self._unanswered:
                self._held.add(loop)  # the batch's last answer tells the next one
                again = False
        self._refuse(refused)
        if again:  # none of them was told (their checks refused them): the next turn goes on
            loop.call_soon(self._start_some, loop)

    def _answered(self) -> None:
        """A start told by ``_start_some`` has its answer (on whichever thread completed it): once
        the batch is answered, the loops holding queued starts tell the next one."""
        with self.lock:
            self._unanswered -= 1
            if self._unanswered:
                return
            held = list(self._held)
            self._held.clear()
        for loop in held:
            try:
                inbox_of(loop).post(self._start_some, loop)  # after the batch's answers
            except RuntimeError:
                with self.lock:
                    self._starting.discard(loop)  # closed: its starts are told by the next loop or post

    def _prepare(self, count: int, *, told: bool = False) -> list[tuple[Any, Future[Any]]]:
        """The messages of the next ``count`` queued starts (under ``lock``): checked, each with its
        run's actor; a start that fails its checks, or meets a closed supervisor, is answered.
        ``told``: counted unanswered until its answer comes (``_answered``)."""
        sending: list[tuple[Any, Future[Any]]] = []
        for _ in range(min(count, len(self._queued))):
            queued = self._queued.popleft()
            if queued.withdrawn:
                continue
            try:
                call = queued.call = queued.make()
            except BaseException as exc:  # the checks refused it: the caller raises it
                queued.fail(exc)
                continue
            queued.finished = finished = Future[RunSnapshot]()
            if self.closed or self.journal_failure is not None:
                queued.settle_from(self.call(call.request, call.body, finished, queued.loop), self)
                continue
            run = self._run_of(call.request, call.body, queued.loop, None)
            reply: Future[Any] = Future()
            self._outstanding.add(reply)
            reply.add_done_callback(self._forget)  # not done before it is told: no lock taken here
            queued.sent = reply
            sending.append((Submit(call.request, reply, run, finished), reply))
            if told:
                self._unanswered += 1
            queued.settle_from(reply, self, run, told=told)
        return sending

    def _tell(self, messages: list[tuple[Any, Future[Any]]]) -> list[tuple[Any, Future[Any]]]:
        """Tell each message in order; those the stopped actor refused."""
        assert self._ref is not None
        refused = []
        for sent in messages:
            try:
                self._ref.tell(sent[0])
            except pykka.ActorDeadError:
                refused.append(sent)
        return refused

    def _refuse(self, refused: list[tuple[Any, Future[Any]]]) -> None:
        for _, reply in refused:  # outside the lock: completing runs ``_forget``
            complete(reply, error=SupervisorClosed("the supervisor has shut down"))
        for _, reply in refused:
            self._forget(reply)

    def _forget(self, future: Future[Any]) -> None:
        with self.lock:
            self._outstanding.discard(future)

    def closed_outcome(self, request: Request) -> CloseOutcome | RequestOutcome:
        if isinstance(request, Shutdown) and self.final is not None:
            return self.final
        failure = self.journal_failure
        return rejected(
            request,
            RejectCode.SUPERVISOR_CLOSED,
            "the supervisor has shut down; no request is accepted any more"
            if failure is None
            else str(failure),
        )

    def call(
        self,
        request: Request,
        body: RunBody | None = None,
        finished: Future[RunSnapshot] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        launched: list[Any] | None = None,
    ) -> Future[CloseOutcome | RequestOutcome]:
        """Send a checked request; the internal future resolves to its outcome (rejections included).
        A run actor started for a ``StartRun`` is appended to ``launched``, if given; an async body
        runs on ``loop`` (the host's), else on the supervisor's own loop thread."""
        answer: Future[CloseOutcome | RequestOutcome] = Future()
        if self.closed:
            answer.set_result(self.closed_outcome(request))
            return answer
        failure = self.journal_failure
        if failure is not None:  # it shuts itself down: a shutdown is answered with that one's outcome
            if isinstance(request, Shutdown):
                self.shutdown_complete.add_done_callback(lambda done: complete(answer, done.result().outcome))
            else:
                answer.set_result(rejected(request, RejectCode.SUPERVISOR_CLOSED, str(failure)))
            return answer
        run = self._run_of(request, body, loop, launched)
        inner = self.post(lambda reply: Submit(request, reply, run, finished))

        def relay(done: Future[Any]) -> None:
            outcome = self._outcome(done, request, run)
            if outcome is None:  # the caller gave up waiting
                answer.cancel()
            else:
                complete(answer, outcome)

        inner.add_done_callback(relay)
        answer.add_done_callback(lambda held: inner.cancel() if held.cancelled() else None)
        return answer

    def _run_of(
        self,
        request: Request,
        body: RunBody | None,
        loop: asyncio.AbstractEventLoop | None,
        launched: list[Any] | None,
    ) -> RunSlot | None:
        """For a ``StartRun``: its actor, made here on the caller's thread, idle until ``Go``."""
        if not isinstance(request, StartRun):
            return None
        assert self._ref is not None
        timeout = self.config.request_timeout_s
        if is_async_body(body):  # a task on the host's loop (AsyncSupervisor) or on ours
            run = self.async_bodies.launch(request.run_id, body, self._ref, timeout, loop)
        else:
            run = RunActor(request.run_id, body, self._ref, timeout, self.threads).slot()
        if launched is not None:
            launched.append(run)
        return run

    def _outcome(
        self, done: Future[Any], request: Request, run: RunSlot | None
    ) -> CloseOutcome | RequestOutcome | None:
        """What the caller learns of a request's internal future (None: the caller gave up on it)."""
        if done.cancelled():
            return None
        error = done.exception()
        if error is None:
            outcome: CloseOutcome | RequestOutcome = done.result()
            return outcome
        if run is not None:
            run.ref.stop(block=False)  # the supervisor never took it on
        if isinstance(error, SupervisorClosed):
            return self.closed_outcome(request)
        return rejected(request, RejectCode.INTERNAL_ERROR, f"the supervisor failed: {error}")

    def raise_for_rejection(self, outcome: CloseOutcome | RequestOutcome) -> None:
        """``raise_for_rejection``, but a request refused because the journal failed raises that
        failure (``JournalFailed``, a ``SupervisorClosed``) rather than a bare ``SupervisorClosed``."""
        failure = self.journal_failure
        if failure is not None and outcome.code is RejectCode.SUPERVISOR_CLOSED:
            raise copy.copy(failure)  # a copy each, of its own class (a lost lease stays LeaseLost)
        raise_for_rejection(outcome)

    # --- waiting: blocking (the sync facade) or awaiting (the async one), both bounded -----------

    def timeout(self, timeout: float | None) -> float:
        limit: float = self.config.request_timeout_s if timeout is None else timeout
        return limit

    def get(self, future: Future[T], timeout: float | None, *, withdraw: bool = True) -> T:
        limit = self.timeout(timeout)
        try:
            return future.result(timeout=limit)
        except TimeoutError:
            if withdraw:
                future.cancel()  # the supervisor drops the answer; _forget releases it
            raise SupervisorTimeout(f"the supervisor did not answer within {limit} s") from None

    async def wait(self, future: Future[T], timeout: float | None) -> T:
        limit = self.timeout(timeout)
        try:
            async with asyncio.timeout(limit):
                return await asyncio.wrap_future(future)  # cancelling the wait cancels the future
        except SupervisorTimeout:
            raise
        except TimeoutError:
            raise SupervisorTimeout(f"the supervisor did not answer within {limit} s") from None

    def request(self, request: Request, timeout: float | None, body: RunBody | None = None) -> Any:
        """Send a checked request, wait for its answer; a rejection raises."""
        outcome = self.get(self.call(request, body), timeout)
        self.raise_for_rejection(outcome)
        return outcome

    async def request_async(
        self,
        request: Request,
        timeout: float | None,
        body: RunBody | None = None,
        finished: Future[RunSnapshot] | None = None,
    ) -> Any:
        """``request`` for a coroutine; an async body runs as a task on the awaiting loop."""
        call = self.call(request, body, finished, asyncio.get_running_loop())
        outcome = await self.wait(call, timeout)
        self.raise_for_rejection(outcome)
        return outcome

    def answer(self, call: Call[T]) -> T:
        """Carry out a facade call (actors/_calls.py): send its request, block for the answer within
        its bound; a rejection raises, an accepted answer is read as the call says."""
        return call.read(self.request(call.request, call.timeout))

    async def answer_async(self, call: Call[T]) -> T:
        """``answer`` for a coroutine: the same request, awaited."""
        return call.read(await self.request_async(call.request, call.timeout))

    def query_future(self, read: Callable[[SupervisorCore], T]) -> Future[T]:
        """A host-facing future of ``read(core)``, read on the supervisor's thread."""
        return self.relay.relayed(self.post(lambda reply: Query(read, reply)))

    # --- runs, sessions, directories --------------------------------------------------------------

    def unknown_or_closed(self, run_id: str) -> SupervisorError:
        if self.closed:
            return SupervisorClosed(f"the supervisor shut down before run {run_id!r} was known to finish")
        return UnknownRun(f"run {run_id!r} is not known (never started, or finished and forgotten)")

    def wait_run(self, run_id: str) -> Future[Any]:
        """The internal future of the run's final snapshot, asked of the supervisor (None if
        unknown): for a handle that was not given the run's own ``finished`` future."""
        return self.post(lambda reply: WaitRun(run_id, reply))

    def finished_future(self, run_id: str, finished: Future[RunSnapshot] | None) -> Future[RunSnapshot]:
        """A host-facing future of the run's final snapshot: ``finished`` relayed (shared: nobody's
        wait cancels it), else the supervisor asked; it raises what a handle's ``wait`` would."""
        if finished is not None:
            return self.relay.relayed(finished, shared=True)

        def convert(done: Future[Any]) -> RunSnapshot:
            snapshot = done.result()
            if snapshot is None:
                raise self.unknown_or_closed(run_id)
            result: RunSnapshot = snapshot
            return result

        outer: Future[RunSnapshot] = Future()
        self.relay.chain(self.wait_run(run_id), outer, convert)
        return outer

    def remember_finished(self, handle: object, finished: Future[RunSnapshot] | None) -> None:
        """Keep the run's own ``finished`` future with its handle (while the handle lives), so a
        handle of the other facade made from it waits on the same future."""
        if finished is not None:
            with self.lock:
                self._finished[handle] = finished

    def finished_of(self, handle: object) -> Future[RunSnapshot] | None:
        """The ``finished`` future a handle was made with (None: ask the supervisor)."""
        with self.lock:
            return self._finished.get(handle)

    def idle_future(self, session: object) -> tuple[str, Future[SessionSnapshot | None]]:
        """Checked; the internal future of ``View.when_idle`` (completed on the supervisor's thread)."""
        name = check.identifier("session", session)
        return name, self.view.when_idle(name)

    def still_busy(self, session: str, limit: float) -> SupervisorTimeout:
        snapshot = self.view.sessions.get(session)
        now = f" (run {snapshot.active!r} active, {len(snapshot.queued)} queued)" if snapshot else ""
        return SupervisorTimeout(f"session {session!r} was still busy after {limit} s{now}")

    def load(self, names: tuple[str, ...], fingerprint: str | None, timeout: float | None) -> None:
        """Load checked directories now and wait for their load hooks (see ``Supervisor.load``)."""
        started = time.monotonic()
        loads: tuple[Loading, ...] = self.get(
            self.post(lambda reply: Preload(names, True, reply, fingerprint)), timeout
        )
        errors: dict[str, str] = {}
        for loading in loads:
            wait = loading.deadline - time.monotonic()
            if timeout is not None:
                wait = min(wait, started + timeout - time.monotonic())
            try:
                error = loading.done.result(timeout=max(0.0, wait))
            except TimeoutError:
                if timeout is not None and time.monotonic() < loading.deadline:
                    raise SupervisorTimeout(
                        f"the load of {loading.directory} did not end within {timeout} s"
                    ) from None
                error = f"the load hook overran its {self.config.load_budget_ms} ms budget"
            if error is not None:
                errors[loading.directory] = error
        if errors:
            raise LoadFailed(errors)

    def preload_future(
        self, directories: tuple[object, ...], *, load: bool, fingerprint: object = None
    ) -> Future[None]:
        """Checked; a host-facing future done once the directories are known (``load=False``) or
        their loads have ended (``load=True``; it raises ``LoadFailed`` as ``load`` does)."""
        names = check.directory_names("directories", directories)
        print_ = check.optional_text("fingerprint", fingerprint)
        outer: Future[None] = Future()
        if not load:
            self.relay.chain(self.post(lambda reply: Preload(names, False, reply)), outer, lambda done: None)
            return outer

        def loading() -> None:  # waits on the load hooks: never on a caller's loop
            try:
                self.load(names, print_, None)
            except BaseException as exc:
                complete(outer, error=exc)
            else:
                complete(outer, None)

        thread = threading.Thread(target=loading, name="run-supervisor-loading", daemon=True)
        self.threads.add(thread)
        thread.start()
        return outer

    def add_subscription(self, subscription: Subscription) -> None:
        """The one path by which a subscription (sync or async) joins the publisher (closed at
        once if shutdown has completed meanwhile)."""
        self.publisher.add(subscription)


_links: weakref.WeakKeyDictionary[object, Link] = weakref.WeakKeyDictionary()


def attach(facade: object, link: Link) -> None:
    """Record ``link`` as the connection of ``facade`` (a ``Supervisor``), for other facades."""
    _links[facade] = link


def link_of(facade: object) -> Link | None:
    """The link a ``Supervisor`` drives (None for anything else)."""
    try:
        return _links.get(facade)
    except TypeError:  # not weakly referenceable: not a supervisor
        return None
