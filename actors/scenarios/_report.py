"""The scenario report: msgspec Structs that encode to exactly the contract's JSON shape.

Field order is the contract's. A field the contract shows only in some cases (a part's ``message``, an
interrupted part's ``reason``/``origin``/``phase``, an action's close fields) defaults to ``UNSET`` and is
then left out of the encoding; ``None`` encodes as ``null``. ``abandoned`` (an extension) appears only when
true. The events are the library's events as the contract names their fields (``run``, ``action``), kept
as plain mappings so that a new library event reaches the report without a change here.

:func:`check_expectations` compares a report with the file's ``[expect]`` and returns one readable line
per expectation that did not hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from run_supervisor.actors.scenarios._format import (
    ActionDo,
    EventExpectation,
    Expectation,
    ExpectationTarget,
    PartExpectation,
    ScenarioResult,
    When,
)
from run_supervisor.protocol import (
    CloseAction,
    CloseResult,
    InterruptReason,
    Outcome,
    PartState,
    Phase,
    RejectCode,
    ReloadPolicy,
    RequestResult,
    SessionStatus,
)

__all__ = [
    "ActionReport",
    "FolderReport",
    "InvalidScenario",
    "PartReport",
    "RunReport",
    "ScenarioReport",
    "check_event_expectations",
    "check_expectations",
    "to_builtins",
]


class PartReport(msgspec.Struct, frozen=True, omit_defaults=True):
    """One tool part the run reached, as a UI would show it."""

    tool: str
    state: PartState
    tool_started: bool
    label: str
    call_id: str | UnsetType = UNSET
    """Extension: the call's id (as in its ``run.part.updated`` events)."""
    note: str | UnsetType = UNSET
    """Extension: what the model is told of an interrupted or declined call."""
    message: str | UnsetType = UNSET
    """The tool's error, or the feedback of a permission rejected (or a form dismissed) with a message."""
    reason: InterruptReason | UnsetType | None = UNSET
    """``interrupted`` parts only (with ``origin`` and ``phase``)."""
    origin: str | UnsetType | None = UNSET
    phase: Phase | UnsetType | None = UNSET


class RunReport(msgspec.Struct, frozen=True, omit_defaults=True):
    """What became of one declared run (``outcome`` null when it never started)."""

    session: str
    directory: str
    generation: int | None
    outcome: Outcome | None
    reason: InterruptReason | None
    origin: str | None
    action: str | None
    """The file's id of the action that interrupted the run."""
    phase: Phase | None
    error: str | None
    tool_parts: list[PartReport]
    abandoned: bool = False
    """Extension: the body was still running at shutdown's deadline and was left behind."""
    queue_reason: InterruptReason | UnsetType = UNSET
    """Extension: ``coalesced`` or ``dropped`` when a queue policy ended the run (``reason`` then
    says the contract's cancel it amounts to); an expected ``reason`` may name either."""
    stalled: bool = False
    """Extension: the run was flagged stalled (``run.stalled``) at least once."""
    resume_of: str | UnsetType = UNSET
    """Extension: the run it continues, as its ``run.started`` said (``StartRun.resume_of``)."""


class ActionReport(msgspec.Struct, frozen=True, omit_defaults=True):
    """One action's result; closes (and shutdowns) add what was decided at the request."""

    do: ActionDo
    result: CloseResult | RequestResult | ScenarioResult | None
    """``None`` when the action fired and its answer never came."""
    action_id: str | UnsetType | None = UNSET
    completed: bool | UnsetType = UNSET
    completed_directories: list[str] | UnsetType = UNSET
    pending_directories: list[str] | UnsetType = UNSET
    blocking_runs: list[str] | UnsetType = UNSET
    interrupted_runs: list[str] | UnsetType = UNSET
    abandoned_runs: list[str] | UnsetType = UNSET
    """``shutdown`` and ``test_teardown`` only: bodies left running at the deadline, sorted."""
    error: str | UnsetType = UNSET
    """``rejected`` only: why, in one sentence."""
    code: RejectCode | UnsetType = UNSET
    """Extension, ``rejected`` only: the rejection's code (``ask_withdrawn``, ``nothing_pending``...)."""
    outcome: Outcome | UnsetType | None = UNSET
    """Extension, ``wait_run`` only: the outcome of the run it joined."""
    reason: InterruptReason | UnsetType | None = UNSET
    """Extension, ``wait_run`` only: that run's reason."""


