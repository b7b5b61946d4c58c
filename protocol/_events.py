"""Events: the ordered stream the supervisor publishes.

Each event is a frozen msgspec Struct tagged by its ``type`` (the wire name from the contract). Every
event carries ``seq``, strictly increasing per supervisor. Fields that may be absent on the wire
(``error``, ``superseded_by``...) default to ``None`` and are omitted when encoded; fields the
contract always shows (``reason``, ``origin``...) have no default, so they are always present.
"""

from __future__ import annotations

import msgspec

from run_supervisor.protocol._enums import (
    CloseAction,
    CloseMode,
    CloseResult,
    InterruptReason,
    Outcome,
    Phase,
    SessionStatus,
    StepKind,
)
from run_supervisor.protocol._parts import PartSnapshot

__all__ = [
    "ActionResult",
    "Event",
    "InstanceClosed",
    "InstanceStarted",
    "LifecycleCompleted",
    "LifecycleDeferred",
    "LifecycleRequested",
    "RunFinished",
    "RunQueued",
    "RunStarted",
    "SessionStatusChanged",
    "StepFinished",
    "StepStarted",
]


class _Event(msgspec.Struct, frozen=True, tag_field="type", omit_defaults=True, kw_only=True):
    seq: int


class InstanceStarted(_Event, frozen=True, tag="instance.started"):
    directory: str
    generation: int


class InstanceClosed(_Event, frozen=True, tag="instance.closed"):
    directory: str
    generation: int
    error: str | None = None
    """Set when the dispose hook raised or overran its budget; the instance counts as closed anyway."""


class RunQueued(_Event, frozen=True, tag="run.queued"):
    run: str
    session: str


class RunStarted(_Event, frozen=True, tag="run.started"):
    run: str
    session: str
    directory: str
    generation: int


class StepStarted(_Event, frozen=True, tag="run.step.started"):
    run: str
    step: str
    kind: StepKind


class StepFinished(_Event, frozen=True, tag="run.step.finished"):
    run: str
    step: str
    kind: StepKind


class RunFinished(_Event, frozen=True, tag="run.finished"):
    run: str
    outcome: Outcome
    reason: InterruptReason | None
    origin: str | None
    action: str | None
    phase: Phase | None
    error: str | None = None
    abandoned: bool = False
    """The body ignored its cancellation past the shutdown deadline and was left behind."""
    generation: int | None = None
    """The instance generation the run was pinned to (None: it never started)."""
    parts: tuple[PartSnapshot, ...] = ()
    """Its tool parts as they ended: what a UI needs to draw the tool cards."""


class SessionStatusChanged(_Event, frozen=True, tag="session.status"):
    session: str
    status: SessionStatus


class LifecycleRequested(_Event, frozen=True, tag="lifecycle.requested"):
    action: str
    do: CloseAction
    mode: CloseMode
    origin: str
    directories: tuple[str, ...]
    tag: str | None = None
    """The requester's own correlation tag, echoed on every event of this action."""


class LifecycleDeferred(_Event, frozen=True, tag="lifecycle.deferred"):
    action: str
    pending_directories: tuple[str, ...]
    blocking_runs: tuple[str, ...]
    tag: str | None = None


class LifecycleCompleted(_Event, frozen=True, tag="lifecycle.completed"):
    action: str
    superseded_by: str | None = None
    error: str | None = None
    abandoned_runs: tuple[str, ...] = ()
    tag: str | None = None


class ActionResult(_Event, frozen=True, tag="action.result"):
    action: str
    result: CloseResult
    tag: str | None = None


Event = (
    InstanceStarted
    | InstanceClosed
    | RunQueued
    | RunStarted
    | StepStarted
    | StepFinished
    | RunFinished
    | SessionStatusChanged
    | LifecycleRequested
    | LifecycleDeferred
    | LifecycleCompleted
    | ActionResult
)
