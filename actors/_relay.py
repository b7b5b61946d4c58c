"""Completing the futures a host holds, off the supervisor's thread.

A ``concurrent.futures.Future`` runs its done-callbacks on the thread that completes it. The futures the
facade hands out (``submit``, ``*_async``) are therefore never completed by the supervisor: it completes
an internal future, and the relay completes the host's one on its own small thread. A host callback that
blocks, or calls the supervisor back and waits, holds the relay, never the supervisor.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

from run_supervisor.actors._threads import ThreadBook

__all__ = ["Relay", "complete"]

T = TypeVar("T")

_LABEL = "a done-callback of a future the supervisor returned"


def complete(future: Future[Any], value: Any = None, error: BaseException | None = None) -> None:
    """Complete ``future`` unless its holder gave up on it (cancelled it): never raises."""
    if future.done():
        return
    try:
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)
    except InvalidStateError:
        pass  # cancelled in the meantime by its holder


def _result(done: Future[T]) -> T:
    return done.result()


class Relay:
    """One lazily started thread per supervisor that completes host-facing futures in order.

    If that thread cannot be started (the process is out of threads), the future at hand is completed
    at once on the calling thread rather than never (its holder gets its true answer, not a timeout),
    and the next future tries to start the thread again: one failed start never silences the relay.
    A relay thread that ended before ``close`` is replaced the same way."""

    def __init__(self, threads: ThreadBook) -> None:
        self._threads = threads
        self._queue: queue.SimpleQueue[tuple[Future[Any], Any, BaseException | None] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.failed_starts = 0
        """How many times the relay thread could not be started (each such future was completed inline)."""

    def settle(self, future: Future[Any], value: Any = None, error: BaseException | None = None) -> None:
        with self._lock:
            if not self._closed and self._started():
                self._queue.put((future, value, error))
                return
        # Closed (the supervisor's thread has ended, so this is a caller's thread), or no relay thread
        # could start: the answer is given here, now, rather than lost.
        complete(future, value, error)

    def _started(self) -> bool:
        """The relay thread runs (started now if it was not); False if it cannot start. Under the lock."""
        if self._thread is not None and self._thread.is_alive():
            return True
        thread = threading.Thread(target=self._loop, name="run-supervisor-relay", daemon=True)
        self._threads.add(thread)
        try:
            thread.start()
        except RuntimeError:  # "can't start new thread": try again with the next future
            self._threads.discard(thread)
            self._thread = None
            self.failed_starts += 1
            return False
        self._thread = thread
        return True

    def chain(
        self,
        inner: Future[Any],
        outer: Future[T],
        convert: Callable[[Future[Any]], T],
        *,
        shared: bool = False,
    ) -> None:
        """Complete ``outer`` (the host's) with ``convert(inner)`` once ``inner`` (ours) is done; a
        holder cancelling ``outer`` cancels ``inner`` (the supervisor then drops the answer),
        unless ``inner`` is ``shared`` by other waiters (a run's finished-future): then only
        ``outer`` is cancelled."""

        def forward(done: Future[Any]) -> None:
            if done.cancelled():
                return
            try:
                value, error = convert(done), None
            except BaseException as exc:  # convert raises the rejection the holder should see
                value, error = None, exc
            self.settle(outer, value, error)

        def withdraw(held: Future[Any]) -> None:
            if held.cancelled():
                inner.cancel()

        if not shared:
            outer.add_done_callback(withdraw)
        inner.add_done_callback(forward)

    def relayed(self, inner: Future[T], *, shared: bool = False) -> Future[T]:
        """A host-facing future of ``inner``'s result (or error), completed off its thread:
        ``chain`` with nothing to convert."""
        outer: Future[T] = Future()
        self.chain(inner, outer, _result, shared=shared)
        return outer

    def close(self) -> None:
        """No more futures will come from the supervisor: end the thread after the last one."""
        with self._lock:
            self._closed = True
            if self._thread is not None:
                self._queue.put(None)

    def _loop(self) -> None:
        me = threading.current_thread()
        while (item := self._queue.get()) is not None:
            self._threads.label(me, _LABEL)  # host callbacks run now: shutdown names it if it hangs
            complete(*item)
            self._threads.label(me, None)
