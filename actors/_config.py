"""``SupervisorConfig``: the settings a host may change, a frozen msgspec struct checked when it is made.

Checked strictly (msgspec's strict conversion): a value of the wrong type -- ``True`` for a timeout,
``"yes"`` for a bool, ``"5"`` for a number, ``1.5`` for a count --, out of range, NaN or infinite, or a
field it does not have, raises ``InvalidConfig`` naming the field; nothing is coerced, save an int for a
float field. Importing it loads msgspec only (no pydantic): ``run-supervisor serve`` is ready sooner.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypedDict, Unpack

import msgspec
from msgspec import Meta

from run_supervisor.actors._errors import InvalidConfig
from run_supervisor.actors._validate import MAX_MS, MAX_TIMEOUT_S, QueuePolicyName, ReloadPolicyName
from run_supervisor.protocol import QueuePolicy, ReloadPolicy

__all__ = ["SupervisorConfig"]

_Ms = Annotated[int, Meta(ge=0, le=MAX_MS)]
"""A budget or grace in milliseconds: 0 to a day."""
_Count = Annotated[int, Meta(ge=0, le=10**6)]


class _Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The fields and their bounds; ``SupervisorConfig`` checks a new config by converting it to this."""

    request_timeout_s: Annotated[float, Meta(gt=0, le=MAX_TIMEOUT_S)] = 5.0
    """How long a blocking call waits for an answer."""
    dispose_budget_ms: _Ms = 1000
    """How long a dispose hook may take."""
    load_budget_ms: _Ms = 5000
    """How long a load hook may take; past it the load counts as failed (left to finish)."""
    default_grace_ms: _Ms = 1000
    """Shutdown's grace deadline when none is given."""
    retain_finished_runs: Annotated[int, Meta(ge=0, le=10**9)] = 10_000
    """Finished runs kept queryable (and guarded against id reuse)."""
    stop_timeout_s: Annotated[float, Meta(gt=0, le=60.0)] = 0.05
    """After shutdown's grace deadline: how much longer it waits for threads to end before leaving them
    behind (and reporting the host code among them in ``overran``)."""
    stall_after_ms: Annotated[int, Meta(ge=1, le=MAX_MS)] | None = None
    """A run that made no progress (no step, tool-part change, ask or heartbeat) for this long is flagged
    stalled (run.stalled; pending actions list it in stalled_runs) until it makes progress again. None
    (the default): stalls are not measured. start_run may set its own."""
    interrupt_grace_ms: _Ms | None = None
    """How long a body may go on once its run is interrupted (a cancel, a declined ask, a confirmed
    close, a deadline) before the run is finished without it: reported interrupted with its reason and
    abandoned=true, its session moving on (idle, or its next queued run starts) and its body's later
    reports refused. The body's thread or task is left to end by itself (statistics: runs_abandoned).
    None (the default): the body is waited for. start_run and cancel may set their own; a shutdown uses
    its own grace."""
    retry_attempts: _Count | None = None
    """Every run's retry budget in attempts (start_run(retry_budget=) may give its own): the retry a body
    reports past it (ctx.retrying) interrupts the run, reason timeout, origin retry_budget, and its
    run.finished carries that retry's attempt and message. None: unbounded."""
    retry_backoff_ms: _Ms | None = None
    """Every run's retry budget in total backoff (the waits its retries announce): past it the run is
    interrupted as for retry_attempts. None: unbounded."""
    shutdown_at_exit: bool = True
    """Shut down at interpreter exit if the host did not."""
    reload_policy: ReloadPolicy = ReloadPolicy.LAZY
    """When a reload loads the directory's next generation: ``lazy`` (the default, what a desktop backend
    wants: when the first run needs it or when the old generation has closed, so watchers and language
    servers never run twice while nothing asked for the new one) or ``eager`` (at once, next to the old
    generation still serving its runs). A close may override it."""
    queue_policy: QueuePolicy = QueuePolicy.QUEUE
    """What a start does while its session is busy, for every session that has no policy of its own
    (``set_queue_policy``) and every start that names none: ``queue`` (the default), ``coalesce`` or
    ``reject_if_busy``."""
    resume_budget: _Count = 1
    """With a resume callback (start(resume=)): how many times in a row a session's turn that a crash
    interrupted is continued after a restart. A run recovered at the start whose turn was continued this
    many times already is not offered to the callback: its run.recovered says resume=exhausted and the
    turn ends there (interrupted, crash). Counted in the journal, across restarts. Without a callback it
    does nothing."""


class _Fields(TypedDict, total=False):
    """The keyword arguments of ``SupervisorConfig`` and its ``replace``, as a host's type checker reads
    them: the policies also by name."""

    request_timeout_s: float
    dispose_budget_ms: int
    load_budget_ms: int
    default_grace_ms: int
    retain_finished_runs: int
    stop_timeout_s: float
    stall_after_ms: int | None
    interrupt_grace_ms: int | None
    retry_attempts: int | None
    retry_backoff_ms: int | None
    shutdown_at_exit: bool
    reload_policy: ReloadPolicy | ReloadPolicyName
    queue_policy: QueuePolicy | QueuePolicyName
    resume_budget: int


