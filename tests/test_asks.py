"""Asks as first-class objects: ids, payloads, several open at once, replies that never race,
withdrawal, and tool parts announced as events."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from run_support import assert_ended
from scenario_support import LIBRARY_FILES, library_report

from run_supervisor.actors import (
    AskAlreadyAnswered,
    AskWithdrawn,
    FormReply,
    Gate,
    InvalidRequest,
    NothingPending,
    PermissionReply,
    RunContext,
    RunInterrupted,
    Supervisor,
    SupervisorTimeout,
    UnknownAsk,
)
from run_supervisor.actors.scenarios import load_scenario
from run_supervisor.actors.scenarios._format import PartExpectation
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import (
    PART_TRANSITIONS,
    AnswerForm,
    AskKind,
    AskPayload,
    AskRaised,
    AskRequested,
    AskState,
    BodyEnded,
    Event,
    InterruptReason,
    Outcome,
    PartReport,
    PartState,
    Question,
    RejectCode,
    ReplyPermission,
    RequestOutcome,
    RequestResult,
    RunPartUpdated,
    StartRun,
    SupervisorCore,
    WithdrawAsk,
    WithdrawReason,
)
from run_supervisor.protocol import (
    AskWithdrawn as AskWithdrawnEvent,
)


class _NotIn:
    """Equal to any value not in ``values`` (a field matcher for ``EventLog.wait_for``)."""

    def __init__(self, values: set[str]) -> None:
        self.values = values

    def __eq__(self, other: object) -> bool:
        return other not in self.values

    __hash__ = None  # type: ignore[assignment]


def requested(events: EventLog, run: str, n: int = 1, timeout: float = 2.0) -> list[AskRequested]:
    """The run's first ``n`` ``ask.requested`` events, in order (waits for each)."""
    asks: list[AskRequested] = []
    while len(asks) < n:
        seen = {a.ask_id for a in asks}
        event = events.wait_for("ask.requested", run_id=run, ask_id=_NotIn(seen), timeout=timeout)
        assert isinstance(event, AskRequested)
        asks.append(event)
    return asks


def tool_body(
    tool: str = "bash", results: list[Any] | None = None, **payload: Any
) -> Callable[[RunContext], None]:
    """A body with one tool call that asks permission before it runs its command."""

    def body(ctx: RunContext) -> None:
        call = ctx.tool(tool)
        call.prepared()
        call.running()
        with ctx.step("permission", call=call):
            reply = call.ask_permission(timeout=5, **payload)
        if results is not None:
            results.append(reply)
        call.completed()

    return body


# --- registration before the event: replies fired from it never miss ------------------------------


def test_replies_fired_from_ask_requested_for_1000_asks_with_random_body_delays_never_miss(
    supervisor: Supervisor,
) -> None:
    runs, per_run = 20, 50  # 1,000 asks: permissions and forms, in 20 runs going on at once
    rng = random.Random(9)
    delays = [[rng.uniform(0, 0.002) for _ in range(per_run)] for _ in range(runs)]
    outcomes: list[Future[Any]] = []
    lock = threading.Lock()

    def reply(event: Event) -> None:  # on the subscription's own thread, as soon as the event comes
        if not isinstance(event, AskRequested):
            return
        if event.kind is AskKind.PERMISSION:
            request: Any = ReplyPermission(ask_id=event.ask_id, approve=True)
        else:
            request = AnswerForm(ask_id=event.ask_id, answer=f"answer to {event.ask_id}")
        future = supervisor.submit(request)
        with lock:
            outcomes.append(future)

    mismatches: list[str] = []

    def body_for(index: int) -> Callable[[RunContext], None]:
        def body(ctx: RunContext) -> None:
            for n, delay in enumerate(delays[index]):
                call = ctx.tool("question" if n % 2 else "bash")
                call.prepared()
                call.running()
                ctx.sleep(delay)  # the body's own work before it asks: the old race's trigger
                with ctx.step("form" if n % 2 else "permission", call=call):
                    if n % 2:
                        ask = call.open_form(questions=[f"question {n}?"])
                        got = ask.wait(timeout=10)
                        if got.answer != f"answer to {ask.ask_id}":
                            mismatches.append(f"{ask.ask_id} got {got.answer!r}")
                    else:
                        assert call.ask_permission(timeout=10, command=f"step {n}").approved
                call.completed()

        return body

    subscription = supervisor.subscribe(callback=reply)
    try:
        handles = [
            supervisor.start_run(body_for(i), session=f"s{i}", directory="/w/a", run_id=f"r{i}")
            for i in range(runs)
        ]
        finished = [handle.wait(timeout=60) for handle in handles]
    finally:
        subscription.close()
    assert [f.outcome for f in finished] == [Outcome.COMPLETED] * runs
    with lock:
        answers = [future.result(timeout=10) for future in outcomes]
    assert len(answers) == runs * per_run
    assert [a for a in answers if a.result is not RequestResult.OK] == []  # never NothingPending
    assert mismatches == []  # every answer reached its own ask
    assert supervisor.pending_asks() == ()


