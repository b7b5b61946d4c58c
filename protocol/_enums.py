"""The closed vocabularies of the protocol.

Every value here appears verbatim on the wire (events, reports, scenario files), so the enums are
``StrEnum``s: ``CloseMode.MAINTENANCE == "maintenance"`` and JSON encodes them as their value.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ActionState",
    "AskKind",
    "AskState",
    "CloseAction",
    "CloseMode",
    "CloseResult",
    "InstanceState",
    "InterruptReason",
    "LoadCause",
    "Outcome",
    "PartState",
    "Phase",
    "QueuePolicy",
    "RejectCode",
    "ReloadPolicy",
    "RequestResult",
    "ResumeResult",
    "ResumeVerdict",
    "RunState",
    "SessionStatus",
    "ShutdownReason",
    "StepKind",
    "WithdrawReason",
]


class CloseMode(StrEnum):
    """How hard a lifecycle close may push on the runs in the directories it covers."""

    MAINTENANCE = "maintenance"
    """Active runs are left alone; the close waits for the runs that existed when it was asked."""
    USER_CONFIRMED_INTERRUPT = "user_confirmed_interrupt"
    """The user agreed to lose the active runs: interrupted (``lifecycle_interrupt``), then closed."""
    SHUTDOWN = "shutdown"
    """The process is going away: everything is interrupted and stops within a grace deadline."""
    TEST_TEARDOWN = "test_teardown"
    """Like ``shutdown``, reported with its own reason so tests can tell it apart."""


class CloseAction(StrEnum):
    """What a lifecycle request does."""

    DISPOSE = "dispose"
    DISPOSE_ALL = "dispose_all"
    RELOAD = "reload"
    INVALIDATE_CONFIG = "invalidate_config"
    SHUTDOWN = "shutdown"
    TEST_TEARDOWN = "test_teardown"


class ActionState(StrEnum):
    """Where a lifecycle action (a close or a shutdown) is in its life (``protocol.ACTION_TRANSITIONS``)."""

    REQUESTED = "requested"
    """Being decided: its instances are retired, its runs interrupted if its mode says so."""
    ANNOUNCING = "announcing"
    """Instances it covers are disposing at once: the answer waits until they have closed."""
    PENDING = "pending"
    """Answered; some instance it covers still waits for its runs (``lifecycle.deferred``)."""
    COMPLETED = "completed"
    """Every instance it covers has closed (``lifecycle.completed``)."""


class InterruptReason(StrEnum):
    """Why a run was interrupted. There is no default: every interrupt names one of these."""

    USER_CANCEL = "user_cancel"
    PERMISSION_REJECTED = "permission_rejected"
    FORM_DISMISSED = "form_dismissed"
    LIFECYCLE_INTERRUPT = "lifecycle_interrupt"
    SHUTDOWN = "shutdown"
    TEST_TEARDOWN = "test_teardown"
    TIMEOUT = "timeout"
    CRASH = "crash"
    """The process that supervised the run died (a crash, a kill, a power loss); found unfinished in
    the run journal at the next start and reported by ``run.recovered``."""
    COALESCED = "coalesced"
    """It was still queued (queue policy ``coalesce``) when a newer ``coalesce`` start of its
    session replaced it; the ``origin`` names the replacing run. It never started."""
    DROPPED = "dropped"
    """It was still queued (queue policy ``coalesce``) when its session's active run was
    interrupted: a pending follow-up is dropped with the run it followed (``QUEUE_RULES``). The
    ``origin`` names that interrupted run, ``action_id`` the interrupt's action. It never started."""


class ShutdownReason(StrEnum):
    """The reasons a shutdown may give: the ``InterruptReason``s a shutdown interrupts with."""

    SHUTDOWN = InterruptReason.SHUTDOWN.value
    TEST_TEARDOWN = InterruptReason.TEST_TEARDOWN.value
    TIMEOUT = InterruptReason.TIMEOUT.value
    """A watchdog (the scenario runner's ``--timeout``) tearing down what hung."""

    @property
    def interrupt_reason(self) -> InterruptReason:
        """The reason every run this shutdown interrupts carries."""
        return InterruptReason(self.value)


class Outcome(StrEnum):
    """How a run ended."""

    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


class RunState(StrEnum):
    """Where a run is in its life (see ``protocol.RUN_TRANSITIONS``)."""

    QUEUED = "queued"
    ACTIVE = "active"
    INTERRUPTING = "interrupting"
    """An interrupt was decided (its reason is fixed); the body has not stopped yet."""
    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


class PartState(StrEnum):
    """The state of one tool part of a run."""

    PENDING = "pending"
    """The model is generating the tool call's input."""
    PREPARED = "prepared"
    """The call is materialized; the tool has not started."""
    RUNNING = "running"
    COMPLETED = "completed"
    ERROR = "error"
    """The tool itself failed, or its permission was rejected with a message. Never an interruption."""
    INTERRUPTED = "interrupted"
    """The run was interrupted while this part was unfinished."""


