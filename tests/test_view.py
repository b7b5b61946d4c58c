"""Queries are served from the state the supervisor publishes after each message (no mailbox hop).

The rule a host relies on: once a request's answer (or an event) has been delivered, every query
sees its effect. And the published state is always exactly what the core would answer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from run_supervisor.actors import Gate, RunContext, Supervisor, SupervisorConfig, _view
from run_supervisor.actors._supervisor import Query
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import (
    Event,
    Outcome,
    RunFinished,
    RunStarted,
    SessionStatus,
    SupervisorCore,
)


@pytest.fixture
def mismatches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """After every publication, compare the view with what the core answers; collect differences
    (an assertion inside the supervisor's thread would be contained, not reported)."""
    found: list[str] = []
    # Every publication, one message's (refresh) or a mailbox drain's batch (refresh_batch), goes through
    # _publish: checking there covers the supervisor's main path, not only the preload and stall ones.
    publish = _view.View._publish

    def checked(self: _view.View, core: SupervisorCore, given_items: Iterable[Any]) -> None:
        items = list(given_items)
        publish(self, core, items)
        where = "+".join(sorted({type(item).__name__ for item in items})) or "nothing"
        known = set(core._runs)  # the test compares with the core's own records
        if set(self.runs) != known:
            found.append(f"{where}: runs {sorted(set(self.runs) ^ known)}")
        for run_id in known & set(self.runs):
            if self.runs[run_id] != core.run_snapshot(run_id):
                found.append(f"{where}: run {run_id}")
        for session in core._sessions:
            if self.sessions.get(session) != core.session_snapshot(session):
                found.append(f"{where}: session {session}")
        if self.pending_actions != core.pending_actions():
            found.append(f"{where}: pending actions")
        if self.statistics != core.statistics():
            found.append(f"{where}: statistics")

    monkeypatch.setattr(_view.View, "_publish", checked)
    yield found


def test_the_published_state_always_equals_what_the_core_answers(mismatches: list[str]) -> None:
    gate, deaf_release = Gate("g"), threading.Event()

    def held(ctx: RunContext) -> None:
        with ctx.step("model"):
            ctx.wait(gate)
        call = ctx.tool("bash")
        call.prepared()
        call.completed()

    def asks(ctx: RunContext) -> None:
        with ctx.step("permission"):
            ctx.ask_permission(timeout=10)
        with ctx.step("form"):
            ctx.ask_form(timeout=10)

    def deaf(ctx: RunContext) -> None:
        with ctx.step("model"):
            deaf_release.wait(30)

    config = SupervisorConfig(shutdown_at_exit=False, retain_finished_runs=2)
    sup = Supervisor.start(config, directories=["/w/a", "/w/b"])
    events = EventLog(sup)
    try:
        runs = [sup.start_run(held, session="s1", directory="/w/a", run_id=f"q{i}") for i in range(3)]
        other = sup.start_run(held, session="s2", directory="/w/b", run_id="b1")
        sup.cancel("q2")  # cancelled in its queue
        deferred = sup.close("dispose", mode="maintenance", origin="config", directory="/w/a")
        sup.close("reload", mode="user_confirmed_interrupt", origin="user", directory="/w/b")
        assert other.wait(5).outcome is Outcome.INTERRUPTED
        gate.open()
        for handle in runs[:2]:
            handle.wait(5)
        events.wait_for("lifecycle.completed", action_id=deferred.action_id)
        asking = sup.start_run(asks, session="s3", directory="/w/a", run_id="ask")
        permission = events.wait_for("ask.requested", run_id="ask", kind="permission")
        sup.reply_permission(permission.ask_id, approve=True)  # type: ignore[union-attr]
        form = events.wait_for("ask.requested", run_id="ask", kind="form")
        sup.answer_form(form.ask_id, answer="yes")  # type: ignore[union-attr]
        assert asking.wait(5).outcome is Outcome.COMPLETED
        for i in range(4):  # finished runs beyond retain_finished_runs are forgotten, oldest first
            sup.start_run(lambda ctx: None, session="s4", directory="/w/a", run_id=f"f{i}").wait(5)
        assert sup.run("f3") is not None and sup.run("q0") is None
        sup.start_run(deaf, session="s5", directory="/w/a", run_id="deaf")
        events.wait_for("run.step.started", run_id="deaf")
        outcome = sup.shutdown(grace_ms=50)
        assert outcome.abandoned_runs == ("deaf",)
    finally:
        deaf_release.set()
        if not sup.closed:
            sup.shutdown(grace_ms=1000)
    assert mismatches == []


def test_a_caller_sees_the_effect_of_its_own_answered_request(supervisor: Supervisor) -> None:
    gate = Gate("g")
    supervisor.start_run(lambda ctx: ctx.wait(gate), session="s1", directory="/w/a", run_id="r1")
    supervisor.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r2")
    assert supervisor.session("s1").queued == ("r2",)  # type: ignore[union-attr]
    assert supervisor.statistics().runs_queued == 1
    supervisor.cancel("r2")
    assert supervisor.run("r2").outcome is Outcome.INTERRUPTED  # type: ignore[union-attr]
    result = supervisor.close("dispose", mode="maintenance", origin="config", directory="/w/a")
    assert [a.action_id for a in supervisor.pending_actions()] == [result.action_id]
    gate.open()


def test_a_subscriber_sees_the_effect_of_each_event_it_receives(supervisor: Supervisor) -> None:
    seen: list[str] = []
    done = threading.Event()
    looked = Gate("looked")  # the run stays active until the subscriber has looked: nothing newer to see

    def on_event(event: Event) -> None:
        if isinstance(event, RunStarted):
            seen.append(f"started:{supervisor.run(event.run_id).state}")  # type: ignore[union-attr]
            status = supervisor.session("s1").status  # type: ignore[union-attr]
            seen.append(f"session:{status.value}")
            looked.open()
        elif isinstance(event, RunFinished):
            snapshot = supervisor.run(event.run_id)
            seen.append(f"finished:{snapshot.outcome.value if snapshot and snapshot.outcome else None}")
            done.set()

    subscription = supervisor.subscribe(callback=on_event)
    supervisor.start_run(
        lambda ctx: ctx.wait(looked, timeout=10), session="s1", directory="/w/a", run_id="r1"
    )
    assert done.wait(5)
    subscription.close()
    assert seen[0] != "started:queued" and seen[1] == f"session:{SessionStatus.BUSY.value}"
    assert seen[-1] == "finished:completed"


def test_queries_are_answered_while_the_supervisor_is_busy(supervisor: Supervisor) -> None:
    held, release = threading.Event(), threading.Event()

    def block(core: SupervisorCore) -> None:
        held.set()
        release.wait(10)

    busy = supervisor._post(lambda reply: Query(block, reply))  # hold its mailbox
    try:
        assert held.wait(5)
        assert supervisor.statistics().instances_open == 2
        assert supervisor.run("nobody") is None and supervisor.pending_actions() == ()
    finally:
        release.set()
    busy.result(timeout=5)


def test_queries_answer_the_final_state_after_shutdown() -> None:
    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/w/a"])
    sup.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id="r1").wait(5)
    sup.shutdown(grace_ms=100)
    stats = sup.statistics()
    assert stats.closed and stats.runs_finished == 1
    assert sup.run("r1").outcome is Outcome.COMPLETED  # type: ignore[union-attr]


