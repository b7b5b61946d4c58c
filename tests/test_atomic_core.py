"""Each input of the decision core applies fully or not at all, a bug deciding one leaves the
supervisor serving and able to shut down within its grace, and the core forgets what is finished."""

from __future__ import annotations

import copy
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from run_supervisor import (
    AskKind,
    AskPayload,
    CloseAction,
    CloseMode,
    Gate,
    Outcome,
    PartState,
    QueuePolicy,
    ReloadPolicy,
    RunContext,
    RunState,
    ShutdownReason,
    StepKind,
    Supervisor,
    SupervisorConfig,
    SupervisorError,
    WithdrawReason,
)
from run_supervisor.protocol import (
    AnswerForm,
    ArmDeadline,
    AskRaised,
    BodyEnded,
    CancelRun,
    CloseRequest,
    Command,
    ConfirmClose,
    DeadlineExpired,
    DismissForm,
    DisposeDone,
    DisposeInstance,
    GraceExpired,
    Heartbeat,
    NoProgress,
    PartReport,
    ReplyPermission,
    Request,
    RetryReport,
    SetQueuePolicy,
    Shutdown,
    SpawnRun,
    StartGraceTimer,
    StartRun,
    StepReport,
    SupervisorCore,
    WithdrawAsk,
)
from run_supervisor.protocol._rules import RunTrigger


class _Injected(Exception):
    """The failure a test injects into the core."""


def _state(core: SupervisorCore) -> dict[str, Any]:
    """Everything the core holds (its journal and its outgoing buffer aside), as a deep copy."""
    state = {k: v for k, v in vars(core).items() if k not in ("_journal", "_touch", "_out", "_asks")}
    state["_asks"] = {k: v for k, v in vars(core._asks).items() if k != "_journal"}
    return copy.deepcopy(state)