def test_the_obvious_way_to_ask_from_a_step_never_races_a_reply_to_its_ask_requested_event(
    supervisor: Supervisor, events: EventLog
) -> None:
    replies: list[Any] = []

    def body(ctx: RunContext) -> None:
        with ctx.step("permission"):
            ctx.sleep(0.002)  # work first, then ask: the case that lost 260 replies out of 300
            replies.append(ctx.ask_permission(timeout=5, title="Allow?"))

    run = supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1")
    (ask,) = requested(events, "r1")
    supervisor.reply_permission(ask.ask_id, approve=True)
    assert run.wait(timeout=5).outcome is Outcome.COMPLETED
    assert replies[0].approved is True


# --- payloads ----------------------------------------------------------------------------------


def test_an_ask_carries_its_payload_tool_and_call_id_to_the_event_and_pending_asks(
    supervisor: Supervisor, events: EventLog
) -> None:
    run = supervisor.start_run(
        tool_body(
            title="Run this command?",
            command="git push --force",
            options=["once", "always", "reject"],
            data={"patterns": ["git push *"], "cwd": "/w/a"},
        ),
        session="s1",
        directory="/w/a",
        run_id="r1",
    )
    (ask,) = requested(events, "r1")
    assert (ask.kind, ask.tool, ask.call_id, ask.session) == (AskKind.PERMISSION, "bash", "call-1", "s1")
    assert ask.payload == AskPayload(
        title="Run this command?",
        command="git push --force",
        options=("once", "always", "reject"),
        data={"patterns": ["git push *"], "cwd": "/w/a"},
    )
    (pending,) = supervisor.pending_asks()
    assert (pending.ask_id, pending.state, pending.payload) == (ask.ask_id, AskState.OPEN, ask.payload)
    assert supervisor.pending_asks(run_id="r2") == ()
    supervisor.reply_permission(ask.ask_id, approve=True)
    assert run.wait(timeout=5).outcome is Outcome.COMPLETED
    assert supervisor.pending_asks() == ()
    snapshot = supervisor.ask(ask.ask_id)
    assert snapshot is not None and snapshot.state is AskState.REPLIED


def test_a_form_carries_its_questions_given_as_text_mappings_or_question_structs(
    supervisor: Supervisor, events: EventLog
) -> None:
    answers: list[FormReply] = []

    def body(ctx: RunContext) -> None:
        call = ctx.tool("question", call_id="toolu_01")
        call.prepared()
        call.running()
        answers.append(
            call.ask_form(
                timeout=5,
                title="A few choices",
                questions=[
                    "Which branch?",
                    {"question": "Which database?", "options": ["postgres", "sqlite"]},
                    Question(question="Which checks?", options=("lint", "tests"), multiple=True),
                ],
            )
        )
        call.completed()

    run = supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1")
    (ask,) = requested(events, "r1")
    assert ask.call_id == "toolu_01" and ask.kind is AskKind.FORM
    assert ask.payload.questions == (
        Question(question="Which branch?"),
        Question(question="Which database?", options=("postgres", "sqlite")),
        Question(question="Which checks?", options=("lint", "tests"), multiple=True),
    )
    supervisor.answer_form(ask.ask_id, answer="main; sqlite; lint")
    assert run.wait(timeout=5).outcome is Outcome.COMPLETED
    assert answers == [FormReply(answer="main; sqlite; lint")]


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"data": {"when": object()}}, "data is not JSON-serialisable"),
        ({"data": {1: "x"}}, "data must be a mapping with string keys"),
        ({"options": "once"}, "options"),
        ({"title": 7}, "title"),
    ],
    ids=["data-not-json", "data-key-not-str", "options-a-string", "title-not-str"],
)
def test_a_payload_that_is_not_json_is_refused_in_the_body_naming_the_argument(
    supervisor: Supervisor, payload: dict[str, Any], named: str
) -> None:
    errors: list[BaseException] = []

    def body(ctx: RunContext) -> None:
        try:
            ctx.open_permission(**payload)
        except InvalidRequest as exc:
            errors.append(exc)

    supervisor.start_run(body, session="s1", directory="/w/a").wait(timeout=5)
    assert len(errors) == 1 and named in str(errors[0]) and "open_permission" in str(errors[0])
    assert supervisor.pending_asks() == ()


