"""Checks at the host boundary: every public call validates its arguments here before anything changes.

Each checker takes the argument's name and value and returns the value in its canonical form, or
raises ``InvalidRequest`` naming the argument. The async facade reuses them, so both facades refuse
the same input with the same words.

Rules (documented in docs/api.md, "Validation"):

- names (``origin``...) are non-empty ``str`` that encode as UTF-8 (events travel as JSON: a lone
  surrogate could not); ``tag`` and messages may be empty.
- ids (``run_id``, ``parent_run_id``, ``resume_of``, ``session``, ``ask_id``, ``action_id``) are
  carried in the wire hosts' routes (``/runs/{run_id}``, ``/sessions/{session}``...), so they are
  what a path segment and a query value carry unchanged: 1 to ``MAX_ID_LENGTH`` (128) characters,
  each an ASCII letter or digit or one of ``- _ . :`` (``ID_CHARACTERS``), and neither ``.`` nor
  ``..`` (a URL would resolve them away). An ask id, which the library makes from its run's id
  (``<run_id>:ask-<n>``), may be up to ``MAX_ASK_ID_LENGTH`` (160).
- a directory is a name, not a path the library touches: a ``str`` or an ``os.PathLike`` whose
  ``os.fspath`` is a ``str``; it is then compared exactly. ``Path("/a")`` and ``"/a"`` name the same
  directory; ``"/a"`` and ``"/a/"`` do not (normalise in the host if they should). ``bytes`` are
  refused.
- a timeout (seconds) is ``None`` (the configured default) or a finite real number in
  ``[0, MAX_TIMEOUT_S]``; milliseconds (``grace_ms``, budgets) are an ``int`` in ``[0, MAX_MS]``.
  ``bool`` is not a number here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from run_supervisor.actors._errors import InvalidRequest
from run_supervisor.protocol import (
    AnswerForm,
    CancelRun,
    CancelSession,
    CloseAction,
    CloseMode,
    CloseRequest,
    ConfirmClose,
    DeleteSession,
    DismissForm,
    InterruptReason,
    QueuePolicy,
    ReloadPolicy,
    ReplyPermission,
    Request,
    RetryBudget,
    SetQueuePolicy,
    Shutdown,
    ShutdownReason,
    StartRun,
)
from run_supervisor.protocol._payloads import FormAnswer
from run_supervisor.protocol._rules import (
    CLOSE_REQUEST_ACTIONS,
    CLOSE_REQUEST_MODES,
    QUEUE_RULES,
    SHUTDOWN_RULES,
)

__all__ = [
    "ID_CHARACTERS",
    "MAX_ASK_ID_LENGTH",
    "MAX_ID_LENGTH",
    "MAX_MS",
    "MAX_TIMEOUT_S",
    "CloseActionName",
    "CloseModeName",
    "QueuePolicyName",
    "ReloadPolicyName",
    "ShutdownReasonName",
    "answer_form",
    "callback",
    "cancel",
    "close",
    "close_action",
    "close_mode",
    "confirm_close",
    "directory_name",
    "directory_names",
    "dismiss_form",
    "flag",
    "identifier",
    "milliseconds",
    "name_text",
    "optional_reload_policy",
    "optional_text",
    "queue_policy",
    "reply_permission",
    "request",
    "set_queue_policy",
    "shutdown",
    "shutdown_reason",
    "size",
    "stall_after_ms",
    "start_run",
    "subscription",
    "text",
    "timeout",
]

MAX_TIMEOUT_S = 7 * 24 * 3600.0
"""The longest wait a call accepts (a week): longer ones overflow the platform's timers."""
MAX_MS = 24 * 3600 * 1000
"""The longest grace or budget accepted, in milliseconds (a day)."""
MAX_ID_LENGTH = 128
"""The longest id (run, session, action) accepted, in characters."""
MAX_ASK_ID_LENGTH = MAX_ID_LENGTH + 32
"""The longest ask id: the library makes them as ``<run_id>:ask-<n>``."""
ID_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:")
"""What an id is made of: characters a URL path segment and a query value carry as they are."""
_ID_LENGTHS = {"ask_id": MAX_ASK_ID_LENGTH}

CloseActionName = Literal["dispose", "dispose_all", "reload", "invalidate_config"]
"""What a lifecycle close does (``CloseAction`` spelled as a string)."""
CloseModeName = Literal["maintenance", "user_confirmed_interrupt"]
"""How a lifecycle close treats active runs (``CloseMode`` spelled as a string)."""
ReloadPolicyName = Literal["lazy", "eager"]
"""When a reload loads the next generation (``ReloadPolicy`` spelled as a string)."""
ShutdownReasonName = Literal["shutdown", "test_teardown", "timeout"]
"""Why the supervisor shuts down (a ``ShutdownReason`` spelled as a string)."""
QueuePolicyName = Literal["queue", "coalesce", "reject_if_busy"]
"""What a start does while its session is busy (a ``QueuePolicy`` spelled as a string)."""

