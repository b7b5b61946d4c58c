"""The in-process API for hosts: a typed facade over the SessionSupervisor actor.

Every call is a ``tell`` carrying a ``concurrent.futures.Future``; blocking calls wait on it with a
timeout (``SupervisorTimeout``), and every ``*_async`` call returns the future itself, which an
asyncio host can await without blocking its loop: ``await asyncio.wrap_future(fut)``.
"""

from __future__ import annotations

import atexit
import itertools
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

import pykka
from pydantic import BaseModel, ConfigDict, Field

from run_supervisor.actors._context import RunBody
from run_supervisor.actors._errors import SupervisorClosed, SupervisorTimeout, raise_for_rejection
from run_supervisor.actors._instance_actor import InstanceHooks, NoInstanceHooks
from run_supervisor.actors._run_actor import RunActor
from run_supervisor.actors._subscription import Publisher, Subscription
from run_supervisor.actors._supervisor import Preload, Query, SessionSupervisor, Submit, WaitRun
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.protocol import (
    ActionSnapshot,
    AnswerForm,
    CancelRun,
    CloseAction,
    CloseMode,
    CloseOutcome,
    CloseRequest,
    CloseResult,
    CoreStatistics,
    DismissForm,
    Event,
    InterruptReason,
    RejectCode,
    ReplyPermission,
    Request,
    RequestOutcome,
    RunSnapshot,
    SessionSnapshot,
    Shutdown,
    ShutdownComplete,
    StartRun,
    SupervisorCore,
)

__all__ = ["RunHandle", "Supervisor", "SupervisorConfig"]

T = TypeVar("T")
_run_ids = itertools.count(1)


