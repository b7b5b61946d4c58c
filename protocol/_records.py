"""The decision core's own records: what it remembers of each run, session, instance and directory.

Mutable and private to the core (``protocol._core`` and ``protocol._lifecycle``); what leaves the
core is always a frozen snapshot or event.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypedDict

from run_supervisor.protocol._enums import (
    AskKind,
    AskState,
    InstanceState,
    InterruptReason,
    PartState,
    Phase,
    QueuePolicy,
    RunState,
    WithdrawReason,
)
from run_supervisor.protocol._parts import PartSnapshot
from run_supervisor.protocol._payloads import AskPayload, AskSnapshot
from run_supervisor.protocol._rules import UNFINISHED_PART_STATES, BodyState, RunTrigger

__all__ = [
    "Ask",
    "Journal",
    "_Directory",
    "_Instance",
    "_Interrupt",
    "_Part",
    "_Run",
    "_RunEnding",
    "_Session",
]


@dataclass(slots=True)
class Ask:
    """One ask, as the core holds it."""

    ask_id: str
    run_id: str
    session: str
    kind: AskKind
    tool: str | None
    call_id: str | None
    payload: AskPayload
    part: str | None = None
    """The call id of the run's tool part this ask belongs to (None: not tied to a part)."""
    state: AskState = AskState.OPEN
    withdraw_reason: WithdrawReason | None = None
    interrupt_reason: InterruptReason | None = None
    """For ``interrupted``: what interrupted the run."""

    def snapshot(self) -> AskSnapshot:
        return AskSnapshot(
            ask_id=self.ask_id,
            run_id=self.run_id,
            session=self.session,
            kind=self.kind,
            state=self.state,
            tool=self.tool,
            call_id=self.call_id,
            payload=self.payload,
            withdraw_reason=self.withdraw_reason,
        )


@dataclass(slots=True)
class _Part:
    tool: str
    state: PartState
    call_id: str
    ran: bool = False  # it reached ``running``
    gated: bool = False  # running, but its first permission was not granted (yet)
    approved: bool = False  # a permission of this call was granted
    confirmed: bool = False  # running, it asked a form ungated: no first permission gates it now
    message: str | None = None
    reason: InterruptReason | None = None
    origin: str | None = None
    phase: Phase | None = None  # the phase it was interrupted in
    ask: Ask | None = None  # the open ask it waits on (the latest, if several)
    declined: AskKind | None = None  # the user declined its permission / dismissed its form
    shown: PartSnapshot | None = None  # as last announced by run.part.updated

    @property
    def tool_started(self) -> bool:
        """The tool began its work: it ran, and no permission it waits for gates it."""
        return self.ran and not self.gated


@dataclass(slots=True)
class _Interrupt:
    reason: InterruptReason
    origin: str
    action: str | None
    phase: Phase | None


class _RunEnding(TypedDict):
    """The fields of how a run ended (``SupervisorCore._ending``), in its snapshot and its
    ``run.finished`` alike."""

    reason: InterruptReason | None
    origin: str | None
    action_id: str | None
    phase: Phase | None
    error: str | None
    abandoned: bool
    generation: int | None
    parts: tuple[PartSnapshot, ...]
    retry_attempt: int | None
    retry_message: str | None
    epoch: int | None


@dataclass(slots=True)
class _Run:
    id: str
    session: str
    directory: str
    state: RunState = RunState.QUEUED
    generation: int | None = None
    parts: list[_Part] = field(default_factory=list)
    calls: dict[str, _Part] = field(default_factory=dict)  # its parts by call id
    interrupt: _Interrupt | None = None
    error: str | None = None
    abandoned: bool = False
    resume_of: str | None = None
    resume_count: int = 0  # continued after a crash this many times in a row (``run.started``'s)
    epoch: int | None = None  # the life its generation belongs to (recovered: the dead process's)
    parent: str | None = None  # the run it is a child of
    children: list[str] = field(default_factory=list)  # in start order
    body: BodyState = BodyState.RUNNING  # its body's state (``BODY_TRANSITIONS``, ``BODY_RULES``)
    ended: tuple[RunTrigger, str | None] | None = None
    """How its body ended (and the error) while children were unfinished (``body`` is
    ``awaiting_children``): it is reported finished so once they are."""
    deadline_ms: int | None = None  # counted from run.started; the shell holds the timer
    interrupt_grace_ms: int | None = None  # its own grace once interrupted (``INTERRUPT_GRACE``)
    grace_armed: bool = False  # a StartInterruptGrace was sent: StopInterruptGrace at its end
    retry_budget: tuple[int | None, int | None] | None = None  # (attempts, backoff_ms) of its own
    last_retry: tuple[int, str] | None = None  # the last retry its body reported (attempt, message)
    backoff_total_ms: int = 0  # announced backoff so far (``RetryReport.backoff_ms``)
    queue_policy: QueuePolicy = QueuePolicy.QUEUE  # what it was started with (``QUEUE_RULES``)
    stalled: bool = False  # flagged: no progress for its stall setting (``protocol._stalls``)
    refused: int = 0
    """Reports of its body the core did not apply (late, out of order, malformed): a body that reads
    this behind its reports (``SupervisorCore.report_echo``) learns which of them did nothing."""

    def open_part(self) -> _Part | None:
        """The latest unfinished part (parallel calls: the one begun last)."""
        for part in reversed(self.parts):
            if part.state in UNFINISHED_PART_STATES:
                return part
        return None


@dataclass(slots=True)
class _Session:
    id: str
    active: str | None = None
    """Its active run; a session is ``busy`` exactly while it has one."""
    queue: deque[str] = field(default_factory=deque)
    retry: tuple[int, str, int | None] | None = None
    """While its active run retries: (attempt, message, next attempt at, epoch ms); status ``retry``."""
    deleted: bool = False
    """``DeleteSession`` confirmed while a run was active: forgotten at that run's end."""


