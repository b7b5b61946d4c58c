"""What a run costs in threads, and what shutdown does with a body that will not stop."""

from __future__ import annotations

import threading
import time

from run_supervisor.actors import Gate, RunContext, Supervisor, SupervisorConfig
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import Outcome


def test_each_live_run_costs_exactly_one_thread_and_its_body_runs_on_it(
    supervisor: Supervisor, events: EventLog
) -> None:
    gate = Gate("hold")
    seen: dict[str, threading.Thread] = {}

    def body(ctx: RunContext) -> None:
        seen[ctx.run_id] = threading.current_thread()
        with ctx.step("model"):
            ctx.wait(gate)

    before = set(threading.enumerate())
    handles = [
        supervisor.start_run(body, session=f"s{i}", directory="/w/a", run_id=f"r{i}") for i in range(3)
    ]
    for handle in handles:
        events.wait_for("run.step.started", run_id=handle.run_id)
    new = set(threading.enumerate()) - before
    assert len(new) == 3  # one thread per run: no second worker
    assert {seen[h.run_id] for h in handles} == new
    assert seen["r0"].name == "run-supervisor-run-r0"
    gate.open()
    for handle in handles:
        assert handle.wait(5).outcome is Outcome.COMPLETED


def test_a_queued_run_that_is_cancelled_before_it_starts_ends_its_thread(
    supervisor: Supervisor, events: EventLog
) -> None:
    gate = Gate("hold")
    ran: list[str] = []

    def body(ctx: RunContext) -> None:
        ran.append(ctx.run_id)
        ctx.wait(gate)

    first = supervisor.start_run(body, session="s1", directory="/w/a", run_id="first")
    events.wait_for("run.started", run_id="first")
    queued = supervisor.start_run(body, session="s1", directory="/w/a", run_id="queued")
    queued.cancel()
    assert queued.wait(5).outcome is Outcome.INTERRUPTED
    gate.open()
    assert first.wait(5).outcome is Outcome.COMPLETED
    assert ran == ["first"]
    # no thread named for the queued run is left once it is released (the leak fixture checks all)


def test_shutdown_never_joins_an_abandoned_body_and_its_thread_ends_when_the_body_returns() -> None:
    release = threading.Event()
    returned = threading.Event()

    def deaf(ctx: RunContext) -> None:
        try:
            with ctx.step("model"):
                release.wait(30)  # ignores cancellation
        finally:
            returned.set()

    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False, stop_timeout_s=30), directories=["/w/a"])
    events = EventLog(sup)
    for i in range(3):
        sup.start_run(deaf, session=f"s{i}", directory="/w/a", run_id=f"d{i}")
    for i in range(3):
        events.wait_for("run.step.started", run_id=f"d{i}")
    try:
        began = time.monotonic()
        outcome = sup.shutdown(grace_ms=50)
        # Joining a blocked body would take stop_timeout_s (30 s); 15 s is a generous bound for load.
        assert time.monotonic() - began < 15
        assert sorted(outcome.abandoned_runs) == ["d0", "d1", "d2"]
        assert not returned.is_set()
        assert {t.name for t in sup.threads.alive()} >= {f"run-supervisor-run-d{i}" for i in range(3)}
    finally:
        release.set()
    assert returned.wait(5)
