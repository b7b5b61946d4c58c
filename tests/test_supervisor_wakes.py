"""Whom a batch of the supervisor wakes first: the callers and subscribers waiting for its answers and
events, before any thread that only has housekeeping to do (an instance with no dispose hook stopping)."""

from __future__ import annotations

from typing import Any

import pykka

from run_supervisor.actors import Supervisor
from run_supervisor.actors._instance_actor import Dispose
from run_supervisor.protocol import CloseResult, LifecycleCompleted


def test_an_instance_with_no_dispose_hook_is_told_to_stop_only_once_its_close_is_delivered(
    supervisor: Supervisor, monkeypatch: Any
) -> None:
    subscription = supervisor.subscribe()
    delivered_when_told: list[bool] = []
    tell = pykka.ActorRef.tell

    def watched(ref: pykka.ActorRef[Any], message: Any) -> None:
        if isinstance(message, Dispose):  # on the supervisor's thread: has the close reached us yet?
            delivered_when_told.append(
                any(isinstance(e, LifecycleCompleted) for e in list(subscription._items))
            )
        tell(ref, message)

    monkeypatch.setattr(pykka.ActorRef, "tell", watched)
    outcome = supervisor.close("dispose", mode="maintenance", origin="test", directory="/w/a")
    assert outcome.result is CloseResult.COMPLETED
    completed = subscription.get(timeout=10)
    while not isinstance(completed, LifecycleCompleted):
        completed = subscription.get(timeout=10)
    assert completed.action_id == outcome.action_id
    # The instance's two threads were woken after the subscriber's (the leak check then sees them end).
    assert delivered_when_told == [True]
