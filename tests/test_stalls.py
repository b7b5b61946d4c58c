"""Progress and stalls: a run that made no progress for its stall setting is flagged
stalled (an event, a field in pending actions), progress clears the flag, and one request turns the
deferred close it holds into a confirmed one."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from run_support import assert_ended
from test_stdio import Sidecar, session
from wire_support import Served, of_type, run_served, sse

from run_supervisor.actors import (
    ActionAlreadyCompleted,
    AsyncRunContext,
    AsyncSupervisor,
    Gate,
    InvalidRequest,
    NotConfirmable,
    RunContext,
    RunInterrupted,
    Supervisor,
    SupervisorConfig,
    UnknownAction,
)
from run_supervisor.actors._progress import Progress
from run_supervisor.actors.scenarios import ScenarioFileError, parse_scenario, play
from run_supervisor.actors.scenarios._format import UserAction, WhenKind
from run_supervisor.actors.testing import EventLog, simulate_crash
from run_supervisor.protocol import (
    STALL_TRANSITIONS,
    AskKind,
    AskRaised,
    CloseAction,
    CloseMode,
    CloseOutcome,
    CloseResult,
    Heartbeat,
    InterruptReason,
    LifecycleConfirmed,
    NoProgress,
    Outcome,
    PartReport,
    PartState,
    RejectCode,
    RetryReport,
    RunStalled,
    RunState,
    RunUnstalled,
    StallTrigger,
    StepKind,
    StepReport,
    WithdrawAsk,
    WithdrawReason,
)
from run_supervisor.protocol._payloads import make_payload
from run_supervisor.protocol._rules import retry_waiting, stall_applies
from run_supervisor.protocol.testing import CoreShell, InvariantChecker, InvariantViolation

MAINTENANCE = CloseMode.MAINTENANCE


def _held_by_a_reload(shell: CoreShell, run: str = "r1") -> str:
    """``run`` is active in /w/a and a maintenance reload waits for it; the reload's action id."""
    shell.start(run, directory="/w/a")
    shell.tool(run, upto=PartState.PREPARED)
    answer = shell.close(CloseAction.RELOAD, "/w/a", mode=MAINTENANCE)
    assert isinstance(answer, CloseOutcome) and answer.result is CloseResult.DEFERRED
    assert answer.action_id is not None
    return answer.action_id


# --- the core: flagging and clearing -------------------------------------------------------------------


def test_a_run_without_progress_is_flagged_stalled_and_the_close_it_holds_lists_it() -> None:
    shell = CoreShell("/w/a")
    action = _held_by_a_reload(shell)

    shell.stall("r1", idle_ms=30_000)

    event = shell.one(RunStalled, run_id="r1")
    assert (event.idle_ms, event.holding, event.session) == (30_000, (action,), "s-r1")
    (pending,) = shell.core.pending_actions()
    assert pending.blocking_runs == pending.stalled_runs == ("r1",)
    assert shell.core.run_snapshot("r1").stalled  # type: ignore[union-attr]


def test_a_second_report_of_the_same_stall_says_nothing_new() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1")
    shell.stall("r1")
    shell.stall("r1")
    assert len(shell.of(RunStalled)) == 1


@pytest.mark.parametrize(
    "progress",
    [
        StepReport("r1", "model-2", StepKind.MODEL, finished=False),
        PartReport("r1", "bash", PartState.RUNNING),
        Heartbeat("r1"),
    ],
    ids=["a step", "a tool-part change", "a heartbeat"],
)
def test_any_progress_clears_the_stall_before_it_is_announced(progress: object) -> None:
    shell = CoreShell("/w/a")
    shell.start("r1")
    shell.tool("r1", upto=PartState.PREPARED)
    shell.stall("r1")

    batch = shell.report(progress)  # type: ignore[arg-type]

    events = shell.events_in(batch)
    assert isinstance(events[0], RunUnstalled) and events[0].progress
    assert not shell.core.run_snapshot("r1").stalled  # type: ignore[union-attr]


