"""The supervisor's shared timer: one thread, a heap of due times, callbacks that only tell."""

from __future__ import annotations

import threading
import time

import pytest

from run_supervisor.actors import Supervisor
from run_supervisor.actors._threads import ThreadBook
from run_supervisor.actors._timers import Timers

BOUND_S = 10.0  # generous: the machine may be loaded; nothing here waits this long when it works


def _held(timers: Timers) -> threading.Event:
    """Hold the timer thread busy in a callback until the returned event is set."""
    held, release = threading.Event(), threading.Event()
    timers.schedule(0.0, lambda: (held.set(), release.wait(BOUND_S)))
    assert held.wait(BOUND_S)
    return release


def _closed(timers: Timers) -> None:
    """Close ``timers``: its thread ends."""
    timers.close()
    assert timers.thread is not None
    timers.thread.join(BOUND_S)
    assert not timers.thread.is_alive()


def test_callbacks_run_in_the_order_they_come_due_not_the_order_they_were_scheduled() -> None:
    timers = Timers(ThreadBook())
    ran: list[str] = []
    last = threading.Event()
    # The thread is held busy while the three are scheduled, and each is due at a fixed instant (not
    # "so long after its own schedule call"), so a loaded machine's gaps between the calls change nothing.
    release = _held(timers)
    base = time.monotonic() + 0.5
    for name, offset in (("late", 0.06), ("now", 0.0), ("soon", 0.03)):
        done = last.set if name == "late" else (lambda: None)
        timers.schedule(
            max(0.0, base + offset - time.monotonic()),
            lambda name=name, done=done: (ran.append(name), done()),
        )
    release.set()
    assert last.wait(BOUND_S)
    assert ran == ["now", "soon", "late"]
    _closed(timers)


def test_a_thousand_scheduled_callbacks_share_one_thread() -> None:
    book = ThreadBook()
    timers = Timers(book)
    before = threading.active_count()
    handles = [timers.schedule(600.0, lambda: None) for _ in range(1000)]
    assert threading.active_count() == before + 1
    assert len(book.alive()) == 1
    assert timers.pending() == 1000
    for handle in handles:
        handle.cancel()
    assert timers.pending() == 0
    _closed(timers)


def test_cancelled_callbacks_do_not_pile_up_until_their_due_time() -> None:
    # A run's deadline of an hour is cancelled when the run ends: a long-lived supervisor must not
    # keep every such entry until its hour has passed.
    timers = Timers(ThreadBook())
    for _ in range(10_000):
        timers.schedule(3600.0, lambda: None).cancel()
    assert len(timers._heap) <= 200
    timers.close()


def test_a_cancelled_callback_never_runs_and_cancel_says_whether_it_was_in_time() -> None:
    timers = Timers(ThreadBook())
    ran: list[str] = []
    after = threading.Event()
    # The thread is held busy while the callbacks are scheduled and the first is cancelled, so a loaded
    # machine's gap between the schedule and the cancel cannot let the callback come due first.
    release = _held(timers)
    cancelled = timers.schedule(0.0, lambda: ran.append("cancelled"))
    done = timers.schedule(0.0, lambda: ran.append("done"))
    assert cancelled.cancel() is True
    assert cancelled.cancel() is False  # already cancelled
    timers.schedule(0.0, after.set)
    release.set()
    assert after.wait(BOUND_S)
    assert ran == ["done"]
    assert done.cancel() is False  # it has run
    timers.close()


def test_a_callback_that_raises_does_not_stop_the_others() -> None:
    timers = Timers(ThreadBook())
    after = threading.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    timers.schedule(0.0, boom)
    timers.schedule(0.01, after.set)
    assert after.wait(BOUND_S)
    timers.close()


def test_close_ends_the_thread_at_once_and_nothing_scheduled_runs_afterwards() -> None:
    timers = Timers(ThreadBook())
    ran = threading.Event()
    timers.schedule(3600.0, ran.set)
    _closed(timers)
    late = timers.schedule(0.0, ran.set)
    assert late.cancelled
    assert not ran.is_set()


def test_a_supervisor_that_schedules_nothing_starts_no_timer_thread() -> None:
    with Supervisor.start() as supervisor:
        assert not any(t.name == "run-supervisor-timer" for t in supervisor.threads.alive())


@pytest.mark.run_supervisor(directories=["/w/a"])
def test_the_shutdown_grace_runs_on_the_shared_timer_which_shutdown_joins(supervisor: Supervisor) -> None:
    stop = threading.Event()

    def deaf(ctx: object) -> None:
        stop.wait(BOUND_S)  # ignores the interrupt: only the grace timer ends the shutdown

    supervisor.start_run(deaf, session="s", directory="/w/a")
    outcome = supervisor.shutdown(grace_ms=50)
    stop.set()
    assert outcome.completed
    assert outcome.abandoned_runs  # the grace passed: only the timer could have said so
    assert [t.name for t in supervisor.threads.alive() if t.name.startswith("run-supervisor-t")] == []