def test_an_empty_question_is_refused_naming_it(supervisor: Supervisor) -> None:
    errors: list[str] = []

    def body(ctx: RunContext) -> None:
        try:
            ctx.open_form(questions=["Fine?", ""])
        except InvalidRequest as exc:
            errors.append(str(exc))

    supervisor.start_run(body, session="s1", directory="/w/a").wait(timeout=5)
    assert errors == ["open_form: questions[1].question must not be empty"]


def test_a_call_id_used_twice_in_a_run_is_refused(supervisor: Supervisor) -> None:
    errors: list[str] = []

    def body(ctx: RunContext) -> None:
        ctx.tool("bash", call_id="c1")
        try:
            ctx.tool("grep", call_id="c1")
        except InvalidRequest as exc:
            errors.append(str(exc))

    supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1").wait(timeout=5)
    assert errors == ["tool: call_id 'c1' is empty or already used in run 'r1'"]


# --- parallel asks ---------------------------------------------------------------------------


def parallel_body(n: int, results: dict[str, Any]) -> Callable[[RunContext], None]:
    """``n`` tool calls of one run ask at once (parallel tool calls); the body waits for all."""

    def body(ctx: RunContext) -> None:
        calls = [ctx.tool("bash", call_id=f"c{i}") for i in range(n)]
        for call in calls:
            call.prepared()
            call.running()
        asks = [call.open_permission(command=f"echo {call.call_id}") for call in calls]
        for call, ask in zip(calls, asks, strict=True):
            reply = ask.wait(timeout=5)
            results[call.call_id] = reply
            if reply.approved:
                call.completed()
            else:
                call.failed(reply.message or "declined")

    return body


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)], ids=lambda o: "-".join(map(str, o)))
def test_parallel_asks_in_one_run_are_answered_in_any_order_each_reaching_its_own_call(
    supervisor: Supervisor, events: EventLog, order: tuple[int, ...]
) -> None:
    results: dict[str, PermissionReply] = {}
    run = supervisor.start_run(parallel_body(3, results), session="s1", directory="/w/a", run_id="r1")
    asks = requested(events, "r1", 3)
    assert [a.call_id for a in asks] == ["c0", "c1", "c2"]
    assert len(supervisor.pending_asks(run_id="r1")) == 3
    for index in order:
        ask = asks[index]
        if index == 1:
            supervisor.reply_permission(ask.ask_id, approve=False, message="not c1")
        else:
            supervisor.reply_permission(ask.ask_id, approve=True)
    finished = run.wait(timeout=5)
    assert finished.outcome is Outcome.COMPLETED
    assert {k: (v.approved, v.message) for k, v in results.items()} == {
        "c0": (True, None),
        "c1": (False, "not c1"),
        "c2": (True, None),
    }
    assert [(p.call_id, p.state, p.tool_started) for p in finished.parts] == [
        ("c0", PartState.COMPLETED, True),
        ("c1", PartState.ERROR, False),
        ("c2", PartState.COMPLETED, True),
    ]


