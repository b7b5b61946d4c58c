"""Lazy reload: a reload's next generation is loaded when the first run needs it or
when the old generation has closed, whichever comes first -- never next to an old run nobody asked
for it beside (``ReloadPolicy``, ``RELOAD_RULES``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from scenario_support import action, run, story
from wire_support import Served, served

from run_supervisor.actors import (
    AsyncSupervisor,
    Gate,
    InvalidRequest,
    RunContext,
    Supervisor,
    SupervisorConfig,
)
from run_supervisor.actors.scenarios import ScenarioFileError, parse_scenario, play
from run_supervisor.actors.testing import EventLog, simulate_crash
from run_supervisor.protocol import (
    RELOAD_RULES,
    ActionResult,
    CloseAction,
    CloseMode,
    CloseOutcome,
    CloseRequest,
    CloseResult,
    InstanceClosed,
    InstanceStarted,
    InterruptReason,
    LifecycleCompleted,
    LifecycleRequested,
    LoadCause,
    LoadInstance,
    Outcome,
    RejectCode,
    ReloadLoad,
    ReloadPolicy,
    RunStarted,
    RunState,
    SessionStatusChanged,
    SupervisorCore,
)
from run_supervisor.protocol._rules import reload_loads
from run_supervisor.protocol.testing import CoreShell, InvariantChecker

LAZY, EAGER = ReloadPolicy.LAZY, ReloadPolicy.EAGER
CONFIRMED = CloseMode.USER_CONFIRMED_INTERRUPT


def lazy_shell(*directories: str, hold_disposes: bool = False) -> CoreShell:
    return CoreShell(
        *directories, hold_disposes=hold_disposes, core=SupervisorCore(reload_policy=ReloadPolicy.LAZY)
    )


def generations(shell: CoreShell, directory: str = "/w/a") -> list[int]:
    return [g for d, g in shell.core.live_instances() if d == directory]


# --- the rule, as data -------------------------------------------------------------------------------


def test_the_rules_say_eager_loads_with_the_request_and_lazy_when_a_run_needs_it_or_the_old_one_closed() -> (
    None
):
    for mode in (CloseMode.MAINTENANCE, CONFIRMED):
        assert RELOAD_RULES[EAGER][mode] == {ReloadLoad.AT_REQUEST}
        assert RELOAD_RULES[LAZY][mode] == {ReloadLoad.FIRST_RUN, ReloadLoad.PREVIOUS_CLOSED}
        # Lazy: with nothing open the old generation has closed already, so it loads at the request.
        assert reload_loads(LAZY, mode, ReloadLoad.AT_REQUEST, open_generations=0)
        assert not reload_loads(LAZY, mode, ReloadLoad.AT_REQUEST, open_generations=1)
        assert not reload_loads(LAZY, mode, ReloadLoad.PREVIOUS_CLOSED, open_generations=1)
        assert reload_loads(LAZY, mode, ReloadLoad.PREVIOUS_CLOSED, open_generations=0)
        assert reload_loads(EAGER, mode, ReloadLoad.AT_REQUEST, open_generations=1)


# --- the core ----------------------------------------------------------------------------------------


def test_a_lazy_maintenance_reload_loads_no_second_generation_while_the_old_run_goes_on() -> None:
    shell = lazy_shell("/w/a")
    shell.start("r1", directory="/w/a")

    answer = shell.close(CloseAction.RELOAD, "/w/a")

    assert answer.result is CloseResult.DEFERRED and answer.blocking_runs == ("r1",)
    assert shell.commands(LoadInstance, within=shell.last) == []
    assert generations(shell) == [1]
    assert shell.core.statistics().loads_deferred == 1
    assert shell.core.statistics().instances_open == 1
    assert shell.one(LifecycleRequested).reload_policy is LAZY
    shell.tool("r1")  # the old run goes on working on generation 1; still nothing is loaded
    assert generations(shell) == [1]


def test_the_first_run_after_a_lazy_reload_loads_the_next_generation_and_runs_on_it() -> None:
    shell = lazy_shell("/w/a")
    shell.start("r1", directory="/w/a")
    shell.close(CloseAction.RELOAD, "/w/a")

    shell.start("r2", directory="/w/a")

    started = shell.one(InstanceStarted, directory="/w/a", generation=2)
    assert started.cause is LoadCause.RUN
    assert shell.one(RunStarted, run_id="r2").generation == 2
    assert generations(shell) == [1, 2]
    assert shell.core.statistics().loads_deferred == 0
    shell.finish("r1")  # the old generation closes; nothing more loads
    assert generations(shell) == [2]
    assert len(shell.of(InstanceStarted, directory="/w/a")) == 2


def test_without_a_new_run_the_next_generation_loads_the_moment_the_old_one_closes() -> None:
    shell = lazy_shell("/w/a")
    shell.start("r1", directory="/w/a")
    action = shell.close(CloseAction.RELOAD, "/w/a").action_id

    shell.finish("r1")

    closed = shell.event_position(InstanceClosed, directory="/w/a", generation=1)
    started = shell.event_position(InstanceStarted, directory="/w/a", generation=2)
    completed = shell.event_position(LifecycleCompleted, action_id=action)
    assert closed < started < completed
    assert shell.one(InstanceStarted, generation=2).cause is LoadCause.PREVIOUS_CLOSED
    assert generations(shell) == [2]
    shell.start("r2", directory="/w/a")  # the next run uses it: no third generation
    assert shell.one(RunStarted, run_id="r2").generation == 2


def test_a_lazy_reload_of_an_idle_directory_loads_after_the_old_generation_closed_and_before_its_answer() -> (
    None
):
    shell = lazy_shell("/w/a", hold_disposes=True)

    assert shell.close(CloseAction.RELOAD, "/w/a") is None  # answered once the old one has closed
    token = shell.last_token
    assert generations(shell) == [1]  # its dispose hook runs; generation 2 is not loaded beside it

    shell.release()

    answer = shell.answers[token]
    assert isinstance(answer, CloseOutcome) and answer.result is CloseResult.COMPLETED
    closed = shell.event_position(InstanceClosed, generation=1)
    started = shell.event_position(InstanceStarted, generation=2)
    assert closed < started < shell.reply_position(token)
    assert shell.one(InstanceStarted, generation=2).cause is LoadCause.PREVIOUS_CLOSED


def test_a_lazy_reload_of_a_directory_with_nothing_open_loads_at_once() -> None:
    shell = CoreShell(declare=["/w/a"], core=SupervisorCore(reload_policy=LAZY))  # known, not loaded

    answer = shell.close(CloseAction.RELOAD, "/w/a")

    assert answer.result is CloseResult.COMPLETED
    assert shell.one(InstanceStarted, directory="/w/a").cause is LoadCause.RELOAD
    assert generations(shell) == [1]


def test_a_user_confirmed_lazy_reload_loads_when_the_interrupted_run_has_stopped() -> None:
    shell = lazy_shell("/w/a")
    shell.start("r1", directory="/w/a")

    answer = shell.close(CloseAction.RELOAD, "/w/a", mode=CONFIRMED)

    assert answer.result is CloseResult.INTERRUPTED and answer.interrupted_runs == ("r1",)
    assert generations(shell) == [1]  # r1's body has not stopped yet
    shell.finish("r1")
    assert shell.finished("r1").reason is InterruptReason.LIFECYCLE_INTERRUPT
    assert generations(shell) == [2]
    assert shell.one(InstanceStarted, generation=2).cause is LoadCause.PREVIOUS_CLOSED


def test_an_eager_reload_loads_at_once_next_to_the_old_generation() -> None:
    shell = lazy_shell("/w/a")
    shell.start("r1", directory="/w/a")

    shell.close(CloseAction.RELOAD, "/w/a", reload_policy=EAGER)

    assert generations(shell) == [1, 2]
    assert shell.one(InstanceStarted, generation=2).cause is LoadCause.RELOAD
    assert shell.one(LifecycleRequested).reload_policy is EAGER
    assert shell.core.statistics().loads_deferred == 0


def test_the_bare_core_reloads_eagerly_as_the_public_contract_describes() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1", directory="/w/a")
    shell.close(CloseAction.RELOAD, "/w/a")
    assert generations(shell) == [1, 2]
    assert shell.one(LifecycleRequested).reload_policy is EAGER


def test_a_dispose_after_a_lazy_reload_replaces_the_deferred_load() -> None:
    shell = lazy_shell("/w/a")
    shell.start("r1", directory="/w/a")
    shell.close(CloseAction.RELOAD, "/w/a")

    shell.close(CloseAction.DISPOSE, "/w/a")
    assert shell.core.statistics().loads_deferred == 0
    shell.finish("r1")

    assert generations(shell) == []  # what the dispose asked stands: nothing loaded
    assert len(shell.of(InstanceStarted, directory="/w/a")) == 1


def test_a_second_lazy_reload_defers_one_load_only() -> None:
    shell = lazy_shell("/w/a")
    shell.start("r1", directory="/w/a")
    shell.close(CloseAction.RELOAD, "/w/a")
    shell.close(CloseAction.RELOAD, "/w/a")

    shell.finish("r1")

    assert generations(shell) == [2]
    assert len(shell.of(InstanceStarted, directory="/w/a")) == 2
    shell.assert_every_action_completed_once()


def test_a_shutdown_cancels_a_deferred_load() -> None:
    shell = lazy_shell("/w/a")
    shell.start("r1", directory="/w/a")
    shell.close(CloseAction.RELOAD, "/w/a")

    shell.shutdown()
    shell.finish("r1")

    assert shell.core.closed
    assert len(shell.of(InstanceStarted, directory="/w/a")) == 1
    shell.checker.finish()


def test_a_reload_policy_on_another_close_is_rejected_naming_it() -> None:
    shell = lazy_shell("/w/a")
    answer = shell.close(CloseAction.DISPOSE, "/w/a", reload_policy=EAGER)
    assert answer.result is CloseResult.REJECTED and answer.code is RejectCode.INVALID_REQUEST
    assert "reload_policy" in (answer.error or "")
    assert generations(shell) == [1]


def test_a_deferred_generation_counts_for_the_no_op_gate_with_the_fingerprint_it_will_load_with() -> None:
    shell = lazy_shell()
    shell.carry_out(shell.core.preload("/w/a", "cfg-1"))
    shell.start("r1", directory="/w/a")
    shell.close(CloseAction.RELOAD, "/w/a", fingerprint="cfg-2")

    same = shell.close(CloseAction.INVALIDATE_CONFIG, fingerprint="cfg-2")

    assert same.result is CloseResult.NOOP  # as it would be with generation 2 loaded at once
    assert shell.core.statistics().loads_deferred == 1
    shell.finish("r1")
    assert shell.one(InstanceStarted, generation=2).fingerprint == "cfg-2"


def test_an_undone_decision_leaves_the_deferred_load_as_it_was() -> None:
    core = SupervisorCore(reload_policy=LAZY)
    shell = CoreShell("/w/a", core=core)
    shell.start("r1", directory="/w/a")
    shell.close(CloseAction.RELOAD, "/w/a")
    before = core.statistics()

    def fail(*args: Any) -> None:
        raise RuntimeError("a bug while deciding")

    original = core._reload  # runs after the close dropped the deferred load and interrupted r1
    core._reload = fail  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        core.request(
            CloseRequest(do=CloseAction.RELOAD, mode=CONFIRMED, origin="x", directories=("/w/a",)), 0
        )
    core._reload = original  # type: ignore[method-assign]
    assert core.statistics() == before
    assert core.run_snapshot("r1").state is RunState.ACTIVE  # type: ignore[union-attr]
    assert core._deferred_loads == {"/w/a": ("lc-1", LAZY, CloseMode.MAINTENANCE)}


# --- the invariant checker ---------------------------------------------------------------------------


def _stream(*events: Any) -> InvariantChecker:
    checker = InvariantChecker()
    for seq, event in enumerate(events, 1):
        checker.event(
            event.__class__(**{**{f: getattr(event, f) for f in event.__struct_fields__}, "seq": seq})
        )
    return checker


def _lazy_reload_requested() -> list[Any]:
    return [
        InstanceStarted(seq=0, directory="/w/a", generation=1),
        SessionStatusChanged(seq=0, session="s1", status="busy"),  # type: ignore[arg-type]
        RunStarted(seq=0, run_id="r1", session="s1", directory="/w/a", generation=1),
        LifecycleRequested(
            seq=0,
            action_id="lc-1",
            do=CloseAction.RELOAD,
            mode=CloseMode.MAINTENANCE,
            origin="t",
            directories=("/w/a",),
            reload_policy=LAZY,
        ),
    ]


def test_the_checker_fails_a_second_generation_that_a_lazy_reload_loaded_at_its_request() -> None:
    checker = _stream(
        *_lazy_reload_requested(),
        InstanceStarted(seq=0, directory="/w/a", generation=2, cause=LoadCause.RELOAD),
    )
    assert any("no reload of /w/a loads now" in v for v in checker.violations), checker.violations


def test_the_checker_fails_a_generation_loaded_for_a_run_that_never_started_on_it() -> None:
    checker = _stream(
        *_lazy_reload_requested(),
        InstanceStarted(seq=0, directory="/w/a", generation=2, cause=LoadCause.RUN),
        ActionResult(seq=0, action_id="lc-1", result=CloseResult.DEFERRED),
    )
    assert any("no run started on it" in v for v in checker.violations), checker.violations


def test_the_checker_fails_a_deferred_load_that_did_not_come_when_the_old_generation_closed() -> None:
    checker = _stream(
        *_lazy_reload_requested(),
        ActionResult(seq=0, action_id="lc-1", result=CloseResult.DEFERRED),
        InstanceClosed(seq=0, directory="/w/a", generation=1),
        LifecycleCompleted(seq=0, action_id="lc-1"),
    )
    assert any("did not start at once" in v for v in checker.violations), checker.violations


def test_the_checker_fails_an_eager_reload_answered_before_it_loaded() -> None:
    requested = _lazy_reload_requested()
    requested[-1] = LifecycleRequested(
        **{**{f: getattr(requested[-1], f) for f in requested[-1].__struct_fields__}, "reload_policy": EAGER}
    )
    checker = _stream(*requested, ActionResult(seq=0, action_id="lc-1", result=CloseResult.DEFERRED))
    assert any("before it loaded the next generation" in v for v in checker.violations), checker.violations


def test_the_checker_fails_a_second_generation_loaded_beside_a_live_one() -> None:
    checker = _stream(
        InstanceStarted(seq=0, directory="/w/a", generation=1),
        InstanceStarted(seq=0, directory="/w/a", generation=2, cause=LoadCause.LOAD),
    )
    assert any("('/w/a', 1)] is still live" in v for v in checker.violations), checker.violations


def test_the_checker_passes_every_lazy_story_of_the_core() -> None:
    shell = lazy_shell("/w/a", "/w/b", hold_disposes=True)
    shell.start("r1", directory="/w/a")
    shell.close(CloseAction.RELOAD, "/w/a")
    shell.close(CloseAction.RELOAD, "/w/b")
    shell.start("r2", directory="/w/a")
    shell.release()
    shell.finish("r1")
    shell.release()
    shell.finish("r2")
    shell.shutdown()
    shell.release()
    shell.checker.finish()  # raises InvariantViolation naming anything broken


# --- the facade, with real actors and threads ---------------------------------------------------------


class CountingHooks:
    """Instance hooks that record every load and dispose (a language server started, stopped)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loaded: list[tuple[str, int]] = []
        self.disposed: list[tuple[str, int]] = []

    def load(self, directory: str, generation: int) -> Any:
        with self.lock:
            self.loaded.append((directory, generation))
        return generation

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        with self.lock:
            self.disposed.append((directory, generation))


