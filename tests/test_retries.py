"""Retry status: a body says it is retrying a provider call; its session shows
``retry`` with the attempt, the message and when next, until the attempt goes on or the run ends."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from wire_support import Served, of_type, served, sse

from run_supervisor.actors import (
    AsyncRunContext,
    AsyncSupervisor,
    Gate,
    InvalidRequest,
    RunContext,
    Supervisor,
)
from run_supervisor.actors.testing import EventLog, simulate_crash
from run_supervisor.protocol import (
    SESSION_TRANSITIONS,
    AskKind,
    AskPayload,
    AskRaised,
    Outcome,
    PartReport,
    PartState,
    RetryReport,
    RunStarted,
    SessionStatus,
    SessionStatusChanged,
    SessionTrigger,
    StartRun,
    StepKind,
    StepReport,
    StepStarted,
)
from run_supervisor.protocol.testing import CoreShell, InvariantChecker, InvariantViolation

BOUND_S = 30.0


def _statuses(shell: CoreShell, session: str) -> list[tuple[SessionStatus, int | None, str | None]]:
    return [(e.status, e.attempt, e.message) for e in shell.of(SessionStatusChanged, session=session)]


def _retrying(shell: CoreShell, run: str = "r", attempt: int = 1, next_at_ms: int | None = None) -> None:
    shell.report(RetryReport(run_id=run, attempt=attempt, message="529 overloaded", next_at_ms=next_at_ms))


# --- the core ---------------------------------------------------------------------------------------


def test_a_retry_report_puts_the_session_in_retry_with_attempt_message_and_next_time() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")

    _retrying(shell, next_at_ms=1_767_225_600_000)

    event = shell.of(SessionStatusChanged, session="s")[-1]
    assert (event.status, event.attempt, event.message, event.next_at_ms) == (
        SessionStatus.RETRY,
        1,
        "529 overloaded",
        1_767_225_600_000,
    )
    snapshot = shell.core.session_snapshot("s")
    assert snapshot is not None
    assert (snapshot.status, snapshot.active, snapshot.attempt, snapshot.message, snapshot.next_at_ms) == (
        SessionStatus.RETRY,
        "r",
        1,
        "529 overloaded",
        1_767_225_600_000,
    )


def test_every_new_attempt_is_announced() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    _retrying(shell, attempt=1)
    _retrying(shell, attempt=2)
    assert _statuses(shell, "s")[-2:] == [
        (SessionStatus.RETRY, 1, "529 overloaded"),
        (SessionStatus.RETRY, 2, "529 overloaded"),
    ]


@pytest.mark.parametrize("progress", ["step", "tool part", "ask", "heartbeat"])
def test_the_runs_next_progress_clears_the_retry_back_to_busy_before_its_own_event(progress: str) -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    _retrying(shell)

    if progress == "step":
        batch = shell.report(StepReport(run_id="r", step="model-2", kind=StepKind.MODEL, finished=False))
    elif progress == "tool part":
        batch = shell.report(PartReport(run_id="r", tool="bash", state=PartState.PENDING))
    elif progress == "heartbeat":  # the retried stream's first chunk
        batch = shell.heartbeat("r")
    else:
        batch = shell.report(
            AskRaised(run_id="r", ask_id="a1", kind=AskKind.PERMISSION, payload=AskPayload())
        )

    events = shell.events_in(batch)
    assert isinstance(events[0], SessionStatusChanged)
    assert (events[0].status, events[0].attempt, events[0].message, events[0].next_at_ms) == (
        SessionStatus.BUSY,
        None,
        None,
        None,
    )
    assert len(events) > 1 or progress == "heartbeat"  # then the progress's own event (a heartbeat has none)
    snapshot = shell.core.session_snapshot("s")
    assert snapshot is not None and (snapshot.status, snapshot.attempt) == (SessionStatus.BUSY, None)


def test_progress_without_a_retry_announces_nothing_new() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    before = _statuses(shell, "s")
    shell.report(StepReport(run_id="r", step="model", kind=StepKind.MODEL, finished=False))
    assert _statuses(shell, "s") == before == [(SessionStatus.BUSY, None, None)]


def test_the_runs_end_clears_the_retry_idle_says_nothing_of_it() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    _retrying(shell)
    shell.finish("r")
    assert _statuses(shell, "s")[-1] == (SessionStatus.IDLE, None, None)
    snapshot = shell.core.session_snapshot("s")
    assert snapshot is not None and (snapshot.status, snapshot.attempt, snapshot.message) == (
        SessionStatus.IDLE,
        None,
        None,
    )


def test_a_queued_run_starts_in_a_busy_session_not_a_retrying_one() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    shell.start("next", session="s")
    _retrying(shell)

    batch = shell.finish("r")

    events = shell.events_in(batch)
    kinds = [type(e).__name__ for e in events]
    busy = kinds.index("SessionStatusChanged")
    assert kinds.index("RunStarted") > busy
    status = events[busy]
    assert isinstance(status, SessionStatusChanged) and status.status is SessionStatus.BUSY
    assert shell.one(RunStarted, run_id="next").session == "s"


def test_a_run_stopped_during_a_retry_shows_retry_then_idle_never_busy_and_a_later_retry_is_ignored() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    _retrying(shell)
    shell.cancel("r")
    assert _statuses(shell, "s")[-1] == (SessionStatus.RETRY, 1, "529 overloaded")  # nothing said
    ignored = shell.core.statistics().reports_ignored

    _retrying(shell, attempt=2)  # the body had not seen the interrupt yet

    assert shell.core.statistics().reports_ignored == ignored + 1
    shell.finish("r")
    assert [status for status, _, _ in _statuses(shell, "s")] == [
        SessionStatus.BUSY,
        SessionStatus.RETRY,
        SessionStatus.IDLE,
    ]
    finished = shell.finished("r")
    assert (finished.retry_attempt, finished.retry_message) == (1, "529 overloaded")
    shell.shutdown()
    shell.checker.finish()


def test_a_retry_report_of_a_queued_or_unknown_run_or_attempt_zero_is_ignored() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    shell.start("queued", session="s")
    ignored = shell.core.statistics().reports_ignored
    shell.report(RetryReport(run_id="queued", attempt=1, message="x"))
    shell.report(RetryReport(run_id="ghost", attempt=1, message="x"))
    shell.report(RetryReport(run_id="r", attempt=0, message="x"))
    assert shell.core.statistics().reports_ignored == ignored + 3
    assert [s for s, _, _ in _statuses(shell, "s")] == [SessionStatus.BUSY]


def test_the_retry_moves_are_a_table() -> None:
    retry = SESSION_TRANSITIONS[SessionStatus.RETRY]
    assert retry[SessionTrigger.PROGRESS] is SessionStatus.BUSY
    assert retry[SessionTrigger.HAND_OVER] is SessionStatus.BUSY
    assert retry[SessionTrigger.END] is SessionStatus.IDLE
    assert (
        SessionTrigger.RETRY not in SESSION_TRANSITIONS[SessionStatus.IDLE]
    )  # an idle session never retries


def test_the_checker_refuses_a_retry_status_on_a_session_without_an_active_run() -> None:
    checker = InvariantChecker(raise_at_once=True)
    with pytest.raises(InvariantViolation, match="retry"):
        checker.event(
            SessionStatusChanged(seq=1, session="s", status=SessionStatus.RETRY, attempt=1, message="x")
        )


def test_the_checker_refuses_a_step_while_the_session_still_says_retry() -> None:
    checker = InvariantChecker(raise_at_once=True)
    shell = CoreShell("/w/a", checker=checker)
    shell.request(StartRun(run_id="r", session="s", directory="/w/a"))
    _retrying(shell)
    with pytest.raises(InvariantViolation, match="still says retry"):
        checker.event(
            StepStarted(seq=checker.last_seq + 1, run_id="r", session="s", step="model", kind=StepKind.MODEL)
        )


# --- the supervisor ---------------------------------------------------------------------------------


def test_a_body_that_retries_shows_retry_in_its_session_until_the_attempt_goes_on(
    supervisor: Supervisor, events: EventLog
) -> None:
    backoff = Gate("backoff")
    next_at = datetime.now(UTC) + timedelta(seconds=5)

    def body(ctx: RunContext) -> None:
        ctx.retrying(1, "529 overloaded", next_at)
        ctx.wait(backoff)  # the provider's backoff
        with ctx.step("model"):
            pass

    handle = supervisor.start_run(body, session="s", directory="/w/a")
    retry = events.wait_for("session.status", session="s", status="retry", timeout=BOUND_S)

    assert isinstance(retry, SessionStatusChanged)
    assert (retry.attempt, retry.message, retry.next_at_ms) == (
        1,
        "529 overloaded",
        round(next_at.timestamp() * 1000),
    )
    snapshot = supervisor.session("s")
    assert snapshot is not None and (snapshot.status, snapshot.attempt) == (SessionStatus.RETRY, 1)

    backoff.open()
    step = events.wait_for("run.step.started", run_id=handle.run_id, timeout=BOUND_S)
    before_step = [e for e in events.events if isinstance(e, SessionStatusChanged) and e.seq < step.seq]
    assert [e.status for e in before_step] == [SessionStatus.BUSY, SessionStatus.RETRY, SessionStatus.BUSY]
    assert handle.wait(timeout=BOUND_S).outcome is Outcome.COMPLETED
    idle = supervisor.session("s")
    assert idle is not None and (idle.status, idle.attempt, idle.message, idle.next_at_ms) == (
        SessionStatus.IDLE,
        None,
        None,
        None,
    )


def test_retrying_takes_epoch_seconds_and_refuses_what_is_not_a_retry(supervisor: Supervisor) -> None:
    refused: list[str] = []

    def body(ctx: RunContext) -> None:
        ctx.retrying(2, "rate limited", time.time() + 1)
        for attempt, message, next_at in ((0, "x", None), (1, "", None), (1, "x", datetime(2030, 1, 1))):
            try:
                ctx.retrying(attempt, message, next_at)
            except InvalidRequest as exc:
                refused.append(str(exc).split(" ")[0])

    handle = supervisor.start_run(body, session="s", directory="/w/a")
    assert handle.wait(timeout=BOUND_S).outcome is Outcome.COMPLETED
    assert refused == ["attempt", "message", "next_at"]


def test_an_async_body_reports_retrying_too() -> None:
    async def main() -> None:
        async with AsyncSupervisor.start(directories=["/w/a"]) as supervisor:
            log = EventLog(supervisor)
            backoff = Gate("backoff")

            async def body(ctx: AsyncRunContext) -> None:
                ctx.retrying(1, "stream reset")
                await ctx.wait(backoff)

            handle = await supervisor.start_run(body, session="s", directory="/w/a")
            retry = await log.wait_for_async("session.status", session="s", status="retry", timeout=BOUND_S)
            assert isinstance(retry, SessionStatusChanged) and retry.message == "stream reset"
            backoff.open()
            assert (await handle.wait(timeout=BOUND_S)).outcome is Outcome.COMPLETED
            log.close()

    asyncio.run(main())


def test_a_session_recovered_after_a_crash_is_not_retrying(tmp_path: Path) -> None:
    journal = tmp_path / "runs.journal"
    before = Supervisor.start(directories=["/w/a"], journal=journal)
    try:
        log = EventLog(before)
        never = Gate("never")

        def body(ctx: RunContext) -> None:
            ctx.retrying(3, "529 overloaded")
            ctx.wait(never)

        before.start_run(body, session="s", directory="/w/a", run_id="r1")
        log.wait_for("session.status", session="s", status="retry", timeout=BOUND_S)
        log.close()
    finally:
        simulate_crash(before)

    with Supervisor.start(journal=journal) as after:
        (recovered,) = after.recovered()
        assert recovered.run_id == "r1"
        session = after.session("s")
        assert session is None or (session.status, session.attempt) == (SessionStatus.IDLE, None)
        follow_up = after.start_run(lambda ctx: None, session="s", directory="/w/a", resume_of="r1")
        assert follow_up.wait(timeout=BOUND_S).outcome is Outcome.COMPLETED


def test_an_external_run_reports_a_retry_over_http_and_its_next_step_clears_it() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            answer = await client.post("/runs", json={"run_id": "r1", "session": "s1", "directory": "/w/a"})
            assert answer.status_code == 201, answer.text
            retry = {"type": "retry", "attempt": 2, "message": "overloaded", "next_at_ms": 1_767_225_600_000}
            assert (await client.post("/runs/r1/reports", json=retry)).status_code == 200
            shown = await events.until(of_type("session.status", session="s1", status="retry"))
            assert (shown.data["attempt"], shown.data["message"], shown.data["next_at_ms"]) == (
                2,
                "overloaded",
                1_767_225_600_000,
            )
            step = {"type": "step", "kind": "model"}
            assert (await client.post("/runs/r1/reports", json=step)).status_code == 200
            busy = await events.until(of_type("session.status", session="s1", status="busy"))
            assert busy.data["attempt"] is None and busy.data["seq"] > shown.data["seq"]
            bad = await client.post("/runs/r1/reports", json={"type": "retry", "attempt": 0, "message": "x"})
            assert bad.status_code == 422 and "attempt" in bad.text
            assert (await client.post("/runs/r1/reports", json={"type": "end"})).status_code == 200

    with served() as srv:
        asyncio.run(asyncio.wait_for(scenario(srv), 45))


def test_a_heartbeat_after_retrying_is_the_attempt_going_on_and_clears_the_retry(
    supervisor: Supervisor, events: EventLog
) -> None:
    stream, beaten = Gate("stream"), threading.Event()

    def body(ctx: RunContext) -> None:
        with ctx.step("model"):  # one step around the retries and the stream, as hosts write it
            ctx.retrying(1, "529 overloaded", time.time() + 0.05)
            ctx.heartbeat()  # the retried stream's first chunk
            beaten.set()
            ctx.wait(stream)

    handle = supervisor.start_run(body, session="s", directory="/w/a")
    retry = events.wait_for("session.status", session="s", status="retry", timeout=BOUND_S)
    assert beaten.wait(timeout=BOUND_S)
    supervisor.set_queue_policy("another", "queue")  # answered after the body's heartbeat was handled

    snapshot = supervisor.session("s")

    assert snapshot is not None and (snapshot.status, snapshot.attempt) == (SessionStatus.BUSY, None)
    stream.open()
    assert handle.wait(timeout=BOUND_S).outcome is Outcome.COMPLETED
    events.wait_for("run.finished", run_id=handle.run_id, timeout=BOUND_S)
    after = [e.status for e in events.events if isinstance(e, SessionStatusChanged) and e.seq > retry.seq]
    assert after[:1] == [SessionStatus.BUSY]
