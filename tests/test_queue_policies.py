"""Queue policies: per start or per session, what a start does while its session is
busy -- queue, coalesce into the pending follow-up, or be rejected -- and ``await_idle`` for hosts."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import httpx
import pytest
from run_support import assert_ended
from wire_support import served

from run_supervisor.actors import (
    AsyncSupervisor,
    Gate,
    InvalidRequest,
    RunContext,
    SessionBusy,
    Supervisor,
    SupervisorConfig,
    SupervisorTimeout,
)
from run_supervisor.actors._view import View
from run_supervisor.actors.hosts import WireHost
from run_supervisor.actors.hosts._stdio import _dispatch
from run_supervisor.actors.hosts._wire import STATUS_BY_CODE, HostError
from run_supervisor.actors.testing import EventLog, simulate_crash
from run_supervisor.protocol import (
    QUEUE_RULES,
    CloseAction,
    CloseMode,
    InterruptReason,
    Outcome,
    QueuedFate,
    QueuePolicy,
    QueueRule,
    RejectCode,
    RequestResult,
    RunFinished,
    RunQueued,
    RunStarted,
    SessionSnapshot,
    SessionStatus,
    SetQueuePolicy,
    StartRun,
    SupervisorCore,
    WhenBusy,
)
from run_supervisor.protocol import _core as core_module
from run_supervisor.protocol.testing import CoreShell, InvariantChecker, InvariantViolation

COALESCE, QUEUE, REJECT = QueuePolicy.COALESCE, QueuePolicy.QUEUE, QueuePolicy.REJECT_IF_BUSY


def _start(shell: CoreShell, run: str, policy: QueuePolicy | None = None, session: str = "s1") -> object:
    return shell.request(StartRun(run_id=run, session=session, directory="/w/a", queue_policy=policy))


def _behind_r1(**follow_ups: QueuePolicy | None) -> CoreShell:
    """A core whose session s1 runs r1, then sent a start for each follow-up: run id=its queue policy."""
    shell = CoreShell("/w/a")
    for run in ("r1", *follow_ups):
        _start(shell, run, follow_ups.get(run))
    return shell


def _queued(shell: CoreShell, session: str = "s1") -> tuple[str, ...]:
    snapshot = shell.core.session_snapshot(session)
    assert snapshot is not None
    return snapshot.queued


# --- queue: today's behaviour, the default -----------------------------------------------------------


def test_a_start_in_a_busy_session_queues_first_in_first_out_by_default() -> None:
    shell = CoreShell("/w/a")
    for run in ("r1", "r2", "r3"):
        _start(shell, run)

    assert _queued(shell) == ("r2", "r3")
    assert [e.queue_policy for e in shell.of(RunQueued)] == [QUEUE, QUEUE]
    shell.finish("r1")
    shell.finish("r2")
    assert [e.run_id for e in shell.of(RunStarted)] == ["r1", "r2", "r3"]


def test_a_queued_run_is_kept_when_the_active_run_is_interrupted_and_starts_next() -> None:
    shell = _behind_r1(r2=QUEUE)

    shell.cancel("r1")
    assert _queued(shell) == ("r2",)
    shell.finish("r1")

    assert shell.one(RunStarted, run_id="r2").generation == 1


# --- coalesce -----------------------------------------------------------------------------------------


def test_a_coalesce_start_replaces_the_queued_follow_up_which_ends_coalesced_naming_its_replacement() -> None:
    shell = _behind_r1(r2=COALESCE, r3=COALESCE)

    replaced = shell.finished("r2")
    assert_ended(replaced, Outcome.INTERRUPTED, reason=InterruptReason.COALESCED, origin="r3")
    assert replaced.generation is None  # it never started
    assert shell.seq(RunFinished, run_id="r2") < shell.seq(RunQueued, run_id="r3")
    assert _queued(shell) == ("r3",)
    shell.finish("r1")
    assert shell.one(RunStarted, run_id="r3").generation == 1


def test_a_session_never_holds_two_queued_coalesce_runs() -> None:
    shell = _behind_r1()
    for n in range(2, 12):
        _start(shell, f"r{n}", COALESCE)
        assert _queued(shell) == (f"r{n}",)

    assert [e.origin for e in shell.of(RunFinished)] == [f"r{n}" for n in range(3, 12)]


def test_a_coalesce_start_leaves_runs_queued_under_queue_alone() -> None:
    shell = _behind_r1(q1=QUEUE, c1=COALESCE, q2=QUEUE, c2=COALESCE)

    assert _queued(shell) == ("q1", "q2", "c2")  # the new one joins the back
    assert shell.finished("c1").origin == "c2"


def test_a_coalesce_start_in_an_idle_session_starts_at_once() -> None:
    shell = CoreShell("/w/a")
    _start(shell, "r1", COALESCE)

    assert shell.one(RunStarted, run_id="r1").session == "s1"
    assert shell.of(RunQueued) == []


def test_interrupting_the_active_run_drops_its_coalesce_follow_up_and_keeps_queue_ones() -> None:
    shell = _behind_r1(q1=QUEUE, c1=COALESCE)

    shell.cancel("r1", origin="stop-button", tag="ui-7")

    dropped = shell.finished("c1")
    assert (dropped.reason, dropped.origin, dropped.action_id) == (InterruptReason.DROPPED, "r1", "ui-7")
    assert _queued(shell) == ("q1",)
    shell.finish("r1")
    assert shell.finished("r1").action_id == "ui-7"
    assert shell.one(RunStarted, run_id="q1").session == "s1"


def test_a_follow_up_started_after_the_interrupt_is_kept_and_starts_next() -> None:
    shell = _behind_r1(old=COALESCE)
    shell.cancel("r1")  # drops "old"
    _start(shell, "new", COALESCE)  # the user typed again while r1 stops

    shell.finish("r1")

    assert shell.finished("old").reason is InterruptReason.DROPPED
    assert shell.one(RunStarted, run_id="new").session == "s1"


def test_a_confirmed_close_that_interrupts_the_active_run_drops_the_follow_up_naming_its_action() -> None:
    shell = _behind_r1(c1=COALESCE)

    answer = shell.close(CloseAction.RELOAD, "/w/a", mode=CloseMode.USER_CONFIRMED_INTERRUPT)

    assert answer.interrupted_runs == ("r1",)
    dropped = shell.finished("c1")
    assert (dropped.reason, dropped.origin, dropped.action_id) == (
        InterruptReason.DROPPED,
        "r1",
        answer.action_id,
    )


def test_a_run_that_completes_or_fails_drops_nothing() -> None:
    shell = _behind_r1(c1=COALESCE)
    shell.finish("r1", error="provider down")
    _start(shell, "c2", COALESCE)  # queued behind c1, now active: nothing of c1 is replaced
    shell.finish("c1")

    assert shell.finished("r1").outcome is Outcome.FAILED
    assert shell.finished("c1").outcome is Outcome.COMPLETED
    assert shell.one(RunStarted, run_id="c2").session == "s1"


def test_interrupting_a_parent_drops_the_coalesce_follow_up_queued_in_its_childs_session() -> None:
    shell = CoreShell("/w/a")
    shell.start("parent", session="main")
    shell.start("child", session="sub", parent="parent")
    _start(shell, "next", COALESCE, session="sub")

    shell.cancel("parent", tag="c1")

    dropped = shell.finished("next")
    assert (dropped.reason, dropped.origin, dropped.action_id) == (InterruptReason.DROPPED, "child", "c1")


def test_a_shutdown_ends_queued_follow_ups_with_its_own_reason() -> None:
    shell = _behind_r1(c1=COALESCE)

    shell.shutdown()

    assert shell.finished("c1").reason is InterruptReason.SHUTDOWN


# --- reject_if_busy -----------------------------------------------------------------------------------


def test_a_reject_if_busy_start_in_a_busy_session_is_rejected_session_busy_and_changes_nothing() -> None:
    shell = _behind_r1(r2=None)
    before = (shell.core.statistics(), shell.core.session_snapshot("s1"), len(shell.events))

    answer = _start(shell, "r3", REJECT)

    assert answer is not None and answer.code is RejectCode.SESSION_BUSY  # type: ignore[attr-defined]
    assert "'r1'" in answer.error  # type: ignore[attr-defined]
    assert (shell.core.statistics(), shell.core.session_snapshot("s1"), len(shell.events)) == before
    assert shell.core.run_snapshot("r3") is None
    assert _start(shell, "r3") is not None  # the id was not taken: it may be started again
    assert STATUS_BY_CODE[RejectCode.SESSION_BUSY] == 409


def test_a_reject_if_busy_start_in_an_idle_session_runs_at_once() -> None:
    shell = CoreShell("/w/a")
    _start(shell, "r1", REJECT)
    shell.finish("r1")
    _start(shell, "r2", REJECT)  # idle again: accepted

    assert [e.run_id for e in shell.of(RunStarted)] == ["r1", "r2"]


def test_a_start_is_rejected_while_the_active_run_is_still_being_interrupted() -> None:
    shell = _behind_r1()
    shell.cancel("r1")

    answer = _start(shell, "r2", REJECT)

    assert answer is not None and answer.code is RejectCode.SESSION_BUSY  # type: ignore[attr-defined]


# --- the session's default ----------------------------------------------------------------------------


def test_the_session_default_applies_to_starts_that_name_none_and_a_start_overrides_it() -> None:
    shell = CoreShell("/w/a")
    assert shell.request(SetQueuePolicy(session="s1", queue_policy=REJECT)).result is RequestResult.OK  # type: ignore[union-attr]
    assert shell.core.session_snapshot("s1").queue_policy is REJECT  # type: ignore[union-attr]
    _start(shell, "r1")

    refused = _start(shell, "r2")
    accepted = _start(shell, "r3", QUEUE)

    assert refused.code is RejectCode.SESSION_BUSY  # type: ignore[union-attr]
    assert accepted.result is RequestResult.OK  # type: ignore[union-attr]
    assert _queued(shell) == ("r3",)
    assert _start(shell, "other", session="s2").result is RequestResult.OK  # type: ignore[union-attr]


def test_setting_queue_restores_the_default_and_queued_runs_keep_their_policy() -> None:
    shell = CoreShell("/w/a")
    shell.request(SetQueuePolicy(session="s1", queue_policy=COALESCE))
    _start(shell, "r1")
    _start(shell, "c1")  # coalesce, by the session's default
    shell.request(SetQueuePolicy(session="s1", queue_policy=QUEUE))
    _start(shell, "q1")

    assert [e.queue_policy for e in shell.of(RunQueued)] == [COALESCE, QUEUE]
    assert shell.core._policies == {}  # back to the default: nothing remembered
    shell.cancel("r1")
    assert shell.finished("c1").reason is InterruptReason.DROPPED
    assert _queued(shell) == ("q1",)


def test_a_session_default_outlives_the_session_being_forgotten() -> None:
    shell = CoreShell("/w/a", core=SupervisorCore(retain_finished=1))
    shell.request(SetQueuePolicy(session="s1", queue_policy=REJECT))
    _start(shell, "r1")
    shell.finish("r1")
    for n in range(3):  # other sessions go idle: s1 is forgotten
        _start(shell, f"o{n}", session=f"other{n}")
        shell.finish(f"o{n}")
    assert "s1" not in shell.core._sessions

    _start(shell, "r2")
    assert _start(shell, "r3").code is RejectCode.SESSION_BUSY  # type: ignore[union-attr]


def test_an_unknown_session_with_a_default_shows_idle_with_its_policy() -> None:
    shell = CoreShell("/w/a")
    assert shell.core.session_snapshot("s9") is None
    shell.request(SetQueuePolicy(session="s9", queue_policy=COALESCE))

    snapshot = shell.core.session_snapshot("s9")

    assert snapshot is not None
    assert (snapshot.status, snapshot.active, snapshot.queued, snapshot.queue_policy) == (
        SessionStatus.IDLE,
        None,
        (),
        COALESCE,
    )


# --- the rules are data -------------------------------------------------------------------------------


def test_each_policy_has_one_rule_and_the_documented_fates() -> None:
    assert set(QUEUE_RULES) == set(QueuePolicy)
    assert QUEUE_RULES[QUEUE] == QueueRule(when_busy=WhenBusy.QUEUE, on_interrupt=QueuedFate.KEEP)
    assert QUEUE_RULES[COALESCE] == QueueRule(when_busy=WhenBusy.REPLACE, on_interrupt=QueuedFate.DROP)
    assert QUEUE_RULES[REJECT].when_busy is WhenBusy.REJECT


def test_the_core_only_looks_the_rules_up(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = dict(QUEUE_RULES)
    rules[QUEUE] = QueueRule(when_busy=WhenBusy.QUEUE, on_interrupt=QueuedFate.DROP)
    monkeypatch.setattr(core_module, "QUEUE_RULES", rules)
    shell = CoreShell("/w/a", checker=InvariantChecker(raise_at_once=False))
    _start(shell, "r1")
    _start(shell, "q1", QUEUE)

    shell.cancel("r1")

    assert shell.finished("q1").reason is InterruptReason.DROPPED


# --- the invariant checker knows the policies ---------------------------------------------------------


def test_the_checker_catches_a_second_queued_coalesce_run() -> None:
    shell = CoreShell("/w/a")
    shell.core._coalesce = lambda session, run, tag: None  # type: ignore[method-assign]
    _start(shell, "r1")
    _start(shell, "c1", COALESCE)

    with pytest.raises(InvariantViolation, match="still queued"):
        _start(shell, "c2", COALESCE)


def test_the_checker_catches_a_follow_up_kept_after_the_interrupt() -> None:
    shell = CoreShell("/w/a")
    shell.core._drop_follow_ups = lambda run, action: None  # type: ignore[method-assign]
    _start(shell, "r1")
    _start(shell, "c1", COALESCE)

    with pytest.raises(InvariantViolation, match="still queued after r1"):
        shell.cancel("r1")


def test_the_checker_catches_a_queued_reject_if_busy_run() -> None:
    checker = InvariantChecker(raise_at_once=True)
    rules = dict(QUEUE_RULES)
    rules[REJECT] = QUEUE_RULES[QUEUE]
    shell = CoreShell("/w/a", checker=checker)
    _start(shell, "r1")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core_module, "QUEUE_RULES", rules)
        with pytest.raises(InvariantViolation, match="queued under reject_if_busy"):
            _start(shell, "r2", REJECT)


# --- through the facade -------------------------------------------------------------------------------


def _config() -> SupervisorConfig:
    return SupervisorConfig(shutdown_at_exit=False)


def _waiting(gate: Gate, started: threading.Event | None = None) -> object:
    def body(ctx: RunContext) -> None:
        if started is not None:
            started.set()
        with ctx.step("model"):
            ctx.wait(gate)

    return body


def test_start_run_takes_a_queue_policy_and_a_busy_session_raises_session_busy() -> None:
    gate = Gate("g")
    with Supervisor.start(_config(), directories=["/w/a"]) as sup:
        first = sup.start_run(_waiting(gate), session="s", directory="/w/a")  # type: ignore[arg-type]
        pending = sup.start_run(_waiting(gate), session="s", directory="/w/a", queue_policy="coalesce")  # type: ignore[arg-type]
        latest = sup.start_run(_waiting(gate), session="s", directory="/w/a", queue_policy=COALESCE)  # type: ignore[arg-type]
        with pytest.raises(SessionBusy, match="busy"):
            sup.start_run(_waiting(gate), session="s", directory="/w/a", queue_policy="reject_if_busy")  # type: ignore[arg-type]

        replaced = pending.wait(10)
        assert (replaced.reason, replaced.origin) == (InterruptReason.COALESCED, latest.run_id)
        gate.open()
        assert first.wait(10).outcome is Outcome.COMPLETED
        assert latest.wait(10).outcome is Outcome.COMPLETED


def test_set_queue_policy_sets_the_sessions_default_and_the_snapshot_shows_it() -> None:
    gate = Gate("g")
    with Supervisor.start(_config(), directories=["/w/a"]) as sup:
        sup.set_queue_policy("s", "reject_if_busy")
        assert sup.session("s").queue_policy is REJECT  # type: ignore[union-attr]
        sup.start_run(_waiting(gate), session="s", directory="/w/a")  # type: ignore[arg-type]
        with pytest.raises(SessionBusy):
            sup.start_run(_waiting(gate), session="s", directory="/w/a")  # type: ignore[arg-type]
        gate.open()


@pytest.mark.parametrize("bad", ["fifo", "", 3, None, QueuePolicy])
def test_a_bad_queue_policy_is_refused_naming_the_argument(bad: object) -> None:
    with Supervisor.start(_config()) as sup:
        with pytest.raises(InvalidRequest, match="queue_policy"):
            sup.set_queue_policy("s", bad)  # type: ignore[arg-type]
        if bad is not None:
            with pytest.raises(InvalidRequest, match="queue_policy"):
                sup.start_run(lambda ctx: None, session="s", directory="/w/a", queue_policy=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest, match="session"):
            sup.set_queue_policy("", "queue")
        raw = sup.submit(StartRun(run_id="x", session="s", directory="/w/a", queue_policy="fifo")).result(10)  # type: ignore[arg-type]
        assert raw.code is RejectCode.INVALID_REQUEST and "queue_policy" in (raw.error or "")


def test_await_idle_returns_at_once_for_an_idle_or_unknown_session() -> None:
    with Supervisor.start(_config(), directories=["/w/a"]) as sup:
        assert sup.await_idle("never-seen", timeout=0) is None
        sup.start_run(lambda ctx: None, session="s", directory="/w/a").wait(10)

        snapshot = sup.await_idle("s", timeout=0)

        assert snapshot is not None and snapshot.status is SessionStatus.IDLE


def test_await_idle_returns_once_the_active_and_the_queued_runs_have_finished() -> None:
    gate = Gate("g")
    with Supervisor.start(_config(), directories=["/w/a"]) as sup:
        sup.start_run(_waiting(gate), session="s", directory="/w/a")  # type: ignore[arg-type]
        last = sup.start_run(lambda ctx: None, session="s", directory="/w/a")
        result: list[object] = []
        waiter = threading.Thread(target=lambda: result.append(sup.await_idle("s", timeout=30)))
        waiter.start()

        gate.open()
        waiter.join(30)

        assert not waiter.is_alive()
        snapshot = result[0]
        assert snapshot is not None and snapshot.status is SessionStatus.IDLE  # type: ignore[attr-defined]
        assert sup.run(last.run_id).outcome is Outcome.COMPLETED  # type: ignore[union-attr]


def test_await_idle_times_out_naming_what_still_runs_and_leaves_no_waiter() -> None:
    gate = Gate("g")
    with Supervisor.start(_config(), directories=["/w/a"]) as sup:
        first = sup.start_run(_waiting(gate), session="s", directory="/w/a")  # type: ignore[arg-type]
        sup.start_run(_waiting(gate), session="s", directory="/w/a")  # type: ignore[arg-type]

        with pytest.raises(
            SupervisorTimeout, match=rf"session 's' was still busy .*{first.run_id}.*1 queued"
        ):
            sup.await_idle("s", timeout=0.05)

        assert sup._view._idle_waiters == {}
        gate.open()
        assert sup.await_idle("s", timeout=30) is not None


def test_async_await_idle_waits_without_blocking_the_loop() -> None:
    async def main() -> None:
        async with AsyncSupervisor.start(_config(), directories=["/w/a"]) as sup:
            release = asyncio.Event()

            async def body(ctx: object) -> None:
                await release.wait()

            await sup.start_run(body, session="s", directory="/w/a")
            await sup.start_run(body, session="s", directory="/w/a", queue_policy="coalesce")
            idle = asyncio.create_task(sup.await_idle("s", timeout=30))
            await asyncio.sleep(0)
            assert not idle.done()
            release.set()  # runs only if await_idle left the loop free

            snapshot = await idle
            assert snapshot is not None and snapshot.status is SessionStatus.IDLE
            with pytest.raises(SessionBusy):
                release.clear()
                await sup.start_run(body, session="s", directory="/w/a")
                await sup.start_run(body, session="s", directory="/w/a", queue_policy="reject_if_busy")
            with pytest.raises(SupervisorTimeout, match="still busy"):
                await sup.await_idle("s", timeout=0.05)
            assert sup.sync._view._idle_waiters == {}
            await sup.set_queue_policy("s", QueuePolicy.COALESCE)
            assert (await sup.session("s")).queue_policy is COALESCE  # type: ignore[union-attr]
            release.set()
            assert await sup.await_idle("s", timeout=30) is not None

    asyncio.run(main())


# --- over the wire ------------------------------------------------------------------------------------


def test_over_http_a_session_default_and_a_start_policy_reach_external_runs() -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        policy = await client.put("/sessions/chat/queue_policy", json={"queue_policy": "reject_if_busy"})
        assert policy.status_code == 200, policy.text
        first = await client.post("/runs", json={"run_id": "e1", "session": "chat", "directory": "/w/a"})
        assert first.status_code == 201, first.text
        busy = await client.post("/runs", json={"run_id": "e2", "session": "chat", "directory": "/w/a"})
        assert (busy.status_code, busy.json()["code"]) == (409, "session_busy")
        queued = await client.post(
            "/runs", json={"run_id": "e3", "session": "chat", "directory": "/w/a", "queue_policy": "coalesce"}
        )
        assert queued.status_code == 201, queued.text
        session = (await client.get("/sessions/chat")).json()
        assert (session["queue_policy"], session["queued"]) == ("reject_if_busy", ["e3"])
        bad = await client.put("/sessions/chat/queue_policy", json={"queue_policy": "fifo"})
        assert bad.status_code == 422
        later = {"run_id": "e4", "session": "chat", "directory": "/w/a", "queue_policy": "coalesce"}
        assert (await client.post("/runs", json=later)).status_code == 201
        replaced = (await client.get("/runs/e3")).json()
        assert (replaced["reason"], replaced["origin"]) == ("coalesced", "e4")

    with served() as srv:

        async def main() -> None:
            async with srv.client() as client:
                await scenario(client)
            assert not srv.host.external.is_external("e2")  # the rejected start left nothing behind

        asyncio.run(asyncio.wait_for(main(), 45))


# --- a crash ------------------------------------------------------------------------------------------


def test_a_crash_with_coalesced_dropped_and_queued_follow_ups_recovers_only_the_unfinished_runs(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "runs.journal"
    gate = Gate("never")
    sup = Supervisor.start(_config(), journal=journal, directories=["/w/a"])
    log = EventLog(sup)
    sup.start_run(_waiting(gate), session="s1", directory="/w/a", run_id="r1")  # type: ignore[arg-type]
    sup.start_run(_waiting(gate), session="s1", directory="/w/a", run_id="c1", queue_policy="coalesce")  # type: ignore[arg-type]
    sup.start_run(_waiting(gate), session="s1", directory="/w/a", run_id="c2", queue_policy="coalesce")  # type: ignore[arg-type]
    sup.start_run(_waiting(gate), session="s1", directory="/w/a", run_id="q1")  # type: ignore[arg-type]
    sup.start_run(_waiting(gate), session="s2", directory="/w/a", run_id="a2")  # type: ignore[arg-type]
    sup.start_run(_waiting(gate), session="s2", directory="/w/a", run_id="d2", queue_policy="coalesce")  # type: ignore[arg-type]
    sup.cancel("a2")  # d2 is dropped at once; a2 stops
    log.wait_for("run.finished", run_id="a2")
    log.wait_for("run.queued", run_id="q1")
    log.close()
    simulate_crash(sup)

    after = Supervisor.start(_config(), journal=journal)
    try:
        recovered = {r.run_id: r for r in after.recovered()}
        assert sorted(recovered) == ["c2", "q1", "r1"]  # the active run and the two still queued
        assert all(r.reason is InterruptReason.CRASH for r in recovered.values())
        assert recovered["c2"].generation is None and recovered["q1"].generation is None
        with sqlite3.connect(journal) as db:  # the queue policy's decisions were journaled as endings
            rows = db.execute("SELECT run_id, state, reason, origin FROM runs WHERE run_id IN ('c1', 'd2')")
            ended = {row[0]: row[1:] for row in rows}
        assert ended == {"c1": ("finished", "coalesced", "c2"), "d2": ("finished", "dropped", "a2")}
        idle = after.await_idle("s1", timeout=0)  # known and idle: nothing queued behind the crash
        assert idle is not None and idle.status is SessionStatus.IDLE and not idle.queued
        after.start_run(
            lambda ctx: None, session="s1", directory="/w/a", run_id="c3", queue_policy="coalesce"
        )
        assert after.await_idle("s1", timeout=30) is not None
    finally:
        after.shutdown(grace_ms=500)


def test_over_stdio_set_queue_policy_and_a_start_with_a_policy_are_requests_like_any_other() -> None:
    sup = Supervisor.start(_config(), directories=["/w/a"])
    host = WireHost(sup)
    try:

        async def main() -> None:
            status, answer = await _dispatch(
                host, {"type": "set_queue_policy", "session": "chat", "queue_policy": "reject_if_busy"}
            )
            assert (status, answer["result"]) == (200, "ok")
            start = {"type": "start_run", "session": "chat", "directory": "/w/a"}
            assert (await _dispatch(host, {**start, "run_id": "x1"}))[0] == 200
            status, answer = await _dispatch(host, {**start, "run_id": "x2"})
            assert (status, answer["code"]) == (409, "session_busy")
            with pytest.raises(HostError, match="queue_policy") as refused:  # the line is answered 422
                await _dispatch(host, {**start, "run_id": "x3", "queue_policy": "fifo"})
            assert refused.value.code == "invalid_request"

        asyncio.run(asyncio.wait_for(main(), 45))
        assert sup.session("chat").queue_policy is REJECT  # type: ignore[union-attr]
    finally:
        sup.shutdown(grace_ms=500, reason="test_teardown")
        host.hub.join(5.0)


# --- the supervisor's default -------------------------------------------------------------------------


def test_the_supervisors_default_applies_to_every_session_without_a_policy_of_its_own() -> None:
    shell = CoreShell("/w/a", core=SupervisorCore(queue_policy=REJECT))
    _start(shell, "r1")
    assert _start(shell, "r2").code is RejectCode.SESSION_BUSY  # type: ignore[union-attr]
    assert shell.core.session_snapshot("s1").queue_policy is REJECT  # type: ignore[union-attr]

    shell.request(SetQueuePolicy(session="s1", queue_policy=QUEUE))  # its own: kept, it differs
    assert _start(shell, "r3").result is RequestResult.OK  # type: ignore[union-attr]
    shell.request(SetQueuePolicy(session="s1", queue_policy=REJECT))  # back to the supervisor's

    assert shell.core._policies == {}
    assert _start(shell, "r4").code is RejectCode.SESSION_BUSY  # type: ignore[union-attr]


def test_supervisor_config_queue_policy_is_every_sessions_default() -> None:
    gate = Gate("g")
    with Supervisor.start(
        SupervisorConfig(shutdown_at_exit=False, queue_policy="coalesce"), directories=["/w/a"]
    ) as sup:  # type: ignore[arg-type]
        sup.start_run(_waiting(gate), session="s", directory="/w/a")  # type: ignore[arg-type]
        first = sup.start_run(_waiting(gate), session="s", directory="/w/a")  # type: ignore[arg-type]
        second = sup.start_run(_waiting(gate), session="s", directory="/w/a")  # type: ignore[arg-type]

        assert first.wait(10).reason is InterruptReason.COALESCED
        assert sup.session("s").queue_policy is COALESCE  # type: ignore[union-attr]
        gate.open()
        assert second.wait(10).outcome is Outcome.COMPLETED


def test_await_idle_is_woken_when_the_session_goes_idle_while_the_waiter_registers() -> None:
    """The waiter reads the session busy; before it has registered, the supervisor publishes it idle.
    The wake-up looks at the waiters under the waiter's lock, so it still finds and wakes this one."""
    shell = CoreShell("/w/a")
    shell.start("r1", session="s")
    view = View(shell.core, shell.events)
    stored_idle = threading.Event()
    writer = threading.Thread(
        target=lambda: view.refresh(shell.core, None, shell.finish("r1")), name="test-view-writer"
    )

    class Racing(dict[str, SessionSnapshot]):
        def get(self, key: str, default: object = None) -> SessionSnapshot | None:  # type: ignore[override]
            seen = super().get(key)
            if key == "s" and not writer.is_alive() and not stored_idle.is_set():
                writer.start()  # the session goes idle now, between this look and the registration
                assert stored_idle.wait(10)
            return seen

        def __setitem__(self, key: str, value: SessionSnapshot) -> None:
            super().__setitem__(key, value)
            if value.status is SessionStatus.IDLE:
                stored_idle.set()

    view.sessions = Racing(view.sessions)
    assert view.sessions["s"].status is SessionStatus.BUSY

    waiter = view.when_idle("s")  # saw it busy

    writer.join(10)
    assert not writer.is_alive()
    snapshot = waiter.result(timeout=10)
    assert snapshot is not None and snapshot.status is SessionStatus.IDLE