class Phase(StrEnum):
    """The phase of the open tool part at an interruption."""

    GENERATING = "generating"
    PREPARED = "prepared"
    RUNNING = "running"


class StepKind(StrEnum):
    """What a step of a run stands for."""

    MODEL = "model"
    TOOL_INPUT = "tool_input"
    TOOL_EXEC = "tool_exec"
    PERMISSION = "permission"
    FORM = "form"


class QueuePolicy(StrEnum):
    """What a start does while its session is busy (see ``protocol.QUEUE_RULES``). Given per start
    (``StartRun.queue_policy``) or as a session's default (``SetQueuePolicy``); ``queue`` otherwise."""

    QUEUE = "queue"
    """Queued behind the active run, first in first out (the default). A queued run is kept when
    the active run is interrupted: it starts next."""
    COALESCE = "coalesce"
    """Queued, but replacing the session's still-queued ``coalesce`` run (ended ``coalesced``): a
    session holds at most one queued ``coalesce`` run, the latest follow-up. Dropped (ended
    ``dropped``) when the active run is interrupted before it started."""
    REJECT_IF_BUSY = "reject_if_busy"
    """Rejected (``session_busy``) while the session has an active run; never queued."""


class SessionStatus(StrEnum):
    """What a session is doing (``session.status``; ``protocol.SESSION_TRANSITIONS``)."""

    BUSY = "busy"
    IDLE = "idle"
    RETRY = "retry"
    """Busy, and its active run reported that it is retrying (a provider call failed and is tried
    again): the event and the snapshot carry the attempt, the message and when the next attempt
    is due. Back to ``busy`` when the attempt goes on (the run's next step, tool-part change or ask)
    or the run is interrupted; ``idle`` (or ``busy`` with the next queued run) at the run's end."""


class InstanceState(StrEnum):
    """Where an instance (one directory, one generation) is in its life."""

    LIVE = "live"
    """Loaded and current: new runs in its directory are pinned to it."""
    RETIRING = "retiring"
    """Asked to close; waits for the runs pinned to it. No new run is pinned to it."""
    DISPOSING = "disposing"
    """Its dispose hook is running."""
    CLOSED = "closed"


class CloseResult(StrEnum):
    """The answer to a close or a shutdown (``CloseOutcome.result``)."""

    COMPLETED = "completed"
    DEFERRED = "deferred"
    INTERRUPTED = "interrupted"
    FORCED = "forced"
    REJECTED = "rejected"
    NOOP = "noop"
    """The close carried a ``fingerprint`` equal to the one every live instance it covers was
    loaded with: nothing would change, so nothing was touched (answered and completed at once)."""


class RequestResult(StrEnum):
    """The answer to any other request (``RequestOutcome.result``): it was applied, or not at all."""

    OK = "ok"
    REJECTED = CloseResult.REJECTED.value


class RejectCode(StrEnum):
    """Why a request was rejected; each maps to one exception class in ``actors``."""

    SUPERVISOR_CLOSED = "supervisor_closed"
    UNKNOWN_RUN = "unknown_run"
    RUN_FINISHED = "run_finished"
    RUN_ALREADY_EXISTS = "run_already_exists"
    ALREADY_INTERRUPTING = "already_interrupting"
    NOTHING_PENDING = "nothing_pending"
    """A reply addressed a run that has no open ask of that kind."""
    UNKNOWN_ASK = "unknown_ask"
    """No ask with this id was ever raised (or its run was forgotten long ago)."""
    ASK_WITHDRAWN = "ask_withdrawn"
    """The ask was withdrawn (timed out, its run interrupted or ended): a late reply reaches nothing."""
    ASK_ALREADY_ANSWERED = "ask_already_answered"
    """The ask was replied to or dismissed already; the first decision stands."""
    UNKNOWN_DIRECTORY = "unknown_directory"
    SESSION_BUSY = "session_busy"
    """A start with queue policy ``reject_if_busy`` while its session has an active (or queued) run."""
    UNKNOWN_ACTION = "unknown_action"
    """``confirm_close``: no lifecycle action with this id was ever asked of this supervisor."""
    ACTION_ALREADY_COMPLETED = "action_already_completed"
    """``confirm_close``: the action has completed already (or was a no-op): nothing waits any more."""
    NOT_CONFIRMABLE = "not_confirmable"
    """``confirm_close``: the action is not a maintenance close (it interrupts its runs already, or
    it is a shutdown): there is nothing to confirm."""
    INVALID_REQUEST = "invalid_request"
    INTERNAL_ERROR = "internal_error"
    """The supervisor failed while handling the request (a bug): it was contained and logged."""
    # What the wire hosts refuse themselves, before the supervisor sees a request (same answer shape).
    NOT_FOUND = "not_found"
    """A wire host: no such route (or method), or no such session."""
    UNAUTHORIZED = "unauthorized"
    """The HTTP host: the route needs ``Authorization: Bearer <token>`` (or an event-stream ticket)."""
    FORBIDDEN = "forbidden"
    """The HTTP host: the ``Host`` or ``Origin`` header is not this server's (a DNS-rebinding guard)."""
    TOO_LARGE = "too_large"
    """A wire host: the request body (or stdin line) is over its size limit."""
    TIMEOUT = "timeout"
    """A wire host: the supervisor did not answer within the host's bound."""


