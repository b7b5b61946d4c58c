"""The real supervisor under random interleavings, checked against a small model.

A Hypothesis ``RuleBasedStateMachine`` drives a real ``Supervisor`` (real pykka actors, real worker
threads) through random sequences of: starting runs (random session, directory and steps), user
cancels, the four closes (dispose, dispose_all, reload, invalidate_config) in both modes, permission
replies (approve, reject, reject with a message), form answers and dismissals, faults (a body that
raises), back-to-back decisions on one run, and shutdown or test teardown. Beside it, ``Model``
predicts what must happen: which runs are active or queued per session, each directory's instance
generations, which closes are pending and which runs they wait for, the result of every request and
the outcome, reason, origin, action, phase and tool parts of every run.

Run bodies are deterministic: each walks its steps and holds at a per-step ``Gate`` (or at a
permission ask or a form), so the state machine decides when a run moves on. After every rule the
test waits (bounded, on events, never sleeping) for what the model says must happen, then a query
to the supervisor's mailbox serves as a barrier; model and system agree before the next rule.

Invariants are checked after every step and after the final shutdown (see ``SupervisorMachine``).

Profiles (registered in ``tests/conftest.py``):

* ``ci`` (default): 1,000 derandomized sequences of up to 15 steps, well under two minutes.
* ``soak``: 20,000 random sequences of up to 40 steps, for a long local run::

      .venv/bin/python -m pytest tests/test_stateful.py --hypothesis-profile soak

  Each soak run draws new random sequences (``derandomize=False``); a failure prints its reproduction
  blob (``@reproduce_failure``) and the shrunk step sequence.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pykka
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from run_supervisor import (
    CloseAction,
    CloseMode,
    CloseOutcome,
    CloseResult,
    Gate,
    InterruptReason,
    InvalidRequest,
    NothingPending,
    Outcome,
    PartSnapshot,
    PartState,
    Phase,
    RejectCode,
    ReloadPolicy,
    RequestOutcome,
    RequestResult,
    RunAlreadyExists,
    RunAlreadyFinished,
    RunContext,
    RunHandle,
    RunSnapshot,
    SessionStatus,
    Supervisor,
    SupervisorClosed,
    SupervisorConfig,
    SupervisorError,
    UnknownDirectory,
    UnknownRun,
)
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import (
    CLOSE_RULES,
    ActionResult,
    AnswerForm,
    CancelRun,
    CloseRequest,
    DismissForm,
    InstanceClosed,
    InstanceStarted,
    LifecycleCompleted,
    LifecycleDeferred,
    ReloadLoad,
    ReplyPermission,
    Request,
    RunFinished,
    RunQueued,
    RunStarted,
    SessionStatusChanged,
    Shutdown,
    StartRun,
)
from run_supervisor.protocol._rules import reload_loads
from run_supervisor.protocol.testing import ExpectedInterrupt as Interrupt
from run_supervisor.protocol.testing import InvariantChecker

# --- profiles: registered in conftest.py ("ci" by default; --hypothesis-profile soak) ---------------

PROFILE = settings.default
_TIMEOUT_S = 600 if PROFILE.max_examples <= 1000 else 6 * 3600
"""pytest-timeout's bound for the whole state machine test (pyproject's 60 s is per test function)."""

pytestmark = [pytest.mark.timeout(_TIMEOUT_S), pytest.mark.deep]

# --- the world --------------------------------------------------------------------------------------

DIRECTORIES = ("/w/a", "/w/b", "/w/c")
NEVER_SEEN = "/w/never"
"""A directory no run uses and nobody declares: closes naming it are rejected."""
SESSIONS = ("s1", "s2", "s3")
CLOSES = (CloseAction.DISPOSE, CloseAction.DISPOSE_ALL, CloseAction.RELOAD, CloseAction.INVALIDATE_CONFIG)
ONE_DIRECTORY = frozenset({CloseAction.DISPOSE, CloseAction.RELOAD})
MODES = (CloseMode.MAINTENANCE, CloseMode.USER_CONFIRMED_INTERRUPT)

GRACE_MS = 1000
"""Shutdown's ceiling. Bodies are cooperative, so a shutdown ends as soon as they unwind (ms)."""
WAIT_S = 3.0
"""Bound of every wait on an event; a wait only runs out when something is wrong."""
HOLD_LIMIT_S = 20.0
"""A body never holds longer than this, so even a broken example cannot leave a thread for ever."""
CONFIG = SupervisorConfig(
    request_timeout_s=5.0, dispose_budget_ms=1000, default_grace_ms=GRACE_MS, shutdown_at_exit=False
)


def _at_gate(run: Any) -> bool:
    return bool(run.at_gate)


_SOME_RUN_AT_A_GATE = precondition(lambda self: any(_at_gate(r) for r in self.model.runs.values()))
"""A rule that takes a run held at a gate: one must be."""


@dataclass(frozen=True)
class Stop:
    """A point where a body holds: at a gate in a model step or in a tool part's phase, or at an ask."""

    kind: str  # "model", "tool", "permission", "form"
    at: Phase | None = None  # where a "tool" stop holds

    @property
    def tool(self) -> str | None:
        return {"model": None, "tool": "bash", "permission": "bash", "form": "question"}[self.kind]

    @property
    def phase(self) -> Phase | None:
        """The phase an interrupt here reports (None outside a tool part)."""
        if self.kind == "model":
            return None
        return self.at if self.kind == "tool" else Phase.RUNNING

    @property
    def ask(self) -> str | None:
        return self.kind if self.kind in ("permission", "form") else None

    def __repr__(self) -> str:
        return f"{self.kind}@{self.at.value}" if self.at else self.kind


STOPS = (
    Stop("model"),
    Stop("tool", Phase.GENERATING),
    Stop("tool", Phase.PREPARED),
    Stop("tool", Phase.RUNNING),
    Stop("permission"),
    Stop("form"),
)


def step_id(index: int) -> str:
    return f"h{index}"


def fault_message(run_id: str, index: int) -> str:
    return f"{run_id} broke at {step_id(index)}"


def end_message(run_id: str) -> str:
    return f"{run_id} raised at its end"


class Control:
    """The test's hold on one run body: a gate per stop, and a fault to raise after one of them."""

    def __init__(self, stops: int) -> None:
        self.gates = [Gate(step_id(index)) for index in range(stops)]
        self.fail_at: int | None = None


def _hold(ctx: RunContext, control: Control, index: int) -> None:
    if not ctx.wait(control.gates[index], timeout=HOLD_LIMIT_S):
        raise RuntimeError(f"{ctx.run_id}: {step_id(index)} was never released")
    if control.fail_at == index:
        raise RuntimeError(fault_message(ctx.run_id, index))


