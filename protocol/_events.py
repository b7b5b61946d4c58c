"""Events: the ordered stream the supervisor publishes.

Each event is a frozen msgspec Struct tagged by its ``type`` (the wire name from the contract). Every
event carries ``seq``, strictly increasing per supervisor. One rule for absent values on the wire:
every field is always present, ``null`` (or ``[]``) when empty, so a client never meets a missing key.
A run is named by ``run_id`` and a lifecycle action by ``action_id`` everywhere (events, answers,
snapshots, handles, contexts).
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
    "RunRecovered",
    "RunStarted",
    "SessionStatusChanged",
    "StepFinished",
    "StepStarted",
]


class _Event(msgspec.Struct, frozen=True, tag_field="type", kw_only=True):
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
    run_id: str
    session: str


class RunStarted(_Event, frozen=True, tag="run.started"):
    run_id: str
    session: str
    directory: str
    generation: int
    resume_of: str | None = None
    """The finished run this one continues (``start_run(..., resume_of=...)``), if any."""


class StepStarted(_Event, frozen=True, tag="run.step.started"):
    run_id: str
    step: str
    kind: StepKind


class StepFinished(_Event, frozen=True, tag="run.step.finished"):
    run_id: str
    step: str
    kind: StepKind


class RunFinished(_Event, frozen=True, tag="run.finished"):
    run_id: str
    outcome: Outcome
    reason: InterruptReason | None
    origin: str | None
    action_id: str | None
    phase: Phase | None
    error: str | None = None
    abandoned: bool = False
    """The body ignored its cancellation past the shutdown deadline and was left behind."""
    generation: int | None = None
    """The instance generation the run was pinned to (None: it never started)."""
    parts: tuple[PartSnapshot, ...] = ()
    """Its tool parts as they ended: what a UI needs to draw the tool cards."""


class RunRecovered(_Event, frozen=True, tag="run.recovered"):
    """A run found unfinished in the journal at start: the process that ran it died. It ends
    ``interrupted`` with reason ``crash``; published before the supervisor accepts any request."""

    run_id: str
    session: str
    directory: str | None
    generation: int | None
    outcome: Outcome
    reason: InterruptReason
    origin: str
    phase: Phase | None
    parent_run_id: str | None
    parts: tuple[PartSnapshot, ...]
    """Its tool parts, settled: an unfinished one is ``interrupted``, and ``tool_started`` tells the
    UI whether the tool may have run."""
    withdrawn_asks: tuple[str, ...]
    """Asks that were waiting for the user; they can no longer be answered."""


class SessionStatusChanged(_Event, frozen=True, tag="session.status"):
    session: str
    status: SessionStatus


class LifecycleRequested(_Event, frozen=True, tag="lifecycle.requested"):
    action_id: str
    do: CloseAction
    mode: CloseMode
    origin: str
    directories: tuple[str, ...]
    tag: str | None = None
    """The requester's own correlation tag, echoed on every event of this action."""


class LifecycleDeferred(_Event, frozen=True, tag="lifecycle.deferred"):
    action_id: str
    pending_directories: tuple[str, ...]
    blocking_runs: tuple[str, ...]
    tag: str | None = None


class LifecycleCompleted(_Event, frozen=True, tag="lifecycle.completed"):
    action_id: str
    superseded_by: str | None = None
    error: str | None = None
    abandoned_runs: tuple[str, ...] = ()
    tag: str | None = None


class ActionResult(_Event, frozen=True, tag="action.result"):
    action_id: str
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
    | RunRecovered
    | SessionStatusChanged
    | LifecycleRequested
    | LifecycleDeferred
    | LifecycleCompleted
    | ActionResult
)
