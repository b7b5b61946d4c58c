#!/usr/bin/env python3
"""Soak: many random runs against ONE long-lived supervisor, checked online.

One ``Supervisor`` (the in-process API) lives for the whole soak. A seeded driver starts runs over many
directories and sessions, and meanwhile cancels them, answers their permission asks and forms (approve,
reject with or without a message, answer, dismiss), closes directories in every mode (``dispose``,
``dispose_all``, ``reload``, ``invalidate_config`` x ``maintenance``, ``user_confirmed_interrupt``) and
finally shuts down (``shutdown`` or ``test_teardown``, and a second one that joins the first). Some bodies
raise, some ignore their cancellation for a while, some tools fail, some dispose hooks raise or overrun.

The event stream is checked as it comes by the one oracle,
``run_supervisor.protocol.testing.InvariantChecker`` (and :class:`Tracker` checks what only the driver
knows), and so is every answer
the driver gets: a rejection is fine only where a race allows it (``RunAlreadyFinished`` for a run that
just ended, ``AlreadyInterrupting`` for a second interrupt...). After the final shutdown no thread the
supervisor started may be alive.

    python scripts/soak.py --quick              # CI: 1000 runs over 8 directories, about 20 s
    python scripts/soak.py --runs 2000 --directories 12 --seed 7 --json

Exit status 1 when an invariant was violated or a thread leaked, else 0.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from run_supervisor.actors import (
    AlreadyInterrupting,
    NothingPending,
    RunAlreadyExists,
    RunAlreadyFinished,
    RunContext,
    Supervisor,
    SupervisorConfig,
    SupervisorError,
    UnknownRun,
)
from run_supervisor.protocol import (
    CloseAction,
    CloseOutcome,
    CloseResult,
    Event,
    InstanceClosed,
    InstanceStarted,
    InterruptReason,
    LifecycleRequested,
    Outcome,
    RequestOutcome,
    RunFinished,
    RunQueued,
    RunStarted,
    Shutdown,
    ShutdownReason,
    StepStarted,
)
from run_supervisor.protocol._rules import CLOSE_REQUEST_MODES, CLOSE_RULES
from run_supervisor.protocol.testing import ExpectedInterrupt, InvariantChecker, InvariantViolation

DEFAULT_SEED = 20240611
ASK_TIMEOUT_S = 30.0
"""A body waits this long for an answer; the driver answers long before (a timeout is a violation)."""
CALL_TIMEOUT_S = 10.0
"""Every call to the supervisor is bounded by this."""
DISPOSE_BUDGET_MS = 150
RETAIN_FINISHED = 10_000
CLOSES = (CloseAction.DISPOSE, CloseAction.DISPOSE_ALL, CloseAction.RELOAD, CloseAction.INVALIDATE_CONFIG)
CLOSE_WEIGHTS = (35, 15, 35, 15)
CLOSE_EVERY_S = 0.12
CANCEL_EVERY_S = 0.15
STRAY_EVERY_S = 0.25
"""Mean time between closes, cancels and stray requests (misdirected answers, duplicate starts)."""
THINK_S = (0.0, 0.0, 0.01, 0.05, 0.15, 0.4)
"""How long the user takes to answer an ask."""
STEP_MS = (0, 5, 20, 50, 100, 250)
IGNORE_MS = (20, 60, 150, 300)
STRAGGLERS = 3
MODES = CLOSE_REQUEST_MODES
MODE_WEIGHTS = [30 if CLOSE_RULES[mode].interrupts_with else 70 for mode in MODES]
"""Most closes leave runs alone; fewer interrupt (``CLOSE_RULES``)."""
SHUTDOWN_REASONS = (ShutdownReason.SHUTDOWN, ShutdownReason.TEST_TEARDOWN)


class SoakFault(Exception):
    """What a faulty body raises."""


# ----------------------------------------------------------------------------------------------------
# What each run does


@dataclass(frozen=True, slots=True)
class StepPlan:
    kind: str
    """``model`` or ``tool`` (a tool part: tool_input, tool_exec, then its asks)."""
    ms: int
    asks: tuple[str, ...] = ()
    """``permission`` / ``form`` steps of a tool part, in order."""
    tool_error: bool = False
    fault: str | None = None
    """After the step: ``raise`` (the body raises) or ``ignore`` (a step that ignores cancellation)."""
    ignore_ms: int = 0


@dataclass(frozen=True, slots=True)
class RunPlan:
    steps: tuple[StepPlan, ...]

    @property
    def raises(self) -> bool:
        return any(step.fault == "raise" for step in self.steps)

    @property
    def asks(self) -> bool:
        return any(step.asks for step in self.steps)


def make_plan(rng: random.Random) -> RunPlan:
    count = rng.randint(1, 5)
    fault = rng.choices(["none", "raise", "ignore"], weights=[80, 7, 13])[0]
    fault_at = rng.randrange(count)
    steps = []
    for index in range(count):
        ms = rng.choice(STEP_MS)
        step_fault = fault if fault != "none" and index == fault_at else None
        ignore_ms = rng.choice(IGNORE_MS) if step_fault == "ignore" else 0
        if rng.random() < 0.45:
            asks = rng.choices(
                [(), ("permission",), ("form",), ("permission", "form")], weights=[55, 25, 15, 5]
            )[0]
            steps.append(
                StepPlan(
                    "tool",
                    ms,
                    asks=asks,
                    tool_error=rng.random() < 0.1,
                    fault=step_fault,
                    ignore_ms=ignore_ms,
                )
            )
        else:
            steps.append(StepPlan("model", ms, fault=step_fault, ignore_ms=ignore_ms))
    return RunPlan(tuple(steps))


class AskBoard:
    """Runs waiting for the user: a body posts here right after its ask reached the supervisor."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asks: dict[str, tuple[str, int]] = {}
        self._serial = 0

    def post(self, run: str, kind: str) -> None:
        with self._lock:
            self._serial += 1
            self._asks[run] = (kind, self._serial)

    def take(self, run: str, serial: int) -> str | None:
        """The ask's kind, once: None when it was taken already or replaced by a later ask."""
        with self._lock:
            kind, posted = self._asks.get(run, ("", -1))
            if posted != serial:
                return None
            del self._asks[run]
            return kind

    def peek(self) -> dict[str, tuple[str, int]]:
        with self._lock:
            return dict(self._asks)


