"""Event subscriptions: the supervisor never waits for a subscriber.

Each subscription has its own queue. Publishing is a non-blocking put from the supervisor's thread,
so a slow or failing subscriber cannot hold the supervisor or the other subscribers up. A bounded
subscription (``maxsize > 0``) that falls behind loses its *oldest* events and counts them in
``dropped``; an unbounded one (the default) loses nothing. A callback subscription gets its own
dispatcher thread; a callback that raises is counted in ``errors`` and keeps receiving.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from typing import Any

from run_supervisor.actors._errors import SupervisorTimeout
from run_supervisor.actors._logging import logger
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.protocol import Event

__all__ = ["Publisher", "Subscription"]


class Subscription:
    """An ordered view of the supervisor's events from the moment of subscribing."""

    def __init__(
        self,
        maxsize: int = 0,
        callback: Callable[[Event], object] | None = None,
        *,
        threads: ThreadBook | None = None,
    ) -> None:
        if maxsize < 0:
            raise ValueError("maxsize cannot be negative (0 means unbounded)")
        self.maxsize = maxsize
        self._items: collections.deque[Event] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self.dropped = 0
        """Events lost because a bounded subscription was full (oldest first)."""
        self.errors = 0
        """Exceptions raised by the callback (each logged, none stops delivery)."""
        self._callback = callback
        self._threads = threads
        self._label: str | None = None
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[Subscription], None] | None = None
        if callback is not None:
            self._thread = threading.Thread(
                target=self._dispatch, name="run-supervisor-subscriber", daemon=True
            )
            if threads is not None:  # shutdown waits for it until its deadline, then names it
                name = getattr(callback, "__qualname__", None) or type(callback).__name__
                self._label = f"the subscriber callback {name}"
                threads.add(self._thread)
            self._thread.start()

    # Called on the supervisor's thread: must never block.
    def _offer(self, event: Any) -> None:
        with self._cond:
            if self._closed:
                return
            if self.maxsize and len(self._items) >= self.maxsize:
                self._items.popleft()
                self.dropped += 1
            self._items.append(event)
            self._cond.notify()

    def _offer_many(self, events: list[Any]) -> None:
        """``_offer`` for a batch: one lock, one wake for all of them (a subclass that offers its
        own way, overriding ``_offer``, gets them one by one)."""
        if type(self)._offer is not Subscription._offer:
            for event in events:
                self._offer(event)
            return
        with self._cond:
            if self._closed:
                return
            self._items.extend(events)
            if self.maxsize:
                while len(self._items) > self.maxsize:
                    self._items.popleft()
                    self.dropped += 1
            self._cond.notify()

    def get(self, timeout: float) -> Event:
        """The next event; ``SupervisorTimeout`` if none comes in time; ``EOFError`` once closed
        and drained."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or self._closed, timeout):
                raise SupervisorTimeout(f"no event within {timeout} s")
            if not self._items:
                raise EOFError("the subscription is closed")
            return self._items.popleft()

    def drain(self) -> list[Event]:
        """Every event already delivered and not yet read, without waiting."""
        with self._cond:
            items = list(self._items)
            self._items.clear()
        return items

    def __iter__(self) -> Iterator[Event]:
        """Every event until the subscription is closed (blocks between events, however long)."""
        while True:
            try:
                yield self.get(timeout=3600.0)
            except SupervisorTimeout:  # an hour with no event: wait on
                continue
            except EOFError:
                return

    @property
    def pending(self) -> int:
        """Events delivered and not read yet."""
        return len(self._items)

    @property
    def closed(self) -> bool:
        """Whether the stream has ended (closed by the host, or the supervisor has shut down)."""
        return self._closed

    def close(self, timeout: float = 5.0) -> bool:
        """Stop receiving. Events already delivered can still be read (a callback subscription
        hands them to its callback, then its thread ends).

        For a callback subscription, waits up to ``timeout`` seconds for that thread to end and
        returns whether it did (``close(timeout=0)`` never waits: a host closing from a place that
        must not block, e.g. an event loop, passes 0). Always True for a queue subscription."""
        if timeout < 0:
            raise ValueError("timeout cannot be negative")
        if self._unsubscribe is not None:
            self._unsubscribe(self)
        return self._end(timeout=timeout)

    def _end(self, *, timeout: float = 0.0) -> bool:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return thread is None
        if timeout > 0:
            thread.join(timeout=timeout)
        return not thread.is_alive()

    def _dispatch(self) -> None:
        assert self._callback is not None
        while True:
            try:
                event = self.get(timeout=3600.0)
            except EOFError:
                return
            except SupervisorTimeout:
                continue
            if self._threads is not None:  # host code runs now: shutdown names it if it hangs
                self._threads.label(threading.current_thread(), self._label)
            try:
                self._callback(event)
            except BaseException:  # contain it: a subscriber must never take anything down
                self.errors += 1
                logger.opt(exception=True).warning("event subscriber raised; it keeps receiving")
            if self._threads is not None:
                self._threads.label(threading.current_thread(), None)


class Publisher:
    """The supervisor's side: fans each event out to the subscriptions, never waiting on one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscriptions: tuple[Subscription, ...] = ()
        self._closed = False

    def add(self, subscription: Subscription) -> None:
        """Add a subscription; once every subscription was closed (shutdown completed), it comes
        back closed at once, so nothing made in that race is left open."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._subscriptions = (*self._subscriptions, subscription)
        subscription._unsubscribe = self.remove
        if closed:
            subscription._end()

    def remove(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscriptions = tuple(s for s in self._subscriptions if s is not subscription)

    def publish(self, event: Event) -> None:
        for subscription in self._subscriptions:  # a snapshot: adds and removes swap the tuple
            subscription._offer(event)

    def after(self, call: Callable[[], object]) -> None:
        """Run ``call`` once every event published before it has been delivered (here: at once; a
        journaled publisher delivers later, and keeps answers behind the events they follow)."""
        call()

    def deliver(self, events: list[Event], calls: list[Callable[[], object]]) -> None:
        """A batch: publish ``events``, then run ``calls`` (each ``after`` them). Here each
        subscription gets the whole batch at once (one lock, one wake); a publisher that publishes
        otherwise (a journal's) takes them one by one, in the same order."""
        if type(self).publish is not Publisher.publish or type(self).after is not Publisher.after:
            for event in events:
                self.publish(event)
            for call in calls:
                self.after(call)
            return
        if events:
            for subscription in self._subscriptions:  # a snapshot, as in publish
                subscription._offer_many(events)
        for call in calls:
            call()

    def close_all(self) -> None:
        with self._lock:
            subscriptions, self._subscriptions = self._subscriptions, ()
            self._closed = True
        for subscription in subscriptions:
            subscription._end()