def test_an_ask_is_progress_and_a_run_waiting_for_the_user_is_not_flagged() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1")
    shell.stall("r1")
    payload = make_payload("open_permission", title="run ls?")
    shell.report(AskRaised(run_id="r1", ask_id="r1:ask-1", kind=AskKind.PERMISSION, payload=payload))
    assert shell.of(RunUnstalled, run_id="r1")[0].progress

    shell.stall("r1")  # the user is slow, not the run

    assert len(shell.of(RunStalled)) == 1
    shell.report(WithdrawAsk(run_id="r1", ask_id="r1:ask-1", reason=WithdrawReason.TIMEOUT))
    shell.stall("r1")
    assert len(shell.of(RunStalled)) == 2


def test_only_an_active_run_is_flagged() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1", session="s")
    shell.start("r2", session="s")  # queued behind r1
    shell.stall("r2")
    shell.cancel("r1")  # interrupting: its body has not stopped yet
    shell.stall("r1")
    assert shell.of(RunStalled) == []
    assert shell.core.statistics().reports_ignored == 2


def test_an_interrupt_takes_the_flag_away_saying_it_was_not_progress() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1")
    shell.stall("r1")

    shell.cancel("r1")

    (unstalled,) = shell.of(RunUnstalled)
    assert not unstalled.progress
    assert shell.core.run_snapshot("r1").state is RunState.INTERRUPTING  # type: ignore[union-attr]
    assert not shell.core.run_snapshot("r1").stalled  # type: ignore[union-attr]


def test_the_flag_moves_are_the_rules_table() -> None:
    assert STALL_TRANSITIONS[False][StallTrigger.NO_PROGRESS] is True
    assert STALL_TRANSITIONS[True][StallTrigger.PROGRESS] is False
    assert STALL_TRANSITIONS[True][StallTrigger.LEFT_ACTIVE] is False
    assert all(not moves[StallTrigger.PROGRESS] for moves in STALL_TRANSITIONS.values())


# --- the core: confirm_close -------------------------------------------------------------------------


def test_confirm_close_interrupts_what_a_pending_maintenance_close_waits_for() -> None:
    shell = CoreShell("/w/a")
    action = _held_by_a_reload(shell)
    shell.stall("r1")

    answer = shell.confirm(action, origin="ui.stalled-prompt")

    assert isinstance(answer, CloseOutcome)
    assert (answer.result, answer.action_id, answer.interrupted_runs) == (
        CloseResult.DEFERRED,
        action,
        ("r1",),
    )
    assert not answer.completed
    confirmed = shell.one(LifecycleConfirmed, action_id=action)
    assert (confirmed.origin, confirmed.interrupted_runs) == ("ui.stalled-prompt", ("r1",))
    shell.finish("r1")
    assert_ended(
        shell.finished("r1"),
        Outcome.INTERRUPTED,
        reason=InterruptReason.LIFECYCLE_INTERRUPT,
        origin="ui.stalled-prompt",
        action_id=action,
    )
    assert shell.core.pending_actions() == ()
    shell.shutdown()
    shell.checker.finish()


def test_a_confirm_without_an_origin_names_the_close_it_serves() -> None:
    shell = CoreShell("/w/a")
    action = _held_by_a_reload(shell)
    shell.confirm(action)
    shell.finish("r1")
    assert shell.finished("r1").origin == "config.update"  # the reload's own origin


def test_a_confirmed_close_interrupts_children_with_their_parent() -> None:
    shell = CoreShell("/w/a")
    shell.start("p")
    shell.start("c", directory="/w/a", parent="p")
    action = shell.close(CloseAction.DISPOSE, "/w/a", mode=MAINTENANCE).action_id  # type: ignore[union-attr]

    answer = shell.confirm(action)

    assert set(answer.interrupted_runs) == {"p", "c"}  # type: ignore[union-attr]
    shell.finish("c")
    shell.finish("p")
    assert shell.finished("c").action_id == shell.finished("p").action_id == action
    shell.shutdown()
    shell.checker.finish()


