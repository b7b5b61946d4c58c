"""Scenario files: read one, validate it strictly, hand the runner frozen specs with every default applied.

The format is a public contract (``scenario-format.md``): a scenario is TOML, or the same document as JSON.
Validation has two layers. Pydantic models (``extra="forbid"``, strict types: a boolean is never an integer)
check the shape of the document; the rules that span keys (tool parts, ids and their one namespace, what an
action may name, ``when`` events, expectations) are checked below in plain code. Either way the first problem
found is raised as a :class:`ScenarioFileError` naming the file, the offending key as a dotted path
(``runs[0].steps[1].tool``, ``expect.r9``) and what is wrong in one sentence.

The runner gets frozen dataclasses (tuples, read-only mappings) and never re-derives a default.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from types import MappingProxyType
from typing import Annotated, Any, Literal, NoReturn, TypeVar, get_args

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

__all__ = [
    "ActionSpec",
    "Expectation",
    "InstanceFaultSpec",
    "PartExpectation",
    "RunSpec",
    "Scenario",
    "ScenarioFileError",
    "StepSpec",
    "When",
    "load_scenario",
    "parse_scenario",
    "scenario_files",
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
class StepSpec:
    """One step of a run, defaults applied."""

    kind: str
    """``model``, ``tool_input``, ``tool_exec``, ``permission`` or ``form``."""
    id: str
    """Explicit, or the kind (``kind-2``, ``kind-3``… for later steps of that kind without an id)."""
    tool: str | None
    """The tool of a ``tool_input`` or ``tool_exec`` step; ``None`` on other kinds."""
    gate: str | None
    at: str
    """Where a ``tool_exec`` step's gate holds: ``prepared`` or ``running`` (default; also on other kinds)."""
    ms: int
    error: str | None
    """``tool_exec`` only: the tool fails with this message."""
    fail: str | None
    ignores_cancel: bool
    part: int | None
    """Index (0-based, within the run) of the tool part this step belongs to; ``None`` outside a tool part."""


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run of the scenario."""

    id: str
    session: str
    directory: str
    start: str
    """``begin`` (started when the scenario starts, in file order) or ``manual`` (by a ``start_run``)."""
    steps: tuple[StepSpec, ...]
    tools: tuple[str, ...]
    """The tool of each tool part, in order: ``len(tools)`` is the number of tool parts."""


@dataclass(frozen=True, slots=True)
class When:
    """An event as named in an action's ``when`` (or an expectation's ``completed_after``)."""

    raw: str
    kind: str
    """``begin``, ``run_started``, ``run_finished``, ``step_started``, ``step_finished``, ``action_result``
    (``<action>.<result>``) or ``action_completed`` (``<action>.completed``: a lifecycle action's
    ``lifecycle.completed`` event)."""
    run: str | None = None
    step: str | None = None
    action: str | None = None
    result: str | None = None
    """For ``action_result``: the result, for example ``deferred``, ``ok`` or ``forced``."""


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One action of the scenario, defaults applied; keys the action's ``do`` does not take are ``None``."""

    id: str
    """Explicit, or ``action-N`` (N its 1-based position among the actions)."""
    when: When
    do: str
    directory: str | None = None
    mode: str | None = None
    """The four closes: ``maintenance`` or ``user_confirmed_interrupt``."""
    origin: str | None = None
    """Default: the ``do`` value for closes, ``shutdown`` and ``test_teardown``; ``user`` for ``cancel``."""
    run: str | None = None
    decision: str | None = None
    message: str | None = None
    answer: str | None = None
    gate: str | None = None
    grace_ms: int | None = None
    """``shutdown`` and ``test_teardown``: default 1000."""


@dataclass(frozen=True, slots=True)
class InstanceFaultSpec:
    """How a directory's instance misbehaves when it is disposed."""

    dispose_error: str | None = None
    dispose_ms: int = 0


