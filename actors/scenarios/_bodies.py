"""What a scenario's runs and instances stand for: run bodies made of steps, and instance hooks with faults.

A body is ordinary host code: it uses only the public ``RunContext`` (steps, tool calls, asks, the
cancellation token) and ``Gate``, exactly as an agent backend would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from run_supervisor.actors import Ask, Gate, RunContext, SupervisorTimeout, ToolCall
from run_supervisor.actors.scenarios._format import RunSpec, Scenario, StepSpec
from run_supervisor.protocol import PartState, StepKind

__all__ = ["ScenarioFault", "ScenarioHooks", "make_body"]


class ScenarioFault(Exception):
    """The error a step's ``fail`` key makes the run body raise."""


def _wait_gate(ctx: RunContext, step: StepSpec, gate: Gate) -> None:
    """Wait at the step's gate; with ``heartbeat_ms``, heartbeating meanwhile (a stream that is alive)."""
    interruptible = not step.ignores_cancel
    if step.heartbeat_ms is None:
        gate.wait(ctx.token, interruptible=interruptible)
        return
    while not gate.wait(ctx.token, step.heartbeat_ms / 1000.0, interruptible=interruptible):
        _beat(ctx)


def _pause(ctx: RunContext, step: StepSpec) -> None:
    """The step's ``ms`` of work; with ``heartbeat_ms``, heartbeating meanwhile."""
    interruptible = not step.ignores_cancel
    end = time.monotonic() + step.ms / 1000.0
    while (left := end - time.monotonic()) > 0:
        slice_s = left if step.heartbeat_ms is None else min(left, step.heartbeat_ms / 1000.0)
        ctx.token.wait_until(lambda: False, slice_s, interruptible=interruptible)
        if step.heartbeat_ms is not None:
            _beat(ctx)


def _beat(ctx: RunContext) -> None:
    if not ctx.cancelled:  # a step that ignores its cancellation goes on without raising here
        ctx.heartbeat()


def _work(ctx: RunContext, step: StepSpec, gates: dict[str, Gate]) -> None:
    interruptible = not step.ignores_cancel
    if step.gate is not None and (step.kind is not StepKind.TOOL_EXEC or step.at is PartState.RUNNING):
        _wait_gate(ctx, step, gates[step.gate])
    if step.ms:
        _pause(ctx, step)
    if not interruptible:
        ctx.check()  # the step's work is done: now the decided interrupt takes effect
    if step.fail is not None:
        raise ScenarioFault(step.fail)


def make_body(
    spec: RunSpec,
    gates: dict[str, Gate],
    ask_ids: dict[tuple[str, str], str] | None = None,
    *,
    reads_instance: bool = False,
) -> Callable[[RunContext], None]:
    """The run body a scenario run stands for: its steps, gates, work, faults and asks.

    A named ask (a step's ``ask``) is recorded in ``ask_ids`` under ``(run, name)`` as it opens, so the
    play can reply to it by id. An ask with ``wait = false`` stays open while the run goes on; the body
    waits for it (and ends its tool part) after the last step.

    ``reads_instance``: the body reads its instance first (``ctx.instance()``), as an agent reads its
    config: a load that failed fails the run with its error, a slow one holds the run until it ends.
    """
    last_step_of_part: dict[int, str] = {}
    for step in spec.steps:
        if step.part is not None:
            last_step_of_part[step.part] = step.id

    def body(ctx: RunContext) -> None:
        # Each step's state is reported *before* its run.step.started event, so an action fired on
        # that event finds the part (and an immediate ask) exactly where the file says it is.
        if reads_instance:
            ctx.instance()
        call: ToolCall | None = None
        later: list[tuple[Ask[Any], StepSpec, ToolCall | None]] = []  # asks opened with wait = false
        waiting_parts: set[int] = set()  # parts whose end waits for such an ask
        for step in spec.steps:
            kind = step.kind
            asks = kind in (StepKind.PERMISSION, StepKind.FORM)
            ask_at_once = asks and step.gate is None and not step.ms and step.fail is None
            ask: Ask[Any] | None = None
            if kind is StepKind.TOOL_INPUT:
                assert step.tool is not None
                call = ctx.tool(step.tool)
            elif kind is StepKind.TOOL_EXEC:
                assert call is not None
                call.prepared()
                if step.at is PartState.RUNNING:
                    call.running()
            elif ask_at_once:  # opened before the step event: an action fired on it finds the ask
                ask = _open_ask(ctx, call, step, spec.id, ask_ids)
            if step.retry:  # the provider call failed: retried, the step's gate is the backoff
                for retry in step.retries:
                    due = None if retry.next_at_ms is None else retry.next_at_ms / 1000.0
                    if retry.backoff_ms is not None:
                        due = time.time() + retry.backoff_ms / 1000.0
                    ctx.retrying(retry.attempt, retry.message, due)
                if step.gate is not None:
                    gates[step.gate].wait(ctx.token, interruptible=not step.ignores_cancel)
            in_part = call is not None and step.part is not None
            tool, call_id = (call.tool, call.call_id) if in_part and call is not None else (None, None)
            ctx.step_started(step.id, kind, tool=tool, call_id=call_id)
            if kind is StepKind.TOOL_EXEC and step.at is PartState.PREPARED:
                assert call is not None
                if step.gate is not None:
                    _wait_gate(ctx, step, gates[step.gate])
                    if step.ignores_cancel:
                        ctx.check()
                call.running()
            _work(ctx, step, gates)
            if asks:
                ask = ask or _open_ask(ctx, call, step, spec.id, ask_ids)
                if step.wait:
                    _await(ask, step, call)
                else:
                    later.append((ask, step, call))
                    if step.part is not None:
                        waiting_parts.add(step.part)
            if kind is StepKind.TOOL_EXEC and step.error is not None:
                assert call is not None
                call.failed(step.error)
            ctx.step_finished(step.id, kind, tool=tool, call_id=call_id)
            part_ends = step.part is not None and last_step_of_part[step.part] == step.id
            if part_ends and call is not None and step.part not in waiting_parts:
                call.completed()  # ignored by the core if the part already ended in error
        for ask, step, call in later:  # the asks left open, in the order they were opened
            _await(ask, step, call)
            if call is not None:
                call.completed()

    return body