def test_a_second_confirm_changes_nothing() -> None:
    shell = CoreShell("/w/a")
    action = _held_by_a_reload(shell)
    shell.confirm(action, origin="first")
    again = shell.confirm(action, origin="second")
    assert again.interrupted_runs == ()  # type: ignore[union-attr]
    shell.finish("r1")
    assert shell.finished("r1").origin == "first"


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        ("unknown", RejectCode.UNKNOWN_ACTION),
        ("completed", RejectCode.ACTION_ALREADY_COMPLETED),
        ("confirmed mode", RejectCode.NOT_CONFIRMABLE),
    ],
)
def test_confirm_close_rejects_what_it_cannot_confirm(setup: str, code: RejectCode) -> None:
    shell = CoreShell("/w/a")
    shell.start("r1")
    if setup == "unknown":
        action = "lc-7"
    elif setup == "completed":
        action = shell.close(CloseAction.DISPOSE, "/w/a", mode=MAINTENANCE).action_id  # type: ignore[union-attr]
        shell.finish("r1")
    else:
        shell.tool("r1", upto=PartState.PREPARED)
        action = shell.close(  # type: ignore[union-attr]
            CloseAction.DISPOSE, "/w/a", mode=CloseMode.USER_CONFIRMED_INTERRUPT
        ).action_id
    answer = shell.confirm(action)
    assert isinstance(answer, CloseOutcome)
    assert answer.rejected and answer.code is code and answer.error


def test_the_checker_catches_a_stalled_run_that_finishes_without_being_cleared() -> None:
    checker = InvariantChecker(raise_at_once=True)
    shell = CoreShell("/w/a", checker=checker)
    shell.start("r1")
    shell.stall("r1")
    checker.runs["r1"].stalled = True
    with pytest.raises(InvariantViolation, match="step of r1 while it is still flagged stalled"):
        checker._progress("r1", "a step")


# --- the shell: measuring -----------------------------------------------------------------------------


def test_a_beat_racing_a_flag_is_never_lost() -> None:
    progress = Progress()
    progress.last -= 10  # idle for ten seconds
    flagged, idle = progress.flag_if_idle(1.0)
    assert flagged and idle >= 10
    assert progress.beat()  # the first beat after the flag tells the core
    assert not progress.beat()  # later ones only record the time
    flagged, wait = progress.flag_if_idle(1.0)
    assert not flagged and 0 < wait <= 1.0


def _hung_body(gate: Gate, entered: threading.Event):
    def body(ctx: RunContext) -> None:
        with ctx.step("model"):
            entered.set()
            ctx.wait(gate)  # a provider stream that stopped: no progress
            ctx.heartbeat()  # it came back
            ctx.wait(Gate("never"), timeout=30)

    return body


def test_a_hung_body_is_flagged_after_stall_after_ms_and_confirm_close_interrupts_it() -> None:
    config = SupervisorConfig(shutdown_at_exit=False, stall_after_ms=50)
    with Supervisor.start(config, directories=["/w/a"]) as sup:
        log = EventLog(sup)
        gate, entered = Gate("stream"), threading.Event()
        handle = sup.start_run(_hung_body(gate, entered), session="s1", directory="/w/a")
        assert entered.wait(10)
        deferred = sup.close("reload", mode="maintenance", origin="models.refresh", directory="/w/a")
        assert deferred.result is CloseResult.DEFERRED and deferred.action_id is not None

        stalled = log.wait_for("run.stalled", run_id=handle.run_id, timeout=10)

        assert isinstance(stalled, RunStalled) and stalled.idle_ms >= 50
        assert stalled.holding == (deferred.action_id,)
        (pending,) = sup.pending_actions()
        assert pending.stalled_runs == (handle.run_id,)
        assert sup.run(handle.run_id).stalled  # type: ignore[union-attr]

        confirmed = sup.confirm_close(deferred.action_id, origin="user.confirmed")

        assert confirmed.interrupted_runs == (handle.run_id,)
        assert_ended(
            handle.wait(10),
            Outcome.INTERRUPTED,
            reason=InterruptReason.LIFECYCLE_INTERRUPT,
            origin="user.confirmed",
            action_id=deferred.action_id,
        )
        log.wait_for("lifecycle.completed", action_id=deferred.action_id, timeout=10)
        with pytest.raises(ActionAlreadyCompleted):
            sup.confirm_close(deferred.action_id)


