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
    AskKind,
    CloseAction,
    CloseMode,
    CloseResult,
    InterruptReason,
    LoadCause,
    Outcome,
    PartState,
    Phase,
    QueuePolicy,
    ReloadPolicy,
    ResumeVerdict,
    SessionStatus,
    StepKind,
    WithdrawReason,
)
from run_supervisor.protocol._parts import PartSnapshot
from run_supervisor.protocol._payloads import AskPayload, FormAnswer

__all__ = [
    "ActionResult",
    "AskDismissed",
    "AskReplied",
    "AskRequested",
    "AskWithdrawn",
    "Event",
    "InstanceClosed",
    "InstanceReady",
    "InstanceStarted",
    "LifecycleCompleted",
    "LifecycleConfirmed",
    "LifecycleDeferred",
    "LifecycleRequested",
    "RunFinished",
    "RunPartUpdated",
    "RunQueued",
    "RunRecovered",
    "RunStalled",
    "RunStarted",
    "RunUnstalled",
    "SessionStatusChanged",
    "StepFinished",
    "StepStarted",
]


class _Event(msgspec.Struct, frozen=True, tag_field="type", kw_only=True):
    seq: int


class InstanceStarted(_Event, frozen=True, tag="instance.started"):
    directory: str
    generation: int
    fingerprint: str | None = None
    """What it is loaded with (from ``load``/``preload``, or the last close that carried one)."""
    cause: LoadCause = LoadCause.LOAD
    """Why it was loaded now: the host loaded it, a run needed it, a reload loaded it at once, or the
    last old generation closed after a lazy reload."""
    epoch: int | None = None
    """The life of the supervisor this generation belongs to (``Supervisor.epoch``: the journal's
    boot, or its PostgreSQL lease epoch; null without a journal): generation 1 of one life and
    generation 1 of the next are told apart by it."""


class InstanceReady(_Event, frozen=True, tag="instance.ready"):
    """The load hook of this generation returned: its caches are usable (a run reading them no
    longer waits for the load). Sent once, after its ``instance.started`` and before its
    ``instance.closed``; never for a load that raised or overran its budget (the runs that read it
    fail with that error), nor for a generation that closed before its load was reported. A
    generation already waiting to close (a deferred close on its active runs) is still said ready:
    those runs use its caches."""

    directory: str
    generation: int
    epoch: int | None = None
    """The life of the supervisor this generation belongs to (see ``instance.started``)."""


class InstanceClosed(_Event, frozen=True, tag="instance.closed"):
    directory: str
    generation: int
    error: str | None = None
    """Set when the dispose hook raised or overran its budget; the instance counts as closed anyway."""
    epoch: int | None = None
    """The life of the supervisor this generation belongs to (``Supervisor.epoch``: the journal's
    boot, or its PostgreSQL lease epoch; null without a journal): generation 1 of one life and
    generation 1 of the next are told apart by it."""


class RunQueued(_Event, frozen=True, tag="run.queued"):
    run_id: str
    session: str
    parent_run_id: str | None = None
    """The run it is a child of (``start_run(..., parent_run_id=...)``), if any."""
    queue_policy: QueuePolicy = QueuePolicy.QUEUE
    """The policy it was queued under (its start's, or its session's default): ``queue`` or
    ``coalesce`` (a ``reject_if_busy`` start is never queued)."""
    resume_of: str | None = None
    """The finished run it continues (``start_run(..., resume_of=...)``), if any."""
    resume_count: int = 0
    """How many times in a row its turn has been continued after a crash (see ``run.started``)."""


class RunStarted(_Event, frozen=True, tag="run.started"):
    run_id: str
    session: str
    directory: str
    generation: int
    resume_of: str | None = None
    """The finished run this one continues (``start_run(..., resume_of=...)``), if any."""
    parent_run_id: str | None = None
    """The run it is a child of: it runs on its parent's generation."""
    deadline_ms: int | None = None
    """Its deadline, counted from this event: past it the run is interrupted (``timeout``,
    origin ``deadline``). Null: none."""
    epoch: int | None = None
    """The life of the supervisor its ``generation`` belongs to (see ``instance.started``)."""
    resume_count: int = 0
    """How many times in a row this turn has been continued after a crash: one more than the run it
    resumes if that run ended ``crash``, else 0. The resume policy offers a recovered run only while
    this is below its budget (``ResumeVerdict``)."""


