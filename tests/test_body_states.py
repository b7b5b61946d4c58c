"""Waiting for children is a state of the rules: a run's body state (``BODY_TRANSITIONS``) beside
its ``RunState``, and ``BODY_RULES`` says what each body state still allows; the core asks them."""

from __future__ import annotations

import pytest
from run_support import assert_ended

from run_supervisor.protocol import CancelRun, InterruptReason, Outcome, RunFinished, RunState, StartRun
from run_supervisor.protocol._rules import (
    BODY_RULES,
    BODY_TRANSITIONS,
    BodyState,
    BodyTrigger,
    IllegalTransitionError,
    next_body_state,
)
from run_supervisor.protocol.testing import CoreShell


def test_every_body_state_has_its_moves_and_its_rule() -> None:
    assert set(BODY_TRANSITIONS) == set(BodyState) == set(BODY_RULES)
    assert next_body_state(BodyState.RUNNING, BodyTrigger.BODY_ENDED_BEFORE_CHILDREN) is (
        BodyState.AWAITING_CHILDREN
    )
    with pytest.raises(IllegalTransitionError):
        next_body_state(BodyState.ENDED, BodyTrigger.BODY_ENDED)


def test_a_parent_whose_body_ended_before_its_child_awaits_it_and_finishes_after_it() -> None:
    shell = CoreShell("/w/a")
    shell.start("p", session="s")
    shell.start("c", session="s-child", parent="p")
    shell.finish("p")  # its body returns while its child runs

    parent = shell.core._runs["p"]
    assert (parent.state, parent.body) == (RunState.ACTIVE, BodyState.AWAITING_CHILDREN)
    assert shell.core.run_snapshot("p").state is RunState.ACTIVE  # to a host it is still active
    assert shell.of(RunFinished, run_id="p") == []
    refused = shell.request(StartRun(run_id="c2", session="s-2", directory="/w/a", parent_run_id="p"))
    assert refused is not None and "has ended (waits for children)" in (refused.error or "")

    shell.finish("c")
    assert parent.body is BodyState.ENDED
    assert shell.finished("p").outcome is Outcome.COMPLETED
    assert shell.seq(RunFinished, run_id="c") < shell.seq(RunFinished, run_id="p")


def test_a_parent_awaiting_its_children_is_not_abandoned_past_its_grace() -> None:
    assert not BODY_RULES[BodyState.AWAITING_CHILDREN].abandoned_at_grace
    shell = CoreShell("/w/a")
    shell.start("p", session="s")
    shell.start("c", session="s-child", parent="p")
    shell.request(CancelRun(run_id="p", origin="user", grace_ms=100))  # interrupts its child too
    shell.finish("p")  # its body stops in time; its child's does not yet

    shell.expire_grace("p")  # nothing to abandon: its body ended, it awaits its child
    assert shell.of(RunFinished, run_id="p") == []
    shell.finish("c")

    finished = shell.finished("p")
    assert_ended(finished, Outcome.INTERRUPTED, reason=InterruptReason.USER_CANCEL, abandoned=False)
