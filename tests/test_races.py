"""Races, each repeated many times: two callers released by one barrier at the same instant.

Whatever order the supervisor happens to see them in, the outcome must be one of the consistent
ones, every request is answered (or rejected) and nothing hangs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from layers import pick

from run_supervisor import (
    AlreadyInterrupting,
    CloseResult,
    Gate,
    InterruptReason,
    NothingPending,
    Outcome,
    RunAlreadyFinished,
    RunContext,
    Supervisor,
    SupervisorClosed,
    SupervisorConfig,
    SupervisorError,
)
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import RunFinished

REPEATS = pick(smoke=8, deep=40)

pytestmark = pytest.mark.deep


def together(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls on their own threads, released at the same instant; return results or errors."""
    barrier = threading.Barrier(len(calls), timeout=5)

    def released(call: Callable[[], Any]) -> Any:
        barrier.wait()
        try:
            return call()
        except SupervisorError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(released, call) for call in calls]
        return [f.result(timeout=10) for f in futures]


def gated(gate: Gate) -> Callable[[RunContext], None]:
    def body(ctx: RunContext) -> None:
        with ctx.step("model"):
            ctx.wait(gate)

    return body


@pytest.fixture
def fresh() -> Iterator[Callable[[], tuple[Supervisor, EventLog]]]:
    made: list[Supervisor] = []

    def make() -> tuple[Supervisor, EventLog]:
        sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/w/a"])
        made.append(sup)
        return sup, EventLog(sup)

    yield make
    for sup in made:
        if not sup.closed:
            sup.shutdown(grace_ms=500, reason="test_teardown")


def r1_at_its_step(fresh: Callable[[], tuple[Supervisor, EventLog]]) -> tuple[Supervisor, EventLog]:
    """A fresh supervisor whose run r1 (session s1, /w/a) holds inside its model step at a gate that
    never opens."""
    sup, events = fresh()
    sup.start_run(gated(Gate()), session="s1", directory="/w/a", run_id="r1")
    events.wait_for("run.step.started", run_id="r1")
    return sup, events


def completed_once(events: EventLog, action_id: str) -> None:
    events.wait_for("lifecycle.completed", action_id=action_id)
    assert len(events.of("lifecycle.completed", action_id=action_id)) == 1


def finished_once(events: EventLog, run: str) -> RunFinished:
    event = events.wait_for("run.finished", run_id=run, timeout=2)
    assert len(events.of("run.finished", run_id=run)) == 1
    assert isinstance(event, RunFinished)
    return event


@pytest.mark.parametrize("attempt", range(REPEATS))
def test_a_close_requested_in_the_instant_a_run_starts_never_strands_the_run(
    attempt: int, fresh: Callable[[], tuple[Supervisor, EventLog]]
) -> None:
    sup, events = fresh()
    gate = Gate()
    run, close = together(
        lambda: sup.start_run(gated(gate), session="s1", directory="/w/a", run_id="r1"),
        lambda: sup.close("dispose", mode="maintenance", origin="config", directory="/w/a"),
    )
    started = events.wait_for("run.started", run_id="r1")
    if close.blocking_runs == ("r1",):  # the run started first: the close waits for it
        assert close.result is CloseResult.DEFERRED and started.generation == 1  # type: ignore[union-attr]
    else:  # the close came first: the run got a fresh generation and does not delay the close
        assert close.result is CloseResult.COMPLETED
        assert started.generation == 2  # type: ignore[union-attr]
    gate.open()
    assert run.wait(2).outcome is Outcome.COMPLETED
    completed_once(events, close.action_id)


@pytest.mark.parametrize("attempt", range(REPEATS))
def test_a_cancel_racing_the_run_s_natural_end_gives_one_consistent_outcome(
    attempt: int, fresh: Callable[[], tuple[Supervisor, EventLog]]
) -> None:
    sup, events = fresh()
    gate = Gate()
    run = sup.start_run(gated(gate), session="s1", directory="/w/a", run_id="r1")
    events.wait_for("run.step.started", run_id="r1")
    cancel, _ = together(lambda: sup.cancel("r1"), gate.open)
    finished = finished_once(events, "r1")
    if isinstance(cancel, RunAlreadyFinished):
        assert finished.outcome is Outcome.COMPLETED and finished.reason is None
    else:
        assert cancel is None
        assert (finished.outcome, finished.reason) == (Outcome.INTERRUPTED, InterruptReason.USER_CANCEL)
    assert run.wait(2).outcome is finished.outcome


