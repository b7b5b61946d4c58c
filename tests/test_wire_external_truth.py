"""External runs over the wire never tell a client something false: a report is answered ``ok`` only
once it took effect, the cards its part states draw say what happened, a retried report does not
happen twice, a queued run keeps a bounded number of reports, a finished (or recovered) run answers a
report as it answers a cancel, and an id a route cannot carry is refused where it enters."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from wire_support import (
    Served,
    SseReader,
    end_run,
    of_type,
    report,
    run_external,
    served,
    serving,
    sse,
    start_queued,
)
from wire_support import run_served as run
from wire_support import start_external as start

from run_supervisor.actors import InvalidRequest, Supervisor, SupervisorConfig
from run_supervisor.actors.hosts import ExternalRuns, WireHost, decode_report
from run_supervisor.actors.hosts._external import EndReport, PartUpdate
from run_supervisor.actors.hosts._schema import with_hosts
from run_supervisor.actors.testing import EventLog, simulate_crash
from run_supervisor.protocol import (
    PART_TRANSITIONS,
    Event,
    PartState,
    Phase,
    RecoveredRun,
    RequestResult,
    RunFinished,
    RunPartUpdated,
    SessionStatus,
    StartRun,
    SupervisorCore,
    wire_schema,
)
from run_supervisor.protocol._parts import RUN_ENDED_ORIGIN, part_snapshot

CONFIG = SupervisorConfig(shutdown_at_exit=False)


def host_event(data: dict[str, Any]) -> None:
    """``data`` is a host event as ``run-supervisor schema --hosts`` describes them."""
    schema = with_hosts(wire_schema())
    jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/HostEvent"}).validate(data)


def last_card(seen: list[Any], run_id: str, call_id: str) -> dict[str, Any]:
    cards = [
        e.data
        for e in seen
        if e.type == "run.part.updated" and (e.data["run_id"], e.data["call_id"]) == (run_id, call_id)
    ]
    assert cards, f"no run.part.updated for {call_id}"
    return cards[-1]


# --- tool part states: every legal sequence draws a true card -----------------------------------------


def test_a_tool_reported_pending_running_completed_ends_on_a_card_that_says_it_ran() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        for state in ("pending", "running", "completed"):  # opencode's own tool states, in order
            answer = await report(client, "r1", type="part", tool="bash", state=state, call_id="c1")
            assert answer.status_code == 200, answer.text
        finished = await end_run(client, events)
        (part,) = finished.data["parts"]
        assert (part["state"], part["tool_started"], part["label"]) == ("completed", True, "bash ran")
        card = last_card(events.seen, "r1", "c1")
        assert (card["state"], card["tool_started"], card["label"]) == ("completed", True, "bash ran")

    run_external(scenario)


def test_a_part_report_that_does_not_apply_is_rejected_naming_the_state_and_changes_nothing() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        for state in ("pending", "running", "completed"):
            assert (
                await report(client, "r1", type="part", tool="bash", state=state, call_id="c1")
            ).is_success
        back = await report(client, "r1", type="part", tool="bash", state="running", call_id="c1")
        assert back.status_code == 422, back.text
        assert back.json()["result"] == "rejected" and "is completed" in back.json()["error"]
        await end_run(client, events)
        assert last_card(events.seen, "r1", "c1")["state"] == "completed"

    run_external(scenario)


def test_a_part_the_user_declined_with_feedback_is_not_reported_completed_with_an_ok() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        for state in ("pending", "running"):
            assert (
                await report(client, "r1", type="part", tool="bash", state=state, call_id="c1")
            ).is_success
        asked = await report(client, "r1", type="ask", tool="bash", call_id="c1", command="git push")
        ask_id = asked.json()["ask_id"]
        declined = await client.post(
            f"/asks/{ask_id}/permission", json={"approve": False, "message": "not to main"}
        )
        assert declined.status_code == 200, declined.text
        await events.until(of_type("external.answer", ask_id=ask_id))
        # The core turned the part to error with the user's feedback: a late "completed" does nothing.
        late = await report(client, "r1", type="part", tool="bash", state="completed", call_id="c1")
        assert late.status_code == 422, late.text
        assert "is error" in late.json()["error"]
        await end_run(client, events)
        card = last_card(events.seen, "r1", "c1")
        assert (card["state"], card["declined"], card["message"]) == (
            "error",
            "permission",
            "not to main",
        )

    run_external(scenario)


def test_what_a_reported_part_state_stands_for_is_a_chain_of_legal_moves_and_never_an_interrupt() -> None:
    from run_supervisor.protocol._rules import PART_REPORTS

    assert set(PART_REPORTS) == set(PartState)
    for state, row in PART_REPORTS.items():
        assert PartState.INTERRUPTED not in row  # the supervisor decides it, never a client
        for reported, moves in row.items():
            here = state
            for move in moves:
                assert move in PART_TRANSITIONS[here], (state, reported, moves)
                here = move
            assert here is reported
    assert PART_REPORTS[PartState.PENDING][PartState.RUNNING] == (PartState.PREPARED, PartState.RUNNING)


# --- the property: random sequences of part states -----------------------------------------------------

_RANK = {PartState.PENDING: 0, PartState.PREPARED: 1, PartState.RUNNING: 2, PartState.COMPLETED: 3}
_UNFINISHED = (PartState.PENDING, PartState.PREPARED, PartState.RUNNING)
_TOOLS = {"c1": "bash", "c2": "read"}
_ENDED = "the run ended before this tool call finished"


@dataclass
class _Expected:
    tool: str
    state: PartState
    ran: bool = False
    message: str | None = None


def _expect(model: dict[str, _Expected], call_id: str, state: PartState, message: str | None) -> bool:
    """What a report means, said independently of the code under test: whether it applies, and the
    part it leaves. A part begins ``pending``; it moves only forward (``pending < prepared < running <
    completed``; a tool that reached ``running`` ran) or to ``error`` while unfinished; a state it is in
    already is a report that stands; nothing else applies (``interrupted`` is the supervisor's)."""
    part = model.get(call_id)
    if part is None:
        if state is PartState.PENDING:
            model[call_id] = _Expected(_TOOLS[call_id], PartState.PENDING)
            return True
        return False
    if state is PartState.INTERRUPTED:
        return False
    if state is part.state:
        if state is PartState.ERROR:
            part.message = message or "the tool failed"
        return True
    if part.state in _UNFINISHED:
        if state is PartState.ERROR:
            part.state, part.message = PartState.ERROR, message or "the tool failed"
            return True
        if _RANK[state] > _RANK[part.state]:
            part.state = state
            part.ran = part.ran or _RANK[state] >= _RANK[PartState.RUNNING]
            return True
    return False


def _at_the_end(part: _Expected) -> tuple[PartState, bool, str]:
    origin = phase = None
    if part.state in _UNFINISHED and not part.ran:  # the run ended before it started: it did not run
        phase = {PartState.PENDING: Phase.GENERATING, PartState.PREPARED: Phase.PREPARED}[part.state]
        part.state, origin = PartState.INTERRUPTED, RUN_ENDED_ORIGIN
    elif part.state in _UNFINISHED:  # the run ended under it: it did not finish
        part.state, part.message = PartState.ERROR, _ENDED
    label = part_snapshot(
        tool=part.tool,
        state=part.state,
        tool_started=part.ran,
        message=part.message,
        origin=origin,
        phase=phase,
    ).label
    return part.state, part.ran, label


class _Cards:
    """The cards the events draw: the last ``run.part.updated`` of each part, and each part's moves."""

    def __init__(
        self, supervisor: Supervisor, on_finished: Callable[[str], object] = lambda run_id: None
    ) -> None:
        self._lock = threading.Lock()
        self._on_finished = on_finished
        self.last: dict[tuple[str, str], RunPartUpdated] = {}
        self.states: dict[tuple[str, str], list[PartState]] = {}
        self._finished: dict[str, threading.Event] = {}
        supervisor.subscribe(callback=self._seen)

    def _done(self, run_id: str) -> threading.Event:
        with self._lock:
            return self._finished.setdefault(run_id, threading.Event())

    def _seen(self, event: Event) -> None:
        if isinstance(event, RunPartUpdated):
            with self._lock:
                self.last[(event.run_id, event.call_id)] = event
                self.states.setdefault((event.run_id, event.call_id), []).append(event.state)
        elif isinstance(event, RunFinished):
            self._on_finished(event.run_id)
            self._done(event.run_id).set()

    def wait_finished(self, run_id: str) -> None:
        assert self._done(run_id).wait(10), f"{run_id} did not finish"

    def check(self, run_id: str, model: dict[str, _Expected]) -> None:
        for call_id in _TOOLS:
            key = (run_id, call_id)
            if call_id not in model:
                assert key not in self.last, f"{call_id} was never begun, yet has a card"
                continue
            moves = self.states[key]
            assert moves[0] is PartState.PENDING
            for old, new in itertools.pairwise(moves):  # every move the cards show is legal
                assert old is new or new in PART_TRANSITIONS[old], f"{call_id}: {old} -> {new}"
            card = self.last[key]
            assert (card.state, card.tool_started, card.label) == _at_the_end(model[call_id]), moves


_REPORTS = st.lists(
    st.tuples(
        st.sampled_from(sorted(_TOOLS)), st.sampled_from(list(PartState)), st.sampled_from([None, "exit 1"])
    ),
    max_size=10,
)
_OPENCODE = [("c1", PartState(s), None) for s in ("pending", "running", "completed")]
_OPENCODE_FAILED = [
    ("c1", PartState.PENDING, None),
    ("c1", PartState.RUNNING, None),
    ("c1", PartState.ERROR, "exit 1"),
]
_PAWWORK = [("c1", PartState(s), None) for s in ("pending", "prepared", "running", "completed")]
_RETRIED = [
    ("c1", PartState(s), None) for s in ("pending", "pending", "running", "running", "completed", "completed")
]
_NEVER_RAN = [
    ("c2", PartState.PENDING, None),
    ("c2", PartState.ERROR, "bad input"),
    ("c2", PartState.RUNNING, None),
]


def test_every_sequence_of_part_states_draws_the_card_it_means_and_only_reports_that_took_effect_are_ok(
    supervisor: Supervisor,
) -> None:
    notices: list[dict[str, Any]] = []
    runs = ExternalRuns(supervisor, notices.append)
    cards = _Cards(supervisor, runs.finished)
    numbers = iter(range(1, 10_000))

    @settings(
        max_examples=60,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(_REPORTS)
    @example(_OPENCODE)
    @example(_OPENCODE_FAILED)
    @example(_PAWWORK)
    @example(_RETRIED)
    @example(_NEVER_RAN)
    def drive(reports: list[tuple[str, PartState, str | None]]) -> None:
        n = next(numbers)
        run_id = f"p{n}"
        started = runs.start(StartRun(run_id=run_id, session=f"ps{n}", directory="/w/a"), lease_ms=60_000)
        assert started.result(timeout=10).code is None
        model: dict[str, _Expected] = {}
        for call_id, state, message in reports:
            update = PartUpdate(tool=_TOOLS[call_id], state=state, call_id=call_id, message=message)
            answer = runs.report(run_id, update).result(timeout=10)
            applies = _expect(model, call_id, state, message)
            assert (answer.result is RequestResult.OK) is applies, (call_id, state, answer)
            if applies:
                assert answer.call_id == call_id
            else:
                assert answer.code is not None and answer.error
        assert runs.report(run_id, EndReport()).result(timeout=10).result is RequestResult.OK
        cards.wait_finished(run_id)
        cards.check(run_id, model)

    drive()
    supervisor.shutdown(grace_ms=200)


def test_sequences_of_part_states_through_the_real_server_draw_the_cards_they_mean() -> None:
    with served() as srv, httpx.Client(base_url=srv.url, headers=srv.auth, timeout=10.0) as client:
        cards = _Cards(srv.supervisor)
        numbers = iter(range(1, 10_000))

        @settings(max_examples=6, derandomize=True, database=None, deadline=None)
        @given(_REPORTS)
        @example(_OPENCODE)
        @example(_RETRIED)
        def drive(reports: list[tuple[str, PartState, str | None]]) -> None:
            run_id = f"h{next(numbers)}"
            started = client.post(
                "/runs", json={"run_id": run_id, "session": f"s-{run_id}", "directory": "/w/a"}
            )
            assert started.status_code == 201, started.text
            model: dict[str, _Expected] = {}
            for call_id, state, message in reports:
                body: dict[str, Any] = {"type": "part", "tool": _TOOLS[call_id], "state": state.value}
                body |= {"call_id": call_id} | ({"message": message} if message else {})
                answer = client.post(f"/runs/{run_id}/reports", json=body)
                applies = _expect(model, call_id, state, message)
                assert (answer.json()["result"] == "ok") is applies, (call_id, state, answer.text)
                assert (answer.status_code == 200) is applies
            assert client.post(f"/runs/{run_id}/reports", json={"type": "end"}).status_code == 200
            cards.wait_finished(run_id)
            cards.check(run_id, model)

        drive()


# --- answers: a dismissed form is not a rejected permission -----------------------------------------


def test_a_form_dismissed_with_a_message_is_told_apart_from_a_permission_rejected_with_feedback() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        await report(client, "r1", type="part", tool="bash", state="pending", call_id="c1")
        permission = (await report(client, "r1", type="ask", call_id="c1", command="ls")).json()["ask_id"]
        await report(client, "r1", type="part", tool="question", state="pending", call_id="c2")
        form = (await report(client, "r1", type="ask", form=True, call_id="c2", questions=["why?"])).json()[
            "ask_id"
        ]
        rejected = await client.post(
            f"/asks/{permission}/permission", json={"approve": False, "message": "no"}
        )
        assert rejected.status_code == 200, rejected.text
        dismissed = await client.post(f"/asks/{form}/dismiss", json={"message": "no"})
        assert dismissed.status_code == 200, dismissed.text
        told_permission = (await events.until(of_type("external.answer", ask_id=permission))).data
        told_form = (await events.until(of_type("external.answer", ask_id=form))).data
        strip = {"seq", "ask_id"}
        assert {k: v for k, v in told_permission.items() if k not in strip} != {
            k: v for k, v in told_form.items() if k not in strip
        }
        assert (told_permission["form"], told_permission.get("dismissed")) == (False, False)
        assert (told_form["form"], told_form.get("dismissed"), told_form["message"]) == (True, True, "no")
        host_event(told_permission)
        host_event(told_form)
        await report(client, "r1", type="end")

    run_external(scenario)


# --- retries: a report sent again after a timeout does not happen twice --------------------------------


def test_a_retried_ask_report_opens_one_ask() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        await report(client, "r1", type="part", tool="bash", state="pending", call_id="c1")
        ask = {"type": "ask", "tool": "bash", "call_id": "c1", "command": "rm -rf build"}
        first = await report(client, "r1", **ask)
        again = await report(client, "r1", **ask)  # the client timed out on the first and retried
        assert first.status_code == again.status_code == 200, (first.text, again.text)
        ask_id = first.json()["ask_id"]
        assert again.json()["ask_id"] == ask_id
        assert [a["ask_id"] for a in (await client.get("/asks", params={"run_id": "r1"})).json()] == [ask_id]
        await client.post(f"/asks/{ask_id}/permission", json={"approve": True})
        await events.until(of_type("external.answer", ask_id=ask_id))
        await report(client, "r1", type="heartbeat")
        late = await report(client, "r1", **ask)  # a retry that arrives after the user answered
        assert late.json()["ask_id"] == ask_id
        assert (await client.get("/asks", params={"run_id": "r1"})).json() == []
        await report(client, "r1", type="end")
        await events.until(of_type("run.finished", run_id="r1"))
        requested = [e for e in events.seen if e.type == "ask.requested"]
        assert len(requested) == 1

    run_external(scenario)


def test_a_retried_step_retry_or_end_report_changes_nothing_the_second_time() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        for body in (
            {"type": "step", "kind": "model", "step": "m1"},
            {"type": "retry", "attempt": 1, "message": "rate limited"},
        ):
            assert (await report(client, "r1", **body)).status_code == 200
            assert (await report(client, "r1", **body)).status_code == 200
        await end_run(client, events)
        again = await report(client, "r1", type="end")  # its answer was lost: the client asks again
        assert again.status_code == 200, again.text
        other = await report(client, "r1", type="end", error="boom")
        assert other.status_code == 409 and other.json()["code"] == "run_finished"
        started = [e for e in events.seen if e.type == "run.step.started"]
        retries = [e for e in events.seen if e.type == "session.status" and e.data.get("status") == "retry"]
        assert len(started) == 1 and len(retries) == 1

    run_external(scenario)


def test_an_end_sent_twice_before_the_first_is_answered_is_ok_twice(supervisor: Supervisor) -> None:
    runs = ExternalRuns(supervisor, lambda notice: None)
    cards = _Cards(supervisor, runs.finished)
    assert runs.start(StartRun(run_id="e1", session="se", directory="/w/a")).result(timeout=10).code is None
    first, second = runs.report("e1", EndReport()), runs.report("e1", EndReport())
    assert first.result(timeout=10).result is RequestResult.OK
    assert second.result(timeout=10).result is RequestResult.OK, second.result()
    cards.wait_finished("e1")
    assert runs.report("e1", EndReport()).result(timeout=10).result is RequestResult.OK
    other = runs.report("e1", EndReport(error="x")).result(timeout=10)
    assert other.code is not None and other.code.value == "run_finished"
    supervisor.shutdown(grace_ms=200)


# --- a queued run keeps a bounded number of reports --------------------------------------------------------


def test_reports_to_a_queued_run_are_bounded_and_refused_past_the_bound_with_a_clear_code() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await start_queued(client, events)
            big = "x" * 600_000
            first = await report(client, "r2", type="retry", attempt=1, message=big)
            assert first.status_code == 200 and first.json()["queued"] is True, first.text
            second = await report(client, "r2", type="retry", attempt=2, message=big)  # past 1 MiB
            assert (second.status_code, second.json()["code"]) == (409, "session_busy"), second.text
            answers = [
                await report(client, "r2", type="step", kind="model", step=f"m{n}", finished=bool(n % 2))
                for n in range(100)
            ]
            kept = [a for a in answers if a.status_code == 200]
            refused = [a for a in answers if a.status_code != 200]
            assert kept and refused and len(kept) < 64, "a queued run keeps some reports, not all"
            assert all(a.json()["queued"] is True for a in kept)
            assert {(a.status_code, a.json()["code"]) for a in refused} == {(409, "session_busy")}
            assert "queued" in refused[0].json()["error"] and "report again" in refused[0].json()["error"]
            assert (
                await report(client, "r2", type="heartbeat")
            ).status_code == 200  # never kept, never refused
            await report(client, "r1", type="end")
            await events.until(of_type("run.started", run_id="r2"))
            last = len(kept) - 1 if len(kept) % 2 else len(kept) - 2  # the last kept step start
            await events.until(of_type("run.step.started", run_id="r2", step=f"m{last}"))
            assert srv.host.external.held == 0
            await report(client, "r2", type="end")

    run(scenario)


def test_a_report_kept_for_a_queued_run_that_does_nothing_when_it_starts_is_told_by_an_event() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await start_queued(client, events)
            early = await report(client, "r2", type="part", tool="bash", state="completed", call_id="c9")
            assert early.status_code == 200 and early.json()["queued"] is True
            await report(client, "r1", type="end")
            refused = await events.until(of_type("external.refused", run_id="r2"))
            assert (refused.data["report"], refused.data["code"], refused.data["call_id"]) == (
                "part",
                "invalid_request",
                "c9",
            )
            host_event(refused.data)
            await report(client, "r2", type="end")

    run(scenario)


# --- a finished or recovered run: one answer for one situation -----------------------------------------


@contextlib.contextmanager
def served_on(journal: Path) -> Iterator[Served]:
    sup = Supervisor.start(CONFIG, journal=journal, directories=["/w/a"])
    host = WireHost(sup)
    with serving(sup, host) as srv:
        yield srv


def test_after_a_crash_the_recovered_runs_session_is_idle_and_a_report_answers_as_a_cancel_does(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "runs.journal"
    sup = Supervisor.start(CONFIG, journal=journal, directories=["/w/a"])
    host = WireHost(sup)
    try:
        log = EventLog(sup)
        assert (
            host.external.start(StartRun(run_id="r1", session="s1", directory="/w/a")).result(5).code is None
        )
        pending = decode_report({"type": "part", "tool": "bash", "state": "pending", "call_id": "c1"})
        assert host.external.report("r1", pending).result(5).result is RequestResult.OK
        log.wait_for("run.part.updated", run_id="r1")
        log.close()
    finally:
        simulate_crash(sup)
        host.hub.join(5.0)

    with served_on(journal) as srv, httpx.Client(base_url=srv.url, headers=srv.auth, timeout=10.0) as client:
        assert client.get("/runs/r1").json()["reason"] == "crash"
        session = client.get("/sessions/s1")
        assert session.status_code == 200, session.text
        assert session.json()["status"] == "idle"
        cancel = client.post("/runs/r1/cancel", json={})
        for body in ({"type": "end"}, {"type": "heartbeat"}, {"type": "step", "kind": "model"}):
            answer = client.post("/runs/r1/reports", json=body)
            assert (answer.status_code, answer.json()["code"]) == (cancel.status_code, cancel.json()["code"])
        assert (cancel.status_code, cancel.json()["code"]) == (409, "run_finished")
        ghost = client.post("/runs/nobody/reports", json={"type": "end"})
        ghost_cancel = client.post("/runs/nobody/cancel", json={})
        assert (ghost.status_code, ghost.json()["code"]) == (
            ghost_cancel.status_code,
            ghost_cancel.json()["code"],
        )


def test_a_recovered_run_leaves_its_session_known_and_idle_in_the_core() -> None:
    core = SupervisorCore()
    core.recover([RecoveredRun(run_id="r1", session="s1", directory="/w/a", generation=1)])
    session = core.session_snapshot("s1")
    assert session is not None and session.status is SessionStatus.IDLE and session.active is None


# --- ids: what a route cannot carry is refused where it enters -----------------------------------------

_BAD_IDS = ["a/b", "a b", "a?b", "a#b", "..", ".", "é", "x" * 161]


@pytest.mark.parametrize("bad", _BAD_IDS)
def test_an_id_a_route_cannot_carry_is_refused_naming_the_argument(supervisor: Supervisor, bad: str) -> None:
    calls: list[tuple[str, Callable[[], object]]] = [
        (
            "run_id",
            lambda: supervisor.start_run(lambda ctx: None, session="s1", directory="/w/a", run_id=bad),
        ),
        ("session", lambda: supervisor.start_run(lambda ctx: None, session=bad, directory="/w/a")),
        ("run_id", lambda: supervisor.cancel(bad)),
        ("run_id", lambda: supervisor.run(bad)),
        ("session_id", lambda: supervisor.session(bad)),
        ("ask_id", lambda: supervisor.reply_permission(bad, approve=True)),
        ("action_id", lambda: supervisor.confirm_close(bad)),
        ("session", lambda: supervisor.set_queue_policy(bad, "queue")),
    ]
    for name, call in calls:
        with pytest.raises(InvalidRequest, match=name):
            call()
    submitted = supervisor.submit(StartRun(run_id=bad, session="s1", directory="/w/a")).result(timeout=5)
    assert (
        submitted.code is not None
        and submitted.code.value == "invalid_request"
        and "run_id" in (submitted.error or "")
    )


def test_an_id_of_the_documented_charset_and_length_is_taken_and_addressable_over_http() -> None:
    run_id = "Run_1-a.b:" + "x" * (128 - 10)

    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            refused = await client.post("/runs", json={"run_id": "a/b", "session": "s1", "directory": "/w/a"})
            assert refused.status_code == 422 and "run_id" in refused.json()["error"], refused.text
            bad_session = await client.post(
                "/runs", json={"run_id": "r9", "session": "a b", "directory": "/w/a"}
            )
            assert bad_session.status_code == 422 and "session" in bad_session.json()["error"]
            await start(client, run_id, "s1")
            assert (await client.get(f"/runs/{run_id}")).json()["run_id"] == run_id
            assert (await report(client, run_id, type="end")).status_code == 200
            odd = await client.post("/runs/a%20b/reports", json={"type": "end"})
            assert odd.status_code == 422 and "run_id" in odd.json()["error"], odd.text

    run(scenario)