class _StepEvent(_Event, frozen=True):
    # What a step's start and its end both say (``run.step.started``, ``run.step.finished``).
    run_id: str
    session: str
    """The session of its run: a client filters by session without a table of runs."""
    step: str
    kind: StepKind
    tool: str | None = None
    """The tool of the step's tool part (None for a step outside one, e.g. ``model``)."""
    call_id: str | None = None


class StepStarted(_StepEvent, frozen=True, tag="run.step.started"):
    pass


class StepFinished(_StepEvent, frozen=True, tag="run.step.finished"):
    pass


class RunPartUpdated(_Event, frozen=True, tag="run.part.updated"):
    """A tool part changed: everything a UI needs to redraw its card, and what to tell the model.

    Sent on every change (a new part, each state move, an ask raised on it or answered, its end
    at the run's end), never twice for the same content.
    """

    run_id: str
    session: str
    """The session of its run: a client filters by session without a table of runs."""
    call_id: str
    tool: str
    state: PartState
    phase: Phase | None
    """Its phase now (``generating``, ``prepared``, ``running``); once interrupted, the phase it was
    in; null once it completed or failed."""
    tool_started: bool
    """The tool began its work. False while (and if) a permission that gates it was not granted."""
    label: str
    """The card's one line, e.g. "Did not run: the user declined bash"."""
    note: str | None
    """Model-visible text for an interrupted or declined part (null otherwise)."""
    message: str | None
    reason: InterruptReason | None
    origin: str | None
    ask_id: str | None
    """The open ask this call waits on (null when none)."""
    waiting_for: AskKind | None
    declined: AskKind | None
    """``permission``: the user declined this call; ``form``: the user dismissed its form."""


class RunFinished(_Event, frozen=True, tag="run.finished"):
    run_id: str
    session: str
    """The session of its run: a client filters by session without a table of runs."""
    outcome: Outcome
    reason: InterruptReason | None
    origin: str | None
    action_id: str | None
    phase: Phase | None
    error: str | None = None
    abandoned: bool = False
    """The body ignored its interrupt past its grace (the shutdown's, or the run's own) and was
    left behind: its thread or task may still be running; its later reports are refused."""
    generation: int | None = None
    """The instance generation the run was pinned to (None: it never started)."""
    parts: tuple[PartSnapshot, ...] = ()
    """Its tool parts as they ended: what a UI needs to draw the tool cards."""
    retry_attempt: int | None = None
    """Whenever the run retried (it ended during a retry's backoff, or after one): the last
    attempt its body announced (``session.status`` ``retry``), or the one that exhausted its retry
    budget..."""
    retry_message: str | None = None
    """...and that retry's message (the provider's error): a turn stopped while retrying keeps it."""
    epoch: int | None = None
    """The life of the supervisor its ``generation`` belongs to (see ``instance.started``; null
    with ``generation``)."""


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
    epoch: int | None = None
    """The life its ``generation`` belonged to: the process that died (null when the journal did
    not record it, or the run never started)."""
    resume_count: int = 0
    """How many times in a row its turn had been continued after a crash (``run.started``'s)."""
    resume: ResumeVerdict | None = None
    """What the resume policy decided: ``offered`` (the host's resume callback is offered it once)
    or ``exhausted`` (its session's resume budget is spent: the turn ends here). Null: no resume
    policy, or a child run."""


class SessionStatusChanged(_Event, frozen=True, tag="session.status"):
    session: str
    status: SessionStatus
    attempt: int | None = None
    """``retry`` only: the attempt its active run reported (``ctx.retrying``); else null."""
    message: str | None = None
    """``retry`` only: why it retries (the provider's error); else null."""
    next_at_ms: int | None = None
    """``retry`` only: when the next attempt is due, Unix epoch milliseconds (null: unknown)."""