def held(gate: Gate) -> Any:
    def body(ctx: RunContext) -> int:
        with ctx.step("model"):
            ctx.wait(gate)
        generation: int = ctx.instance()
        return generation

    return body


def test_the_supervisor_reloads_lazily_by_default_so_no_second_language_server_starts_beside_an_old_run() -> (
    None
):
    assert SupervisorConfig().reload_policy is LAZY
    hooks, gate = CountingHooks(), Gate("g")
    with Supervisor.start(SupervisorConfig(shutdown_at_exit=False), hooks=hooks, directories=["/w/a"]) as sup:
        log = EventLog(sup)
        run = sup.start_run(held(gate), session="s1", directory="/w/a", run_id="r1")
        log.wait_for("run.step.started", run_id="r1")

        outcome = sup.close("reload", mode="maintenance", origin="project.reload", directory="/w/a")

        assert outcome.result is CloseResult.DEFERRED
        assert sup.statistics().loads_deferred == 1 and sup.statistics().instances_open == 1
        gate.open()
        assert run.wait(timeout=5).outcome is Outcome.COMPLETED
        started = log.wait_for("instance.started", directory="/w/a", generation=2)
        assert started.cause is LoadCause.PREVIOUS_CLOSED  # type: ignore[union-attr]
        closed = log.wait_for("instance.closed", directory="/w/a", generation=1)
        assert closed.seq < started.seq
        log.close()
    # The host's hooks never held two generations at once: generation 2 was built after 1 was torn down.
    assert hooks.loaded == [("/w/a", 1), ("/w/a", 2)]
    assert hooks.disposed[0] == ("/w/a", 1)