def make_body(plan: tuple[Stop, ...], end: str, control: Control) -> Callable[[RunContext], None]:
    """A body that walks ``plan``, holding at each stop. Every hold is reported by a step whose id is
    ``h<index>``, and only after the tool part reports that put the run in the stop's phase, so an
    observer who saw the step's ``run.step.started`` knows exactly where the run is."""

    def body(ctx: RunContext) -> None:
        for index, stop in enumerate(plan):
            sid = step_id(index)
            if stop.kind == "model":
                with ctx.step("model", sid):
                    _hold(ctx, control, index)
            elif stop.kind == "tool":
                call = ctx.tool("bash")
                if stop.at is Phase.GENERATING:
                    with ctx.step("tool_input", sid):
                        _hold(ctx, control, index)
                    call.prepared()
                    call.running()
                elif stop.at is Phase.PREPARED:
                    with ctx.step("tool_input"):
                        pass
                    call.prepared()
                    with ctx.step("tool_exec", sid):
                        _hold(ctx, control, index)
                        call.running()
                else:
                    with ctx.step("tool_input"):
                        pass
                    call.prepared()
                    call.running()
                    with ctx.step("tool_exec", sid):
                        _hold(ctx, control, index)
                call.completed()
            else:
                form = stop.kind == "form"
                call = ctx.tool(stop.tool or "")
                call.prepared()
                call.running()
                # Opened before the step is reported: a reply fired on the step never races it.
                ask = call.open_form() if form else call.open_permission()
                with ctx.step(stop.kind, sid):
                    ask.wait(timeout=HOLD_LIMIT_S)
                call.completed()
        if end == "raise":
            raise RuntimeError(end_message(ctx.run_id))

    return body


class RecordingHooks:
    """Instance hooks that remember every load and dispose, to check each instance closes once."""

    def __init__(self) -> None:
        self.loaded: list[tuple[str, int]] = []
        self.disposed: list[tuple[str, int]] = []
        self._changed = threading.Condition()

    def load(self, directory: str, generation: int) -> Any:
        with self._changed:
            self.loaded.append((directory, generation))
            self._changed.notify_all()
        return (directory, generation)

    def loaded_by_now(self, expected: list[tuple[str, int]], timeout: float = 5.0) -> list[tuple[str, int]]:
        """The loads so far, once they are ``expected`` (or the timeout passed): a load hook runs on
        its instance's own thread, so it may still be on its way when its instance.started is seen."""
        with self._changed:
            self._changed.wait_for(lambda: sorted(self.loaded) == expected, timeout)
            return sorted(self.loaded)

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        assert cache == (directory, generation)
        self.disposed.append((directory, generation))


# --- the reference model ----------------------------------------------------------------------------

Part = tuple[str, PartState, bool, str | None, InterruptReason | None, str | None, Phase | None]
"""(tool, state, tool_started, message, reason, origin, phase): a tool part as it must end."""


def part_of(snapshot: PartSnapshot) -> Part:
    return (
        snapshot.tool,
        snapshot.state,
        snapshot.tool_started,
        snapshot.message,
        snapshot.reason,
        snapshot.origin,
        snapshot.phase,
    )


@dataclass(frozen=True)
class Ending:
    """What a run's ``run.finished`` must say."""

    outcome: Outcome
    reason: InterruptReason | None
    origin: str | None
    action_id: str | None
    phase: Phase | None
    error: str | None
    generation: int | None
    parts: tuple[Part, ...]

    @classmethod
    def of(cls, said: RunFinished | RunSnapshot) -> Ending:
        """The ending a ``run.finished`` event (or the finished run's snapshot) says."""
        fields = {name: getattr(said, name) for name in cls.__dataclass_fields__ if name != "parts"}
        return cls(**fields, parts=tuple(part_of(p) for p in said.parts))


QUEUED, ACTIVE, FINISHED = "queued", "active", "finished"


@dataclass
class MRun:
    id: str
    session: str
    directory: str
    plan: tuple[Stop, ...]
    end: str
    control: Control
    handle: RunHandle | None = None
    state: str = QUEUED
    at: int = 0
    """The stop the body holds at (``len(plan)``: past the last one)."""
    generation: int | None = None
    parts: list[Part] = field(default_factory=list)
    """The parts of the stops it has passed, as they ended."""
    ending: Ending | None = None
    """Decided (interrupt decided, or the body is about to end) but not applied yet."""
    finished: Ending | None = None

    @property
    def stop(self) -> Stop | None:
        if self.state != ACTIVE or self.at >= len(self.plan):
            return None
        return self.plan[self.at]

    @property
    def waiting(self) -> str | None:
        """The ask the body waits on (its step was seen, so the ask was raised)."""
        stop = self.stop
        return stop.ask if stop is not None and self.ending is None else None

    @property
    def at_gate(self) -> bool:
        stop = self.stop
        return stop is not None and stop.ask is None and self.ending is None


@dataclass
class MSession:
    id: str
    active: str | None = None
    queue: deque[str] = field(default_factory=deque)
    busy: bool = False


@dataclass
class MInstance:
    directory: str
    generation: int
    live: bool = True
    runs: set[str] = field(default_factory=set)
    closers: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, int]:
        return (self.directory, self.generation)


@dataclass
class MDirectory:
    name: str
    current: int | None = None
    last: int = 0
    open: dict[int, MInstance] = field(default_factory=dict)


@dataclass
class MAction:
    id: str
    do: CloseAction
    mode: CloseMode
    result: CloseResult
    awaiting: set[tuple[str, int]] = field(default_factory=set)
    blocking_at_request: frozenset[str] = frozenset()
    completed: bool = False
    superseded_by: str | None = None


@dataclass(frozen=True)
class Expected:
    """A close's (or shutdown's) result as it must be answered."""

    result: CloseResult
    completed: bool | None
    """None: either. An interrupted close answers once its at-once disposes are done; by then its
    interrupted runs may have unwound and their instances closed too (``completed`` is the value at
    the time of the answer)."""
    completed_directories: tuple[str, ...]
    pending_directories: tuple[str, ...]
    blocking_runs: tuple[str, ...]
    interrupted_runs: tuple[str, ...]

    @classmethod
    def of_rule(
        cls,
        result: CloseResult,
        completed: bool | None,
        done: list[str],
        pending: list[str],
        blocking: set[str],
        interrupted: set[str],
    ) -> Expected:
        """The answer to a close whose rule (``Model._apply_rule``) left these directories done and
        pending, and these runs blocking and interrupted."""
        return cls(
            result,
            completed,
            tuple(done),
            tuple(pending),
            tuple(sorted(blocking)),
            tuple(sorted(interrupted)),
        )

    def check(self, outcome: CloseOutcome) -> None:
        got = Expected(
            result=outcome.result,
            completed=outcome.completed if self.completed is not None else None,
            completed_directories=outcome.completed_directories,
            pending_directories=outcome.pending_directories,
            blocking_runs=outcome.blocking_runs,
            interrupted_runs=outcome.interrupted_runs,
        )
        assert got == self, f"close answered {got}, the model expected {self}"


