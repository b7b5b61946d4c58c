"""Child runs: subagents and background jobs get their parent's protection boundary."""

from __future__ import annotations

import threading

import pytest
from run_support import assert_ended

from run_supervisor import (
    CloseAction,
    CloseMode,
    CloseResult,
    Gate,
    InterruptReason,
    InvalidRequest,
    Outcome,
    RejectCode,
    RunContext,
    RunState,
    Supervisor,
    SupervisorConfig,
    UnknownRun,
)
from run_supervisor.protocol import RunFinished, RunStarted
from run_supervisor.protocol.testing import CoreShell, InvariantChecker, InvariantViolation


def _finished_order(shell: CoreShell) -> list[str]:
    return [e.run_id for e in shell.of(RunFinished)]


def test_a_child_is_pinned_to_its_parents_generation_even_after_a_reload() -> None:
    shell = CoreShell("/w/a")
    shell.start("parent")
    shell.close(CloseAction.RELOAD, "/w/a")  # generation 2 is current now; the parent keeps 1

    shell.start("child", parent="parent")
    shell.start("other")

    assert shell.one(RunStarted, run_id="child").generation == 1
    assert shell.one(RunStarted, run_id="child").parent_run_id == "parent"
    assert shell.one(RunStarted, run_id="other").generation == 2


def test_a_maintenance_close_that_waits_for_a_parent_waits_for_its_children() -> None:
    shell = CoreShell("/w/a")
    shell.start("parent")
    shell.start("child", parent="parent")
    answer = shell.close(CloseAction.DISPOSE, "/w/a")
    assert answer.result is CloseResult.DEFERRED

    shell.finish("parent")  # the parent's body returned; its child still works
    assert shell.core.run_snapshot("parent").state is RunState.ACTIVE  # type: ignore[union-attr]
    assert shell.core.pending_actions()

    shell.finish("child")

    assert _finished_order(shell) == ["child", "parent"]
    assert shell.core.run_snapshot("parent").outcome is Outcome.COMPLETED  # type: ignore[union-attr]
    assert shell.core.pending_actions() == ()


@pytest.mark.parametrize(
    "interrupt",
    ["cancel", "user_confirmed_close", "shutdown", "permission_rejected"],
)
def test_an_interrupt_of_a_parent_interrupts_its_children_with_the_same_reason_and_provenance(
    interrupt: str,
) -> None:
    shell = CoreShell("/w/a")
    shell.start("parent")
    shell.start("child", parent="parent")
    shell.start("grandchild", parent="child")
    if interrupt == "cancel":
        shell.cancel("parent", origin="stop-button", tag="c1")
        want = (InterruptReason.USER_CANCEL, "stop-button", "c1")
    elif interrupt == "user_confirmed_close":
        answer = shell.close(CloseAction.DISPOSE, "/w/a", mode=CloseMode.USER_CONFIRMED_INTERRUPT)
        assert answer.interrupted_runs == ("child", "grandchild", "parent")
        want = (InterruptReason.LIFECYCLE_INTERRUPT, "config.update", answer.action_id)
    elif interrupt == "shutdown":
        answer = shell.shutdown()
        want = (InterruptReason.SHUTDOWN, "shutdown", answer.action_id)
    else:
        shell.ask("parent")
        shell.reply("parent", approve=False, tag="no")
        want = (InterruptReason.PERMISSION_REJECTED, "permission", "no")
    for run_id in ("parent", "child", "grandchild"):
        snapshot = shell.core.run_snapshot(run_id)
        assert snapshot is not None and snapshot.state is RunState.INTERRUPTING
        assert (snapshot.reason, snapshot.origin, snapshot.action_id) == want

    shell.finish("parent")
    shell.finish("child")
    assert _finished_order(shell) == []  # the grandchild still works: nobody is reported yet
    shell.finish("grandchild")

    assert _finished_order(shell) == ["grandchild", "child", "parent"]
    for event in shell.of(RunFinished):
        assert (event.outcome, event.reason, event.origin, event.action_id) == (Outcome.INTERRUPTED, *want)


def test_a_queued_child_of_an_interrupted_parent_ends_unstarted_with_the_parents_reason() -> None:
    shell = CoreShell("/w/a")
    shell.start("parent")
    shell.start("busy", session="s-sub")
    shell.start("child", session="s-sub", parent="parent")  # queued behind "busy"

    shell.cancel("parent")

    child = shell.finished("child")
    assert_ended(child, Outcome.INTERRUPTED, reason=InterruptReason.USER_CANCEL, generation=None)
    assert shell.core.session_snapshot("s-sub").queued == ()  # type: ignore[union-attr]


def test_a_queued_child_ended_by_its_parents_confirmed_close_satisfies_a_checker_fed_only_events() -> None:
    # A host's checker sees no start requests: a queued child's directory is its parent's.
    shell = CoreShell("/w/a")
    shell.start("parent")
    shell.start("busy", session="s-sub", parent="parent")
    shell.start("child", session="s-sub", parent="parent")  # queued behind "busy"
    shell.close(CloseAction.RELOAD, "/w/a", mode=CloseMode.USER_CONFIRMED_INTERRUPT, origin="dialog")
    shell.finish("busy")
    shell.finish("parent")
    assert shell.finished("child").reason is InterruptReason.LIFECYCLE_INTERRUPT
    shell.shutdown()

    from_events_only = InvariantChecker()
    from_events_only.events_of(shell.events)
    from_events_only.finish()
    assert from_events_only.violations == []