@dataclass(slots=True)
class _Instance:
    directory: str
    generation: int
    state: InstanceState = InstanceState.LIVE
    runs: set[str] = field(default_factory=set)  # runs pinned here that have not finished
    closers: list[str] = field(default_factory=list)  # actions waiting for it to close
    fingerprint: str | None = None  # what it was loaded with (the no-op gate compares it)
    ready: bool = False  # its load hook returned (``instance.ready`` was sent)
    epoch: int | None = None  # the supervisor's life it was loaded in (``SupervisorCore.epoch``)

    @property
    def key(self) -> tuple[str, int]:
        return (self.directory, self.generation)


@dataclass(slots=True)
class _Directory:
    name: str
    current: _Instance | None = None
    last_generation: int = 0
    open: dict[int, _Instance] = field(default_factory=dict)  # not closed yet, by generation
    fingerprint: str | None = None  # what its next generation will be loaded with


# --- the undo journal: each input applies fully or not at all ---------------------------------------

_MISSING: Any = object()


_Saver = tuple[Callable[[Any], tuple[Any, ...]], Callable[[Any, tuple[Any, ...]], None]]
_SAVERS: dict[type, _Saver] = {}
_BY_OPERATION = frozenset({"queue", "runs", "awaiting", "at_once"})
"""Containers that may grow large (a session's queue, an instance's runs, the instances an action
awaits): never copied; changed only through the journal's operations, each undone one by one."""
_FRESH: Any = (None, None, None)


def _saver(cls: type) -> _Saver:
    """How to save a record of ``cls`` and put it back: two functions made once from its fields, one
    reading every field into a tuple (the containers, the fields with a default factory, copied so
    that in-place changes can be undone), one assigning them all back. Saving a record is on the
    path of every decision: written out field by field it costs about a third of what a generic
    read (``attrgetter`` over the names, then the copies in a loop) does."""
    saver = _SAVERS.get(cls)
    if saver is None:
        names = [f.name for f in fields(cls)]
        copied = {
            f.name for f in fields(cls) if f.default_factory is not MISSING and f.name not in _BY_OPERATION
        }
        read = ", ".join(f"r.{name}.copy()" if name in copied else f"r.{name}" for name in names)
        assign = ", ".join(f"r.{name}" for name in names)
        source = f"def save(r):\n    return ({read},)\n\ndef restore(r, v):\n    {assign}, = v\n"
        made: dict[str, Any] = {}
        exec(compile(source, f"<undo journal of {cls.__name__}>", "exec"), made)  # field names only
        saver = _SAVERS[cls] = (made["save"], made["restore"])
    return saver


class Journal:
    """The undo log of one decision of the core (``SupervisorCore``): records are saved the first
    time they are touched, table entries as they change. ``rollback`` puts everything back.

    A record must be touched before it is changed in place; a table (a dict of records, the
    finished-runs deque) changes only through ``put``, ``drop``, ``append`` and ``popleft``. A test
    (``tests/test_atomic_core.py``) fails every decision at its end and checks that the whole core is
    as before: a change that bypasses the journal shows up there.
    """

    __slots__ = ("_saved", "_undo")

    def __init__(self) -> None:
        # id -> (restore, record, its fields as they were); _FRESH for a record made by the decision
        self._saved: dict[int, tuple[Any, Any, Any]] = {}
        self._undo: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def fresh(self, record: Any) -> None:
        """``record`` was made by this decision: nothing to save (rollback drops it from its table)."""
        self._saved[id(record)] = _FRESH

    def touch(self, record: Any) -> None:
        """Save ``record`` before its first change in this decision (a run with its parts)."""
        key = id(record)
        if key in self._saved:
            return
        cls = type(record)
        save, restore = _SAVERS.get(cls) or _saver(cls)
        self._saved[key] = (restore, record, save(record))
        if cls is _Run:
            for part in record.parts:
                self.touch(part)

    def put(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        self._undo.append((_restore_key, (table, key, table.get(key, _MISSING))))
        table[key] = value

    def drop(self, table: dict[Any, Any], key: Any) -> Any:
        old = table.pop(key, _MISSING)
        if old is not _MISSING:
            self._undo.append((_restore_key, (table, key, old)))
        return None if old is _MISSING else old

    def add(self, items: set[Any], value: Any) -> None:
        if value not in items:
            items.add(value)
            self._undo.append((items.discard, (value,)))

    def discard(self, items: set[Any], value: Any) -> None:
        if value in items:
            items.discard(value)
            self._undo.append((items.add, (value,)))

    def remove(self, queue: deque[Any], value: Any) -> None:
        index = queue.index(value)
        del queue[index]
        self._undo.append((queue.insert, (index, value)))

    def append(self, queue: deque[Any] | list[Any], value: Any) -> None:
        queue.append(value)
        self._undo.append((queue.pop, ()))

    def popleft(self, queue: deque[Any]) -> Any:
        value = queue.popleft()
        self._undo.append((queue.appendleft, (value,)))
        return value

    def rollback(self) -> None:
        for undo, args in reversed(self._undo):
            undo(*args)
        for restore, record, values in self._saved.values():
            if restore is not None:  # not fresh
                restore(record, values)
        self.clear()

    def clear(self) -> None:
        if self._saved:
            self._saved.clear()
        if self._undo:
            self._undo.clear()


def _restore_key(table: dict[Any, Any], key: Any, old: Any) -> None:
    if old is _MISSING:
        table.pop(key, None)
    else:
        table[key] = old