class Notes:
    """What bodies saw, for the checker: the instance each run was given, and any surprise."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.instances: dict[str, tuple[str, int, Any]] = {}
        self.surprises: list[str] = []

    def saw(self, run: str, directory: str, generation: int, cache: Any) -> None:
        with self._lock:
            self.instances[run] = (directory, generation, cache)

    def surprise(self, text: str) -> None:
        with self._lock:
            self.surprises.append(text)


def make_body(plan: RunPlan, board: AskBoard, notes: Notes) -> Callable[[RunContext], None]:
    def body(ctx: RunContext) -> None:
        notes.saw(ctx.run_id, ctx.directory, ctx.generation, ctx.instance())
        for index, step in enumerate(plan.steps):
            if step.kind == "model":
                with ctx.step("model"):
                    ctx.sleep(step.ms / 1000)
            else:
                call = ctx.tool("bash")
                with ctx.step("tool_input"):
                    ctx.sleep(step.ms / 2000)
                call.prepared()
                call.running()
                with ctx.step("tool_exec"):
                    ctx.sleep(step.ms / 2000)
                for ask in step.asks:
                    with ctx.step(ask, call=call):
                        pending = call.open_form() if ask == "form" else call.open_permission()
                        board.post(ctx.run_id, ask)  # after the ask reached the supervisor's mailbox
                        pending.wait(ASK_TIMEOUT_S)
                if step.tool_error:
                    call.failed("exit status 1")
                else:
                    call.completed()
            if step.fault == "ignore":
                with ctx.step("model"):
                    time.sleep(step.ignore_ms / 1000)  # a misbehaving body: its token is not looked at
            elif step.fault == "raise":
                raise SoakFault(f"the body of {ctx.run_id} raised at step {index}")

    return body


class SoakHooks:
    """Instance hooks: each load builds a small cache; some disposes raise, some overrun their budget."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self.lock = threading.Lock()
        self.dispose_faults: Counter[str] = Counter()

    def load(self, directory: str, generation: int) -> Any:
        return {"directory": directory, "generation": generation}

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        rng = random.Random(f"{self._seed}/{directory}/{generation}")
        roll = rng.random()
        if roll < 0.05:
            with self.lock:
                self.dispose_faults["raises"] += 1
            raise RuntimeError(f"watcher of {directory} crashed")
        if roll < 0.08:
            with self.lock:
                self.dispose_faults["overruns"] += 1
            time.sleep(DISPOSE_BUDGET_MS * 1.5 / 1000)
        elif roll < 0.3:
            time.sleep(rng.choice([1, 5, 20]) / 1000)


# ----------------------------------------------------------------------------------------------------
# The invariants, checked on the event stream


@dataclass(slots=True)
class RunRecord:
    id: str
    session: str
    directory: str
    plan: RunPlan
    state: str = "submitted"
    """submitted -> queued -> active -> finished (or submitted -> active)."""
    generation: int | None = None
    interrupt: ExpectedInterrupt | None = None
    finished: RunFinished | None = None
    finish_count: int = 0


@dataclass(slots=True)
class LifecycleRecord:
    tag: str
    do: str
    mode: str
    action_id: str | None = None


