"""The in-process API for hosts: a typed facade over the SessionSupervisor actor.

Every call checks its arguments first (``InvalidRequest`` naming the argument; nothing has changed
then), then sends them through the supervisor's link (actors/_link.py, shared with the asyncio
facade, ``AsyncSupervisor``). Every call waits on the answer with a timeout (``SupervisorTimeout``);
an asyncio host uses ``AsyncSupervisor`` instead, whose calls are coroutines. The raw ``submit``
alone returns a ``concurrent.futures.Future`` (of the outcome, a rejection as a value).
"""

from __future__ import annotations

import atexit
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from os import PathLike
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from run_supervisor.actors import _calls as calls
from run_supervisor.actors import _validate as check
from run_supervisor.actors._async_body import RunBody
from run_supervisor.actors._calls import Call, saw_run_id, taking
from run_supervisor.actors._config import SupervisorConfig
from run_supervisor.actors._errors import (
    InvalidRequest,
    JournalFailed,
    SupervisorClosed,
    SupervisorError,
    SupervisorTimeout,
)
from run_supervisor.actors._instance_actor import InstanceHooks, NoInstanceHooks
from run_supervisor.actors._link import Link, attach, rejected
from run_supervisor.actors._relay import complete
from run_supervisor.actors._resume import (
    OfferedOnLoop,
    ResumeCallback,
    ResumeOffer,
    keep,
    kept,
    offer_resumes,
)
from run_supervisor.actors._run_actor import RunSlot
from run_supervisor.actors._subscription import Publisher, Subscription
from run_supervisor.actors._supervisor import Preload, Query, SessionSupervisor
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.actors._timers import Timers
from run_supervisor.actors._view import View
from run_supervisor.protocol import (
    ActionSnapshot,
    AskSnapshot,
    CloseOutcome,
    CoreStatistics,
    Event,
    RejectCode,
    Request,
    RequestOutcome,
    RetryBudget,
    RunRecovered,
    RunSnapshot,
    SessionSnapshot,
    StartRun,
    SupervisorCore,
)

if TYPE_CHECKING:  # loaded where a journal is given: a supervisor without one never loads SQLite
    from run_supervisor.actors._journal import Journal, JournaledPublisher, JournalSync

__all__ = ["RunHandle", "Supervisor", "SupervisorConfig", "simulate_crash"]

T = TypeVar("T")


class RunHandle:
    """A started (or queued) run."""

    def __init__(
        self, supervisor: Supervisor, run_id: str, finished: Future[RunSnapshot] | None = None
    ) -> None:
        if not isinstance(supervisor, Supervisor):
            raise InvalidRequest(f"supervisor must be a Supervisor, not {type(supervisor).__name__}")
        self._supervisor = supervisor
        self.run_id = check.identifier("run_id", run_id)
        self._finished = finished
        supervisor._link.remember_finished(self, finished)
        """Completed by the supervisor when the run finishes (also with ``retain_finished_runs=0``)."""

    def wait(self, timeout: float | None = None) -> RunSnapshot:
        """Wait until the run has finished; return its final snapshot. ``SupervisorTimeout`` if it
        has not finished in time (nothing is left behind by the wait); ``SupervisorClosed`` if the
        supervisor stopped without it finishing."""
        link = self._supervisor._link
        limit = link.timeout(check.timeout("timeout", timeout))
        if self._finished is not None:
            try:
                return self._finished.result(timeout=limit)
            except TimeoutError:
                raise SupervisorTimeout(f"run {self.run_id!r} did not finish within {limit} s") from None
        snapshot = link.get(link.wait_run(self.run_id), limit)
        if snapshot is None:
            raise link.unknown_or_closed(self.run_id)
        result: RunSnapshot = snapshot
        return result

    def cancel(
        self, *, origin: str = "user", grace_ms: int | None = None, timeout: float | None = None
    ) -> None:
        """Interrupt this run now (``user_cancel``), or end it unstarted if it is queued; see
        ``Supervisor.cancel`` for ``grace_ms``."""
        self._supervisor.cancel(self.run_id, origin=origin, grace_ms=grace_ms, timeout=timeout)

    def snapshot(self, timeout: float | None = None) -> RunSnapshot | None:
        """This run as the supervisor sees it now (None once it was forgotten)."""
        return self._supervisor.run(self.run_id, timeout=timeout)

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"


