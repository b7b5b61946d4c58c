"""The read side: what queries see, published by the supervisor after each message.

The supervisor's thread is the only writer. After it has fed a batch of messages to the core (one
drain of its mailbox), and *before* it carries out their commands (replies, events, spawns), it
refreshes the view once (``refresh_batch``): so a caller whose request was answered, or a subscriber
who got an event, always reads a state that includes it. Readers (any thread) never hop to the
supervisor's mailbox: a query is a dict lookup.

Publication is cheap because it is copy-on-write per record: every record is an immutable snapshot
(msgspec frozen structs), and only the records the message may have changed are rebuilt and
swapped in, each with one atomic store (see ``View.refresh`` for which). The statistics are O(1)
counters, rebuilt every time.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

import msgspec

from run_supervisor.actors._relay import complete
from run_supervisor.protocol import (
    ActionSnapshot,
    Command,
    CoreStatistics,
    Emit,
    Event,
    InstanceClosed,
    ReleaseRun,
    RunFinished,
    RunQueued,
    RunRecovered,
    RunSnapshot,
    RunStalled,
    RunStarted,
    RunUnstalled,
    SessionSnapshot,
    SessionStatus,
    SupervisorCore,
)

__all__ = ["View"]


_EMIT, _PLAIN, _DIRECTORY, _UNPIN, _RELEASE, _STALL = range(6)
_Plan = tuple[int, bool, bool, bool, bool]
"""What a publication reads of an item of one type: its kind (above), and whether it names a run
(``run_id``), a new child's parent (``parent_run_id`` of a ``run.queued``/``run.started``), a session
and an action (``action_id``, but not a run.finished's: that action is unchanged by the run's end)."""
_PLANS: dict[type, _Plan | None] = {}


def _plan(cls: type) -> _Plan | None:
    """The plan of a message, command or event type, made once from its fields; None for a type that is
    not a msgspec struct (read attribute by attribute). Reading only fields the type has spares the
    failed ``getattr`` of every name it lacks, on every item of every batch."""
    if cls in _PLANS:
        return _PLANS[cls]
    plan: _Plan | None = None
    if issubclass(cls, msgspec.Struct):
        fields = set(cls.__struct_fields__)
        if issubclass(cls, Emit):
            kind = _EMIT
        elif issubclass(cls, RunStarted | InstanceClosed):
            kind = _DIRECTORY
        elif issubclass(cls, RunFinished):
            kind = _UNPIN
        elif issubclass(cls, ReleaseRun | RunRecovered):
            kind = _RELEASE
        elif issubclass(cls, RunStalled | RunUnstalled):
            kind = _STALL
        else:
            kind = _PLAIN
        plan = (
            kind,
            "run_id" in fields,
            "parent_run_id" in fields and issubclass(cls, RunQueued | RunStarted),
            "session" in fields,
            "action_id" in fields and not issubclass(cls, RunFinished),
        )
    _PLANS[cls] = plan
    return plan


_Named = tuple[dict[str, None], dict[str, None], dict[str, None], set[str], list[str], list[str], list[str]]


def _named(given_items: Iterable[Any]) -> _Named:
    """What these items name (see ``View._publish``): runs, sessions and actions (ordered,
    deduplicated), the directories where an instance closed or a run was pinned, and the runs that
    were unpinned, released (the core remembers them as finished) or moved in or out of a stall."""
    touched: dict[str, None] = {}
    sessions: dict[str, None] = {}
    actions: dict[str, None] = {}
    directories: set[str] = set()
    unpinned: list[str] = []
    released: list[str] = []
    stall_moves: list[str] = []
    plans = _PLANS
    for given in given_items:
        item = given
        plan = plans[type(item)] if type(item) in plans else _plan(type(item))
        if plan is not None and plan[0] == _EMIT:
            item = item.event
            plan = plans[type(item)] if type(item) in plans else _plan(type(item))
        if plan is None:  # not a struct: every name looked up
            _name_any(item, touched, sessions, actions)
            continue
        kind, has_run, has_parent, has_session, has_action = plan
        if has_run:
            run_id = item.run_id
            if isinstance(run_id, str):
                touched[run_id] = None
        if has_parent:  # a new child shows in its parent
            parent_run_id = item.parent_run_id
            if isinstance(parent_run_id, str):
                touched[parent_run_id] = None
        if has_session:
            session = item.session
            if isinstance(session, str):
                sessions[session] = None
        if has_action:
            action_id = item.action_id
            if isinstance(action_id, str):
                actions[action_id] = None
        if kind == _DIRECTORY:
            directories.add(item.directory)
        elif kind == _UNPIN:
            if item.generation is not None:
                unpinned.append(item.run_id)
        elif kind == _RELEASE:
            released.append(item.run_id)
        elif kind == _STALL:
            stall_moves.append(item.run_id)
    return touched, sessions, actions, directories, unpinned, released, stall_moves


def _name_any(
    item: Any, touched: dict[str, None], sessions: dict[str, None], actions: dict[str, None]
) -> None:
    """``_named`` for an item that is not a struct (a shell message): the names it happens to carry."""
    run_id = getattr(item, "run_id", None)
    if isinstance(run_id, str):
        touched[run_id] = None
    session = getattr(item, "session", None)
    if isinstance(session, str):
        sessions[session] = None
    action_id = getattr(item, "action_id", None)
    if isinstance(action_id, str):
        actions[action_id] = None


class View:
    """The last published state. Read from any thread; written only by the supervisor's thread."""

    def __init__(self, core: SupervisorCore, recovered: Iterable[Event] = ()) -> None:
        """The state of a core no message has reached yet, with the runs it ``recovered``."""
        self.version = 0
        """How many times the state has been published; grows by one per publication (a batch of
        messages, or one message the supervisor handled on its own)."""
        self.statistics: CoreStatistics = core.statistics()
        self.runs: dict[str, RunSnapshot] = {}
        self.sessions: dict[str, SessionSnapshot] = {}
        self.pending_actions: tuple[ActionSnapshot, ...] = core.pending_actions()
        self._actions: dict[str, ActionSnapshot] = {a.action_id: a for a in self.pending_actions}
        self._finished: deque[str] = deque()  # in the core's order of finishing: it forgets oldest first
        # ``when_idle`` waiters by session; the lock orders a waiter's look at ``sessions`` against
        # the writer's wake-up after its store, so no going idle falls between the two.
        self._idle_lock = threading.Lock()
        self._idle_waiters: dict[str, list[Future[SessionSnapshot | None]]] = {}
        self._idle_closed: BaseException | None = None
        self.refresh(core, None, recovered)

    def refresh(self, core: SupervisorCore, message: Any, commands: Iterable[Command | Event]) -> None:
        """Publish what ``message`` (and the ``commands`` the core returned for it) may have changed
        (see ``refresh_batch``)."""
        self._publish(core, (getattr(message, "request", message), *commands))

    def refresh_batch(
        self, core: SupervisorCore, batch: Iterable[tuple[Any, Iterable[Command | Event]]]
    ) -> None:
        """Publish, once, what every ``(message, commands)`` of a batch may have changed: the state
        after the last of them (each record is read from the core once, however many of the batch's
        messages named it)."""
        self._publish(
            core,
            (
                item
                for message, commands in batch
                for item in (getattr(message, "request", message), *commands)
            ),
        )

    def _publish(self, core: SupervisorCore, given_items: Iterable[Any]) -> None:
        """Publish what these items (messages, requests, commands, events) may have changed.

        Every change the core makes to a run comes with a command or an event that names it (a
        report names its run; a start, a spawn, an interrupt, an answer, an abandonment, a finish
        each name theirs), so the named runs are the ones to rebuild; their sessions with them. An
        action is rebuilt when named, or when, in a directory it waits on, an instance closed or a
        run was pinned (started); a run that was unpinned (finished) is taken out of the actions'
        ``blocking_runs`` in place (a bisection: the core lists them sorted), so a shutdown waiting on
        N runs costs O(log N) per run that ends, not a rebuild. Nothing else changes what an action
        waits for.
        ``tests/test_view.py`` checks all of this against the core after every message.
        """
        touched, sessions, actions, directories, unpinned, released, stall_moves = _named(given_items)
        for run_id in touched:
            snapshot = core.run_snapshot(run_id)
            if snapshot is None:
                self.runs.pop(run_id, None)
                continue
            self.runs[run_id] = snapshot
            sessions[snapshot.session] = None
        self._forget(core, released)
        for session_id in sessions:
            session_snapshot = core.session_snapshot(session_id)
            if session_snapshot is None:
                self.sessions.pop(session_id, None)
            else:
                self.sessions[session_id] = session_snapshot
        if stall_moves and self._actions:
            actions.update(dict.fromkeys(self._blocked_by(stall_moves)))
        if self._actions or actions:
            self._refresh_actions(core, actions, directories, unpinned)
        self.statistics = core.statistics()
        self.version += 1
        if sessions:
            self._wake_idle(sessions)

    # --- waiting for a session to be idle (``Supervisor.await_idle``) ----------------------------

    @staticmethod
    def _idle(snapshot: SessionSnapshot | None) -> bool:
        return snapshot is None or snapshot.status is SessionStatus.IDLE

    def when_idle(self, session: str) -> Future[SessionSnapshot | None]:
        """A future done with the session's snapshot once the published state shows it idle (no
        active, no queued run) -- at once if it does now, or if the session is unknown (None). It
        is completed on the supervisor's thread (wrap it before a host sees it); cancel it to stop
        waiting. After ``close_idle`` a busy session's future raises the error given there."""
        waiter: Future[SessionSnapshot | None] = Future()
        with self._idle_lock:
            snapshot = self.sessions.get(session)
            if self._idle(snapshot):
                waiter.set_result(snapshot)
                return waiter
            if self._idle_closed is not None:
                waiter.set_exception(self._idle_closed)
                return waiter
            self._idle_waiters.setdefault(session, []).append(waiter)
        waiter.add_done_callback(lambda done: self._forget_waiter(session, done))
        return waiter

    def _forget_waiter(self, session: str, waiter: Future[SessionSnapshot | None]) -> None:
        if not waiter.cancelled():
            return
        with self._idle_lock:
            waiters = self._idle_waiters.get(session)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._idle_waiters[session]

    def _wake_idle(self, sessions: Iterable[str]) -> None:
        woken: list[tuple[Future[SessionSnapshot | None], SessionSnapshot | None]] = []
        # Looked at under the lock, even when empty: a waiter that saw the session busy before this
        # refresh stored it idle has registered by the time the lock is ours (or sees it idle itself).
        with self._idle_lock:
            if not self._idle_waiters:
                return
            for session in sessions:
                snapshot = self.sessions.get(session)
                if session in self._idle_waiters and self._idle(snapshot):
                    woken.extend((w, snapshot) for w in self._idle_waiters.pop(session))
        for waiter, snapshot in woken:  # outside the lock: a done-callback may wait again
            complete(waiter, snapshot)

    def close_idle(self, error: BaseException) -> None:
        """The supervisor has stopped: nothing will change any more. Waiters for a session still
        busy (which a completed shutdown never leaves) get ``error``; later ones too."""
        with self._idle_lock:
            self._idle_closed = error
            waiting = [w for ws in self._idle_waiters.values() for w in ws]
            self._idle_waiters.clear()
        for waiter in waiting:
            complete(waiter, error=error)

    def _refresh_actions(
        self, core: SupervisorCore, named: dict[str, None], directories: set[str], unpinned: list[str]
    ) -> None:
        changed = False
        for action_id, snapshot in self._actions.items():
            if action_id in named:
                continue
            if not directories.isdisjoint(snapshot.pending_directories):
                named[action_id] = None
                continue
            blocking = snapshot.blocking_runs
            for run_id in unpinned:
                at = bisect_left(blocking, run_id)
                if at < len(blocking) and blocking[at] == run_id:
                    blocking = blocking[:at] + blocking[at + 1 :]
            if blocking is not snapshot.blocking_runs:
                self._actions[action_id] = msgspec.structs.replace(snapshot, blocking_runs=blocking)
                changed = True
        for action_id in named:  # a new action is named by its lifecycle.requested, in creation order
            fresh = core.action_snapshot(action_id)
            if fresh is None:
                changed |= self._actions.pop(action_id, None) is not None
            elif self._actions.get(action_id) != fresh:
                self._actions[action_id] = fresh
                changed = True
        if changed:
            self.pending_actions = tuple(self._actions.values())

    def _blocked_by(self, run_ids: list[str]) -> list[str]:
        """The pending actions whose ``blocking_runs`` (sorted) hold one of ``run_ids``."""
        found = []
        for action_id, snapshot in self._actions.items():
            blocking = snapshot.blocking_runs
            for run_id in run_ids:
                at = bisect_left(blocking, run_id)
                if at < len(blocking) and blocking[at] == run_id:
                    found.append(action_id)
                    break
        return found

    def _forget(self, core: SupervisorCore, released: list[str]) -> None:
        """The core keeps ``retain_finished`` finished runs and forgets the oldest: so do we."""
        self._finished.extend(released)
        while len(self._finished) > core.retain_finished:
            oldest = self._finished.popleft()
            if core.run_snapshot(oldest) is None:
                self.runs.pop(oldest, None)
