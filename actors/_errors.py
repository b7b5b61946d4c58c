"""One exception per situation. Rejections from the core map to these by their ``RejectCode``."""

from __future__ import annotations

from run_supervisor.protocol import CloseOutcome, InterruptReason, RejectCode, RequestOutcome

__all__ = [
    "ActionAlreadyCompleted",
    "AlreadyInterrupting",
    "AskAlreadyAnswered",
    "AskWithdrawn",
    "InvalidConfig",
    "InvalidRequest",
    "JournalError",
    "JournalFailed",
    "JournalLocked",
    "JournalUnreadable",
    "LoadFailed",
    "NotConfirmable",
    "NothingPending",
    "RunAlreadyExists",
    "RunAlreadyFinished",
    "RunInterrupted",
    "SessionBusy",
    "SupervisorClosed",
    "SupervisorError",
    "SupervisorTimeout",
    "UnknownAction",
    "UnknownAsk",
    "UnknownDirectory",
    "UnknownRun",
    "raise_for_rejection",
]


class SupervisorError(Exception):
    """Base of every error this library raises on purpose."""

    code: RejectCode | None = None
    """The rejection code this error stands for (``_BY_CODE`` below); None for one no code raises."""


class SupervisorClosed(SupervisorError):
    """The supervisor has shut down (or is shutting down); no request is accepted any more."""


class UnknownRun(SupervisorError):
    """No run with this id has started (it may be queued under another id, or long forgotten)."""


class RunAlreadyFinished(SupervisorError):
    """The run has finished; a cancel or answer for it does nothing (and never reaches a later run)."""


class RunAlreadyExists(SupervisorError):
    """A run with this id was started before: run ids are unique for the supervisor's life."""


class AlreadyInterrupting(SupervisorError):
    """An interrupt of this run was already decided; the first reason stands."""


class NothingPending(SupervisorError):
    """A reply addressed a run (not an ask id) that has no open ask of that kind."""


class UnknownAsk(SupervisorError):
    """No ask with this id was raised (or its run finished long ago and was forgotten)."""


class AskWithdrawn(SupervisorError):
    """The ask was withdrawn -- its body stopped waiting (timeout) or its run was interrupted or
    ended -- before this reply came: the reply reaches nothing, and never a later ask."""


class AskAlreadyAnswered(SupervisorError):
    """The ask was replied to or dismissed already; the first decision stands."""


class UnknownDirectory(SupervisorError):
    """A close named a directory that was never loaded or declared."""


class SessionBusy(SupervisorError):
    """A start with queue policy ``reject_if_busy`` while its session has an active run; nothing
    was started or queued."""


class UnknownAction(SupervisorError):
    """``confirm_close`` named a lifecycle action this supervisor never made."""


class ActionAlreadyCompleted(SupervisorError):
    """``confirm_close`` named a lifecycle action that has completed: nothing waits any more."""


class NotConfirmable(SupervisorError):
    """``confirm_close`` named an action that is not a maintenance close (nothing to confirm)."""


class InvalidRequest(SupervisorError):
    """The request itself is malformed (an empty id, a mode that does not fit the action...)."""


class InvalidConfig(InvalidRequest, ValueError):
    """A ``SupervisorConfig`` value was refused: of the wrong type, out of range, NaN or infinite, or a
    field the config does not have. ``field`` names it; the message says which constraint, e.g.
    ``request_timeout_s: Expected `float`, got `bool```."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")

    def __reduce__(self) -> tuple[object, ...]:  # copy/pickle: two arguments, one message
        return (type(self), (self.field, self.problem))


class LoadFailed(SupervisorError):
    """A load hook raised or overran its budget (``Supervisor.load`` / ``Supervisor.start``).

    ``errors`` maps each directory whose load failed to its error."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__(
            "; ".join(
                f"loading {directory} failed: {error}" for directory, error in sorted(self.errors.items())
            )
        )


class SupervisorTimeout(SupervisorError, TimeoutError):
    """A bounded wait ran out before the supervisor answered."""


class JournalError(SupervisorError):
    """The run journal could not be used: the supervisor did not start on it (or, ``JournalFailed``,
    stopped when it could no longer write it)."""


class JournalLocked(JournalError):
    """Another live supervisor (in this process or another) holds the journal; it is never shared."""


class JournalUnreadable(JournalError):
    """The file is not a run-supervisor journal (another file, a corrupt one, a newer schema). It is
    left untouched: nothing is ever overwritten."""


