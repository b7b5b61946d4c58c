"""Requests a host sends, the reports a run body makes, and the answers the supervisor gives.

Requests are frozen, tagged msgspec Structs so a non-Python host can send them as JSON or msgpack
(see ``protocol.decode_request``). New fields always get defaults so old senders stay valid; a field
a request does not have is refused (``"deadline": 200`` for ``deadline_ms`` is an error naming the field,
never a request run without the deadline the sender meant).
"""

from __future__ import annotations

import msgspec

from run_supervisor.protocol._enums import (
    AskKind,
    CloseAction,
    CloseMode,
    CloseResult,
    InterruptReason,
    Outcome,
    PartState,
    Phase,
    QueuePolicy,
    RejectCode,
    ReloadPolicy,
    RequestResult,
    RunState,
    SessionStatus,
    ShutdownReason,
    StepKind,
    WithdrawReason,
)
from run_supervisor.protocol._parts import PartSnapshot
from run_supervisor.protocol._payloads import AskPayload, AskSnapshot, FormAnswer

__all__ = [
    "AnswerForm",
    "AskRaised",
    "BodyEnded",
    "CancelRun",
    "CancelSession",
    "CloseOutcome",
    "CloseRequest",
    "ConfirmClose",
    "DeadlineExpired",
    "DeleteSession",
    "DismissForm",
    "DisposeDone",
    "GraceExpired",
    "Heartbeat",
    "InterruptGraceExpired",
    "LoadDone",
    "NoProgress",
    "PartReport",
    "PartSnapshot",
    "RecoveredRun",
    "ReplyPermission",
    "Request",
    "RequestOutcome",
    "RetryBudget",
    "RetryReport",
    "RunSnapshot",
    "SetQueuePolicy",
    "Shutdown",
    "StartRun",
    "StepReport",
    "WithdrawAsk",
]