def test_a_reply_by_run_id_is_refused_when_the_run_has_several_open_asks_of_that_kind(
    supervisor: Supervisor, events: EventLog
) -> None:
    run = supervisor.start_run(parallel_body(2, {}), session="s1", directory="/w/a", run_id="r1")
    asks = requested(events, "r1", 2)
    with pytest.raises(InvalidRequest, match=r"2 open permission asks .* address the reply by ask_id"):
        supervisor.reply_permission(run_id="r1", approve=True)
    with pytest.raises(InvalidRequest, match="exactly one of ask_id and run_id"):
        supervisor.reply_permission(asks[0].ask_id, run_id="r1", approve=True)
    for ask in asks:
        supervisor.reply_permission(ask.ask_id, approve=True)
    assert run.wait(timeout=5).outcome is Outcome.COMPLETED


def test_a_rejection_without_a_message_interrupts_the_run_and_withdraws_its_other_open_asks(
    supervisor: Supervisor, events: EventLog
) -> None:
    run = supervisor.start_run(parallel_body(3, {}), session="s1", directory="/w/a", run_id="r1")
    asks = requested(events, "r1", 3)
    supervisor.reply_permission(asks[1].ask_id, approve=False)
    finished = run.wait(timeout=5)
    assert (finished.outcome, finished.reason) == (Outcome.INTERRUPTED, InterruptReason.PERMISSION_REJECTED)
    withdrawn = [e for e in events.of("ask.withdrawn") if isinstance(e, AskWithdrawnEvent)]
    assert [(e.ask_id, e.reason, e.interrupt_reason) for e in withdrawn] == [
        (asks[0].ask_id, WithdrawReason.INTERRUPTED, InterruptReason.PERMISSION_REJECTED),
        (asks[2].ask_id, WithdrawReason.INTERRUPTED, InterruptReason.PERMISSION_REJECTED),
    ]
    with pytest.raises(AskWithdrawn, match=r"interrupted .*permission_rejected"):
        supervisor.reply_permission(asks[0].ask_id, approve=True)
    # The declined call did not run; the others waited for their own permission: none ran.
    assert [(p.call_id, p.state, p.tool_started, p.label) for p in finished.parts] == [
        (
            "c0",
            PartState.INTERRUPTED,
            False,
            "Did not run: interrupted by a rejected permission while bash waited for permission",
        ),
        ("c1", PartState.INTERRUPTED, False, "Did not run: the user declined bash"),
        (
            "c2",
            PartState.INTERRUPTED,
            False,
            "Did not run: interrupted by a rejected permission while bash waited for permission",
        ),
    ]
    assert finished.parts[1].note == "The user declined this bash call."


def test_a_rejection_with_a_message_concerns_its_own_call_only_the_others_stay_open(
    supervisor: Supervisor, events: EventLog
) -> None:
    results: dict[str, PermissionReply] = {}
    run = supervisor.start_run(parallel_body(2, results), session="s1", directory="/w/a", run_id="r1")
    asks = requested(events, "r1", 2)
    supervisor.reply_permission(asks[0].ask_id, approve=False, message="not that one")
    assert [a.ask_id for a in supervisor.pending_asks()] == [asks[1].ask_id]
    supervisor.reply_permission(asks[1].ask_id, approve=True)
    assert run.wait(timeout=5).outcome is Outcome.COMPLETED
    assert (results["c0"].approved, results["c1"].approved) == (False, True)


# --- a late reply never leaks into a later ask ---------------------------------------------------


def test_a_timed_out_ask_is_withdrawn_and_a_late_reply_is_rejected_and_never_reaches_the_next_ask(
    supervisor: Supervisor, events: EventLog
) -> None:
    got: list[Any] = []

    def body(ctx: RunContext) -> None:
        try:
            ctx.ask_permission(timeout=0.2, title="Allow?")
        except SupervisorTimeout as exc:
            got.append(exc)
        got.append(ctx.ask_form(timeout=5, title="Then answer this"))

    run = supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1")
    first, second = requested(events, "r1", 2)
    withdrawn = events.wait_for("ask.withdrawn", ask_id=first.ask_id)
    assert isinstance(withdrawn, AskWithdrawnEvent) and withdrawn.reason is WithdrawReason.TIMEOUT
    with pytest.raises(AskWithdrawn, match="withdrawn \\(timeout\\)"):
        supervisor.reply_permission(first.ask_id, approve=True)
    with pytest.raises(NothingPending):
        supervisor.reply_permission(run_id="r1", approve=True)
    assert [a.ask_id for a in supervisor.pending_asks()] == [second.ask_id]  # still waits for the user
    supervisor.answer_form(second.ask_id, answer="blue")
    assert run.wait(timeout=5).outcome is Outcome.COMPLETED
    assert isinstance(got[0], SupervisorTimeout) and "withdrawn" in str(got[0])
    assert got[1] == FormReply(answer="blue")