class Model:
    """What the contract says the supervisor must do, kept as plain state.

    Requests are applied at once; what bodies and instances do afterwards (a run ending, an instance
    closing) is applied by ``settle``, in an order that cannot change anything observable (each
    such consequence touches only its own session, instance and the closes waiting for it).
    Every event the system must publish as a consequence is listed in ``waits``.
    """

    def __init__(self) -> None:
        self.runs: dict[str, MRun] = {}
        self.sessions: dict[str, MSession] = {s: MSession(s) for s in SESSIONS}
        self.dirs: dict[str, MDirectory] = {}
        self.actions: dict[str, MAction] = {}
        self.started_instances: list[tuple[str, int]] = []
        self.closed_instances: list[tuple[str, int]] = []
        self.statuses: dict[str, list[SessionStatus]] = {s: [] for s in SESSIONS}
        self.queued_ever: set[str] = set()
        self.waits: list[tuple[str, dict[str, Any]]] = []
        self.endings: deque[MRun] = deque()
        self.shutdown_id: str | None = None
        self.shutdown_outcome: CloseOutcome | None = None
        self.deferred_loads: dict[str, tuple[ReloadPolicy, CloseMode]] = {}
        """Directories whose next generation a lazy reload deferred (``RELOAD_RULES``)."""

    # -- small helpers --

    def expect(self, kind: str, **fields: Any) -> None:
        self.waits.append((kind, fields))

    @property
    def closed(self) -> bool:
        return self.shutdown_id is not None

    def declare(self, name: str) -> MDirectory:
        return self.dirs.setdefault(name, MDirectory(name))

    def load(self, name: str) -> MInstance:
        directory = self.declare(name)
        self.deferred_loads.pop(name, None)
        directory.last += 1
        instance = MInstance(name, directory.last)
        directory.current = instance.generation
        directory.open[instance.generation] = instance
        self.started_instances.append(instance.key)
        self.expect("instance.started", directory=name, generation=instance.generation)
        return instance

    def active_runs(self) -> list[MRun]:
        return [r for r in self.runs.values() if r.state == ACTIVE]

    # -- runs --

    def start(self, run: MRun) -> None:
        self.runs[run.id] = run
        self.declare(run.directory)
        session = self.sessions[run.session]
        if session.active is None:
            self._activate(run, session)
        else:
            session.queue.append(run.id)
            self.queued_ever.add(run.id)
            self.expect("run.queued", run_id=run.id)
        self.settle()

    def _activate(self, run: MRun, session: MSession) -> None:
        directory = self.dirs[run.directory]
        instance = directory.open[directory.current] if directory.current else self.load(run.directory)
        instance.runs.add(run.id)
        run.generation = instance.generation
        run.state = ACTIVE
        run.at = 0
        session.active = run.id
        if not session.busy:
            session.busy = True
            self.statuses[session.id].append(SessionStatus.BUSY)
        self.expect("run.started", run_id=run.id)
        self._advance(run)

    def _advance(self, run: MRun) -> None:
        if run.at < len(run.plan):
            self.expect("run.step.started", run_id=run.id, step=step_id(run.at))
        elif run.end == "raise":
            self._end(run, Outcome.FAILED, error=end_message(run.id))
        else:
            self._end(run, Outcome.COMPLETED)

    def _end(
        self, run: MRun, outcome: Outcome, *, interrupt: Interrupt | None = None, error: str | None = None
    ) -> None:
        """Decide how the run ends (the body stops right after); ``settle`` applies it."""
        parts = list(run.parts)
        stop = run.stop
        phase = None
        if stop is not None and stop.tool is not None:
            # A permission ask gates its tool: until it is granted, the tool has not started.
            started = stop.phase is Phase.RUNNING and stop.kind != "permission"
            if interrupt is not None:
                phase = stop.phase
                parts.append(
                    (
                        stop.tool,
                        PartState.INTERRUPTED,
                        started,
                        None,
                        interrupt.reason,
                        interrupt.origin,
                        phase,
                    )
                )
            elif error is not None and started:
                parts.append((stop.tool, PartState.ERROR, started, error, None, None, None))
            elif error is not None:  # lost to the body's failure before the tool started: not run
                lost = (stop.tool, PartState.INTERRUPTED, started, error, None, "run_failed", stop.phase)
                parts.append(lost)
        run.ending = Ending(
            outcome=outcome,
            reason=interrupt.reason if interrupt else None,
            origin=interrupt.origin if interrupt else None,
            action_id=interrupt.action if interrupt else None,
            phase=phase,
            error=error,
            generation=run.generation,
            parts=tuple(parts),
        )
        self.endings.append(run)

    def interrupt(self, run: MRun, interrupt: Interrupt) -> None:
        self._end(run, Outcome.INTERRUPTED, interrupt=interrupt)

    def passed(
        self, run: MRun, part_state: PartState = PartState.COMPLETED, message: str | None = None
    ) -> None:
        """The body went past its stop (gate opened, ask answered) and on to the next one. A part
        that ends ``error`` here was declined: its tool never started."""
        stop = run.stop
        assert stop is not None
        if stop.tool is not None:
            started = part_state is not PartState.ERROR
            run.parts.append((stop.tool, part_state, started, message, None, None, None))
        run.at += 1
        self._advance(run)
        self.settle()

    def fault(self, run: MRun) -> None:
        self._end(run, Outcome.FAILED, error=fault_message(run.id, run.at))
        self.settle()

    def settle(self) -> None:
        while self.endings:
            self._finish(self.endings.popleft())

    def _finish(self, run: MRun) -> None:
        assert run.ending is not None
        was_active = run.state == ACTIVE
        run.finished, run.ending = run.ending, None
        run.state = FINISHED
        self.expect("run.finished", run_id=run.id)
        if not was_active:
            return
        assert run.generation is not None
        instance = self.dirs[run.directory].open[run.generation]
        instance.runs.discard(run.id)
        if not instance.live and not instance.runs:
            self._closed(instance)
        session = self.sessions[run.session]
        session.active = None
        if session.queue:
            self._activate(self.runs[session.queue.popleft()], session)
        elif session.busy:
            session.busy = False
            self.statuses[session.id].append(SessionStatus.IDLE)

    def cancel_queued(self, run: MRun, interrupt: Interrupt) -> None:
        self.sessions[run.session].queue.remove(run.id)
        self._end(run, Outcome.INTERRUPTED, interrupt=interrupt)
        self.settle()

    # -- instances and closes --

    def _closed(self, instance: MInstance) -> None:
        directory = self.dirs[instance.directory]
        del directory.open[instance.generation]
        self.closed_instances.append(instance.key)
        self.expect("instance.closed", directory=instance.directory, generation=instance.generation)
        deferred = self.deferred_loads.get(directory.name)
        if deferred is not None and not self.closed and directory.current is None:
            policy, mode = deferred
            moment = ReloadLoad.PREVIOUS_CLOSED
            if reload_loads(policy, mode, moment, open_generations=len(directory.open)):
                self.load(directory.name)
        for action_id in instance.closers:
            action = self.actions[action_id]
            action.awaiting.discard(instance.key)
            if not action.awaiting and not action.completed:
                self._complete(action)

    def _complete(self, action: MAction) -> None:
        action.completed = True
        self.expect("lifecycle.completed", action_id=action.id)

    def closing_directories(self) -> list[str]:
        """Directories with an instance that waits to close (a deferred close waits for its runs)."""
        return sorted({d for a in self.actions.values() if not a.completed for d, _ in a.awaiting})

    def loaded_directories(self) -> list[str]:
        return sorted(name for name, d in self.dirs.items() if d.open)

    def close_rejection(self, do: CloseAction, directory: str | None) -> type[SupervisorError] | None:
        if self.closed:
            return SupervisorClosed
        if do in ONE_DIRECTORY:
            if directory is None:
                return InvalidRequest
            if directory not in self.dirs:
                return UnknownDirectory
        return None

    def _apply_rule(
        self, action: MAction, names: list[str], origin: str
    ) -> tuple[list[str], list[str], set[str], set[str]]:
        """What the close's rule (``CLOSE_RULES[mode]``) says happens to the directories it names:
        if the rule interrupts, every run that is undecided there is interrupted with the rule's
        reason; every open instance there is retired; one that holds no run closes now, the others
        hold the action until their runs have finished. Predicted as sets, from the rule alone."""
        rule = CLOSE_RULES[action.mode]
        instances = [i for name in names for i in self.dirs[name].open.values()]
        held = {run_id for instance in instances for run_id in instance.runs}
        undecided = {run_id for run_id in held if self.runs[run_id].ending is None}
        interrupted = undecided if rule.interrupts_with is not None else set()
        pending = sorted({instance.directory for instance in instances if instance.runs})
        done = sorted(set(names) - set(pending))
        if rule.interrupts_with is not None:
            interrupt = Interrupt(rule.interrupts_with, origin, action.id)
            for run_id in sorted(interrupted):
                self.interrupt(self.runs[run_id], interrupt)
        for instance in instances:
            instance.live = False
            directory = self.dirs[instance.directory]
            if directory.current == instance.generation:
                directory.current = None
            if instance.runs:
                instance.closers.append(action.id)
                action.awaiting.add(instance.key)
            else:
                self._closed(instance)
        action.blocking_at_request = frozenset(held)
        return done, pending, held, interrupted

    def close(
        self,
        do: CloseAction,
        mode: CloseMode,
        origin: str,
        directory: str | None,
        action_id: str,
        policy: ReloadPolicy = CONFIG.reload_policy,
    ) -> Expected:
        assert not CLOSE_RULES[mode].covers_everything
        names = [directory] if do in ONE_DIRECTORY and directory else self.loaded_directories()
        action = self.actions[action_id] = MAction(action_id, do, mode, CloseResult.COMPLETED)
        for name in names:  # a close replaces a load a lazy reload deferred there
            self.deferred_loads.pop(name, None)
        at_once = do is CloseAction.RELOAD and reload_loads(
            policy, mode, ReloadLoad.AT_REQUEST, open_generations=len(self.dirs[names[0]].open)
        )
        if do is CloseAction.RELOAD and not at_once:
            self.deferred_loads[names[0]] = (policy, mode)  # loads as the old generation closes
        closed_before = len(self.closed_instances)
        done, pending, blocking, interrupted = self._apply_rule(action, names, origin)
        disposed_at_once = len(self.closed_instances) > closed_before
        if at_once:
            self.load(names[0])
        if interrupted:
            action.result = CloseResult.INTERRUPTED
        elif pending:
            action.result = CloseResult.DEFERRED
            self.expect("lifecycle.deferred", action_id=action_id)
        if not action.awaiting:
            self._complete(action)
        completed_now = None if interrupted and disposed_at_once else action.completed
        self.expect("action.result", action_id=action_id)
        self.settle()
        return Expected.of_rule(action.result, completed_now, done, pending, blocking, interrupted)

    def shutdown(self, reason: InterruptReason, origin: str, action_id: str) -> Expected:
        mode = CloseMode(reason.value)
        rule = CLOSE_RULES[mode]
        assert rule.covers_everything and rule.interrupts_with is reason
        names = self.loaded_directories()
        self.deferred_loads.clear()  # the shutdown cancels every deferred load
        for other in self.actions.values():
            if not other.completed:
                other.superseded_by = action_id
        self.shutdown_id = action_id
        action = self.actions[action_id] = MAction(
            action_id, CloseAction(reason.value), mode, CloseResult.FORCED
        )
        # Covering everything: the queued runs end without starting, then the rule applies everywhere.
        for session in self.sessions.values():
            while session.queue:
                run = self.runs[session.queue.popleft()]
                self._end(run, Outcome.INTERRUPTED, interrupt=Interrupt(reason, origin, action_id))
        self.settle()
        done, pending, blocking, interrupted = self._apply_rule(action, names, origin)
        if not action.awaiting:
            self._complete(action)
        self.settle()
        assert action.completed, "the model's shutdown did not complete"
        return Expected.of_rule(CloseResult.FORCED, True, done, pending, blocking, interrupted)

    # -- user decisions --

    def rejection(self, run_id: str, ask: str | None) -> type[SupervisorError] | None:
        """Why a cancel (``ask`` None) or an answer to ``ask`` on this run is rejected, if it is."""
        if self.closed:
            return SupervisorClosed
        run = self.runs.get(run_id)
        if run is None:
            return UnknownRun
        if run.state == FINISHED:
            return RunAlreadyFinished
        if ask is not None and run.waiting != ask:
            return NothingPending
        return None