def test_a_heartbeat_clears_the_flag_and_the_run_is_measured_again() -> None:
    config = SupervisorConfig(shutdown_at_exit=False, stall_after_ms=50)
    with Supervisor.start(config) as sup:
        log = EventLog(sup)
        gate, entered = Gate("stream"), threading.Event()
        handle = sup.start_run(_hung_body(gate, entered), session="s1", directory="/w/a")
        log.wait_for("run.stalled", run_id=handle.run_id, timeout=10)

        gate.open()  # the stream resumes: the body heartbeats once, then hangs again

        cleared = log.wait_for("run.unstalled", run_id=handle.run_id, timeout=10)
        assert isinstance(cleared, RunUnstalled) and cleared.progress
        again = [e for e in log.collect() if isinstance(e, RunStalled)]
        if len(again) < 2:
            log.wait_for("run.stalled", run_id=handle.run_id, seq=cleared.seq + 1, timeout=10)
        sup.cancel(handle.run_id)
        handle.wait(10)


def test_a_run_may_have_its_own_stall_setting() -> None:
    config = SupervisorConfig(shutdown_at_exit=False)  # stalls are not measured by default
    with Supervisor.start(config) as sup:
        log = EventLog(sup)
        gates = Gate("a"), Gate("b")
        entered = threading.Event(), threading.Event()
        quiet = sup.start_run(_hung_body(gates[0], entered[0]), session="s1", directory="/w/a")
        watched = sup.start_run(
            _hung_body(gates[1], entered[1]), session="s2", directory="/w/a", stall_after_ms=40
        )
        log.wait_for("run.stalled", run_id=watched.run_id, timeout=10)
        assert not sup.run(quiet.run_id).stalled  # type: ignore[union-attr]
        for handle in (quiet, watched):
            sup.cancel(handle.run_id)
            handle.wait(10)


def test_stall_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="stall_after_ms"):
        SupervisorConfig(stall_after_ms=0)
    with Supervisor.start(SupervisorConfig(shutdown_at_exit=False)) as sup:
        with pytest.raises(InvalidRequest, match="stall_after_ms"):
            sup.start_run(lambda ctx: None, session="s", directory="/w/a", stall_after_ms=0)
        with pytest.raises(InvalidRequest, match="action_id"):
            sup.confirm_close("")
        with pytest.raises(UnknownAction):
            sup.confirm_close("lc-404")


def test_a_confirmed_mode_close_is_not_confirmable() -> None:
    entered, release = threading.Event(), threading.Event()

    def body(ctx: RunContext) -> None:
        try:
            entered.set()
            ctx.wait(Gate("never"), timeout=30)
        except RunInterrupted:
            release.wait(10)  # slow to stop: the confirmed close stays pending meanwhile
            raise

    with Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/w/a"]) as sup:
        handle = sup.start_run(body, session="s", directory="/w/a")
        assert entered.wait(10)
        outcome = sup.close("dispose", mode="user_confirmed_interrupt", origin="x", directory="/w/a")
        assert outcome.action_id is not None and not outcome.completed
        try:
            with pytest.raises(NotConfirmable):
                sup.confirm_close(outcome.action_id)
        finally:
            release.set()
        handle.wait(10)