def test_an_ask_of_an_interrupted_run_is_withdrawn_and_a_late_reply_says_why(
    supervisor: Supervisor, events: EventLog
) -> None:
    run = supervisor.start_run(tool_body(), session="s1", directory="/w/a", run_id="r1")
    (ask,) = requested(events, "r1")
    supervisor.close("dispose", mode="user_confirmed_interrupt", origin="dialog.reload", directory="/w/a")
    finished = run.wait(timeout=5)
    assert finished.reason is InterruptReason.LIFECYCLE_INTERRUPT
    with pytest.raises(AskWithdrawn, match="interrupted \\(lifecycle_interrupt\\)"):
        supervisor.reply_permission(ask.ask_id, approve=True)
    (part,) = finished.parts
    assert (part.tool_started, part.label) == (
        False,
        "Did not run: interrupted by dialog.reload while bash waited for permission",
    )
    assert part.note == "The bash call was interrupted by dialog.reload before the tool ran: it did not run."


def test_a_second_reply_to_an_ask_is_refused_the_first_decision_stands(
    supervisor: Supervisor, events: EventLog
) -> None:
    results: list[Any] = []
    run = supervisor.start_run(tool_body(results=results), session="s1", directory="/w/a", run_id="r1")
    (ask,) = requested(events, "r1")
    supervisor.reply_permission(ask.ask_id, approve=True)
    with pytest.raises(AskAlreadyAnswered, match="replied already"):
        supervisor.reply_permission(ask.ask_id, approve=False)
    run.wait(timeout=5)
    assert results[0].approved is True


def test_a_reply_to_an_unknown_ask_or_of_the_wrong_kind_is_refused(
    supervisor: Supervisor, events: EventLog
) -> None:
    run = supervisor.start_run(tool_body(), session="s1", directory="/w/a", run_id="r1")
    (ask,) = requested(events, "r1")
    with pytest.raises(UnknownAsk):
        supervisor.reply_permission("r1:ask-99", approve=True)
    with pytest.raises(
        InvalidRequest, match="is a permission ask, not a form: answer it with reply_permission"
    ):
        supervisor.answer_form(ask.ask_id, answer="x")
    supervisor.reply_permission(ask.ask_id, approve=True)
    assert run.wait(timeout=5).outcome is Outcome.COMPLETED


def test_an_ask_left_open_when_its_body_returns_is_withdrawn_as_run_ended(
    supervisor: Supervisor, events: EventLog
) -> None:
    def body(ctx: RunContext) -> None:
        ctx.open_permission(title="never waited for")

    supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1").wait(timeout=5)
    withdrawn = events.wait_for("ask.withdrawn", run_id="r1")
    assert isinstance(withdrawn, AskWithdrawnEvent) and withdrawn.reason is WithdrawReason.RUN_ENDED


def test_a_body_may_withdraw_its_own_ask(supervisor: Supervisor, events: EventLog) -> None:
    outcome: list[bool] = []

    def body(ctx: RunContext) -> None:
        ask = ctx.open_form(title="Still there?")
        outcome.append(ask.withdraw())

    supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1").wait(timeout=5)
    withdrawn = events.wait_for("ask.withdrawn", run_id="r1")
    assert isinstance(withdrawn, AskWithdrawnEvent) and withdrawn.reason is WithdrawReason.BODY
    assert outcome == [True]


# --- decisions keep their meanings ----------------------------------------------------------------


def form_body(results: list[Any]) -> Callable[[RunContext], None]:
    def body(ctx: RunContext) -> None:
        call = ctx.tool("question")
        call.prepared()
        call.running()
        results.append(call.ask_form(timeout=5, questions=["Which branch?"]))
        call.completed()

    return body


