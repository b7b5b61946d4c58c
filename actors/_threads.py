"""The threads the supervisor starts, so shutdown can join them and tests can find leaks."""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["ThreadBook"]


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

    def join(self, deadline: float, *, host_deadline: float | None = None) -> list[threading.Thread]:
        """Join every live thread but the abandoned ones until ``deadline`` (those running host code
        only until ``host_deadline``, when given); return the stragglers."""
        for thread in self.alive():
            if self._given_up(thread) or thread is threading.current_thread():
                continue
            until = deadline
            if host_deadline is not None and thread in self._labels:
                until = min(deadline, host_deadline)
            thread.join(timeout=max(0.0, until - time.monotonic()))
        return [t for t in self.alive() if not self._given_up(t)]

    def overran(self) -> tuple[str, ...]:
        """What host code is still running, by label, sorted: what a shutdown left behind (the
        stragglers, and the threads already given up on when they overran their budget)."""
        with self._lock:
            return tuple(sorted(label for t, label in self._labels.items() if t.is_alive()))