class ScenarioReport(msgspec.Struct, frozen=True):
    """The report of one played scenario (``run-supervisor scenario FILE --json``)."""

    scenario: str
    file: str
    passed: bool
    runs: dict[str, RunReport]
    actions: dict[str, ActionReport]
    sessions: dict[str, SessionStatus]
    events: list[dict[str, Any]]
    """The ordered stream: ``seq`` (1, 2, 3…), ``type`` and the event's fields."""
    failures: list[str]
    reload_policy: ReloadPolicy = ReloadPolicy.EAGER
    """An extension: the reload policy the scenario played with (``eager`` unless it said ``lazy``)."""


class InvalidScenario(msgspec.Struct, frozen=True):
    """A folder's entry for a file that is not a valid scenario."""

    file: str
    error: str


class FolderReport(msgspec.Struct, frozen=True):
    """``run-supervisor scenario FOLDER --json``: every file, sorted by name."""

    passed: bool
    scenarios: list[ScenarioReport | InvalidScenario]


def to_builtins(report: ScenarioReport | InvalidScenario | FolderReport) -> dict[str, Any]:
    """The report as JSON-ready Python data (dicts, lists, strings, numbers, ``None``)."""
    data: dict[str, Any] = msgspec.to_builtins(report)
    return data


# ----------------------------------------------------------------------------------------------------
# Expectations


def check_expectations(
    expect: Sequence[Expectation],
    report: ScenarioReport,
    names: Sequence[tuple[int, str]],
    completions: Mapping[str, int],
) -> list[str]:
    """One line per expectation that did not hold.

    ``names`` pairs each report event index with the ``when`` name it stands for (for
    ``completed_after``); ``completions`` maps an action to the index of its ``lifecycle.completed``.
    """
    failures: list[str] = []
    for expectation in expect:
        if expectation.target_kind is ExpectationTarget.RUN:
            failures += _check_run(expectation, report.runs[expectation.target])
        elif expectation.target_kind is ExpectationTarget.ACTION:
            failures += _check_action(
                expectation,
                report.actions[expectation.target],
                names,
                completions.get(expectation.target),
                _next_generation_loaded(report, expectation.target),
                _answer_index(report, expectation.target),
            )
        else:
            got = report.sessions.get(expectation.target, SessionStatus.IDLE)
            want = expectation.fields.get("status")
            if want is not None and got != want:
                failures.append(f"{expectation.target}: expected status {_shown(want)}, got {_shown(got)}")
            retries = expectation.fields.get("retries")  # an extension: the retry statuses it announced
            seen = sum(
                1
                for e in report.events
                if e["type"] == "session.status"
                and e["session"] == expectation.target
                and e["status"] == SessionStatus.RETRY
            )
            if retries is not None and seen != retries:
                failures.append(f"{expectation.target}: expected {retries} retry statuses, got {seen}")
            statuses = expectation.fields.get("statuses")  # an extension: the exact sequence
            if isinstance(statuses, tuple):
                got_statuses = [
                    e["status"]
                    for e in report.events
                    if e["type"] == "session.status" and e["session"] == expectation.target
                ]
                if got_statuses != list(statuses):
                    failures.append(
                        f"{expectation.target}: expected the statuses {[str(s) for s in statuses]}, "
                        f"got {[str(s) for s in got_statuses]}"
                    )
    return failures