@pytest.mark.parametrize("attempt", range(REPEATS))
def test_a_cancel_racing_shutdown_gives_exactly_one_reason_and_it_is_the_first(
    attempt: int, fresh: Callable[[], tuple[Supervisor, EventLog]]
) -> None:
    sup, events = r1_at_its_step(fresh)
    cancel, shutdown = together(lambda: sup.cancel("r1"), lambda: sup.shutdown(grace_ms=1000))
    finished = finished_once(events, "r1")
    assert shutdown.result is CloseResult.FORCED
    if cancel is None:  # the cancel was handled first
        assert finished.reason is InterruptReason.USER_CANCEL
        assert shutdown.interrupted_runs == ()
    else:  # the shutdown was first: the cancel was refused, the first reason stands
        assert isinstance(cancel, SupervisorClosed | AlreadyInterrupting)
        assert finished.reason is InterruptReason.SHUTDOWN
        assert shutdown.interrupted_runs == ("r1",)


@pytest.mark.parametrize("attempt", range(REPEATS))
def test_two_closes_in_different_modes_racing_interrupt_once_and_both_complete_once(
    attempt: int, fresh: Callable[[], tuple[Supervisor, EventLog]]
) -> None:
    sup, events = r1_at_its_step(fresh)
    maintenance, confirmed = together(
        lambda: sup.close("dispose", mode="maintenance", origin="config", directory="/w/a"),
        lambda: sup.close("dispose", mode="user_confirmed_interrupt", origin="dialog", directory="/w/a"),
    )
    finished = finished_once(events, "r1")
    assert (finished.reason, finished.origin) == (InterruptReason.LIFECYCLE_INTERRUPT, "dialog")
    # Maintenance never interrupts, whatever the order: it waits for the run, or finds it gone.
    assert maintenance.result in (CloseResult.DEFERRED, CloseResult.COMPLETED)
    assert maintenance.interrupted_runs == ()
    assert confirmed.result is CloseResult.INTERRUPTED and confirmed.interrupted_runs == ("r1",)
    for action in (maintenance.action_id, confirmed.action_id):
        completed_once(events, action)
    assert len(events.of("instance.closed", directory="/w/a", generation=1)) == 1


REQUESTS: dict[str, Callable[[Supervisor], Any]] = {
    "start_run": lambda sup: sup.start_run(lambda ctx: None, session="s9", directory="/w/a"),
    "close": lambda sup: sup.close("dispose_all", mode="maintenance", origin="config"),
    "cancel": lambda sup: sup.cancel("r1"),
    "reply": lambda sup: sup.reply_permission(run_id="r1", approve=True),
    "query": lambda sup: sup.statistics(),
}
# Besides SupervisorClosed, the typed answers each request may get when it loses the race.
EXPECTED_REJECTIONS: dict[str, tuple[type[SupervisorError], ...]] = {
    "start_run": (),
    "close": (),
    "cancel": (AlreadyInterrupting,),
    "reply": (NothingPending,),
    "query": (),
}


@pytest.mark.parametrize("attempt", range(REPEATS // 4))
@pytest.mark.parametrize("request_kind", sorted(REQUESTS))
def test_a_request_racing_shutdown_is_answered_or_rejected_never_left_hanging(
    request_kind: str, attempt: int, fresh: Callable[[], tuple[Supervisor, EventLog]]
) -> None:
    sup, _ = r1_at_its_step(fresh)
    answer, shutdown = together(lambda: REQUESTS[request_kind](sup), lambda: sup.shutdown(grace_ms=1000))
    # A value or a typed rejection came back in time: nothing hung (a hang would be SupervisorTimeout).
    assert shutdown.result is CloseResult.FORCED
    if isinstance(answer, SupervisorError):
        assert isinstance(answer, (SupervisorClosed, *EXPECTED_REJECTIONS[request_kind])), answer
    assert sup.closed and sup.threads.alive() == []