class _Checked(msgspec.StructMeta):
    """Refuses a field the config does not have as ``InvalidConfig`` (msgspec's own ``__init__`` would
    raise a ``TypeError``) before the struct is made; its values are checked by ``__post_init__``."""

    def __call__(self, *args: Any, **fields: Any) -> Any:
        _refuse_unknown(fields)
        return super().__call__(*args, **fields)


class SupervisorConfig(_Settings, frozen=True, kw_only=True, metaclass=_Checked):
    """Settings a host may change (keyword arguments; frozen). Checked strictly: a bad value (a wrong
    type -- ``True`` for a timeout, ``"yes"`` for a bool, ``"5"`` for a number, ``1.5`` for a count --,
    out of range, NaN or infinite) or an unknown field raises ``InvalidConfig`` naming the field; nothing
    is coerced, save an int for a float field. ``reload_policy`` and ``queue_policy`` take the enum or
    its name, as the docs write them (``reload_policy="lazy"``, ``queue_policy="coalesce"``), and hold
    the enum. A float subclass (``numpy.float64``) passes for a float field and is held as a float. A
    changed copy: ``config.replace(request_timeout_s=2)`` (checked the same way); the fields:
    ``msgspec.structs.fields(SupervisorConfig)``."""

    model_fields: ClassVar[dict[str, msgspec.structs.FieldInfo]]
    """Deprecated (pydantic's name, kept for hosts written against it): the field names, each to its
    msgspec ``FieldInfo`` (not pydantic's: no ``description`` or ``is_required()``)."""

    if TYPE_CHECKING:  # what a host's type checker sees: the policies also by name

        def __init__(self, **fields: Unpack[_Fields]) -> None: ...

    def replace(self, **changes: Unpack[_Fields]) -> SupervisorConfig:
        """This config with ``changes`` (keyword arguments, as the constructor takes) changed, checked as
        a new one: a bad value or an unknown field raises ``InvalidConfig``."""
        _refuse_unknown(changes)
        return msgspec.structs.replace(self, **changes)

    def __post_init__(self) -> None:
        given = msgspec.structs.asdict(self)
        # What msgspec cannot say by name (its UnicodeEncodeError names nothing) or lets through (NaN,
        # infinity): found here, the value replaced by a placeholder so that msgspec still checks the
        # other fields. Of several bad fields, the first in field order is named, whoever found it.
        ours: dict[str, InvalidConfig] = {}
        for name, value in given.items():
            if isinstance(value, str) and not _is_utf8(value):
                ours[name] = InvalidConfig(name, f"Expected a value of its type, got a `str` {_NOT_UTF8}")
                given[name] = ""
            elif name in _FLOATS and isinstance(value, float):  # a float subclass (numpy.float64) as a float
                if not math.isfinite(value):
                    ours[name] = InvalidConfig(name, f"Expected a finite number, got `{value!r}`")
                given[name] = float(value) if math.isfinite(value) else 1.0
        try:
            checked = msgspec.convert(given, _Settings, strict=True)
        except msgspec.ValidationError as exc:
            theirs = _refusal(str(exc))
            order = {name: place for place, name in enumerate(self.__struct_fields__)}
            first = min((*ours.values(), theirs), key=lambda refusal: order.get(refusal.field, len(order)))
            raise first from None
        if ours:
            raise next(iter(ours.values()))
        for name in self.__struct_fields__:  # the policies by name become the enums, an int a float
            msgspec.structs.force_setattr(self, name, getattr(checked, name))

    def model_copy(self, *, update: dict[str, Any] | None = None) -> SupervisorConfig:
        """Deprecated: ``config.replace(**update)`` (pydantic's name, kept for hosts written against it)."""
        return self.replace(**(update or {}))


_NOT_UTF8 = "that is not valid UTF-8"

_FLOATS = tuple(
    name for name, kind in typing.get_type_hints(_Settings).items() if float in (kind, *typing.get_args(kind))
)
"""The float fields (``float`` or ``float | None``)."""


SupervisorConfig.model_fields = {field.name: field for field in msgspec.structs.fields(SupervisorConfig)}


def _is_utf8(text: str) -> bool:
    """``text`` can be written as UTF-8 (it holds no lone surrogate such as ``"\\ud800"``)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _refuse_unknown(names: Iterable[str]) -> None:
    """``InvalidConfig`` for the first of ``names`` that is not a field (msgspec: a ``TypeError``)."""
    for name in names:
        if name not in _Settings.__struct_fields__:
            raise _refusal(f"Object contains unknown field `{name}`")


def _refusal(error: str) -> InvalidConfig:
    """msgspec's ``Expected `float` > 0.0 - at `$.request_timeout_s``` as ``request_timeout_s: Expected
    `float` > 0.0``; an unknown field as ``name: not a field (the fields: ...)``."""
    text, _, where = error.rpartition(" - at `$.")
    if text:
        return InvalidConfig(where.rstrip("`"), text)
    name = error.rpartition("unknown field `")[2].rstrip("`")
    return InvalidConfig(name, f"not a field (the fields: {', '.join(SupervisorConfig.__struct_fields__)})")
