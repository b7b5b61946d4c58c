"""The supervisor's one timer thread: every delayed message (the shutdown grace, run deadlines,
stall checks) is an entry in one heap of due times, not a thread of its own.

A callback runs on the timer thread and must only ``tell`` the supervisor actor (or do something as
short): it must never block, since every other timer waits behind it. An exception it raises is
logged and contained. The decision core never reads a clock; this is where the shell does.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from run_supervisor.actors._logging import logger
from run_supervisor.actors._threads import ThreadBook

__all__ = ["TimerHandle", "Timers"]


class TimerHandle:
    """One scheduled callback. ``cancel()`` keeps it from running (if it has not started yet)."""

    __slots__ = ("_callback", "_cancelled", "_owner", "due")

    def __init__(self, due: float, callback: Callable[[], None], owner: Timers) -> None:
        self.due = due
        """When it is due, on the ``time.monotonic()`` clock."""
        self._callback: Callable[[], None] | None = callback
        self._cancelled = False
        self._owner = owner

    def cancel(self) -> bool:
        """Keep the callback from running. True if it had not run yet (now it never will); False if
        it has run, is running, or was cancelled already. Never blocks on a running callback."""
        return self._owner._cancel(self)

    def _drop(self) -> bool:
        """Under the owner's lock."""
        if self._callback is None:
            return False
        self._cancelled = True
        self._callback = None
        return True

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def _take(self) -> Callable[[], None] | None:
        callback, self._callback = self._callback, None
        return callback


class Timers:
    """One thread per supervisor that runs callbacks when they come due (a heap of due times).

    The thread starts at the first ``schedule`` (a supervisor that never schedules one has no timer
    thread) and is booked in the supervisor's ``ThreadBook``, so shutdown joins it and the leak check
    counts it. ``close()`` ends it at once: what was still scheduled never runs. Thread-safe."""

    def __init__(self, threads: ThreadBook, *, name: str = "run-supervisor-timer") -> None:
        self._threads = threads
        self._name = name
        self._wake = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._order = itertools.count()  # ties in due time run in the order they were scheduled
        self._thread: threading.Thread | None = None
        self._closed = False
        self._stale = 0  # cancelled entries still in the heap

    def _cancel(self, handle: TimerHandle) -> bool:
        with self._wake:
            if not handle._drop():
                return False
            # Cancelled entries wait in the heap until due; a long deadline cancelled when its run
            # ends would pile up, so the heap is rebuilt once most of it is stale (amortised O(1)).
            self._stale += 1
            if self._stale > 64 and self._stale * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._stale = 0
            return True

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` on the timer thread ``delay_s`` seconds from now (at once if <= 0).
        After ``close()`` the handle comes back already cancelled and the callback never runs."""
        handle = TimerHandle(time.monotonic() + max(0.0, delay_s), callback, self)
        with self._wake:
            if self._closed:
                handle._drop()
                return handle
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._threads.add(self._thread)
                self._thread.start()
            heapq.heappush(self._heap, (handle.due, next(self._order), handle))
            if self._heap[0][2] is handle:  # due before whatever the thread sleeps for: wake it
                self._wake.notify()
        return handle

    def pending(self) -> int:
        """How many scheduled callbacks have neither run nor been cancelled."""
        with self._wake:
            return sum(1 for _, _, handle in self._heap if not handle.cancelled)

    @property
    def thread(self) -> threading.Thread | None:
        """The timer thread, once the first callback was scheduled."""
        return self._thread

    def close(self) -> None:
        """End the timer thread: nothing scheduled runs any more. Idempotent; never blocks (the
        thread ends as soon as a callback it may be running returns; shutdown joins it)."""
        with self._wake:
            self._closed = True
            for _, _, handle in self._heap:
                handle._drop()
            self._heap.clear()
            self._stale = 0
            self._wake.notify()

    def _loop(self) -> None:
        while True:
            with self._wake:
                callback = None
                while callback is None:
                    if self._closed:
                        return
                    if not self._heap:
                        self._wake.wait()
                        continue
                    due, _, handle = self._heap[0]
                    if handle.cancelled:
                        heapq.heappop(self._heap)
                        self._stale = max(0, self._stale - 1)
                        continue
                    wait = due - time.monotonic()
                    if wait > 0:
                        self._wake.wait(timeout=min(wait, 3600.0))  # an infinite wait overflows
                        continue
                    heapq.heappop(self._heap)
                    callback = handle._take()
            try:
                callback()  # outside the lock: a callback may schedule or cancel another
            except Exception:
                logger.opt(exception=True).error("a supervisor timer callback failed")
