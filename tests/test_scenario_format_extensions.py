"""The scenario format's later extensions: counted, absent and ordered events, expectations on ask
events, a graceful restart, instance load faults, ``resume_of``, retry details and several callers
joined to one run's result. Each new key plays against real actors, and bad input is refused naming
the file and the key (exit status 2), like the rest of the format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scenario_support import EXEC, INPUT, MODEL, action, assert_refused, played, refused, run, story, swap

from run_supervisor.actors._cli import main
from run_supervisor.actors.scenarios import parse_scenario

HELD_EXEC = '{ kind = "tool_exec", id = "exec", tool = "bash", at = "prepared", gate = "g1" }'
HELD_RUN = story(
    "a held run",
    run("r1", MODEL, INPUT, HELD_EXEC, MODEL),
    action(id="stop", when="r1.exec.started", do="cancel", run="r1"),
    action(when="r1.finished", do="open_gate", gate="g1"),
)

PUSH_ASK = (
    '{ kind = "permission", id = "asking", ask = "push", title = "Run this command?", command = "git push" }'
)
ASKING_RUN = story(
    "a run that asks",
    run("r1", MODEL, INPUT, EXEC, PUSH_ASK),
    action(id="stop", when="r1.asking.started", do="cancel", run="r1"),
)


# ----------------------------------------------------------------------------------------------------
# Counted, absent and ordered events


def test_a_run_finished_exactly_once_holds_and_a_count_of_two_fails_naming_the_entry() -> None:
    once = HELD_RUN + '[[expect_events]]\ntype = "run.finished"\nrun = "r1"\ncount = 1\n'
    assert played(once).failures == []
    twice = HELD_RUN + '[[expect_events]]\ntype = "run.finished"\nrun = "r1"\ncount = 2\n'
    report = played(twice)
    assert report.passed is False
    [line] = report.failures
    assert line.startswith("expect_events[0]: run.finished with run = 'r1': expected exactly 2, got 1")


def test_an_absent_event_that_happened_fails_and_one_that_never_did_holds() -> None:
    absent = HELD_RUN + '[[expect_events]]\ntype = "instance.closed"\ncount = 0\n'
    assert played(absent).failures == []
    present = HELD_RUN + '[[expect_events]]\ntype = "run.started"\nrun = "r1"\ncount = 0\n'
    [line] = played(present).failures
    assert "run.started with run = 'r1': expected exactly 0, got 1" in line


def test_an_event_expectation_without_a_count_wants_at_least_one() -> None:
    report = played(HELD_RUN + '[[expect_events]]\ntype = "lifecycle.requested"\n')
    assert report.failures == ["expect_events[0]: lifecycle.requested: expected at least 1, got 0"]


def test_after_and_before_count_only_the_events_between_them() -> None:
    text = HELD_RUN + (
        '[[expect_events]]\ntype = "session.status"\nstatus = "idle"\nafter = "r1.finished"\ncount = 1\n'
        '[[expect_events]]\ntype = "session.status"\nstatus = "idle"\nbefore = "r1.finished"\ncount = 0\n'
        '[[expect_events]]\ntype = "session.status"\nstatus = "busy"\nafter = "stop.ok"\ncount = 0\n'
    )
    assert played(text).failures == []
    wrong = HELD_RUN + '[[expect_events]]\ntype = "run.finished"\nrun = "r1"\nbefore = "r1.exec.started"\n'
    [line] = played(wrong).failures
    assert line.endswith("before r1.exec.started: expected at least 1, got 0")


def test_an_event_window_whose_bound_never_came_fails() -> None:
    text = HELD_RUN + run("r2", session="s2", start="manual")
    text += '[[expect_events]]\ntype = "run.finished"\nafter = "r2.started"\ncount = 0\n'
    [line] = played(text).failures
    assert line == "expect_events[0]: run.finished after r2.started: r2.started never happened"


def test_a_session_s_statuses_are_its_exact_sequence() -> None:
    assert played(HELD_RUN + '[expect.s1]\nstatuses = ["busy", "idle"]\n').failures == []
    [line] = played(HELD_RUN + '[expect.s1]\nstatuses = ["busy", "busy", "idle"]\n').failures
    assert line == "s1: expected the statuses ['busy', 'busy', 'idle'], got ['busy', 'idle']"


def test_an_answer_is_ordered_against_a_run_s_end() -> None:
    # The stop is answered before the run ends: the body waits at a gate the answer opens.
    text = swap(HELD_RUN, 'when = "r1.finished"\ndo = "open_gate"', 'when = "stop.ok"\ndo = "open_gate"')
    text = swap(text, 'at = "prepared", gate = "g1"', 'at = "prepared", gate = "g1", ignores_cancel = true')
    holds = text + '[expect.stop]\nanswered_before = "r1.finished"\nanswered_after = "r1.exec.started"\n'
    assert played(holds).failures == []
    report = played(text + '[expect.stop]\nanswered_after = "r1.finished"\n')
    # Events are counted from 1; how many part updates come before the end depends on the threads' timing.
    finished = 1 + next(i for i, row in enumerate(report.events) if row["type"] == "run.finished")
    [line] = report.failures
    assert line.startswith("stop: answered (event ") and line.endswith(
        f"not after r1.finished (event {finished})"
    )


def test_a_lifecycle_action_s_completion_may_be_ordered_before_an_event() -> None:
    text = HELD_RUN + (
        action(id="close", when="r1.finished", do="dispose", directory="/proj/a", mode="maintenance")
        + '[expect.close]\nresult = "completed"\ncompleted_after = "r1.finished"\n'
    )
    assert played(text + 'completed_before = "close.completed"\n').failures != []
    assert played(text).failures == []


# ----------------------------------------------------------------------------------------------------
# Ask events


def test_ask_events_name_the_file_s_ask_and_match_their_payload_by_the_keys_given() -> None:
    text = ASKING_RUN + (
        '[[expect_events]]\ntype = "ask.requested"\nask = "push"\n'
        'payload = { title = "Run this command?", command = "git push" }\ncount = 1\n'
        '[[expect_events]]\ntype = "ask.withdrawn"\nask = "push"\nreason = "interrupted"\n'
        'interrupt_reason = "user_cancel"\nbefore = "r1.finished"\n'
        '[[expect_events]]\ntype = "ask.replied"\ncount = 0\n'
    )
    report = played(text)
    assert report.failures == []
    [requested] = [row for row in report.events if row["type"] == "ask.requested"]
    assert requested["ask"] == "push"


def test_an_ask_payload_that_differs_fails_and_says_what_was_expected() -> None:
    text = ASKING_RUN + (
        '[[expect_events]]\ntype = "ask.requested"\nask = "push"\npayload = { command = "git pull" }\n'
    )
    [line] = played(text).failures
    assert line == (
        "expect_events[0]: ask.requested with ask = 'push', payload = {command = 'git pull'}: "
        "expected at least 1, got 0"
    )


# ----------------------------------------------------------------------------------------------------
# Bad input names the file and the key


@pytest.mark.parametrize(
    ("extra", "key", "says"),
    [
        ("[[expect_events]]\ncount = 1\n", "expect_events[0].type", "this key is required"),
        ('[[expect_events]]\ntype = "run.exploded"\n', "expect_events[0].type", "must be 'instance.started'"),
        ('[[expect_events]]\ntype = "run.finished"\nbogus = 1\n', "expect_events[0].bogus", "not a field of"),
        ('[[expect_events]]\ntype = "run.finished"\ncount = -1\n', "expect_events[0].count", "0 or more"),
        ('[[expect_events]]\ntype = "run.finished"\ncount = true\n', "expect_events[0].count", "boolean"),
        ('[[expect_events]]\ntype = "run.finished"\nrun = "r9"\n', "expect_events[0].run", "names no run"),
        ('[[expect_events]]\ntype = "ask.withdrawn"\nask = "nope"\n', "expect_events[0].ask", "names no ask"),
        ('[[expect_events]]\ntype = "run.finished"\nafter = "r9.started"\n', "expect_events[0].after", "r9"),
        ('[[expect_events]]\ntype = "run.finished"\nbefore = 3\n', "expect_events[0].before", "event name"),
        ('[expect.s1]\nstatuses = ["busy", "asleep"]\n', "expect.s1.statuses[1]", "not 'asleep'"),
        ('[expect.stop]\nanswered_before = "r9.finished"\n', "expect.stop.answered_before", "r9"),
        ('[expect.stop]\ncompleted_before = "nothing"\n', "expect.stop.completed_before", "not an event"),
    ],
)
def test_a_bad_event_expectation_is_refused_naming_its_key(extra: str, key: str, says: str) -> None:
    assert_refused(HELD_RUN + extra, key, says)


@pytest.mark.parametrize(
    ("extra", "key", "says"),
    [
        ('type = "run.finished"\ngeneration = "two"', "expect_events[0].generation", "an integer or 'none'"),
        ('type = "run.finished"\nrecovered = 1', "expect_events[0].recovered", "true or false"),
        ('type = "run.finished"\nreason = "asleep"', "expect_events[0].reason", "'user_cancel'"),
        ('type = "ask.requested"\npayload = { command = 1 }', "expect_events[0].payload.command", "a string"),
        (
            'type = "ask.requested"\npayload = { colour = "red" }',
            "expect_events[0].payload.colour",
            "not a key",
        ),
        ('type = "ask.requested"\npayload = "git push"', "expect_events[0].payload", "must be a table"),
        ('type = "lifecycle.requested"\ndirectories = "/proj/a"', "expect_events[0].directories", "a list"),
    ],
)
def test_an_expected_field_value_of_the_wrong_type_is_refused_naming_its_key(
    extra: str, key: str, says: str
) -> None:
    assert_refused(HELD_RUN + "[[expect_events]]\n" + extra + "\n", key, says)


def test_expect_events_is_a_list_of_tables() -> None:
    error = refused('expect_events = { type = "run.finished" }\n' + HELD_RUN)
    assert (error.key, error.message) == ("expect_events", "must be a list, not a table")


def test_the_command_line_exits_2_naming_the_file_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(HELD_RUN + '[[expect_events]]\ntype = "run.finished"\nrunn = "r1"\n')
    assert main(["scenario", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert f"{path}: expect_events[0].runn: not a field of a run.finished event" in captured.err
    assert "expect_events[0].runn" in json.loads(captured.out)["error"]


# ----------------------------------------------------------------------------------------------------
# A graceful restart

RESTARTING = story(
    "a restart",
    run("r1", '{ kind = "model", id = "stream", gate = "never" }'),
    run("r2", start="manual"),
    action(id="restart", when="r1.stream.started", do="restart", grace_ms=300),
    action(id="next", when="restart.completed", do="start_run", run="r2"),
)


def test_a_graceful_restart_interrupts_with_shutdown_and_the_next_supervisor_recovers_nothing() -> None:
    report = played(RESTARTING)
    assert report.failures == []
    r1, r2 = report.runs["r1"], report.runs["r2"]
    assert (r1.outcome, r1.reason, r1.origin, r1.action) == ("interrupted", "shutdown", "restart", "restart")
    assert r2.outcome == "completed"
    assert report.actions["restart"].result == "forced"
    assert report.actions["next"].result == "ok"
    assert not any(row.get("recovered") for row in report.events)
    finished = [row["run"] for row in report.events if row["type"] == "run.finished"]
    assert finished == ["r1", "r2"]  # each once; r2 ran on the new supervisor, after the completion
    completed = next(i for i, row in enumerate(report.events) if row["type"] == "lifecycle.completed")
    started = next(i for i, row in enumerate(report.events) if row.get("run") == "r2")
    assert completed < started


def test_a_restart_abandons_a_body_that_ignores_it_at_its_grace_and_still_restarts() -> None:
    text = swap(RESTARTING, 'gate = "never" }', 'gate = "never", ignores_cancel = true }')
    report = played(swap(text, "grace_ms = 300", "grace_ms = 100"))
    assert report.failures == []
    assert report.runs["r1"].abandoned is True
    assert report.actions["restart"].abandoned_runs == ["r1"]
    assert report.runs["r2"].outcome == "completed"


def test_a_restart_defaults_to_a_grace_of_1000_ms_and_the_origin_restart() -> None:
    scenario = parse_scenario(swap(RESTARTING, "grace_ms = 300\n", ""), file="s.toml", fmt="toml")
    restart = scenario.actions[0]
    assert (restart.do, restart.grace_ms, restart.origin) == ("restart", 1000, "restart")


@pytest.mark.parametrize(
    ("old", "new", "key", "says"),
    [
        ('do = "restart"\n', 'do = "restart"\nrun = "r1"\n', "actions[0].run", "does not take this key"),
        ("grace_ms = 300", "grace_ms = 86400001", "actions[0].grace_ms", "at most 86400000"),
        ('when = "restart.completed"', 'when = "restart.ok"', "actions[1].when", "can never give 'ok'"),
    ],
)
def test_a_bad_restart_is_refused_naming_its_key(old: str, new: str, key: str, says: str) -> None:
    assert_refused(swap(RESTARTING, old, new), key, says)


# ----------------------------------------------------------------------------------------------------
# Instance load faults

LOADS = story("loads", run("r1"), directories=())


def test_a_run_whose_instance_failed_to_load_fails_with_the_load_s_error() -> None:
    report = played(LOADS + '[instance_faults."/proj/a"]\nload_error = "config.json is broken"\n')
    assert report.failures == []
    r1 = report.runs["r1"]
    assert (r1.outcome, r1.error) == (
        "failed",
        "loading /proj/a (generation 1) failed: config.json is broken",
    )


def test_a_preload_that_fails_is_the_runner_s_instance_load_failed_row() -> None:
    report = played(
        'directories = ["/proj/a"]\n' + LOADS + '[instance_faults."/proj/a"]\nload_error = "boom"\n'
    )
    assert report.failures == []
    [row] = [row for row in report.events if row["type"] == "instance.load_failed"]
    assert (row["directory"], row["error"]) == ("/proj/a", "boom")
    assert report.runs["r1"].outcome == "failed"


def test_load_generations_limits_the_fault_to_those_generations() -> None:
    text = LOADS + (
        run("r2", start="manual")
        + action(id="fix", when="r1.finished", do="reload", directory="/proj/a", mode="maintenance")
        + action(when="fix.completed", do="start_run", run="r2")
        + '[instance_faults."/proj/a"]\nload_error = "broken"\nload_generations = [1]\n'
    )
    report = played(text)
    assert report.failures == []
    assert report.runs["r1"].outcome == "failed"
    assert (report.runs["r2"].outcome, report.runs["r2"].generation) == ("completed", 2)


def test_a_load_slower_than_load_budget_ms_counts_as_failed() -> None:
    text = swap(LOADS, 'name = "loads"\n', 'name = "loads"\nload_budget_ms = 50\n')
    report = played(text + '[instance_faults."/proj/a"]\nload_ms = 2000\n')
    assert report.failures == []
    r1 = report.runs["r1"]
    assert r1.outcome == "failed"
    assert r1.error is not None and "overran its 50 ms budget" in r1.error


def test_a_load_held_at_its_gate_holds_only_the_runs_that_read_it() -> None:
    text = LOADS + (
        run("r2", session="s2", directory="/proj/b")
        + action(when="r2.finished", do="open_gate", gate="slow")
        + '[instance_faults."/proj/a"]\nload_gate = "slow"\n'
        '[[expect_events]]\ntype = "run.finished"\nrun = "r2"\nbefore = "r1.finished"\n'
    )
    report = played(text)
    assert report.failures == []
    assert report.runs["r1"].outcome == "completed"


@pytest.mark.parametrize(
    ("top", "faults", "key", "says"),
    [
        (
            'directories = ["/proj/a"]\n',
            'load_gate = "g"\n',
            'instance_faults."/proj/a".load_gate',
            "loaded before the story starts",
        ),
        (
            "",
            "load_generations = [1]\n",
            'instance_faults."/proj/a".load_generations',
            "give load_error, load_ms or load_gate",
        ),
        (
            "",
            'load_error = "x"\nload_generations = [0]\n',
            'instance_faults."/proj/a".load_generations[0]',
            "at least 1",
        ),
        ("", "load_ms = -1\n", 'instance_faults."/proj/a".load_ms', "at least 0"),
        ("", 'load_error = ""\n', 'instance_faults."/proj/a".load_error', "empty"),
        ("load_budget_ms = 86400001\n", "", "load_budget_ms", "at most 86400000"),
    ],
)
def test_a_bad_load_fault_is_refused_naming_its_key(top: str, faults: str, key: str, says: str) -> None:
    assert_refused(top + LOADS + '[instance_faults."/proj/a"]\n' + faults, key, says)


# ----------------------------------------------------------------------------------------------------
# resume_of

RESUMES = story(
    "resumes",
    run("r1"),
    run("r2", start="manual", resume_of="r1"),
    action(id="go", when="r1.finished", do="start_run", run="r2"),
)


def test_a_run_that_resumes_another_is_started_with_resume_of_and_its_report_says_so() -> None:
    report = played(RESUMES + '[expect.r2]\nresume_of = "r1"\n[expect.r1]\nresume_of = "none"\n')
    assert report.failures == []
    assert report.runs["r2"].resume_of == "r1"
    [started] = [row for row in report.events if row["type"] == "run.started" and row["run"] == "r2"]
    assert started["resume_of"] == "r1"


def test_a_resume_of_a_run_that_has_not_ended_is_rejected() -> None:
    held = swap(RESUMES, 'steps = [{ kind = "model" }]', 'steps = [{ kind = "model", gate = "g" }]', 1)
    held += '[[actions]]\nwhen = "go.rejected"\ndo = "open_gate"\ngate = "g"\n'
    report = played(held.replace('when = "r1.finished"', 'when = "r1.started"'))
    assert report.failures == []
    assert (report.actions["go"].result, report.actions["go"].code) == ("rejected", "invalid_request")
    assert report.runs["r2"].outcome is None


def test_a_wrong_resume_of_expectation_fails() -> None:
    [line] = played(RESUMES + '[expect.r2]\nresume_of = "none"\n').failures
    assert line == "r2: expected resume_of none, got 'r1'"


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('resume_of = "r1"', 'resume_of = "r9"', "runs[1].resume_of"),
        ('resume_of = "r1"', 'resume_of = "r2"', "runs[1].resume_of"),
        ('resume_of = "r1"', "resume_of = 1", "runs[1].resume_of"),
        ('run = "r2"\n', 'run = "r2"\n[expect.r2]\nresume_of = "r9"\n', "expect.r2.resume_of"),
    ],
)
def test_a_bad_resume_of_is_refused_naming_its_key(old: str, new: str, key: str) -> None:
    assert refused(swap(RESUMES, old, new)).key == key


# ----------------------------------------------------------------------------------------------------
# Retry details

RETRY_ENTRIES = '"overloaded", { message = "still overloaded", attempt = 5, next_at_ms = 1893456005000 }'
RETRIES = story(
    "retries",
    run("r1", '{ kind = "model", id = "call", gate = "backoff", retry = [' + RETRY_ENTRIES + "] }"),
    action(when="s1.retry", do="open_gate", gate="backoff"),
)


def test_retry_entries_carry_their_attempt_message_and_next_at_ms_to_the_session_status() -> None:
    scenario = parse_scenario(RETRIES, file="s.toml", fmt="toml")
    step = scenario.runs[0].steps[0]
    assert step.retry == ("overloaded", "still overloaded")
    assert [(r.message, r.attempt, r.next_at_ms) for r in step.retries] == [
        ("overloaded", 1, None),
        ("still overloaded", 5, 1893456005000),
    ]
    report = played(RETRIES)
    assert report.failures == []
    retries = [
        (row["attempt"], row["message"], row["next_at_ms"])
        for row in report.events
        if row["type"] == "session.status" and row["status"] == "retry"
    ]
    assert retries == [(1, "overloaded", None), (5, "still overloaded", 1893456005000)]


@pytest.mark.parametrize(
    ("entry", "key", "says"),
    [
        ("{ attempt = 2 }", "runs[0].steps[0].retry[0].message", "required"),
        ('{ message = "x", attempt = 0 }', "runs[0].steps[0].retry[0].attempt", "at least 1"),
        ('{ message = "x", next_at_ms = -5 }', "runs[0].steps[0].retry[0].next_at_ms", "at least 0"),
        ('{ message = "x", next_at = 5 }', "runs[0].steps[0].retry[0].next_at", "not a key"),
    ],
)
def test_a_bad_retry_entry_is_refused_naming_its_key(entry: str, key: str, says: str) -> None:
    assert_refused(swap(RETRIES, RETRY_ENTRIES, entry), key, says)


# ----------------------------------------------------------------------------------------------------
# Several callers joined to one run's result

JOINED = story(
    "joined",
    run("r1", '{ kind = "model", id = "call", gate = "g" }'),
    action(id="one", when="r1.call.started", do="wait_run", run="r1"),
    action(id="two", when="r1.call.started", do="wait_run", run="r1"),
    action(when="r1.call.started", do="open_gate", gate="g"),
)


def test_every_caller_joined_to_a_run_is_answered_once_after_its_end_with_its_result() -> None:
    report = played(JOINED)
    assert report.failures == []
    finished = next(i for i, row in enumerate(report.events) if row["type"] == "run.finished")
    for caller in ("one", "two"):
        action = report.actions[caller]
        assert (action.result, action.outcome, action.reason) == ("ok", "completed", None)
        [answer] = [i for i, row in enumerate(report.events) if row.get("action") == caller]
        assert answer > finished
        assert report.events[answer]["run"] == "r1"


def test_a_caller_joining_a_run_the_supervisor_does_not_know_is_rejected() -> None:
    text = JOINED + run("r2", session="s2", start="manual")
    text += action(id="three", when="one.ok", do="wait_run", run="r2")
    report = played(text)
    assert report.failures == []
    assert (report.actions["three"].result, report.actions["three"].code) == ("rejected", "unknown_run")


def test_a_joined_caller_s_expected_outcome_is_checked() -> None:
    [line] = played(JOINED + '[expect.one]\noutcome = "failed"\n').failures
    assert line == "one: expected outcome 'failed', got 'completed'"


@pytest.mark.parametrize(
    ("extra", "key", "says"),
    [
        ('[[actions]]\nwhen = "begin"\ndo = "wait_run"\n', "actions[3].run", "needs this key"),
        ('[[actions]]\nwhen = "begin"\ndo = "wait_run"\nrun = "r7"\n', "actions[3].run", "names no run"),
        (
            '[[actions]]\nwhen = "begin"\ndo = "wait_run"\nrun = "r1"\ngate = "g"\n',
            "actions[3].gate",
            "does not",
        ),
        ('[expect.one]\noutcome = "asleep"\n', "expect.one.outcome", "must be"),
        ('[expect.action-3]\nreason = "user_cancel"\n', "expect.action-3.reason", "applies to a wait_run"),
    ],
)
def test_a_bad_wait_run_is_refused_naming_its_key(extra: str, key: str, says: str) -> None:
    assert_refused(JOINED + extra, key, says)


# ----------------------------------------------------------------------------------------------------
# Abandon on a grace, retry budgets

STUCK = story(
    "stuck",
    run(
        "r1",
        '{ kind = "model", id = "stuck", gate = "stuck", ignores_cancel = true }',
        '{ kind = "model", id = "after" }',
    ),
    run("r2"),
    action(id="stop", when="r1.stuck.started", do="cancel", run="r1"),
    action(when="r2.finished", do="open_gate", gate="stuck"),
)


@pytest.mark.parametrize(
    ("where", "text"),
    [
        (
            "the cancel's grace_ms",
            swap(STUCK, 'run = "r1"\n\n[[actions]]', 'run = "r1"\ngrace_ms = 50\n\n[[actions]]'),
        ),
        (
            "the run's interrupt_grace_ms",
            swap(
                STUCK, 'id = "r1"\nsession = "s1"\n', 'id = "r1"\nsession = "s1"\ninterrupt_grace_ms = 50\n'
            ),
        ),
        ("the file's interrupt_grace_ms", "interrupt_grace_ms = 50\n" + STUCK),
    ],
)
def test_past_its_grace_a_body_that_ignores_its_stop_is_abandoned_and_its_session_moves_on(
    where: str, text: str
) -> None:
    report = played(text)
    assert report.failures == [], where
    r1 = report.runs["r1"]
    assert (r1.outcome, r1.reason, r1.abandoned) == ("interrupted", "user_cancel", True), where
    assert report.runs["r2"].outcome == "completed", where
    assert not [row for row in report.events if row.get("step") == "after"], where


def test_without_a_grace_a_body_that_ignores_its_stop_is_waited_for() -> None:
    # The contract's reading: the interrupt takes effect when the step's work ends (here: its gate).
    text = swap(STUCK, 'when = "r2.finished"', 'when = "stop.ok"')
    report = played(text)
    assert report.failures == []
    assert report.runs["r1"].abandoned is False


BUDGET = story("budget", run("r1", '{ kind = "model", gate = "never", retry = ["529", "529", "529"] }'))


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("a run's retry_budget", swap(BUDGET, "steps = [", "retry_budget = { attempts = 2 }\nsteps = [")),
        ("the file's retry_attempts", "retry_attempts = 2\n" + BUDGET),
    ],
)
def test_a_retry_past_the_budget_interrupts_the_run_naming_the_retry(where: str, text: str) -> None:
    report = played(text)
    assert report.failures == [], where
    r1 = report.runs["r1"]
    assert (r1.outcome, r1.reason, r1.origin, r1.action) == ("interrupted", "timeout", "retry_budget", None)
    [finished] = [row for row in report.events if row["type"] == "run.finished"]
    assert (finished["retry_attempt"], finished["retry_message"]) == (3, "529")


def test_a_backoff_budget_counts_each_retry_s_backoff_ms() -> None:
    text = swap(
        BUDGET,
        'retry = ["529", "529", "529"]',
        'retry = [{ message = "529", backoff_ms = 600 }, { message = "529", backoff_ms = 600 }]',
    )
    report = played("retry_backoff_ms = 1000\n" + text)
    assert report.failures == []
    assert (report.runs["r1"].reason, report.runs["r1"].origin) == ("timeout", "retry_budget")


@pytest.mark.parametrize(
    ("old", "new", "key", "says"),
    [
        ("steps = [", "retry_budget = {}\nsteps = [", "runs[0].retry_budget", "attempts, backoff_ms or both"),
        (
            "steps = [",
            "retry_budget = { attempts = -1 }\nsteps = [",
            "runs[0].retry_budget.attempts",
            "at least 0",
        ),
        ("steps = [", "retry_budget = { tries = 1 }\nsteps = [", "runs[0].retry_budget.tries", "not a key"),
        ("steps = [", "interrupt_grace_ms = -1\nsteps = [", "runs[0].interrupt_grace_ms", "at least 0"),
        (
            '"529", "529", "529"',
            '{ message = "529", next_at_ms = 1, backoff_ms = 1 }',
            "runs[0].steps[0].retry[0].backoff_ms",
            "not both",
        ),
        ('name = "budget"', 'name = "budget"\nretry_attempts = true', "retry_attempts", "an integer"),
        (
            'name = "budget"',
            'name = "budget"\ninterrupt_grace_ms = 86400001',
            "interrupt_grace_ms",
            "at most",
        ),
        (
            'retry = ["529", "529", "529"] }]',
            'retry = ["529"] }]\n[[actions]]\nwhen = "begin"\ndo = "dispose"\ndirectory = "/proj/a"\n'
            'mode = "maintenance"\ngrace_ms = 5',
            "actions[0].grace_ms",
            "interrupts nothing",
        ),
        (
            'retry = ["529", "529", "529"] }]',
            'retry = ["529"] }]\n[[actions]]\nwhen = "begin"\ndo = "start_run"\nrun = "r1"\ngrace_ms = 5',
            "actions[0].grace_ms",
            "does not take this key",
        ),
    ],
)
def test_a_bad_grace_or_budget_is_refused_naming_its_key(old: str, new: str, key: str, says: str) -> None:
    assert_refused(swap(BUDGET, old, new), key, says)


def test_a_confirmed_close_and_a_confirm_take_a_grace_for_the_interrupts_they_cause() -> None:
    text = swap(
        STUCK,
        '[[actions]]\nid = "stop"\nwhen = "r1.stuck.started"\ndo = "cancel"\nrun = "r1"\n',
        '[[actions]]\nid = "stop"\nwhen = "r1.stuck.started"\ndo = "dispose"\ndirectory = "/proj/a"\n'
        'mode = "user_confirmed_interrupt"\ngrace_ms = 50\n',
    )
    report = played(text)
    assert report.failures == []
    r1 = report.runs["r1"]
    assert (r1.reason, r1.abandoned) == ("lifecycle_interrupt", True)
    scenario = parse_scenario(text, file="s.toml", fmt="toml")
    assert scenario.actions[0].grace_ms == 50


# ----------------------------------------------------------------------------------------------------
# Sessions: cancel and delete

SESSION = story("a session", run("r1", '{ kind = "model", id = "call", gate = "never" }'), run("r2"))


def test_a_session_cancel_stops_its_active_and_queued_runs_naming_one_action() -> None:
    text = SESSION + action(id="stop", when="r1.call.started", do="cancel_session", session="s1")
    report = played(text)
    assert report.failures == []
    for run_id in ("r1", "r2"):
        got = report.runs[run_id]
        assert (got.outcome, got.reason, got.action) == ("interrupted", "user_cancel", "stop"), run_id
    assert report.runs["r2"].generation is None
    assert report.actions["stop"].interrupted_runs == ["r1", "r2"]
    ends = [row["action"] for row in report.events if row["type"] == "run.finished"]
    assert ends == ["stop", "stop"]  # renamed from the supervisor's cs-N once its answer came


def test_a_busy_session_s_delete_is_refused_unless_confirmed() -> None:
    text = SESSION + action(id="forget", when="r1.call.started", do="delete_session", session="s1")
    text += action(id="sure", when="forget.rejected", do="delete_session", session="s1", confirm=True)
    report = played(text)
    assert report.failures == []
    assert (report.actions["forget"].result, report.actions["forget"].code) == ("rejected", "session_busy")
    assert report.actions["sure"].result == "ok"
    assert report.runs["r1"].action == "sure"


@pytest.mark.parametrize(
    ("extra", "key", "says"),
    [
        ('do = "cancel_session"\n', "actions[0].session", "needs this key"),
        ('do = "cancel_session"\nsession = "s9"\n', "actions[0].session", "names no session"),
        ('do = "cancel_session"\nsession = "s1"\nconfirm = true\n', "actions[0].confirm", "does not take"),
        ('do = "delete_session"\nsession = "s1"\nconfirm = "yes"\n', "actions[0].confirm", "true or false"),
        ('do = "cancel"\nrun = "r1"\nsession = "s1"\n', "actions[0].session", "does not take"),
    ],
)
def test_a_bad_session_action_is_refused_naming_its_key(extra: str, key: str, says: str) -> None:
    assert_refused(SESSION + '[[actions]]\nwhen = "begin"\n' + extra, key, says)


# ----------------------------------------------------------------------------------------------------
# "Always" grants

ASK_ONE = '{ kind = "permission", ask = "one", command = "ls", key = "bash:ls", wait = false }'
ASK_TWO = '{ kind = "permission", id = "asking", ask = "two", command = "ls", key = "bash:ls", wait = false }'
GRANTS = story(
    "grants",
    run("r1", MODEL, INPUT, EXEC, ASK_ONE, INPUT, EXEC, ASK_TWO),
    action(
        id="always",
        when="r1.asking.started",
        do="reply_permission",
        run="r1",
        ask="one",
        decision="approve",
        always=True,
    ),
)


def test_an_always_approval_grants_the_ask_s_key_to_the_session_s_other_matching_ask() -> None:
    report = played(GRANTS)
    assert report.failures == []
    replied = {row["ask"]: row for row in report.events if row["type"] == "ask.replied"}
    assert (replied["one"]["always"], replied["one"]["granted"]) == (True, None)
    assert (replied["two"]["always"], replied["two"]["granted"], replied["two"]["approved"]) == (
        False,
        "bash:ls",
        True,
    )
    assert report.runs["r1"].outcome == "completed"
    scenario = parse_scenario(GRANTS, file="s.toml", fmt="toml")
    assert scenario.runs[0].steps[3].key == "bash:ls"
    assert scenario.actions[0].always is True


def test_an_always_approval_of_an_ask_without_a_key_is_rejected() -> None:
    text = swap(GRANTS, ', key = "bash:ls", wait = false }', ", wait = false }", 1)
    for ask in ("one", "two"):
        text += action(when="always.rejected", do="reply_permission", run="r1", ask=ask, decision="approve")
    report = played(text)
    assert report.failures == []
    assert report.actions["always"].result == "rejected"


@pytest.mark.parametrize(
    ("old", "new", "key", "says"),
    [
        (
            'decision = "approve"\nalways = true',
            'decision = "reject"\nalways = true',
            "actions[0].always",
            "approval",
        ),
        ("always = true", 'always = "yes"', "actions[0].always", "true or false"),
        (
            '{ kind = "model" },',
            '{ kind = "model", key = "k" },',
            "runs[0].steps[0].key",
            "only valid on permission",
        ),
        ('key = "bash:ls", wait = false }', 'key = "", wait = false }', "runs[0].steps[3].key", "empty"),
    ],
)
def test_a_bad_grant_is_refused_naming_its_key(old: str, new: str, key: str, says: str) -> None:
    assert_refused(swap(GRANTS, old, new, 1), key, says)


# ----------------------------------------------------------------------------------------------------
# Tool part expectations


def test_a_tool_part_s_expected_state_tool_started_and_label_are_each_checked() -> None:
    label = "Did not run: interrupted by the user's cancel before the tool started"
    holds = f'tool_parts = [{{ state = "interrupted", tool_started = false, label = "{label}" }}]\n'
    assert played(HELD_RUN + "[expect.r1]\n" + holds).failures == []
    wrong = 'tool_parts = [{ state = "completed", tool_started = true, label = "nope" }]\n'
    assert played(HELD_RUN + "[expect.r1]\n" + wrong).failures == [
        "r1: tool part 0: expected state 'completed', got 'interrupted'",
        "r1: tool part 0: expected tool_started True, got False",
        f"r1: tool part 0: expected label 'nope', got {label!r}",
    ]
    bare = 'tool_parts = ["completed"]\n'  # a bare state checks the state alone
    assert played(HELD_RUN + "[expect.r1]\n" + bare).failures == [
        "r1: tool part 0: expected state 'completed', got 'interrupted'"
    ]
