"""Iterating a subscription yields every event until it closes, however long it stays quiet between them."""

from __future__ import annotations

from run_supervisor.actors._errors import SupervisorTimeout
from run_supervisor.actors._subscription import Subscription
from run_supervisor.protocol import Event, StepKind, StepStarted


def test_iterating_a_subscription_waits_through_an_hour_without_events() -> None:
    subscription = Subscription()
    get = subscription.get
    quiet = [True]

    def quiet_then_live(timeout: float) -> Event:
        if quiet[0]:  # the first wait saw its hour pass with no event, as get then raises
            quiet[0] = False
            raise SupervisorTimeout(f"no event within {timeout} s")
        return get(timeout)

    subscription.get = quiet_then_live  # type: ignore[method-assign]
    event = StepStarted(seq=1, run_id="r", session="s", step="s", kind=StepKind.MODEL)
    subscription._offer(event)
    subscription._end()  # closed: the iteration ends once what was delivered is read
    assert list(subscription) == [event]