def check_event_expectations(
    expect: Sequence[EventExpectation], report: ScenarioReport, names: Sequence[tuple[int, str]]
) -> list[str]:
    """One line per ``expect_events`` entry (an extension) that did not hold: the events of its type
    whose fields match, between its ``after`` and ``before`` events, are not as many as it says (at
    least one when it gives no ``count``). ``names`` pairs each report event index with the ``when``
    name it stands for."""
    failures: list[str] = []
    for expectation in expect:
        start, end = -1, len(report.events)
        missing = False
        for bound in (expectation.after, expectation.before):
            if bound is None:
                continue
            seen = next((index for index, name in names if name == bound.raw), None)
            if seen is None:
                failures.append(f"{_described(expectation)}: {bound.raw} never happened")
                missing = True
            elif bound is expectation.after:
                start = seen
            else:
                end = seen
        if missing:
            continue
        found = [
            index
            for index in range(start + 1, end)
            if report.events[index]["type"] == expectation.type
            and all(
                _matches(want, report.events[index].get(name, UNSET))
                for name, want in expectation.fields.items()
            )
        ]
        count = expectation.count
        if (count is None and found) or len(found) == count:
            continue
        wanted = "at least 1" if count is None else f"exactly {count}"
        where = ", ".join(str(report.events[index]["seq"]) for index in found)
        failures.append(
            f"{_described(expectation)}: expected {wanted}, got {len(found)}"
            + (f" (seq {where})" if found else "")
        )
    return failures


def _described(expectation: EventExpectation) -> str:
    fields = ", ".join(f"{name} = {_shown_value(value)}" for name, value in expectation.fields.items())
    window = "".join(
        f" {word} {bound.raw}"
        for word, bound in (("after", expectation.after), ("before", expectation.before))
        if bound is not None
    )
    return f"{expectation.key}: {expectation.type}" + (f" with {fields}" if fields else "") + window


