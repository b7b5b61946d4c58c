"""The threads the supervisor starts, so shutdown can join them and tests can find leaks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop

__all__ = ["Job", "ThreadBook", "WorkerPool"]

Job = Callable[[], Callable[[], object] | None]
"""A pooled thread's work; what it returns (if not None) runs once the thread is parked again."""


class _Abandonable(Protocol):
    @property
    def abandoned(self) -> bool: ...


class ThreadBook:
    """Every thread the supervisor started, so shutdown can join them and tests can find leaks.

    A thread added with a ``token`` (a run's thread, with its ``CancelToken``) is never joined once
    that token is abandoned: abandoning a body is one flag on its token, O(1), nothing here.

    A thread that runs host code (a load or dispose hook, a subscriber callback, the done-callbacks of
    the futures a host holds) carries a label saying so: shutdown waits for those only until its
    deadline, then leaves them behind and reports them by that label.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[threading.Thread, _Abandonable | None] = {}
        self._labels: dict[threading.Thread, str] = {}
        self.abandoned: set[threading.Thread] = set()
        """Threads never to join, besides those whose token is abandoned."""
        self._prune_at = 64
        self.workers = WorkerPool(self)
        """The threads sync bodies run on, reused run after run (started on demand)."""
        self._tasks: dict[Future[Any], tuple[str, AbstractEventLoop]] = {}

    def add(
        self, thread: threading.Thread, host: str | None = None, *, token: _Abandonable | None = None
    ) -> None:
        """Book a thread; ``host`` names the host code it runs, if any."""
        with self._lock:
            if len(self._threads) >= self._prune_at:  # amortised: forget ended threads now and then
                self._threads = {t: k for t, k in self._threads.items() if t.is_alive() or not t.ident}
                self._labels = {t: label for t, label in self._labels.items() if t in self._threads}
                self.abandoned = {t for t in self.abandoned if t in self._threads}
                self._prune_at = max(64, 2 * len(self._threads))
            self._threads[thread] = token
            if host is not None:
                self._labels[thread] = host

    def discard(self, thread: threading.Thread) -> None:
        """Forget a booked thread that never started (its ``start`` failed)."""
        with self._lock:
            self._threads.pop(thread, None)
            self._labels.pop(thread, None)
            self.abandoned.discard(thread)

    def label(self, thread: threading.Thread, host: str | None) -> None:
        """Say what host code the thread runs now (None: only ours, it will end when told)."""
        with self._lock:
            if host is None:
                self._labels.pop(thread, None)
            else:
                self._labels[thread] = host

    def _given_up(self, thread: threading.Thread) -> bool:
        token = self._threads.get(thread)
        return thread in self.abandoned or (token is not None and token.abandoned)

    def alive(self) -> list[threading.Thread]:
        with self._lock:
            return [t for t in self._threads if t.is_alive()]

    def _to_join(self) -> list[threading.Thread]:
        """The live threads not given up on. The flags are read first: a shutdown that abandoned
        1,000 bodies skips their threads without asking each whether it is alive."""
        with self._lock:
            return [t for t in self._threads if not self._given_up(t) and t.is_alive()]

    def join(self, deadline: float, *, host_deadline: float | None = None) -> list[threading.Thread]:
        """Join every live thread but the abandoned ones until ``deadline`` (those running host code
        only until ``host_deadline``, when given); return the stragglers. The worker pool is closed
        first: its idle threads end now, a busy one when its body returns."""
        self.workers.close()
        for thread in self._to_join():
            if thread is threading.current_thread():
                continue
            until = deadline
            if host_deadline is not None and thread in self._labels:
                until = min(deadline, host_deadline)
            thread.join(timeout=max(0.0, until - time.monotonic()))
        return self._to_join()

    def watch(self, task: Future[Any], host: str, loop: AbstractEventLoop) -> None:
        """Book host code that runs as a task on a host's loop (an async hook), no thread of ours:
        named in ``overran`` like a thread's label until it ends (or its loop has closed)."""
        with self._lock:
            self._tasks[task] = (host, loop)
        task.add_done_callback(self._unwatch)

    def _unwatch(self, task: Future[Any]) -> None:
        with self._lock:
            self._tasks.pop(task, None)

    def overran(self) -> tuple[str, ...]:
        """What host code is still running, by label, sorted: what a shutdown left behind (the
        stragglers, and the threads already given up on when they overran their budget)."""
        with self._lock:
            running = [label for t, label in self._labels.items() if t.is_alive()]
            running += [host for host, loop in self._tasks.values() if not loop.is_closed()]
            return tuple(sorted(running))