class JournalFailed(SupervisorClosed, JournalError):
    """The journal could not record: SQLite could not write it (a full disk, an I/O error). ``path``
    names the file and ``error`` what SQLite and the OS said.

    At start, the supervisor does not start on it. While running, the supervisor stops at the first
    batch that does not commit (see docs/api.md, "Crashes"): no event after the last commit is
    delivered, every answer not yet given fails with this error, every request from then on is
    refused (``supervisor_closed``, this message), and it shuts itself down;
    ``Supervisor.journal_failure`` holds it. The next start on a writable disk recovers what was
    unfinished."""

    def __init__(self, path: str, error: str, *, at_start: bool = False) -> None:
        self.path = path
        self.error = error
        self.at_start = at_start
        if at_start:
            text = f"journal {path!r} cannot be written ({error}); the supervisor did not start"
        else:
            text = (
                f"journal {path!r} could not record ({error}); the supervisor stopped: nothing after "
                "its last commit was delivered, and no request is accepted any more"
            )
        super().__init__(text)

    def __reduce__(self) -> tuple[object, ...]:  # copy/pickle: the keyword is not in args
        return (_rebuild_failed, (self.path, self.error, self.at_start))


class RunInterrupted(BaseException):  # a signal to unwind, like trio.Cancelled
    """Raised inside a run body when its run has been interrupted; let it propagate.

    It derives from ``BaseException`` so that a body's ``except Exception`` does not swallow it.
    Only the supervisor raises it (like trio's ``Cancelled``, it has no public constructor): a body
    that raises one it did not get from its own run's interruption -- one caught in another run, say
    -- has failed, and its run ends ``failed`` with an error saying so.
    """

    reason: InterruptReason | None
    """Why the run was interrupted; ``None`` when it was abandoned at shutdown's deadline."""
    _owner: object
    """The interruption it belongs to (the run's cancel token): one run's cannot end another."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "RunInterrupted has no public constructor: the supervisor raises it inside an interrupted "
            "run's body. To stop a run, cancel it (Supervisor.cancel); to end a body early, return or "
            "raise an ordinary exception."
        )

    @classmethod
    def _for(cls, reason: InterruptReason | None, owner: object) -> RunInterrupted:
        """The supervisor's constructor: ``owner`` is the run's cancel token."""
        self = cls.__new__(cls)
        BaseException.__init__(self, f"the run was interrupted ({reason.value if reason else 'abandoned'})")
        self.reason = reason
        self._owner = owner
        return self

    def __reduce__(self) -> tuple[object, ...]:  # copy/pickle go around the closed constructor
        return (_rebuild_interrupted, (self.reason, self.args))


def _rebuild_failed(path: str, error: str, at_start: bool) -> JournalFailed:
    return JournalFailed(path, error, at_start=at_start)


def _rebuild_interrupted(reason: InterruptReason | None, args: tuple[object, ...]) -> RunInterrupted:
    exc = RunInterrupted._for(reason, None)
    exc.args = args
    return exc


_BY_CODE: dict[RejectCode, type[SupervisorError]] = {
    RejectCode.SUPERVISOR_CLOSED: SupervisorClosed,
    RejectCode.UNKNOWN_RUN: UnknownRun,
    RejectCode.RUN_FINISHED: RunAlreadyFinished,
    RejectCode.RUN_ALREADY_EXISTS: RunAlreadyExists,
    RejectCode.ALREADY_INTERRUPTING: AlreadyInterrupting,
    RejectCode.NOTHING_PENDING: NothingPending,
    RejectCode.UNKNOWN_ASK: UnknownAsk,
    RejectCode.ASK_WITHDRAWN: AskWithdrawn,
    RejectCode.ASK_ALREADY_ANSWERED: AskAlreadyAnswered,
    RejectCode.UNKNOWN_DIRECTORY: UnknownDirectory,
    RejectCode.SESSION_BUSY: SessionBusy,
    RejectCode.INVALID_REQUEST: InvalidRequest,
    RejectCode.UNKNOWN_ACTION: UnknownAction,
    RejectCode.ACTION_ALREADY_COMPLETED: ActionAlreadyCompleted,
    RejectCode.NOT_CONFIRMABLE: NotConfirmable,
}
"""The error each rejection code raises; each of them carries its code as ``code`` (a code not here
raises a bare ``SupervisorError``)."""
for _code, _error in _BY_CODE.items():
    _error.code = _code


def raise_for_rejection(outcome: CloseOutcome | RequestOutcome) -> None:
    """Raise the exception that matches a rejected outcome; do nothing otherwise."""
    if outcome.code is None:
        return
    raise _BY_CODE.get(outcome.code, SupervisorError)(outcome.error or outcome.code.value)