@dataclass(frozen=True, slots=True)
class PartExpectation:
    """An expected tool part given as a table; ``tool_started`` ``None`` when the file does not say."""

    state: str
    tool_started: bool | None = None


@dataclass(frozen=True, slots=True)
class Expectation:
    """One ``[expect]`` entry, validated and normalized.

    ``fields`` holds only the keys the file gives, in file order. The string ``"none"`` is already ``None``;
    ``generation`` is an int; ``tool_parts`` is a tuple of state strings and :class:`PartExpectation`;
    ``completed_after`` is a :class:`When`; ``interrupted_runs`` is a sorted tuple without duplicates.
    """

    target: str
    target_kind: str
    """``run``, ``action`` or ``session``."""
    fields: Mapping[str, object]


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


# ----------------------------------------------------------------------------------------------------
# The closed vocabularies of the format

_StepKind = Literal["model", "tool_input", "tool_exec", "permission", "form"]
_Do = Literal[
    "dispose",
    "dispose_all",
    "reload",
    "invalidate_config",
    "cancel",
    "shutdown",
    "test_teardown",
    "start_run",
    "reply_permission",
    "answer_form",
    "cancel_form",
    "open_gate",
]
_Outcome = Literal["completed", "interrupted", "failed", "none"]
_Reason = Literal[
    "user_cancel",
    "permission_rejected",
    "form_dismissed",
    "lifecycle_interrupt",
    "shutdown",
    "test_teardown",
    "timeout",
    "none",
]
_Phase = Literal["generating", "prepared", "running", "none"]
_PartState = Literal["pending", "prepared", "running", "completed", "error", "interrupted"]
_Result = Literal["completed", "deferred", "interrupted", "forced", "rejected", "ok", "not_fired"]
_Status = Literal["idle", "busy"]

_PART_STATES: tuple[str, ...] = get_args(_PartState)
_CLOSES = ("dispose", "dispose_all", "reload", "invalidate_config")
_LIFECYCLE = (*_CLOSES, "shutdown", "test_teardown")
_CLOSE_MODES = ("maintenance", "user_confirmed_interrupt")
_DECISIONS = ("approve", "reject")

_STEP_COMMON_KEYS = ("kind", "id", "gate", "ms", "fail", "ignores_cancel")
_STEP_KEYS: Mapping[str, frozenset[str]] = {
    "model": frozenset(_STEP_COMMON_KEYS),
    "tool_input": frozenset((*_STEP_COMMON_KEYS, "tool")),
    "tool_exec": frozenset((*_STEP_COMMON_KEYS, "tool", "at", "error")),
    "permission": frozenset(_STEP_COMMON_KEYS),
    "form": frozenset(_STEP_COMMON_KEYS),
}
_STEP_KEY_HOME: Mapping[str, str] = {
    "tool": "tool_input and tool_exec steps",
    "at": "tool_exec steps",
    "error": "tool_exec steps",
}
_TOOL_KINDS = ("tool_input", "tool_exec")

# Keys each `do` takes besides id, when and do (in the contract's order), and the ones it requires.
_ACTION_KEYS: Mapping[str, tuple[str, ...]] = {
    "dispose": ("directory", "mode", "origin"),
    "dispose_all": ("mode", "origin"),
    "reload": ("directory", "mode", "origin"),
    "invalidate_config": ("mode", "origin"),
    "cancel": ("run", "origin"),
    "shutdown": ("grace_ms", "origin"),
    "test_teardown": ("grace_ms", "origin"),
    "start_run": ("run",),
    "reply_permission": ("run", "decision", "message"),
    "answer_form": ("run", "answer"),
    "cancel_form": ("run",),
    "open_gate": ("gate",),
}
_ACTION_REQUIRED: Mapping[str, tuple[str, ...]] = {
    "dispose": ("directory", "mode"),
    "dispose_all": ("mode",),
    "reload": ("directory", "mode"),
    "invalidate_config": ("mode",),
    "cancel": ("run",),
    "shutdown": (),
    "test_teardown": (),
    "start_run": ("run",),
    "reply_permission": ("run", "decision"),
    "answer_form": ("run", "answer"),
    "cancel_form": ("run",),
    "open_gate": ("gate",),
}
_DEFAULT_ORIGIN: Mapping[str, str] = {
    **{do: do for do in _LIFECYCLE},
    "cancel": "user",
}
_DEFAULT_GRACE_MS = 1000


