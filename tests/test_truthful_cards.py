"""Truthful cards for a failed turn: a call whose input generation or start was lost to the body's
own failure (a dropped provider stream) settles as not run -- ``interrupted``, which a UI does not
draw as a tool failure, not ``error`` -- with a label naming the cause in words (the raw error stays
in ``message``); and once the user's decline decided that a call will not run, no update of it says
``running``."""

from __future__ import annotations

import msgspec

from run_supervisor.protocol import (
    Outcome,
    PartReport,
    PartState,
    Phase,
    RunPartUpdated,
)
from run_supervisor.protocol.testing import CoreShell, InvariantChecker

ECONNRESET = "ECONNRESET: The socket connection was closed unexpectedly"


def test_a_call_lost_to_a_dropped_stream_settles_not_run_not_as_a_failed_tool() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    shell.tool("r", upto=PartState.PENDING)  # the model was generating the call's input

    shell.finish("r", error=ECONNRESET)

    finished = shell.finished("r")
    assert (finished.outcome, finished.error) == (Outcome.FAILED, ECONNRESET)
    (part,) = finished.parts
    assert (part.state, part.tool_started, part.reason, part.origin, part.phase) == (
        PartState.INTERRUPTED,
        False,
        None,
        "run_failed",
        Phase.GENERATING,
    )
    assert part.label == "Did not run: the run failed while the bash call was being generated"
    assert part.message == ECONNRESET  # the raw error is kept, not drawn as the label
    assert "ECONNRESET" not in part.label
    assert part.note == "The bash call did not run: its run failed before the tool started."


def test_a_prepared_call_left_by_a_body_that_returned_says_the_run_ended_before_it_started() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    shell.tool("r", upto=PartState.PREPARED)
    shell.finish("r")
    (part,) = shell.finished("r").parts
    assert (part.state, part.origin, part.label) == (
        PartState.INTERRUPTED,
        "run_ended",
        "Did not run: the run ended before bash started",
    )


def test_a_call_that_started_before_its_run_failed_still_says_the_tool_failed() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    shell.tool("r", upto=PartState.RUNNING)
    shell.finish("r", error=ECONNRESET)
    (part,) = shell.finished("r").parts
    assert (part.state, part.tool_started) == (PartState.ERROR, True)
    assert part.label == f"bash failed: {ECONNRESET}"


def test_a_declined_calls_updates_never_say_running_after_the_decision() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    shell.ask("r")
    before = len(shell.of(RunPartUpdated, run_id="r"))

    shell.reply("r", approve=False)  # no message: the run is interrupted, the call will not run
    after_decision = shell.of(RunPartUpdated, run_id="r")[before:]
    shell.report(PartReport(run_id="r", tool="bash", state=PartState.RUNNING))  # the body, late
    shell.finish("r")

    assert [u.state for u in after_decision] == [PartState.INTERRUPTED]
    later = shell.of(RunPartUpdated, run_id="r")[before:]
    assert all(u.state is not PartState.RUNNING for u in later)
    (part,) = shell.finished("r").parts
    assert (part.state, part.tool_started, part.label) == (
        PartState.INTERRUPTED,
        False,
        "Did not run: the user declined bash",
    )


def test_the_checker_refuses_a_running_update_after_a_decline() -> None:
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    ask_id = shell.ask("r")
    shell.reply("r", approve=False)
    checker = InvariantChecker()
    for event in shell.events:
        checker.event(event)
    card = shell.of(RunPartUpdated, run_id="r")[-1]
    late = msgspec.structs.replace(card, seq=checker.last_seq + 1, state=PartState.RUNNING)
    checker.event(late)
    assert any("says running after the user's decline" in v for v in checker.violations), ask_id
