"""A form is answered per question, as opencode's question tool answers: one entry per question (a
list of picks for a multiple-choice one), checked against the form's questions, carried as given to
the body, on ``ask.replied`` and over both wires; one string still answers a form as one text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from scenario_support import assert_refused, played, story
from scenario_support import run as scenario_run
from test_stdio import Sidecar, session
from wire_support import Served, of_type, sse
from wire_support import run_served as _http

from run_supervisor.actors import FormReply, InvalidRequest, RunContext, Supervisor
from run_supervisor.actors.hosts._openapi import document
from run_supervisor.actors.testing import EventLog
from run_supervisor.protocol import AskReplied, AskRequested, Outcome, Question
from run_supervisor.protocol._payloads import make_payload

QUESTIONS = [
    "Which branch?",
    {"question": "Which database?", "options": ["postgres", "sqlite"]},
    Question(question="Which checks?", options=("lint", "tests"), multiple=True),
]
WIRE_QUESTIONS = [
    "Which branch?",
    {"question": "Which database?", "options": ["postgres", "sqlite"]},
    {"question": "Which checks?", "options": ["lint", "tests"], "multiple": True},
]


def _form_run(supervisor: Supervisor, events: EventLog, replies: list[FormReply]) -> tuple[Any, str]:
    def body(ctx: RunContext) -> None:
        replies.append(ctx.ask_form(timeout=10, title="A few choices", questions=QUESTIONS))

    run = supervisor.start_run(body, session="s1", directory="/w/a", run_id="r1")
    asked = events.wait_for("ask.requested", run_id="r1", timeout=5)
    assert isinstance(asked, AskRequested)
    return run, asked.ask_id


def test_a_form_answered_per_question_reaches_the_body_and_ask_replied_as_given(
    supervisor: Supervisor, events: EventLog
) -> None:
    replies: list[FormReply] = []
    run, ask_id = _form_run(supervisor, events, replies)
    supervisor.answer_form(ask_id, answer=["main", "sqlite", ["lint", "tests"]])
    assert run.wait(timeout=5).outcome is Outcome.COMPLETED
    assert replies == [FormReply(answer=("main", "sqlite", ("lint", "tests")))]
    replied = events.wait_for("ask.replied", ask_id=ask_id, timeout=5)
    assert isinstance(replied, AskReplied)
    assert replied.answer == ("main", "sqlite", ("lint", "tests"))


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (["main", "sqlite"], "answer has 2 entries but the form asks 3 questions"),
        (
            ["main", ["sqlite"], "lint"],
            "answer[1] is a list, but question 1 ('Which database?') is not multiple",
        ),
        (["main", 7, "lint"], "answer[1] must be a str or a list of str"),
        ({"branch": "main"}, "answer must be a str or a list"),
    ],
)
def test_an_answer_that_does_not_fit_the_forms_questions_is_refused_naming_the_entry(
    supervisor: Supervisor, events: EventLog, answer: Any, named: str
) -> None:
    replies: list[FormReply] = []
    run, ask_id = _form_run(supervisor, events, replies)
    with pytest.raises(InvalidRequest, match=re.escape(named)):
        supervisor.answer_form(ask_id, answer=answer)
    assert [a.ask_id for a in supervisor.pending_asks()] == [ask_id]  # still open: answer it right
    supervisor.answer_form(ask_id, answer=["main", "sqlite", "lint"])  # one pick of a multiple: a string
    assert run.wait(timeout=5).outcome is Outcome.COMPLETED
    assert replies == [FormReply(answer=("main", "sqlite", "lint"))]


def test_one_string_still_answers_a_form_of_several_questions_as_one_text(
    supervisor: Supervisor, events: EventLog
) -> None:
    replies: list[FormReply] = []
    run, ask_id = _form_run(supervisor, events, replies)
    supervisor.answer_form(ask_id, answer="main; sqlite; lint")
    assert run.wait(timeout=5).outcome is Outcome.COMPLETED
    assert replies == [FormReply(answer="main; sqlite; lint")]


def test_a_form_is_answered_per_question_over_http_and_a_misfit_is_a_422_naming_the_entry() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await client.post("/runs", json={"run_id": "r1", "session": "s1", "directory": "/w/a"})
            await events.until(of_type("run.started", run_id="r1"))
            report = {"type": "ask", "form": True, "title": "choices", "questions": WIRE_QUESTIONS}
            ask_id = (await client.post("/runs/r1/reports", json=report)).json()["ask_id"]
            short = await client.post(f"/asks/{ask_id}/form", json={"answer": ["main"]})
            assert short.status_code == 422 and "1 entries but the form asks 3" in short.json()["error"]
            listed = await client.post(f"/asks/{ask_id}/form", json={"answer": [["main"], "sqlite", []]})
            assert listed.status_code == 422 and "answer[0]" in listed.json()["error"], listed.text
            nested = await client.post(f"/asks/{ask_id}/form", json={"answer": ["main", "sqlite", [["x"]]]})
            assert nested.status_code == 422, nested.text
            answer = ["main", "sqlite", ["lint", "tests"]]
            ok = await client.post(f"/asks/{ask_id}/form", json={"answer": answer})
            assert ok.status_code == 200, ok.text
            notice = await events.until(of_type("external.answer", ask_id=ask_id))
            assert notice.data["answer"] == answer
            is_reply = of_type("ask.replied", ask_id=ask_id)
            replied = next((e for e in events.seen if is_reply(e)), None) or await events.until(is_reply)
            assert replied.data["answer"] == answer
            again = await client.post("/runs/r1/reports", json={**report, "title": "again"})
            by_run = await client.post("/runs/r1/form", json={"answer": "one text"})  # a plain string
            assert by_run.status_code == 200, by_run.text
            notice = await events.until(of_type("external.answer", ask_id=again.json()["ask_id"]))
            assert notice.data["answer"] == "one text"

    _http(scenario)


def test_a_form_is_answered_per_question_over_stdio() -> None:
    async def scenario(car: Sidecar) -> None:
        await car.event("instance.started", directory="/p/a")
        await car.send({"id": 1, "type": "start_run", "run_id": "r1", "session": "s1", "directory": "/p/a"})
        await car.event("run.started", run_id="r1")
        report = {"type": "ask", "form": True, "questions": WIRE_QUESTIONS}
        await car.send({"id": 2, "type": "report", "run_id": "r1", "report": report})
        ask_id = (await car.answer(2))["answer"]["ask_id"]
        await car.send({"id": 3, "type": "answer_form", "ask_id": ask_id, "answer": ["main", "sqlite"]})
        short = await car.answer(3)
        assert (short["status"], short["answer"]["code"]) == (422, "invalid_request")
        assert "2 entries" in short["answer"]["error"]
        answer = ["main", "sqlite", ["lint"]]
        await car.send({"id": 4, "type": "answer_form", "ask_id": ask_id, "answer": answer})
        assert (await car.answer(4))["status"] == 200
        assert (await car.event("external.answer", ask_id=ask_id))["answer"] == answer
        assert car.proc.stdin is not None
        car.proc.stdin.close()
        while await car.read() is not None:
            pass

    assert session(scenario, "--directory", "/p/a") == 0


FORM_STEP = (
    '{ kind = "form", id = "asking", ask = "choices", title = "Push?", questions = ["Which branch?", '
    '{ question = "Which checks?", options = ["lint", "tests"], multiple = true }] }'
)


def _form_story(answer: str) -> str:
    return story(
        "a form answered per question",
        scenario_run(
            "r1",
            '{ kind = "model" }',
            '{ kind = "tool_input", tool = "question" }',
            '{ kind = "tool_exec", tool = "question" }',
            FORM_STEP,
        ),
        f'[[actions]]\nid = "reply"\nwhen = "r1.asking.started"\ndo = "answer_form"\nrun = "r1"\n'
        f'ask = "choices"\nanswer = {answer}\n',
    )


def test_a_scenario_file_answers_a_form_per_question_and_a_misfit_is_rejected() -> None:
    fits = (
        _form_story('["main", ["lint", "tests"]]')
        + '[expect.reply]\nresult = "ok"\n[expect.r1]\noutcome = "completed"\n'
    )
    assert played(fits).failures == []
    short = _form_story('["main"]') + (
        '[[actions]]\nid = "again"\nwhen = "reply.rejected"\ndo = "answer_form"\nrun = "r1"\n'
        'ask = "choices"\nanswer = "main; lint"\n'
        '[expect.reply]\nresult = "rejected"\n[expect.again]\nresult = "ok"\n'
    )
    assert played(short).failures == []
    assert_refused(_form_story("[{ x = 1 }]"), "actions[0].answer", "a list of one per question")


def test_a_question_with_a_misspelt_field_is_refused_as_the_document_says_its_object_is_closed() -> None:
    schemas = document()["components"]["schemas"]
    assert schemas["QuestionInput"]["additionalProperties"] is False

    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await client.post("/runs", json={"run_id": "r1", "session": "s1", "directory": "/w/a"})
            await events.until(of_type("run.started", run_id="r1"))
            misspelt = {"type": "ask", "form": True, "questions": [{"question": "Which?", "mutliple": True}]}
            refused = await client.post("/runs/r1/reports", json=misspelt)
            assert refused.status_code == 422 and "mutliple" in refused.json()["error"], refused.text
            assert (await client.get("/asks")).json() == []  # nothing was asked

    _http(scenario)
    with pytest.raises(ValueError, match="mutliple"):
        make_payload("open_form", questions=[{"question": "Which?", "mutliple": True}])