def _results(do: str, mode: str | None) -> tuple[str, ...]:
    """The results an action can give (``<action>.completed`` aside: see :func:`_parse_event`)."""
    if do in _CLOSES:
        if mode == "user_confirmed_interrupt":
            return ("deferred", "interrupted", "rejected")
        return ("deferred", "rejected")
    if do in ("shutdown", "test_teardown"):
        return ("forced",)  # never rejected: a second one gets the first one's result
    if do == "open_gate":
        return ("ok",)  # always ok, even after shutdown
    return ("ok", "rejected")


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
    if value == "none" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise PydanticCustomError(
        "scenario_generation",
        "must be a generation number (1, 2, 3…) or 'none', not {value}",
        {"value": _describe(value)},
    )


def _bool_or_none(value: object) -> object:
    if value == "none" or isinstance(value, bool):
        return value
    raise PydanticCustomError(
        "scenario_bool", "must be true, false or 'none', not {value}", {"value": _describe(value)}
    )


_Id = Annotated[StrictStr, AfterValidator(_valid_id)]
_Text = Annotated[StrictStr, AfterValidator(_non_empty)]
_Count = Annotated[StrictInt, Field(ge=0)]
_M = TypeVar("_M", bound=BaseModel)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _StepModel(_Model):
    kind: _StepKind
    id: _Id | None = None
    tool: _Text | None = None
    gate: _Id | None = None
    at: Literal["prepared", "running"] | None = None
    ms: _Count = 0
    error: _Text | None = None
    fail: _Text | None = None
    ignores_cancel: StrictBool = False


class _RunModel(_Model):
    id: _Id
    session: _Id
    directory: StrictStr
    start: Literal["begin", "manual"] = "begin"
    steps: Annotated[list[_StepModel], Field(min_length=1)]


class _ActionModel(_Model):
    id: _Id | None = None
    when: StrictStr
    do: _Do
    directory: StrictStr | None = None
    mode: StrictStr | None = None
    origin: StrictStr | None = None
    run: StrictStr | None = None
    decision: StrictStr | None = None
    message: StrictStr | None = None
    answer: Any = None
    gate: StrictStr | None = None
    grace_ms: _Count | None = None


class _FaultModel(_Model):
    dispose_error: _Text | None = None
    dispose_ms: _Count = 0


class _ScenarioModel(_Model):
    name: _Text
    description: StrictStr | None = None
    directories: list[StrictStr] = Field(default_factory=list)
    runs: list[_RunModel] = Field(default_factory=list)
    actions: list[_ActionModel] = Field(default_factory=list)
    expect: dict[StrictStr, dict[StrictStr, Any]] = Field(default_factory=dict)
    instance_faults: dict[StrictStr, _FaultModel] = Field(default_factory=dict)


class _RunExpectModel(_Model):
    outcome: _Outcome | None = None
    reason: _Reason | None = None
    origin: StrictStr | None = None
    action: StrictStr | None = None
    phase: _Phase | None = None
    generation: Annotated[Any, AfterValidator(_generation)] = None
    error: StrictStr | None = None
    tool_parts: list[Any] | None = None


class _PartExpectModel(_Model):
    state: _PartState
    tool_started: StrictBool | None = None


class _ActionExpectModel(_Model):
    result: _Result | None = None
    completed: Annotated[Any, AfterValidator(_bool_or_none)] = None
    completed_after: StrictStr | None = None
    interrupted_runs: list[StrictStr] | None = None


class _SessionExpectModel(_Model):
    status: _Status | None = None


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
}