def test_the_async_facade_heartbeats_and_confirms() -> None:
    async def main() -> None:
        config = SupervisorConfig(shutdown_at_exit=False, stall_after_ms=50)
        sup = await AsyncSupervisor.start(config, directories=["/w/a"])
        try:
            log = EventLog(sup)
            resumed = asyncio.Event()

            async def body(ctx: AsyncRunContext) -> None:
                await ctx.wait(Gate("hung"), timeout=30)

            handle = await sup.start_run(body, session="s1", directory="/w/a")
            outcome = await sup.close("dispose", mode="maintenance", origin="cfg", directory="/w/a")
            await log.wait_for_async("run.stalled", run_id=handle.run_id, timeout=10)
            assert outcome.action_id is not None

            confirmed = await sup.confirm_close(outcome.action_id)

            assert confirmed.interrupted_runs == (handle.run_id,)
            ended = await handle.wait(10)
            assert ended.action_id == outcome.action_id
            resumed.set()
        finally:
            await sup.shutdown()

    asyncio.run(main())


def test_an_async_body_heartbeat_clears_its_stall() -> None:
    async def main() -> None:
        config = SupervisorConfig(shutdown_at_exit=False, stall_after_ms=50)
        sup = await AsyncSupervisor.start(config)
        try:
            log = EventLog(sup)
            gate = Gate("stream")

            async def body(ctx: AsyncRunContext) -> None:
                await ctx.wait(gate)
                ctx.heartbeat()
                await ctx.wait(Gate("never"), timeout=30)

            handle = await sup.start_run(body, session="s1", directory="/w/a")
            await log.wait_for_async("run.stalled", run_id=handle.run_id, timeout=10)
            gate.open()
            cleared = await log.wait_for_async("run.unstalled", run_id=handle.run_id, timeout=10)
            assert cleared.progress  # type: ignore[union-attr]
            await sup.cancel(handle.run_id)
            await handle.wait(10)
        finally:
            await sup.shutdown()

    asyncio.run(main())


# --- the scenario format --------------------------------------------------------------------------------

_STALL_DOC = """
name = "stall"
directories = ["/p"]
stall_after_ms = 150

[[runs]]
id = "r1"
session = "s1"
directory = "/p"
steps = [{{ kind = "model", gate = "g1", heartbeat_ms = 10 }}, {{ kind = "model", gate = "g2" }}]

[[actions]]
id = "a1"
when = "r1.started"
do = "{do}"
directory = "/p"
mode = "{mode}"

[[actions]]
id = "a2"
when = "r1.stalled"
do = "confirm"
action = "a1"

[expect.r1]
stalled = true
"""


def test_a_scenario_sets_the_stall_setting_heartbeats_and_confirms_on_a_stall() -> None:
    scenario = parse_scenario(_STALL_DOC.format(do="reload", mode="maintenance"), file="t.toml", fmt="toml")

    assert scenario.stall_after_ms == 150
    assert scenario.runs[0].steps[0].heartbeat_ms == 10
    assert scenario.runs[0].steps[1].heartbeat_ms is None
    confirm = scenario.actions[1]
    assert (confirm.do, confirm.action, confirm.origin) == (UserAction.CONFIRM, "a1", None)
    assert confirm.when.kind is WhenKind.RUN_STALLED and confirm.when.run == "r1"
    assert dict(scenario.expect[0].fields) == {"stalled": True}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            ('directory = "/p"\nmode = "maintenance"', 'run = "r1"\nmode = "maintenance"'),
            "does not take this key",
        ),
        (
            ('do = "reload"\ndirectory = "/p"\nmode = "maintenance"', 'do = "cancel"\nrun = "r1"'),
            "is not a close",
        ),
        (('action = "a1"', 'action = "a9"'), "names no other action"),
    ],
    ids=["a cancel with a close's keys", "a cancel", "no such action"],
)
def test_a_scenario_confirm_names_a_close_of_the_file(change: tuple[str, str], problem: str) -> None:
    text = _STALL_DOC.format(do="reload", mode="maintenance").replace(*change)
    with pytest.raises(ScenarioFileError, match=problem):
        parse_scenario(text, file="t.toml", fmt="toml")


