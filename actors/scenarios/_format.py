"""Scenario files: read one, validate it strictly, hand the runner frozen specs with every default applied.

The format is a public contract (``scenario-format.md``): a scenario is TOML, or the same document as JSON.
Validation has two layers. Pydantic models (``extra="forbid"``, strict types: a boolean is never an integer)
check the shape of the document; the rules that span keys (tool parts, ids and their one namespace, what an
action may name, ``when`` events, expectations) are checked below in plain code. Either way the first problem
found is raised as a :class:`ScenarioFileError` naming the file, the offending key as a dotted path
(``runs[0].steps[1].tool``, ``expect.r9``) and what is wrong in one sentence.

The runner gets frozen dataclasses (tuples, read-only mappings) and never re-derives a default. Closed values
are the protocol's enums (``StepKind``, ``CloseAction``, ``CloseMode``, ``Outcome``, ``PartState``…): the
vocabulary is spelled once, in ``protocol/_enums.py``; the few words only this format has (``RunStart``,
``UserAction``, ``Decision``, ``ScenarioResult``, ``WhenKind``) are enums here, and every set of allowed
values is derived from an enum.

Why pydantic for the shape and not msgspec (whose errors carry a path such as ``$.runs[0].steps[0].ms``):
msgspec's path stops at a table entry (``$.expect[...]``, ``$.instance_faults[...]``), which would lose the
key the contract requires us to name, and its messages would have to be parsed back into the contract's
wording; the translation below stays the same size either way.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import stat
import sys
import tomllib
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any, Literal, NoReturn, TypeVar

from msgspec import inspect as msgspec_inspect
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from run_supervisor.protocol import (
    CLOSE_RULES,
    AskKind,
    CloseAction,
    CloseMode,
    CloseResult,
    Event,
    FormAnswer,
    InterruptReason,
    Outcome,
    PartState,
    Phase,
    Question,
    QueuePolicy,
    RejectCode,
    ReloadPolicy,
    RequestResult,
    RetryBudget,
    RunSnapshot,
    SessionStatus,
    ShutdownReason,
    StepKind,
)

__all__ = [
    "CLOSES",
    "EVENT_FIELDS",
    "MAX_MS",
    "NONE",
    "SHUTDOWNS",
    "ActionDo",
    "ActionSpec",
    "Decision",
    "EventExpectation",
    "Expectation",
    "ExpectationTarget",
    "InstanceFaultSpec",
    "PartExpectation",
    "RetrySpec",
    "RunSpec",
    "RunStart",
    "Scenario",
    "ScenarioFileError",
    "ScenarioResult",
    "StepSpec",
    "UserAction",
    "When",
    "WhenKind",
    "action_do",
    "load_scenario",
    "parse_scenario",
    "scenario_files",
    "shutdown_reason",
]


# ----------------------------------------------------------------------------------------------------
# The error


class ScenarioFileError(Exception):
    """A scenario file is invalid: bad TOML or JSON, an unknown key, a broken rule (exit status 2 in the CLI).

    ``file`` is the path as given, ``key`` the offending key as a dotted path (``runs[0].steps[1].tool``,
    ``actions[2].when``, ``expect.r9``) or ``None`` when the problem is the file as a whole (bad syntax, a
    JSON document that is not an object), and ``message`` one readable sentence.
    """

    file: str
    key: str | None
    message: str

    def __init__(self, file: str, key: str | None, message: str) -> None:
        super().__init__(file, key, message)
        self.file = file
        self.key = key
        self.message = message

    def __str__(self) -> str:
        if self.key is None:
            return f"{self.file}: {self.message}"
        return f"{self.file}: {self.key}: {self.message}"


class _InvalidError(Exception):
    """A problem found while checking a document; becomes a ScenarioFileError once the file name is added."""

    def __init__(self, key: str | None, message: str) -> None:
        super().__init__(key, message)
        self.key = key
        self.message = message


# ----------------------------------------------------------------------------------------------------
# What the runner gets


@dataclass(frozen=True, slots=True)
class RetrySpec:
    """One retry a ``model`` step reports before it starts (an extension)."""

    message: str
    attempt: int
    """Explicit, or the retry's position in the step's ``retry`` list (1, 2...)."""
    next_at_ms: int | None = None
    """When the next attempt is due, Unix epoch milliseconds (None: unknown)."""
    backoff_ms: int | None = None
    """Or: the next attempt is due this long after the report (``next_at`` is then now plus it)."""


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One step of a run, defaults applied."""

    kind: StepKind
    id: str
    """Explicit, or the kind (``kind-2``, ``kind-3``… for later steps of that kind without an id)."""
    tool: str | None
    """The tool of a ``tool_input`` or ``tool_exec`` step; ``None`` on other kinds."""
    gate: str | None
    at: PartState
    """Where a ``tool_exec`` step's gate holds: ``PREPARED`` or ``RUNNING`` (default; also on other kinds)."""
    ms: int
    error: str | None
    """``tool_exec`` only: the tool fails with this message."""
    fail: str | None
    ignores_cancel: bool
    part: int | None
    """Index (0-based, within the run) of the tool part this step belongs to; ``None`` outside a tool part."""
    ask: str | None = None
    """``permission`` and ``form``: the ask's name (actions may reply to it by name)."""
    wait: bool = True
    """``permission`` and ``form``: ``False`` opens the ask and goes on; it is waited for after the
    last step."""
    timeout_ms: int | None = None
    """``permission`` and ``form``: how long the body waits; then the ask is withdrawn and the call fails."""
    title: str | None = None
    command: str | None = None
    options: tuple[str, ...] = ()
    questions: tuple[Question, ...] = ()
    key: str | None = None
    """An extension, ``permission`` steps: what an "always" grant of the ask covers (its payload's
    ``key``): a grant of another ask of the session with this key approves it."""
    heartbeat_ms: int | None = None
    """An extension (stalls): while the step waits at its gate or for its ``ms``, the body calls
    ``ctx.heartbeat()`` this often -- a stream that is alive; without it a waiting step makes no
    progress, like a hung one."""
    retry: tuple[str, ...] = ()
    """An extension (retries), ``model`` steps: the body reports a retry with each message (attempts 1,
    2...) before the step starts; the step's ``gate`` then holds between the retries and the step's
    start (the provider's backoff), so the session shows ``retry`` until it opens."""
    retries: tuple[RetrySpec, ...] = ()
    """The same retries with their details: each one's message, attempt and ``next_at_ms``."""


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run of the scenario."""

    id: str
    session: str
    directory: str
    start: RunStart
    steps: tuple[StepSpec, ...]
    tools: tuple[str, ...]
    """The tool of each tool part, in order: ``len(tools)`` is the number of tool parts."""
    parent: str | None = None
    """An extension (child runs): the run of this file it is a child of."""
    queue_policy: QueuePolicy | None = None
    """An extension (queue policies): the policy its start names; None: its session's default."""
    deadline_ms: int | None = None
    """An extension (deadlines): the run's deadline, counted from its start."""
    resume_of: str | None = None
    """An extension: the run of this file this one continues (``StartRun.resume_of``)."""
    interrupt_grace_ms: int | None = None
    """An extension: how long its body may go on once the run is interrupted before the run is
    abandoned (``StartRun.interrupt_grace_ms``); None: the scenario's."""
    retry_budget: RetryBudget | None = None
    """An extension: the run's retry budget (``StartRun.retry_budget``); None: the scenario's."""


@dataclass(frozen=True, slots=True)
class When:
    """An event as named in an action's ``when`` (or an expectation's ``completed_after``)."""

    raw: str
    kind: WhenKind
    run: str | None = None
    step: str | None = None
    action: str | None = None
    result: CloseResult | RequestResult | None = None
    """For ``ACTION_RESULT``: the result, for example ``DEFERRED``, ``OK`` or ``FORCED``."""


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One action of the scenario, defaults applied; keys the action's ``do`` does not take are ``None``."""

    id: str
    """Explicit, or ``action-N`` (N its 1-based position among the actions)."""
    when: When
    do: ActionDo
    directory: str | None = None
    mode: CloseMode | None = None
    """The four closes: ``MAINTENANCE`` or ``USER_CONFIRMED_INTERRUPT``."""
    origin: str | None = None
    """Default: the ``do`` value for closes, ``shutdown`` and ``test_teardown``; ``user`` for ``cancel``."""
    run: str | None = None
    ask: str | None = None
    """Replies: the name of the ask (a ``permission`` or ``form`` step's ``ask``) they answer; without
    it, the reply names the run (the contract's way: its one open ask of that kind)."""
    decision: Decision | None = None
    message: str | None = None
    answer: FormAnswer | None = None
    """``answer_form``: one text, or (an extension) one entry per question, a list of picks for a
    ``multiple`` one (``answer = ["main", ["lint", "tests"]]``)."""
    gate: str | None = None
    grace_ms: int | None = None
    """``shutdown`` and ``test_teardown``: default 1000."""
    fingerprint: str | None = None
    """The four closes (an extension): what the close would change to; see the no-op gate."""
    reload_policy: ReloadPolicy | None = None
    """``reload`` only (an extension): this reload's policy; None: the scenario's ``reload_policy``."""
    action: str | None = None
    """``confirm`` (an extension): the file id of the maintenance close it confirms."""
    session: str | None = None
    """``cancel_session`` and ``delete_session`` (extensions): the session they act on."""
    confirm: bool = False
    """``delete_session``: stop the session's work first instead of being refused ``session_busy``."""
    always: bool = False
    """``reply_permission`` (an extension): the approval grants the ask's ``key`` for its session."""


@dataclass(frozen=True, slots=True)
class InstanceFaultSpec:
    """How a directory's instance misbehaves when it is disposed (and, an extension, loaded)."""

    dispose_error: str | None = None
    dispose_ms: int = 0
    load_error: str | None = None
    """An extension: the load hook raises this (runs that read the instance fail with it)."""
    load_ms: int = 0
    """An extension: the load hook takes this long (counted against ``load_budget_ms``)."""
    load_gate: str | None = None
    """An extension: the load hook waits until an ``open_gate`` opens this gate (a slow load
    held at an exact point)."""
    load_generations: tuple[int, ...] = ()
    """An extension: the generations whose load misbehaves; empty: every generation."""

    @property
    def loads_badly(self) -> bool:
        """Some load of the directory raises, takes time or waits at a gate."""
        return self.load_error is not None or self.load_ms > 0 or self.load_gate is not None

    def affects(self, generation: int) -> bool:
        """The load of this generation misbehaves."""
        return self.loads_badly and (not self.load_generations or generation in self.load_generations)


@dataclass(frozen=True, slots=True)
class PartExpectation:
    """An expected tool part given as a table; ``tool_started`` and ``label`` ``None`` when the file
    does not say."""

    state: PartState
    tool_started: bool | None = None
    label: str | None = None