class Tracker:
    """Follows the event stream for the driver, and checks what only the driver can know.

    Every invariant that holds of any supervisor (``seq``, sessions one run at a time and first in
    first out, runs only on their directory's live generation, instances closing once after their
    runs, every lifecycle request completing once after the runs there at its request, interrupts
    with an allowed cause, shutdown ending everything...) is checked by the one oracle,
    ``run_supervisor.protocol.testing.InvariantChecker`` (``oracle``), fed the same events. What is
    checked here needs the driver's knowledge: a run finishes ``interrupted`` exactly when the driver
    got an interrupt of it accepted (or shutdown reached it), with that interrupt's reason, origin and
    action; ``failed`` only when its body raised; every lifecycle event carries a tag the driver gave,
    echoing its action and mode.
    """

    def __init__(self) -> None:
        self.oracle = InvariantChecker()
        self.notes: list[str] = []
        self.events = 0
        self.runs: dict[str, RunRecord] = {}
        self.lifecycle: dict[str, LifecycleRecord] = {}  # by tag
        self.shutdown: ExpectedInterrupt | None = None
        self.outcomes: Counter[str] = Counter()
        self.instances_started = 0
        self.instance_errors = 0
        self.closed_instances: set[tuple[str, int]] = set()
        self.abandoned = 0
        self.queued = 0
        self.last_step: dict[str, str] = {}
        self.open_runs: dict[str, RunRecord] = {}
        self.finished_runs: list[RunRecord] = []

    @property
    def violations(self) -> list[str]:
        return [*self.oracle.violations, *self.notes]

    def violation(self, text: str) -> None:
        self.notes.append(text)

    # --- feeding -----------------------------------------------------------------------------

    def feed(self, event: Event) -> None:
        self.events += 1
        self.oracle.event(event)
        if isinstance(event, InstanceStarted):
            self.instances_started += 1
        elif isinstance(event, InstanceClosed):
            self.closed_instances.add((event.directory, event.generation))
            self.instance_errors += event.error is not None
        elif isinstance(event, RunQueued | RunStarted):
            run = self.runs.get(event.run_id)
            if run is None:
                self.violation(f"run {event.run_id} announced but the driver never started it")
                return
            self.queued += isinstance(event, RunQueued)
            run.state = "queued" if isinstance(event, RunQueued) else "active"
            if isinstance(event, RunStarted):
                run.generation = event.generation
            self.open_runs[run.id] = run
        elif isinstance(event, StepStarted):
            self.last_step[event.run_id] = event.step
        elif isinstance(event, RunFinished):
            self._run_finished(event)
        elif isinstance(event, LifecycleRequested):
            self._lifecycle_requested(event)

    def _run_finished(self, event: RunFinished) -> None:
        run = self.runs.get(event.run_id)
        if run is None or run.finished is not None:
            return  # the oracle says what is wrong with it
        run.state = "finished"
        run.finished = event
        self.open_runs.pop(run.id, None)
        self.finished_runs.append(run)
        self.abandoned += event.abandoned
        label = event.outcome.value if event.reason is None else f"{event.outcome.value}/{event.reason.value}"
        self.outcomes[label] += 1
        expected = run.interrupt
        if expected is None and self.shutdown is not None and event.outcome is Outcome.INTERRUPTED:
            expected = self.shutdown  # shutdown reaches every run no interrupt was decided for
        if expected is not None:
            got = (event.outcome, event.reason, event.origin, event.action_id)
            want = (Outcome.INTERRUPTED, expected.reason, expected.origin, expected.action)
            if got != want:
                self.violation(f"run {event.run_id} ended {got}; the interrupt decided for it was {want}")
            return
        if event.outcome is Outcome.INTERRUPTED:
            self.violation(
                f"run {event.run_id} was interrupted ({event.reason}, {event.origin}) "
                "but nothing interrupted it"
            )
        elif event.outcome is Outcome.FAILED and not (run.plan.raises and "raised" in (event.error or "")):
            self.violation(f"run {event.run_id} failed ({event.error!r}) although its body did not raise")
        elif event.outcome is Outcome.COMPLETED and run.plan.raises:
            self.violation(f"run {event.run_id} completed although its body raises")

    def _lifecycle_requested(self, event: LifecycleRequested) -> None:
        record = self.lifecycle.get(event.tag or "")
        if record is None:
            self.violation(
                f"lifecycle action {event.action_id} requested without a tag of ours ({event.tag})"
            )
            return
        record.action_id = event.action_id
        joined = event.do.value in ("shutdown", "test_teardown")  # a joining shutdown names the first
        if not joined and (event.mode.value != record.mode or event.do.value != record.do):
            self.violation(f"lifecycle request {record.tag} announced as {event.do}/{event.mode}")

    # --- the end -----------------------------------------------------------------------------

    def finish(self) -> None:
        for run in self.runs.values():
            if run.state not in ("finished", "rejected"):
                self.violation(f"run {run.id} never finished (last seen {run.state})")
        try:
            self.oracle.finish()
        except InvariantViolation:
            pass  # its violations are in self.violations


