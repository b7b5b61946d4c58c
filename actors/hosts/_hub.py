"""The event hub of the wire hosts: one ordered, bounded replay buffer, fanned out to SSE streams.

One pump thread reads the supervisor's events (an unbounded subscription, so the supervisor never
waits for it) and appends each, encoded once, to a ring buffer. Every item has an id that says which
life of the server it belongs to and orders it within that life: ``"<epoch>:<seq>"``. The epoch is
the journal's boot number when the supervisor keeps a journal (``"3"``: the third start on that
file), else a random token drawn when the hub starts (``"t9f2c4a1e"``); a supervisor event's id ends
in its ``seq`` (``"3:17"``); an event the host itself publishes (an external run's interrupt notice)
follows the last supervisor event and takes a suffix (``"3:17.1"``). A client that reconnects with
``Last-Event-ID`` gets every item after that id from the buffer; when the buffer no longer holds what
followed -- evicted, an id this life has not reached, or an id of another life (a restart: its
``seq`` counts again from 1) -- it gets one ``stream.reset`` event first, then the whole buffer, and
should re-read state from the queries. A plain number (the ids of servers before ids named their
life) is an id of another life.

Listeners live on an asyncio loop: delivery is a ``call_soon_threadsafe`` per loop and *batch* (the pump
takes every event the supervisor delivered at once, so a burst wakes each loop and each stream once, not
once an event), made under the hub's lock so that items reach every listener in id order. A listener
that falls more than its bound behind is cut off (``overflowed``, and its ``alarm`` is set so that a
stream blocked on a reader that stopped reading notices): its stream ends and the client resumes by
``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import collections
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import msgspec

from run_supervisor.actors._api import Supervisor
from run_supervisor.actors._errors import SupervisorTimeout
from run_supervisor.actors._logging import logger
from run_supervisor.actors._subscription import Subscription
from run_supervisor.actors.hosts._answers import (
    GlobalDisposed,
    GlobalDisposedProperties,
    InstanceDisposed,
    InstanceDisposedProperties,
)
from run_supervisor.protocol import (
    CloseAction,
    Event,
    InstanceClosed,
    LifecycleCompleted,
    LifecycleRequested,
    encode,
)

__all__ = ["EventHub", "EventId", "Listener", "StreamReset", "WireItem", "parse_event_id"]

Key = tuple[int, int]
"""An item's place within its life: (the supervisor event's seq, the host event's suffix or 0)."""

ResetWhy = Literal["evicted", "unknown_id", "other_epoch"]


class EventId(NamedTuple):
    """A parsed event id: the life it belongs to (None: a plain number, which names none) and its key."""

    epoch: str | None
    key: Key


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 20  # no sign, space, "_" or "²"


def _key(text: str) -> Key | None:
    head, dot, tail = text.partition(".")
    if not _digits(head) or (dot and not _digits(tail)):
        return None
    return (int(head), int(tail) if dot else 0)


def parse_event_id(text: str | None) -> EventId | None:
    """``"3:17"`` -> ("3", (17, 0)); ``"3:17.2"`` -> ("3", (17, 2)); a plain ``"17"`` -> (None, (17, 0));
    None or malformed -> None."""
    if text is None:
        return None
    epoch, colon, rest = text.strip().rpartition(":")
    if colon and not epoch.isalnum():
        return None
    key = _key(rest)
    if key is None:
        return None
    return EventId(epoch if colon else None, key)


def _format_id(epoch: str, key: Key) -> str:
    return f"{epoch}:{key[0]}" if key[1] == 0 else f"{epoch}:{key[0]}.{key[1]}"


def new_epoch(supervisor: Supervisor) -> str:
    """The life a hub's ids belong to: the journal's boot number, else a random token of this start."""
    boot = supervisor.epoch
    return str(boot) if boot is not None else f"t{secrets.token_hex(4)}"


class StreamReset(msgspec.Struct, frozen=True, tag="stream.reset", tag_field="type", kw_only=True):
    """Sent (without an SSE id) when a resume asks for more than the replay buffer holds; the whole
    buffer follows. Re-read state from the queries.

    ``why``: ``evicted`` (the id is older than the buffer's oldest event), ``unknown_id`` (not an
    event id, or one this life has not reached), ``other_epoch`` (an id of another life of the
    server: it restarted, and its ``seq`` counts again from 1)."""

    after: str
    oldest: str | None
    why: ResetWhy
    epoch: str
    """The life the stream's ids belong to from now on."""


@dataclass(frozen=True, slots=True)
class WireItem:
    """One event as the hosts send it: its id, its JSON, and its seed-002 compatible twin if any."""

    key: Key
    id: str
    type: str
    data: bytes
    """The event's JSON (the protocol's encoding, every field present)."""
    compat: bytes | None = None
    """The event in the shape seed 002's backend clients consume (``{type, properties}``), or None."""