def _open_ask(
    ctx: RunContext,
    call: ToolCall | None,
    step: StepSpec,
    run: str,
    ask_ids: dict[tuple[str, str], str] | None,
) -> Ask[Any]:
    """The step's ask, tied to its tool part, with the step's payload."""
    ask: Ask[Any]
    if step.kind is StepKind.PERMISSION:
        opener = call.open_permission if call is not None else ctx.open_permission
        ask = opener(title=step.title, command=step.command, options=step.options, key=step.key)
    else:
        form = call.open_form if call is not None else ctx.open_form
        ask = form(title=step.title, questions=step.questions)
    if step.ask is not None and ask_ids is not None:
        ask_ids[(run, step.ask)] = ask.ask_id
    return ask


def _await(ask: Ask[Any], step: StepSpec, call: ToolCall | None) -> None:
    """Wait for the ask's decision; past the step's ``timeout_ms`` it is withdrawn and the call fails."""
    timeout = None if step.timeout_ms is None else step.timeout_ms / 1000.0
    try:
        ask.wait(timeout)
    except SupervisorTimeout:
        if call is not None:
            call.failed(f"no answer to the {step.kind.value} ask within {step.timeout_ms} ms")


class ScenarioHooks:
    """Instance hooks with the file's faults: a dispose that raises, or that takes ``dispose_ms``."""

    def __init__(self, scenario: Scenario) -> None:
        self._faults = scenario.instance_faults
        self.release = threading.Event()
        """Set when the play ends: a hook still waiting out its ``dispose_ms`` or ``load_ms`` returns
        at once."""
        self._load_gates = {name: threading.Event() for name in scenario.load_gates}

    def open_gate(self, name: str) -> None:
        """Let a load held at this gate go on (a gate no load names is ignored)."""
        gate = self._load_gates.get(name)
        if gate is not None:
            gate.set()

    def end(self) -> None:
        """The play is over: every hook still waiting returns at once."""
        self.release.set()
        for gate in self._load_gates.values():
            gate.set()

    def load(self, directory: str, generation: int) -> Any:
        fault = self._faults.get(directory)
        if fault is not None and fault.affects(generation):
            if fault.load_gate is not None:
                self._load_gates[fault.load_gate].wait()  # set by its open_gate, or at the play's end
            if fault.load_ms:
                self.release.wait(fault.load_ms / 1000.0)
            if fault.load_error is not None:
                raise RuntimeError(fault.load_error)
        return {"directory": directory, "generation": generation}

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        fault = self._faults.get(directory)
        if fault is None:
            return
        if fault.dispose_ms:
            self.release.wait(fault.dispose_ms / 1000.0)
        if fault.dispose_error is not None:
            raise RuntimeError(fault.dispose_error)
