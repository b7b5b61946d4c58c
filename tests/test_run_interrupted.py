"""RunInterrupted belongs to the supervisor: it alone raises one, and only a run's own ends it interrupted."""

from __future__ import annotations

import pytest
from run_support import assert_ended

from run_supervisor.actors import Gate, RunContext, RunHandle, RunInterrupted, Supervisor
from run_supervisor.protocol import InterruptReason, Outcome


def assert_cancelled(run: RunHandle) -> None:
    """``run`` ends interrupted by the user's cancel, with no error."""
    assert_ended(run.wait(timeout=5), Outcome.INTERRUPTED, reason=InterruptReason.USER_CANCEL, error=None)


def cancelled_r1(supervisor: Supervisor, gate: Gate) -> RunInterrupted:
    """Run r1 waits at ``gate`` and is cancelled; its body catches the ``RunInterrupted`` (its cleanup)
    and raises it again, a little later than the interrupt: r1 still ends cancelled. Returns what it
    caught."""
    caught: list[RunInterrupted] = []

    def body(ctx: RunContext) -> None:
        try:
            ctx.wait(gate)
        except RunInterrupted as exc:
            caught.append(exc)
            raise exc from None

    run = supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1")
    supervisor.cancel("r1")
    assert_cancelled(run)
    (exc,) = caught
    return exc


def test_a_host_or_a_body_cannot_construct_a_run_interrupted() -> None:
    with pytest.raises(TypeError, match="no public constructor") as raised:
        RunInterrupted(InterruptReason.USER_CANCEL)  # type: ignore[call-arg]
    assert "Supervisor.cancel" in str(raised.value)


def test_an_interrupted_body_that_lets_its_interruption_propagate_ends_interrupted(
    supervisor: Supervisor, gate: Gate
) -> None:
    run = supervisor.start_run(lambda ctx: ctx.wait(gate), session="s1", directory="/w/a", run_id="r1")
    supervisor.cancel("r1")
    assert_cancelled(run)


def test_a_body_that_raises_another_runs_interruption_fails_saying_so(
    supervisor: Supervisor, gate: Gate
) -> None:
    caught = cancelled_r1(supervisor, gate)

    def raises_it_again(ctx: RunContext) -> None:
        raise caught

    second = supervisor.start_run(raises_it_again, session="s2", directory="/w/a", run_id="r2").wait(
        timeout=5
    )
    assert second.outcome is Outcome.FAILED and second.reason is None
    assert second.error is not None and "not its own run's interruption" in second.error


def test_a_body_that_raises_its_own_run_interrupted_later_than_its_run_was_interrupted_still_ends_interrupted(
    supervisor: Supervisor, gate: Gate
) -> None:
    """The interrupt was decided; the body unwinding a little later with it is the expected path."""
    cancelled_r1(supervisor, gate)
