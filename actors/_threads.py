"""The threads the supervisor starts, so shutdown can join them and tests can find leaks."""

from __future__ import annotations

import threading
import time

__all__ = ["ThreadBook"]


class ThreadBook:
    """Every thread the supervisor started, so shutdown can join them and tests can find leaks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self.abandoned: set[threading.Thread] = set()
        self._prune_at = 64

    def add(self, thread: threading.Thread) -> None:
        with self._lock:
            if len(self._threads) >= self._prune_at:  # amortised: forget ended threads now and then
                self._threads = {t for t in self._threads if t.is_alive() or not t.ident}
                self._prune_at = max(64, 2 * len(self._threads))
            self._threads.add(thread)

    def alive(self) -> list[threading.Thread]:
        with self._lock:
            return [t for t in self._threads if t.is_alive()]

    def join(self, deadline: float) -> list[threading.Thread]:
        """Join every live thread but the abandoned ones until ``deadline``; return the stragglers."""
        for thread in self.alive():
            if thread in self.abandoned or thread is threading.current_thread():
                continue
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        return [t for t in self.alive() if t not in self.abandoned]