class Listener:
    """An asyncio-side queue of items; filled from the hub under its lock, drained by one stream."""

    def __init__(self, loop: asyncio.AbstractEventLoop, bound: int) -> None:
        self.loop = loop
        self.bound = bound
        self.items: collections.deque[WireItem] = collections.deque()
        self.ready = asyncio.Event()
        self.alarm = asyncio.Event()
        """Set when the stream must stop waiting on its reader: it overflowed, it was stopped, or the
        hub ended (then what is queued may still be flushed, within the host's bound)."""
        self.overflowed = False
        self.ended = False
        self.stopped = False

    # On the loop's thread.
    def _push(self, item: WireItem) -> None:
        if self.overflowed or self.stopped:
            return
        if len(self.items) >= self.bound:
            self.overflowed = True
            self.alarm.set()
        else:
            self.items.append(item)
        self.ready.set()

    def _end(self) -> None:
        self.ended = True
        self.alarm.set()
        self.ready.set()

    def end(self) -> None:
        """End this stream after what it has queued, as the hub's close would (on the loop's thread)."""
        self._end()

    def stop(self) -> None:
        """Stop this stream now, dropping what it has queued (on the loop's thread)."""
        self.stopped = True
        self.items.clear()
        self.alarm.set()
        self.ready.set()

    async def next_batch(self) -> list[WireItem]:
        """Wait for items (or the end); empty means the stream is over (hub closed, overflowed or
        stopped)."""
        while not self.items and not self.ended and not self.overflowed and not self.stopped:
            self.ready.clear()
            await self.ready.wait()
        batch = list(self.items)
        self.items.clear()
        return batch


def _push_all(group: tuple[Listener, ...], items: list[WireItem]) -> None:
    for listener in group:
        for item in items:
            listener._push(item)