# What is accepted is the rules' (the ``...Name`` types above spell it for type checkers).
_CLOSE_ACTIONS = tuple(do.value for do in CLOSE_REQUEST_ACTIONS)
_CLOSE_MODES = tuple(mode.value for mode in CLOSE_REQUEST_MODES)
_SHUTDOWN_REASONS = tuple(reason.value for reason in SHUTDOWN_RULES)
_QUEUE_POLICIES = tuple(policy.value for policy in QUEUE_RULES)
_RELOAD_POLICIES = ("lazy", "eager")

E = TypeVar("E", CloseAction, CloseMode, ShutdownReason, QueuePolicy, ReloadPolicy)
_REQUESTS = (
    StartRun,
    CancelRun,
    CloseRequest,
    Shutdown,
    ReplyPermission,
    AnswerForm,
    DismissForm,
    SetQueuePolicy,
    ConfirmClose,
    CancelSession,
    DeleteSession,
)


def _kind(value: object) -> str:
    return type(value).__name__


def text(name: str, value: object, *, empty: bool = True) -> str:
    """A ``str`` that encodes as UTF-8 (``empty=False``: and is not empty)."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{name} must be a str, not {_kind(value)}")
    if not empty and not value:
        raise InvalidRequest(f"{name} cannot be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(f"{name} must encode as UTF-8 (it holds a lone surrogate)") from None
    return value


def name_text(name: str, value: object) -> str:
    """A name (an ``origin``...): a non-empty ``str``."""
    return text(name, value, empty=False)


def identifier(name: str, value: object) -> str:
    """An id (of a run, a session, an ask, an action): what the wire hosts' routes carry as it is --
    1 to ``MAX_ID_LENGTH`` characters (an ask id: ``MAX_ASK_ID_LENGTH``) of ``ID_CHARACTERS``, and
    not ``.`` or ``..``."""
    checked = text(name, value, empty=False)
    longest = _ID_LENGTHS.get(name, MAX_ID_LENGTH)
    if len(checked) > longest:
        raise InvalidRequest(f"{name} must be at most {longest} characters, not {len(checked)}")
    odd = next((c for c in checked if c not in ID_CHARACTERS), None)
    if odd is not None:
        raise InvalidRequest(
            f"{name} may hold only ASCII letters, digits and - _ . : (it is carried in URLs); "
            f"{odd!r} is none of these"
        )
    if checked in (".", ".."):
        raise InvalidRequest(f"{name} cannot be {checked!r} (a URL would resolve it away)")
    return checked


def optional_text(name: str, value: object) -> str | None:
    return None if value is None else text(name, value)


def directory_name(name: str, value: object) -> str:
    """A directory name: a ``str`` or an ``os.PathLike`` of one, compared exactly after ``os.fspath``."""
    if isinstance(value, bytes | bytearray):
        raise InvalidRequest(f"{name} must be a str or an os.PathLike of str, not bytes")
    if isinstance(value, os.PathLike):
        try:
            value = os.fspath(value)
        except Exception as exc:  # a host's own PathLike may raise anything
            raise InvalidRequest(f"{name}: os.fspath failed ({type(exc).__name__})") from None
        if not isinstance(value, str):
            raise InvalidRequest(f"{name} must be a str or an os.PathLike of str, not a PathLike of bytes")
    if not isinstance(value, str):
        raise InvalidRequest(f"{name} must be a str or an os.PathLike of str, not {_kind(value)}")
    return text(name, value, empty=False)


def directory_names(name: str, values: tuple[object, ...]) -> tuple[str, ...]:
    return tuple(directory_name(f"{name}[{index}]", value) for index, value in enumerate(values))


def timeout(name: str, value: object) -> float | None:
    """``None`` or a finite number of seconds in ``[0, MAX_TIMEOUT_S]``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{name} must be a number of seconds or None, not {_kind(value)}")
    try:
        seconds = float(value)
    except OverflowError:
        raise InvalidRequest(f"{name} must be at most {MAX_TIMEOUT_S:g} s") from None
    if math.isnan(seconds):
        raise InvalidRequest(f"{name} cannot be NaN")
    if not 0 <= seconds <= MAX_TIMEOUT_S:
        raise InvalidRequest(f"{name} must be between 0 and {MAX_TIMEOUT_S:g} s, not {seconds:g}")
    return seconds