def test_a_form_dismissed_with_a_message_is_feedback_and_the_run_goes_on(
    supervisor: Supervisor, events: EventLog
) -> None:
    results: list[Any] = []
    run = supervisor.start_run(form_body(results), session="s1", directory="/w/a", run_id="r1")
    (ask,) = requested(events, "r1")
    supervisor.dismiss_form(ask.ask_id, message="Use the default branch.")
    finished = run.wait(timeout=5)
    assert finished.outcome is Outcome.COMPLETED and finished.reason is None
    assert results == [FormReply(answer=None, dismissed=True, message="Use the default branch.")]
    (part,) = finished.parts
    assert (part.state, part.tool_started, part.label, part.note) == (
        PartState.ERROR,
        True,
        "question: the user dismissed the form: Use the default branch.",
        "The user dismissed the question form without answering: Use the default branch.",
    )
    assert events.wait_for("ask.dismissed", ask_id=ask.ask_id)


def test_a_form_dismissed_without_a_message_interrupts_with_form_dismissed(
    supervisor: Supervisor, events: EventLog
) -> None:
    run = supervisor.start_run(form_body([]), session="s1", directory="/w/a", run_id="r1")
    (ask,) = requested(events, "r1")
    supervisor.dismiss_form(ask.ask_id)
    finished = run.wait(timeout=5)
    assert_ended(finished, Outcome.INTERRUPTED, reason=InterruptReason.FORM_DISMISSED, origin="form")
    assert finished.parts[0].label == "question: the user dismissed the form"


def test_a_permission_rejected_without_a_message_raises_run_interrupted_in_the_body(
    supervisor: Supervisor, events: EventLog
) -> None:
    caught: list[BaseException] = []

    def body(ctx: RunContext) -> None:
        try:
            ctx.ask_permission(timeout=5)
        except RunInterrupted as exc:
            caught.append(exc)
            raise

    run = supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1")
    (ask,) = requested(events, "r1")
    supervisor.reply_permission(ask.ask_id, approve=False)
    assert run.wait(timeout=5).reason is InterruptReason.PERMISSION_REJECTED
    assert [getattr(e, "reason", None) for e in caught] == [InterruptReason.PERMISSION_REJECTED]


# --- tool parts as events ------------------------------------------------------------------------


def test_every_change_of_a_tool_part_is_a_run_part_updated_event(
    supervisor: Supervisor, events: EventLog
) -> None:
    run = supervisor.start_run(tool_body(command="ls"), session="s1", directory="/w/a", run_id="r1")
    (ask,) = requested(events, "r1")
    supervisor.reply_permission(ask.ask_id, approve=True)
    run.wait(timeout=5)
    updates = [e for e in events.of("run.part.updated") if isinstance(e, RunPartUpdated)]
    assert [(u.call_id, u.state, u.phase, u.tool_started, u.label) for u in updates] == [
        ("call-1", PartState.PENDING, "generating", False, "bash call being generated"),
        ("call-1", PartState.PREPARED, "prepared", False, "bash call prepared, not started"),
        ("call-1", PartState.RUNNING, "running", False, "bash running"),  # a first ask may follow
        ("call-1", PartState.RUNNING, "running", False, "bash waiting for permission"),
        ("call-1", PartState.RUNNING, "running", True, "bash running"),
        ("call-1", PartState.COMPLETED, None, True, "bash ran"),
    ]
    assert updates[3].ask_id == ask.ask_id and updates[3].waiting_for is AskKind.PERMISSION
    steps = events.of("run.step.started", step="permission")
    assert [(s.tool, s.call_id) for s in steps] == [("bash", "call-1")]  # type: ignore[attr-defined]


def test_a_part_interrupted_by_a_lifecycle_action_names_its_origin_and_tells_the_model_it_may_have_run(
    supervisor: Supervisor, events: EventLog
) -> None:
    gate = Gate("never")

    def body(ctx: RunContext) -> None:
        call = ctx.tool("bash")
        call.prepared()
        call.running()
        with ctx.step("tool_exec", call=call):
            ctx.wait(gate)

    run = supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1")
    events.wait_for("run.step.started", run_id="r1", step="tool_exec")
    supervisor.close(
        "reload", mode="user_confirmed_interrupt", origin="settings.provider.connect", directory="/w/a"
    )
    run.wait(timeout=5)
    last = [e for e in events.of("run.part.updated") if isinstance(e, RunPartUpdated)][-1]
    assert (last.state, last.tool_started, last.label) == (
        PartState.INTERRUPTED,
        True,
        "Stopped: bash was interrupted by settings.provider.connect while it ran",
    )
    assert last.note is not None and "may have run" in last.note and "do not repeat it blindly" in last.note
    assert "abort" not in last.label.lower()