@dataclass(frozen=True, slots=True)
class Expectation:
    """One ``[expect]`` entry, validated and normalized.

    ``fields`` holds only the keys the file gives, in file order, with the protocol's enums for closed
    values (``outcome``: :class:`Outcome`, ``result``: :class:`CloseResult` or :class:`ScenarioResult`…).
    The string ``"none"`` is already ``None``;
    ``generation`` is an int; ``tool_parts`` is a tuple of :class:`PartState` and :class:`PartExpectation`;
    ``completed_after`` is a :class:`When`; ``interrupted_runs`` is a sorted tuple without duplicates.
    """

    target: str
    target_kind: ExpectationTarget
    fields: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class EventExpectation:
    """One ``expect_events`` entry (an extension): the events of the report's timeline of type ``type``
    whose fields hold ``fields`` (a table value matches a table that holds at least its keys, the
    string ``"none"`` is already ``None``), counted between ``after`` and ``before`` (the first such
    event; None: the timeline's start or end), must number ``count`` (None: at least one)."""

    key: str
    """Where it is in the file (``expect_events[2]``), for the failure line."""
    type: str
    fields: Mapping[str, object]
    count: int | None = None
    after: When | None = None
    before: When | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    """A valid scenario file."""

    file: str
    name: str
    description: str | None
    directories: tuple[str, ...]
    runs: tuple[RunSpec, ...]
    actions: tuple[ActionSpec, ...]
    expect: tuple[Expectation, ...]
    instance_faults: Mapping[str, InstanceFaultSpec]
    """Keyed by directory."""
    sessions: tuple[str, ...]
    """Session ids in order of first appearance among the runs."""
    gates: tuple[str, ...]
    """Every gate named by a step, sorted."""
    fingerprints: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    stall_after_ms: int | None = None
    """An extension: the supervisor's ``stall_after_ms`` for the play (None: stalls not measured)."""
    """An extension: the fingerprint each listed directory's first generation is loaded with."""
    queue_policies: Mapping[str, QueuePolicy] = field(default_factory=lambda: MappingProxyType({}))
    """An extension: each listed session's default queue policy, set before any run starts."""
    reload_policy: ReloadPolicy = ReloadPolicy.EAGER
    """An extension: when a reload loads the next generation. ``eager`` unless the file says
    ``reload_policy = "lazy"``: the public contract says a reload loads it at once."""
    expect_events: tuple[EventExpectation, ...] = ()
    """An extension: what the timeline must hold (or must not), counted, between two events."""
    load_budget_ms: int | None = None
    """An extension: the supervisor's ``load_budget_ms`` (None: its default)."""
    load_gates: tuple[str, ...] = ()
    """An extension: every gate an instance fault's ``load_gate`` names, sorted."""
    interrupt_grace_ms: int | None = None
    """An extension: the supervisor's ``interrupt_grace_ms`` (None: an interrupted body is waited for)."""
    retry_attempts: int | None = None
    """An extension: the supervisor's ``retry_attempts`` (every run's retry budget in attempts)."""
    retry_backoff_ms: int | None = None
    """An extension: the supervisor's ``retry_backoff_ms`` (every run's budget of total backoff)."""
    resumes: Mapping[str, str] | None = None
    """An extension: the resume policy of every supervisor started after a crash or a restart
    (``Supervisor.start(resume=)``): a run of this file it recovers -> the ``manual`` run of this
    file that continues it (a recovered run not listed is declined). None: no resume policy."""
    resume_budget: int | None = None
    """An extension: the supervisor's ``resume_budget`` (None: its default, 1)."""


# ----------------------------------------------------------------------------------------------------
# The vocabulary: the protocol's enums, plus the few words only the scenario format has


class RunStart(StrEnum):
    """When a run starts."""

    BEGIN = "begin"
    """When the scenario starts, in file order."""
    MANUAL = "manual"
    """When a ``start_run`` action starts it."""


class UserAction(StrEnum):
    """The actions that are not lifecycle closes (those are the protocol's :class:`CloseAction`)."""

    CANCEL = "cancel"
    START_RUN = "start_run"
    REPLY_PERMISSION = "reply_permission"
    ANSWER_FORM = "answer_form"
    CANCEL_FORM = "cancel_form"
    OPEN_GATE = "open_gate"
    """Done by the runner itself: it opens one of the file's gates."""
    CONFIRM = "confirm"
    """An extension (stalls): ``confirm_close`` of the close named by ``action``: its blocking runs
    are interrupted (``lifecycle_interrupt``); answered with that close's result."""
    CRASH = InterruptReason.CRASH.value  # the action is named after the reason it leaves behind
    """Done by the runner itself: the supervisor dies as a kill would (its run journal keeps only
    what was committed), and a new one starts on the same journal and recovers what was unfinished."""
    CANCEL_SESSION = "cancel_session"
    """An extension: stop a whole session (``CancelSession``): its queued runs end unstarted and its
    active run is interrupted, all naming this action."""
    DELETE_SESSION = "delete_session"
    """An extension: forget a session (``DeleteSession``); refused ``session_busy`` while it has work,
    unless ``confirm``: then stopped first, as ``cancel_session``."""
    WAIT_RUN = "wait_run"
    """An extension: a caller joins the run's result (``RunHandle.wait``); answered when the run has
    finished, with its outcome. Several such actions are several callers joined to one run."""
    RESTART = "restart"
    """An extension: a graceful restart. The supervisor shuts down (``shutdown``'s rules, its
    ``grace_ms``), and a new one starts on the same run journal, with nothing left to recover."""


ActionDo = CloseAction | UserAction
"""What an action does (its ``do``)."""


class Decision(StrEnum):
    """A ``reply_permission``'s ``decision``."""

    APPROVE = "approve"
    REJECT = "reject"


class ScenarioResult(StrEnum):
    """Results only a scenario report has, beside the protocol's :class:`CloseResult`."""

    NOT_FIRED = "not_fired"
    """The action's ``when`` never came."""


class WhenKind(StrEnum):
    """What an event named in a ``when`` (or a ``completed_after``) is."""

    BEGIN = "begin"
    RUN_STARTED = "run_started"
    RUN_FINISHED = "run_finished"
    STEP_STARTED = "step_started"
    STEP_FINISHED = "step_finished"
    ACTION_RESULT = "action_result"
    """``<action>.<result>``."""
    ACTION_COMPLETED = "action_completed"
    """``<action>.completed``: a lifecycle action's ``lifecycle.completed`` event."""
    RUN_STALLED = "run_stalled"
    """An extension: ``<run>.stalled``, the run's first ``run.stalled`` event."""
    RUN_UNSTALLED = "run_unstalled"
    """An extension: ``<run>.unstalled``, the run's first ``run.unstalled`` event."""
    SESSION_RETRY = "session_retry"
    """``<session>.retry`` (an extension): the session's status became ``retry`` (each attempt)."""


class ExpectationTarget(StrEnum):
    """What an ``[expect]`` key names."""

    RUN = "run"
    ACTION = "action"
    SESSION = "session"


NONE = "none"
"""In ``[expect]``, the string that expects null."""

MAX_MS = 86_400_000
"""The largest ``ms``, ``grace_ms`` or ``dispose_ms`` a file may give: one day (a story, not a soak)."""

_SHUTDOWN_REASONS: Mapping[CloseAction, ShutdownReason] = MappingProxyType(
    {CloseAction.SHUTDOWN: ShutdownReason.SHUTDOWN, CloseAction.TEST_TEARDOWN: ShutdownReason.TEST_TEARDOWN}
)
SHUTDOWNS: frozenset[CloseAction] = frozenset(_SHUTDOWN_REASONS)
"""``shutdown`` and ``test_teardown``."""
CLOSES: frozenset[CloseAction] = frozenset(CloseAction) - SHUTDOWNS
"""The four closes: ``dispose``, ``dispose_all``, ``reload``, ``invalidate_config``."""
_CLOSE_MODES = tuple(mode for mode, rule in CLOSE_RULES.items() if not rule.covers_everything)
"""The modes a close may carry: the rules' (a shutdown-like mode is a shutdown's)."""
_TOOL_KINDS = (StepKind.TOOL_INPUT, StepKind.TOOL_EXEC)
_TOOL_EXEC_AT = (PartState.PREPARED, PartState.RUNNING)
_DO_VALUES: tuple[str, ...] = (*(do.value for do in CloseAction), *(do.value for do in UserAction))


def _event_field_types() -> Mapping[str, Mapping[str, msgspec_inspect.Type]]:
    """Each event type of the report's timeline and the type of each field its rows have, by the
    report's names: every field of the protocol's event (``run`` and ``action`` for ``run_id`` and
    ``action_id``; not ``seq``, ``parts`` or ``tag``), read from the event structs so a new field is
    expectable at once, plus what the runner adds (a recovered run's ``run.finished``, the file's
    ask names, a failed preload...)."""
    renamed = {"run_id": "run", "action_id": "action"}
    found: dict[str, dict[str, list[msgspec_inspect.Type]]] = {}
    for struct in typing.get_args(Event):
        info = msgspec_inspect.type_info(struct)
        assert isinstance(info, msgspec_inspect.StructType)
        fields = found.setdefault(str(info.tag), {})
        for item in info.fields:
            if item.name not in ("seq", "parts", "tag"):
                fields.setdefault(renamed.get(item.name, item.name), []).append(item.type)
    text, maybe_text = (
        msgspec_inspect.StrType(),
        msgspec_inspect.UnionType((msgspec_inspect.StrType(), msgspec_inspect.NoneType())),
    )
    finished = found["run.finished"]
    for name, types in found.pop("run.recovered").items():  # shown as the run's run.finished
        finished.setdefault(name, []).extend(types)
    finished["recovered"] = [msgspec_inspect.BoolType()]
    for tag in [tag for tag in found if tag.startswith("ask.")]:
        found[tag]["ask"] = [text]  # the file's ask name
        found[tag]["action"] = [maybe_text]  # the reply action that decided it
    found["lifecycle.confirmed"]["confirm"] = [maybe_text]
    found["instance.load_failed"] = {"directory": [text], "error": [text]}  # the runner's: a preload
    snapshot = msgspec_inspect.type_info(RunSnapshot)
    assert isinstance(snapshot, msgspec_inspect.StructType)
    joined = {field.name: [field.type] for field in snapshot.fields if field.name in ("outcome", "reason")}
    found["action.result"].update({"run": [text], **joined})  # the runner's: a wait_run's answer
    return MappingProxyType(
        {
            tag: MappingProxyType({name: _one_type(types) for name, types in fields.items()})
            for tag, fields in found.items()
        }
    )


def _one_type(types: Sequence[msgspec_inspect.Type]) -> msgspec_inspect.Type:
    """The types a field has in the structs that make one report row, as one (a flat union)."""
    members: list[msgspec_inspect.Type] = []
    for given in types:
        for member in given.types if isinstance(given, msgspec_inspect.UnionType) else (given,):
            if member not in members:
                members.append(member)
    return members[0] if len(members) == 1 else msgspec_inspect.UnionType(tuple(members))


