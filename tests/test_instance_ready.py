"""``instance.ready``: a generation's caches are usable once its load hook has returned.

``instance.started`` is announced when the core decides the load, before the hook runs; the load's
end comes back as a report (``LoadDone``), and a load that returned is announced ready once, with
its generation. A load that raised or overran its budget is never said ready."""

from __future__ import annotations

import threading
from typing import Any

import msgspec

from run_supervisor import Supervisor, SupervisorConfig
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import (
    CloseAction,
    CloseMode,
    InstanceClosed,
    InstanceReady,
    InstanceStarted,
    LoadDone,
    SupervisorCore,
)
from run_supervisor.protocol.testing import CoreShell, InvariantChecker

CONFIG = SupervisorConfig(shutdown_at_exit=False, load_budget_ms=10_000)


def test_a_generation_is_said_ready_once_its_load_hook_returned() -> None:
    shell = CoreShell("/w/a")  # generation 1 of /w/a is started; its load is not reported yet
    assert shell.of(InstanceStarted, directory="/w/a", generation=1)
    assert shell.of(InstanceReady) == []

    shell.report(LoadDone(directory="/w/a", generation=1))
    shell.report(LoadDone(directory="/w/a", generation=1))  # a second report says nothing more

    (ready,) = shell.of(InstanceReady)
    assert (ready.directory, ready.generation) == ("/w/a", 1)
    assert ready.seq > shell.one(InstanceStarted, directory="/w/a", generation=1).seq


def test_a_ready_generation_names_the_life_it_was_loaded_in() -> None:
    shell = CoreShell("/w/a", core=SupervisorCore(epoch=3))
    shell.report(LoadDone(directory="/w/a", generation=1))
    started, ready = shell.one(InstanceStarted), shell.one(InstanceReady)
    assert (started.epoch, ready.epoch) == (3, 3)


def test_a_load_that_failed_is_never_said_ready() -> None:
    shell = CoreShell("/w/a")
    shell.report(LoadDone(directory="/w/a", generation=1, error="ValueError: no such project"))
    assert shell.of(InstanceReady) == []


def test_a_load_reported_after_its_generation_closed_says_nothing() -> None:
    shell = CoreShell("/w/a")
    shell.close(CloseAction.RELOAD, "/w/a", mode=CloseMode.MAINTENANCE)
    assert shell.of(InstanceClosed, directory="/w/a", generation=1)
    ignored = shell.core.statistics().reports_ignored

    shell.report(LoadDone(directory="/w/a", generation=1))  # late: generation 1 is gone
    shell.report(LoadDone(directory="/w/a", generation=2))

    assert [(e.directory, e.generation) for e in shell.of(InstanceReady)] == [("/w/a", 2)]
    assert shell.core.statistics().reports_ignored == ignored  # not a body's report refused


def test_the_checker_refuses_a_ready_that_is_unstarted_repeated_or_after_the_close() -> None:
    shell = CoreShell("/w/a")
    shell.report(LoadDone(directory="/w/a", generation=1))
    checker = InvariantChecker()
    for event in shell.events:
        checker.event(event)
    ready = shell.one(InstanceReady)
    checker.event(msgspec.structs.replace(ready, seq=checker.last_seq + 1))
    checker.event(msgspec.structs.replace(ready, seq=checker.last_seq + 1, generation=7))
    assert any("said ready twice" in v for v in checker.violations)
    assert any("said ready but never started" in v for v in checker.violations)

    closing = CoreShell("/w/a")
    closing.close(CloseAction.DISPOSE, "/w/a", mode=CloseMode.MAINTENANCE)
    late = InvariantChecker()
    for event in closing.events:
        late.event(event)
    late.event(InstanceReady(seq=late.last_seq + 1, directory="/w/a", generation=1))
    assert any("said ready after it closed" in v for v in late.violations)


class _HeldLoad:
    """Load hooks whose load of /w/a waits for ``release`` (or raises ``error`` once released)."""

    def __init__(self, error: str | None = None) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.error = error

    def load(self, directory: str, generation: int) -> Any:
        self.entered.set()
        assert self.release.wait(30), "the test never released the load"
        if self.error is not None:
            raise ValueError(self.error)
        return {"directory": directory}

    def dispose(self, directory: str, generation: int, cache: Any) -> None:
        pass


def _load_aside(sup: Supervisor) -> tuple[threading.Thread, list[BaseException]]:
    """``sup.load("/w/a")`` on a thread of its own (it waits for the hook); what it raised."""
    raised: list[BaseException] = []

    def load() -> None:
        try:
            sup.load("/w/a", timeout=30)
        except Exception as exc:
            raised.append(exc)

    thread = threading.Thread(target=load, name="test-load")
    thread.start()
    return thread, raised


def test_instance_ready_comes_only_after_the_load_hook_returned() -> None:
    hooks = _HeldLoad()
    sup = Supervisor.start(CONFIG, hooks=hooks)
    try:
        log = EventLog(sup)
        loading, raised = _load_aside(sup)
        started = log.wait_for("instance.started", directory="/w/a")
        assert hooks.entered.wait(10)
        assert log.of("instance.ready") == []  # the hook still runs: nothing is usable yet

        hooks.release.set()
        ready = log.wait_for("instance.ready", directory="/w/a")
        assert isinstance(ready, InstanceReady) and isinstance(started, InstanceStarted)
        assert (ready.generation, ready.seq > started.seq) == (started.generation, True)
        loading.join(30)
        assert not loading.is_alive() and raised == []
        log.close()
    finally:
        hooks.release.set()
        sup.shutdown(grace_ms=500, reason="test_teardown")


def test_a_load_hook_that_raised_is_never_said_ready() -> None:
    hooks = _HeldLoad(error="no such project")
    hooks.release.set()
    sup = Supervisor.start(CONFIG, hooks=hooks)
    try:
        log = EventLog(sup)
        loading, raised = _load_aside(sup)
        loading.join(30)
        assert not loading.is_alive() and len(raised) == 1  # LoadFailed
        sup.close("dispose", mode="maintenance", origin="test", directory="/w/a")  # closed at once
        log.wait_for("instance.closed", directory="/w/a")
        assert log.of("instance.ready") == []
        log.close()
    finally:
        sup.shutdown(grace_ms=500, reason="test_teardown")