# --- the core alone: who wins when a reply and a timeout cross -----------------------------------


def _core_with_an_open_ask() -> tuple[SupervisorCore, str]:
    core = SupervisorCore()
    core.request(StartRun(run_id="r1", session="s1", directory="/d"), reply_to=None)
    core.report(PartReport(run_id="r1", tool="bash", state=PartState.PENDING, call_id="c1"))
    core.report(AskRaised(run_id="r1", ask_id="r1:ask-1", kind=AskKind.PERMISSION, payload=AskPayload()))
    return core, "r1:ask-1"


def test_a_reply_accepted_before_the_bodys_timeout_stands_and_the_withdrawal_is_ignored() -> None:
    core, ask_id = _core_with_an_open_ask()
    out = core.request(ReplyPermission(ask_id=ask_id, approve=True), reply_to="host")
    assert [c.answer for c in out if getattr(c, "reply_to", None) == "host"] == [
        RequestOutcome(result=RequestResult.OK)
    ]
    later = core.report(WithdrawAsk(run_id="r1", ask_id=ask_id, reason=WithdrawReason.TIMEOUT))
    assert later == []  # nothing withdrawn: the reply is on its way to the body
    snapshot = core.ask_snapshot(ask_id)
    assert snapshot is not None and snapshot.state is AskState.REPLIED


def test_a_withdrawal_that_comes_first_makes_the_late_reply_ask_withdrawn() -> None:
    core, ask_id = _core_with_an_open_ask()
    out = core.report(WithdrawAsk(run_id="r1", ask_id=ask_id, reason=WithdrawReason.TIMEOUT))
    assert any(getattr(c, "withdrawn", False) for c in out)  # the body learns it was withdrawn
    (reply,) = core.request(ReplyPermission(ask_id=ask_id, approve=True), reply_to="host")
    assert reply.answer.code is RejectCode.ASK_WITHDRAWN  # type: ignore[union-attr]


def test_the_asks_of_a_forgotten_run_are_forgotten_with_it() -> None:
    core = SupervisorCore(retain_finished=0)
    core.request(StartRun(run_id="r1", session="s1", directory="/d"), reply_to=None)
    core.report(AskRaised(run_id="r1", ask_id="r1:ask-1", kind=AskKind.FORM, payload=AskPayload()))
    core.report(BodyEnded(run_id="r1"))
    assert core.ask_snapshot("r1:ask-1") is None
    (reply,) = core.request(AnswerForm(ask_id="r1:ask-1", answer="x"), reply_to="host")
    assert reply.answer.code is RejectCode.UNKNOWN_ASK  # type: ignore[union-attr]


# --- the docs' example: prompts and cards drawn from the events alone -----------------------------


def test_the_ask_prompts_example_draws_a_permission_prompt_a_form_and_truthful_cards_from_events() -> None:
    import subprocess
    import sys

    example = Path(__file__).resolve().parents[1] / "docs" / "examples" / "ask_prompts.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert (
        "? bash (toolu_01): Run this command?\n    $ git push origin main\n    [once]  [always]  [reject]"
        in out
    )
    assert "    1. Which remote?\n       ( ) origin\n       ( ) backup" in out
    assert (
        "# toolu_01   Did not run: the user declined bash: Push to a branch, not main.  [not started]" in out
    )
    assert "model is told: The user declined this bash call: Push to a branch, not main." in out
    assert out.rstrip().endswith("run: completed")
    api = (example.parents[1] / "api.md").read_text()
    assert out.strip() in api  # the page shows what the example really prints


# --- the scenario library: every tool-part change is an event, every part's card is checked ---------


