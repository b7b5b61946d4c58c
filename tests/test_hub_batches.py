"""The wire hosts' event hub hands a supervisor's batch of events to each event loop in one wake-up, and
its pump outlives any quiet spell."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from run_supervisor.actors._errors import SupervisorTimeout
from run_supervisor.actors._subscription import Subscription
from run_supervisor.actors.hosts._hub import EventHub, Listener, _push_all
from run_supervisor.protocol import Event, StepKind, StepStarted


class _Supervisor:
    """What the hub reads of a supervisor: its epoch, its recovery events and one subscription."""

    epoch = None

    def __init__(self, subscription: Subscription) -> None:
        self._subscription = subscription

    def recovery_events(self) -> tuple[Event, ...]:
        return ()

    def subscribe(self) -> Subscription:
        return self._subscription


class _CountingLoop:
    """An event loop as the hub sees one: every ``call_soon_threadsafe`` is one wake-up of its thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[Callable[..., object], tuple[Any, ...]]] = []
        self.called = threading.Event()

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any) -> None:
        self.calls.append((callback, args))
        self.called.set()


def test_a_batch_of_events_wakes_each_listening_loop_once_and_keeps_their_order() -> None:
    subscription = Subscription()
    hub = EventHub(_Supervisor(subscription))  # type: ignore[arg-type]  # the hub's reads only
    loop = _CountingLoop()
    try:
        replay, reset, listener = hub.listen(None, loop=loop)  # type: ignore[arg-type]
        assert (replay, reset) == ([], None)
        events: list[Event] = [
            StepStarted(seq=seq, run_id="r", session="s", step=f"s{seq}", kind=StepKind.MODEL)
            for seq in range(1, 51)
        ]
        subscription._offer_many(events)  # as the supervisor delivers one batch: one lock, one notify
        assert loop.called.wait(10)
    finally:
        subscription._end()
        hub.join(10)
    pushes = [args for callback, args in loop.calls if callback is _push_all]
    assert len(pushes) == 1  # one wake of the loop for the 50 events, not 50
    group, items = pushes[0]
    assert group == (listener,)
    assert [item.id for item in items] == [f"{hub.epoch}:{seq}" for seq in range(1, 51)]
    assert [item.id for item in hub.items()] == [item.id for item in items]
    _push_all(group, items)  # what the loop then runs: the stream gets them all, woken once
    assert isinstance(listener, Listener) and list(listener.items) == items and listener.ready.is_set()


def test_an_hour_without_events_does_not_end_the_hubs_pump() -> None:
    subscription = Subscription()
    get = subscription.get
    idle = [True]

    def quiet_then_live(timeout: float) -> Event:
        if idle[0]:  # the first wait saw an hour pass with no event (SupervisorTimeout, as get raises)
            idle[0] = False
            raise SupervisorTimeout(f"no event within {timeout} s")
        return get(timeout)

    subscription.get = quiet_then_live  # type: ignore[method-assign]
    hub = EventHub(_Supervisor(subscription))  # type: ignore[arg-type]  # the hub's reads only
    loop = _CountingLoop()
    try:
        hub.listen(None, loop=loop)  # type: ignore[arg-type]
        subscription._offer(StepStarted(seq=1, run_id="r", session="s", step="s", kind=StepKind.MODEL))
        assert loop.called.wait(10)  # the pump still reads: the event reached the listening loop
    finally:
        subscription._end()
        hub.join(10)
    assert [item.id for item in hub.items()] == [f"{hub.epoch}:1"]
