"""A busy supervisor works in batches: what it decided while its mailbox was full is published once
and delivered to each subscriber at once, with every promise of the message-by-message shell kept
(a query sees an answered request, an answer comes after the events before it)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from run_supervisor.actors import Gate, RunContext, Supervisor
from run_supervisor.actors._supervisor import Query
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import RequestResult, RunStarted, RunState, StartRun


def _hold(supervisor: Supervisor) -> threading.Event:
    """Keep the supervisor's thread busy until the returned event is set (its mailbox fills)."""
    go = threading.Event()
    busy = threading.Event()

    def hold(_: Any) -> None:
        busy.set()
        go.wait(30)

    supervisor._post(lambda reply: Query(hold, reply))
    assert busy.wait(10)
    return go


def test_requests_that_queue_up_are_published_once_and_delivered_to_a_subscriber_in_one_wake(
    supervisor: Supervisor, events: EventLog
) -> None:
    gate = Gate("hold")
    subscription = supervisor.subscribe()
    wakes = [0]
    notify = subscription._cond.notify

    def counted(n: int = 1) -> None:
        wakes[0] += 1
        notify(n)

    subscription._cond.notify = counted  # type: ignore[method-assign]

    def body(ctx: RunContext) -> None:
        ctx.wait(gate)

    go = _hold(supervisor)
    published = supervisor._view.version
    answers: list[Future[Any]] = [
        supervisor.submit(StartRun(run_id=f"b{i}", session=f"s{i}", directory="/w/a"), body=body)
        for i in range(20)
    ]
    go.set()
    for answer in answers:
        assert answer.result(10).result is RequestResult.OK
    # Every answered start is in the published state, and its run.started delivered before it.
    assert all(supervisor.run(f"b{i}") is not None for i in range(20))
    started = [e for e in subscription.drain() if isinstance(e, RunStarted)]
    assert {e.run_id for e in started} == {f"b{i}" for i in range(20)}
    # One batch: one publication and one wake for the twenty starts (message by message: twenty and
    # more than forty). All twenty were in the mailbox before the hold ended, and the bodies only
    # wait, so nothing else is published meanwhile.
    assert supervisor._view.version - published == 1
    assert wakes[0] == 1
    gate.open()
    for i in range(20):
        events.wait_for("run.finished", run_id=f"b{i}", timeout=10)


def test_a_query_behind_a_batch_sees_its_effects(supervisor: Supervisor) -> None:
    gate = Gate("hold")

    def body(ctx: RunContext) -> None:
        ctx.wait(gate)

    go = _hold(supervisor)
    answers = [
        supervisor.submit(StartRun(run_id=f"q{i}", session="s", directory="/w/a"), body=body)
        for i in range(5)
    ]
    seen: Future[Any] = supervisor._post(
        lambda reply: Query(lambda core: [core.run_snapshot(f"q{i}") for i in range(5)], reply)
    )
    go.set()
    states = [s.state for s in seen.result(10)]
    assert states[0] is RunState.ACTIVE and all(s is RunState.QUEUED for s in states[1:])
    for answer in answers:
        assert answer.result(10).result is RequestResult.OK
    gate.open()


def test_a_message_that_fails_in_a_batch_costs_the_others_nothing(
    supervisor: Supervisor, events: EventLog, monkeypatch: Any
) -> None:
    from run_supervisor.actors._supervisor import SessionSupervisor

    spawn = SessionSupervisor._spawn

    def failing(self: SessionSupervisor, command: Any) -> None:
        if command.run_id == "boom":
            raise RuntimeError("injected")
        spawn(self, command)

    monkeypatch.setattr(SessionSupervisor, "_spawn", failing)
    go = _hold(supervisor)
    answers = [
        supervisor.submit(StartRun(run_id=run_id, session=run_id, directory="/w/a"), body=lambda _: None)
        for run_id in ("a", "boom", "c")
    ]
    go.set()
    for answer in answers:
        answer.result(10)
    events.wait_for("run.finished", run_id="a", timeout=10)
    events.wait_for("run.finished", run_id="c", timeout=10)  # carried out after the one that failed
    monkeypatch.setattr(SessionSupervisor, "_spawn", spawn)
    supervisor.cancel("boom")  # never started: the cancel ends it, so the teardown finds it finished
