"""Plays a scenario file against a real supervisor (real actors, real threads) and reports.

The runner is one loop on the calling thread reading one ordered queue: the supervisor's events,
and the answers to the actions it fired (injected into the same queue by the thread that resolves
them, right after that request's events), so the report's order is the order things happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import msgspec

from run_supervisor.actors._api import Supervisor, SupervisorConfig
from run_supervisor.actors._context import Gate, RunContext, ToolCall
from run_supervisor.actors._errors import SupervisorTimeout
from run_supervisor.actors._subscription import Subscription
from run_supervisor.actors.scenarios._format import (
    ActionSpec,
    Expectation,
    PartExpectation,
    RunSpec,
    Scenario,
    StepSpec,
    When,
)
from run_supervisor.protocol import (
    ActionResult,
    AnswerForm,
    CancelRun,
    CloseAction,
    CloseMode,
    CloseOutcome,
    CloseRequest,
    CloseResult,
    DismissForm,
    Event,
    InterruptReason,
    LifecycleCompleted,
    LifecycleRequested,
    PartSnapshot,
    PartState,
    ReplyPermission,
    Request,
    RequestOutcome,
    RunFinished,
    RunQueued,
    RunStarted,
    SessionStatusChanged,
    Shutdown,
    StartRun,
    StepFinished,
    StepKind,
    StepStarted,
    part_label,
)

__all__ = ["ScenarioFault", "make_body", "play"]

_CLOSES = {"dispose", "dispose_all", "reload", "invalidate_config"}
_SHUTDOWNS = {"shutdown": InterruptReason.SHUTDOWN, "test_teardown": InterruptReason.TEST_TEARDOWN}
_LIFECYCLE = _CLOSES | set(_SHUTDOWNS)


class ScenarioFault(Exception):
    """The error a step's ``fail`` key makes the run body raise."""


# --- run bodies -------------------------------------------------------------------------------


def _work(ctx: RunContext, step: StepSpec, gates: dict[str, Gate]) -> None:
    interruptible = not step.ignores_cancel
    if step.gate is not None and (step.kind != "tool_exec" or step.at == "running"):
        gates[step.gate].wait(ctx.token, interruptible=interruptible)
    if step.ms:
        ctx.token.wait_until(lambda: False, step.ms / 1000.0, interruptible=interruptible)
    if not interruptible:
        ctx.check()  # the step's work is done: now the decided interrupt takes effect
    if step.fail is not None:
        raise ScenarioFault(step.fail)


def make_body(spec: RunSpec, gates: dict[str, Gate]) -> Callable[[RunContext], None]:
    """The run body a scenario run stands for: its steps, gates, work, faults and asks."""
    last_step_of_part: dict[int, str] = {}
    for step in spec.steps:
        if step.part is not None:
            last_step_of_part[step.part] = step.id

    def body(ctx: RunContext) -> None:
        # Each step's state is reported *before* its run.step.started event, so an action fired on
        # that event finds the part (and an immediate ask) exactly where the file says it is.
        call: ToolCall | None = None
        for step in spec.steps:
            kind = StepKind(step.kind)
            asks = kind in (StepKind.PERMISSION, StepKind.FORM)
            ask_at_once = asks and step.gate is None and not step.ms and step.fail is None
            if kind is StepKind.TOOL_INPUT:
                assert step.tool is not None
                call = ctx.tool(step.tool)
            elif kind is StepKind.TOOL_EXEC:
                assert call is not None
                call.prepared()
                if step.at == "running":
                    call.running()
            elif ask_at_once:
                ctx.raise_ask(form=kind is StepKind.FORM)
            ctx.step_started(step.id, kind)
            if kind is StepKind.TOOL_EXEC and step.at == "prepared":
                assert call is not None
                if step.gate is not None:
                    gates[step.gate].wait(ctx.token, interruptible=not step.ignores_cancel)
                    if step.ignores_cancel:
                        ctx.check()
                call.running()
            _work(ctx, step, gates)
            if kind is StepKind.PERMISSION:
                ctx.ask_permission(raised=ask_at_once)
            elif kind is StepKind.FORM:
                ctx.ask_form(raised=ask_at_once)
            if kind is StepKind.TOOL_EXEC and step.error is not None:
                assert call is not None
                call.failed(step.error)
            ctx.step_finished(step.id, kind)
            if step.part is not None and last_step_of_part[step.part] == step.id and call is not None:
                call.completed()  # ignored by the core if the part already ended in error

    return body


