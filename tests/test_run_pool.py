"""Sync bodies run on reused threads: a run takes a pooled thread at its start and gives it back at
its end; a queued run holds none; an abandoned body keeps its own and the pool moves on."""

from __future__ import annotations

import threading
import time

from run_supervisor.actors import Gate, RunContext, Supervisor, SupervisorConfig
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import Outcome


def test_many_short_sync_runs_reuse_a_bounded_number_of_pool_threads(supervisor: Supervisor) -> None:
    ran_on: list[threading.Thread] = []  # kept: a Thread object is never reused while referenced

    def body(ctx: RunContext) -> None:
        ran_on.append(threading.current_thread())

    for i in range(200):
        run = supervisor.start_run(body, session=f"s{i % 4}", directory="/w/a")
        assert run.wait(10).outcome is Outcome.COMPLETED
    # One after the other: each run finds the last one's thread parked (a thread per run was 200).
    assert len({id(t) for t in ran_on}) <= 20
    assert len(supervisor.threads.alive()) <= 20


def test_a_queued_run_holds_no_thread_until_it_starts(supervisor: Supervisor, events: EventLog) -> None:
    gate = Gate("hold")
    started_on: dict[str, threading.Thread] = {}

    def body(ctx: RunContext) -> None:
        started_on[ctx.run_id] = threading.current_thread()
        ctx.wait(gate)

    first = supervisor.start_run(body, session="s1", directory="/w/a", run_id="first")
    events.wait_for("run.started", run_id="first")
    before = set(supervisor.threads.alive())
    queued = [
        supervisor.start_run(body, session="s1", directory="/w/a", run_id=f"queued-{i}") for i in range(20)
    ]
    for run in queued:
        events.wait_for("run.queued", run_id=run.run_id)
    assert set(supervisor.threads.alive()) == before  # twenty queued runs, not one thread more
    gate.open()
    assert first.wait(10).outcome is Outcome.COMPLETED
    for run in queued:
        assert run.wait(10).outcome is Outcome.COMPLETED
    assert set(started_on) == {"first", *(r.run_id for r in queued)}


class _Token:
    def __init__(self) -> None:
        self.abandoned = False


def test_an_abandoned_bodys_thread_is_replaced_and_ends_when_its_body_returns() -> None:
    book = ThreadBook()
    pool = book.workers
    release = threading.Event()
    stuck_on: list[threading.Thread] = []
    later_on: list[threading.Thread] = []
    stuck_token = _Token()
    arrived = threading.Event()
    done = threading.Event()

    def stuck() -> None:
        stuck_on.append(threading.current_thread())
        arrived.set()
        release.wait(30)  # a deaf body

    def later() -> None:
        later_on.append(threading.current_thread())
        done.set()

    pool.run(stuck, token=stuck_token, name="run-supervisor-run-stuck")
    assert arrived.wait(10)
    assert stuck_on[0].name == "run-supervisor-run-stuck"  # named after its run while it runs it
    stuck_token.abandoned = True  # what shutdown's deadline does: one flag, O(1)
    assert book.join(time.monotonic()) == []  # never joined: given up on, not a straggler
    pool.run(later, token=_Token())
    assert done.wait(10)
    assert later_on[0] is not stuck_on[0]  # the pool moved on: the next body got another thread
    release.set()
    stuck_on[0].join(10)
    assert not stuck_on[0].is_alive()  # an abandoned body's thread ends with its body
    later_on[0].join(10)
    assert not later_on[0].is_alive()  # the pool was closed by join: nothing parks any more
    assert book.alive() == []


def test_an_idle_pool_thread_ends_at_shutdown() -> None:
    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/w/a"])
    seen: list[threading.Thread] = []
    try:
        run = sup.start_run(lambda _: seen.append(threading.current_thread()), session="s", directory="/w/a")
        assert run.wait(10).outcome is Outcome.COMPLETED
    finally:
        sup.shutdown(grace_ms=1000)
    # Joined by the shutdown itself (within its grace): dead when it returns, not joined here.
    assert not seen[0].is_alive() and sup.threads.alive() == []


def test_once_a_shutdown_has_begun_an_interrupted_bodys_thread_ends_with_it_instead_of_parking() -> None:
    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/w/a"])
    events = EventLog(sup)
    gate = Gate("held")
    deaf_release = threading.Event()
    ran_on: dict[str, threading.Thread] = {}

    def held(ctx: RunContext) -> None:
        ran_on[ctx.run_id] = threading.current_thread()
        ctx.wait(gate)  # ends on the shutdown's interrupt

    def deaf(ctx: RunContext) -> None:
        deaf_release.wait(30)  # holds the shutdown open until released

    closer: threading.Thread | None = None
    try:
        for run_id in ("a", "b"):
            sup.start_run(held, session=run_id, directory="/w/a", run_id=run_id)
            events.wait_for("run.started", run_id=run_id)
        sup.start_run(deaf, session="d", directory="/w/a", run_id="deaf")
        events.wait_for("run.started", run_id="deaf")
        closer = threading.Thread(target=sup.shutdown, kwargs={"grace_ms": 30_000}, name="test-closer")
        closer.start()
        for run_id in ("a", "b"):
            events.wait_for("run.finished", run_id=run_id)
        # Their bodies ended after the shutdown began: their threads were let go, none parked.
        assert sup.threads.workers.idle == 0
        for run_id in ("a", "b"):
            ran_on[run_id].join(10)
            assert not ran_on[run_id].is_alive()
    finally:
        deaf_release.set()
        if closer is not None:
            closer.join(30)
        if not sup.closed:
            sup.shutdown(grace_ms=1000)