def test_a_run_arriving_during_the_deferred_close_gets_the_next_generation_at_once() -> None:
    gate = Gate("g")
    with Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/w/a"]) as sup:
        log = EventLog(sup)
        old = sup.start_run(held(gate), session="s1", directory="/w/a", run_id="r1")
        log.wait_for("run.step.started", run_id="r1")
        sup.close("reload", mode="maintenance", origin="project.reload", directory="/w/a")

        new = sup.start_run(lambda ctx: ctx.instance(), session="s2", directory="/w/a", run_id="r2")

        assert new.wait(timeout=5).generation == 2
        assert log.wait_for("instance.started", generation=2).cause is LoadCause.RUN  # type: ignore[union-attr]
        assert sup.statistics().loads_deferred == 0
        gate.open()
        assert old.wait(timeout=5).generation == 1
        log.close()


def test_a_host_chooses_eager_reloads_in_the_config_or_for_one_reload() -> None:
    gate = Gate("g")
    eager = SupervisorConfig(shutdown_at_exit=False, reload_policy="eager")  # type: ignore[arg-type]
    with Supervisor.start(eager, directories=["/w/a", "/w/b"]) as sup:
        log = EventLog(sup)
        sup.start_run(held(gate), session="s1", directory="/w/a", run_id="r1")
        sup.start_run(held(gate), session="s2", directory="/w/b", run_id="r2")
        log.wait_for("run.step.started", run_id="r1")
        log.wait_for("run.step.started", run_id="r2")

        sup.close("reload", mode="maintenance", origin="t", directory="/w/a")
        sup.close("reload", mode="maintenance", origin="t", directory="/w/b", reload_policy="lazy")

        assert log.wait_for("instance.started", directory="/w/a", generation=2).cause is LoadCause.RELOAD  # type: ignore[union-attr]
        assert sup.statistics().loads_deferred == 1  # /w/b's waits
        with pytest.raises(InvalidRequest, match="reload_policy"):
            sup.close("dispose", mode="maintenance", origin="t", directory="/w/a", reload_policy="eager")
        with pytest.raises(InvalidRequest, match="reload_policy must be one of lazy, eager"):
            sup.close("reload", mode="maintenance", origin="t", directory="/w/a", reload_policy="soon")  # type: ignore[arg-type]
        gate.open()
        log.close()