# ----------------------------------------------------------------------------------------------------
# The driver


@dataclass
class Options:
    seed: int
    runs: int
    directories: int
    sessions_per_directory: int
    max_active: int
    grace_ms: int
    time_limit_s: float
    json: bool = False


class Soak:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        self.board = AskBoard()
        self.notes = Notes()
        self.checker = Tracker()
        self.hooks = SoakHooks(options.seed)
        self.actions: Counter[str] = Counter()
        self.answers: Counter[str] = Counter()
        self.close_results: Counter[str] = Counter()
        self.directories = [f"/soak/d{index:02d}" for index in range(options.directories)]
        self.sessions = [
            (f"s{index:02d}-{k}", directory)
            for index, directory in enumerate(self.directories)
            for k in range(options.sessions_per_directory)
        ]
        self.started = 0
        self.tags = 0
        self.ghosts = 0
        self.statistics: dict[str, Any] = {}
        self.ask_due: dict[int, float] = {}
        self.next_close = self.next_cancel = self.next_stray = 0.0
        self.shutdown_outcome: CloseOutcome | None = None

    # --- helpers -----------------------------------------------------------------------------

    def violation(self, text: str) -> None:
        self.checker.violation(text)

    def tag(self) -> str:
        self.tags += 1
        return f"soak-{self.tags}"

    def call(self, name: str, fn: Callable[[], Any], expected: tuple[type[SupervisorError], ...]) -> Any:
        """Make a request; count its answer; a rejection outside ``expected`` is a violation."""
        self.actions[name] += 1
        try:
            result = fn()
        except expected as error:
            self.answers[f"{name}: {type(error).__name__}"] += 1
            return error
        except SupervisorError as error:
            self.answers[f"{name}: {type(error).__name__} (unexpected)"] += 1
            self.violation(f"{name}: unexpected {type(error).__name__}: {error}")
            return error
        self.answers[f"{name}: ok"] += 1
        return result

    def unfinished(self) -> list[RunRecord]:
        """Runs queued or active, as the events said so far."""
        return list(self.checker.open_runs.values())

    def finished(self) -> list[RunRecord]:
        return self.checker.finished_runs

    # --- actions -----------------------------------------------------------------------------

    def start_run(self, plan: RunPlan | None = None, session: str | None = None) -> str:
        home, directory = self.rng.choice(self.sessions)
        session = session or home
        if self.rng.random() < 0.3:  # a session's runs use another directory now and then
            directory = self.rng.choice(self.directories)
        plan = plan or make_plan(self.rng)
        self.started += 1
        run_id = f"run-{self.started:05d}"
        record = RunRecord(id=run_id, session=session, directory=directory, plan=plan)
        self.checker.runs[run_id] = record
        body = make_body(plan, self.board, self.notes)
        result = self.call(
            "start_run",
            lambda: self.supervisor.start_run(
                body, session=session, directory=directory, run_id=run_id, timeout=CALL_TIMEOUT_S
            ),
            (),
        )
        if isinstance(result, SupervisorError):
            record.state = "rejected"
        return run_id

    def start_a_duplicate(self) -> None:
        known = list(self.checker.runs)
        if not known:
            return
        run_id = self.rng.choice(known)
        session, directory = self.rng.choice(self.sessions)
        result = self.call(
            "start_run (duplicate id)",
            lambda: self.supervisor.start_run(
                make_body(RunPlan(()), self.board, self.notes),
                session=session,
                directory=directory,
                run_id=run_id,
                timeout=CALL_TIMEOUT_S,
            ),
            (RunAlreadyExists,),
        )
        if not isinstance(result, RunAlreadyExists):
            self.violation(f"a second start of {run_id} was not refused with RunAlreadyExists: {result!r}")

    def cancel(self) -> None:
        roll = self.rng.random()
        if roll < 0.8 and (candidates := self.unfinished()):
            run = self.rng.choice(candidates)
            expected: tuple[type[SupervisorError], ...] = (RunAlreadyFinished,)
            if run.interrupt is not None:
                expected = (AlreadyInterrupting, RunAlreadyFinished)
            origin = self.rng.choice(["user", "user.escape", "ui.stop-button"])
            result = self.call(
                "cancel",
                lambda: self.supervisor.cancel(run.id, origin=origin, timeout=CALL_TIMEOUT_S),
                expected,
            )
            if result is None:
                if run.interrupt is not None:
                    self.violation(f"a second interrupt of {run.id} was accepted")
                else:
                    run.interrupt = ExpectedInterrupt(InterruptReason.USER_CANCEL, origin, None)
        elif roll < 0.95 and (finished := self.finished()):
            run = self.rng.choice(finished)
            # Past retain_finished_runs the oldest finished runs are forgotten: then the id is unknown.
            forgotten = (UnknownRun,) if self.started > RETAIN_FINISHED else ()
            result = self.call(
                "cancel (finished run)",
                lambda: self.supervisor.cancel(run.id, timeout=CALL_TIMEOUT_S),
                (RunAlreadyFinished, *forgotten),
            )
            if not isinstance(result, RunAlreadyFinished | UnknownRun):
                self.violation(f"a cancel of the finished run {run.id} was not refused: {result!r}")
        else:
            self.ghosts += 1
            ghost = f"ghost-{self.ghosts}"
            result = self.call(
                "cancel (unknown run)",
                lambda: self.supervisor.cancel(ghost, timeout=CALL_TIMEOUT_S),
                (UnknownRun,),
            )
            if not isinstance(result, UnknownRun):
                self.violation(f"a cancel of the unknown run {ghost} was not refused with UnknownRun")

    def answer(self, run_id: str, kind: str) -> None:
        """Answer a run that is waiting for the user (the board says so)."""
        run = self.checker.runs[run_id]
        # Nothing else answers or interrupts behind our back: unless we interrupted the run, it waits.
        expected: tuple[type[SupervisorError], ...] = ()
        interrupted = run.interrupt is not None
        if interrupted:
            expected = (NothingPending, RunAlreadyFinished)
        roll = self.rng.random()
        interrupt: ExpectedInterrupt | None = None
        if kind == "permission":
            if roll < 0.5:
                name, call = (
                    "reply_permission approve",
                    lambda: self.supervisor.reply_permission(
                        run_id=run_id, approve=True, timeout=CALL_TIMEOUT_S
                    ),
                )
            elif roll < 0.75:
                name, call = (
                    "reply_permission reject+message",
                    lambda: self.supervisor.reply_permission(
                        run_id=run_id, approve=False, message="use rg, not grep", timeout=CALL_TIMEOUT_S
                    ),
                )
            else:
                name, call = (
                    "reply_permission reject",
                    lambda: self.supervisor.reply_permission(
                        run_id=run_id, approve=False, timeout=CALL_TIMEOUT_S
                    ),
                )
                interrupt = ExpectedInterrupt(InterruptReason.PERMISSION_REJECTED, "permission", None)
        elif roll < 0.7:
            name, call = (
                "answer_form",
                lambda: self.supervisor.answer_form(run_id=run_id, answer="yes", timeout=CALL_TIMEOUT_S),
            )
        else:
            name, call = (
                "dismiss_form",
                lambda: self.supervisor.dismiss_form(run_id=run_id, timeout=CALL_TIMEOUT_S),
            )
            interrupt = ExpectedInterrupt(InterruptReason.FORM_DISMISSED, "form", None)
        result = self.call(name, call, expected)
        if result is None and interrupted:
            self.violation(f"{name} of {run_id} was accepted although its interrupt was already decided")
        elif result is None and interrupt is not None:
            run.interrupt = interrupt

    def misdirected_answer(self) -> None:
        """An answer where none can be pending: the wrong kind, a run that never asks, or one that ended."""
        asking = self.board.peek()
        roll = self.rng.random()
        if roll < 0.4 and asking:
            run_id, (kind, _) = self.rng.choice(sorted(asking.items()))
            wrong = "answer_form" if kind == "permission" else "reply_permission"
            expected: tuple[type[SupervisorError], ...] = (NothingPending, RunAlreadyFinished)
        else:
            silent = [run for run in self.unfinished() if not run.plan.asks]
            pool = silent + self.finished()
            if not pool:
                return
            run_id = self.rng.choice(pool).id
            wrong = self.rng.choice(["answer_form", "reply_permission", "dismiss_form"])
            expected = (NothingPending, RunAlreadyFinished)
        calls = {
            "answer_form": lambda: self.supervisor.answer_form(
                run_id=run_id, answer="no", timeout=CALL_TIMEOUT_S
            ),
            "reply_permission": lambda: self.supervisor.reply_permission(
                run_id=run_id, approve=True, timeout=CALL_TIMEOUT_S
            ),
            "dismiss_form": lambda: self.supervisor.dismiss_form(run_id=run_id, timeout=CALL_TIMEOUT_S),
        }
        result = self.call(f"{wrong} (nothing pending)", calls[wrong], expected)
        if result is None:
            self.violation(f"{wrong} to {run_id}, which waits for no such answer, was accepted")

    def close(self) -> None:
        do = self.rng.choices(CLOSES, weights=CLOSE_WEIGHTS)[0]
        mode = self.rng.choices(MODES, weights=MODE_WEIGHTS)[0]
        directory = self.rng.choice(self.directories) if do in ("dispose", "reload") else None
        origin = {
            "dispose": "project.close",
            "dispose_all": "settings.provider.connect",
            "reload": "project.reload",
            "invalidate_config": "config.update",
        }[do]
        tag = self.tag()
        self.checker.lifecycle[tag] = LifecycleRecord(tag=tag, do=do, mode=mode)
        outcome = self.call(
            f"{do} {mode}",
            lambda: self.supervisor.close(
                do, mode=mode, origin=origin, directory=directory, tag=tag, timeout=CALL_TIMEOUT_S
            ),
            (),
        )
        if not isinstance(outcome, CloseOutcome):
            return
        result = outcome.result.value
        self.close_results[f"{do} {mode}: {result}"] += 1
        interrupts = CLOSE_RULES[mode].interrupts_with is not None
        allowed = {"completed", "deferred"} | ({"interrupted"} if interrupts else set())
        if result not in allowed:
            self.violation(f"{do} in mode {mode} gave {result}")
        if result == "completed" and not outcome.completed:
            self.violation(f"{do} {tag} answered completed but not done")
        if result == "deferred" and not (outcome.pending_directories and outcome.blocking_runs):
            self.violation(f"{do} {tag} deferred without pending directories or blocking runs")
        if not interrupts and outcome.interrupted_runs:
            self.violation(f"{mode} {do} {tag} interrupted {outcome.interrupted_runs}")
        for run_id in outcome.interrupted_runs:
            run = self.checker.runs.get(run_id)
            if run is None:
                self.violation(f"{do} {tag} interrupted {run_id}, a run we never started")
            elif run.interrupt is not None:
                self.violation(f"{do} {tag} interrupted {run_id}, whose interrupt was already decided")
            elif run.state == "finished":
                self.violation(f"{do} {tag} interrupted {run_id}, which had already finished")
            else:
                reason = InterruptReason.LIFECYCLE_INTERRUPT
                run.interrupt = ExpectedInterrupt(reason, origin, outcome.action_id)
                if directory is not None and run.directory != directory:
                    self.violation(f"{do} of {directory} interrupted {run_id}, a run in {run.directory}")

    def tick(self) -> None:
        """One move: answer an ask whose think time is over, or a close, a cancel, a stray request or a
        start when their time has come; else wait a moment for events."""
        now = time.monotonic()
        for run_id, (kind, serial) in sorted(self.board.peek().items()):
            due = self.ask_due.get(serial)
            if due is None:
                due = self.ask_due[serial] = now + self.rng.choice(THINK_S)
            if now >= due:
                del self.ask_due[serial]
                if self.board.take(run_id, serial) is not None:
                    self.answer(run_id, kind)
                return
        if now >= self.next_close:
            self.next_close = now + self.rng.expovariate(1 / CLOSE_EVERY_S)
            self.close()
        elif now >= self.next_cancel:
            self.next_cancel = now + self.rng.expovariate(1 / CANCEL_EVERY_S)
            self.cancel()
        elif now >= self.next_stray:
            self.next_stray = now + self.rng.expovariate(1 / STRAY_EVERY_S)
            if self.rng.random() < 0.85:
                self.misdirected_answer()
            else:
                self.start_a_duplicate()
        elif (
            self.started < self.options.runs
            and len(self.unfinished()) < self.options.max_active
            and self.rng.random() < 0.5
        ):
            self.start_run()
        else:
            self.pump(timeout=0.002)

    # --- events ------------------------------------------------------------------------------

    def pump(self, timeout: float = 0.0) -> None:
        """Feed the checker every event delivered so far (waiting up to ``timeout`` for the first)."""
        if timeout > 0 and not self.subscription.pending:
            try:
                self.checker.feed(self.subscription.get(timeout=timeout))
            except (SupervisorError, EOFError):
                pass
        for event in self.subscription.drain():
            self.checker.feed(event)

    # --- the whole soak ----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        started_at = time.monotonic()
        threads_before = set(threading.enumerate())
        config = SupervisorConfig(
            shutdown_at_exit=False,
            dispose_budget_ms=DISPOSE_BUDGET_MS,
            request_timeout_s=CALL_TIMEOUT_S,
            default_grace_ms=self.options.grace_ms,
            retain_finished_runs=RETAIN_FINISHED,
        )
        self.supervisor = Supervisor.start(config, hooks=self.hooks)
        self.subscription = self.supervisor.subscribe()
        self.supervisor.load(*self.directories[: max(1, len(self.directories) // 2)], timeout=CALL_TIMEOUT_S)
        self.supervisor.declare(*self.directories, timeout=CALL_TIMEOUT_S)
        deadline = started_at + self.options.time_limit_s
        try:
            stragglers = min(STRAGGLERS, self.options.runs // 10)
            while self.started < self.options.runs - stragglers:
                if time.monotonic() > deadline:
                    self.violation(f"the soak did not finish within {self.options.time_limit_s:g} s")
                    break
                self.tick()
                self.pump()
            self.start_stragglers(stragglers)
            self.statistics = _builtins(self.supervisor.statistics(timeout=CALL_TIMEOUT_S))
        finally:
            self.shut_down()
        leaked = self.leaks(threads_before)
        self.notice_surprises()
        self.checker.finish()
        return self.report(time.monotonic() - started_at, leaked)

    def start_stragglers(self, count: int) -> None:
        """The last runs ignore their cancellation past the shutdown's grace: shutdown abandons them."""
        ignore_ms = self.options.grace_ms * 4 + 100
        plan = RunPlan((StepPlan("model", 0, fault="ignore", ignore_ms=ignore_ms),))
        runs = [self.start_run(plan, session=f"straggler-{index}") for index in range(count)]
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < deadline:  # until each is in its stubborn step (or ended before it)
            self.pump(timeout=0.01)
            self.answer_every_ask()
            stubborn = [self.checker.last_step.get(run) == "model-2" for run in runs]
            if all(
                self.checker.runs[run].state == "finished" or s for run, s in zip(runs, stubborn, strict=True)
            ):
                return

    def answer_every_ask(self) -> None:
        for run_id, (kind, serial) in sorted(self.board.peek().items()):
            if self.board.take(run_id, serial) is not None:
                self.answer(run_id, kind)

    def shut_down(self) -> None:
        """Shut down with runs in flight, and a second shutdown that joins the first; drain to the end."""
        first, second = SHUTDOWN_REASONS if self.rng.random() < 0.5 else reversed(SHUTDOWN_REASONS)
        tags = (self.tag(), self.tag())
        for tag, reason in zip(tags, (first, second), strict=True):
            self.checker.lifecycle[tag] = LifecycleRecord(tag=tag, do=reason.value, mode=reason.value)
            self.actions[f"{reason.value} (final)" if tag == tags[0] else f"{reason.value} (joins)"] += 1
        grace = self.options.grace_ms
        # Both sent at once, in this order; each, once accepted, ends in the shutdown's final outcome.
        answers = [
            self.supervisor.submit(Shutdown(grace_ms=grace, reason=first, origin="soak.end", tag=tags[0])),
            self.supervisor.submit(
                Shutdown(grace_ms=grace, reason=second, origin="soak.end.again", tag=tags[1])
            ),
        ]
        limit = grace / 1000 + CALL_TIMEOUT_S
        outcomes: list[CloseOutcome | RequestOutcome | None] = []
        for answer in answers:
            try:
                outcome = answer.result(timeout=limit)
            except TimeoutError:
                self.violation("a shutdown was not answered in time")
                outcomes.append(None)
                continue
            if not isinstance(outcome, CloseOutcome) or outcome.result is CloseResult.REJECTED:
                outcomes.append(outcome)
                continue
            try:
                outcomes.append(self.supervisor.wait_closed(timeout=limit))
            except SupervisorError as error:
                self.violation(f"a shutdown did not complete: {error}")
                outcomes.append(None)
        main_outcome = outcomes[0]
        if isinstance(main_outcome, CloseOutcome):
            self.shutdown_outcome = main_outcome
            self.checker.shutdown = ExpectedInterrupt(
                InterruptReason(first.value), "soak.end", main_outcome.action_id
            )
            if main_outcome.result is not CloseResult.FORCED:
                self.violation(f"the shutdown gave {main_outcome.result.value}, not forced")
            for run_id in main_outcome.interrupted_runs:
                run = self.checker.runs.get(run_id)
                if run is not None and run.interrupt is not None:
                    self.violation(f"shutdown re-interrupted {run_id}, whose interrupt was already decided")
            joined = outcomes[1]
            if not isinstance(joined, CloseOutcome) or joined.action_id != main_outcome.action_id:
                self.violation(f"the second shutdown did not join the first: {joined!r}")
            self.close_results[f"{first.value}: {main_outcome.result.value}"] += 1
        try:
            self.supervisor.wait_closed(timeout=limit)
        except SupervisorError as error:
            self.violation(f"the supervisor did not close: {error}")
        drain_deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < drain_deadline:
            try:
                self.checker.feed(self.subscription.get(timeout=0.5))
            except EOFError:
                break
            except SupervisorError:
                if self.subscription.closed:
                    break

    def leaks(self, threads_before: set[threading.Thread]) -> list[str]:
        """Threads still alive once bodies that ignored cancellation had time to end (bounded)."""
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            ours = self.supervisor.threads.alive()
            others = [t for t in set(threading.enumerate()) - threads_before if t.is_alive()]
            if not ours and not others:
                return []
            for thread in ours + others:
                thread.join(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
        alive = {*self.supervisor.threads.alive(), *(set(threading.enumerate()) - threads_before)}
        return sorted(thread.name for thread in alive if thread.is_alive())

    def notice_surprises(self) -> None:
        for run_id, (directory, generation, cache) in self.notes.instances.items():
            run = self.checker.runs[run_id]
            if (directory, generation) != (run.directory, run.generation):
                self.violation(
                    f"run {run_id} ran on {directory} generation {generation}, not {run.generation}"
                )
            if cache != {"directory": directory, "generation": generation}:
                self.violation(f"run {run_id} saw the cache {cache!r} of another instance")
        for text in self.notes.surprises:
            self.violation(text)

    # --- the report --------------------------------------------------------------------------

    def report(self, elapsed: float, leaked: list[str]) -> dict[str, Any]:
        checker = self.checker
        plans = [run.plan for run in checker.runs.values()]
        return {
            "seed": self.options.seed,
            "runs": self.started,
            "directories": len(self.directories),
            "sessions": len(self.sessions),
            "runs_queued_first": checker.queued,
            "body_faults": {
                "raises": sum(plan.raises for plan in plans),
                "ignores_cancellation": sum(any(s.fault == "ignore" for s in plan.steps) for plan in plans),
            },
            "actions": dict(sorted(self.actions.items())),
            "actions_total": sum(self.actions.values()),
            "answers": dict(sorted(self.answers.items())),
            "close_results": dict(sorted(self.close_results.items())),
            "outcomes": dict(sorted(checker.outcomes.items())),
            "abandoned_runs": checker.abandoned,
            "instances": {
                "started": checker.instances_started,
                "closed": len(checker.closed_instances),
                "closed_with_error": checker.instance_errors,
                "dispose_faults": dict(self.hooks.dispose_faults),
            },
            "events": checker.events,
            "supervisor_statistics": self.statistics,
            "invariant_violations": len(checker.violations),
            "violations": checker.violations[:50],
            "leaked_threads": len(leaked),
            "leaked_thread_names": leaked[:20],
            "peak_rss_kb": peak_rss_kb(),
            "elapsed_s": round(elapsed, 2),
        }


def _builtins(value: Any) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(value)
    return data


def peak_rss_kb() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def print_table(report: dict[str, Any]) -> None:
    def section(title: str, rows: dict[str, Any]) -> None:
        print(f"\n{title}")
        width = max((len(str(key)) for key in rows), default=0)
        for key, value in rows.items():
            print(f"  {key:<{width}}  {value:>7}")

    print(
        f"soak: seed {report['seed']}, {report['runs']} runs over {report['directories']} directories "
        f"and {report['sessions']} sessions ({report['runs_queued_first']} queued first), "
        f"{report['events']} events"
    )
    section("actions (by kind and mode)", report["actions"])
    section("answers", report["answers"])
    section("close results", report["close_results"])
    section(
        "run outcomes (by reason)", {**report["outcomes"], "of which abandoned": report["abandoned_runs"]}
    )
    section("body faults", report["body_faults"])
    section("instances", {k: v for k, v in report["instances"].items() if not isinstance(v, dict)})
    rss = report["peak_rss_kb"]
    section(
        "totals",
        {
            "runs": report["runs"],
            "actions": report["actions_total"],
            "invariant violations": report["invariant_violations"],
            "leaked threads": report["leaked_threads"],
            "peak RSS (MiB)": f"{rss / 1024:.1f}" if rss else "n/a",
            "elapsed (s)": f"{report['elapsed_s']:.1f}",
        },
    )
    for violation in report["violations"]:
        print(f"  VIOLATION {violation}")
    for name in report["leaked_thread_names"]:
        print(f"  LEAKED {name}")
    print("\nOK" if not report["invariant_violations"] and not report["leaked_threads"] else "\nFAILED")


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})"
    )
    parser.add_argument("--runs", type=int, default=None, help="runs to start (default 2000; --quick: 1000)")
    parser.add_argument("--directories", type=int, default=None, help="directories (default 12; --quick: 8)")
    parser.add_argument("--sessions-per-directory", type=int, default=2)
    parser.add_argument("--max-active", type=int, default=None, help="runs active or queued at most")
    parser.add_argument("--grace-ms", type=int, default=150, help="the final shutdown's grace (default 150)")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds before giving up")
    parser.add_argument("--quick", action="store_true", help="a CI-sized soak (finishes in ~20-40 s)")
    parser.add_argument("--json", action="store_true", help="print the totals as one JSON object")
    args = parser.parse_args(argv)
    runs = args.runs if args.runs is not None else (1000 if args.quick else 2000)
    directories = args.directories if args.directories is not None else (8 if args.quick else 12)
    if runs < 1 or directories < 1 or args.sessions_per_directory < 1:
        parser.error("--runs, --directories and --sessions-per-directory must be positive")
    max_active = args.max_active or 3 * directories
    time_limit = args.time_limit or max(60.0, runs * 0.5)
    options = Options(
        seed=args.seed,
        runs=runs,
        directories=directories,
        sessions_per_directory=args.sessions_per_directory,
        max_active=max_active,
        grace_ms=args.grace_ms,
        time_limit_s=time_limit,
        json=args.json,
    )
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    report = Soak(options).run()
    if options.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_table(report)
    return 1 if report["invariant_violations"] or report["leaked_threads"] else 0


if __name__ == "__main__":
    sys.exit(main())
