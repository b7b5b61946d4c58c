"""Sessions are things users act on: ``cancel_session`` stops a session's active run and its queued
runs with one reason and one action id; ``delete_session`` is refused while the session has work
unless confirmed, withdraws its open asks and forgets it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from run_supervisor.actors import AsyncSupervisor, Gate, InvalidRequest, RunContext, SessionBusy, Supervisor
from run_supervisor.protocol import (
    AskKind,
    AskPayload,
    AskRaised,
    AskReplied,
    AskWithdrawn,
    CancelSession,
    CloseAction,
    CloseMode,
    DeleteSession,
    DeliverAnswer,
    InterruptReason,
    Outcome,
    QueuePolicy,
    RejectCode,
    ReplyPermission,
    RequestOutcome,
    RequestResult,
    RunStarted,
    SessionStatus,
    SessionStatusChanged,
    SetQueuePolicy,
    StartInterruptGrace,
    SupervisorCore,
)
from run_supervisor.protocol.testing import CoreShell


def _busy_session(shell: CoreShell) -> None:
    shell.start("r1", session="s")
    shell.start("r2", session="s")
    shell.start("r3", session="s")
    shell.tool("r1")


def test_a_session_cancel_stops_its_active_run_and_its_queued_runs_with_one_reason_and_one_action_id() -> (
    None
):
    shell = CoreShell("/w/a")
    _busy_session(shell)
    shell.start("other", session="t")

    answer = shell.request(CancelSession(session="s", origin="ui.stop"))

    assert isinstance(answer, RequestOutcome) and answer.result is RequestResult.OK
    assert answer.action_id == "cs-1"
    assert answer.interrupted_runs == ("r2", "r3", "r1")  # the queued first: none starts meanwhile
    shell.finish("r1")
    for run_id in ("r1", "r2", "r3"):
        finished = shell.finished(run_id)
        assert (finished.outcome, finished.reason, finished.origin, finished.action_id) == (
            Outcome.INTERRUPTED,
            InterruptReason.USER_CANCEL,
            "ui.stop",
            "cs-1",
        ), run_id
    assert shell.of(RunStarted, run_id="r2") == [] and shell.of(RunStarted, run_id="r3") == []
    assert shell.core.run_snapshot("other") is not None and shell.core.run_snapshot("other").outcome is None
    statuses = [e.status for e in shell.of(SessionStatusChanged, session="s")]
    assert statuses == [SessionStatus.BUSY, SessionStatus.IDLE]


def test_a_session_cancel_of_an_idle_or_unknown_session_is_ok_and_stops_nothing() -> None:
    shell = CoreShell("/w/a")
    answer = shell.request(CancelSession(session="nobody"))
    assert isinstance(answer, RequestOutcome)
    assert (answer.result, answer.action_id, answer.interrupted_runs) == (RequestResult.OK, None, ())


def test_a_session_cancel_gives_the_stopped_body_its_grace() -> None:
    shell = CoreShell("/w/a", core=SupervisorCore(interrupt_grace_ms=1_000))
    shell.start("r1", session="s")
    shell.request(CancelSession(session="s", grace_ms=20))
    assert shell.commands(StartInterruptGrace) == [StartInterruptGrace(run_id="r1", grace_ms=20)]
    shell.expire_grace("r1")
    assert shell.finished("r1").abandoned is True


def test_deleting_a_busy_session_is_refused_unless_confirmed() -> None:
    shell = CoreShell("/w/a")
    _busy_session(shell)
    answer = shell.request(DeleteSession(session="s"))
    assert answer is not None and answer.code is RejectCode.SESSION_BUSY
    assert "confirm" in (answer.error or "")
    assert shell.core.session_snapshot("s") is not None


def test_a_confirmed_delete_withdraws_the_sessions_asks_stops_its_runs_and_forgets_it() -> None:
    shell = CoreShell("/w/a")
    shell.request(SetQueuePolicy(session="s", queue_policy=QueuePolicy.COALESCE))
    shell.start("r1", session="s")
    ask_id = shell.ask("r1")
    shell.start("r2", session="s")

    answer = shell.request(DeleteSession(session="s", confirm=True, origin="ui.delete"))

    assert isinstance(answer, RequestOutcome) and answer.interrupted_runs == ("r2", "r1")
    assert [w.ask_id for w in shell.of(AskWithdrawn)] == [ask_id]
    assert shell.core.session_snapshot("s") is not None  # its run is still stopping
    shell.finish("r1")
    assert shell.core.session_snapshot("s") is None  # forgotten, its queue policy too
    assert shell.finished("r1").action_id == answer.action_id


def test_deleting_an_idle_session_forgets_it_at_once() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1", session="s")
    shell.finish("r1")
    assert shell.core.session_snapshot("s") is not None
    answer = shell.request(DeleteSession(session="s"))
    assert isinstance(answer, RequestOutcome) and answer.result is RequestResult.OK
    assert shell.core.session_snapshot("s") is None
    assert shell.core.run_snapshot("r1") is not None  # its finished runs stay queryable


def test_a_run_started_in_a_session_being_deleted_keeps_it_known() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1", session="s")
    shell.request(DeleteSession(session="s", confirm=True))
    shell.start("r2", session="s")  # queued behind the stopping r1
    shell.finish("r1")
    snapshot = shell.core.session_snapshot("s")
    assert snapshot is not None and snapshot.active == "r2"


# --- "always" grants -----------------------------------------------------------------------------


def _ask(shell: CoreShell, run: str, key: str | None, n: int) -> str:
    shell.tool(run)
    ask_id = f"{run}:k{n}"
    payload = AskPayload(command="git status", key=key)
    shell.report(AskRaised(run_id=run, ask_id=ask_id, kind=AskKind.PERMISSION, payload=payload))
    return ask_id


def test_an_always_grant_resolves_the_sessions_matching_pending_asks_and_keeps_others_pending() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1", session="s")
    shell.start("child", session="c", parent="r1")
    first = _ask(shell, "r1", "bash:git status", 1)
    second = _ask(shell, "r1", "bash:git status", 2)
    other_key = _ask(shell, "r1", "bash:rm", 3)
    other_session = _ask(shell, "child", "bash:git status", 4)

    shell.request(ReplyPermission(ask_id=first, approve=True, always=True))

    replied = {e.ask_id: e for e in shell.of(AskReplied)}
    assert replied[first].always is True and replied[first].granted is None
    assert replied[second].approved is True and replied[second].granted == "bash:git status"
    assert other_key not in replied and other_session not in replied  # still pending
    delivered = [c.ask_id for c in shell.commands(DeliverAnswer) if c.approved]
    assert delivered == [first, second]


def test_an_always_grant_approves_the_sessions_later_matching_asks_until_it_is_deleted() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1", session="s")
    shell.request(ReplyPermission(ask_id=_ask(shell, "r1", "edit:src/*", 1), approve=True, always=True))
    shell.finish("r1")
    shell.start("r2", session="s")

    later = _ask(shell, "r2", "edit:src/*", 2)

    assert shell.one(AskReplied, ask_id=later).granted == "edit:src/*"
    shell.finish("r2")
    shell.request(DeleteSession(session="s"))
    shell.start("r3", session="s")
    after_delete = _ask(shell, "r3", "edit:src/*", 3)
    assert shell.of(AskReplied, ask_id=after_delete) == []  # the grant went with the session


def test_an_always_grant_needs_an_approval_of_an_ask_that_declares_a_key() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1", session="s")
    keyless = _ask(shell, "r1", None, 1)
    answer = shell.request(ReplyPermission(ask_id=keyless, approve=True, always=True))
    assert answer is not None and answer.code is RejectCode.INVALID_REQUEST
    keyed = _ask(shell, "r1", "bash:ls", 2)
    answer = shell.request(ReplyPermission(ask_id=keyed, approve=False, always=True))
    assert answer is not None and answer.code is RejectCode.INVALID_REQUEST
    assert shell.of(AskReplied) == []  # nothing was decided


# --- the facades -----------------------------------------------------------------------------------

BOUND_S = 30.0


def test_the_sync_facade_cancels_and_deletes_a_session_and_grants_always(supervisor: Supervisor) -> None:
    gate = Gate("never")

    def held(ctx: RunContext) -> None:
        ctx.wait(gate)

    first = supervisor.start_run(held, session="s", directory="/w/a")
    second = supervisor.start_run(held, session="s", directory="/w/a")

    assert supervisor.cancel_session("s", origin="ui.stop", timeout=BOUND_S) == (second.run_id, first.run_id)
    assert first.wait(timeout=BOUND_S).action_id == second.wait(timeout=BOUND_S).action_id
    assert supervisor.cancel_session("s", timeout=BOUND_S) == ()

    busy = supervisor.start_run(held, session="t", directory="/w/a")
    with pytest.raises(SessionBusy):
        supervisor.delete_session("t", timeout=BOUND_S)
    assert supervisor.delete_session("t", confirm=True, timeout=BOUND_S) == (busy.run_id,)
    busy.wait(timeout=BOUND_S)
    supervisor.delete_session("s", timeout=BOUND_S)
    assert supervisor.session("s", timeout=BOUND_S) is None


def test_the_async_facade_cancels_and_deletes_a_session(supervisor: Supervisor) -> None:
    async_supervisor = AsyncSupervisor(supervisor)

    async def scenario() -> None:
        gate = Gate("never")

        def held(ctx: RunContext) -> None:
            ctx.wait(gate)

        handle = await async_supervisor.start_run(held, session="s", directory="/w/a")
        assert await async_supervisor.cancel_session("s", timeout=BOUND_S) == (handle.run_id,)
        await handle.wait(timeout=BOUND_S)
        assert await async_supervisor.delete_session("s", timeout=BOUND_S) == ()

    asyncio.run(scenario())


def test_an_always_grant_survives_an_instance_reload() -> None:
    shell = CoreShell("/w/a")
    shell.start("r1", session="s")
    shell.request(ReplyPermission(ask_id=_ask(shell, "r1", "bash:ls", 1), approve=True, always=True))
    shell.finish("r1")
    shell.close(CloseAction.RELOAD, "/w/a", mode=CloseMode.MAINTENANCE)
    shell.start("r2", session="s")  # on the next generation
    later = _ask(shell, "r2", "bash:ls", 2)
    assert shell.one(AskReplied, ask_id=later).granted == "bash:ls"


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda sup: sup.cancel("", origin=""), "run_id"),
        (lambda sup: sup.cancel_session("", origin=1), "session"),
        (lambda sup: sup.delete_session("", confirm="x", origin="", grace_ms=-1), "session"),
        (lambda sup: sup.delete_session("s1", confirm="x", origin="", grace_ms=-1), "confirm"),
    ],
    ids=["cancel", "cancel_session", "delete_session", "delete_session_confirm"],
)
def test_a_stop_with_several_bad_arguments_names_the_first_in_its_signature(
    supervisor: Supervisor, call: Any, named: str
) -> None:
    with pytest.raises(InvalidRequest, match=f"^{named} "):
        call(supervisor)
