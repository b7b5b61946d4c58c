"""What the decision core asks its shell to do. The shell (``actors``) carries these out in order."""

from __future__ import annotations

from typing import Any

import msgspec

from run_supervisor.protocol._enums import InterruptReason
from run_supervisor.protocol._events import Event
from run_supervisor.protocol._payloads import FormAnswer
from run_supervisor.protocol._requests import CloseOutcome, RequestOutcome

__all__ = [
    "AbandonRun",
    "ArmDeadline",
    "Command",
    "DeliverAnswer",
    "DisarmDeadline",
    "DisposeInstance",
    "Emit",
    "LoadInstance",
    "ReleaseRun",
    "Reply",
    "ShutdownComplete",
    "SignalInterrupt",
    "SpawnRun",
    "StartGraceTimer",
    "StartInterruptGrace",
    "StopInterruptGrace",
]


class Emit(msgspec.Struct, frozen=True):
    event: Event


class Reply(msgspec.Struct, frozen=True):
    reply_to: Any
    """The opaque reply handle the shell passed in with the request."""
    answer: CloseOutcome | RequestOutcome


class SpawnRun(msgspec.Struct, frozen=True):
    run_id: str
    session: str
    directory: str
    generation: int


class SignalInterrupt(msgspec.Struct, frozen=True):
    run_id: str
    reason: InterruptReason


class DeliverAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """Wake the body waiting on an ask with what became of it."""

    run_id: str
    ask_id: str
    approved: bool = False
    message: str | None = None
    answer: FormAnswer | None = None
    dismissed: bool = False
    """A form dismissed with a message (without one, the run is interrupted instead)."""
    withdrawn: bool = False
    """The body stopped waiting and no reply came first: the ask is withdrawn."""


class AbandonRun(msgspec.Struct, frozen=True):
    """The interrupt's grace passed (the shutdown's, or the run's own): stop waiting for this body
    (it keeps its thread or task, if it insists; the run is already reported finished)."""

    run_id: str


class ReleaseRun(msgspec.Struct, frozen=True):
    """The run has finished: its actor may stop."""

    run_id: str


class LoadInstance(msgspec.Struct, frozen=True):
    directory: str
    generation: int


class DisposeInstance(msgspec.Struct, frozen=True):
    directory: str
    generation: int
    budget_ms: int
    """How long the dispose hook may take before the instance counts as closed with an error."""
    report: bool = True
    """False at shutdown's deadline: the core already counts the instance closed; run the hook
    best-effort and do not report back."""


class StartGraceTimer(msgspec.Struct, frozen=True):
    action_id: str
    grace_ms: int


class ArmDeadline(msgspec.Struct, frozen=True):
    """The run became active with a deadline: report ``DeadlineExpired(run_id)`` ``deadline_ms``
    from now, unless ``DisarmDeadline`` comes first."""

    run_id: str
    deadline_ms: int


class DisarmDeadline(msgspec.Struct, frozen=True):
    """The run finished: its deadline timer is not needed any more (an expiry that still arrives
    is ignored)."""

    run_id: str


class StartInterruptGrace(msgspec.Struct, frozen=True):
    """The run was interrupted and its body gets a grace of its own (``protocol.INTERRUPT_GRACE``):
    report ``InterruptGraceExpired(run_id)`` ``grace_ms`` from now, unless ``StopInterruptGrace``
    comes first."""

    run_id: str
    grace_ms: int


class StopInterruptGrace(msgspec.Struct, frozen=True):
    """The run finished (its body stopped in time, or it was abandoned): its grace timer is not
    needed any more (an expiry that still arrives is ignored)."""

    run_id: str


class ShutdownComplete(msgspec.Struct, frozen=True):
    action_id: str
    outcome: CloseOutcome
    """The shutdown's final outcome: what any later shutdown request is answered with."""


Command = (
    Emit
    | Reply
    | SpawnRun
    | SignalInterrupt
    | DeliverAnswer
    | AbandonRun
    | ReleaseRun
    | LoadInstance
    | DisposeInstance
    | StartGraceTimer
    | ArmDeadline
    | DisarmDeadline
    | StartInterruptGrace
    | StopInterruptGrace
    | ShutdownComplete
)