class _ScenarioHooks:
    """Instance hooks with the file's faults: a dispose that raises, or that takes ``dispose_ms``."""

    def __init__(self, scenario: Scenario) -> None:
        self._faults = scenario.instance_faults
        self.release = threading.Event()  # set at the end: a hung hook's thread may go

    def load(self, directory: str, generation: int) -> Any:
        return {"directory": directory, "generation": generation}

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        fault = self._faults.get(directory)
        if fault is None:
            return
        if fault.dispose_ms:
            self.release.wait(fault.dispose_ms / 1000.0)
        if fault.dispose_error is not None:
            raise RuntimeError(fault.dispose_error)


# --- the play ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Answer:
    """An action's answer, injected into the event queue behind that request's events."""

    action: str
    outcome: CloseOutcome | RequestOutcome


@dataclass(slots=True)
class _RunRecord:
    spec: RunSpec
    generation: int | None = None
    started: bool = False
    queued: bool = False
    finished: RunFinished | None = None


@dataclass(slots=True)
class _ActionRecord:
    spec: ActionSpec
    fired: bool = False
    answered: bool = False
    outcome: CloseOutcome | RequestOutcome | None = None
    completed: bool = False
    completion_index: int | None = None


@dataclass
class _Play:
    scenario: Scenario
    timeout: float
    gates: dict[str, Gate] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    names: list[tuple[int, str]] = field(default_factory=list)  # (report event index, when-name)
    runs: dict[str, _RunRecord] = field(default_factory=dict)
    actions: dict[str, _ActionRecord] = field(default_factory=dict)
    sessions: dict[str, str] = field(default_factory=dict)
    lifecycle_ids: dict[str, str] = field(default_factory=dict)  # supervisor action id -> file id
    begin_pending: set[str] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.gates = {name: Gate(name) for name in self.scenario.gates}
        self.runs = {run.id: _RunRecord(run) for run in self.scenario.runs}
        self.actions = {action.id: _ActionRecord(action) for action in self.scenario.actions}
        self.sessions = dict.fromkeys(self.scenario.sessions, "idle")


def play(scenario: Scenario, *, timeout: float = 10.0) -> dict[str, Any]:
    """Play one scenario; return its report (the contract's JSON shape, as Python data)."""
    state = _Play(scenario, timeout)
    hooks = _ScenarioHooks(scenario)
    supervisor = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), hooks=hooks)
    inbox = supervisor.subscribe()
    try:
        known = {*scenario.directories, *(r.directory for r in scenario.runs), *scenario.instance_faults}
        supervisor.declare(*sorted(known))
        if scenario.directories:
            supervisor.load(*scenario.directories)
        _run_loop(state, supervisor, inbox)
    finally:
        inbox.close()
        if not supervisor.closed:
            try:
                supervisor.shutdown(grace_ms=500, reason=InterruptReason.TEST_TEARDOWN, origin="scenario.end")
            except SupervisorTimeout:
                state.failures.append("the supervisor did not shut down within its grace deadline")
        hooks.release.set()
        supervisor.threads.join(time.monotonic() + 2.0)
    return _report(state)