class _Worker:
    """One pooled thread: it runs the jobs handed to it, one at a time, and parks in between."""

    __slots__ = ("_job", "_pool", "_token", "_wake", "name", "thread")

    def __init__(self, pool: WorkerPool, name: str) -> None:
        self._pool = pool
        self._wake = threading.Lock()
        self._wake.acquire()  # released by ``hand``: a lock is the cheapest one-shot wake
        self._job: Job | None = None
        self._token: _Abandonable | None = None
        self.name = name
        """Its name while idle (while it runs a body it is named after the run)."""
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)

    @property
    def abandoned(self) -> bool:
        """Its current body was abandoned (the thread book then never joins this thread)."""
        token = self._token
        return token is not None and token.abandoned

    def hand(self, job: Job | None, token: _Abandonable | None) -> None:
        self._job, self._token = job, token
        self._wake.release()

    def _serve(self) -> None:
        while True:
            self._wake.acquire()
            job = self._job
            if job is None:
                return  # the pool closed (or let this idle thread go)
            self._job = None
            then: Callable[[], object] | None = None
            try:
                then = job()
            except BaseException:  # a job contains its own errors; never let one end the pool's thread
                pass
            self.thread.name = self.name
            # Parked first, then the job's last word (a run's BodyEnded): the run that report lets
            # start next finds this thread idle instead of starting one.
            parked = self._pool._rest(self)
            if then is not None:
                try:
                    then()
                except BaseException:
                    pass
            if not parked:
                return


class WorkerPool:
    """The threads sync bodies run on: a body takes an idle thread at its run's ``Go`` (or a new one
    when none is idle, so a blocked body never holds up another run), and its thread goes back to the
    pool when it returns. A body abandoned at shutdown keeps its thread, which simply ends when the
    body returns: the pool has already replaced it by then (a later run starts a new thread). At most
    ``max_idle`` threads wait idle; ``close`` (the thread book's ``join``) ends them all, and a busy
    one ends when its body returns. Every thread is booked in the thread book, with itself as its
    token: it counts as abandoned while the body it runs is."""

    def __init__(self, book: ThreadBook, *, max_idle: int = 16, name: str = "run-supervisor-worker") -> None:
        self._book = book
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._max_idle = max_idle
        self._name = name
        self._started = 0
        self._closed = False

    def run(self, job: Job, token: _Abandonable | None = None, name: str | None = None) -> None:
        """Run ``job`` on a pooled thread (named ``name`` while it runs); ``token`` says whether the
        job's body has been abandoned. What the job returns, if not None, is called once the thread
        is back in the pool."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                self._started += 1
                worker = _Worker(self, f"{self._name}-{self._started}")
                self._book.add(worker.thread, token=worker)
                fresh = True
            else:
                fresh = False
        if name is not None:
            worker.thread.name = name
        worker.hand(job, token)
        if fresh:
            try:
                worker.thread.start()
            except BaseException:
                self._book.discard(worker.thread)
                raise

    def _rest(self, worker: _Worker) -> bool:
        """A worker's job returned: park it (True) or let its thread end (False: the pool is closed,
        enough threads are idle, or its body was abandoned and the pool has moved on)."""
        abandoned = worker.abandoned
        worker._token = None
        with self._lock:
            if self._closed or abandoned or len(self._idle) >= self._max_idle:
                return False
            self._idle.append(worker)
            return True

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    @property
    def started(self) -> int:
        """How many threads the pool has started in all."""
        with self._lock:
            return self._started

    def close(self) -> None:
        """No more parking: idle threads end now, busy ones when their job returns. Idempotent; a
        job handed in later still runs (on a thread of its own that then ends)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.hand(None, None)