def test_a_childs_failure_does_not_end_its_parent() -> None:
    shell = CoreShell("/w/a")
    shell.start("parent")
    shell.start("child", parent="parent")

    shell.finish("child", error="the subagent crashed")

    assert shell.finished("child").outcome is Outcome.FAILED
    assert shell.core.run_snapshot("parent").state is RunState.ACTIVE  # type: ignore[union-attr]
    shell.finish("parent")
    assert shell.finished("parent").outcome is Outcome.COMPLETED


def test_a_parent_that_failed_is_reported_failed_after_its_children() -> None:
    shell = CoreShell("/w/a")
    shell.start("parent")
    shell.start("child", parent="parent")

    shell.finish("parent", error="boom")
    shell.finish("child")

    assert _finished_order(shell) == ["child", "parent"]
    assert shell.finished("parent").error == "boom"


def test_queries_show_the_tree() -> None:
    shell = CoreShell("/w/a")
    shell.start("parent")
    shell.start("a", parent="parent")
    shell.start("b", parent="parent")
    shell.start("a1", parent="a")

    parent = shell.core.run_snapshot("parent")
    child = shell.core.run_snapshot("a")
    assert parent is not None and child is not None
    assert (parent.parent_run_id, parent.children) == (None, ("a", "b"))
    assert (child.parent_run_id, child.children) == ("parent", ("a1",))


@pytest.mark.parametrize(
    ("parent", "session", "directory", "code"),
    [
        ("nobody", "s-x", "/w/a", RejectCode.UNKNOWN_RUN),
        ("queued", "s-x", "/w/a", RejectCode.INVALID_REQUEST),
        ("parent", "s-parent", "/w/a", RejectCode.INVALID_REQUEST),
        ("parent", "s-x", "/w/b", RejectCode.INVALID_REQUEST),
        ("done", "s-x", "/w/a", RejectCode.RUN_FINISHED),
    ],
    ids=["unknown", "queued parent", "same session", "other directory", "finished parent"],
)
def test_a_child_needs_an_active_parent_its_directory_and_a_session_of_its_own(
    parent: str, session: str, directory: str, code: RejectCode
) -> None:
    shell = CoreShell("/w/a", "/w/b")
    shell.start("parent")
    shell.start("queued", session="s-parent")
    shell.start("done")
    shell.finish("done")

    answer = shell.start("child", session=session, directory=directory, parent=parent)

    assert answer is not None and answer.rejected and answer.code is code
    assert shell.core.run_snapshot("child") is None


def test_at_the_shutdown_deadline_children_are_abandoned_before_their_parents() -> None:
    shell = CoreShell("/w/a")
    shell.start("parent")
    shell.start("child", parent="parent")
    shell.shutdown()

    shell.expire()

    assert _finished_order(shell) == ["child", "parent"]
    assert all(e.abandoned for e in shell.of(RunFinished))


def test_the_checker_catches_a_parent_reported_before_its_children() -> None:
    shell = CoreShell("/w/a", checker=InvariantChecker(raise_at_once=True))
    shell.start("parent")
    shell.start("child", parent="parent")
    shell.core._unfinished_children = lambda run: False  # type: ignore[method-assign]

    with pytest.raises(InvariantViolation, match="before its children"):
        shell.finish("parent")


# --- through the facade ----------------------------------------------------------------------


def test_cancelling_a_parent_stops_the_subagent_it_started() -> None:
    gate = Gate("never")
    started = threading.Event()

    def subagent(ctx: RunContext) -> None:
        started.set()
        with ctx.step("model"):
            ctx.wait(gate)

    with Supervisor.start(SupervisorConfig(shutdown_at_exit=False), directories=["/w/a"]) as sup:

        def agent(ctx: RunContext) -> None:
            sup.start_run(subagent, session="sub", directory=ctx.directory, parent_run_id=ctx.run_id)
            with ctx.step("model"):
                ctx.wait(gate)

        parent = sup.start_run(agent, session="main", directory="/w/a", run_id="p")
        assert started.wait(10)
        child_id = sup.run("p").children[0]  # type: ignore[union-attr]
        parent.cancel()

        parent_done = parent.wait(10)
        child_done = sup.run(child_id)
        assert child_done is not None and child_done.outcome is Outcome.INTERRUPTED
        assert (parent_done.reason, child_done.reason) == (InterruptReason.USER_CANCEL,) * 2
        assert child_done.parent_run_id == "p"


def test_the_facade_checks_the_parent_run_id() -> None:
    with Supervisor.start(SupervisorConfig(shutdown_at_exit=False)) as sup:
        with pytest.raises(InvalidRequest, match="parent_run_id"):
            sup.start_run(lambda ctx: None, session="s", directory="/w/a", parent_run_id="")
        with pytest.raises(UnknownRun):
            sup.start_run(lambda ctx: None, session="s", directory="/w/a", parent_run_id="nobody")


def test_a_shutdown_that_ends_a_queued_child_never_starts_the_next_run_of_its_parents_session() -> None:
    shell = CoreShell("/w/a")
    shell.start("busy", session="child-session")
    shell.start("parent", session="s1")
    shell.start("child", session="child-session", parent="parent")  # queued behind "busy"
    shell.start("follow-up", session="s1")  # queued behind the parent
    shell.finish("parent")  # its body ended; it is finished once its child is

    shell.shutdown()  # the checker raises at once if anything starts after the shutdown

    assert shell.of(RunStarted, run_id="follow-up") == []
    assert shell.finished("follow-up").generation is None
    assert _finished_order(shell).index("child") < _finished_order(shell).index("parent")