def _run_loop(state: _Play, supervisor: Supervisor, inbox: Subscription) -> None:
    deadline = time.monotonic() + state.timeout
    for spec in state.scenario.runs:
        if spec.start == "begin":
            state.begin_pending.add(spec.id)
            _submit(supervisor, inbox, f"begin:{spec.id}", _start(spec), make_body(spec, state.gates))
    if not state.begin_pending:
        _fire(state, supervisor, inbox, "begin")
    while True:
        if _finished(state) and not inbox.pending:
            return
        remaining = deadline - time.monotonic()
        try:
            item = inbox.get(timeout=max(0.0, remaining))
        except SupervisorTimeout:
            _time_out(state, supervisor, inbox)
            return
        except EOFError:
            return
        _handle(state, supervisor, inbox, item)


def _start(spec: RunSpec) -> StartRun:
    return StartRun(run_id=spec.id, session=spec.session, directory=spec.directory)


def _submit(
    supervisor: Supervisor,
    inbox: Subscription,
    action: str,
    request: Request,
    body: Callable[[RunContext], None] | None = None,
) -> None:
    def answered(future: Future[CloseOutcome | RequestOutcome]) -> None:
        # Behind this request's events; also after shutdown ended the event stream.
        inbox._offer(_Answer(action, future.result()), after_close=True)

    supervisor.submit(request, body=body).add_done_callback(answered)


def _request_for(state: _Play, spec: ActionSpec) -> Request | None:
    do = spec.do
    if do in _CLOSES:
        assert spec.mode is not None and spec.origin is not None
        directories = (spec.directory,) if spec.directory is not None else ()
        return CloseRequest(
            do=CloseAction(do),
            mode=CloseMode(spec.mode),
            origin=spec.origin,
            directories=directories,
            tag=spec.id,
        )
    if do in _SHUTDOWNS:
        return Shutdown(
            reason=_SHUTDOWNS[do], origin=spec.origin or do, grace_ms=spec.grace_ms or 0, tag=spec.id
        )
    assert spec.run is not None or do == "open_gate"
    run = spec.run or ""
    if do == "cancel":
        return CancelRun(run_id=run, origin=spec.origin or "user", tag=spec.id)
    if do == "start_run":
        return _start(state.runs[run].spec)
    if do == "reply_permission":
        return ReplyPermission(
            run_id=run, approve=spec.decision == "approve", message=spec.message, tag=spec.id
        )
    if do == "answer_form":
        return AnswerForm(run_id=run, answer=spec.answer or "", tag=spec.id)
    if do == "cancel_form":
        return DismissForm(run_id=run, tag=spec.id)
    return None  # open_gate: done by the runner itself


def _fire(state: _Play, supervisor: Supervisor, inbox: Subscription, name: str) -> None:
    for record in state.actions.values():
        if record.fired or record.spec.when.raw != name:
            continue
        record.fired = True
        spec = record.spec
        request = _request_for(state, spec)
        if request is None:
            assert spec.gate is not None
            state.gates[spec.gate].open()
            _answer(state, supervisor, inbox, _Answer(spec.id, RequestOutcome(result=CloseResult.OK)))
            continue
        body = make_body(state.runs[spec.run or ""].spec, state.gates) if spec.do == "start_run" else None
        _submit(supervisor, inbox, spec.id, request, body)


def _handle(state: _Play, supervisor: Supervisor, inbox: Subscription, item: object) -> None:
    if isinstance(item, _Answer):
        if item.action.startswith("begin:"):
            state.begin_pending.discard(item.action.removeprefix("begin:"))
            if not state.begin_pending:
                _fire(state, supervisor, inbox, "begin")
            return
        _answer(state, supervisor, inbox, item)
        return
    assert isinstance(item, msgspec.Struct)
    event: Event = item  # type: ignore[assignment]
    for name in _record_event(state, event):
        state.names.append((len(state.events) - 1, name))
        _fire(state, supervisor, inbox, name)


