"""Whom a batch of the supervisor wakes first, and how often it publishes: the callers and subscribers
waiting for its answers and events are woken before any thread that only has housekeeping to do (an
instance with no dispose hook stopping), and such an instance's close is published with what closed it."""

from __future__ import annotations

from typing import Any

import pykka

from run_supervisor.actors import Gate, RunContext, Supervisor
from run_supervisor.actors._instance_actor import Dispose
from run_supervisor.actors._view import View
from run_supervisor.protocol import CloseResult, LifecycleCompleted, Outcome, RunStarted


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


def test_the_run_that_held_a_deferred_close_and_the_close_are_published_together(
    supervisor: Supervisor, gate: Gate, monkeypatch: Any
) -> None:
    batches: list[list[str]] = []
    refresh_batch = View.refresh_batch

    def recorded(view: View, core: Any, batch: Any) -> None:
        batch = list(batch)
        batches.append([type(getattr(message, "request", message)).__name__ for message, _ in batch])
        refresh_batch(view, core, batch)

    monkeypatch.setattr(View, "refresh_batch", recorded)
    subscription = supervisor.subscribe()

    def held(ctx: RunContext) -> None:
        ctx.wait(gate)

    run = supervisor.start_run(held, session="s", directory="/w/a")
    while not isinstance(subscription.get(timeout=10), RunStarted):
        pass
    outcome = supervisor.close("dispose", mode="maintenance", origin="test", directory="/w/a")
    assert outcome.result is CloseResult.DEFERRED
    gate.open()
    completed = subscription.get(timeout=10)
    while not isinstance(completed, LifecycleCompleted):
        completed = subscription.get(timeout=10)
    assert run.wait(10).outcome is Outcome.COMPLETED
    # The body's end and the instance's close (no dispose hook) in one publication, not two.
    assert [batch for batch in batches if "BodyEnded" in batch] == [
        batch for batch in batches if "DisposeDone" in batch
    ]