class _Driver:
    """Feeds a core random requests and the reports its commands call for."""

    def __init__(self, seed: int, reload_policy: ReloadPolicy | None = None) -> None:
        self.rng = random.Random(seed)
        # Reload policies: with one given, the core has it and reloads carry their own
        # (drawn from a stream of their own); without, the core's default and no reload policy.
        self.core = SupervisorCore(retain_finished=4, reload_policy=reload_policy or ReloadPolicy.EAGER)
        self.policy_rng = random.Random(-seed) if reload_policy is not None else None
        self.tokens = 0
        self.started = 0
        self.live: list[str] = []  # spawned, body not ended
        self.disposing: list[tuple[str, int]] = []
        self.timers: list[str] = []
        self.steps = 0
        self.asked = 0
        self.asks: dict[str, list[str]] = {}
        self.deadlines: list[str] = []  # armed; kept after the run ends: late expiries too

    def carry_out(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, SpawnRun):
                self.live.append(command.run_id)
            elif isinstance(command, DisposeInstance) and command.report:
                self.disposing.append((command.directory, command.generation))
            elif isinstance(command, StartGraceTimer):
                self.timers.append(command.action_id)
            elif isinstance(command, ArmDeadline):
                self.deadlines.append(command.run_id)

    def next_input(self) -> tuple[str, Any]:
        self.steps += 1
        rng = self.rng
        runs = [f"r{i}" for i in range(self.started)] or ["r0"]
        directory = rng.choice(["/a", "/b", "/c"])
        roll = rng.random()
        if self.live and roll < 0.35:
            run = rng.choice(self.live)
            kind = rng.randrange(8)
            if kind == 5:  # the shell measured no progress (stalls)
                return "report", NoProgress(run_id=run, idle_ms=1000)
            if kind == 6:  # a heartbeat of a run flagged stalled
                return "report", Heartbeat(run_id=run)
            if kind == 7:  # a provider retry: the session shows retry until progress
                attempt = rng.choice([1, 2, 0])
                return "report", RetryReport(run_id=run, attempt=attempt, message="529", next_at_ms=None)
            if kind == 0:
                self.live.remove(run)
                return "report", BodyEnded(run_id=run, error=rng.choice([None, "boom"]))
            if kind == 1:
                return "report", StepReport(run_id=run, step="model", kind=StepKind.MODEL, finished=False)
            if kind == 2:
                state = rng.choice(
                    [PartState.PENDING, PartState.PREPARED, PartState.RUNNING, PartState.COMPLETED]
                )
                return "report", PartReport(run_id=run, tool="bash", state=state)
            if kind == 3 or not self.asks.get(run):
                self.asked += 1
                ask = f"a{self.asked}"
                self.asks.setdefault(run, []).append(ask)
                call = rng.choice([None, "c1", "c2"])
                kind_of = rng.choice([AskKind.PERMISSION, AskKind.FORM])
                return "report", AskRaised(
                    run_id=run, ask_id=ask, kind=kind_of, payload=AskPayload(), call_id=call
                )
            reason = rng.choice(list(WithdrawReason))
            return "report", WithdrawAsk(run_id=run, ask_id=rng.choice(self.asks[run]), reason=reason)
        if self.disposing and roll < 0.5:
            directory_name, generation = self.disposing.pop(rng.randrange(len(self.disposing)))
            error = rng.choice([None, "hook failed"])
            return "report", DisposeDone(directory=directory_name, generation=generation, error=error)
        if self.timers and roll < 0.55:
            return "report", GraceExpired(action_id=self.timers.pop())
        if self.deadlines and roll < 0.57:  # a run's deadline passes, maybe after its end
            return "report", DeadlineExpired(run_id=self.deadlines.pop(rng.randrange(len(self.deadlines))))
        if roll < 0.58:
            return "preload", directory
        request: Request
        if roll < 0.75:
            self.started += 1
            session = rng.choice(["s1", "s2", "s3"])
            parent = rng.choice(self.live) if self.live and rng.random() < 0.3 else None
            known = self.core.run_snapshot(parent) if parent is not None else None
            if known is not None:  # a child run: in its parent's directory
                directory = known.directory
            policy = rng.choice([None, None, *QueuePolicy])  # queue policies
            request = StartRun(
                run_id=f"r{self.started - 1}",
                session=session,
                directory=directory,
                parent_run_id=parent,
                queue_policy=policy,
                deadline_ms=rng.choice([None, None, 100]),
            )
        elif roll < 0.78:  # a session's default queue policy
            request = SetQueuePolicy(
                session=rng.choice(["s1", "s2", "s3"]), queue_policy=rng.choice(list(QueuePolicy))
            )
        elif roll < 0.82:
            request = CancelRun(run_id=rng.choice(runs))
        elif roll < 0.86:
            do = rng.choice(list(CloseAction)[:4])
            mode = rng.choice([CloseMode.MAINTENANCE, CloseMode.USER_CONFIRMED_INTERRUPT])
            fingerprint = rng.choice([None, "f1", "f2"])  # the no-op gate
            policy = None
            if self.policy_rng is not None:  # a reload's own policy; now and then another close's: rejected
                policy = self.policy_rng.choice([None, None, *ReloadPolicy])
                policy = policy if do is CloseAction.RELOAD or roll < 0.83 else None
            request = CloseRequest(
                do=do,
                mode=mode,
                origin="test",
                directories=(directory,),
                fingerprint=fingerprint,
                reload_policy=policy,
            )
        elif roll < 0.88:  # confirm_close of a pending, completed or unknown action (stalls)
            action_id = rng.choice(["lc-1", "lc-2", "lc-3", "lc-9"])
            request = ConfirmClose(action_id=action_id, origin=rng.choice([None, "user"]))
        elif roll < 0.97:
            asking = [r for r in self.live if self.asks.get(r)]
            run = rng.choice(asking) if asking and rng.random() < 0.8 else rng.choice(runs)
            asks = self.asks.get(run) or ["a0"]
            by = {"ask_id": rng.choice(asks)} if rng.random() < 0.7 else {"run_id": run}
            request = rng.choice(
                [
                    ReplyPermission(approve=rng.random() < 0.5, message=rng.choice([None, "no"]), **by),
                    AnswerForm(answer="yes", **by),
                    DismissForm(message=rng.choice([None, "later"]), **by),
                ]
            )
        elif self.steps > 150:  # late, so that most of a sequence runs before it
            request = Shutdown(reason=ShutdownReason.SHUTDOWN, grace_ms=100)
        else:
            request = CancelRun(run_id=rng.choice(runs))
        self.tokens += 1
        return "request", (request, self.tokens)

    def apply(self, what: str, value: Any) -> list[Command]:
        if what == "request":
            return self.core.request(*value)
        if what == "report":
            return self.core.report(value)
        return self.core.preload(value)


def _failing_at_the_end(real: Callable[..., None]) -> Callable[..., None]:
    def decide(*args: Any) -> None:
        real(*args)
        raise _Injected("after every change of the decision")

    return decide


@pytest.mark.parametrize(
    ("seed", "reload_policy"),
    [*((seed, None) for seed in range(25)), *((seed, ReloadPolicy.LAZY) for seed in range(100, 110))],
)
def test_a_decision_that_fails_after_all_its_changes_leaves_the_core_exactly_as_before(
    seed: int, reload_policy: ReloadPolicy | None
) -> None:
    """The journal covers every change a decision makes: failing each one at its very end (the
    worst case: everything was changed) restores the whole core, then the input applies for real.
    Ten of the sequences run a lazy-reload core whose reloads carry either policy."""
    driver = _Driver(seed, reload_policy)
    core = driver.core
    for _ in range(250):
        what, value = driver.next_input()
        before = _state(core)
        name = {"request": "_request", "report": "_report", "preload": "_preload"}[what]
        setattr(core, name, _failing_at_the_end(getattr(core, name)))
        try:
            with pytest.raises(_Injected):
                driver.apply(what, value)
        finally:
            delattr(core, name)
        assert _state(core) == before, f"the failed {type(value).__name__} left changes behind"
        driver.carry_out(driver.apply(what, value))
    stats = core.statistics()
    assert stats.runs_finished > 10 and stats.events_emitted > 50, stats  # the sequence did things