# Where each nested model sits in a scenario document ("[]" a list index, "*" a table key).
_MODEL_AT: Mapping[tuple[str, ...], type[BaseModel]] = {
    (): _ScenarioModel,
    ("runs", "[]"): _RunModel,
    ("runs", "[]", "steps", "[]"): _StepModel,
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
            segment = part if _BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
            out += f".{segment}" if out else segment
    return out


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


def _one_of(values: Sequence[str]) -> str:
    """``'a', 'b' or 'c'``, as pydantic says it."""
    quoted = [repr(value) for value in values]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


# ----------------------------------------------------------------------------------------------------
# Reading


_FORMATS: Mapping[str, Literal["toml", "json"]] = {".toml": "toml", ".json": "json"}


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate a scenario file: TOML when it ends in ``.toml``, JSON when it ends in ``.json``."""
    file = os.fspath(path)
    suffix = pathlib.Path(file).suffix
    fmt = _FORMATS.get(suffix)
    if fmt is None:
        raise ScenarioFileError(
            file, None, f"a scenario file ends in .toml or .json, not {repr(suffix) if suffix else 'nothing'}"
        )
    try:
        data = pathlib.Path(file).read_bytes()
    except OSError as exc:
        raise ScenarioFileError(file, None, f"cannot read the file: {exc.strerror or exc}") from exc
    return parse_scenario(data, file=file, fmt=fmt)


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
    """Every ``.toml`` and ``.json`` file in ``folder`` (not its subfolders), sorted by name."""
    return sorted(
        (entry for entry in pathlib.Path(folder).iterdir() if entry.suffix in _FORMATS and entry.is_file()),
        key=lambda entry: entry.name,
    )


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
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise _InvalidError(None, f"invalid TOML: {exc}") from None
    if fmt != "json":
        raise ValueError(f"fmt must be 'toml' or 'json', not {fmt!r}")
    try:
        document = json.loads(text, object_pairs_hook=_json_object, parse_constant=_json_constant)
    except json.JSONDecodeError as exc:
        raise _InvalidError(
            None, f"invalid JSON: {exc.msg} (at line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(document, dict):
        raise _InvalidError(None, f"a JSON scenario must be an object, not {_describe(document)}")
    _reject_nulls(document, ())
    return document


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for name, value in pairs:
        if name in document:
            raise _InvalidError(None, f"invalid JSON: the key {name!r} appears twice in one object")
        document[name] = value
    return document


def _json_constant(name: str) -> NoReturn:
    raise _InvalidError(None, f"invalid JSON: {name} is not a JSON number")


def _reject_nulls(value: object, path: tuple[str | int, ...]) -> None:
    """TOML has no null, and a JSON scenario is the same document: a key is given, or left out."""
    if value is None:
        raise _InvalidError(_key(*path), "null is not a value here: leave the key out instead")
    if isinstance(value, dict):
        for name, item in value.items():
            _reject_nulls(item, (*path, name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _reject_nulls(item, (*path, index))


# ----------------------------------------------------------------------------------------------------
# The rules that span keys


def _build(document: dict[str, Any], file: str) -> Scenario:
    model = _validate(_ScenarioModel, document)
    _check_directories(model.directories)
    runs = tuple(_build_run(index, run) for index, run in enumerate(model.runs))
    action_ids = _check_namespace(model.runs, model.actions)
    sessions = tuple(dict.fromkeys(run.session for run in runs))
    gates = tuple(sorted({step.gate for run in runs for step in run.steps if step.gate is not None}))
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
    expect = tuple(_build_expectation(target, entry, names) for target, entry in model.expect.items())
    faults = {
        directory: InstanceFaultSpec(dispose_error=fault.dispose_error, dispose_ms=fault.dispose_ms)
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
    )


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


def _build_run(index: int, run: _RunModel) -> RunSpec:
    for position, step in enumerate(run.steps):
        _check_step_keys(index, position, step)
    parts, tools = _tool_parts(index, run.steps)
    ids = _step_ids(index, run.steps)
    steps = tuple(
        StepSpec(
            kind=step.kind,
            id=step_id,
            tool=step.tool,
            gate=step.gate,
            at=step.at or "running",
            ms=step.ms,
            error=step.error,
            fail=step.fail,
            ignores_cancel=step.ignores_cancel,
            part=part,
        )
        for step, step_id, part in zip(run.steps, ids, parts, strict=True)
    )
    return RunSpec(
        id=run.id, session=run.session, directory=run.directory, start=run.start, steps=steps, tools=tools
    )


def _check_step_keys(run: int, position: int, step: _StepModel) -> None:
    allowed = _STEP_KEYS[step.kind]
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
            if step.kind != "tool_exec":
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
        elif step.kind == "model":
            current = None
        elif step.kind == "tool_input":
            assert step.tool is not None  # checked by _check_step_keys
            tools.append(step.tool)
            current = len(tools) - 1
            opener = position
        elif step.kind == "tool_exec":
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
    do = action.do
    given = action.model_fields_set
    takes = _ACTION_KEYS[do]
    for name in _ActionModel.model_fields:
        if name in given and name not in ("id", "when", "do", *takes):
            raise _InvalidError(
                _key("actions", index, name),
                f"do = {do!r} does not take this key (its keys: {_listing(takes)})",
            )
    for name in _ACTION_REQUIRED[do]:
        if name not in given:
            raise _InvalidError(_key("actions", index, name), f"do = {do!r} needs this key")
    if do in _CLOSES and action.mode not in _CLOSE_MODES:
        raise _InvalidError(
            _key("actions", index, "mode"),
            f"must be {_one_of(_CLOSE_MODES)}, not {_describe(action.mode)}",
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
        if do == "start_run" and run.start != "manual":
            raise _InvalidError(
                _key("actions", index, "run"),
                f"run {run.id!r} starts at begin; start_run needs a run declared with start = 'manual'",
            )
    if do == "reply_permission" and action.decision not in _DECISIONS:
        raise _InvalidError(
            _key("actions", index, "decision"),
            f"must be {_one_of(_DECISIONS)}, not {_describe(action.decision)}",
        )
    if "answer" in given and _answer(action.answer) is None:
        raise _InvalidError(
            _key("actions", index, "answer"),
            f"must be a string (or another single value), not {_describe(action.answer)}",
        )
    if action.gate is not None and action.gate not in gates:
        raise _InvalidError(_key("actions", index, "gate"), f"no step names the gate {action.gate!r}")


def _answer(value: object) -> str | None:
    """A form answer as text; ``None`` when the value is not a single value."""
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
    do = action.do
    grace_ms = None
    if do in ("shutdown", "test_teardown"):
        grace_ms = _DEFAULT_GRACE_MS if action.grace_ms is None else action.grace_ms
    return ActionSpec(
        id=action_id,
        when=_parse_event(action.when, names, _key("actions", index, "when")),
        do=do,
        directory=action.directory,
        mode=action.mode,
        origin=action.origin if action.origin is not None else _DEFAULT_ORIGIN.get(do),
        run=action.run,
        decision=action.decision,
        message=action.message,
        answer=_answer(action.answer) if "answer" in action.model_fields_set else None,
        gate=action.gate,
        grace_ms=grace_ms,
    )


_EVENT_FORMS = (
    "begin, <run>.started, <run>.finished, <run>.<step>.started, <run>.<step>.finished, "
    "<action>.<result> or <action>.completed"
)


def _parse_event(raw: str, names: _Names, key: str) -> When:
    """An event named as in ``when``; raises when it names nothing in the file or cannot happen."""
    parts = raw.split(".")
    if raw == "begin":
        return When(raw=raw, kind="begin")
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
        return When(raw=raw, kind=f"step_{what}", run=head, step=step)
    (what,) = rest
    if head in names.runs:
        if what not in ("started", "finished"):
            raise _InvalidError(key, f"{raw!r}: a run's events are .started and .finished, not {what!r}")
        return When(raw=raw, kind=f"run_{what}", run=head)
    action = names.actions.get(head)
    if action is None:
        if head in names.sessions:
            raise _InvalidError(key, f"{raw!r} names a session; an event names a run, a step or an action")
        raise _InvalidError(key, f"{raw!r} names no run or action of this file")
    results = _results(action.do, action.mode)
    if what == "completed" and action.do in _LIFECYCLE:
        return When(raw=raw, kind="action_completed", action=head)
    if what not in results:
        events = (*results, "completed") if action.do in _LIFECYCLE else results
        mode = f" in mode {action.mode}" if action.do in _CLOSES else ""
        raise _InvalidError(
            key,
            f"action {head!r} ({action.do}{mode}) can never give {what!r}; "
            f"its events are {_listing(repr(f'{head}.{event}') for event in events)}",
        )
    return When(raw=raw, kind="action_result", action=head, result=what)


# Expectations

_NULLABLE_RUN_FIELDS = ("outcome", "reason", "origin", "action", "phase", "generation", "error")


def _build_expectation(target: str, entry: Mapping[str, Any], names: _Names) -> Expectation:
    prefix: tuple[str, ...] = ("expect", target)
    fields: dict[str, object] = {}
    if target in names.runs:
        run = _validate(_RunExpectModel, entry, prefix)
        for name in entry:
            value = getattr(run, name)
            fields[name] = None if name in _NULLABLE_RUN_FIELDS and value == "none" else value
        if fields.get("action") is not None and fields["action"] not in names.actions:
            raise _InvalidError(_key(*prefix, "action"), f"{fields['action']!r} names no action of this file")
        if run.tool_parts is not None:
            fields["tool_parts"] = _tool_parts_expectation(run.tool_parts, (*prefix, "tool_parts"))
        return Expectation(target=target, target_kind="run", fields=MappingProxyType(fields))
    if target in names.actions:
        action = _validate(_ActionExpectModel, entry, prefix)
        for name in entry:
            value = getattr(action, name)
            fields[name] = None if name == "completed" and value == "none" else value
        if action.completed_after is not None:
            key = _key(*prefix, "completed_after")
            fields["completed_after"] = _parse_event(action.completed_after, names, key)
        if action.interrupted_runs is not None:
            for index, run_id in enumerate(action.interrupted_runs):
                if run_id not in names.runs:
                    raise _InvalidError(
                        _key(*prefix, "interrupted_runs", index), f"{run_id!r} names no run of this file"
                    )
            fields["interrupted_runs"] = tuple(sorted(set(action.interrupted_runs)))
        return Expectation(target=target, target_kind="action", fields=MappingProxyType(fields))
    if target in names.sessions:
        session = _validate(_SessionExpectModel, entry, prefix)
        fields.update((name, getattr(session, name)) for name in entry)
        return Expectation(target=target, target_kind="session", fields=MappingProxyType(fields))
    raise _InvalidError(_key(*prefix), f"{target!r} names no run, action or session of this file")


def _tool_parts_expectation(
    items: Sequence[object], prefix: tuple[str | int, ...]
) -> tuple[str | PartExpectation, ...]:
    parts: list[str | PartExpectation] = []
    for index, item in enumerate(items):
        if isinstance(item, str):
            if item not in _PART_STATES:
                raise _InvalidError(_key(*prefix, index), f"must be {_one_of(_PART_STATES)}, not {item!r}")
            parts.append(item)
        elif isinstance(item, dict):
            part = _validate(_PartExpectModel, item, (*prefix, index))
            parts.append(PartExpectation(state=part.state, tool_started=part.tool_started))
        else:
            raise _InvalidError(
                _key(*prefix, index),
                f"must be a part state or a table with state and tool_started, not {_describe(item)}",
            )
    return tuple(parts)