def milliseconds(name: str, value: object, *, least: int = 0, none: str = "") -> int:
    """An ``int`` number of milliseconds in ``[least, MAX_MS]``; one message names the whole range
    (and, with ``none``, what None means instead) whichever end was missed."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be an int number of milliseconds, not {_kind(value)}")
    if not least <= value <= MAX_MS:
        shown = str(value) if abs(value) < 10**30 else ("a huge negative number" if value < 0 else "huge")
        instead = f" ({none})" if none else ""
        raise InvalidRequest(f"{name} must be between {least} and {MAX_MS} ms{instead}, not {shown}")
    return int(value)


def deadline(name: str, value: object) -> int:
    """A run's deadline: an ``int`` number of milliseconds in ``[1, MAX_MS]`` (0 would interrupt a
    run the moment it starts: not a deadline)."""
    return milliseconds(name, value, least=1, none="None: no deadline")


def grace(name: str, value: object) -> int:
    """An interrupted body's grace before its run is abandoned: ``int`` milliseconds in
    ``[0, MAX_MS]`` (0 abandons at once)."""
    return milliseconds(name, value, least=0, none="None: the run's, else the supervisor's")


def retry_budget(name: str, value: object) -> RetryBudget:
    """A ``RetryBudget`` whose bounds are None or ``int``s in ``[0, MAX_MS]``."""
    if not isinstance(value, RetryBudget):
        raise InvalidRequest(f"{name} must be a RetryBudget, not {_kind(value)}")
    if value.attempts is not None:
        milliseconds(f"{name}.attempts", value.attempts, least=0, none="None: unbounded")
    if value.backoff_ms is not None:
        milliseconds(f"{name}.backoff_ms", value.backoff_ms, least=0, none="None: unbounded")
    return value


def stall_after_ms(name: str, value: object) -> int:
    """A stall setting: ``int`` milliseconds in ``[1, MAX_MS]`` (0 would flag every run at once)."""
    return milliseconds(name, value, least=1, none="None: stalls are not measured")


def size(name: str, value: object) -> int:
    """A non-negative ``int`` (0 meaning unbounded, where it applies)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be an int, not {_kind(value)}")
    if not 0 <= value <= 2**31:
        raise InvalidRequest(f"{name} must be between 0 and {2**31}")
    return int(value)


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name} must be a bool, not {_kind(value)}")
    return value