_CONFIRM_A_CONFIRMED_CLOSE = """
name = "a confirm of a close that is not a maintenance one"
directories = ["/p"]

[[runs]]
id = "r1"
session = "s1"
directory = "/p"
steps = [{ kind = "model", id = "w", gate = "g", ignores_cancel = true }]

[[actions]]
id = "u"
when = "r1.w.started"
do = "dispose"
directory = "/p"
mode = "user_confirmed_interrupt"

[[actions]]
id = "cu"
when = "u.interrupted"
do = "confirm"
action = "u"

[[actions]]
when = "cu.rejected"
do = "open_gate"
gate = "g"

[expect.cu]
result = "rejected"
code = "not_confirmable"
"""


def test_a_scenario_confirm_of_a_close_in_another_mode_plays_and_is_rejected_not_confirmable() -> None:
    report = play(parse_scenario(_CONFIRM_A_CONFIRMED_CLOSE, file="t.toml", fmt="toml"), timeout=20)

    assert report.passed, report.failures
    r1 = report.runs["r1"]
    assert (r1.reason, r1.action) == (InterruptReason.LIFECYCLE_INTERRUPT, "u")


def test_a_played_scenario_reports_the_stall_and_the_confirmed_interrupt() -> None:
    text = _STALL_DOC.format(do="reload", mode="maintenance").replace(
        'steps = [{ kind = "model", gate = "g1", heartbeat_ms = 10 }, { kind = "model", gate = "g2" }]',
        'steps = [{ kind = "model", gate = "g2" }]',
    )
    text += '\n[[actions]]\nwhen = "a1.completed"\ndo = "open_gate"\ngate = "g2"\n'
    text += '\n[expect.a2]\nresult = "deferred"\ninterrupted_runs = ["r1"]\n'
    report = play(parse_scenario(text, file="t.toml", fmt="toml"), timeout=20)

    assert report.passed, report.failures
    r1 = report.runs["r1"]
    assert (r1.reason, r1.origin, r1.action, r1.stalled) == (
        InterruptReason.LIFECYCLE_INTERRUPT,
        "reload",  # the confirm gives no origin: the close's own (a reload's default origin in a file)
        "a1",
        True,
    )


def test_a_run_that_stalled_before_a_crash_is_recovered_as_crashed(
    tmp_path: Path, opened: list[Supervisor]
) -> None:
    journal = tmp_path / "runs.journal"
    config = SupervisorConfig(shutdown_at_exit=False, stall_after_ms=40)
    first = Supervisor.start(config, journal=journal, directories=["/w/a"])
    opened.append(first)
    log = EventLog(first)
    gate, entered = Gate("stream"), threading.Event()
    first.start_run(_hung_body(gate, entered), session="s1", directory="/w/a", run_id="r1")
    first.close("dispose", mode="maintenance", origin="cfg", directory="/w/a")
    log.wait_for("run.stalled", run_id="r1", timeout=10)
    log.close()
    simulate_crash(first)
    second = Supervisor.start(config, journal=journal)
    opened.append(second)
    (recovered,) = second.recovered()
    assert (recovered.run_id, recovered.reason) == ("r1", InterruptReason.CRASH)
    assert not second.run("r1").stalled  # type: ignore[union-attr]
    assert second.pending_actions() == ()


# --- over the wire ---------------------------------------------------------------------------------------