class EventHub:
    """The supervisor's events (plus host events), buffered for replay and fanned out to listeners."""

    def __init__(self, supervisor: Supervisor, *, capacity: int = 10_000, epoch: str | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if epoch is not None and not epoch.isalnum():
            raise ValueError(f"an epoch is letters and digits, got {epoch!r}")
        self.capacity = capacity
        self.epoch = epoch if epoch is not None else new_epoch(supervisor)
        """The life this hub's ids belong to (see the module's docstring)."""
        self._lock = threading.Lock()
        self._buffer: collections.deque[WireItem] = collections.deque()
        self._evicted_upto: Key = (0, 0)
        self._last: Key = (0, 0)
        self._listeners: set[Listener] = set()
        # Listeners by event loop: one wake-up per loop and event, however many streams it serves.
        self._by_loop: dict[asyncio.AbstractEventLoop, tuple[Listener, ...]] = {}
        self._closed = threading.Event()
        self._dispose_all_actions: dict[str, str | None] = {}
        self._on_close: list[Callable[[], object]] = []
        self._observers: tuple[Callable[[Event], None], ...] = ()
        # A supervisor started on a run journal published its recovery (seq 1..k) before anyone could
        # subscribe: those events open the stream, so every client replays them.
        for event in supervisor.recovery_events():
            self._add(event)
        self._subscription: Subscription = supervisor.subscribe()
        self._thread = threading.Thread(target=self._pump, name="run-supervisor-wire-hub", daemon=True)
        self._thread.start()

    # --- the pump (its own thread) ---------------------------------------------------------------

    def _pump(self) -> None:
        """Wait for an event, then take with it every one already delivered (a supervisor's batch):
        they are buffered and handed to each loop at once."""
        subscription = self._subscription
        while True:
            try:
                first = subscription.get(timeout=3600.0)
            except EOFError:
                break
            except SupervisorTimeout:
                continue
            self._add_many([first, *subscription.drain()])
        self._close()

    def _compat(self, event: Event) -> bytes | None:
        """Seed 002's backend events: ``global.disposed`` when a dispose_all completes (deferred or
        not), ``server.instance.disposed`` for each instance that closed."""
        if isinstance(event, LifecycleRequested):
            if event.do is CloseAction.DISPOSE_ALL:
                self._dispose_all_actions[event.action_id] = event.tag
            return None
        if isinstance(event, LifecycleCompleted):
            if event.action_id not in self._dispose_all_actions:
                return None
            tag = self._dispose_all_actions.pop(event.action_id)
            props = GlobalDisposedProperties(lifecycle_action_id=event.action_id, client_action_id=tag)
            return msgspec.json.encode(GlobalDisposed(properties=props))
        if isinstance(event, InstanceClosed):
            closed = InstanceDisposedProperties(directory=event.directory, generation=event.generation)
            return msgspec.json.encode(InstanceDisposed(properties=closed))
        return None

    def _add(self, event: Event) -> None:
        self._add_many([event])

    def _add_many(self, events: list[Event]) -> None:
        """Observe, encode and buffer ``events`` (in order), then hand them to each loop in one call."""
        made: list[tuple[Key, str, bytes, bytes | None]] = []
        for event in events:
            for observer in self._observers:
                try:
                    observer(event)
                except Exception:  # an observer must not stop the stream
                    logger.opt(exception=True).warning("a wire hub observer raised")
            kind: str = type(event).__struct_config__.tag  # type: ignore[assignment]
            made.append(((event.seq, 0), kind, encode(event), self._compat(event)))
        with self._lock:
            items = [
                WireItem(key=key, id=_format_id(self.epoch, key), type=kind, data=data, compat=compat)
                for key, kind, data, compat in made
            ]
            self._append(items)

    def publish(self, payload: dict[str, Any]) -> str:
        """Publish a host event (a dict with ``type``); it gets the next id and a ``seq`` field equal
        to the supervisor event it follows. Returns its id. A closed hub drops it."""
        with self._lock:
            key = (self._last[0], self._last[1] + 1)
            rest = {k: v for k, v in payload.items() if k != "type"}
            body = {"type": payload["type"], "seq": key[0], **rest}
            data = msgspec.json.encode(body)
            item = WireItem(key=key, id=_format_id(self.epoch, key), type=body["type"], data=data)
            if not self._closed.is_set():
                self._append([item])
            return item.id

    def _append(self, items: list[WireItem]) -> None:  # under the lock
        if not items:
            return
        self._last = items[-1].key
        self._buffer.extend(items)
        while len(self._buffer) > self.capacity:
            self._evicted_upto = self._buffer.popleft().key
        for loop, group in self._by_loop.items():
            try:
                loop.call_soon_threadsafe(_push_all, group, items)  # one wake per loop and batch
            except RuntimeError:  # its loop is closed: the streams are gone
                pass

    def _close(self) -> None:
        with self._lock:
            self._closed.set()
            listeners = list(self._listeners)
            self._listeners.clear()
            self._by_loop.clear()
            callbacks = list(self._on_close)
        for listener in listeners:
            try:
                listener.loop.call_soon_threadsafe(listener._end)
            except RuntimeError:
                pass
        for callback in callbacks:
            try:
                callback()
            except Exception:  # e.g. a host whose loop has ended first: nothing left to tell
                logger.opt(exception=True).debug("a wire hub close callback raised")

    # --- for the hosts -----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """The supervisor has shut down and its last event is in the buffer."""
        return self._closed.is_set()

    def observe(self, callback: Callable[[Event], None]) -> None:
        """Call ``callback(event)`` on the pump thread for every supervisor event from now on."""
        with self._lock:
            self._observers = (*self._observers, callback)

    def on_close(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (on the pump thread) once the supervisor's last event is buffered."""
        with self._lock:
            if not self._closed.is_set():
                self._on_close.append(callback)
                return
        callback()

    def listen(
        self, after: str | None, *, loop: asyncio.AbstractEventLoop, bound: int = 10_000
    ) -> tuple[list[WireItem], StreamReset | None, Listener]:
        """Start listening. ``after``: the last id the client has (``Last-Event-ID``), ``"0"`` for the
        whole buffer, None for live events only. Returns what to replay first, a ``stream.reset``
        payload when the buffer cannot bridge the gap, and the listener for what follows."""
        listener = Listener(loop, bound)
        with self._lock:
            replay: list[WireItem] = []
            reset: StreamReset | None = None
            if after is not None:
                key, why = self._resume_after(after)
                if why is not None:
                    oldest = self._buffer[0].id if self._buffer else None
                    reset = StreamReset(after=after, oldest=oldest, why=why, epoch=self.epoch)
                    replay = list(self._buffer)
                else:
                    replay = [item for item in self._buffer if item.key > key]
            if self._closed.is_set():
                listener.ended = True
            else:
                self._listeners.add(listener)
                self._regroup(loop)
        return replay, reset, listener

    def _resume_after(self, after: str) -> tuple[Key, ResetWhy | None]:  # under the lock
        """Where a resume after this id starts in this life, and why the buffer cannot bridge the
        gap (None: it can). ``"0"`` is this life's beginning."""
        parsed = EventId(self.epoch, (0, 0)) if after.strip() == "0" else parse_event_id(after)
        if parsed is None:
            return (0, 0), "unknown_id"
        if parsed.epoch != self.epoch:
            return (0, 0), "other_epoch"
        if parsed.key > self._last:
            return (0, 0), "unknown_id"
        if parsed.key < self._evicted_upto:
            return (0, 0), "evicted"
        return parsed.key, None

    def unlisten(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.discard(listener)
            self._regroup(listener.loop)

    def _regroup(self, loop: asyncio.AbstractEventLoop) -> None:  # under the lock
        group = tuple(listener for listener in self._listeners if listener.loop is loop)
        if group:
            self._by_loop[loop] = group
        else:
            self._by_loop.pop(loop, None)

    def items(self) -> list[WireItem]:
        """Every item still in the buffer, oldest first."""
        with self._lock:
            return list(self._buffer)

    @property
    def buffered(self) -> int:
        """Events held for replay."""
        return len(self._buffer)

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    def join(self, timeout: float) -> None:
        """Wait for the pump thread to end (it ends when the supervisor has shut down)."""
        self._thread.join(timeout)