def test_a_failure_in_the_middle_of_a_request_changes_nothing_and_the_next_request_applies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = SupervisorCore()
    core.request(StartRun(run_id="r1", session="s1", directory="/a"), 1)
    before, stats = _state(core), core.statistics()
    real_move = SupervisorCore._move_run

    def move_then_fail(self: SupervisorCore, run: Any, trigger: RunTrigger) -> RunState:
        new = real_move(self, run, trigger)  # the run is in the tables and has moved: then a bug
        if run.id == "boom":
            raise _Injected("a bug after the first change")
        return new

    monkeypatch.setattr(SupervisorCore, "_move_run", move_then_fail)
    with pytest.raises(_Injected):
        core.request(StartRun(run_id="boom", session="s2", directory="/b"), 2)
    assert _state(core) == before and core.statistics() == stats
    assert core.run_snapshot("boom") is None and core.session_snapshot("s2") is None
    commands = core.request(StartRun(run_id="r2", session="s2", directory="/b"), 3)
    started = [c for c in commands if isinstance(c, SpawnRun)]
    assert started == [SpawnRun(run_id="r2", session="s2", directory="/b", generation=1)]
    assert core.statistics().events_emitted == stats.events_emitted + 3  # busy, instance, run: no gap in seq


def test_a_bug_in_the_middle_of_a_request_leaves_the_supervisor_serving_and_shutdown_within_its_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_move = SupervisorCore._move_run

    def move_then_fail(self: SupervisorCore, run: Any, trigger: RunTrigger) -> RunState:
        new = real_move(self, run, trigger)
        if run.id == "boom":
            raise _Injected("a bug in the core, after its first change")
        return new

    gate = Gate("never")
    deaf = threading.Event()

    def ignores_cancellation(ctx: RunContext) -> None:
        deaf.wait(10)  # released after the test: shutdown must not wait for it

    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/w/a"])
    try:
        waiting = sup.start_run(lambda ctx: ctx.wait(gate), session="s1", directory="/w/a", run_id="r1")
        sup.start_run(ignores_cancellation, session="s2", directory="/w/a", run_id="deaf")
        monkeypatch.setattr(SupervisorCore, "_move_run", move_then_fail)
        with pytest.raises(SupervisorError):
            sup.start_run(lambda ctx: None, session="s3", directory="/w/a", run_id="boom")
        monkeypatch.undo()
        # Still serving: nothing of the failed request stuck, a new run starts and completes.
        assert sup.run("boom") is None
        assert (
            sup.start_run(lambda ctx: None, session="s3", directory="/w/a").wait(5).outcome
            is Outcome.COMPLETED
        )
        began = time.monotonic()
        outcome = sup.shutdown(grace_ms=200)
        took = time.monotonic() - began
    finally:
        deaf.set()
    assert outcome.abandoned_runs == ("deaf",)
    assert waiting.wait(1).outcome is Outcome.INTERRUPTED
    assert took < 0.2 + 1.5, f"shutdown(grace_ms=200) took {took:.2f} s"  # generous: a loaded 2-core machine


def test_the_core_forgets_idle_sessions_and_closed_directories_past_its_retention() -> None:
    """20,000 runs, each in a fresh session and a fresh directory, each directory closed after its
    run: what the core remembers stays bounded by retain_finished, not by the runs it has seen."""
    core = SupervisorCore(retain_finished=50)
    for i in range(20_000):
        run, directory = f"r{i}", f"/d{i}"
        core.request(StartRun(run_id=run, session=f"s{i}", directory=directory), i)
        core.report(BodyEnded(run_id=run))
        closing = core.request(
            CloseRequest(
                do=CloseAction.DISPOSE, mode=CloseMode.MAINTENANCE, origin="t", directories=(directory,)
            ),
            -i,
        )
        (dispose,) = [c for c in closing if isinstance(c, DisposeInstance)]
        core.report(DisposeDone(directory=dispose.directory, generation=dispose.generation))
    stats = core.statistics()
    assert (stats.runs_finished, stats.instances_open, stats.actions_pending) == (20_000, 0, 0)
    assert (stats.runs_known, stats.sessions_known, stats.directories_known) == (50, 50, 50)
    # The latest are still known, as before: an idle session, a closed directory's next generation.
    assert core.session_snapshot("s19999") is not None and core.session_snapshot("s0") is None
    reloaded = core.request(StartRun(run_id="again", session="s19999", directory="/d19999"), 0)
    assert [c.generation for c in reloaded if isinstance(c, SpawnRun)] == [2]