_EVENT_FIELD_TYPES = _event_field_types()
EVENT_FIELDS: Mapping[str, frozenset[str]] = MappingProxyType(
    {tag: frozenset(fields) for tag, fields in _EVENT_FIELD_TYPES.items()}
)
"""The event types an ``expect_events`` entry may name, each with the fields it may match."""
_EVENT_KEYS = ("type", "count", "after", "before")
"""The keys of an ``expect_events`` entry that are not fields of the event."""


def shutdown_reason(do: CloseAction) -> ShutdownReason:
    """The reason a ``shutdown`` or ``test_teardown`` action interrupts runs with."""
    return _SHUTDOWN_REASONS[do]


def action_do(value: str) -> ActionDo:
    """The ``do`` named by ``value`` (one of :data:`ActionDo`'s values)."""
    return CloseAction(value) if value in _values(CloseAction) else UserAction(value)


def _values(enum: type[StrEnum]) -> frozenset[str]:
    return frozenset(member.value for member in enum)


_STEP_COMMON_KEYS = ("kind", "id", "gate", "ms", "fail", "ignores_cancel", "heartbeat_ms")
_ASK_KEYS = ("ask", "wait", "timeout_ms", "title")  # this project: asks with names and payloads
_STEP_KEYS: Mapping[StepKind, frozenset[str]] = {
    StepKind.MODEL: frozenset((*_STEP_COMMON_KEYS, "retry")),
    StepKind.TOOL_INPUT: frozenset((*_STEP_COMMON_KEYS, "tool")),
    StepKind.TOOL_EXEC: frozenset((*_STEP_COMMON_KEYS, "tool", "at", "error")),
    StepKind.PERMISSION: frozenset((*_STEP_COMMON_KEYS, *_ASK_KEYS, "command", "options", "key")),
    StepKind.FORM: frozenset((*_STEP_COMMON_KEYS, *_ASK_KEYS, "questions")),
}
_STEP_KEY_HOME: Mapping[str, str] = {
    "tool": "tool_input and tool_exec steps",
    "at": "tool_exec steps",
    "error": "tool_exec steps",
    **dict.fromkeys(_ASK_KEYS, "permission and form steps"),
    "command": "permission steps",
    "options": "permission steps",
    "key": "permission steps",
    "questions": "form steps",
    "retry": "model steps",
}

# Keys each `do` takes besides id, when and do (in the contract's order), and the ones it requires.
_ACTION_KEYS: Mapping[ActionDo, tuple[str, ...]] = {
    CloseAction.DISPOSE: ("directory", "mode", "origin", "fingerprint", "grace_ms"),
    CloseAction.DISPOSE_ALL: ("mode", "origin", "fingerprint", "grace_ms"),
    CloseAction.RELOAD: ("directory", "mode", "origin", "fingerprint", "reload_policy", "grace_ms"),
    CloseAction.INVALIDATE_CONFIG: ("mode", "origin", "fingerprint", "grace_ms"),
    UserAction.CANCEL: ("run", "origin", "grace_ms"),
    CloseAction.SHUTDOWN: ("grace_ms", "origin"),
    CloseAction.TEST_TEARDOWN: ("grace_ms", "origin"),
    UserAction.START_RUN: ("run",),
    UserAction.REPLY_PERMISSION: ("run", "ask", "decision", "message", "always"),
    UserAction.ANSWER_FORM: ("run", "ask", "answer"),
    UserAction.CANCEL_FORM: ("run", "ask", "message"),
    UserAction.OPEN_GATE: ("gate",),
    UserAction.CRASH: (),
    UserAction.CONFIRM: ("action", "origin", "grace_ms"),
    UserAction.RESTART: ("grace_ms", "origin"),
    UserAction.WAIT_RUN: ("run",),
    UserAction.CANCEL_SESSION: ("session", "origin", "grace_ms"),
    UserAction.DELETE_SESSION: ("session", "confirm", "origin", "grace_ms"),
}
_ASK_OF: Mapping[ActionDo, AskKind] = {
    UserAction.REPLY_PERMISSION: AskKind.PERMISSION,
    UserAction.ANSWER_FORM: AskKind.FORM,
    UserAction.CANCEL_FORM: AskKind.FORM,
}
_ACTION_REQUIRED: Mapping[ActionDo, tuple[str, ...]] = {
    CloseAction.DISPOSE: ("directory", "mode"),
    CloseAction.DISPOSE_ALL: ("mode",),
    CloseAction.RELOAD: ("directory", "mode"),
    CloseAction.INVALIDATE_CONFIG: ("mode",),
    UserAction.CANCEL: ("run",),
    CloseAction.SHUTDOWN: (),
    CloseAction.TEST_TEARDOWN: (),
    UserAction.START_RUN: ("run",),
    UserAction.REPLY_PERMISSION: ("run", "decision"),
    UserAction.ANSWER_FORM: ("run", "answer"),
    UserAction.CANCEL_FORM: ("run",),
    UserAction.OPEN_GATE: ("gate",),
    UserAction.CRASH: (),
    UserAction.CONFIRM: ("action",),
    UserAction.RESTART: (),
    UserAction.WAIT_RUN: ("run",),
    UserAction.CANCEL_SESSION: ("session",),
    UserAction.DELETE_SESSION: ("session",),
}
_DEFAULT_ORIGIN: Mapping[ActionDo, str] = {
    **{do: do.value for do in CloseAction},
    UserAction.CANCEL: "user",
    UserAction.CANCEL_SESSION: "user",
    UserAction.DELETE_SESSION: "user",
    UserAction.RESTART: UserAction.RESTART.value,
}
_DEFAULT_GRACE_MS = 1000


def _answer_result(value: str) -> CloseResult | RequestResult:
    """``ok`` answers a request that is not a close; any other result is spelled as a close's."""
    return RequestResult.OK if value == RequestResult.OK else CloseResult(value)


def _results(
    do: ActionDo, mode: CloseMode | None, *, fingerprint: bool = False
) -> tuple[CloseResult | RequestResult, ...]:
    """The results an action can give (``<action>.completed`` aside: see :func:`_parse_event`). Only a
    close with a ``fingerprint`` can be a ``noop``."""
    if do in CLOSES:
        noop = (CloseResult.NOOP,) if fingerprint else ()
        if mode is not None and CLOSE_RULES[mode].interrupts_with is not None:
            return (CloseResult.DEFERRED, CloseResult.INTERRUPTED, CloseResult.REJECTED, *noop)
        return (CloseResult.DEFERRED, CloseResult.REJECTED, *noop)
    if do in SHUTDOWNS or do is UserAction.RESTART:
        return (CloseResult.FORCED,)  # never rejected: a second one gets the first one's result
    if do in (UserAction.OPEN_GATE, UserAction.CRASH):
        return (RequestResult.OK,)  # always ok, even after shutdown
    if do is UserAction.CONFIRM:  # answered with the confirmed close's result
        return (CloseResult.DEFERRED, CloseResult.COMPLETED, CloseResult.REJECTED)
    return (RequestResult.OK, RequestResult.REJECTED)


# ----------------------------------------------------------------------------------------------------
# The shape of the document (pydantic)


def _valid_id(value: str) -> str:
    if not value or "." in value:
        raise PydanticCustomError(
            "scenario_id", "an id must be a non-empty string without '.', not {value}", {"value": repr(value)}
        )
    return value