def test_the_published_stalls_and_confirms_equal_what_the_core_answers(mismatches: list[str]) -> None:
    gates = {name: Gate(name) for name in ("g1", "g2", "never")}

    def first(ctx: RunContext) -> None:
        with ctx.step("model"):
            ctx.wait(gates["g1"])  # no progress: stalled
            ctx.heartbeat()  # progress again: unstalled, then stalled again
            ctx.wait(gates["never"])

    def second(ctx: RunContext) -> None:
        with ctx.step("model"):
            ctx.wait(gates["g2"])

    config = SupervisorConfig(shutdown_at_exit=False, stall_after_ms=30)
    sup = Supervisor.start(config, directories=["/w/a"])
    events = EventLog(sup)
    try:
        one = sup.start_run(first, session="s1", directory="/w/a", run_id="r1")
        two = sup.start_run(second, session="s2", directory="/w/a", run_id="r2")
        deferred = sup.close("dispose", mode="maintenance", origin="config", directory="/w/a")
        events.wait_for("run.stalled", run_id="r1")
        events.wait_for("run.stalled", run_id="r2")
        gates["g2"].open()  # a stalled blocking run goes on and finishes
        two.wait(5)
        gates["g1"].open()
        cleared = events.wait_for("run.unstalled", run_id="r1", progress=True)
        events.wait_for("run.stalled", run_id="r1", seq=cleared.seq + 1, timeout=5)
        assert deferred.action_id is not None
        sup.confirm_close(deferred.action_id, origin="user")
        assert one.wait(5).outcome is Outcome.INTERRUPTED
        events.wait_for("lifecycle.completed", action_id=deferred.action_id)
    finally:
        if not sup.closed:
            sup.shutdown(grace_ms=1000)
    assert mismatches == []