def _answer(state: _Play, supervisor: Supervisor, inbox: Subscription, answer: _Answer) -> None:
    record = state.actions[answer.action]
    record.answered = True
    record.outcome = answer.outcome
    rejected = answer.outcome.result is CloseResult.REJECTED
    if record.spec.do in _LIFECYCLE and not rejected:
        if isinstance(answer.outcome, CloseOutcome) and supervisor.closed and not _seen_result(state, record):
            # A shutdown after the supervisor had closed: the facade answered with the first one's
            # outcome; report its own request and completion as the contract promises.
            spec = record.spec
            _append(
                state,
                {
                    "type": "lifecycle.requested",
                    "action": spec.id,
                    "do": spec.do,
                    "mode": spec.do,
                    "origin": spec.origin,
                    "directories": [],
                },
            )
            _append(state, {"type": "lifecycle.completed", "action": record.spec.id})
            record.completed = True
            record.completion_index = len(state.events) - 1
            _append(
                state, {"type": "action.result", "action": record.spec.id, "result": answer.outcome.result}
            )
            for name in (f"{record.spec.id}.completed", f"{record.spec.id}.{answer.outcome.result.value}"):
                state.names.append((len(state.events) - 1, name))
                _fire(state, supervisor, inbox, name)
        return  # the supervisor published its own action.result, already handled
    _append(state, {"type": "action.result", "action": record.spec.id, "result": answer.outcome.result.value})
    name = f"{record.spec.id}.{answer.outcome.result.value}"
    state.names.append((len(state.events) - 1, name))
    _fire(state, supervisor, inbox, name)


def _seen_result(state: _Play, record: _ActionRecord) -> bool:
    return any(e["type"] == "action.result" and e.get("action") == record.spec.id for e in state.events)


def _append(state: _Play, event: dict[str, Any]) -> None:
    event = {"seq": len(state.events) + 1, **event}
    state.events.append(event)


def _file_action(state: _Play, action_id: str | None) -> str | None:
    if action_id is None:
        return None
    return state.lifecycle_ids.get(action_id, action_id)


def _record_event(state: _Play, event: Event) -> list[str]:
    """Add the event to the report; return the ``when`` names it stands for."""
    data: dict[str, Any] = msgspec.to_builtins(event)
    data.pop("seq", None)
    tag = data.pop("tag", None)
    data.pop("parts", None)
    # The report keeps the contract's names: ``run`` and ``action`` (the library says run_id, action_id).
    if "run_id" in data:
        data["run"] = data.pop("run_id")
    if "action_id" in data:
        data["action"] = data.pop("action_id")
    if isinstance(event, LifecycleRequested) and tag is not None:
        state.lifecycle_ids.setdefault(event.action_id, tag)
    if "action" in data:
        data["action"] = tag if tag is not None else _file_action(state, data["action"])
    if data.get("superseded_by") is not None:
        data["superseded_by"] = _file_action(state, data["superseded_by"])
    kind = data.pop("type")
    _append(state, {"type": kind, **data})
    names: list[str] = []
    if isinstance(event, RunStarted):
        record = state.runs.get(event.run_id)
        if record is not None:
            record.started, record.queued, record.generation = True, False, event.generation
        names.append(f"{event.run_id}.started")
    elif isinstance(event, RunQueued):
        if event.run_id in state.runs:
            state.runs[event.run_id].queued = True
    elif isinstance(event, RunFinished):
        if event.run_id in state.runs:
            state.runs[event.run_id].finished = event
            state.runs[event.run_id].queued = False
        names.append(f"{event.run_id}.finished")
    elif isinstance(event, StepStarted):
        names.append(f"{event.run_id}.{event.step}.started")
    elif isinstance(event, StepFinished):
        names.append(f"{event.run_id}.{event.step}.finished")
    elif isinstance(event, SessionStatusChanged):
        state.sessions[event.session] = event.status.value
    elif isinstance(event, LifecycleCompleted) and tag is not None and tag in state.actions:
        action = state.actions[tag]
        action.completed = True
        action.completion_index = len(state.events) - 1
        names.append(f"{tag}.completed")
    elif isinstance(event, ActionResult) and tag is not None and tag in state.actions:
        names.append(f"{tag}.{event.result.value}")
    return names