# --- the state machine ------------------------------------------------------------------------------

PLANS = st.lists(st.sampled_from(STOPS), max_size=3).map(tuple)
ENDS = st.sampled_from(["return", "return", "raise"])
DECISIONS = ("approve", "reject", "reject_with_message", "answer", "dismiss")
ALLOWED_REASONS = {
    InterruptReason.USER_CANCEL,
    InterruptReason.PERMISSION_REJECTED,
    InterruptReason.FORM_DISMISSED,
    InterruptReason.LIFECYCLE_INTERRUPT,
    InterruptReason.SHUTDOWN,
    InterruptReason.TEST_TEARDOWN,
}


class SupervisorMachine(RuleBasedStateMachine):
    """Rules drive the real supervisor; each rule applies the same input to the model and then
    waits until the system has done what the model says. Invariants compare the two."""

    def __init__(self) -> None:
        super().__init__()
        self.actors_before = set(pykka.ActorRegistry.get_all())
        self.hooks = RecordingHooks()
        self.sup = Supervisor.start(CONFIG, hooks=self.hooks)
        self.log = EventLog(self.sup)
        self.model = Model()
        self.checker = InvariantChecker()
        """The one oracle: every event, every request and its answer (``run_supervisor.protocol.testing``)."""
        self.fed = 0
        self.run_count = 0
        self.requests = 0
        self.answers = 0
        self.outcomes: dict[str, CloseOutcome] = {}
        self.waited: set[str] = set()
        self.broken = False

    # -- plumbing --

    @contextmanager
    def _checked(self) -> Iterator[None]:
        """Marks the example broken if the block fails, so teardown only cleans up."""
        try:
            yield
        except BaseException:
            self.broken = True
            raise

    def _request(
        self, call: Callable[[], Any], rejected: type[SupervisorError] | None, request: Request
    ) -> Any:
        """Make one request through the facade: it must answer exactly once, as the model says.
        ``request`` is what the facade sends; it and the answer go to the checker."""
        self.requests += 1
        token = f"k{self.requests}"
        self.checker.request(token, request)
        try:
            value = call()
        except SupervisorError as exc:
            self.answers += 1
            closing = isinstance(request, CloseRequest | Shutdown)
            rejection: CloseOutcome | RequestOutcome = (
                CloseOutcome(result=CloseResult.REJECTED, error=str(exc), code=exc.code)
                if closing
                else RequestOutcome(result=RequestResult.REJECTED, error=str(exc), code=exc.code)
            )
            self.checker.answer(token, rejection)
            assert rejected is not None, f"unexpected rejection {exc!r}"
            assert type(exc) is rejected, f"rejected with {exc!r}, the model expected {rejected.__name__}"
            return None
        self.answers += 1
        self.checker.answer(
            token, value if isinstance(value, CloseOutcome) else RequestOutcome(result=RequestResult.OK)
        )
        assert rejected is None, f"accepted ({value!r}), the model expected {rejected.__name__}"
        return value

    def _submit(self, request: Request) -> CloseOutcome | RequestOutcome:
        """Send a raw request (no facade), tell the checker; the answer."""
        self.requests += 1
        token = f"k{self.requests}"
        self.checker.request(token, request)
        answer = self.sup.submit(request).result(timeout=WAIT_S)
        self.answers += 1
        self.checker.answer(token, answer)
        return answer

    def _feed(self) -> None:
        """Give the checker every event published since it last looked."""
        events = self.log.collect()
        for event in events[self.fed :]:
            self.checker.event(event)
        self.fed = len(events)

    def _sync(self) -> None:
        """Wait (bounded) for every event the model expects, then let a query pass through the
        supervisor's mailbox, so everything it decided so far has been published."""
        waits, self.model.waits = self.model.waits, []
        for kind, fields in waits:
            self.log.wait_for(kind, timeout=WAIT_S, **fields)
        if self.model.closed:
            return
        self.sup.statistics(timeout=WAIT_S)
        # A finished run's handle answers with what run.finished said.
        for run in self.model.runs.values():
            if run.finished is not None and run.handle is not None and run.id not in self.waited:
                self.waited.add(run.id)
                snapshot = run.handle.wait(timeout=WAIT_S)
                assert Ending.of(snapshot) == run.finished, snapshot

    def _ids(self, keep: Callable[[MRun], bool]) -> list[str]:
        return [run.id for run in self.model.runs.values() if keep(run)]

    def _draw_run(self, data: st.DataObject, keep: Callable[[MRun], bool]) -> MRun:
        return self.model.runs[data.draw(st.sampled_from(self._ids(keep)), label="run")]

    def _any_run_id(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from([*self.model.runs, "ghost"]), label="run")

    # -- rules --

    @initialize(
        loaded=st.lists(st.sampled_from(DIRECTORIES), unique=True),
        declared=st.sets(st.sampled_from(DIRECTORIES)),
    )
    def preload(self, loaded: list[str], declared: set[str]) -> None:
        """Some directories are loaded (generation 1) before anything starts, some only declared."""
        with self._checked():
            self.sup.load(*loaded)
            for name in loaded:
                self.model.load(name)
            rest = sorted(declared - set(loaded))
            self.sup.declare(*rest)
            for name in rest:
                self.model.declare(name)
            self._sync()

    @rule(session=st.sampled_from(SESSIONS), directory=st.sampled_from(DIRECTORIES), plan=PLANS, end=ENDS)
    def start_run(self, session: str, directory: str, plan: tuple[Stop, ...], end: str) -> None:
        with self._checked():
            self._start(session, directory, plan, end)

    @precondition(lambda self: not self.model.closed and self.model.closing_directories())
    @rule(data=st.data(), session=st.sampled_from(SESSIONS), plan=PLANS, end=ENDS)
    def start_where_a_close_waits(
        self, data: st.DataObject, session: str, plan: tuple[Stop, ...], end: str
    ) -> None:
        """A run started in a directory whose instance waits to close gets a fresh generation at
        once and never delays that close."""
        with self._checked():
            directory = data.draw(st.sampled_from(self.model.closing_directories()), label="directory")
            self._start(session, directory, plan, end)

    def _start(self, session: str, directory: str, plan: tuple[Stop, ...], end: str) -> None:
        self.run_count += 1
        run = MRun(f"r{self.run_count}", session, directory, plan, end, Control(len(plan)))
        body = make_body(plan, end, run.control)
        rejected = SupervisorClosed if self.model.closed else None
        run.handle = self._request(
            lambda: self.sup.start_run(body, session=session, directory=directory, run_id=run.id),
            rejected,
            StartRun(run_id=run.id, session=session, directory=directory),
        )
        if run.handle is not None:
            self.model.start(run)
        self._sync()

    @_SOME_RUN_AT_A_GATE
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """Open the gate a run holds at: it goes on to its next stop, or ends."""
        self._open_gate(data, fail=False)

    @_SOME_RUN_AT_A_GATE
    @rule(data=st.data())
    def fault(self, data: st.DataObject) -> None:
        """A body raises where it holds: that run fails, nothing else is touched."""
        self._open_gate(data, fail=True)

    def _open_gate(self, data: st.DataObject, *, fail: bool) -> None:
        """Open the gate a drawn run holds at; with ``fail`` its body raises there."""
        with self._checked():
            run = self._draw_run(data, _at_gate)
            if fail:
                run.control.fail_at = run.at
            run.control.gates[run.at].open()
            (self.model.fault if fail else self.model.passed)(run)
            self._sync()

    @precondition(lambda self: any(r.state != FINISHED for r in self.model.runs.values()))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        """The user cancels an active run (user_cancel) or a queued one (it ends unstarted)."""
        with self._checked():
            self._cancel(self._draw_run(data, lambda r: r.state != FINISHED).id)

    @precondition(lambda self: self.model.runs)
    @rule(data=st.data(), request=st.sampled_from(("start", "cancel", *DECISIONS)))
    def stray_request(self, data: st.DataObject, request: str) -> None:
        """Requests that are mostly rejected: a second start of a run id (ids are unique for the
        supervisor's life), a cancel of a finished or unknown run (it never reaches a later run of
        the session), a user decision on any run (mostly nothing is pending)."""
        with self._checked():
            if request == "start":
                run_id = data.draw(st.sampled_from(list(self.model.runs)), label="run")
                self._request(
                    lambda: self.sup.start_run(
                        lambda ctx: None, session="s1", directory="/w/a", run_id=run_id
                    ),
                    SupervisorClosed if self.model.closed else RunAlreadyExists,
                    StartRun(run_id=run_id, session="s1", directory="/w/a"),
                )
                self._sync()
            elif request == "cancel":
                finished = [r.id for r in self.model.runs.values() if r.state == FINISHED]
                self._cancel(data.draw(st.sampled_from([*finished, "ghost"]), label="run"))
            else:
                self._decide(self._any_run_id(data), request)

    def _cancel(self, run_id: str) -> None:
        rejected = self.model.rejection(run_id, None)
        self._request(lambda: self.sup.cancel(run_id), rejected, CancelRun(run_id=run_id))
        if rejected is None:
            run = self.model.runs[run_id]
            interrupt = Interrupt(InterruptReason.USER_CANCEL, "user", None)
            if run.state == QUEUED:
                self.model.cancel_queued(run, interrupt)
            else:
                self.model.interrupt(run, interrupt)
                self.model.settle()
        self._sync()

    @precondition(lambda self: any(r.waiting == "permission" for r in self.model.runs.values()))
    @rule(data=st.data(), decision=st.sampled_from(DECISIONS[:3]))
    def reply_permission(self, data: st.DataObject, decision: str) -> None:
        with self._checked():
            self._decide(self._draw_run(data, lambda r: r.waiting == "permission").id, decision)

    @precondition(lambda self: any(r.waiting == "form" for r in self.model.runs.values()))
    @rule(data=st.data(), decision=st.sampled_from(DECISIONS[3:]))
    def answer_form(self, data: st.DataObject, decision: str) -> None:
        with self._checked():
            self._decide(self._draw_run(data, lambda r: r.waiting == "form").id, decision)

    def _decide(self, run_id: str, decision: str) -> None:
        ask = "form" if decision in ("answer", "dismiss") else "permission"
        rejected = self.model.rejection(run_id, ask)
        calls: dict[str, Callable[[], None]] = {
            "approve": lambda: self.sup.reply_permission(run_id=run_id, approve=True),
            "reject": lambda: self.sup.reply_permission(run_id=run_id, approve=False),
            "reject_with_message": lambda: self.sup.reply_permission(
                run_id=run_id, approve=False, message=f"not {run_id}"
            ),
            "answer": lambda: self.sup.answer_form(run_id=run_id, answer=f"answer to {run_id}"),
            "dismiss": lambda: self.sup.dismiss_form(run_id=run_id),
        }
        requests: dict[str, Request] = {
            "approve": ReplyPermission(run_id=run_id, approve=True),
            "reject": ReplyPermission(run_id=run_id, approve=False),
            "reject_with_message": ReplyPermission(run_id=run_id, approve=False, message=f"not {run_id}"),
            "answer": AnswerForm(run_id=run_id, answer=f"answer to {run_id}"),
            "dismiss": DismissForm(run_id=run_id),
        }
        self._request(calls[decision], rejected, requests[decision])
        if rejected is None:
            run = self.model.runs[run_id]
            if decision in ("approve", "answer"):
                self.model.passed(run)
            elif decision == "reject_with_message":
                self.model.passed(run, PartState.ERROR, f"not {run_id}")
            elif decision == "reject":
                self.model.interrupt(run, Interrupt(InterruptReason.PERMISSION_REJECTED, "permission", None))
                self.model.settle()
            else:
                self.model.interrupt(run, Interrupt(InterruptReason.FORM_DISMISSED, "form", None))
                self.model.settle()
        self._sync()

    @precondition(lambda self: any(r.at_gate or r.waiting for r in self.model.runs.values()))
    @rule(data=st.data())
    def advance(self, data: st.DataObject) -> None:
        """Let a held run go on the ordinary way: open its gate, approve its ask, answer its form."""
        with self._checked():
            run = self._draw_run(data, lambda r: r.at_gate or r.waiting is not None)
            if run.waiting is None:
                run.control.gates[run.at].open()
                self.model.passed(run)
                self._sync()
            else:
                self._decide(run.id, "approve" if run.waiting == "permission" else "answer")

    @precondition(lambda self: not self.model.closed and self.model.active_runs())
    @rule(data=st.data())
    def decide_twice(self, data: st.DataObject) -> None:
        """Two decisions on one run, sent back to back: the first reason wins, the second is
        rejected (already interrupting, or already finished), and the first one's tag names the
        interrupt's action."""
        with self._checked():
            run = self._draw_run(data, lambda r: r.state == ACTIVE)
            first: CancelRun | ReplyPermission | DismissForm
            if run.waiting == "permission":
                first = ReplyPermission(run_id=run.id, approve=False, tag="first")
                interrupt = Interrupt(InterruptReason.PERMISSION_REJECTED, "permission", "first")
            elif run.waiting == "form":
                first = DismissForm(run_id=run.id, tag="first")
                interrupt = Interrupt(InterruptReason.FORM_DISMISSED, "form", "first")
            else:
                first = CancelRun(run_id=run.id, tag="first")
                interrupt = Interrupt(InterruptReason.USER_CANCEL, "user", "first")
            second = CancelRun(run_id=run.id, origin="user.again", tag="second")
            self.checker.request(f"k{self.requests + 1}", first)
            self.checker.request(f"k{self.requests + 2}", second)
            one, two = self.sup.submit(first), self.sup.submit(second)
            answers = (one.result(timeout=WAIT_S), two.result(timeout=WAIT_S))
            self.checker.answer(f"k{self.requests + 1}", answers[0])
            self.checker.answer(f"k{self.requests + 2}", answers[1])
            self.requests += 2
            self.answers += 2
            assert answers[0].result is RequestResult.OK, answers[0]
            assert answers[1].result is RequestResult.REJECTED, answers[1]
            assert answers[1].code in (RejectCode.ALREADY_INTERRUPTING, RejectCode.RUN_FINISHED), answers[1]
            self.model.interrupt(run, interrupt)
            self.model.settle()
            self._sync()

    @precondition(lambda self: self.model.runs or not self.model.actions)
    @rule(
        do=st.sampled_from(CLOSES),
        mode=st.sampled_from(MODES),
        directory=st.sampled_from((*DIRECTORIES, NEVER_SEEN, None)),
    )
    def close(self, do: CloseAction, mode: CloseMode, directory: str | None) -> None:
        """A lifecycle close. ``directory`` is ignored by dispose_all and invalidate_config."""
        with self._checked():
            self._close(do, mode, directory)

    @precondition(lambda self: not self.model.closed and self.model.loaded_directories())
    @rule(
        data=st.data(),
        mode=st.sampled_from(MODES),
        policy=st.sampled_from((None, ReloadPolicy.LAZY, ReloadPolicy.EAGER)),
    )
    def reload(self, data: st.DataObject, mode: CloseMode, policy: ReloadPolicy | None) -> None:
        """A reload of a loaded directory with its own policy (or the config's, lazy): a lazy one
        loads the next generation when a run needs it or the old one has closed."""
        with self._checked():
            directory = data.draw(st.sampled_from(self.model.loaded_directories()), label="directory")
            self._close(CloseAction.RELOAD, mode, directory, policy)

    @precondition(lambda self: not self.model.closed and self.model.active_runs())
    @rule(data=st.data(), do=st.sampled_from(CLOSES), mode=st.sampled_from(MODES))
    def close_where_runs_are(self, data: st.DataObject, do: CloseAction, mode: CloseMode) -> None:
        """A close of a directory with active runs: deferred in maintenance (the runs go on
        untouched), interrupted when the user confirmed it."""
        with self._checked():
            busy = sorted({r.directory for r in self.model.active_runs()})
            self._close(do, mode, data.draw(st.sampled_from(busy), label="directory"))

    def _close(
        self, do: CloseAction, mode: CloseMode, directory: str | None, policy: ReloadPolicy | None = None
    ) -> None:
        origin = f"test.{do.value}"
        rejected = self.model.close_rejection(do, directory)
        outcome = self._request(
            lambda: self.sup.close(do, mode=mode, origin=origin, directory=directory, reload_policy=policy),
            rejected,
            CloseRequest(
                do=do,
                mode=mode,
                origin=origin,
                directories=(directory,) if directory else (),
                reload_policy=policy,
            ),
        )
        if outcome is not None:
            assert outcome.action_id and outcome.action_id not in self.outcomes, outcome
            self.outcomes[outcome.action_id] = outcome
            in_force = CONFIG.reload_policy if policy is None else policy
            expected = self.model.close(do, mode, origin, directory, outcome.action_id, in_force)
            expected.check(outcome)
        self._sync()

    @precondition(lambda self: not self.model.closed and len(self.model.runs) >= 3)
    @rule(reason=st.sampled_from([InterruptReason.SHUTDOWN, InterruptReason.TEST_TEARDOWN]))
    def shutdown(self, reason: InterruptReason) -> None:
        """Shut down (or tear down) mid-sequence; afterwards every request is rejected. (Teardown
        shuts down every example that did not.) Only once a few runs exist, so that most
        sequences have something to do first."""
        with self._checked():
            self._shutdown(reason)

    def _shutdown(self, reason: InterruptReason) -> None:
        first = self.model.shutdown_outcome
        outcome = self._request(
            lambda: self.sup.shutdown(grace_ms=GRACE_MS, reason=reason),
            None,
            Shutdown(reason=reason, grace_ms=GRACE_MS),
        )
        if first is not None:
            # A second shutdown is never rejected: it gets the first one's outcome.
            assert outcome == first, (outcome, first)
            return
        assert outcome.action_id and outcome.action_id not in self.outcomes, outcome
        self.outcomes[outcome.action_id] = outcome
        self.model.shutdown_outcome = outcome
        expected = self.model.shutdown(reason, reason.value, outcome.action_id)
        expected.check(outcome)
        assert outcome.abandoned_runs == (), f"cooperative bodies were abandoned: {outcome.abandoned_runs}"
        assert self.sup.closed
        self._sync()
        self._nothing_left()

    @precondition(lambda self: self.model.closed)
    @rule(
        data=st.data(),
        request=st.sampled_from(["start", "cancel", "close", "reply", "answer", "dismiss", "shutdown"]),
    )
    def request_after_shutdown(self, data: st.DataObject, request: str) -> None:
        """After shutdown every request is rejected (SupervisorClosed), except a second shutdown or
        teardown, which gets the first one's outcome."""
        with self._checked():
            if request == "shutdown":
                reason = data.draw(st.sampled_from([InterruptReason.SHUTDOWN, InterruptReason.TEST_TEARDOWN]))
                self._shutdown(reason)
                return
            run_id = self._any_run_id(data)
            calls: dict[str, Callable[[], Any]] = {
                "start": lambda: self.sup.start_run(lambda ctx: None, session="s1", directory="/w/a"),
                "cancel": lambda: self.sup.cancel(run_id),
                "close": lambda: self.sup.close("dispose_all", mode="maintenance", origin="late"),
                "reply": lambda: self.sup.reply_permission(run_id=run_id, approve=True),
                "answer": lambda: self.sup.answer_form(run_id=run_id, answer="late"),
                "dismiss": lambda: self.sup.dismiss_form(run_id=run_id),
            }
            late: dict[str, Request] = {
                "start": StartRun(run_id="(generated)", session="s1", directory="/w/a"),
                "cancel": CancelRun(run_id=run_id),
                "close": CloseRequest(do=CloseAction.DISPOSE_ALL, mode=CloseMode.MAINTENANCE, origin="late"),
                "reply": ReplyPermission(run_id=run_id, approve=True),
                "answer": AnswerForm(run_id=run_id, answer="late"),
                "dismiss": DismissForm(run_id=run_id),
            }
            self._request(calls[request], SupervisorClosed, late[request])

    def _nothing_left(self) -> None:
        assert self.sup.threads.alive() == [], f"threads left: {self.sup.threads.alive()}"
        ours = set(pykka.ActorRegistry.get_all()) - self.actors_before
        assert not ours, f"actors left: {ours}"

    # -- invariants --
    #
    # What holds of ANY supervisor (seq order, one run at a time per session, runs only on the live
    # generation, interrupts with an allowed cause, closes completing once and after the runs they
    # waited for, every request answered once...) is checked by the one oracle,
    # run_supervisor.protocol.testing.InvariantChecker. What follows compares the system with the
    # model's predictions.

    @invariant()
    def the_oracle_holds(self) -> None:
        with self._checked():
            self._feed()
            self.checker.assert_ok()
            assert self.answers == self.requests

    @invariant()
    def every_close_is_published_with_the_result_it_was_answered(self) -> None:
        with self._checked():
            results = Counter(e.action_id for e in self.log.of("action.result"))
            for action_id, outcome in self.outcomes.items():
                assert results[action_id] == 1, f"{action_id}: {results[action_id]} action.result events"
                [event] = self.log.of("action.result", action_id=action_id)
                assert isinstance(event, ActionResult) and event.result is outcome.result

    @invariant()
    def runs_start_and_finish_as_the_model_says(self) -> None:
        with self._checked():
            events = self.log.collect()
            runs = self.model.runs.values()
            started = {e.run_id for e in events if isinstance(e, RunStarted)}
            finished = {e.run_id for e in events if isinstance(e, RunFinished)}
            assert started == {r.id for r in runs if r.generation is not None}
            assert finished == {r.id for r in runs if r.state == FINISHED}
            assert started - finished == {r.id for r in runs if r.state == ACTIVE}
            assert {e.run_id for e in events if isinstance(e, RunQueued)} == self.model.queued_ever
            for event in events:
                if isinstance(event, RunStarted):
                    run = self.model.runs[event.run_id]
                    assert (event.session, event.directory, event.generation) == (
                        run.session,
                        run.directory,
                        run.generation,
                    ), (event, run)
                elif isinstance(event, RunFinished):
                    expected = self.model.runs[event.run_id].finished
                    assert not event.abandoned, event
                    assert Ending.of(event) == expected, (
                        f"{event.run_id} ended {Ending.of(event)}, not {expected}"
                    )

    @invariant()
    def instances_start_and_close_as_the_model_says(self) -> None:
        """The model's generations are the system's, and the hooks saw exactly the instances the
        events name; no dispose hook failed."""
        with self._checked():
            events = self.log.collect()
            started = [(e.directory, e.generation) for e in events if isinstance(e, InstanceStarted)]
            closed = [e for e in events if isinstance(e, InstanceClosed)]
            assert all(e.error is None for e in closed), closed
            assert sorted(self.model.started_instances) == sorted(started)
            assert sorted(self.model.closed_instances) == sorted((e.directory, e.generation) for e in closed)
            assert sorted(self.hooks.disposed) == sorted(self.model.closed_instances)
            expected = sorted(self.model.started_instances)
            assert self.hooks.loaded_by_now(expected) == expected

    @invariant()
    def closes_complete_as_the_model_says(self) -> None:
        """The model predicts which closes completed, were deferred or superseded, and what each
        pending one waits for, now."""
        with self._checked():
            events = self.log.collect()
            completed = {e.action_id: e for e in events if isinstance(e, LifecycleCompleted)}
            assert set(completed) == {a.id for a in self.model.actions.values() if a.completed}
            deferred = {e.action_id for e in events if isinstance(e, LifecycleDeferred)}
            model_deferred = {a.id for a in self.model.actions.values() if a.result is CloseResult.DEFERRED}
            assert deferred == model_deferred
            for action_id, event in completed.items():
                action = self.model.actions[action_id]
                assert event.superseded_by == action.superseded_by, (event, action)
                assert event.error is None and event.abandoned_runs == (), event
            if self.model.closed:
                return
            pending = {p.action_id: p for p in self.sup.pending_actions(timeout=WAIT_S)}
            assert set(pending) == {a.id for a in self.model.actions.values() if not a.completed}
            for action_id, snapshot in pending.items():
                action = self.model.actions[action_id]
                waits_for = sorted(
                    run_id
                    for name, generation in action.awaiting
                    for run_id in self.model.dirs[name].open[generation].runs
                )
                assert snapshot.result is action.result, snapshot
                assert snapshot.pending_directories == tuple(sorted({d for d, _ in action.awaiting})), (
                    snapshot
                )
                assert list(snapshot.blocking_runs) == waits_for, (snapshot, waits_for)

    @invariant()
    def sessions_are_as_the_model_says(self) -> None:
        with self._checked():
            events = self.log.collect()
            for session in SESSIONS:
                statuses = [
                    e.status for e in events if isinstance(e, SessionStatusChanged) and e.session == session
                ]
                assert statuses == self.model.statuses[session], (session, statuses)
            if self.model.closed:
                return
            for session in SESSIONS:
                snapshot = self.sup.session(session, timeout=WAIT_S)
                model = self.model.sessions[session]
                if snapshot is None:
                    assert not self.model.statuses[session] and not model.queue, session
                    continue
                status = SessionStatus.BUSY if model.busy else SessionStatus.IDLE
                assert (snapshot.status, snapshot.active, snapshot.queued) == (
                    status,
                    model.active,
                    tuple(model.queue),
                ), (snapshot, model)

    @invariant()
    def statistics_agree_with_the_model(self) -> None:
        with self._checked():
            if self.model.closed:
                self._nothing_left()
                return
            stats = self.sup.statistics(timeout=WAIT_S)
            runs = list(self.model.runs.values())
            assert (
                stats.runs_active,
                stats.runs_queued,
                stats.runs_finished,
                stats.sessions_busy,
                stats.instances_open,
                stats.actions_pending,
            ) == (
                sum(r.state == ACTIVE for r in runs),
                sum(r.state == QUEUED for r in runs),
                sum(r.state == FINISHED for r in runs),
                sum(s.busy for s in self.model.sessions.values()),
                sum(len(d.open) for d in self.model.dirs.values()),
                sum(not a.completed for a in self.model.actions.values()),
            ), stats

    # -- the end --

    def teardown(self) -> None:
        try:
            if not self.broken:
                if not self.model.closed:
                    self._shutdown(InterruptReason.TEST_TEARDOWN)
                self._after_the_end()
        finally:
            if not self.sup.closed:
                try:
                    self.sup.shutdown(grace_ms=GRACE_MS, reason="test_teardown")
                except Exception:  # the example already failed; clean up what can be
                    pass
            self.log.close()

    def _after_the_end(self) -> None:
        # Every check once more, on the complete event stream; the oracle checks that it ended.
        self._feed()
        self.checker.finish()
        self.every_close_is_published_with_the_result_it_was_answered()
        self.runs_start_and_finish_as_the_model_says()
        self.instances_start_and_close_as_the_model_says()
        self.closes_complete_as_the_model_says()
        self.sessions_are_as_the_model_says()
        assert all(r.state == FINISHED for r in self.model.runs.values())
        assert all(a.completed for a in self.model.actions.values())
        for session in SESSIONS:
            statuses = self.model.statuses[session]
            assert not statuses or statuses[-1] is SessionStatus.IDLE, (session, statuses)
        for run in self.model.runs.values():
            assert run.finished is not None
        self._nothing_left()
        # Every later request is rejected; a second shutdown gets the first one's outcome.
        rejected = [
            lambda: self.sup.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="late"),
            lambda: self.sup.cancel("r1"),
            lambda: self.sup.close("dispose_all", mode="maintenance", origin="late"),
            lambda: self.sup.close(
                "reload", mode="user_confirmed_interrupt", origin="late", directory="/w/a"
            ),
            lambda: self.sup.reply_permission(run_id="r1", approve=True),
            lambda: self.sup.answer_form(run_id="r1", answer="late"),
            lambda: self.sup.dismiss_form(run_id="r1"),
            self.sup.subscribe,
        ]
        for call in rejected:
            with pytest.raises(SupervisorClosed):
                call()
        raw = self.sup.submit(StartRun(run_id="late", session="s1", directory="/w/a")).result(timeout=WAIT_S)
        assert isinstance(raw, RequestOutcome) and raw.code is RejectCode.SUPERVISOR_CLOSED
        raw = self.sup.submit(
            CloseRequest(do=CloseAction.DISPOSE_ALL, mode=CloseMode.MAINTENANCE, origin="x")
        )
        assert raw.result(timeout=WAIT_S).code is RejectCode.SUPERVISOR_CLOSED
        again = self.sup.shutdown(grace_ms=GRACE_MS, reason="shutdown")
        assert again == self.model.shutdown_outcome
        self._nothing_left()