def _shown_value(value: object) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_shown_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "[" + ", ".join(_shown_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    return _shown(value)


def _matches(want: object, got: object) -> bool:
    """``got`` (a report row's value) holds ``want``: a table holds at least the wanted keys, each
    matching; a list is equal item by item; a boolean is never a number."""
    if isinstance(want, Mapping):
        return isinstance(got, Mapping) and all(
            name in got and _matches(item, got[name]) for name, item in want.items()
        )
    if isinstance(want, tuple):
        return (
            isinstance(got, list | tuple)
            and len(got) == len(want)
            and all(_matches(a, b) for a, b in zip(want, got, strict=True))
        )
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(want, bool) and isinstance(got, bool) and want == got
    return want == got


def _shown(value: object) -> str:
    if value is None:
        return "none"
    return repr(str(value)) if isinstance(value, str) else repr(value)


def _check_run(expectation: Expectation, run: RunReport) -> list[str]:
    failures: list[str] = []
    rid = expectation.target
    for key, want in expectation.fields.items():
        if key == "tool_parts":
            assert isinstance(want, tuple)
            failures += _check_parts(rid, want, run.tool_parts)
            continue
        got = getattr(run, key)
        if got is UNSET:
            got = None
        if key == "reason" and run.queue_reason is not UNSET and want == run.queue_reason:
            continue  # the library's reason, reported as an extension
        if got != want:
            context = f" (reason {run.reason})" if key == "outcome" and run.reason else ""
            failures.append(f"{rid}: expected {key} {_shown(want)}, got {_shown(got)}{context}")
    return failures


def _check_parts(
    rid: str, wanted: Sequence[PartState | PartExpectation], parts: Sequence[PartReport]
) -> list[str]:
    if len(wanted) != len(parts):
        states = [str(part.state) for part in parts]
        return [f"{rid}: expected {len(wanted)} tool part(s), got {len(parts)} {states}"]
    failures = []
    for index, (expected, part) in enumerate(zip(wanted, parts, strict=True)):
        state = expected.state if isinstance(expected, PartExpectation) else expected
        if part.state != state:
            failures.append(
                f"{rid}: tool part {index}: expected state {_shown(state)}, got {_shown(part.state)}"
            )
        if not isinstance(expected, PartExpectation):
            continue
        if expected.tool_started is not None and part.tool_started != expected.tool_started:
            failures.append(
                f"{rid}: tool part {index}: expected tool_started {expected.tool_started}, "
                f"got {part.tool_started}"
            )
        if expected.label is not None and part.label != expected.label:
            failures.append(
                f"{rid}: tool part {index}: expected label {expected.label!r}, got {part.label!r}"
            )
    return failures


def _next_generation_loaded(report: ScenarioReport, action: str) -> int | None:
    """The index of the ``instance.started`` of a reload's next generation: the first one of its
    directory after its ``lifecycle.requested`` (None: not a reload that ran, or nothing loaded)."""
    rows = report.events
    asked = next(
        (
            i
            for i, row in enumerate(rows)
            if row["type"] == "lifecycle.requested" and row.get("action") == action
        ),
        None,
    )
    if asked is None or rows[asked].get("do") != CloseAction.RELOAD or not rows[asked].get("directories"):
        return None
    directory = rows[asked]["directories"][0]
    return next(
        (
            i
            for i in range(asked + 1, len(rows))
            if rows[i]["type"] == "instance.started" and rows[i].get("directory") == directory
        ),
        None,
    )


def _check_load_order(
    aid: str, key: str, want: When, names: Sequence[tuple[int, str]], loaded: int | None
) -> list[str]:
    """``loaded_after`` / ``loaded_before``: where the reload's next generation loaded, against an event."""
    relation = key.removeprefix("loaded_")
    if loaded is None:
        return [f"{aid}: expected its next generation loaded {relation} {want.raw}, but it never loaded"]
    seen = next((index for index, name in names if name == want.raw), None)
    if seen is None:
        return [f"{aid}: expected its next generation loaded {relation} {want.raw}, which never happened"]
    if (relation == "after") != (seen < loaded):
        return [
            f"{aid}: its next generation loaded (event {loaded + 1}) not {relation} {want.raw} "
            f"(event {seen + 1})"
        ]
    return []


_ORDER_KEYS: Mapping[str, tuple[str, str]] = {
    "completed_before": ("completed", "before"),
    "answered_after": ("answered", "after"),
    "answered_before": ("answered", "before"),
}


def _check_order(
    aid: str, what: str, relation: str, want: When, names: Sequence[tuple[int, str]], at: int | None
) -> list[str]:
    """``<what>_<relation>``: where the action was answered (its ``action.result``) or completed,
    against the first time ``want`` happened."""
    if at is None:
        return [f"{aid}: expected to be {what} {relation} {want.raw}, but it never was"]
    seen = next((index for index, name in names if name == want.raw), None)
    if seen is None:
        return [f"{aid}: expected to be {what} {relation} {want.raw}, which never happened"]
    if not (seen < at if relation == "after" else at < seen):
        return [f"{aid}: {what} (event {at + 1}) not {relation} {want.raw} (event {seen + 1})"]
    return []


def _answer_index(report: ScenarioReport, action: str) -> int | None:
    """The index of the action's ``action.result`` in the timeline (None: never answered)."""
    return next(
        (
            index
            for index, row in enumerate(report.events)
            if row["type"] == "action.result" and row.get("action") == action
        ),
        None,
    )


def _check_action(
    expectation: Expectation,
    action: ActionReport,
    names: Sequence[tuple[int, str]],
    completion: int | None,
    loaded: int | None = None,
    answer: int | None = None,
) -> list[str]:
    failures: list[str] = []
    aid = expectation.target
    for key, want in expectation.fields.items():
        if key in ("loaded_after", "loaded_before"):
            assert isinstance(want, When)
            failures += _check_load_order(aid, key, want, names, loaded)
            continue
        if key == "completed_after":
            assert isinstance(want, When)
            if completion is None:
                failures.append(f"{aid}: expected to complete after {want.raw}, but it never completed")
                continue
            first = next((index for index, name in names if name == want.raw), None)
            if first is None:
                failures.append(f"{aid}: expected to complete after {want.raw}, which never happened")
            elif first >= completion:
                failures.append(f"{aid}: completed (event {completion + 1}) before {want.raw}")
            continue
        if key in _ORDER_KEYS:  # extensions: its answer, or its completion, against an event
            assert isinstance(want, When)
            what, relation = _ORDER_KEYS[key]
            at = completion if what == "completed" else answer
            failures += _check_order(aid, what, relation, want, names, at)
            continue
        got = getattr(action, key)
        if key == "interrupted_runs":
            wanted_runs = set(want) if isinstance(want, tuple | list) else set()
            got_runs = [] if got is UNSET else got
            if set(got_runs) != wanted_runs:
                failures.append(f"{aid}: expected interrupted_runs {sorted(wanted_runs)}, got {got_runs}")
            continue
        if got is UNSET:
            got = None
        if got != want:
            failures.append(f"{aid}: expected {key} {_shown(want)}, got {_shown(got)}")
    return failures