def test_over_http_a_progress_heartbeat_clears_a_stall_and_a_confirm_interrupts_stalled_runs() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            for run_id in ("r1", "r2"):
                started = await client.post(
                    "/runs", json={"run_id": run_id, "session": f"s-{run_id}", "directory": "/w/a"}
                )
                assert started.status_code == 201, started.text
            stalled = {(await events.until(of_type("run.stalled"))).data["run_id"] for _ in range(2)}
            assert stalled == {"r1", "r2"}
            beat = await client.post("/runs/r2/reports", json={"type": "heartbeat", "progress": True})
            assert beat.status_code == 200
            cleared = await events.until(of_type("run.unstalled", run_id="r2"))
            assert cleared.data["progress"] is True
            close = await client.post(
                "/close", json={"do": "dispose", "mode": "maintenance", "origin": "t", "directory": "/w/a"}
            )
            action_id = close.json()["action_id"]
            assert (await client.post("/actions/lc-404/confirm", json={})).status_code == 404
            confirmed = await client.post(f"/actions/{action_id}/confirm", json={"origin": "ui"})
            assert confirmed.status_code == 200, confirmed.text
            assert sorted(confirmed.json()["interrupted_runs"]) == ["r1", "r2"]
            notice = await events.until(of_type("external.interrupt", run_id="r1"))
            assert (notice.data["reason"], notice.data["action_id"]) == ("lifecycle_interrupt", action_id)

    run_served(
        scenario,
        within=30,
        directories=("/w/a",),
        config=SupervisorConfig(shutdown_at_exit=False, stall_after_ms=60),
    )


def test_stdio_takes_a_stall_setting_and_a_confirm_close_line() -> None:
    async def scenario(car: Sidecar) -> None:
        await car.send({"id": 1, "type": "start_run", "run_id": "r1", "session": "s1", "directory": "/p/a"})
        await car.send(
            {"id": 2, "type": "close", "do": "dispose_all", "mode": "maintenance", "origin": "cfg"}
        )
        close = await car.answer(2)
        await car.event("run.stalled")
        await car.send({"id": 3, "type": "confirm_close", "action_id": close["answer"]["action_id"]})
        assert (await car.answer(3))["answer"]["interrupted_runs"] == ["r1"]
        notice = await car.event("external.interrupt")
        assert notice["reason"] == "lifecycle_interrupt"
        await car.send({"id": 4, "type": "report", "run_id": "r1", "report": {"type": "end"}})
        finished = await car.event("run.finished")
        assert finished["reason"] == "lifecycle_interrupt"
        assert car.proc.stdin is not None
        car.proc.stdin.close()

    assert session(scenario, "--directory", "/p/a", "--stall-after-ms", "60") == 0


def test_a_parent_whose_body_ended_waits_for_its_children_and_is_not_flagged() -> None:
    shell = CoreShell("/w/a")
    shell.start("p")
    shell.start("c", directory="/w/a", parent="p")
    shell.finish("p")  # its body returned: it finishes with its last child

    shell.stall("p")
    shell.stall("c")

    assert [e.run_id for e in shell.of(RunStalled)] == ["c"]


# --- a child's progress and user-waits count for its ancestors; a retry's backoff is a wait ----------


def test_a_parent_whose_child_waits_for_the_user_is_not_flagged_stalled() -> None:
    shell = CoreShell("/w/a")
    shell.start("p")
    shell.start("c", parent="p")
    shell.ask("c")  # the subagent's tool waits for the user's permission; the parent waits for it

    shell.stall("p")
    shell.stall("c")

    assert shell.of(RunStalled) == []


def test_a_parent_is_flagged_only_once_none_of_its_children_works() -> None:
    shell = CoreShell("/w/a")
    shell.start("p")
    shell.start("c", parent="p")

    shell.stall("p")  # blocked in the child's wait while the child works: not stuck itself
    assert shell.of(RunStalled) == []
    shell.stall("c")
    shell.stall("p")  # its only child is stuck: so is the tree

    assert [e.run_id for e in shell.of(RunStalled)] == ["c", "p"]


def test_a_childs_progress_clears_its_stalled_ancestors_before_it_is_announced() -> None:
    shell = CoreShell("/w/a")
    shell.start("p")
    shell.start("c", parent="p")
    shell.start("g", parent="c")
    for run in ("g", "c", "p"):
        shell.stall(run)
    assert [e.run_id for e in shell.of(RunStalled)] == ["g", "c", "p"]

    batch = shell.report(StepReport("g", "model-1", StepKind.MODEL, finished=False))

    unstalled = [e for e in shell.events_in(batch) if isinstance(e, RunUnstalled)]
    assert [(e.run_id, e.progress) for e in unstalled] == [("g", True), ("c", True), ("p", True)]
    assert not any(shell.core.run_snapshot(r).stalled for r in ("g", "c", "p"))  # type: ignore[union-attr]