TestSupervisor = SupervisorMachine.TestCase
TestSupervisor.settings = PROFILE


# --- regressions ------------------------------------------------------------------------------------


def test_a_rejected_duplicate_start_leaves_no_body_behind_for_a_later_run() -> None:
    seen: list[str] = []
    config = SupervisorConfig(shutdown_at_exit=False, retain_finished_runs=1)
    sup = Supervisor.start(config, directories=["/w/a"])
    try:
        sup.start_run(lambda ctx: seen.append("first"), session="s1", directory="/w/a", run_id="r1").wait(2)
        with pytest.raises(RunAlreadyExists):
            sup.start_run(lambda ctx: seen.append("duplicate"), session="s1", directory="/w/a", run_id="r1")
        sup.start_run(lambda ctx: seen.append("other"), session="s1", directory="/w/a", run_id="r2").wait(2)
        # r1 is forgotten now (only one finished run is retained), so its id may be used again.
        reused = sup.start_run(lambda ctx: seen.append("reused"), session="s1", directory="/w/a", run_id="r1")
        assert reused.wait(2).outcome is Outcome.COMPLETED
    finally:
        sup.shutdown(grace_ms=GRACE_MS, reason="test_teardown")
    assert seen == ["first", "other", "reused"]


@pytest.mark.parametrize("directories", [[], ["/w/a"]], ids=["nothing loaded", "an idle instance"])
def test_a_shutdown_with_no_active_run_publishes_its_action_result(directories: list[str]) -> None:
    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=directories)
    log = EventLog(sup)
    outcome = sup.shutdown(grace_ms=GRACE_MS)
    assert outcome.result is CloseResult.FORCED and outcome.completed
    types = log.types()
    assert types[-2:] == ["lifecycle.completed", "action.result"], types
    assert log.of("action.result", action_id=outcome.action_id, result=CloseResult.FORCED)
