"""Truthful cards for a failed turn: a call whose input generation or start was lost to the body's
own failure (a dropped provider stream) settles as not run -- ``interrupted``, which a UI does not
draw as a tool failure, not ``error`` -- with a label naming the cause in words (the raw error stays
in ``message``); once the user's decline decided that a call will not run, no update of it says
``running``; and a card's ``tool_started`` only ever goes from false to true, while a crash journal
still counts a running call no ask gates as one that may have run."""

from __future__ import annotations

from pathlib import Path

import msgspec

from run_supervisor import Gate, RunContext, Supervisor, SupervisorConfig
from run_supervisor.actors.testing import EventLog, simulate_crash
from run_supervisor.protocol import (
    AskKind,
    AskPayload,
    AskRaised,
    InterruptReason,
    Outcome,
    PartReport,
    PartState,
    Phase,
    RunPartUpdated,
)
from run_supervisor.protocol.testing import CoreShell, InvariantChecker

ECONNRESET = "ECONNRESET: The socket connection was closed unexpectedly"


def _shell() -> CoreShell:
    """A core over /w/a with run ``r`` active in session ``s``."""
    shell = CoreShell("/w/a")
    shell.start("r", session="s")
    return shell


def _final_card(shell: CoreShell) -> tuple[PartState, bool, str]:
    """The state, ``tool_started`` and label of the one part ``r``'s ``run.finished`` carries."""
    (part,) = shell.finished("r").parts
    return part.state, part.tool_started, part.label


def test_a_call_lost_to_a_dropped_stream_settles_not_run_not_as_a_failed_tool() -> None:
    shell = _shell()
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
    shell = _shell()
    shell.tool("r", upto=PartState.PREPARED)
    shell.finish("r")
    (part,) = shell.finished("r").parts
    assert (part.state, part.origin, part.label) == (
        PartState.INTERRUPTED,
        "run_ended",
        "Did not run: the run ended before bash started",
    )


def test_a_call_that_started_before_its_run_failed_still_says_the_tool_failed() -> None:
    shell = _shell()
    shell.tool("r", upto=PartState.RUNNING)
    shell.finish("r", error=ECONNRESET)
    (part,) = shell.finished("r").parts
    assert (part.state, part.tool_started) == (PartState.ERROR, True)
    assert part.label == f"bash failed: {ECONNRESET}"


def test_a_declined_calls_updates_never_say_running_after_the_decision() -> None:
    shell = _shell()
    shell.ask("r")
    before = len(shell.of(RunPartUpdated, run_id="r"))

    shell.reply("r", approve=False)  # no message: the run is interrupted, the call will not run
    after_decision = shell.of(RunPartUpdated, run_id="r")[before:]
    shell.report(PartReport(run_id="r", tool="bash", state=PartState.RUNNING))  # the body, late
    shell.finish("r")

    assert [u.state for u in after_decision] == [PartState.INTERRUPTED]
    later = shell.of(RunPartUpdated, run_id="r")[before:]
    assert all(u.state is not PartState.RUNNING for u in later)
    assert _final_card(shell) == (PartState.INTERRUPTED, False, "Did not run: the user declined bash")


def test_the_checker_refuses_a_running_update_after_a_decline() -> None:
    shell = _shell()
    ask_id = shell.ask("r")
    shell.reply("r", approve=False)
    checker = InvariantChecker()
    for event in shell.events:
        checker.event(event)
    card = shell.of(RunPartUpdated, run_id="r")[-1]
    late = msgspec.structs.replace(card, seq=checker.last_seq + 1, state=PartState.RUNNING)
    checker.event(late)
    assert any("says running after the user's decline" in v for v in checker.violations), ask_id


def _started(shell: CoreShell, run: str) -> list[bool]:
    return [u.tool_started for u in shell.of(RunPartUpdated, run_id=run)]


def test_a_call_that_reports_running_then_asks_its_first_permission_never_says_started_then_not() -> None:
    shell = _shell()
    shell.ask("r")  # opencode's order: the call is running, then it asks its first permission
    shell.reply("r", approve=True)
    shell.report(PartReport(run_id="r", tool="bash", state=PartState.COMPLETED))
    shell.finish("r")

    cards = shell.of(RunPartUpdated, run_id="r")
    assert [(u.state, u.tool_started, u.label) for u in cards] == [
        (PartState.PENDING, False, "bash call being generated"),
        (PartState.PREPARED, False, "bash call prepared, not started"),
        (PartState.RUNNING, False, "bash running"),
        (PartState.RUNNING, False, "bash waiting for permission"),
        (PartState.RUNNING, True, "bash running"),
        (PartState.COMPLETED, True, "bash ran"),
    ]


