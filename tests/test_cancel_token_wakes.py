"""A run's token wakes the threads that wait on it, and only those: a shutdown that abandons 1,000 deaf
bodies (waiting on something else) or interrupts runs that are not waiting pays for no wake-up, and a
body that waits on it is woken by every change whichever comes first, its wait or the change."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from run_supervisor.actors import RunInterrupted
from run_supervisor.actors._context import CancelToken
from run_supervisor.protocol import DeliverAnswer, InterruptReason


def _counting(token: CancelToken) -> list[int]:
    """Count the token's wake-ups (its condition's ``notify_all``)."""
    woken = [0]
    notify_all = token._cond.notify_all

    def counted() -> None:
        woken[0] += 1
        notify_all()

    token._cond.notify_all = counted  # type: ignore[method-assign]
    return woken


def _answer(ask_id: str) -> DeliverAnswer:
    return DeliverAnswer(run_id="r", ask_id=ask_id, withdrawn=True)


def test_changes_to_a_token_nobody_waits_on_wake_nobody_and_are_seen_by_the_next_wait() -> None:
    token = CancelToken()
    woken = _counting(token)
    token.deliver(_answer("a1"))
    token.wake()
    token.cancel(InterruptReason.USER_CANCEL)
    token.abandon()
    assert woken == [0]
    assert token.take_answer("a1") == _answer("a1")
    with pytest.raises(RunInterrupted):  # a wait after the change sees it at once
        token.wait_until(lambda: False, timeout=10)


@pytest.mark.parametrize(
    ("change", "interrupted"),
    [
        pytest.param(lambda t: t.cancel(InterruptReason.USER_CANCEL), True, id="cancel"),
        pytest.param(lambda t: t.abandon(), True, id="abandon"),
        pytest.param(lambda t: t.deliver(_answer("a1")), False, id="deliver"),
    ],
)
def test_a_change_wakes_a_body_that_waits_on_the_token(change: Any, interrupted: bool) -> None:
    token = CancelToken()
    woken = _counting(token)
    waiting = threading.Event()
    outcome: list[object] = []

    def ready() -> bool:
        waiting.set()  # read under the token's lock: a change can only come once the wait sleeps
        return token.take_answer("a1") is not None

    def body() -> None:
        try:
            outcome.append(token.wait_until(ready, timeout=30))
        except RunInterrupted as exc:
            outcome.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    assert waiting.wait(10)
    change(token)
    thread.join(10)
    assert not thread.is_alive()
    assert woken == [1]
    assert len(outcome) == 1
    assert isinstance(outcome[0], RunInterrupted) if interrupted else outcome == [True]
    assert token._waiting == 0