def _finished(state: _Play) -> bool:
    """Nothing more can happen: every request answered, every started run finished, none queued,
    every accepted close completed."""
    if state.begin_pending:
        return False
    for record in state.runs.values():
        if record.queued or (record.started and record.finished is None):
            return False
    for action in state.actions.values():
        if action.fired and not action.answered:
            return False
        if (
            action.spec.do in _LIFECYCLE
            and action.outcome is not None
            and action.outcome.result is not CloseResult.REJECTED
            and not action.completed
        ):
            return False
    return True


def _time_out(state: _Play, supervisor: Supervisor, inbox: Subscription) -> None:
    for record in state.runs.values():
        if record.started and record.finished is None:
            state.failures.append(
                f"run {record.spec.id} was still active at the timeout ({state.timeout:g} s)"
            )
        elif record.queued:
            state.failures.append(f"run {record.spec.id} was still queued at the timeout")
    for action in state.actions.values():
        if action.fired and not action.answered:
            state.failures.append(f"action {action.spec.id} ({action.spec.do}) was never answered")
        elif (
            action.outcome is not None
            and action.spec.do in _LIFECYCLE
            and not action.completed
            and action.outcome.result is not CloseResult.REJECTED
        ):
            state.failures.append(f"action {action.spec.id} ({action.spec.do}) never completed")
    if not state.failures:
        state.failures.append(f"the scenario did not end within {state.timeout:g} s")
    # Tear down what hung: active runs end interrupted / timeout; record those events too.
    if not supervisor.closed:
        try:
            supervisor.shutdown(grace_ms=500, reason=InterruptReason.TIMEOUT, origin="scenario.timeout")
        except SupervisorTimeout:
            state.failures.append("the timeout teardown did not finish within its grace deadline")
    for item in inbox.drain():
        if not isinstance(item, _Answer):
            _record_event(state, item)


# --- the report -------------------------------------------------------------------------------


def _part_dict(part: PartSnapshot) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tool": part.tool,
        "state": part.state.value,
        "tool_started": part.tool_started,
        "label": part_label(part),
    }
    if part.message is not None:
        out["message"] = part.message
    if part.state is PartState.INTERRUPTED:
        out["reason"] = part.reason.value if part.reason else None
        out["origin"] = part.origin
        out["phase"] = part.phase.value if part.phase else None
    return out


def _run_report(state: _Play, record: _RunRecord) -> dict[str, Any]:
    done = record.finished
    return {
        "session": record.spec.session,
        "directory": record.spec.directory,
        "generation": record.generation,
        "outcome": done.outcome.value if done else None,
        "reason": done.reason.value if done and done.reason else None,
        "origin": done.origin if done else None,
        "action": _file_action(state, done.action_id) if done else None,
        "phase": done.phase.value if done and done.phase else None,
        "error": done.error if done else None,
        "tool_parts": [_part_dict(p) for p in done.parts] if done else [],
        **({"abandoned": True} if done and done.abandoned else {}),
    }


def _action_report(record: _ActionRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"do": record.spec.do}
    outcome = record.outcome
    if not record.fired or outcome is None:
        out["result"] = "not_fired" if not record.fired else None
        return out
    out["result"] = outcome.result.value
    if outcome.result is CloseResult.REJECTED:
        out["error"] = outcome.error
        return out
    if isinstance(outcome, CloseOutcome):
        out.update(
            action_id=outcome.action_id,
            completed=record.completed,
            completed_directories=list(outcome.completed_directories),
            pending_directories=list(outcome.pending_directories),
            blocking_runs=list(outcome.blocking_runs),
            interrupted_runs=list(outcome.interrupted_runs),
        )
        if record.spec.do in _SHUTDOWNS:
            out["abandoned_runs"] = list(outcome.abandoned_runs)
    return out


def _report(state: _Play) -> dict[str, Any]:
    runs = {rid: _run_report(state, record) for rid, record in state.runs.items()}
    actions = {aid: _action_report(record) for aid, record in state.actions.items()}
    _fill_shutdown_abandoned(state, actions)
    failures = list(state.failures)
    failures[:0] = _check(state, runs, actions)
    return {
        "scenario": state.scenario.name,
        "file": state.scenario.file,
        "passed": not failures,
        "runs": runs,
        "actions": actions,
        "sessions": dict(state.sessions),
        "events": state.events,
        "failures": failures,
    }