def callback(name: str, value: object, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not callable(value):
        raise InvalidRequest(f"{name} must be callable, not {_kind(value)}")
    return value


def _choice(name: str, value: object, enum: type[E], allowed: tuple[str, ...]) -> E:
    if not isinstance(value, str) or value not in allowed:
        shown = repr(value) if isinstance(value, str) and len(value) < 80 else _kind(value)
        raise InvalidRequest(f"{name} must be one of {', '.join(allowed)}; got {shown}")
    return enum(value)


def close_action(name: str, value: object) -> CloseAction:
    return _choice(name, value, CloseAction, _CLOSE_ACTIONS)


def close_mode(name: str, value: object) -> CloseMode:
    return _choice(name, value, CloseMode, _CLOSE_MODES)


def shutdown_reason(name: str, value: object) -> ShutdownReason:
    return _choice(name, value, ShutdownReason, _SHUTDOWN_REASONS)


def queue_policy(name: str, value: object) -> QueuePolicy:
    """A ``QueuePolicy``, or its value as a string."""
    return _choice(name, value, QueuePolicy, _QUEUE_POLICIES)


def optional_reload_policy(name: str, value: object) -> ReloadPolicy | None:
    """None (the supervisor's own policy) or ``lazy``/``eager``."""
    return None if value is None else _choice(name, value, ReloadPolicy, _RELOAD_POLICIES)


START_OPTIONS: tuple[tuple[str, Callable[[str, object], object]], ...] = (
    ("queue_policy", queue_policy),  # None: the session's default
    ("resume_of", identifier),
    ("parent_run_id", identifier),
    ("deadline_ms", deadline),
    ("stall_after_ms", stall_after_ms),
    ("interrupt_grace_ms", grace),
    ("retry_budget", retry_budget),
)
"""A start's options, in the order the facades document them, each with its check (a facade's
arguments; a raw ``StartRun``'s ``queue_policy`` is a ``QueuePolicy`` already)."""


def _check_fields(req: Request) -> None:
    optional_text("tag", req.tag)
    if isinstance(req, StartRun):
        identifier("run_id", req.run_id)
        for field, check in START_OPTIONS:
            value = getattr(req, field)
            if value is not None and field != "queue_policy":  # below: it is a QueuePolicy already
                check(field, value)
        identifier("session", req.session)
        directory_name("directory", req.directory)
        if req.queue_policy is not None and not isinstance(req.queue_policy, QueuePolicy):
            raise InvalidRequest(f"queue_policy must be a QueuePolicy, not {_kind(req.queue_policy)}")
    elif isinstance(req, SetQueuePolicy):
        identifier("session", req.session)
        if not isinstance(req.queue_policy, QueuePolicy):
            raise InvalidRequest(f"queue_policy must be a QueuePolicy, not {_kind(req.queue_policy)}")
    elif isinstance(req, CancelRun):
        identifier("run_id", req.run_id)
        name_text("origin", req.origin)
        if req.grace_ms is not None:
            grace("grace_ms", req.grace_ms)
    elif isinstance(req, CloseRequest):
        if not isinstance(req.do, CloseAction):
            raise InvalidRequest(f"do must be a CloseAction, not {_kind(req.do)}")
        if not isinstance(req.mode, CloseMode):
            raise InvalidRequest(f"mode must be a CloseMode, not {_kind(req.mode)}")
        name_text("origin", req.origin)
        if not isinstance(req.directories, tuple):
            raise InvalidRequest(f"directories must be a tuple, not {_kind(req.directories)}")
        directory_names("directories", req.directories)
        optional_text("fingerprint", req.fingerprint)
        if req.reload_policy is not None and not isinstance(req.reload_policy, ReloadPolicy):
            raise InvalidRequest(
                f"reload_policy must be a ReloadPolicy or None, not {_kind(req.reload_policy)}"
            )
    elif isinstance(req, Shutdown):
        # An InterruptReason of the same value is tolerated (untyped callers); the core rejects
        # one a shutdown may not give.
        if not isinstance(req.reason, ShutdownReason | InterruptReason):
            raise InvalidRequest(f"reason must be a ShutdownReason, not {_kind(req.reason)}")
        optional_text("origin", req.origin)
        milliseconds("grace_ms", req.grace_ms)
    elif isinstance(req, ReplyPermission):
        _ask_address(req.ask_id, req.run_id)
        flag("approve", req.approve)
        flag("always", req.always)
        optional_text("message", req.message)
    elif isinstance(req, AnswerForm):
        _ask_address(req.ask_id, req.run_id)
        form_answer("answer", req.answer)
    elif isinstance(req, ConfirmClose):
        identifier("action_id", req.action_id)
        optional_text("origin", req.origin)
    elif isinstance(req, CancelSession | DeleteSession):
        identifier("session", req.session)
        name_text("origin", req.origin)
        if req.grace_ms is not None:
            grace("grace_ms", req.grace_ms)
        if isinstance(req, DeleteSession):
            flag("confirm", req.confirm)
    else:
        _ask_address(req.ask_id, req.run_id)
        optional_text("message", req.message)


def request(req: object) -> str | None:
    """Why a raw request is malformed (msgspec structs do not check types on construction), or None."""
    if not isinstance(req, _REQUESTS):
        return f"request must be one of the protocol's requests, not {_kind(req)}"
    try:
        _check_fields(req)
    except InvalidRequest as exc:
        return f"{type(req).__name__}: {exc}"
    if isinstance(req, StartRun) and not isinstance(req.directory, str):
        return "StartRun: directory must be a str on the wire"
    return None


# --- one function per public call: checked arguments in, the request to send out ---------------


def start_run(body: object, *, session: object, directory: object, run_id: object) -> StartRun:
    """``run_id`` must be given here (the facade makes one when the host did not)."""
    callback("body", body)
    return StartRun(
        run_id=identifier("run_id", run_id),
        session=identifier("session", session),
        directory=directory_name("directory", directory),
    )


def set_queue_policy(session: object, policy: object) -> SetQueuePolicy:
    return SetQueuePolicy(
        session=identifier("session", session), queue_policy=queue_policy("queue_policy", policy)
    )


def _interrupting(origin: object, grace_ms: object) -> tuple[str, int | None]:
    """The ``origin`` and ``grace_ms`` of a request that interrupts runs (a cancel, a session's
    cancel or delete); no grace: the run's, else the supervisor's."""
    return name_text("origin", origin), None if grace_ms is None else grace("grace_ms", grace_ms)


def cancel(run_id: object, *, origin: object, grace_ms: object = None) -> CancelRun:
    run = identifier("run_id", run_id)  # checked in the signature's order, the id first
    why, grace_left = _interrupting(origin, grace_ms)
    return CancelRun(run_id=run, origin=why, grace_ms=grace_left)


def close(
    do: object,
    *,
    mode: object,
    origin: object,
    directory: object = None,
    tag: object = None,
    fingerprint: object = None,
    reload_policy: object = None,
) -> CloseRequest:
    checked_do = close_action("do", do)
    policy = optional_reload_policy("reload_policy", reload_policy)
    if policy is not None and checked_do is not CloseAction.RELOAD:
        raise InvalidRequest(f"reload_policy applies to a reload only, not to {checked_do.value}")
    return CloseRequest(
        do=checked_do,
        mode=close_mode("mode", mode),
        origin=name_text("origin", origin),
        directories=() if directory is None else (directory_name("directory", directory),),
        tag=optional_text("tag", tag),
        fingerprint=optional_text("fingerprint", fingerprint),
        reload_policy=policy,
    )


def shutdown(*, grace_ms: object, reason: object, origin: object = None, tag: object = None) -> Shutdown:
    checked_reason = shutdown_reason("reason", reason)
    return Shutdown(
        reason=checked_reason,
        origin=checked_reason.value if origin is None else name_text("origin", origin),
        grace_ms=milliseconds("grace_ms", grace_ms),
        tag=optional_text("tag", tag),
    )


def _ask_address(ask_id: object, run_id: object) -> tuple[str | None, str | None]:
    """A reply names its ask by ``ask_id``, or (a convenience) its run by ``run_id``: one of the two."""
    if (ask_id is None) == (run_id is None):
        raise InvalidRequest("name exactly one of ask_id and run_id")
    return (
        None if ask_id is None else identifier("ask_id", ask_id),
        None if run_id is None else identifier("run_id", run_id),
    )


def reply_permission(
    ask_id: object = None,
    *,
    run_id: object = None,
    approve: object,
    message: object = None,
    always: object = False,
) -> ReplyPermission:
    ask, run = _ask_address(ask_id, run_id)
    return ReplyPermission(
        ask_id=ask,
        run_id=run,
        approve=flag("approve", approve),
        message=optional_text("message", message),
        always=flag("always", always),
    )


def cancel_session(session: object, *, origin: object, grace_ms: object = None) -> CancelSession:
    name = identifier("session", session)
    why, grace_left = _interrupting(origin, grace_ms)
    return CancelSession(session=name, origin=why, grace_ms=grace_left)


def delete_session(
    session: object, *, confirm: object, origin: object, grace_ms: object = None
) -> DeleteSession:
    name, confirmed = identifier("session", session), flag("confirm", confirm)
    why, grace_left = _interrupting(origin, grace_ms)
    return DeleteSession(session=name, confirm=confirmed, origin=why, grace_ms=grace_left)


def answer_form(ask_id: object = None, *, run_id: object = None, answer: object) -> AnswerForm:
    ask, run = _ask_address(ask_id, run_id)
    return AnswerForm(ask_id=ask, run_id=run, answer=form_answer("answer", answer))


def form_answer(name: str, value: object) -> FormAnswer:
    """A form's answer: one string, or one entry per question (a string, or a list of strings for a
    ``multiple`` question), given as a list or a tuple; returned as tuples."""
    if isinstance(value, str):
        return text(name, value)
    if not isinstance(value, list | tuple):
        raise InvalidRequest(f"{name} must be a str or a list (one entry per question), not {_kind(value)}")
    entries: list[str | tuple[str, ...]] = []
    for index, entry in enumerate(value):
        if isinstance(entry, str):
            entries.append(text(f"{name}[{index}]", entry))
        elif isinstance(entry, list | tuple):
            entries.append(tuple(text(f"{name}[{index}][{n}]", pick) for n, pick in enumerate(entry)))
        else:
            raise InvalidRequest(f"{name}[{index}] must be a str or a list of str, not {_kind(entry)}")
    return tuple(entries)


def dismiss_form(ask_id: object = None, *, run_id: object = None, message: object = None) -> DismissForm:
    ask, run = _ask_address(ask_id, run_id)
    return DismissForm(ask_id=ask, run_id=run, message=optional_text("message", message))


def confirm_close(action_id: object, *, origin: object = None, tag: object = None) -> ConfirmClose:
    return ConfirmClose(
        action_id=identifier("action_id", action_id),
        origin=None if origin is None else name_text("origin", origin),
        tag=optional_text("tag", tag),
    )


def subscription(*, maxsize: object, callback_: object) -> tuple[int, Callable[[Any], object] | None]:
    checked: Callable[[Any], object] | None = callback("callback", callback_, optional=True)
    return size("maxsize", maxsize), checked