def test_the_async_facade_takes_a_reload_policy_too() -> None:
    async def host() -> None:
        async with AsyncSupervisor.start(SupervisorConfig(shutdown_at_exit=False)) as sup:
            await sup.load("/w/a")
            gate = Gate("g")
            await sup.start_run(held(gate), session="s1", directory="/w/a", run_id="r1")
            outcome = await sup.close("reload", mode="maintenance", origin="t", directory="/w/a")
            assert outcome.result is CloseResult.DEFERRED
            assert (await sup.statistics()).loads_deferred == 1
            await sup.close("reload", mode="maintenance", origin="t", directory="/w/a", reload_policy="eager")
            assert (await sup.statistics()).loads_deferred == 0
            assert (await sup.statistics()).instances_open == 2
            gate.open()

    asyncio.run(host())


def test_a_crash_while_a_load_is_deferred_recovers_the_run_and_the_next_start_loads_generation_one(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "runs.journal"
    config = SupervisorConfig(shutdown_at_exit=False)
    sup = Supervisor.start(config, journal=journal, directories=["/w/a"])
    try:
        log = EventLog(sup)
        sup.start_run(held(Gate("never")), session="s1", directory="/w/a", run_id="r1")
        log.wait_for("run.step.started", run_id="r1")
        sup.close("reload", mode="maintenance", origin="t", directory="/w/a")
        log.wait_for("action.result")
        log.close()
    finally:
        simulate_crash(sup)
    with Supervisor.start(config, journal=journal) as after:
        (recovered,) = after.recovered()
        assert (recovered.run_id, recovered.reason) == ("r1", InterruptReason.CRASH)
        assert after.statistics().loads_deferred == 0  # a new process loads what its runs need
        follow_up = after.start_run(lambda ctx: None, session="s1", directory="/w/a", resume_of="r1")
        assert follow_up.wait(timeout=5).generation == 1


# --- the scenario format ------------------------------------------------------------------------------


def _doc(
    *, top: str = "", do: str = "reload", policy: str | None = None, expect: str = 'result = "deferred"'
) -> str:
    """r1 in /p held at a gate, a maintenance ``do`` of /p once it starts (with ``policy``), the gate
    opened on its deferral, and ``expect`` of the close."""
    keys = {} if policy is None else {"reload_policy": policy}
    close = action(id="a1", when="r1.started", do=do, directory="/p", mode="maintenance", **keys)
    opens = action(when="a1.deferred", do="open_gate", gate="g")
    held = run("r1", '{ kind = "model", gate = "g" }', directory="/p")
    return top + story("t", held, close, opens, f"[expect.a1]\n{expect}\n", directories=("/p",))


def test_a_scenario_reloads_eagerly_as_the_contract_says_unless_it_opts_into_lazy() -> None:
    assert parse_scenario(_doc(), file="t.toml", fmt="toml").reload_policy is EAGER
    lazy = parse_scenario(_doc(top='reload_policy = "lazy"'), file="t.toml", fmt="toml")
    assert lazy.reload_policy is LAZY
    one = parse_scenario(_doc(policy="lazy"), file="t.toml", fmt="toml")
    assert (one.reload_policy, one.actions[0].reload_policy) == (EAGER, LAZY)


def test_a_scenario_reload_policy_that_is_not_lazy_or_eager_is_refused_naming_the_key() -> None:
    with pytest.raises(ScenarioFileError) as caught:
        parse_scenario(_doc(top='reload_policy = "later"'), file="t.toml", fmt="toml")
    assert caught.value.key == "reload_policy"


def test_a_scenario_reload_policy_on_another_close_is_refused() -> None:
    with pytest.raises(ScenarioFileError) as caught:
        parse_scenario(_doc(do="dispose", policy="lazy"), file="t.toml", fmt="toml")
    assert caught.value.key == "actions[0].reload_policy"


def test_loaded_after_on_an_action_that_is_not_a_reload_is_refused() -> None:
    with pytest.raises(ScenarioFileError, match="applies to a reload") as caught:
        parse_scenario(_doc(do="dispose", expect='loaded_after = "r1.finished"'), file="t.toml", fmt="toml")
    assert caught.value.key == "expect.a1.loaded_after"


@pytest.mark.parametrize(
    ("top", "expect", "failure"),
    [
        ('reload_policy = "lazy"', 'loaded_after = "r1.finished"', None),
        ("", 'loaded_after = "r1.finished"', "a1: its next generation loaded (event"),
        ("", 'loaded_before = "r1.finished"', None),
        ('reload_policy = "lazy"', 'loaded_before = "r1.finished"', "not before r1.finished"),
    ],
    ids=["lazy-after", "eager-not-after", "eager-before", "lazy-not-before"],
)
def test_a_scenario_checks_where_the_reload_loaded_its_next_generation(
    top: str, expect: str, failure: str | None
) -> None:
    report = play(parse_scenario(_doc(top=top, expect=expect), file="t.toml", fmt="toml"), timeout=10)
    if failure is None:
        assert report.passed, report.failures
    else:
        assert not report.passed and any(failure in line for line in report.failures), report.failures
    assert report.reload_policy is (LAZY if top else EAGER)
    started = [e for e in report.events if e["type"] == "instance.started"]
    assert [e["cause"] for e in started] == ["load", "previous_closed" if top else "reload"]


# --- the wire hosts -----------------------------------------------------------------------------------

CLI = (sys.executable, "-m", "run_supervisor.actors._cli")


def test_serve_says_which_reload_policy_is_in_force_in_its_ready_line() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "run_supervisor.actors._cli",
            "serve",
            "--port",
            "0",
            "--reload-policy",
            "eager",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["reload_policy"] == "eager"
        headers = {"Authorization": f"Bearer {ready['token']}"}
        with httpx.Client(base_url=ready["url"], headers=headers, timeout=10) as client:
            assert client.post("/shutdown", json={"grace_ms": 200}).json()["result"] == "forced"
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_close_over_http_takes_a_reload_policy_and_the_statistics_show_the_deferred_load() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            started = await client.post("/runs", json={"run_id": "r1", "session": "s1", "directory": "/w/a"})
            assert started.json()["result"] == "ok"
            reload = {"do": "reload", "mode": "maintenance", "origin": "ui.reload", "directory": "/w/a"}
            lazy = (await client.post("/close", json=reload)).json()
            assert lazy["result"] == "deferred"
            assert (await client.get("/statistics")).json()["loads_deferred"] == 1
            eager = (await client.post("/close", json={**reload, "reload_policy": "eager"})).json()
            assert eager["result"] == "deferred"
            stats = (await client.get("/statistics")).json()
            assert (stats["loads_deferred"], stats["instances_open"]) == (0, 3)  # /w/a 1 and 2, /w/b 1
            wrong = await client.post(
                "/close",
                json={"do": "dispose", "mode": "maintenance", "origin": "t", "reload_policy": "lazy"},
            )
            assert wrong.json()["code"] == "invalid_request" and "reload_policy" in wrong.json()["error"]

    with served() as srv:
        asyncio.run(asyncio.wait_for(scenario(srv), 45))


def test_a_stdio_sidecar_started_with_eager_reloads_loads_at_once_and_says_why() -> None:
    proc = subprocess.Popen(
        [*CLI, "stdio", "--directory", "/p/a", "--reload-policy", "eager"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    seen: list[dict[str, Any]] = []

    def ask(line: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(line) + "\n")
        proc.stdin.flush()
        while True:
            message = json.loads(proc.stdout.readline())
            seen.append(message)
            if message["type"] in ("answer", "error") and message.get("id") == line["id"]:
                return message

    try:
        ask({"id": 1, "type": "start_run", "run_id": "r1", "session": "s1", "directory": "/p/a"})
        close = {
            "type": "close",
            "do": "reload",
            "mode": "maintenance",
            "origin": "ui",
            "directories": ["/p/a"],
        }
        assert ask({"id": 2, **close})["answer"]["result"] == "deferred"
        assert ask({"id": 3, **close, "reload_policy": "lazy"})["answer"]["result"] == "deferred"
        statistics = ask({"id": 4, "type": "query", "what": "statistics"})["answer"]
        # The lazy reload closed the idle generation 2 the eager one had loaded, and defers generation 3
        # while r1 still holds generation 1: one instance open.
        assert (statistics["loads_deferred"], statistics["instances_open"]) == (1, 1)
        # Closing stdin shuts the sidecar down, and the events not read yet come before it exits (their
        # own pump writes them, not always before the answers they follow): read them all.
        rest, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0
        seen.extend(json.loads(line) for line in rest.splitlines() if line)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    events = [m["event"] for m in seen if m["type"] == "event"]
    started = [(e["generation"], e["cause"]) for e in events if e["type"] == "instance.started"]
    assert started[:2] == [(1, "load"), (2, "reload")]  # the eager one loaded generation 2 at once
    requested = [(e["do"], e["reload_policy"]) for e in events if e["type"] == "lifecycle.requested"]
    assert requested == [("reload", "eager"), ("reload", "lazy"), ("shutdown", None)]  # then stdin closed


def test_the_statistics_name_the_reload_policy_in_force() -> None:
    assert SupervisorCore().statistics().reload_policy is EAGER  # the contract's reading
    assert SupervisorCore(reload_policy=LAZY).statistics().reload_policy is LAZY
    with Supervisor.start(SupervisorConfig(shutdown_at_exit=False)) as sup:
        assert sup.statistics().reload_policy is LAZY  # the facade's default