@pytest.mark.parametrize("path", LIBRARY_FILES, ids=lambda p: p.stem)
def test_every_tool_part_change_of_the_library_is_a_run_part_updated_event(path: Path) -> None:
    report = library_report(path)
    assert report.passed, report.failures
    updates: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for event in report.events:
        if event["type"] == "run.part.updated":
            updates.setdefault((event["run"], event["call_id"]), []).append(event)
    for run_id, run in report.runs.items():
        for part in run.tool_parts:
            seen = updates.pop((run_id, part.call_id), [])  # type: ignore[arg-type]
            assert seen, f"{run_id} {part.call_id}: no run.part.updated at all"
            states = [PartState(u["state"]) for u in seen]
            assert states[0] is PartState.PENDING, f"{run_id} {part.call_id} begins {states[0]}"
            for before, after in itertools.pairwise(seen):  # each event is a change, each move legal
                assert before != after | {"seq": before["seq"]}, f"{run_id} {part.call_id}: repeated {after}"
                old, new = PartState(before["state"]), PartState(after["state"])
                assert old is new or new in PART_TRANSITIONS[old] or new is PartState.INTERRUPTED, (
                    f"{run_id} {part.call_id}: {old} -> {new} skips a change"
                )
            assert not any("abort" in u["label"].lower() for u in seen), seen  # labels tell the truth
            last = seen[-1]  # the card a UI drew last is the card the run ended with
            assert (last["state"], last["tool_started"], last["label"]) == (
                part.state,
                part.tool_started,
                part.label,
            )
    assert updates == {}, f"part events of parts no run reported: {sorted(updates)}"


@pytest.mark.parametrize("path", LIBRARY_FILES, ids=lambda p: p.stem)
def test_every_tool_part_of_the_library_has_its_label_and_tool_started_expected(path: Path) -> None:
    scenario = load_scenario(path)
    expected = {e.target: e.fields.get("tool_parts") for e in scenario.expect}
    for run in scenario.runs:
        if not run.tools:
            continue
        parts = expected.get(run.id)
        # Given for every run with tool calls (empty: a run that never reached one, e.g. cancelled queued).
        assert isinstance(parts, tuple), f"{path.name}: {run.id} says nothing of its tool parts"
        for part in parts:
            assert isinstance(part, PartExpectation), f"{path.name}: {run.id}: a bare state {part}"
            assert part.tool_started is not None and part.label, f"{path.name}: {run.id}: {part}"


def test_a_reply_and_a_timeout_that_cross_agree_the_host_and_the_body_see_the_same_winner(
    supervisor: Supervisor,
) -> None:
    """Either the reply won (the host got ok, the body the reply) or the timeout did (the host got
    AskWithdrawn, the body SupervisorTimeout): never one of each."""
    rng = random.Random(3)
    timeouts = [rng.choice([0.0, 0.0002, 0.0005, 0.001, 0.002]) for _ in range(300)]
    body_saw: dict[str, str] = {}
    host_saw: dict[str, Future[Any]] = {}
    lock = threading.Lock()

    def reply(event: Event) -> None:
        if isinstance(event, AskRequested):
            future = supervisor.submit(ReplyPermission(ask_id=event.ask_id, approve=True))
            with lock:
                host_saw[event.ask_id] = future

    def body(ctx: RunContext) -> None:
        for timeout in timeouts:
            ask = ctx.open_permission(title="quick?")
            try:
                ask.wait(timeout)
                body_saw[ask.ask_id] = "reply"
            except SupervisorTimeout:
                body_saw[ask.ask_id] = "timeout"

    subscription = supervisor.subscribe(callback=reply)
    try:
        assert supervisor.start_run(body, session="s1", directory="/w/a").wait(timeout=60).outcome is (
            Outcome.COMPLETED
        )
    finally:
        subscription.close()
    with lock:
        host = {ask_id: future.result(timeout=10) for ask_id, future in host_saw.items()}
    assert set(host) == set(body_saw) and len(body_saw) == len(timeouts)
    for ask_id, saw in body_saw.items():
        outcome = host[ask_id]
        if saw == "reply":
            assert outcome.result is RequestResult.OK, (ask_id, outcome)
        else:
            assert outcome.code is RejectCode.ASK_WITHDRAWN, (ask_id, outcome)