class LifecycleRequested(_Event, frozen=True, tag="lifecycle.requested"):
    action_id: str
    do: CloseAction
    mode: CloseMode
    origin: str
    directories: tuple[str, ...]
    tag: str | None = None
    """The requester's own correlation tag, echoed on every event of this action."""
    fingerprint: str | None = None
    """The close's ``fingerprint`` (the no-op gate), if it carried one."""
    reload_policy: ReloadPolicy | None = None
    """For a ``reload``: the policy in force (``lazy`` or ``eager``); null for the other closes."""


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


class _AskEvent(_Event, frozen=True):
    # What every event of an ask opens with: the ask, its run, and its run's session.
    ask_id: str
    run_id: str
    session: str
    """The session of its run: a client filters by session without a table of runs."""


class AskRequested(_AskEvent, frozen=True, tag="ask.requested"):
    """A body asks the user. The ask is registered before this event is published: a reply sent
    as soon as it arrives (addressed by ``ask_id``) always finds it."""

    kind: AskKind
    tool: str | None
    call_id: str | None
    """The tool part it belongs to (null when it is not tied to one)."""
    payload: AskPayload


class AskReplied(_AskEvent, frozen=True, tag="ask.replied"):
    """A permission was approved or rejected, or a form answered."""

    kind: AskKind
    approved: bool
    """Permission: the decision; a form answer counts as approved."""
    message: str | None
    """Permission rejected: the user's feedback (model-visible), or null."""
    answer: FormAnswer | None
    """Form: the answer, as given (one entry per question, or one string: ``AnswerForm.answer``)."""
    tag: str | None = None
    always: bool = False
    """Permission: approved "always" (its ``payload.key`` is granted in its session from now on)."""
    granted: str | None = None
    """Approved by its session's "always" grant for this key (``payload.key``): no reply of its own."""


class AskDismissed(_AskEvent, frozen=True, tag="ask.dismissed"):
    """A form was dismissed: with a ``message`` it is model-visible feedback and the run goes on;
    without one the run is interrupted (``form_dismissed``)."""

    message: str | None
    tag: str | None = None


class AskWithdrawn(_AskEvent, frozen=True, tag="ask.withdrawn"):
    """Nobody waits for this ask any more; a UI removes its prompt. A late reply is rejected."""

    kind: AskKind
    reason: WithdrawReason
    interrupt_reason: InterruptReason | None
    """For ``interrupted``: the run's interrupt reason."""


class RunStalled(_Event, frozen=True, tag="run.stalled"):
    """An active run made no progress (no step, tool-part change, ask or heartbeat) for its stall
    setting: its body may hang (a provider stream that stopped). A host may offer to interrupt it,
    e.g. ``confirm_close`` of an action listed in ``holding``."""

    run_id: str
    session: str
    idle_ms: int
    """How long it had made no progress when flagged (measured by the shell)."""
    holding: tuple[str, ...]
    """The pending lifecycle actions waiting for it (their ``action_id``), in creation order."""


class RunUnstalled(_Event, frozen=True, tag="run.unstalled"):
    """A stalled run is no longer flagged: it made progress again (``progress``), or it was
    interrupted or ended (``progress`` false; ``run.finished`` follows when its body stops)."""

    run_id: str
    session: str
    """The session of its run: a client filters by session without a table of runs."""
    progress: bool


class LifecycleConfirmed(_Event, frozen=True, tag="lifecycle.confirmed"):
    """A pending maintenance close was confirmed (``confirm_close``): the runs it waited for are
    interrupted (``lifecycle_interrupt``, this ``action_id``, ``origin``)."""

    action_id: str
    origin: str
    interrupted_runs: tuple[str, ...]
    tag: str | None = None
    """The confirm request's own tag."""


Event = (
    InstanceStarted
    | InstanceReady
    | InstanceClosed
    | RunQueued
    | RunStarted
    | StepStarted
    | StepFinished
    | RunPartUpdated
    | RunFinished
    | RunRecovered
    | SessionStatusChanged
    | LifecycleRequested
    | LifecycleDeferred
    | LifecycleCompleted
    | ActionResult
    | AskRequested
    | AskReplied
    | AskDismissed
    | AskWithdrawn
    | RunStalled
    | RunUnstalled
    | LifecycleConfirmed
)
"""Every event the supervisor publishes, tagged by ``type`` on the wire (``run_supervisor.protocol``
has each struct)."""