def _non_empty(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("scenario_empty", "must not be empty")
    return value


def _generation(value: object) -> object:
    if value == NONE or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise PydanticCustomError(
        "scenario_generation",
        "must be a generation number (1, 2, 3…) or 'none', not {value}",
        {"value": _describe(value)},
    )


def _bool_or_none(value: object) -> object:
    if value == NONE or isinstance(value, bool):
        return value
    raise PydanticCustomError(
        "scenario_bool", "must be true, false or 'none', not {value}", {"value": _describe(value)}
    )


def _one_of_values(values: Iterable[str], *, none: bool = False) -> AfterValidator:
    """A check that a string is one of ``values`` (plus ``"none"`` when ``none``): the enums' values."""
    allowed = (*values, *((NONE,) if none else ()))

    def check(value: str) -> str:
        if value not in allowed:
            raise PydanticCustomError(
                "scenario_choice",
                "must be {expected}, not {value}",
                {"expected": _one_of(allowed), "value": _describe(value)},
            )
        return value

    return AfterValidator(check)


_Id = Annotated[StrictStr, AfterValidator(_valid_id)]
_Text = Annotated[StrictStr, AfterValidator(_non_empty)]
_Ms = Annotated[StrictInt, Field(ge=0, le=MAX_MS)]
_Directory = Annotated[StrictStr, Field(min_length=1)]
_M = TypeVar("_M", bound=BaseModel)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _QuestionModel(_Model):
    question: _Text
    header: _Text | None = None
    options: list[_Text] = Field(default_factory=list)
    multiple: StrictBool = False


class _RetryModel(_Model):
    message: _Text
    attempt: Annotated[StrictInt, Field(ge=1, le=2**31)] | None = None
    next_at_ms: Annotated[StrictInt, Field(ge=0, le=2**41 - 1)] | None = None
    backoff_ms: _Ms | None = None


class _StepModel(_Model):
    kind: Annotated[StrictStr, _one_of_values(StepKind)]
    id: _Id | None = None
    tool: _Text | None = None
    gate: _Id | None = None
    at: Annotated[StrictStr, _one_of_values(_TOOL_EXEC_AT)] | None = None
    ms: _Ms = 0
    error: _Text | None = None
    fail: _Text | None = None
    ignores_cancel: StrictBool = False
    ask: _Id | None = None
    wait: StrictBool = True
    timeout_ms: _Ms | None = None
    title: _Text | None = None
    command: _Text | None = None
    options: list[_Text] | None = None
    questions: list[_Text | _QuestionModel] | None = None
    heartbeat_ms: Annotated[StrictInt, Field(ge=1, le=MAX_MS)] | None = None
    key: _Text | None = None
    retry: list[Any] | None = None
    """Messages, or tables (``_RetryModel``): checked one by one, so an error names the entry's key."""


class _BudgetModel(_Model):
    attempts: Annotated[StrictInt, Field(ge=0, le=10**6)] | None = None
    backoff_ms: _Ms | None = None


class _RunModel(_Model):
    id: _Id
    session: _Id
    directory: _Directory
    start: Annotated[StrictStr, _one_of_values(RunStart)] = RunStart.BEGIN.value
    steps: Annotated[list[_StepModel], Field(min_length=1)]
    parent: _Id | None = None
    queue_policy: Annotated[StrictStr, _one_of_values(QueuePolicy)] | None = None
    deadline_ms: Annotated[_Ms, Field(ge=1)] | None = None
    resume_of: _Id | None = None
    interrupt_grace_ms: _Ms | None = None
    retry_budget: _BudgetModel | None = None


class _ActionModel(_Model):
    id: _Id | None = None
    when: StrictStr
    do: Annotated[StrictStr, _one_of_values(_DO_VALUES)]
    directory: StrictStr | None = None
    mode: StrictStr | None = None
    origin: StrictStr | None = None
    run: StrictStr | None = None
    ask: StrictStr | None = None
    decision: StrictStr | None = None
    message: StrictStr | None = None
    answer: Any = None
    gate: StrictStr | None = None
    grace_ms: _Ms | None = None
    fingerprint: _Text | None = None
    reload_policy: Annotated[StrictStr, _one_of_values(ReloadPolicy)] | None = None
    action: StrictStr | None = None
    session: StrictStr | None = None
    confirm: StrictBool | None = None
    always: StrictBool | None = None


class _FaultModel(_Model):
    dispose_error: _Text | None = None
    dispose_ms: _Ms = 0
    load_error: _Text | None = None
    load_ms: _Ms = 0
    load_gate: _Id | None = None
    load_generations: list[Annotated[StrictInt, Field(ge=1)]] | None = None


class _ScenarioModel(_Model):
    name: _Text
    description: StrictStr | None = None
    directories: list[_Directory] = Field(default_factory=list)
    runs: list[_RunModel] = Field(default_factory=list)
    actions: list[_ActionModel] = Field(default_factory=list)
    expect: dict[StrictStr, dict[StrictStr, Any]] = Field(default_factory=dict)
    instance_faults: dict[_Directory, _FaultModel] = Field(default_factory=dict)
    fingerprints: dict[_Directory, _Text] = Field(default_factory=dict)
    stall_after_ms: Annotated[StrictInt, Field(ge=1, le=MAX_MS)] | None = None
    queue_policies: dict[_Id, Annotated[StrictStr, _one_of_values(QueuePolicy)]] = Field(default_factory=dict)
    reload_policy: Annotated[StrictStr, _one_of_values(ReloadPolicy)] = ReloadPolicy.EAGER.value
    expect_events: list[dict[StrictStr, Any]] = Field(default_factory=list)
    load_budget_ms: _Ms | None = None
    interrupt_grace_ms: _Ms | None = None
    retry_attempts: Annotated[StrictInt, Field(ge=0, le=10**6)] | None = None
    retry_backoff_ms: _Ms | None = None
    resumes: dict[_Id, _Id] | None = None
    resume_budget: Annotated[StrictInt, Field(ge=0, le=10**6)] | None = None


class _RunExpectModel(_Model):
    outcome: Annotated[StrictStr, _one_of_values(Outcome, none=True)] | None = None
    reason: Annotated[StrictStr, _one_of_values(InterruptReason, none=True)] | None = None
    origin: StrictStr | None = None
    action: StrictStr | None = None
    phase: Annotated[StrictStr, _one_of_values(Phase, none=True)] | None = None
    generation: Annotated[Any, AfterValidator(_generation)] = None
    error: StrictStr | None = None
    tool_parts: list[Any] | None = None
    stalled: StrictBool | None = None
    resume_of: StrictStr | None = None
    """An extension: the run its ``run.started`` says it resumes (``"none"``: it resumes none)."""


class _PartExpectModel(_Model):
    state: Annotated[StrictStr, _one_of_values(PartState)]
    tool_started: StrictBool | None = None
    label: StrictStr | None = None


class _ActionExpectModel(_Model):
    result: Annotated[StrictStr, _one_of_values((*CloseResult, RequestResult.OK, *ScenarioResult))] | None = (
        None
    )
    completed: Annotated[Any, AfterValidator(_bool_or_none)] = None
    completed_after: StrictStr | None = None
    interrupted_runs: list[StrictStr] | None = None
    code: Annotated[StrictStr, _one_of_values(RejectCode, none=True)] | None = None
    loaded_after: StrictStr | None = None
    """A reload (an extension): its next generation's ``instance.started`` comes after this event."""
    loaded_before: StrictStr | None = None
    """A reload (an extension): its next generation's ``instance.started`` comes before this event."""
    answered_after: StrictStr | None = None
    """An extension: the action's ``action.result`` comes after this event."""
    answered_before: StrictStr | None = None
    """An extension: the action's ``action.result`` comes before this event."""
    completed_before: StrictStr | None = None
    """An extension: the action's completion event comes before this event."""
    outcome: Annotated[StrictStr, _one_of_values(Outcome, none=True)] | None = None
    """A ``wait_run`` (an extension): the outcome of the run it joined."""
    reason: Annotated[StrictStr, _one_of_values(InterruptReason, none=True)] | None = None
    """A ``wait_run`` (an extension): the reason of the run it joined."""


class _SessionExpectModel(_Model):
    status: Annotated[StrictStr, _one_of_values(SessionStatus)] | None = None
    retries: Annotated[StrictInt, Field(ge=0)] | None = None
    statuses: list[Annotated[StrictStr, _one_of_values(SessionStatus)]] | None = None
    """An extension: the session's exact sequence of ``session.status`` values."""


_WHAT: Mapping[type[BaseModel], str] = {
    _ScenarioModel: "the top level",
    _RunModel: "a run",
    _StepModel: "a step",
    _ActionModel: "an action",
    _FaultModel: "an instance fault",
    _RunExpectModel: "a run's expectation",
    _ActionExpectModel: "an action's expectation",
    _SessionExpectModel: "a session's expectation",
    _PartExpectModel: "a tool part's expectation",
    _RetryModel: "a retry",
    _BudgetModel: "a retry budget",
}

# Where each nested model sits in a scenario document ("[]" a list index, "*" a table key).
_MODEL_AT: Mapping[tuple[str, ...], type[BaseModel]] = {
    (): _ScenarioModel,
    ("runs", "[]"): _RunModel,
    ("runs", "[]", "steps", "[]"): _StepModel,
    ("runs", "[]", "retry_budget"): _BudgetModel,
    ("actions", "[]"): _ActionModel,
    ("instance_faults", "*"): _FaultModel,
}


def _model_at(root: type[BaseModel], path: Sequence[str | int]) -> type[BaseModel] | None:
    if root is not _ScenarioModel:
        return root if not path else None
    tables = ("instance_faults", "expect")
    shape = tuple(
        "[]" if isinstance(part, int) else "*" if n == 1 and path[0] in tables else part
        for n, part in enumerate(path)
    )
    return _MODEL_AT.get(shape)


def _validate(model: type[_M], data: object, prefix: tuple[str | int, ...] = ()) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _translate(exc, model, prefix) from None


def _translate(exc: ValidationError, root: type[BaseModel], prefix: tuple[str | int, ...]) -> _InvalidError:
    """The first pydantic error, as a key and a sentence."""
    error = exc.errors(include_url=False)[0]
    loc = tuple(error["loc"])
    key = _key(*prefix, *loc) if prefix or loc else None
    kind = error["type"]
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    value = error.get("input")
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        if model is None:
            return _InvalidError(key, "unknown key")
        return _InvalidError(key, f"not a key of {_WHAT[model]} (its keys: {', '.join(model.model_fields)})")
    if kind == "missing":
        return _InvalidError(key, "this key is required")
    expected = {
        "string_type": "a string",
        "int_type": "an integer",
        "bool_type": "true or false",
        "list_type": "a list",
        "dict_type": "a table",
        "model_type": "a table",
    }.get(kind)
    if expected is not None:
        return _InvalidError(key, f"must be {expected}, not {_describe(value)}")
    if kind == "literal_error":
        return _InvalidError(key, f"must be {ctx['expected']}, not {_describe(value)}")
    if kind == "greater_than_equal":
        return _InvalidError(key, f"must be at least {ctx['ge']}, not {_describe(value)}")
    if kind == "less_than_equal":
        bound = " (one day)" if ctx["le"] == MAX_MS else ""
        return _InvalidError(key, f"must be at most {ctx['le']}{bound}, not {_describe(value)}")
    if kind in ("too_short", "string_too_short"):
        return _InvalidError(key, "must not be empty")
    return _InvalidError(key, str(error["msg"]))


# ----------------------------------------------------------------------------------------------------
# Small helpers

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(*parts: str | int) -> str:
    """A dotted key path: ``runs[0].steps[1].tool``; keys that are not bare TOML keys are quoted."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            segment = part if _BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=not _is_text(part))
            out += f".{segment}" if out else segment
    return out


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime | date | time):
        return f"the date or time {value.isoformat()}"
    return type(value).__name__


def _listing(names: Iterable[str]) -> str:
    return ", ".join(names)


def _one_of(values: Iterable[str]) -> str:
    """``'a', 'b' or 'c'``, as pydantic says it."""
    quoted = [repr(str(value)) for value in values]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


# ----------------------------------------------------------------------------------------------------
# Reading


_FORMATS: Mapping[str, Literal["toml", "json"]] = {".toml": "toml", ".json": "json"}


MAX_FILE_BYTES = 4 * 1024 * 1024
"""The largest scenario file read: 4 MiB (the library's longest scenario is about 3 KiB)."""


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate a scenario file: TOML when it ends in ``.toml``, JSON when it ends in ``.json``.

    Only a regular file of at most :data:`MAX_FILE_BYTES` is read: a FIFO, a device or a folder is
    refused at once (reading it could block or never end), as is anything longer.
    """
    file = os.fspath(path)
    suffix = pathlib.Path(file).suffix
    fmt = _FORMATS.get(suffix)
    if fmt is None:
        raise ScenarioFileError(
            file, None, f"a scenario file ends in .toml or .json, not {repr(suffix) if suffix else 'nothing'}"
        )
    return parse_scenario(_read(file), file=file, fmt=fmt)


def _read(file: str) -> bytes:
    try:
        # Non-blocking: opening a FIFO must not wait for a writer. It changes nothing for a regular file.
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ScenarioFileError(file, None, f"cannot read the file: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ScenarioFileError(
                file, None, f"not a regular file ({_file_kind(mode)}): a scenario is read from a file"
            )
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_FILE_BYTES:
            raise ScenarioFileError(
                file, None, f"the file is longer than {MAX_FILE_BYTES} bytes: too long to be a scenario"
            )
        return b"".join(chunks)
    except OSError as exc:
        raise ScenarioFileError(file, None, f"cannot read the file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def parse_scenario(text: str | bytes, *, file: str, fmt: Literal["toml", "json"]) -> Scenario:
    """Validate a scenario document; ``file`` names it in errors and in ``Scenario.file``.

    Bytes are decoded as UTF-8. An ``fmt`` other than ``"toml"`` or ``"json"`` is a programming error
    (``ValueError``), not an invalid file.
    """
    try:
        document = _decode(text, fmt)
        return _build(document, file)
    except _InvalidError as exc:
        raise ScenarioFileError(file, exc.key, exc.message) from None
    except RecursionError:
        raise ScenarioFileError(file, None, "the document is nested too deeply to be a scenario") from None


def scenario_files(folder: str | os.PathLike[str]) -> list[pathlib.Path]:
    """Every ``.toml`` and ``.json`` entry of ``folder`` that is not a folder (not its subfolders), sorted
    by name. A FIFO or a device with such a name is listed, so that loading it says what is wrong.

    Raises :class:`ScenarioFileError` (``key`` ``None``) when the folder cannot be read.
    """
    try:
        entries = list(pathlib.Path(folder).iterdir())
    except OSError as exc:
        raise ScenarioFileError(
            os.fspath(folder), None, f"cannot read the folder: {exc.strerror or exc}"
        ) from None
    return sorted(
        (entry for entry in entries if entry.suffix in _FORMATS and not _is_folder(entry)),
        key=lambda entry: entry.name,
    )


def _is_folder(entry: pathlib.Path) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False  # listed: loading it will say why it cannot be read


def _decode(text: str | bytes, fmt: Literal["toml", "json"]) -> dict[str, Any]:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _InvalidError(
                None, f"the file is not UTF-8 text (byte {exc.start} cannot be decoded)"
            ) from None
    if fmt == "toml":
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise _InvalidError(None, f"invalid TOML: {exc}") from None
        except ValueError:  # an integer too long to convert (more than sys.get_int_max_str_digits())
            raise _too_long_integer(text) from None
        _check_values(document, ())
        return document
    if fmt != "json":
        raise ValueError(f"fmt must be 'toml' or 'json', not {fmt!r}")
    try:
        document = json.loads(
            text, object_pairs_hook=_json_object, parse_constant=_json_constant, parse_int=_json_int
        )
    except json.JSONDecodeError as exc:
        raise _InvalidError(
            None, f"invalid JSON: {exc.msg} (at line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(document, dict):
        raise _InvalidError(None, f"a JSON scenario must be an object, not {_describe(document)}")
    _check_values(document, ())
    return document


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for name, value in pairs:
        if name in document:
            raise _InvalidError(None, f"invalid JSON: the key {name!r} appears twice in one object")
        document[name] = value
    return document


class _TooLongInteger:
    """A JSON integer with more digits than Python converts: refused with its key by _check_values."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _json_int(digits: str) -> int | _TooLongInteger:
    if len(digits.lstrip("-")) > sys.get_int_max_str_digits() > 0:
        return _TooLongInteger(len(digits.lstrip("-")))
    return int(digits)


def _too_long_integer(text: str) -> _InvalidError:
    """Where a TOML document holds an integer too long to convert: tomllib does not say, so each long run
    of digits is swapped for a marker integer and the document parsed again to find the marker's key."""
    limit = sys.get_int_max_str_digits()
    runs = list(re.finditer(rf"[0-9][0-9_]{{{limit},}}", text))
    markers: dict[int, int] = {}  # marker -> digits
    swapped, last = [], 0
    for index, found in enumerate(runs):
        marker = _MARKER + index
        markers[marker] = len(found.group().replace("_", ""))
        swapped += [text[last : found.start()], str(marker)]
        last = found.end()
    try:
        document = tomllib.loads("".join([*swapped, text[last:]]))
    except ValueError:  # TOMLDecodeError included: report the line instead
        document = {}
    located = _find_marker(document, (), markers)
    if located is not None:
        path, digits = located
        return _InvalidError(_key(*path), f"an integer of {digits} digits: no scenario value is that large")
    line = f" (at line {text.count(chr(10), 0, runs[0].start()) + 1})" if runs else ""
    return _InvalidError(
        None, f"invalid TOML: an integer has more than {limit} digits{line}; no scenario value is that large"
    )


_MARKER = 7_315_904_118_207_331  # an integer no scenario holds, standing in for one too long to convert


def _find_marker(
    value: object, path: tuple[str | int, ...], markers: Mapping[int, int]
) -> tuple[tuple[str | int, ...], int] | None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) in markers:
        return path, markers[abs(value)]
    items: Iterable[tuple[str | int, object]] = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for name, item in items:
        found = _find_marker(item, (*path, name), markers)
        if found is not None:
            return found
    return None


def _json_constant(name: str) -> NoReturn:
    raise _InvalidError(None, f"invalid JSON: {name} is not a JSON number")


def _check_values(value: object, path: tuple[str | int, ...]) -> None:
    """No null (TOML has none, and a JSON scenario is the same document: a key is given, or left out),
    and no lone surrogate in a key or a string (JSON can spell one, ``"\\ud800"``; it is not text)."""
    if value is None:
        raise _InvalidError(_key(*path), "null is not a value here: leave the key out instead")
    if isinstance(value, _TooLongInteger):
        raise _InvalidError(
            _key(*path), f"an integer of {value.digits} digits: no scenario value is that large"
        )
    if isinstance(value, str):
        _check_text(value, path)
    elif isinstance(value, dict):
        for name, item in value.items():
            _check_text(name, (*path, name))
            _check_values(item, (*path, name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_values(item, (*path, index))


def _check_text(text: str, path: tuple[str | int, ...]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _InvalidError(
            _key(*path),
            f"holds a lone surrogate ({text[exc.start]!a}), not text: a string must be valid Unicode",
        ) from None


def _one_line(error: object) -> str:
    return " ".join(str(error).split())


# ----------------------------------------------------------------------------------------------------
# The rules that span keys


def _build(document: dict[str, Any], file: str) -> Scenario:
    model = _validate(_ScenarioModel, document)
    _check_directories(model.directories)
    for directory in model.fingerprints:
        if directory not in model.directories:
            raise _InvalidError(
                _key("fingerprints", directory), f"{directory!r} is not in directories (loaded first)"
            )
    runs = tuple(_build_run(index, run) for index, run in enumerate(model.runs))
    action_ids = _check_namespace(model.runs, model.actions)
    _check_parents(runs)
    _check_resumes(model.resumes, runs)
    sessions = tuple(dict.fromkeys(run.session for run in runs))
    load_gates = tuple(
        sorted({f.load_gate for f in model.instance_faults.values() if f.load_gate is not None})
    )
    _check_load_faults(model)
    gates = tuple(
        sorted({step.gate for run in runs for step in run.steps if step.gate is not None} | {*load_gates})
    )
    directories = {*model.directories, *(run.directory for run in runs), *model.instance_faults}
    names = _Names(
        runs={run.id: run for run in runs},
        actions=dict(zip(action_ids, model.actions, strict=True)),
        sessions=frozenset(sessions),
    )
    for index, action in enumerate(model.actions):
        _check_action(index, action, names, directories, frozenset(gates))
    actions = tuple(
        _build_action(index, action_id, action, names)
        for index, (action_id, action) in enumerate(zip(action_ids, model.actions, strict=True))
    )
    _check_when_cycles(actions)
    expect = tuple(_build_expectation(target, entry, names) for target, entry in model.expect.items())
    expect_events = tuple(
        _build_event_expectation(index, entry, names) for index, entry in enumerate(model.expect_events)
    )
    faults = {
        directory: InstanceFaultSpec(
            dispose_error=fault.dispose_error,
            dispose_ms=fault.dispose_ms,
            load_error=fault.load_error,
            load_ms=fault.load_ms,
            load_gate=fault.load_gate,
            load_generations=tuple(sorted(set(fault.load_generations or ()))),
        )
        for directory, fault in model.instance_faults.items()
    }
    return Scenario(
        file=file,
        name=model.name,
        description=model.description,
        directories=tuple(model.directories),
        runs=runs,
        actions=actions,
        expect=expect,
        instance_faults=MappingProxyType(faults),
        sessions=sessions,
        gates=gates,
        fingerprints=MappingProxyType(dict(model.fingerprints)),
        stall_after_ms=model.stall_after_ms,
        queue_policies=MappingProxyType({s: QueuePolicy(p) for s, p in model.queue_policies.items()}),
        reload_policy=ReloadPolicy(model.reload_policy),
        expect_events=expect_events,
        load_budget_ms=model.load_budget_ms,
        load_gates=load_gates,
        interrupt_grace_ms=model.interrupt_grace_ms,
        retry_attempts=model.retry_attempts,
        retry_backoff_ms=model.retry_backoff_ms,
        resumes=None if model.resumes is None else MappingProxyType(dict(model.resumes)),
        resume_budget=model.resume_budget,
    )


def _check_resumes(resumes: Mapping[str, str] | None, runs: Sequence[RunSpec]) -> None:
    """Each entry of ``resumes`` names a run of the file and the ``manual`` run of the file, in the
    same session, that continues it (and, if it names one, resumes that run); no run continues two."""
    by_id = {run.id: run for run in runs}
    taken: dict[str, str] = {}
    for recovered, continuation in (resumes or {}).items():
        if recovered not in by_id:
            raise _InvalidError(_key("resumes", recovered), f"{recovered!r} names no run of this file")
        run = by_id.get(continuation)
        key = _key("resumes", recovered)
        if run is None or continuation == recovered:
            raise _InvalidError(key, f"{continuation!r} names no other run of this file")
        if run.start is not RunStart.MANUAL:
            raise _InvalidError(
                key, f'{continuation!r} must be a start = "manual" run (the policy starts it)'
            )
        if run.session != by_id[recovered].session:
            raise _InvalidError(key, f"{continuation!r} runs in session {run.session!r}, not the turn's own")
        if run.resume_of not in (None, recovered):
            raise _InvalidError(key, f"{continuation!r} resumes {run.resume_of!r}, not {recovered!r}")
        if continuation in taken:
            raise _InvalidError(key, f"{continuation!r} already continues {taken[continuation]!r}")
        taken[continuation] = recovered


def _check_load_faults(model: _ScenarioModel) -> None:
    """A preloaded directory's load cannot wait at a gate (nothing can open it before the story
    starts), and ``load_generations`` goes with a load fault."""
    for directory, fault in model.instance_faults.items():
        key = ("instance_faults", directory)
        if fault.load_gate is not None and directory in model.directories:
            raise _InvalidError(
                _key(*key, "load_gate"),
                f"{directory!r} is loaded before the story starts (it is in directories): no action "
                "could open its load's gate; leave it out of directories so a run loads it",
            )
        bad = fault.load_error is not None or fault.load_ms > 0 or fault.load_gate is not None
        if fault.load_generations is not None and not bad:
            raise _InvalidError(
                _key(*key, "load_generations"),
                "names the generations of a load fault: give load_error, load_ms or load_gate",
            )


def _check_parents(runs: Sequence[RunSpec]) -> None:
    """A child names another run of the file, in the same directory and in a session of its own; a
    run that resumes another names another run of the file."""
    by_id = {run.id: run for run in runs}
    for index, run in enumerate(runs):
        if run.resume_of is not None and (run.resume_of not in by_id or run.resume_of == run.id):
            raise _InvalidError(
                _key("runs", index, "resume_of"), f"{run.resume_of!r} names no other run of this file"
            )
        if run.parent is None:
            continue
        parent = by_id.get(run.parent)
        key = _key("runs", index, "parent")
        if parent is None or parent is run:
            raise _InvalidError(key, f"{run.parent!r} names no other run of this file")
        if parent.directory != run.directory:
            raise _InvalidError(key, f"a child runs in its parent's directory ({parent.directory!r})")
        if parent.session == run.session:
            raise _InvalidError(key, f"a child needs a session of its own, not {run.session!r}")


@dataclass(frozen=True, slots=True)
class _Names:
    """What a `when`, an action or an expectation may name."""

    runs: Mapping[str, RunSpec]
    actions: Mapping[str, _ActionModel]
    sessions: frozenset[str]


def _check_directories(directories: Sequence[str]) -> None:
    seen: set[str] = set()
    for index, directory in enumerate(directories):
        if directory in seen:
            raise _InvalidError(_key("directories", index), f"{directory!r} is listed twice")
        seen.add(directory)


# Runs and steps


_STEP_AS_GIVEN = (
    "tool",
    "gate",
    "ms",
    "error",
    "fail",
    "ignores_cancel",
    "ask",
    "wait",
    "timeout_ms",
    "title",
    "command",
    "key",
    "heartbeat_ms",
)
"""The step keys a ``StepSpec`` holds as the file gives them (``_StepModel`` has checked them); the
others are converted (``kind``, ``at``, ``options``, ``questions``, ``retry``) or derived (``id``,
``part``)."""


def _build_run(index: int, run: _RunModel) -> RunSpec:
    for position, step in enumerate(run.steps):
        _check_step_keys(index, position, step)
    _check_ask_names(index, run.steps)
    parts, tools = _tool_parts(index, run.steps)
    ids = _step_ids(index, run.steps)
    steps = tuple(
        StepSpec(
            kind=StepKind(step.kind),
            id=step_id,
            at=PartState(step.at or PartState.RUNNING),
            part=part,
            options=tuple(step.options or ()),
            questions=tuple(_question(q) for q in step.questions or ()),
            retry=tuple(retry.message for retry in retries),
            retries=retries,
            **{name: getattr(step, name) for name in _STEP_AS_GIVEN},
        )
        for position, (step, step_id, part) in enumerate(zip(run.steps, ids, parts, strict=True))
        for retries in [_retries(step.retry or (), ("runs", index, "steps", position, "retry"))]
    )
    return RunSpec(
        id=run.id,
        session=run.session,
        directory=run.directory,
        start=RunStart(run.start),
        steps=steps,
        tools=tools,
        parent=run.parent,
        queue_policy=None if run.queue_policy is None else QueuePolicy(run.queue_policy),
        deadline_ms=run.deadline_ms,
        resume_of=run.resume_of,
        interrupt_grace_ms=run.interrupt_grace_ms,
        retry_budget=_budget(run.retry_budget, ("runs", index, "retry_budget")),
    )


def _budget(given: _BudgetModel | None, prefix: tuple[str | int, ...]) -> RetryBudget | None:
    if given is None:
        return None
    if given.attempts is None and given.backoff_ms is None:
        raise _InvalidError(_key(*prefix), "a retry budget gives attempts, backoff_ms or both")
    return RetryBudget(attempts=given.attempts, backoff_ms=given.backoff_ms)


def _retries(entries: Sequence[object], prefix: tuple[str | int, ...]) -> tuple[RetrySpec, ...]:
    """A step's ``retry`` list: each entry a message, or a table with ``message``, ``attempt`` and
    ``next_at_ms`` (an extension); the attempt defaults to the entry's position (1, 2...)."""
    retries = []
    for position, entry in enumerate(entries, start=1):
        key = (*prefix, position - 1)
        if isinstance(entry, str):
            if not entry.strip():
                raise _InvalidError(_key(*key), "must not be empty")
            retries.append(RetrySpec(message=entry, attempt=position))
        elif isinstance(entry, dict):
            given = _validate(_RetryModel, entry, key)
            if given.next_at_ms is not None and given.backoff_ms is not None:
                raise _InvalidError(
                    _key(*key, "backoff_ms"), "give next_at_ms (when) or backoff_ms (how long), not both"
                )
            attempt = position if given.attempt is None else given.attempt
            retries.append(RetrySpec(given.message, attempt, given.next_at_ms, given.backoff_ms))
        else:
            raise _InvalidError(
                _key(*key),
                f"must be a message or a table with message, attempt and next_at_ms, not {_describe(entry)}",
            )
    return tuple(retries)


def _question(given: str | _QuestionModel) -> Question:
    if isinstance(given, str):
        return Question(question=given)
    return Question(
        question=given.question, header=given.header, options=tuple(given.options), multiple=given.multiple
    )


def _check_ask_names(run: int, steps: Sequence[_StepModel]) -> None:
    seen: dict[str, int] = {}
    for position, step in enumerate(steps):
        if step.ask is None:
            continue
        if step.ask in seen:
            raise _InvalidError(
                _key("runs", run, "steps", position, "ask"),
                f"{step.ask!r} also names the ask of steps[{seen[step.ask]}]; "
                "ask names must be unique within a run",
            )
        seen[step.ask] = position


def _check_step_keys(run: int, position: int, step: _StepModel) -> None:
    allowed = _STEP_KEYS[StepKind(step.kind)]
    for name in _StepModel.model_fields:
        if name in step.model_fields_set and name not in allowed:
            raise _InvalidError(
                _key("runs", run, "steps", position, name),
                f"{name!r} is only valid on {_STEP_KEY_HOME[name]}, not on a {step.kind} step",
            )
    if step.kind in _TOOL_KINDS and step.tool is None:
        raise _InvalidError(_key("runs", run, "steps", position, "tool"), f"a {step.kind} step needs a tool")


def _tool_parts(run: int, steps: Sequence[_StepModel]) -> tuple[list[int | None], tuple[str, ...]]:
    """The tool part of each step, and the tool of each part; raises on a step outside the structure.

    A tool part is a ``tool_input`` immediately followed by a ``tool_exec`` of the same tool, then any
    ``permission`` and ``form`` steps; it ends at the next ``model`` or ``tool_input`` step.
    """
    part_of: list[int | None] = []
    tools: list[str] = []
    current: int | None = None
    opener: int | None = None  # position of a tool_input still waiting for its tool_exec
    for position, step in enumerate(steps):
        if opener is not None:
            tool = steps[opener].tool
            if step.kind != StepKind.TOOL_EXEC:
                raise _InvalidError(
                    _key("runs", run, "steps", opener),
                    f"a tool_input must be followed at once by a tool_exec of the same tool ({tool!r}), "
                    f"not by a {step.kind} step",
                )
            if step.tool != tool:
                raise _InvalidError(
                    _key("runs", run, "steps", position, "tool"),
                    f"must be {tool!r}, the tool of the tool_input right before this tool_exec, "
                    f"not {step.tool!r}",
                )
            opener = None
        elif step.kind == StepKind.MODEL:
            current = None
        elif step.kind == StepKind.TOOL_INPUT:
            assert step.tool is not None  # checked by _check_step_keys
            tools.append(step.tool)
            current = len(tools) - 1
            opener = position
        elif step.kind == StepKind.TOOL_EXEC:
            raise _InvalidError(
                _key("runs", run, "steps", position),
                "a tool_exec must come right after a tool_input of the same tool",
            )
        elif current is None:
            raise _InvalidError(
                _key("runs", run, "steps", position),
                f"a {step.kind} step must be inside a tool part: after a tool_exec "
                f"(or the permission and form steps that follow it)",
            )
        part_of.append(current)
    if opener is not None:
        raise _InvalidError(
            _key("runs", run, "steps", opener),
            f"a tool_input must be followed at once by a tool_exec of the same tool "
            f"({steps[opener].tool!r}), but it is the last step",
        )
    return part_of, tuple(tools)


def _step_ids(run: int, steps: Sequence[_StepModel]) -> list[str]:
    """Explicit ids, and defaults: the kind, then ``kind-2``, ``kind-3``… among the steps without an id."""
    counts: dict[str, int] = {}
    ids: list[str] = []
    for step in steps:
        if step.id is not None:
            ids.append(step.id)
            continue
        count = counts[step.kind] = counts.get(step.kind, 0) + 1
        ids.append(step.kind if count == 1 else f"{step.kind}-{count}")
    # Defaults never collide with each other; blame the explicit id, which is what the author can change.
    owners = {ids[position]: position for position, step in enumerate(steps) if step.id is None}
    for position, step in enumerate(steps):
        if step.id is None:
            continue
        other = owners.get(step.id)
        if other is not None:
            whose = "the default id" if steps[other].id is None else "the id"
            raise _InvalidError(
                _key("runs", run, "steps", position, "id"),
                f"{step.id!r} is also {whose} of steps[{other}]; step ids must be unique within a run",
            )
        owners[step.id] = position
    return ids


# Ids of runs, actions and sessions: one namespace


def _check_namespace(runs: Sequence[_RunModel], actions: Sequence[_ActionModel]) -> list[str]:
    """Each action's id (explicit or ``action-N``); raises when two runs, actions or sessions share an id."""
    action_ids = [action.id or f"action-{number}" for number, action in enumerate(actions, start=1)]
    holders = {
        action_ids[index]: f"the default id of actions[{index}], which has no id"
        for index, action in enumerate(actions)
        if action.id is None
    }
    sessions: set[str] = set()

    def claim(name: str, key: str, holder: str) -> None:
        if name in holders:
            raise _InvalidError(
                key,
                f"{name!r} is already {holders[name]}; run, action and session ids share one namespace "
                f"and must be unique across it",
            )
        holders[name] = holder

    for index, run in enumerate(runs):
        claim(run.id, _key("runs", index, "id"), f"the id of runs[{index}]")
        if run.session not in sessions:
            claim(run.session, _key("runs", index, "session"), f"the session of runs[{index}]")
            sessions.add(run.session)
    for index, action in enumerate(actions):
        if action.id is not None:
            claim(action.id, _key("actions", index, "id"), f"the id of actions[{index}]")
    return action_ids


# Actions


def _check_action(
    index: int, action: _ActionModel, names: _Names, directories: set[str], gates: frozenset[str]
) -> None:
    do = action_do(action.do)
    given = action.model_fields_set
    takes = _ACTION_KEYS[do]
    for name in _ActionModel.model_fields:
        if name in given and name not in ("id", "when", "do", *takes):
            raise _InvalidError(
                _key("actions", index, name),
                f"do = {do.value!r} does not take this key (its keys: {_listing(takes)})",
            )
    for name in _ACTION_REQUIRED[do]:
        if name not in given:
            raise _InvalidError(_key("actions", index, name), f"do = {do.value!r} needs this key")
    if do in CLOSES and action.mode not in _CLOSE_MODES:
        raise _InvalidError(
            _key("actions", index, "mode"),
            f"must be {_one_of(_CLOSE_MODES)}, not {_describe(action.mode)}",
        )
    mode = CloseMode(action.mode) if do in CLOSES and action.mode is not None else None
    if mode is not None and "grace_ms" in given and CLOSE_RULES[mode].interrupts_with is None:
        raise _InvalidError(
            _key("actions", index, "grace_ms"),
            f"a close in mode {action.mode!r} interrupts nothing: grace_ms is for an interrupting close",
        )
    if action.directory is not None and action.directory not in directories:
        raise _InvalidError(
            _key("actions", index, "directory"),
            f"{action.directory!r} is not in directories, in a run's directory or in instance_faults",
        )
    if action.run is not None:
        run = names.runs.get(action.run)
        if run is None:
            raise _InvalidError(_key("actions", index, "run"), f"{action.run!r} names no run of this file")
        if do is UserAction.START_RUN and run.start is not RunStart.MANUAL:
            raise _InvalidError(
                _key("actions", index, "run"),
                f"run {run.id!r} starts at begin; start_run needs a run declared with start = 'manual'",
            )
    if action.ask is not None:
        _check_ask_reference(index, action, do, names)
    if do is UserAction.REPLY_PERMISSION and action.decision not in _values(Decision):
        raise _InvalidError(
            _key("actions", index, "decision"),
            f"must be {_one_of(Decision)}, not {_describe(action.decision)}",
        )
    if action.always and action.decision != Decision.APPROVE:
        raise _InvalidError(
            _key("actions", index, "always"), "an always grant is an approval: give decision = 'approve'"
        )
    if "answer" in given and _answer(action.answer) is None:
        raise _InvalidError(
            _key("actions", index, "answer"),
            f"must be a string (or another single value), or a list of one per question, not "
            f"{_describe(action.answer)}",
        )
    if action.gate is not None and action.gate not in gates:
        raise _InvalidError(_key("actions", index, "gate"), f"no step names the gate {action.gate!r}")
    if action.action is not None:
        _check_confirmed(index, action, names)
    if action.session is not None and action.session not in names.sessions:
        raise _InvalidError(
            _key("actions", index, "session"), f"{action.session!r} names no session of this file"
        )


def _check_confirmed(index: int, action: _ActionModel, names: _Names) -> None:
    """A ``confirm`` names a close of this file. Only a maintenance close is confirmable; a confirm of
    one in another mode is played too, and answered ``not_confirmable`` (as a host's would be)."""
    target = names.actions.get(action.action or "")
    key = _key("actions", index, "action")
    if target is None or target is action:
        raise _InvalidError(key, f"{action.action!r} names no other action of this file")
    if action_do(target.do) not in CLOSES:
        raise _InvalidError(key, f"{action.action!r} is not a close: only a close is confirmed")


def _check_ask_reference(index: int, action: _ActionModel, do: ActionDo, names: _Names) -> None:
    """A reply by ask names an ask step of its run, of the kind the reply answers."""
    if action.run is None:
        raise _InvalidError(_key("actions", index, "run"), f"do = {do.value!r} needs this key")
    run = names.runs[action.run]
    step = next((step for step in run.steps if step.ask == action.ask), None)
    if step is None:
        raise _InvalidError(
            _key("actions", index, "ask"), f"{action.ask!r} names no ask of run {action.run!r}"
        )
    kind = _ASK_OF[do]
    if step.kind.value != kind.value:
        raise _InvalidError(
            _key("actions", index, "ask"),
            f"{action.ask!r} is a {step.kind.value} ask; {do.value} answers a {kind.value}",
        )


def _answer(value: object) -> FormAnswer | None:
    """A form answer as text, or (an extension) a list of one entry per question, each a single value
    or a list of them (a ``multiple`` question's picks); ``None`` when the value is neither."""
    if isinstance(value, list):
        entries: list[str | tuple[str, ...]] = []
        for entry in value:
            one = _single_answer(entry)
            picks = [_single_answer(pick) for pick in entry] if isinstance(entry, list) else []
            if one is not None:
                entries.append(one)
            elif isinstance(entry, list) and all(pick is not None for pick in picks):
                entries.append(tuple(pick for pick in picks if pick is not None))
            else:
                return None
        return tuple(entries)
    return _single_answer(value)


def _single_answer(value: object) -> str | None:
    """One answer as text; ``None`` when the value is not a single value."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return None


def _build_action(index: int, action_id: str, action: _ActionModel, names: _Names) -> ActionSpec:
    do = action_do(action.do)
    grace_ms = action.grace_ms  # an interrupt's (an extension): None, the run's or the supervisor's
    if do in SHUTDOWNS or do is UserAction.RESTART:
        grace_ms = _DEFAULT_GRACE_MS if action.grace_ms is None else action.grace_ms
    return ActionSpec(
        id=action_id,
        when=_parse_event(action.when, names, _key("actions", index, "when")),
        do=do,
        directory=action.directory,
        mode=CloseMode(action.mode) if action.mode is not None else None,
        origin=action.origin if action.origin is not None else _DEFAULT_ORIGIN.get(do),
        run=action.run,
        ask=action.ask,
        decision=Decision(action.decision) if action.decision is not None else None,
        message=action.message,
        answer=_answer(action.answer) if "answer" in action.model_fields_set else None,
        gate=action.gate,
        grace_ms=grace_ms,
        fingerprint=action.fingerprint,
        reload_policy=None if action.reload_policy is None else ReloadPolicy(action.reload_policy),
        action=action.action,
        session=action.session,
        confirm=bool(action.confirm),
        always=bool(action.always),
    )


def _check_when_cycles(actions: Sequence[ActionSpec]) -> None:
    """Refuse an action that waits, through ``when``, for itself: it could never fire."""
    waits_for = {action.id: action.when.action for action in actions if action.when.action is not None}
    for index, action in enumerate(actions):
        chain = [action.id]
        current = waits_for.get(action.id)
        while current is not None and current not in chain:
            chain.append(current)
            current = waits_for.get(current)
        if current != action.id:
            continue
        if len(chain) == 1:
            reason = "an action cannot wait for its own event"
        else:
            through = " which waits for ".join(repr(name) for name in (*chain[1:], action.id))
            reason = f"it waits for {through}"
        raise _InvalidError(
            _key("actions", index, "when"), f"{action.when.raw!r} can never come: {reason}, so it never fires"
        )


_EVENT_FORMS = (
    "begin, <run>.started, <run>.finished, <run>.stalled, <run>.unstalled, <run>.<step>.started, "
    "<run>.<step>.finished, <action>.<result>, <action>.completed or <session>.retry"
)
_RUN_EVENTS = {
    "started": WhenKind.RUN_STARTED,
    "finished": WhenKind.RUN_FINISHED,
    "stalled": WhenKind.RUN_STALLED,  # extensions: stalls
    "unstalled": WhenKind.RUN_UNSTALLED,
}


def _parse_event(raw: str, names: _Names, key: str) -> When:
    """An event named as in ``when``; raises when it names nothing in the file or cannot happen."""
    parts = raw.split(".")
    if raw == WhenKind.BEGIN:
        return When(raw=raw, kind=WhenKind.BEGIN)
    if len(parts) not in (2, 3) or not all(parts):
        raise _InvalidError(key, f"{raw!r} is not an event name: expected {_EVENT_FORMS}")
    head, *rest = parts
    if len(parts) == 3:
        step, what = rest
        run = names.runs.get(head)
        if run is None:
            raise _InvalidError(key, f"{raw!r} names no run of this file ({head!r} is not a run)")
        if step not in {spec.id for spec in run.steps}:
            raise _InvalidError(
                key,
                f"{raw!r} names no step of run {head!r} "
                f"(its steps: {_listing(repr(s.id) for s in run.steps)})",
            )
        if what not in ("started", "finished"):
            raise _InvalidError(key, f"{raw!r}: a step's events are .started and .finished, not {what!r}")
        kind = WhenKind.STEP_STARTED if what == "started" else WhenKind.STEP_FINISHED
        return When(raw=raw, kind=kind, run=head, step=step)
    (what,) = rest
    if head in names.runs:
        if what not in _RUN_EVENTS:
            raise _InvalidError(
                key, f"{raw!r}: a run's events are {_listing(f'.{e}' for e in _RUN_EVENTS)}, not {what!r}"
            )
        return When(raw=raw, kind=_RUN_EVENTS[what], run=head)
    action = names.actions.get(head)
    if action is None and head in names.sessions and what == SessionStatus.RETRY:
        return When(raw=raw, kind=WhenKind.SESSION_RETRY)
    if action is None:
        if head in names.sessions:
            raise _InvalidError(
                key, f"{raw!r} names a session; a session's only event is .retry (<session>.retry)"
            )
        raise _InvalidError(key, f"{raw!r} names no run or action of this file")
    do = action_do(action.do)
    lifecycle = isinstance(do, CloseAction) or do is UserAction.RESTART  # a restart is a shutdown first
    results = _results(
        do,
        CloseMode(action.mode) if do in CLOSES and action.mode is not None else None,
        fingerprint=action.fingerprint is not None,
    )
    if what == "completed" and lifecycle:
        return When(raw=raw, kind=WhenKind.ACTION_COMPLETED, action=head)
    if what not in results:
        events = (*results, "completed") if lifecycle else results
        mode = f" in mode {action.mode}" if do in CLOSES else ""
        raise _InvalidError(
            key,
            f"action {head!r} ({do}{mode}) can never give {what!r}; "
            f"its events are {_listing(repr(f'{head}.{event}') for event in events)}",
        )
    return When(raw=raw, kind=WhenKind.ACTION_RESULT, action=head, result=_answer_result(what))


# Expectations

_NULLABLE_RUN_FIELDS = ("outcome", "reason", "origin", "action", "phase", "generation", "error", "resume_of")
_RUN_FIELD_TYPES: Mapping[str, Callable[[Any], object]] = {
    "outcome": Outcome,
    "reason": InterruptReason,
    "phase": Phase,
}


_JOINED_FIELD_TYPES: Mapping[str, Callable[[Any], object]] = {"outcome": Outcome, "reason": InterruptReason}
"""An action's expectation keys that only a ``wait_run`` has: the joined run's result."""


def _same(value: object) -> object:
    return value


def _build_expectation(target: str, entry: Mapping[str, Any], names: _Names) -> Expectation:
    prefix: tuple[str, ...] = ("expect", target)
    fields: dict[str, object] = {}
    if target in names.runs:
        run = _validate(_RunExpectModel, entry, prefix)
        for name in entry:
            value = getattr(run, name)
            fields[name] = (
                None
                if name in _NULLABLE_RUN_FIELDS and value == NONE
                else _RUN_FIELD_TYPES.get(name, _same)(value)
            )
        if fields.get("action") is not None and fields["action"] not in names.actions:
            raise _InvalidError(_key(*prefix, "action"), f"{fields['action']!r} names no action of this file")
        if fields.get("resume_of") is not None and fields["resume_of"] not in names.runs:
            raise _InvalidError(
                _key(*prefix, "resume_of"), f"{fields['resume_of']!r} names no run of this file"
            )
        if run.tool_parts is not None:
            fields["tool_parts"] = _tool_parts_expectation(run.tool_parts, (*prefix, "tool_parts"))
        return Expectation(target=target, target_kind=ExpectationTarget.RUN, fields=MappingProxyType(fields))
    if target in names.actions:
        action = _validate(_ActionExpectModel, entry, prefix)
        for name in entry:
            value = getattr(action, name)
            if name == "result":
                value = ScenarioResult(value) if value in _values(ScenarioResult) else _answer_result(value)
            if name == "code":
                value = None if value == NONE else RejectCode(value)
            if name in _JOINED_FIELD_TYPES:
                if action_do(names.actions[target].do) is not UserAction.WAIT_RUN:
                    raise _InvalidError(
                        _key(*prefix, name), f"{name} applies to a wait_run, not to {target!r}"
                    )
                value = None if value == NONE else _JOINED_FIELD_TYPES[name](value)
            fields[name] = None if name == "completed" and value == NONE else value
        for name in ("completed_after", "completed_before", "answered_after", "answered_before"):
            raw = getattr(action, name)
            if raw is not None:
                fields[name] = _parse_event(raw, names, _key(*prefix, name))
        for name in ("loaded_after", "loaded_before"):
            raw = getattr(action, name)
            if raw is None:
                continue
            if names.actions[target].do != CloseAction.RELOAD:
                raise _InvalidError(_key(*prefix, name), f"{name} applies to a reload, not to {target!r}")
            fields[name] = _parse_event(raw, names, _key(*prefix, name))
        if action.interrupted_runs is not None:
            for index, run_id in enumerate(action.interrupted_runs):
                if run_id not in names.runs:
                    raise _InvalidError(
                        _key(*prefix, "interrupted_runs", index), f"{run_id!r} names no run of this file"
                    )
            fields["interrupted_runs"] = tuple(sorted(set(action.interrupted_runs)))
        return Expectation(
            target=target, target_kind=ExpectationTarget.ACTION, fields=MappingProxyType(fields)
        )
    if target in names.sessions:
        session = _validate(_SessionExpectModel, entry, prefix)
        fields.update(
            (name, SessionStatus(getattr(session, name)) if name == "status" else getattr(session, name))
            for name in entry
        )
        if session.statuses is not None:
            fields["statuses"] = tuple(SessionStatus(status) for status in session.statuses)
        return Expectation(
            target=target, target_kind=ExpectationTarget.SESSION, fields=MappingProxyType(fields)
        )
    raise _InvalidError(_key(*prefix), f"{target!r} names no run, action or session of this file")


def _tool_parts_expectation(
    items: Sequence[object], prefix: tuple[str | int, ...]
) -> tuple[PartState | PartExpectation, ...]:
    parts: list[PartState | PartExpectation] = []
    for index, item in enumerate(items):
        if isinstance(item, str):
            if item not in _values(PartState):
                raise _InvalidError(_key(*prefix, index), f"must be {_one_of(PartState)}, not {item!r}")
            parts.append(PartState(item))
        elif isinstance(item, dict):
            part = _validate(_PartExpectModel, item, (*prefix, index))
            parts.append(
                PartExpectation(state=PartState(part.state), tool_started=part.tool_started, label=part.label)
            )
        else:
            raise _InvalidError(
                _key(*prefix, index),
                f"must be a part state or a table with state and tool_started, not {_describe(item)}",
            )
    return tuple(parts)


def _build_event_expectation(index: int, entry: Mapping[str, Any], names: _Names) -> EventExpectation:
    """An ``expect_events`` entry: a known event type, fields that event has (by the report's names),
    values that name what the file has, and ``count``, ``after``, ``before``."""
    prefix: tuple[str | int, ...] = ("expect_events", index)
    kind = entry.get("type")
    if kind is None:
        raise _InvalidError(_key(*prefix, "type"), "this key is required (the event type to look for)")
    if not isinstance(kind, str) or kind not in EVENT_FIELDS:
        raise _InvalidError(_key(*prefix, "type"), f"must be {_one_of(EVENT_FIELDS)}, not {_describe(kind)}")
    known = EVENT_FIELDS[kind]
    fields: dict[str, object] = {}
    for name, value in entry.items():
        if name in _EVENT_KEYS:
            continue
        if name not in known:
            raise _InvalidError(
                _key(*prefix, name),
                f"not a field of a {kind} event (its fields: {_listing(sorted(known))}; "
                f"and {_listing(_EVENT_KEYS[1:])})",
            )
        _check_event_reference(name, value, entry, names, (*prefix, name))
        fields[name] = _expected_value(value)
        problem = _type_problem(_EVENT_FIELD_TYPES[kind][name], fields[name], (*prefix, name))
        if problem is not None:
            raise _InvalidError(*problem)
    count = entry.get("count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
        raise _InvalidError(
            _key(*prefix, "count"), f"must be a whole number of events (0 or more), not {_describe(count)}"
        )
    bounds: dict[str, When] = {}
    for name in ("after", "before"):
        raw = entry.get(name)
        if raw is None:
            continue
        if not isinstance(raw, str):
            raise _InvalidError(
                _key(*prefix, name), f"must be an event name (as in when), not {_describe(raw)}"
            )
        bounds[name] = _parse_event(raw, names, _key(*prefix, name))
    return EventExpectation(
        key=_key(*prefix),
        type=kind,
        fields=MappingProxyType(fields),
        count=count,
        after=bounds.get("after"),
        before=bounds.get("before"),
    )


def _check_event_reference(
    name: str, value: object, entry: Mapping[str, Any], names: _Names, path: tuple[str | int, ...]
) -> None:
    """``run``, ``session``, ``action`` and ``ask`` name something of the file (or are ``"none"``)."""
    if value == NONE or name not in ("run", "session", "action", "ask"):
        return
    if not isinstance(value, str):
        raise _InvalidError(
            _key(*path), f"must be a string naming a {name} of this file, not {_describe(value)}"
        )
    if name == "ask":
        run = entry.get("run")
        runs = [names.runs[run]] if isinstance(run, str) and run in names.runs else list(names.runs.values())
        if not any(step.ask == value for spec in runs for step in spec.steps):
            whose = f"of run {run!r}" if isinstance(run, str) and run in names.runs else "of any run"
            raise _InvalidError(_key(*path), f"{value!r} names no ask {whose} (a step's ask)")
        return
    known: Iterable[str] = {"run": names.runs, "session": names.sessions, "action": names.actions}[name]
    if value not in known:
        raise _InvalidError(_key(*path), f"{value!r} names no {name} of this file")


def _expected_value(value: object) -> object:
    """An expected field value: ``"none"`` is null, in a table or a list too."""
    if value == NONE:
        return None
    if isinstance(value, dict):
        return MappingProxyType({name: _expected_value(item) for name, item in value.items()})
    if isinstance(value, list):
        return tuple(_expected_value(item) for item in value)
    return value


def _type_problem(
    expected: msgspec_inspect.Type, value: object, path: tuple[str | int, ...]
) -> tuple[str, str] | None:
    """Why an expected value can never equal the event's field (its key and a sentence), or None."""
    if isinstance(expected, msgspec_inspect.UnionType):
        problems = [_type_problem(member, value, path) for member in expected.types]
        if all(problems):
            return _key(*path), f"must be {_type_words(expected)}, not {_shown_expected(value)}"
        return None
    if isinstance(expected, msgspec_inspect.StructType | msgspec_inspect.DictType):
        if not isinstance(value, Mapping):
            return _key(*path), f"must be a table, not {_shown_expected(value)}"
        for name, item in value.items():
            member = _member_type(expected, name)
            if member is None:
                assert isinstance(expected, msgspec_inspect.StructType)
                known = ", ".join(field.encode_name for field in expected.fields)
                return _key(*path, name), f"not a key of this table (its keys: {known})"
            problem = _type_problem(member, item, (*path, name))
            if problem is not None:
                return problem
        return None
    if isinstance(expected, msgspec_inspect.ListType | msgspec_inspect.VarTupleType):
        if not isinstance(value, tuple):
            return _key(*path), f"must be a list, not {_shown_expected(value)}"
        for index, item in enumerate(value):
            problem = _type_problem(expected.item_type, item, (*path, index))
            if problem is not None:
                return problem
        return None
    if not _fits(expected, value):
        return _key(*path), f"must be {_type_words(expected)}, not {_shown_expected(value)}"
    return None


def _member_type(expected: msgspec_inspect.Type, name: str) -> msgspec_inspect.Type | None:
    if isinstance(expected, msgspec_inspect.DictType):
        return expected.value_type
    assert isinstance(expected, msgspec_inspect.StructType)
    return next((field.type for field in expected.fields if field.encode_name == name), None)


def _fits(expected: msgspec_inspect.Type, value: object) -> bool:
    """A scalar ``value`` can equal a field of this type (a type the format does not know: any)."""
    if isinstance(expected, msgspec_inspect.NoneType):
        return value is None
    if isinstance(expected, msgspec_inspect.StrType):
        return isinstance(value, str)
    if isinstance(expected, msgspec_inspect.BoolType):
        return isinstance(value, bool)
    if isinstance(expected, msgspec_inspect.IntType):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(expected, msgspec_inspect.FloatType):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(expected, msgspec_inspect.EnumType):
        return isinstance(value, str) and value in {member.value for member in expected.cls}
    if isinstance(expected, msgspec_inspect.LiteralType):
        return value in expected.values
    return not isinstance(expected, msgspec_inspect.StructType | msgspec_inspect.DictType)


def _type_words(expected: msgspec_inspect.Type) -> str:
    if isinstance(expected, msgspec_inspect.UnionType):
        return " or ".join(dict.fromkeys(_type_words(member) for member in expected.types))
    if isinstance(expected, msgspec_inspect.EnumType):
        return _one_of(member.value for member in expected.cls)
    words: Mapping[type[msgspec_inspect.Type], str] = {
        msgspec_inspect.NoneType: repr(NONE),
        msgspec_inspect.StrType: "a string",
        msgspec_inspect.BoolType: "true or false",
        msgspec_inspect.IntType: "an integer",
        msgspec_inspect.FloatType: "a number",
        msgspec_inspect.StructType: "a table",
        msgspec_inspect.DictType: "a table",
        msgspec_inspect.ListType: "a list",
        msgspec_inspect.VarTupleType: "a list",
    }
    return words.get(type(expected), "a value of its field's type")


def _shown_expected(value: object) -> str:
    if value is None:
        return repr(NONE)
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, tuple):
        return "a list"
    return _describe(value)