class SupervisorConfig(BaseModel):
    """Settings a host may change. Validated: a bad value raises ``pydantic.ValidationError``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Defaults are keyword arguments (``default=``) so a host's type checker sees them through
    # pydantic's dataclass_transform, without pydantic's own mypy plugin.
    request_timeout_s: float = Field(
        default=5.0, gt=0, description="How long a blocking call waits for an answer."
    )
    dispose_budget_ms: int = Field(default=1000, ge=0, description="How long a dispose hook may take.")
    default_grace_ms: int = Field(
        default=1000, ge=0, description="Shutdown's grace deadline when none is given."
    )
    retain_finished_runs: int = Field(
        default=10_000, ge=0, description="Finished runs kept queryable (and guarded against id reuse)."
    )
    stop_timeout_s: float = Field(
        default=5.0, gt=0, description="After shutdown completes: how long to wait for our threads to end."
    )
    shutdown_at_exit: bool = Field(
        default=True, description="Shut down at interpreter exit if the host did not."
    )


class RunHandle:
    """A started (or queued) run."""

    def __init__(self, supervisor: Supervisor, run_id: str) -> None:
        self._supervisor = supervisor
        self.run_id = run_id

    def wait(self, timeout: float | None = None) -> RunSnapshot:
        """Wait until the run has finished; return what is known of it."""
        snapshot = self._supervisor._wait(WaitRun, self.run_id, timeout=timeout)
        if snapshot is None:
            raise SupervisorClosed(f"the supervisor shut down before run {self.run_id!r} was known to finish")
        result: RunSnapshot = snapshot
        return result

    def wait_async(self) -> Future[RunSnapshot | None]:
        return self._supervisor._post(lambda reply: WaitRun(self.run_id, reply))

    def cancel(self, *, origin: str = "user", timeout: float | None = None) -> None:
        self._supervisor.cancel(self.run_id, origin=origin, timeout=timeout)

    def snapshot(self, timeout: float | None = None) -> RunSnapshot | None:
        return self._supervisor.run(self.run_id, timeout=timeout)

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"


class Supervisor:
    """Owns run lifetime. Start it with ``Supervisor.start()``; stop it with ``shutdown()`` (or use
    it as a context manager). Thread-safe: call it from any thread."""

    def __init__(self, config: SupervisorConfig, hooks: InstanceHooks) -> None:
        self.config = config
        self.threads = ThreadBook()
        self._lock = threading.Lock()
        self._closed = False
        self._outstanding: set[Future[Any]] = set()
        self._shutdown_complete: Future[ShutdownComplete] = Future()
        self._final: CloseOutcome | None = None
        core = SupervisorCore(
            dispose_budget_ms=config.dispose_budget_ms, retain_finished=config.retain_finished_runs
        )
        self._publisher = Publisher()
        self._ref = SessionSupervisor.start(
            core,
            hooks,
            self.threads,
            self._publisher,
            ask_timeout=config.request_timeout_s,
            on_shutdown_complete=self._on_shutdown_complete,
            on_stopped=self._reject_outstanding,
        )
        _live.add(self)

    def _on_shutdown_complete(self, command: ShutdownComplete) -> None:
        with self._lock:
            self._final = command.outcome
        self._shutdown_complete.set_result(command)

    @classmethod
    def start(
        cls,
        config: SupervisorConfig | None = None,
        *,
        hooks: InstanceHooks | None = None,
        directories: Iterable[str] = (),
    ) -> Supervisor:
        """Start a supervisor; ``directories`` are loaded (generation 1) before this returns."""
        supervisor = cls(config or SupervisorConfig(), hooks or NoInstanceHooks())
        dirs = tuple(directories)
        if dirs:
            supervisor.load(*dirs)
        return supervisor

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # --- plumbing ----------------------------------------------------------------------------

    def _post(self, make: Callable[[Future[Any]], Any]) -> Future[Any]:
        reply: Future[Any] = Future()
        with self._lock:
            if self._closed:
                reply.set_exception(SupervisorClosed("the supervisor has shut down"))
                return reply
            self._outstanding.add(reply)
        reply.add_done_callback(self._forget)
        try:
            self._ref.tell(make(reply))
        except pykka.ActorDeadError:
            self._fail(reply, SupervisorClosed("the supervisor has shut down"))
        return reply

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._outstanding.discard(future)

    @staticmethod
    def _fail(future: Future[Any], error: BaseException) -> None:
        try:
            future.set_exception(error)
        except InvalidStateError:
            pass

    def _reject_outstanding(self) -> None:
        """The supervisor's mailbox is closed: nothing still waiting will ever be answered."""
        with self._lock:
            self._closed = True
            waiting = list(self._outstanding)
        for future in waiting:
            self._fail(future, SupervisorClosed("the supervisor has shut down"))

    def _timeout(self, timeout: float | None) -> float:
        return self.config.request_timeout_s if timeout is None else timeout

    def _get(self, future: Future[T], timeout: float | None) -> T:
        limit = self._timeout(timeout)
        try:
            return future.result(timeout=limit)
        except TimeoutError:
            future.cancel()
            raise SupervisorTimeout(f"the supervisor did not answer within {limit} s") from None

    def _wait(self, kind: Callable[[str, Future[Any]], Any], key: str, *, timeout: float | None) -> Any:
        return self._get(self._post(lambda reply: kind(key, reply)), timeout)

    def _closed_outcome(self, request: Request) -> CloseOutcome | RequestOutcome:
        if isinstance(request, Shutdown) and self._final is not None:
            return self._final
        return _rejected(
            request,
            RejectCode.SUPERVISOR_CLOSED,
            "the supervisor has shut down; no request is accepted any more",
        )

    # --- requests as values: both facades (this one and AsyncSupervisor) build them here ------

    def _start_run_request(self, *, session: str, directory: str, run_id: str | None) -> StartRun:
        return StartRun(run_id=run_id or f"run-{next(_run_ids)}", session=session, directory=directory)

    def _close_request(
        self,
        do: CloseAction | str,
        *,
        mode: CloseMode | str,
        origin: str,
        directory: str | None,
        tag: str | None,
    ) -> CloseRequest:
        return CloseRequest(
            do=CloseAction(do),
            mode=CloseMode(mode),
            origin=origin,
            directories=(directory,) if directory is not None else (),
            tag=tag,
        )

    def _shutdown_request(
        self, *, grace_ms: int | None, reason: InterruptReason | str, origin: str | None, tag: str | None
    ) -> Shutdown:
        reason = InterruptReason(reason)
        return Shutdown(
            reason=reason,
            origin=origin or reason.value,
            grace_ms=self.config.default_grace_ms if grace_ms is None else grace_ms,
            tag=tag,
        )

    def _preload_future(self, directories: tuple[str, ...], *, load: bool) -> Future[None]:
        return self._post(lambda reply: Preload(directories, load, reply))

    # --- requests ----------------------------------------------------------------------------

    def submit(
        self, request: Request, *, body: RunBody | None = None
    ) -> Future[CloseOutcome | RequestOutcome]:
        """Send any request; the future always resolves to an outcome (a rejection is a value
        here, never an exception), including after shutdown. The raw entry point for hosts that
        speak the wire protocol."""
        outer: Future[CloseOutcome | RequestOutcome] = Future()
        if self._closed:
            outer.set_result(self._closed_outcome(request))
            return outer
        run = None
        if isinstance(request, StartRun):  # its actor starts here, on the caller's thread, idle
            run = RunActor.launch(
                request.run_id, body, self._ref, self.config.request_timeout_s, self.threads
            )
        inner = self._post(lambda reply: Submit(request, reply, run))

        def relay(done: Future[Any]) -> None:
            error = done.exception()
            if error is None:
                outer.set_result(done.result())
                return
            if run is not None:
                run.ref.stop(block=False)  # the supervisor never took it on
            if isinstance(error, SupervisorClosed):
                outer.set_result(self._closed_outcome(request))
            else:
                outer.set_result(
                    _rejected(request, RejectCode.INTERNAL_ERROR, f"the supervisor failed: {error}")
                )

        inner.add_done_callback(relay)
        return outer

    def _request(self, request: Request, timeout: float | None, body: RunBody | None = None) -> Any:
        outcome = self._get(self.submit(request, body=body), timeout)
        raise_for_rejection(outcome)
        return outcome

    def start_run(
        self,
        body: RunBody,
        *,
        session: str,
        directory: str,
        run_id: str | None = None,
        timeout: float | None = None,
    ) -> RunHandle:
        """Start a run (or queue it behind the session's active run). The body runs on its own
        thread with a ``RunContext``; it is pinned to the directory's current instance generation."""
        request = self._start_run_request(session=session, directory=directory, run_id=run_id)
        self._request(request, timeout, body)
        return RunHandle(self, request.run_id)

    def cancel(self, run_id: str, *, origin: str = "user", timeout: float | None = None) -> None:
        """Interrupt a run now (``user_cancel``), or end it unstarted if it is queued."""
        self._request(CancelRun(run_id=run_id, origin=origin), timeout)

    def close_async(
        self,
        do: CloseAction | str,
        *,
        mode: CloseMode | str,
        origin: str,
        directory: str | None = None,
        tag: str | None = None,
    ) -> Future[CloseOutcome | RequestOutcome]:
        return self.submit(self._close_request(do, mode=mode, origin=origin, directory=directory, tag=tag))

    def close(
        self,
        do: CloseAction | str,
        *,
        mode: CloseMode | str,
        origin: str,
        directory: str | None = None,
        tag: str | None = None,
        timeout: float | None = None,
    ) -> CloseOutcome:
        """Request a lifecycle close (dispose, dispose_all, reload, invalidate_config) and get its
        structured result: ``completed``, ``deferred`` or ``interrupted``. Rejections raise."""
        outcome = self._get(
            self.close_async(do, mode=mode, origin=origin, directory=directory, tag=tag), timeout
        )
        raise_for_rejection(outcome)
        assert isinstance(outcome, CloseOutcome)
        return outcome

    def reply_permission(
        self, run_id: str, *, approve: bool, message: str | None = None, timeout: float | None = None
    ) -> None:
        self._request(ReplyPermission(run_id=run_id, approve=approve, message=message), timeout)

    def answer_form(self, run_id: str, answer: str, *, timeout: float | None = None) -> None:
        self._request(AnswerForm(run_id=run_id, answer=answer), timeout)

    def dismiss_form(self, run_id: str, *, timeout: float | None = None) -> None:
        self._request(DismissForm(run_id=run_id), timeout)

    def load(self, *directories: str, timeout: float | None = None) -> None:
        """Load these directories' instances now (those without a current generation)."""
        self._get(self._preload_future(directories, load=True), timeout)

    def declare(self, *directories: str, timeout: float | None = None) -> None:
        """Make directories known without loading them, so closes may name them."""
        self._get(self._preload_future(directories, load=False), timeout)

    # --- shutdown ----------------------------------------------------------------------------

    def shutdown_async(
        self,
        *,
        grace_ms: int | None = None,
        reason: InterruptReason | str = InterruptReason.SHUTDOWN,
        origin: str | None = None,
        tag: str | None = None,
    ) -> Future[CloseOutcome | RequestOutcome]:
        """Start a shutdown (see ``shutdown``). The future resolves when the shutdown has completed
        -- every run ended or abandoned, every dispose done, our threads ended -- with its final
        outcome; a rejection resolves it at once, as a value (like ``submit``). Its done-callbacks
        run on a short-lived closer thread, never on the supervisor's own."""
        return self._shutdown_future(
            self._shutdown_request(grace_ms=grace_ms, reason=reason, origin=origin, tag=tag)
        )

    def _shutdown_future(self, request: Shutdown) -> Future[CloseOutcome | RequestOutcome]:
        finished: Future[CloseOutcome | RequestOutcome] = Future()
        limit = request.grace_ms / 1000.0 + self.config.request_timeout_s

        def close_into() -> None:
            try:
                _settle(finished, self.wait_closed(timeout=limit))
            except BaseException as exc:
                self._fail(finished, exc)

        def answered(answer: Future[CloseOutcome | RequestOutcome]) -> None:
            outcome = answer.result()  # submit's future never raises
            if outcome.code is not None:
                _settle(finished, outcome)
                return
            threading.Thread(target=close_into, name="run-supervisor-closer", daemon=True).start()

        self.submit(request).add_done_callback(answered)
        return finished

    def shutdown(
        self,
        *,
        grace_ms: int | None = None,
        reason: InterruptReason | str = InterruptReason.SHUTDOWN,
        origin: str | None = None,
    ) -> CloseOutcome:
        """Interrupt everything with ``reason`` and stop every actor and thread we started, within
        ``grace_ms`` (bodies that ignore cancellation are abandoned and listed). Idempotent: a
        second call returns the first one's outcome."""
        request = self._shutdown_request(grace_ms=grace_ms, reason=reason, origin=origin, tag=None)
        limit = request.grace_ms / 1000.0 + self.config.request_timeout_s
        outcome = self._get(self.submit(request), limit)
        raise_for_rejection(outcome)
        assert isinstance(outcome, CloseOutcome)
        return self.wait_closed(timeout=limit)

    def wait_closed(self, timeout: float | None = None) -> CloseOutcome:
        """Wait until a shutdown (requested anywhere) has completed and our threads have ended;
        return its final outcome. ``SupervisorTimeout`` if it has not completed in time."""
        limit = self._timeout(timeout)
        try:
            # Never cancel: the completion future is shared by every waiter.
            done = self._shutdown_complete.result(timeout=limit)
        except TimeoutError:
            raise SupervisorTimeout(f"the shutdown did not complete within {limit} s") from None
        if self in _live:
            self.threads.join(time.monotonic() + self.config.stop_timeout_s)
            _live.discard(self)
        return done.outcome

    @property
    def closed(self) -> bool:
        """Shutdown has completed."""
        return self._shutdown_complete.done()

    # --- queries -----------------------------------------------------------------------------

    def _query(self, read: Callable[[SupervisorCore], T], timeout: float | None) -> T:
        result: T = self._get(self._query_future(read), timeout)
        return result

    def _query_future(self, read: Callable[[SupervisorCore], T]) -> Future[T]:
        return self._post(lambda reply: Query(read, reply))

    def run(self, run_id: str, *, timeout: float | None = None) -> RunSnapshot | None:
        """What is known of a run (None if unknown or forgotten)."""
        return self._query(lambda core: core.run_snapshot(run_id), timeout)

    def session(self, session_id: str, *, timeout: float | None = None) -> SessionSnapshot | None:
        return self._query(lambda core: core.session_snapshot(session_id), timeout)

    def pending_actions(self, *, timeout: float | None = None) -> tuple[ActionSnapshot, ...]:
        """Lifecycle actions that have not completed, with the runs each still waits for."""
        return self._query(lambda core: core.pending_actions(), timeout)

    def statistics(self, *, timeout: float | None = None) -> CoreStatistics:
        return self._query(lambda core: core.statistics(), timeout)

    def subscribe(
        self, *, maxsize: int = 0, callback: Callable[[Event], object] | None = None
    ) -> Subscription:
        """Receive every event from now on, in order. See ``Subscription`` for what a slow
        subscriber gets. Closed automatically when shutdown completes."""
        if self._closed:
            raise SupervisorClosed("the supervisor has shut down; there are no more events")
        subscription = Subscription(maxsize=maxsize, callback=callback)
        self._add_subscription(subscription)
        return subscription

    def _add_subscription(self, subscription: Subscription) -> None:
        """The one path by which a subscription (sync or async) joins the publisher."""
        if subscription._thread is not None:
            self.threads.add(subscription._thread)
        self._publisher.add(subscription)


def _settle(future: Future[T], value: T) -> None:
    try:
        future.set_result(value)
    except InvalidStateError:
        pass  # the caller gave up (cancelled it)


def _rejected(request: Request, code: RejectCode, error: str) -> CloseOutcome | RequestOutcome:
    if isinstance(request, CloseRequest | Shutdown):
        return CloseOutcome(result=CloseResult.REJECTED, error=error, code=code)
    return RequestOutcome(result=CloseResult.REJECTED, error=error, code=code)


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