def test_a_child_starting_is_progress_of_its_stalled_parent() -> None:
    shell = CoreShell("/w/a")
    shell.start("p")
    shell.stall("p")

    shell.start("c", parent="p")

    assert [e.run_id for e in shell.of(RunUnstalled)] == ["p"]


def test_the_checker_catches_a_parent_flagged_while_its_child_waits_for_the_user() -> None:
    checker = InvariantChecker(raise_at_once=True)
    shell = CoreShell("/w/a", checker=checker)
    shell.start("p")
    shell.start("c", parent="p")
    shell.ask("c")
    with pytest.raises(InvariantViolation, match="flagged stalled while its child c works"):
        checker._run_stalled(RunStalled(seq=999, run_id="p", session="s-p", idle_ms=1, holding=()))


def test_the_checker_catches_a_childs_step_while_its_parent_is_still_flagged() -> None:
    checker = InvariantChecker(raise_at_once=True)
    shell = CoreShell("/w/a", checker=checker)
    shell.start("p")
    shell.start("c", parent="p")
    checker.runs["p"].stalled = True
    with pytest.raises(InvariantViolation, match="ancestor p is still flagged stalled"):
        checker._progress("c", "a step")


def test_a_run_waiting_out_its_announced_retry_is_not_flagged_until_the_next_attempt_is_due() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1")
    shell.report(RetryReport(run_id="r1", attempt=1, message="529 overloaded", next_at_ms=10_000))

    shell.report(NoProgress(run_id="r1", idle_ms=5_000, now_ms=9_999))  # backing off: waiting, not stuck
    assert shell.of(RunStalled) == []
    shell.report(NoProgress(run_id="r1", idle_ms=5_000, now_ms=10_000))  # the attempt is due: normal timing

    assert [e.run_id for e in shell.of(RunStalled)] == ["r1"]


def test_a_retry_without_a_next_attempt_time_does_not_hold_off_a_stall() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1")
    shell.report(RetryReport(run_id="r1", attempt=1, message="stream reset"))

    shell.report(NoProgress(run_id="r1", idle_ms=5_000, now_ms=1))

    assert [e.run_id for e in shell.of(RunStalled)] == ["r1"]


def test_the_stall_rule_is_a_table_of_what_a_run_waits_for() -> None:
    assert stall_applies(RunState.ACTIVE, 0)
    assert not stall_applies(RunState.ACTIVE, 1)
    assert not stall_applies(RunState.ACTIVE, 0, body_ended=True)
    assert not stall_applies(RunState.ACTIVE, 0, working_children=1)
    assert not stall_applies(RunState.ACTIVE, 0, retry_waiting=True)
    assert (retry_waiting(10, 9), retry_waiting(10, 10), retry_waiting(None, 1), retry_waiting(10, None)) == (
        True,
        False,
        False,
        True,
    )


def test_a_body_backing_off_its_announced_retry_is_flagged_only_after_the_next_attempt_is_due() -> None:
    config = SupervisorConfig(shutdown_at_exit=False, stall_after_ms=50)
    with Supervisor.start(config, directories=["/w/a"]) as sup:
        log = EventLog(sup)
        gate, announced = Gate("backoff"), threading.Event()
        next_at: list[float] = []

        def body(ctx: RunContext) -> None:
            with ctx.step("model"):
                next_at.append(time.time() + 0.6)
                ctx.retrying(1, "529 overloaded", next_at[0])
                announced.set()
                ctx.wait(gate)  # the backoff, then an attempt that hangs

        handle = sup.start_run(body, session="s1", directory="/w/a")
        assert announced.wait(10)

        log.wait_for("run.stalled", run_id=handle.run_id, timeout=10)

        assert time.time() >= next_at[0]  # never while it waited out the backoff it announced
        gate.open()
        handle.wait(10)