def test_a_running_call_no_ask_gates_is_shown_started_when_it_ends() -> None:
    shell = _shell()
    shell.tool("r", upto=PartState.RUNNING)
    shell.cancel("r")
    shell.finish("r")
    assert _started(shell, "r") == [False, False, False, True]
    assert _final_card(shell) == (
        PartState.INTERRUPTED,
        True,
        "Stopped: bash was interrupted by the user's cancel while it ran",
    )


def test_a_running_call_that_asks_a_form_is_shown_started_and_a_later_permission_keeps_it_so() -> None:
    shell = _shell()
    shell.ask("r", form=True)  # the question tool, at work: it asks
    shell.answer_form("r")
    shell.report(AskRaised(run_id="r", ask_id="r:perm", kind=AskKind.PERMISSION, payload=AskPayload()))
    shell.reply("r", approve=False, message="not that")
    assert _started(shell, "r") == [False, False, False, True, True, True, True]


def test_a_cancel_settles_a_call_waiting_for_its_first_permission_at_once() -> None:
    shell = _shell()
    shell.ask("r")
    before = len(shell.of(RunPartUpdated, run_id="r"))

    shell.cancel("r")  # its permission will never be granted now: the call will not run
    decided = shell.of(RunPartUpdated, run_id="r")[before:]
    shell.finish("r")

    assert [(u.state, u.tool_started, u.label) for u in decided] == [
        (
            PartState.INTERRUPTED,
            False,
            "Did not run: interrupted by the user's cancel while bash waited for permission",
        )
    ]
    assert len(shell.of(RunPartUpdated, run_id="r")) == before + 1  # the run's end redraws nothing
    (part,) = shell.finished("r").parts
    assert (part.reason, part.phase) == (InterruptReason.USER_CANCEL, Phase.RUNNING)


def test_the_checker_refuses_a_tool_started_that_goes_back_to_false() -> None:
    shell = _shell()
    shell.tool("r", upto=PartState.COMPLETED)
    checker = InvariantChecker()
    for event in shell.events:
        checker.event(event)
    card = shell.of(RunPartUpdated, run_id="r")[-1]
    assert card.tool_started
    back = msgspec.structs.replace(card, seq=checker.last_seq + 1, tool_started=False)
    checker.event(back)
    assert any("tool_started went from true back to false" in v for v in checker.violations)


def test_the_checker_refuses_a_finished_part_that_unsays_its_cards_tool_started() -> None:
    shell = _shell()
    shell.tool("r", upto=PartState.COMPLETED)
    shell.finish("r")
    checker = InvariantChecker()
    events = list(shell.events)
    finished = shell.finished("r")
    (part,) = finished.parts
    unsaid = msgspec.structs.replace(finished, parts=(msgspec.structs.replace(part, tool_started=False),))
    for event in events:
        checker.event(unsaid if event is finished else event)
    assert any("its run.finished part does not" in v for v in checker.violations)


def _crash_and_recover(tmp_path: Path, opened: list[Supervisor], body_asks: bool) -> bool:
    """Crash while a running bash call waits (for its first permission, or for nothing); whether the
    recovered call may have run."""
    journal = tmp_path / "journal.db"
    config = SupervisorConfig(shutdown_at_exit=False)
    gate = Gate("never")

    def body(ctx: RunContext) -> None:
        call = ctx.tool("bash")
        call.prepared()
        call.running()
        if body_asks:
            call.ask_permission(timeout=60)
        ctx.wait(gate)

    sup = Supervisor.start(config, journal=journal, directories=["/w/a"])
    opened.append(sup)
    log = EventLog(sup)
    sup.start_run(body, session="s1", directory="/w/a", run_id="r1")
    card = log.wait_for("run.part.updated", run_id="r1", state="running")
    if body_asks:
        card = log.wait_for("run.part.updated", run_id="r1", waiting_for="permission")
    assert isinstance(card, RunPartUpdated) and card.tool_started is False  # not shown started yet
    log.close()
    simulate_crash(sup)
    after = Supervisor.start(config, journal=journal)
    opened.append(after)
    (recovered,) = after.recovered()
    (part,) = recovered.parts
    assert part.state is PartState.INTERRUPTED
    return part.tool_started


def test_a_running_call_its_card_does_not_yet_show_started_is_recovered_as_one_that_may_have_run(
    tmp_path: Path, opened: list[Supervisor]
) -> None:
    assert _crash_and_recover(tmp_path, opened, body_asks=False) is True


def test_a_running_call_waiting_for_its_first_permission_at_the_crash_is_recovered_as_one_that_did_not_run(
    tmp_path: Path, opened: list[Supervisor]
) -> None:
    assert _crash_and_recover(tmp_path, opened, body_asks=True) is False