def _fill_shutdown_abandoned(state: _Play, actions: dict[str, dict[str, Any]]) -> None:
    """The abandoned runs are known at completion, after the answer: take them from the event."""
    for event in state.events:
        if event["type"] == "lifecycle.completed" and event.get("abandoned_runs"):
            report = actions.get(event["action"])
            if report is not None and "abandoned_runs" in report:
                report["abandoned_runs"] = sorted(event["abandoned_runs"])


def _shown(value: object) -> str:
    return "none" if value is None else repr(value)


def _check(state: _Play, runs: dict[str, Any], actions: dict[str, Any]) -> list[str]:
    failures: list[str] = []
    for expectation in state.scenario.expect:
        if expectation.target_kind == "run":
            failures += _check_run(expectation, runs[expectation.target])
        elif expectation.target_kind == "action":
            failures += _check_action(state, expectation, actions[expectation.target])
        else:
            got = state.sessions.get(expectation.target, "idle")
            want = expectation.fields.get("status")
            if want is not None and got != want:
                failures.append(f"{expectation.target}: expected status {want!r}, got {got!r}")
    return failures


def _check_run(expectation: Expectation, run: dict[str, Any]) -> list[str]:
    failures: list[str] = []
    rid = expectation.target
    for key, want in expectation.fields.items():
        if key == "tool_parts":
            failures += _check_parts(rid, want, run["tool_parts"])
            continue
        got = run.get(key)
        if got != want:
            context = f" (reason {run['reason']})" if key == "outcome" and run.get("reason") else ""
            failures.append(f"{rid}: expected {key} {_shown(want)}, got {_shown(got)}{context}")
    return failures


def _check_parts(rid: str, want: Any, parts: list[dict[str, Any]]) -> list[str]:
    got_states = [p["state"] for p in parts]
    wanted: list[PartExpectation | str] = list(want)
    if len(wanted) != len(parts):
        return [f"{rid}: expected {len(wanted)} tool part(s), got {len(parts)} {got_states}"]
    failures = []
    for index, (expected, part) in enumerate(zip(wanted, parts, strict=True)):
        state = expected if isinstance(expected, str) else expected.state
        if part["state"] != state:
            failures.append(f"{rid}: tool part {index}: expected state {state!r}, got {part['state']!r}")
        if (
            isinstance(expected, PartExpectation)
            and expected.tool_started is not None
            and part["tool_started"] != expected.tool_started
        ):
            failures.append(
                f"{rid}: tool part {index}: expected tool_started {expected.tool_started}, "
                f"got {part['tool_started']}"
            )
    return failures


def _check_action(state: _Play, expectation: Expectation, action: dict[str, Any]) -> list[str]:
    failures: list[str] = []
    aid = expectation.target
    record = state.actions[aid]
    for key, want in expectation.fields.items():
        if key == "completed_after":
            wanted = want.raw if isinstance(want, When) else str(want)
            if record.completion_index is None:
                failures.append(f"{aid}: expected to complete after {wanted}, but it never completed")
                continue
            first = next((index for index, name in state.names if name == wanted), None)
            if first is None:
                failures.append(f"{aid}: expected to complete after {wanted}, which never happened")
            elif first >= record.completion_index:
                failures.append(f"{aid}: completed (event {record.completion_index + 1}) before {wanted}")
            continue
        got = action.get(key)
        if key == "interrupted_runs":
            wanted_runs = set(want) if isinstance(want, tuple | list) else set()
            if set(got or ()) != wanted_runs:
                failures.append(f"{aid}: expected interrupted_runs {sorted(wanted_runs)}, got {got}")
            continue
        if got != want:
            failures.append(f"{aid}: expected {key} {_shown(want)}, got {_shown(got)}")
    return failures