class AskKind(StrEnum):
    """What an ask waits for."""

    PERMISSION = "permission"
    """May the tool go on? Answered with ``reply_permission`` (approve, or reject with or without
    feedback)."""
    FORM = "form"
    """A question form. Answered with ``answer_form`` or dismissed with ``dismiss_form``."""


class AskState(StrEnum):
    """Where an ask is in its life (see ``protocol.ASK_TRANSITIONS``)."""

    OPEN = "open"
    """Registered and announced (``ask.requested``); it waits for the user."""
    REPLIED = "replied"
    """A permission was approved or rejected, or a form answered (``ask.replied``)."""
    DISMISSED = "dismissed"
    """A form was dismissed (``ask.dismissed``)."""
    WITHDRAWN = "withdrawn"
    """Nobody waits for it any more (``ask.withdrawn``); a late reply is rejected ``ask_withdrawn``."""


class WithdrawReason(StrEnum):
    """Why an ask was withdrawn."""

    TIMEOUT = "timeout"
    """The body stopped waiting: its ``timeout`` ran out."""
    INTERRUPTED = "interrupted"
    """Its run was interrupted (the ``ask.withdrawn`` event names the interrupt's reason)."""
    RUN_ENDED = "run_ended"
    """Its run ended while the ask was still open (the body returned or raised without waiting)."""
    BODY = "body"
    """The body withdrew it itself (``Ask.withdraw()``)."""


class ReloadPolicy(StrEnum):
    """When a ``reload`` loads its directory's next generation (``protocol.RELOAD_RULES``)."""

    LAZY = "lazy"
    """When the first run needs it or when the old generations have closed, whichever comes first:
    two generations of a directory are never loaded while nothing asked for the new one (file
    watchers, language servers and tool servers do not run twice for as long as an old run lasts).
    The default of ``SupervisorConfig`` and of the wire hosts."""
    EAGER = "eager"
    """At once, with the reload (what the public scenario contract describes, and the default of the
    bare ``SupervisorCore`` and of scenario files): the old generation goes on serving its runs next
    to the new one."""


class LoadCause(StrEnum):
    """Why an instance was loaded (``instance.started``'s ``cause``)."""

    LOAD = "load"
    """The host loaded it (``load``/``preload``, or a scenario's ``directories``)."""
    RUN = "run"
    """A run needed it: its directory had no live generation (first use, after a close, or after a
    lazy reload)."""
    RELOAD = "reload"
    """An eager reload loaded it with its request (or a reload found nothing open to wait for)."""
    PREVIOUS_CLOSED = "previous_closed"
    """A lazy reload deferred it, and the directory's last old generation has just closed."""


class ResumeVerdict(StrEnum):
    """What the resume policy decided for a run recovered after a crash (``run.recovered``'s
    ``resume``; null when the supervisor has no resume policy, and for a child run, whose parent's
    continuation starts children of its own).

    A session's crashed turn is continued at most ``resume_budget`` times in a row: a run resumed
    after a crash counts one more than the run it resumes (``resume_count``), and the count survives
    restarts in the journal. Decided by the core (``SupervisorCore.recover``)."""

    OFFERED = "offered"
    """Its resume count is below the budget: the host's resume callback is offered it, once."""
    EXHAUSTED = "exhausted"
    """Its session has spent its resume budget on this turn: it is not offered, and the turn ends
    here (``interrupted``, reason ``crash``)."""


class ResumeResult(StrEnum):
    """What became of a run recovered under a resume policy (``Supervisor.resumes()``)."""

    RESUMED = "resumed"
    """The callback answered with a continuation, and it was started (``resume_of`` names the run)."""
    DECLINED = "declined"
    """The callback answered None: the turn ends here."""
    FAILED = "failed"
    """The callback raised, did not answer within its bound, answered something that is not a
    continuation, or the continuation's start was refused: ``error`` says which. The turn ends here."""
    EXHAUSTED = "exhausted"
    """Not offered: its session's resume budget was spent (``ResumeVerdict.EXHAUSTED``)."""