class RetryBudget(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How much retrying a run may do before it is interrupted (reason ``timeout``, origin
    ``retry_budget``): a retry report past either bound exhausts it (``protocol.retry_budget_exhausted``)."""

    attempts: int | None = None
    """Retries allowed (a report of attempt ``attempts + 1`` exhausts it; 0: none). None: unbounded."""
    backoff_ms: int | None = None
    """Total backoff allowed, summed over the reports' ``backoff_ms``. None: unbounded."""


class _Request(msgspec.Struct, frozen=True, tag_field="type", kw_only=True, forbid_unknown_fields=True):
    tag: str | None = None
    """The requester's own correlation tag: echoed on the lifecycle events of a close, and named
    as the ``action`` of an interrupt a cancel, a rejection or a dismissal causes."""


class StartRun(_Request, frozen=True, tag="start_run"):
    run_id: str
    session: str
    directory: str
    resume_of: str | None = None
    """The id of a finished run (typically one recovered after a crash) that this run continues;
    echoed on ``run.started`` so a UI and the journal can link the two."""
    parent_run_id: str | None = None
    """A child run (a subagent, a background job) of this active run: pinned to the parent's
    generation, in the parent's directory but in a session of its own; interrupted with its parent
    (same reason, origin and action); the parent is reported finished only after its children."""
    deadline_ms: int | None = None
    """The run's deadline, counted from when it becomes active (``run.started``; time spent queued
    does not count): past it, the run is interrupted with reason ``timeout`` and origin
    ``deadline``. None: no deadline."""
    queue_policy: QueuePolicy | None = None
    """What this start does while its session is busy (``protocol.QUEUE_RULES``): ``queue``,
    ``coalesce`` or ``reject_if_busy``. None: the session's default (``SetQueuePolicy``), else the
    supervisor's (``SupervisorConfig.queue_policy``; ``queue`` unless set)."""
    retry_budget: RetryBudget | None = None
    """This run's retry budget; None: the supervisor's (``SupervisorCore(retry_budget=)``; none
    there: retries are the body's business)."""
    interrupt_grace_ms: int | None = None
    """How long this run's body may go on once the run is interrupted (a cancel, a decline, a
    confirmed close, its deadline) before the run is finished without it: ``interrupted`` with its
    reason, ``abandoned = true``, its session moving on and its body's later reports refused
    (``protocol.INTERRUPT_GRACE``). None: the supervisor's (``SupervisorCore(interrupt_grace_ms=)``).
    0 abandons at once. A shutdown's interrupts use the shutdown's grace."""
    stall_after_ms: int | None = None
    """This run's own stall setting: flagged stalled (``run.stalled``) after this long without
    progress; None: the supervisor's ``stall_after_ms``. Measured by the shell (the core reads no
    clock and ignores it)."""


class CancelRun(_Request, frozen=True, tag="cancel"):
    run_id: str
    origin: str = "user"
    reason: InterruptReason = InterruptReason.USER_CANCEL
    """``user_cancel``, or ``timeout`` for a host's watchdog (an external run whose client stopped
    reporting); any other reason is rejected as invalid."""
    grace_ms: int | None = None
    """How long the body (and its children's) may go on before the run is abandoned; None: the run's
    ``interrupt_grace_ms``, else the supervisor's."""


class CancelSession(_Request, frozen=True, tag="cancel_session"):
    """Stop a whole session: its queued runs end unstarted and its active run is interrupted, all
    with one reason, one origin and one action id (``cs-N``, in the answer's ``action_id``; a run
    already being interrupted keeps its first reason). An idle or unknown session: ``ok``, nothing
    to stop."""

    session: str
    origin: str = "user"
    reason: InterruptReason = InterruptReason.USER_CANCEL
    """As for ``CancelRun``: ``user_cancel`` or ``timeout``."""
    grace_ms: int | None = None
    """As for ``CancelRun``: the interrupted body's grace before its run is abandoned."""


class DeleteSession(_Request, frozen=True, tag="delete_session"):
    """Forget a session: its policy and its grants go, and it is unknown from then on. Refused
    ``session_busy`` while it has an active or queued run, unless ``confirm``: then it is cancelled
    first (as ``CancelSession``, which withdraws its open asks) and forgotten once its active run has
    ended."""

    session: str
    confirm: bool = False
    origin: str = "user"
    grace_ms: int | None = None


class CloseRequest(_Request, frozen=True, tag="close"):
    do: CloseAction
    mode: CloseMode
    origin: str
    directories: tuple[str, ...] = ()
    """For ``dispose`` and ``reload``: exactly one directory. Ignored by ``dispose_all`` and
    ``invalidate_config``, which cover every loaded directory."""
    fingerprint: str | None = None
    """What the close would change to, as the host digests it (for ``invalidate_config``: the new
    config's digest). Equal to the fingerprint every live instance it covers was loaded with: the
    close is answered ``noop`` and touches nothing. Otherwise the close goes ahead and instances
    loaded from now on in its directories record this fingerprint (the no-op gate)."""
    grace_ms: int | None = None
    """For a mode that interrupts (``user_confirmed_interrupt``): how long the bodies it interrupts
    may go on before their runs are abandoned; None: each run's ``interrupt_grace_ms``, else the
    supervisor's."""
    reload_policy: ReloadPolicy | None = None
    """For ``reload`` only: when the next generation loads (``lazy``: when a run needs it or the old
    one has closed; ``eager``: at once). None: the supervisor's own (``SupervisorCore(reload_policy=)``,
    ``SupervisorConfig.reload_policy``). Given for another close, the request is rejected."""


class Shutdown(_Request, frozen=True, tag="shutdown"):
    reason: ShutdownReason = ShutdownReason.SHUTDOWN
    """``shutdown`` or ``test_teardown`` (or ``timeout``, for a watchdog tearing down what hung): the
    reason every interrupted run carries."""
    origin: str | None = None
    """What asked; by default the reason's own name."""
    grace_ms: int = 1000


class ReplyPermission(_Request, frozen=True, tag="reply_permission"):
    """Answer a permission ask. Address it by ``ask_id`` (from ``ask.requested``); or, as a
    convenience, by ``run_id`` when that run has exactly one open permission ask. Exactly one of
    the two is given."""

    approve: bool = msgspec.field(name="approved")
    """Approve (True) or reject (False). On the wire it is ``approved``, as the events say
    (``ask.replied``, ``external.answer``); the hosts still take the old ``approve`` (deprecated)."""
    ask_id: str | None = None
    run_id: str | None = None
    always: bool = False
    """With ``approve=True``: grant the ask's ``payload.key`` for its session -- its other open
    permission asks with that key are approved now, its later ones as they come, until the session is
    deleted (``DeleteSession``). Rejected when the ask declares no key."""
    message: str | None = None
    """With ``approve=False``: a message is model-visible feedback and the run goes on; without one
    the run ends ``interrupted`` / ``permission_rejected`` (and its other open asks are withdrawn)."""


class AnswerForm(_Request, frozen=True, tag="answer_form"):
    """Answer a form; addressed like ``ReplyPermission`` (``ask_id``, or ``run_id`` with exactly one
    open form)."""

    answer: FormAnswer
    """One entry per question, in order (``["main", ["lint", "tests"]]``: a list of the picks for a
    ``multiple`` question); or one string for the whole form. A list that does not fit the form's
    questions is rejected ``invalid_request``, naming the entry: its count, or a list given for a
    question that is not ``multiple``."""
    ask_id: str | None = None
    run_id: str | None = None


class DismissForm(_Request, frozen=True, tag="dismiss_form"):
    """Dismiss a form; addressed like ``ReplyPermission``."""

    ask_id: str | None = None
    run_id: str | None = None
    message: str | None = None
    """A message is model-visible feedback and the run goes on; without one the run ends
    ``interrupted`` / ``form_dismissed`` (and its other open asks are withdrawn)."""


class SetQueuePolicy(_Request, frozen=True, tag="set_queue_policy"):
    """Set a session's default queue policy: what its starts that name none do while it is busy.
    Applies to later starts only (queued runs keep theirs). A session need not exist yet; the
    default is remembered until set back to the supervisor's own (``SupervisorConfig.queue_policy``)."""

    session: str
    queue_policy: QueuePolicy


class ConfirmClose(_Request, frozen=True, tag="confirm_close"):
    """Turn a pending maintenance close into a confirmed one: its blocking runs are interrupted now
    (``lifecycle_interrupt``, the action's id as their ``action_id``), as a ``user_confirmed_interrupt``
    close would; it then completes as their bodies stop. Answered with the action's outcome (its
    result, once announced, stays: typically ``deferred``; ``interrupted_runs`` lists the runs this
    confirm interrupted). Rejected ``unknown_action``, ``action_already_completed`` or ``not_confirmable``."""

    action_id: str
    origin: str | None = None
    """Who confirmed; the interrupted runs carry it as their ``origin``. By default the action's own
    origin (the interrupt names the close it served)."""
    grace_ms: int | None = None
    """How long the bodies it interrupts may go on before their runs are abandoned; None: each run's
    ``interrupt_grace_ms``, else the supervisor's."""


Request = (
    StartRun
    | CancelRun
    | CloseRequest
    | Shutdown
    | ReplyPermission
    | AnswerForm
    | DismissForm
    | SetQueuePolicy
    | ConfirmClose
    | CancelSession
    | DeleteSession
)


# --- What run bodies and instances report (internal inputs of the core) ---------------------------


class StepReport(msgspec.Struct, frozen=True):
    """A body entered (``finished=False``) or left (``finished=True``) a step."""

    run_id: str
    step: str
    kind: StepKind
    finished: bool
    tool: str | None = None
    call_id: str | None = None


class PartReport(msgspec.Struct, frozen=True):
    """A tool part moved: ``state`` is the state it moved to (a new part starts ``pending``).

    ``call_id`` names the part (unique within the run); without one a new part gets ``call-N``
    and a move applies to the run's latest part."""

    run_id: str
    tool: str
    state: PartState
    message: str | None = None
    call_id: str | None = None


class AskRaised(msgspec.Struct, frozen=True, kw_only=True):
    """The body asks the user (it registered its own wait for ``ask_id`` first)."""

    run_id: str
    ask_id: str
    kind: AskKind
    payload: AskPayload
    tool: str | None = None
    call_id: str | None = None
    """The tool part it belongs to; None: the run's latest unfinished part, if any."""


class WithdrawAsk(msgspec.Struct, frozen=True, kw_only=True):
    """The body stops waiting for an ask (its timeout ran out, or it withdrew it). If a reply was
    accepted first, that reply stands and is on its way to the body; otherwise the ask is withdrawn
    and the body is told so."""

    run_id: str
    ask_id: str
    reason: WithdrawReason


class Heartbeat(msgspec.Struct, frozen=True):
    """The body is alive and making progress (``ctx.heartbeat()``) while its run is flagged stalled:
    the flag is cleared. (Heartbeats of a run not flagged never reach the core: the shell only
    records the time.)"""

    run_id: str


class NoProgress(msgspec.Struct, frozen=True):
    """From the shell's timer: the run has made no progress for ``idle_ms`` (at least its stall
    setting). The core flags it stalled if it is active and waits for no answer."""

    run_id: str
    idle_ms: int
    now_ms: int | None = None
    """When the shell measured, Unix epoch milliseconds (None: not said). The core compares it with
    an announced retry's ``next_at_ms``: a run waiting out its backoff is not stalled."""


class BodyEnded(msgspec.Struct, frozen=True):
    """The body's worker returned (``error=None``) or raised (``error`` is its message)."""

    run_id: str
    error: str | None = None


class DisposeDone(msgspec.Struct, frozen=True):
    directory: str
    generation: int
    error: str | None = None


class LoadDone(msgspec.Struct, frozen=True):
    """The load hook of ``directory``'s ``generation`` ended: it returned (``error`` None: its caches
    are usable, announced by ``instance.ready``), or it raised or overran its budget (``error``)."""

    directory: str
    generation: int
    error: str | None = None


class RecoveredRun(msgspec.Struct, frozen=True, kw_only=True):
    """A run a dead process left unfinished, as its journal recorded it; already settled: its open
    tool parts are ``interrupted`` (``tool_started`` says whether the tool may have run)."""

    run_id: str
    session: str
    directory: str | None
    generation: int | None
    """None: it was still queued, it never started."""
    parent_run_id: str | None = None
    phase: Phase | None = None
    parts: tuple[PartSnapshot, ...] = ()
    withdrawn_asks: tuple[str, ...] = ()
    """The asks that were open at the crash: the crash withdraws them."""
    asks: tuple[AskSnapshot, ...] = ()
    """Every ask of the run the journal described, as it ended (those open at the crash
    ``withdrawn``, reason ``interrupted``): a late reply after the restart is told what became of its
    ask, as before the crash."""
    epoch: int | None = None
    """The life of the supervisor its ``generation`` belonged to, as the journal recorded it (None:
    a journal from before epochs were recorded, or a run that never started)."""
    resume_count: int = 0
    """How many times in a row its turn had been continued after a crash (``run.started``'s
    ``resume_count``, as the journal recorded it)."""


class GraceExpired(msgspec.Struct, frozen=True):
    action_id: str


class InterruptGraceExpired(msgspec.Struct, frozen=True):
    """The shell's timer for a run's own grace (``StartInterruptGrace``) fired: a run still being
    interrupted is abandoned (``protocol.GRACE_EXPIRY``); otherwise ignored."""

    run_id: str


class DeadlineExpired(msgspec.Struct, frozen=True):
    """The shell's timer for a run's deadline (``ArmDeadline``) fired. Ignored unless the run is
    still active (``protocol.DEADLINE_EXPIRY``)."""

    run_id: str


class RetryReport(msgspec.Struct, frozen=True, kw_only=True):
    """A body is retrying (a provider call failed and will be tried again): its session's status
    becomes ``retry`` until the attempt goes on."""

    run_id: str
    attempt: int
    """Which attempt comes next (1 for the first retry), as the body counts them."""
    message: str
    """Why (the provider's error), for the user."""
    next_at_ms: int | None = None
    """When the next attempt is due, in Unix epoch milliseconds (None: unknown)."""
    backoff_ms: int | None = None
    """How long the body waits before that attempt (None: not said; counts 0 against a budget's
    ``backoff_ms``)."""


# --- Answers -----------------------------------------------------------------------------------


class RequestOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a request that is not a lifecycle action."""

    result: RequestResult
    error: str | None = None
    code: RejectCode | None = None
    action_id: str | None = None
    """A session cancel or delete: the action id every run it stopped names."""
    interrupted_runs: tuple[str, ...] = ()
    """A session cancel or delete: the runs it stopped (queued ones first, then the active one)."""

    @property
    def rejected(self) -> bool:
        """It was not applied at all (``code`` says why)."""
        return self.result is RequestResult.REJECTED


class CloseOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a lifecycle request, decided when it is handled. ``completed`` is its value
    at the time of the answer; follow ``lifecycle.completed`` (same ``action_id``) for later."""

    result: CloseResult
    action_id: str | None = None
    completed: bool = False
    completed_directories: tuple[str, ...] = ()
    pending_directories: tuple[str, ...] = ()
    blocking_runs: tuple[str, ...] = ()
    interrupted_runs: tuple[str, ...] = ()
    abandoned_runs: tuple[str, ...] = ()
    error: str | None = None
    code: RejectCode | None = None
    overran: tuple[str, ...] = ()
    """A shutdown's final outcome only: host code still running when it returned, left behind (a load
    or dispose hook, a subscriber callback, a future's done-callback), by name. Filled by the shell."""

    @property
    def rejected(self) -> bool:
        """It was not applied at all (``code`` says why)."""
        return self.result is CloseResult.REJECTED


class RunSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """What the supervisor knows of one run."""

    run_id: str
    session: str
    directory: str
    generation: int | None
    state: RunState
    outcome: Outcome | None = None
    reason: InterruptReason | None = None
    origin: str | None = None
    action_id: str | None = None
    phase: Phase | None = None
    error: str | None = None
    abandoned: bool = False
    parts: tuple[PartSnapshot, ...] = ()
    parent_run_id: str | None = None
    children: tuple[str, ...] = ()
    """Its child runs, in the order they were started (finished ones included)."""
    deadline_ms: int | None = None
    """Its deadline (``start_run(..., deadline_ms=...)``), counted from ``run.started``."""
    stalled: bool = False
    """It is active and made no progress for its stall setting (``run.stalled``); cleared by progress."""
    retry_attempt: int | None = None
    """The last retry its body reported (accepted), if any: the attempt it announced..."""
    retry_message: str | None = None
    """...and why (the provider's error): kept after the retry is over, and through its end."""
    epoch: int | None = None
    """The life of the supervisor its ``generation`` belongs to (``Supervisor.epoch``; None without
    a journal, or with ``generation``)."""
    resume_count: int = 0
    """How many times in a row its turn has been continued after a crash (``run.started``'s)."""


class SessionSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A session as ``Supervisor.session()`` reports it: its status, its active run, its queue."""

    session: str
    status: SessionStatus
    active: str | None
    queued: tuple[str, ...]
    attempt: int | None = None
    """While ``status`` is ``retry``: the attempt its active run reported (else None)."""
    message: str | None = None
    """While ``status`` is ``retry``: why it retries (else None)."""
    next_at_ms: int | None = None
    """While ``status`` is ``retry``: when the next attempt is due, Unix epoch ms (else None)."""
    queue_policy: QueuePolicy = QueuePolicy.QUEUE
    """Its default queue policy (``SetQueuePolicy``): what a start naming none does while it is busy."""