class Supervisor:
    """Owns run lifetime. Start it with ``Supervisor.start()``; stop it with ``shutdown()`` (or use
    it as a context manager). Thread-safe: call it from any thread."""

    def __init__(
        self,
        config: SupervisorConfig,
        hooks: InstanceHooks,
        journal: Journal | None = None,
        *,
        resume_budget: int | None = None,
    ) -> None:
        if not isinstance(config, SupervisorConfig):
            raise InvalidRequest(f"config must be a SupervisorConfig, not {type(config).__name__}")
        for hook in ("load", "dispose"):
            if not callable(getattr(hooks, hook, None)):
                raise InvalidRequest(f"hooks must have a callable {hook}() (see InstanceHooks)")
        self.config = config
        self.threads = ThreadBook()
        self._link = link = Link(config, self.threads)
        self.timers = Timers(self.threads)
        """The supervisor's one timer thread (shutdown's grace, run deadlines): see actors/_timers.py."""
        core = SupervisorCore(
            dispose_budget_ms=config.dispose_budget_ms,
            retain_finished=config.retain_finished_runs,
            reload_policy=config.reload_policy,
            queue_policy=config.queue_policy,
            interrupt_grace_ms=config.interrupt_grace_ms,
            retry_budget=(
                None
                if config.retry_attempts is None and config.retry_backoff_ms is None
                else RetryBudget(attempts=config.retry_attempts, backoff_ms=config.retry_backoff_ms)
            ),
        )
        self._publisher: Publisher
        self._journal_writer: JournaledPublisher | None = None
        """The publisher that writes the journal (None without one)."""
        recovered: list[Event] = []
        if journal is None:
            self._publisher = Publisher()
        else:
            from run_supervisor.actors._journal import JournaledPublisher, start_journal

            recovered = start_journal(
                journal, core, retain_finished=config.retain_finished_runs, resume_budget=resume_budget
            )
            self._publisher = self._journal_writer = JournaledPublisher(
                journal, on_failure=link.on_journal_failure
            )
            self.threads.add(self._publisher.thread)
        # The run.recovered events are the stream's first (seq 1..k), decided before any request and
        # before any subscription can exist: hosts read them from recovered(), deterministically.
        self._recovery_events: tuple[Event, ...] = tuple(recovered)
        self._epoch: int | None = None if journal is None else journal.boot
        self._recovered = tuple(e for e in recovered if isinstance(e, RunRecovered))
        self._view = View(core, recovered)
        self._ref = SessionSupervisor.start(
            core,
            hooks,
            self.threads,
            self._publisher,
            view=self._view,
            ask_timeout=config.request_timeout_s,
            load_budget_ms=config.load_budget_ms,
            on_shutdown_complete=link.on_shutdown_complete,
            on_stopped=link.on_stopped,
            timers=self.timers,
            stall_after_ms=config.stall_after_ms,
        )
        link.connect(self._ref, self._publisher, self._view)
        attach(self, link)
        _live.add(self)

    @classmethod
    def start(
        cls,
        config: SupervisorConfig | None = None,
        *,
        hooks: InstanceHooks | None = None,
        directories: Iterable[str | PathLike[str]] = (),
        journal: str | PathLike[str] | None = None,
        journal_sync: JournalSync = "normal",
        resume: ResumeCallback | None = None,
        on_start: Callable[[Supervisor], object] | None = None,
    ) -> Supervisor:
        """Start a supervisor. ``directories`` are loaded (generation 1) before this returns: it waits
        for their load hooks (each bounded by ``load_budget_ms``). If one raised or overran, the
        supervisor is shut down again and ``LoadFailed`` names each directory and its error; a host
        that wants to keep a supervisor whose loads failed starts it bare and calls ``load()``.

        ``journal`` names a run journal (an SQLite file, created if missing): runs, tool parts, open
        asks and lifecycle actions are recorded there, and runs a dead process left unfinished are
        recovered at this start (``recovered()``). ``journal_sync`` is ``"normal"`` (a commit survives
        a process crash) or ``"full"`` (it survives a power loss too). See docs/api.md, "Crashes".

        ``resume`` is the resume policy's callback: each run recovered at this start whose session's
        budget allows it (``SupervisorConfig.resume_budget``) is offered to it once, after the
        ``directories`` are loaded; it answers a ``Continuation`` (started with ``resume_of``, in the
        run's session) or None. Each call is bounded by ``request_timeout_s``; one that raises or
        overruns is reported, and the start goes on. ``resumes()`` says what became of each.

        ``on_start`` is called with the new supervisor once it has recovered, before it loads
        ``directories`` or offers resumes: a host that streams events subscribes there, so that it
        sees every event after the recovery's (the loads', the continuations'). If it raises, the
        supervisor is shut down again and the error is raised."""
        if isinstance(directories, str | bytes) or not isinstance(directories, Iterable):
            raise InvalidRequest("directories must be an iterable of directory names (not one str)")
        dirs = check.directory_names("directories", tuple(directories))
        if journal_sync not in ("normal", "full"):
            raise InvalidRequest(f"journal_sync must be 'normal' or 'full', not {journal_sync!r}")
        check.callback("resume", resume, optional=True)
        check.callback("on_start", on_start, optional=True)
        opened = None
        if journal is not None:
            if not isinstance(journal, str | PathLike) or isinstance(journal, bytes):
                raise InvalidRequest(
                    f"journal must be a path (str or os.PathLike), not {type(journal).__name__}"
                )
            from run_supervisor.actors._journal import Journal

            opened = Journal.open(journal, synchronous=journal_sync)
        try:
            settings = SupervisorConfig() if config is None else config
            supervisor = cls(
                settings,
                NoInstanceHooks() if hooks is None else hooks,
                opened,
                resume_budget=None if resume is None else settings.resume_budget,
            )
        except BaseException:
            if opened is not None:  # a bad config or hooks: the journal is not kept locked for nothing
                opened.abandon()
            raise
        if on_start is not None:
            try:
                on_start(supervisor)
            except BaseException:
                supervisor.shutdown(grace_ms=0)
                raise
        if dirs:
            try:
                supervisor.load(*dirs)
            except SupervisorError:
                supervisor.shutdown(grace_ms=0)
                raise
        if resume is not None and not isinstance(resume, OfferedOnLoop):
            timeout = supervisor.config.request_timeout_s
            try:
                keep(supervisor, offer_resumes(supervisor, resume, timeout=timeout))
            except BaseException:  # a callback's KeyboardInterrupt or SystemExit: as any failed start
                supervisor.shutdown(grace_ms=0)
                raise
        return supervisor

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # --- plumbing: the link does the sending and the waiting ---------------------------------

    @property
    def _closed(self) -> bool:
        """The supervisor's mailbox is closed (``testing`` reads it)."""
        return self._link.closed

    def _post(self, make: Callable[[Future[Any]], Any]) -> Future[Any]:
        """Send a message carrying a fresh internal future (see ``Link.post``)."""
        return self._link.post(make)

    def _preload_future(
        self, directories: tuple[object, ...], *, load: bool, fingerprint: object = None
    ) -> Future[None]:
        """``Link.preload_future``, for the wire hosts."""
        return self._link.preload_future(directories, load=load, fingerprint=fingerprint)

    def _add_subscription(self, subscription: Subscription) -> None:
        """The one path by which a subscription (sync or async) joins the publisher (closed at
        once if shutdown has completed meanwhile)."""
        self._link.add_subscription(subscription)

    # --- requests ----------------------------------------------------------------------------

    def _answer(self, call: Call[T]) -> T:
        """Carry out a call written in actors/_calls.py: send it through the link, block for the
        answer (within ``timeout``, default ``request_timeout_s``: ``SupervisorTimeout``)."""
        return self._link.answer(call)

    def submit(
        self, request: Request, *, body: RunBody | None = None
    ) -> Future[CloseOutcome | RequestOutcome]:
        """Send any request; the future always resolves to an outcome (a rejection is a value
        here, never an exception: a malformed request is rejected ``invalid_request``), including
        after shutdown. The raw entry point for hosts that speak the wire protocol. The future is
        completed off the supervisor's thread, so its done-callbacks may call the supervisor."""
        outer: Future[CloseOutcome | RequestOutcome] = Future()
        problem = check.request(request)
        if problem is None and body is not None and not callable(body):
            problem = f"body must be callable, not {type(body).__name__}"
        if problem is not None:
            complete(outer, rejected(request, RejectCode.INVALID_REQUEST, problem))
            return outer
        if isinstance(request, StartRun):
            saw_run_id(request.run_id)
        self._link.relay.chain(self._link.call(request, body), outer, lambda done: done.result())
        return outer

    def _start(self, call: calls.StartCall) -> RunHandle:
        """Carry out a start (actors/_calls.py): send it, block for the answer."""
        while True:
            finished: Future[RunSnapshot] = Future()
            launched: list[Any] = []
            sent = self._link.call(call.request, call.body, finished, launched=launched)
            outcome = self._link.get(sent, call.timeout)
            try:
                self._link.raise_for_rejection(outcome)
            except SupervisorError as rejected:
                # Not taken on: the supervisor stops the actor launched for it; it is gone before
                # this call returns (a start that lost a race with shutdown leaves no thread).
                for run in launched:
                    if isinstance(run, RunSlot):
                        run.wait_thread_end(self.config.stop_timeout_s)
                again = call.again(rejected)
                if again is None:
                    raise
                call = again
                continue
            return RunHandle(self, call.request.run_id, finished)

    start_run = taking(calls.start_run)(_start)

    cancel = taking(calls.cancel)(_answer)

    cancel_session = taking(calls.cancel_session)(_answer)

    delete_session = taking(calls.delete_session)(_answer)

    # --- queue policies --------------------------------------------------------------------------

    set_queue_policy = taking(calls.set_queue_policy)(_answer)

    def await_idle(self, session: str, *, timeout: float | None = None) -> SessionSnapshot | None:
        """Wait until the session has no active and no queued run; return its snapshot then (None
        for a session no run ever named, or forgotten: it is idle). Returns at once if it is idle
        now. ``SupervisorTimeout`` after ``timeout`` seconds (default: the config's
        ``request_timeout_s``), naming what still runs; nothing is left behind. It reads the
        published state (``session``), woken by the supervisor when it publishes the session idle:
        no polling, and no idle moment is missed (a run handing over to the next queued one is no
        idle moment: the session stays busy)."""
        limit = self._link.timeout(check.timeout("timeout", timeout))
        name, idle = self._link.idle_future(session)
        try:
            return idle.result(timeout=limit)
        except TimeoutError:
            idle.cancel()
            raise self._link.still_busy(name, limit) from None

    close = taking(calls.close)(_answer)

    # --- stalls: turn a deferred close into a confirmed one ----------------------------------

    confirm_close = taking(calls.confirm_close)(_answer)

    # --- asks: what waits for the user -----------------------------------------------------
    # Address a reply by its ask id (from ``ask.requested`` or ``pending_asks()``): that is exact
    # and never races. ``run_id=`` instead is a convenience for a run with exactly one open ask
    # of that kind (``NothingPending`` if none, ``InvalidRequest`` if several).

    reply_permission = taking(calls.reply_permission)(_answer)

    answer_form = taking(calls.answer_form)(_answer)

    dismiss_form = taking(calls.dismiss_form)(_answer)

    def pending_asks(
        self, *, run_id: str | None = None, timeout: float | None = None
    ) -> tuple[AskSnapshot, ...]:
        """Every open ask (of one run, with ``run_id``), in the order raised: what waits for the
        user. A UI that joins late draws its prompts from this, then follows the ``ask.*`` events."""
        run_id = None if run_id is None else check.identifier("run_id", run_id)
        asks = self._query(lambda core: core.pending_asks(), timeout)
        return asks if run_id is None else tuple(a for a in asks if a.run_id == run_id)

    def ask(self, ask_id: str, *, timeout: float | None = None) -> AskSnapshot | None:
        """What is known of an ask, open or not (None if unknown, or forgotten with its run)."""
        ask_id = check.identifier("ask_id", ask_id)
        return self._query(lambda core: core.ask_snapshot(ask_id), timeout)

    def load(
        self,
        *directories: str | PathLike[str],
        fingerprint: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Load these directories' instances now (those without a current generation) and wait for
        their load hooks. ``LoadFailed`` names each load that raised or overran ``load_budget_ms``
        (its instance stays, failed: runs on it fail; a ``reload`` makes a fresh one);
        ``SupervisorTimeout`` if ``timeout`` ran out first. ``fingerprint``: what the host loads
        them with (e.g. its config's digest), recorded for these and later loads of the
        directories: a close carrying the same fingerprint is a no-op (see ``close``)."""
        limit = check.timeout("timeout", timeout)
        names = check.directory_names("directories", directories)
        self._link.load(names, check.optional_text("fingerprint", fingerprint), limit)

    def declare(self, *directories: str | PathLike[str], timeout: float | None = None) -> None:
        """Make directories known without loading them, so closes may name them."""
        limit = check.timeout("timeout", timeout)
        names = check.directory_names("directories", directories)
        self._link.get(self._link.post(lambda reply: Preload(names, False, reply)), limit)

    # --- shutdown ----------------------------------------------------------------------------

    def _shut_down(self, call: calls.ShutdownCall) -> CloseOutcome:
        request, limit = call.for_config(self.config)
        self._link.request(request, limit)
        return self.wait_closed(timeout=limit)

    shutdown = taking(calls.shutdown)(_shut_down)

    def wait_closed(self, timeout: float | None = None) -> CloseOutcome:
        """Wait until a shutdown (requested anywhere) has completed and our threads have ended (or
        been left behind at its deadline: see ``shutdown``)."""
        limit = check.timeout("timeout", timeout)
        link = self._link
        done = link.get(link.shutdown_complete, limit, withdraw=False)
        with link.lock:
            joining = self in _live
        if joining:
            # Our own threads get stop_timeout_s past the grace deadline to end; host code only the
            # grace itself (a hook or callback still running then is left behind, and named).
            grace_end = max(link.deadline or 0.0, time.monotonic())
            self.threads.join(grace_end + self.config.stop_timeout_s, host_deadline=grace_end)
            self._let_go_of_the_journal()
            overran = self.threads.overran()
            with link.lock:
                if self in _live:
                    base = link.final if link.final is not None else done.outcome
                    link.final = msgspec.structs.replace(base, overran=overran)
                    _live.discard(self)
        final = link.final
        return final if final is not None else done.outcome

    def _let_go_of_the_journal(self) -> None:
        """A shutdown (or ``simulate_crash``) returns only once the journal's writer has committed
        its last batch and let go of the file, so a supervisor started next on it never finds it
        locked; bounded by ``request_timeout_s`` (a disk that hangs longer is left behind)."""
        if self._journal_writer is not None:
            self._journal_writer.thread.join(timeout=self.config.request_timeout_s)

    @property
    def journal_failure(self) -> JournalFailed | None:
        """Why this supervisor stopped, if its journal failed: the first batch of events that did
        not commit (a full disk, an I/O error), with the journal's path and what SQLite said. None
        while the journal records, and without one. Once set, nothing more is delivered, every
        request is refused with it and the supervisor shuts down (docs/api.md, "Crashes")."""
        return self._link.journal_failure

    def recovered(self) -> tuple[RunRecovered, ...]:
        """The runs the previous process left unfinished in the journal, each ended ``interrupted``
        with reason ``crash`` at this start (empty without a journal, or after a clean shutdown).
        They are the first events of this supervisor's stream (``seq`` 1..k), decided before any
        request was taken and before any subscription could exist, so no subscription receives them:
        this is where a host reads them."""
        return self._recovered

    def resumes(self) -> tuple[ResumeOffer, ...]:
        """What became of each run recovered under the resume policy (``start(resume=)``), in the
        journal's order: ``resumed`` (``continued_by`` names the continuation), ``declined``,
        ``failed`` (``error`` says why) or ``exhausted`` (its session's resume budget was spent: not
        offered). Empty without a resume callback, or when nothing was recovered."""
        return kept(self)

    def recovery_events(self) -> tuple[Event, ...]:
        """Every event the recovery published, in ``seq`` order (1..k): for each run, a
        ``run.part.updated`` for each tool card the crash settled, then its ``run.recovered``. For a
        host that replays the whole stream (an event log, a UI timeline); ``recovered()`` is the
        ``run.recovered`` events alone."""
        return self._recovery_events

    @property
    def epoch(self) -> int | None:
        """Which life of its journal this supervisor is: the journal's boot number (1 on a new file,
        one more at each start on it), or None without a journal. A host names the life its event ids
        belong to with it, since ``seq`` counts again from 1 after a restart."""
        return self._epoch

    @property
    def closed(self) -> bool:
        """Shutdown has completed."""
        return self._link.shutdown_complete.done()

    # --- queries -----------------------------------------------------------------------------
    # Served from the state the supervisor published after its last message (``View``), without a
    # hop to its mailbox: they never block, never time out, and keep answering after shutdown
    # (with the final state). The rule: that state includes every request whose answer has been
    # delivered and every event that has been delivered. ``timeout`` is checked, then unused.

    def _query(self, read: Callable[[SupervisorCore], T], timeout: float | None) -> T:
        """Run ``read`` on the supervisor's thread, behind every message already sent (one hop)."""
        link = self._link
        result: T = link.get(link.post(lambda reply: Query(read, reply)), check.timeout("timeout", timeout))
        return result

    def run(self, run_id: str, *, timeout: float | None = None) -> RunSnapshot | None:
        """What is known of a run (None if unknown or forgotten)."""
        run_id = check.identifier("run_id", run_id)
        check.timeout("timeout", timeout)
        return self._view.runs.get(run_id)

    def session(self, session_id: str, *, timeout: float | None = None) -> SessionSnapshot | None:
        """A session's status, active run and queue (None if no run ever named it)."""
        session_id = check.identifier("session_id", session_id)
        check.timeout("timeout", timeout)
        return self._view.sessions.get(session_id)

    def pending_actions(self, *, timeout: float | None = None) -> tuple[ActionSnapshot, ...]:
        """Lifecycle actions that have not completed, with the runs each still waits for."""
        check.timeout("timeout", timeout)
        return self._view.pending_actions

    def statistics(self, *, timeout: float | None = None) -> CoreStatistics:
        """Counters of runs, sessions, instances, actions and events; O(1)."""
        check.timeout("timeout", timeout)
        return self._view.statistics

    def subscribe(
        self, *, maxsize: int = 0, callback: Callable[[Event], object] | None = None
    ) -> Subscription:
        """Receive every event from now on, in order. See ``Subscription`` for what a slow
        subscriber gets. Closed automatically when shutdown completes; ``SupervisorClosed`` after
        that (a subscription made while shutdown completes comes back closed: ``get`` raises
        ``EOFError``)."""
        size, checked_callback = check.subscription(maxsize=maxsize, callback_=callback)
        if self._closed:
            raise SupervisorClosed("the supervisor has shut down; there are no more events")
        subscription = Subscription(maxsize=size, callback=checked_callback, threads=self.threads)
        self._add_subscription(subscription)
        return subscription


_live: weakref.WeakSet[Supervisor] = weakref.WeakSet()


@atexit.register
def _shutdown_at_exit() -> None:
    for supervisor in list(_live):
        if not supervisor.config.shutdown_at_exit:
            continue
        try:
            supervisor.shutdown(grace_ms=200)
        except Exception:  # best effort at interpreter exit
            pass


def simulate_crash(supervisor: Supervisor) -> None:
    """End ``supervisor`` as a kill would, as far as its journal can tell: from this call on nothing
    more is written to the journal or delivered to subscribers (what was not committed is lost, as at
    a kill), the file is let go without a clean mark, then the supervisor's actors and threads are
    stopped at once (grace 0). A supervisor started afterwards on the same journal recovers what was
    unfinished. Without a journal it is a plain immediate shutdown."""
    writer = supervisor._journal_writer
    if writer is not None:
        writer.abandon()
    supervisor.shutdown(grace_ms=0, origin="crash")
