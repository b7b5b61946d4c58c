"""Scenario files: what loads, with every default applied, and what is refused, naming the offending key."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import pickle
from typing import Any

import pytest

from run_supervisor.actors.scenarios import (
    ActionSpec,
    Expectation,
    InstanceFaultSpec,
    PartExpectation,
    RunSpec,
    Scenario,
    ScenarioFileError,
    StepSpec,
    When,
    load_scenario,
    parse_scenario,
    scenario_files,
)

# The example of scenario-format.md, verbatim (shared with the CLI tests).
CONTRACT_EXAMPLE = (pathlib.Path(__file__).parent / "data" / "contract-example.toml").read_text()

# The same document as JSON.
CONTRACT_EXAMPLE_JSON = """\
{
  "name": "provider connect while a tool call is being generated",
  "directories": ["/proj/a", "/proj/b"],
  "runs": [
    {
      "id": "r1",
      "session": "s1",
      "directory": "/proj/a",
      "steps": [
        {"kind": "model"},
        {"kind": "tool_input", "id": "gen", "tool": "bash", "gate": "g1"},
        {"kind": "tool_exec", "tool": "bash"},
        {"kind": "model"}
      ]
    }
  ],
  "actions": [
    {"id": "a1", "when": "r1.gen.started", "do": "dispose_all", "mode": "maintenance",
     "origin": "settings.provider.connect"},
    {"when": "a1.deferred", "do": "open_gate", "gate": "g1"}
  ],
  "expect": {
    "r1": {"outcome": "completed"},
    "a1": {"result": "deferred", "completed": true, "completed_after": "r1.finished"},
    "s1": {"status": "idle"}
  }
}
"""

FILE = "case.toml"

# Steps, as TOML inline tables.
MODEL = '{ kind = "model" }'
INPUT = '{ kind = "tool_input", tool = "bash" }'
EXEC = '{ kind = "tool_exec", tool = "bash" }'
PERMISSION = '{ kind = "permission" }'
FORM = '{ kind = "form" }'
GATED = '{ kind = "model", gate = "g1" }'


def run(*steps: str, id: str = "r1", session: str = "s1", directory: str = "/p", extra: str = "") -> str:
    """A ``[[runs]]`` table; ``steps`` are inline tables (one model step when none is given)."""
    body = ", ".join(steps or (MODEL,))
    head = f'[[runs]]\nid = "{id}"\nsession = "{session}"\ndirectory = "{directory}"\n'
    return f"{head}{extra}\nsteps = [{body}]\n"


def action(**keys: Any) -> str:
    """An ``[[actions]]`` table (JSON scalars and lists of scalars are TOML too)."""
    return "[[actions]]\n" + "".join(f"{name} = {json.dumps(value)}\n" for name, value in keys.items())


def doc(*tables: str, top: str = "") -> str:
    """A scenario: a name, the directory /p, ``top`` (top-level keys), then ``tables``."""
    return f'name = "t"\ndirectories = ["/p"]\n{top}\n' + "\n".join(tables)


def one_run(*tables: str, top: str = "") -> str:
    """A scenario with run r1 (session s1, steps: model, gated model), then ``tables``."""
    return doc(run(MODEL, GATED), *tables, top=top)


def load(text: str, fmt: str = "toml") -> Scenario:
    return parse_scenario(text, file=FILE, fmt=fmt)  # type: ignore[arg-type]


def refusal(text: str, fmt: str = "toml") -> ScenarioFileError:
    with pytest.raises(ScenarioFileError) as caught:
        parse_scenario(text, file=FILE, fmt=fmt)  # type: ignore[arg-type]
    error = caught.value
    assert error.file == FILE
    assert FILE in str(error)
    assert error.message
    assert "\n" not in error.message
    return error


def assert_refused(text: str, key: str | None, fmt: str = "toml") -> ScenarioFileError:
    error = refusal(text, fmt)
    assert error.key == key, str(error)
    expected = f"{FILE}: {error.message}" if key is None else f"{FILE}: {key}: {error.message}"
    assert str(error) == expected
    return error


# --------------------------------------------------------------------------------------------------------
# The contract's example


def test_the_contract_example_loads() -> None:
    scenario = load(CONTRACT_EXAMPLE)

    assert scenario.file == FILE
    assert scenario.name == "provider connect while a tool call is being generated"
    assert scenario.description is None
    assert scenario.directories == ("/proj/a", "/proj/b")
    (r1,) = scenario.runs
    assert (r1.id, r1.session, r1.directory, r1.start) == ("r1", "s1", "/proj/a", "begin")
    assert [step.id for step in r1.steps] == ["model", "gen", "tool_exec", "model-2"]
    assert [step.part for step in r1.steps] == [None, 0, 0, None]
    assert r1.tools == ("bash",)
    assert r1.steps[1].gate == "g1"
    a1, opener = scenario.actions
    assert a1 == ActionSpec(
        id="a1",
        when=When(raw="r1.gen.started", kind="step_started", run="r1", step="gen"),
        do="dispose_all",
        mode="maintenance",
        origin="settings.provider.connect",
    )
    assert opener == ActionSpec(
        id="action-2",
        when=When(raw="a1.deferred", kind="action_result", action="a1", result="deferred"),
        do="open_gate",
        gate="g1",
    )
    assert scenario.expect == (
        Expectation(target="r1", target_kind="run", fields={"outcome": "completed"}),
        Expectation(
            target="a1",
            target_kind="action",
            fields={
                "result": "deferred",
                "completed": True,
                "completed_after": When(raw="r1.finished", kind="run_finished", run="r1"),
            },
        ),
        Expectation(target="s1", target_kind="session", fields={"status": "idle"}),
    )
    assert scenario.sessions == ("s1",)
    assert scenario.gates == ("g1",)
    assert dict(scenario.instance_faults) == {}


def test_the_contract_example_as_json_loads_to_the_same_scenario() -> None:
    from_toml = load(CONTRACT_EXAMPLE)
    from_json = parse_scenario(CONTRACT_EXAMPLE_JSON, file="example.json", fmt="json")

    assert from_json == dataclasses.replace(from_toml, file="example.json")


def test_a_scenario_is_frozen_and_made_of_tuples() -> None:
    scenario = load(CONTRACT_EXAMPLE)

    with pytest.raises(dataclasses.FrozenInstanceError):
        scenario.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        scenario.runs[0].steps[0].ms = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        scenario.expect[0].fields["outcome"] = "failed"  # type: ignore[index]
    assert isinstance(scenario.runs, tuple)
    assert isinstance(scenario.runs[0].steps, tuple)
    assert isinstance(scenario.actions, tuple)


# --------------------------------------------------------------------------------------------------------
# Defaults


def test_step_ids_default_to_the_kind_then_kind_2_kind_3_among_steps_without_an_id() -> None:
    scenario = load(
        doc(
            run(
                MODEL,
                '{ kind = "model", id = "think" }',
                MODEL,
                INPUT,
                EXEC,
                PERMISSION,
                MODEL,
                '{ kind = "tool_input", tool = "bash", id = "again" }',
                EXEC,
                PERMISSION,
                FORM,
            )
        )
    )

    assert [step.id for step in scenario.runs[0].steps] == [
        "model",
        "think",
        "model-2",
        "tool_input",
        "tool_exec",
        "permission",
        "model-3",
        "again",
        "tool_exec-2",
        "permission-2",
        "form",
    ]


def test_a_step_gets_every_default() -> None:
    (step,) = load(doc(run(MODEL))).runs[0].steps

    assert step == StepSpec(
        kind="model",
        id="model",
        tool=None,
        gate=None,
        at="running",
        ms=0,
        error=None,
        fail=None,
        ignores_cancel=False,
        part=None,
    )


def test_a_tool_exec_step_keeps_its_at_ms_error_fail_and_ignores_cancel() -> None:
    exec_step = (
        '{ kind = "tool_exec", tool = "bash", at = "prepared", ms = 250, error = "boom", fail = "crash", '
        'ignores_cancel = true, gate = "never" }'
    )
    step = load(doc(run(INPUT, exec_step))).runs[0].steps[1]

    assert step == StepSpec(
        kind="tool_exec",
        id="tool_exec",
        tool="bash",
        gate="never",
        at="prepared",
        ms=250,
        error="boom",
        fail="crash",
        ignores_cancel=True,
        part=0,
    )


def test_each_step_knows_its_tool_part_and_the_run_lists_the_tool_of_each_part() -> None:
    (r1,) = load(
        doc(
            run(
                MODEL,
                '{ kind = "tool_input", tool = "read" }',
                '{ kind = "tool_exec", tool = "read" }',
                PERMISSION,
                FORM,
                MODEL,
                INPUT,
                EXEC,
                '{ kind = "tool_input", tool = "question" }',
                '{ kind = "tool_exec", tool = "question" }',
                FORM,
            )
        )
    ).runs

    assert [step.part for step in r1.steps] == [None, 0, 0, 0, 0, None, 1, 1, 2, 2, 2]
    assert r1.tools == ("read", "bash", "question")


def test_a_run_without_tool_parts_has_no_tools() -> None:
    assert load(doc(run(MODEL, MODEL))).runs[0].tools == ()


def test_a_run_starts_at_begin_unless_it_is_manual() -> None:
    scenario = load(doc(run(id="r1"), run(id="r2", extra='start = "manual"')))

    assert [spec.start for spec in scenario.runs] == ["begin", "manual"]


def test_actions_without_an_id_are_named_action_n_by_their_position_among_all_actions() -> None:
    scenario = one_run(
        action(id="first", when="begin", do="open_gate", gate="g1"),
        action(when="begin", do="open_gate", gate="g1"),
        action(when="first.ok", do="open_gate", gate="g1"),
    )

    assert [spec.id for spec in load(scenario).actions] == ["first", "action-2", "action-3"]


@pytest.mark.parametrize(
    ("keys", "origin"),
    [
        pytest.param({"do": "dispose", "directory": "/p", "mode": "maintenance"}, "dispose", id="dispose"),
        pytest.param({"do": "dispose_all", "mode": "maintenance"}, "dispose_all", id="dispose_all"),
        pytest.param({"do": "reload", "directory": "/p", "mode": "maintenance"}, "reload", id="reload"),
        pytest.param(
            {"do": "invalidate_config", "mode": "user_confirmed_interrupt"},
            "invalidate_config",
            id="invalidate_config",
        ),
        pytest.param({"do": "cancel", "run": "r1"}, "user", id="cancel"),
        pytest.param({"do": "shutdown"}, "shutdown", id="shutdown"),
        pytest.param({"do": "test_teardown"}, "test_teardown", id="test_teardown"),
        pytest.param({"do": "start_run", "run": "m1"}, None, id="start_run"),
        pytest.param({"do": "reply_permission", "run": "r1", "decision": "approve"}, None, id="reply"),
        pytest.param({"do": "answer_form", "run": "r1", "answer": "yes"}, None, id="answer_form"),
        pytest.param({"do": "cancel_form", "run": "r1"}, None, id="cancel_form"),
        pytest.param({"do": "open_gate", "gate": "g1"}, None, id="open_gate"),
    ],
)
def test_an_action_without_origin_gets_the_default_origin_of_its_do(
    keys: dict[str, str], origin: str | None
) -> None:
    text = one_run(run(id="m1", session="s2", extra='start = "manual"'), action(when="begin", **keys))

    assert load(text).actions[0].origin == origin


def test_an_explicit_origin_is_kept() -> None:
    text = one_run(
        action(when="begin", do="cancel", run="r1", origin="ui.stop-button"),
        action(when="begin", do="shutdown", origin="sigterm"),
    )

    assert [spec.origin for spec in load(text).actions] == ["ui.stop-button", "sigterm"]


def test_shutdown_and_test_teardown_get_a_grace_of_1000_ms_unless_given_and_others_none() -> None:
    text = one_run(
        action(when="begin", do="shutdown"),
        action(when="begin", do="test_teardown", grace_ms=250),
        action(when="begin", do="test_teardown", grace_ms=0),
        action(when="begin", do="cancel", run="r1"),
    )

    assert [spec.grace_ms for spec in load(text).actions] == [1000, 250, 0, None]


def test_keys_an_action_does_not_take_are_none() -> None:
    (spec,) = load(one_run(action(when="begin", do="shutdown"))).actions

    assert spec == ActionSpec(
        id="action-1",
        when=When(raw="begin", kind="begin"),
        do="shutdown",
        origin="shutdown",
        grace_ms=1000,
    )


def test_each_action_keeps_the_keys_of_its_do() -> None:
    text = doc(
        run(INPUT, EXEC, PERMISSION, FORM, GATED),
        action(when="begin", do="reload", directory="/p", mode="user_confirmed_interrupt"),
        action(
            when="r1.permission.started", do="reply_permission", run="r1", decision="reject", message="no"
        ),
        action(when="r1.form.started", do="answer_form", run="r1", answer="blue"),
    )
    reload, reply, answer = load(text).actions

    assert (reload.directory, reload.mode, reload.origin) == ("/p", "user_confirmed_interrupt", "reload")
    assert (reply.run, reply.decision, reply.message) == ("r1", "reject", "no")
    assert (answer.run, answer.answer) == ("r1", "blue")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param("42", "42", id="integer"),
        pytest.param("true", "true", id="boolean"),
        pytest.param("2.5", "2.5", id="float"),
        pytest.param('"a string"', "a string", id="string"),
        pytest.param("2024-05-01", "2024-05-01", id="date"),
    ],
)
def test_a_form_answer_may_be_any_single_value_and_is_kept_as_text(value: str, text: str) -> None:
    scenario = one_run(f'[[actions]]\nwhen = "begin"\ndo = "answer_form"\nrun = "r1"\nanswer = {value}\n')

    assert load(scenario).actions[0].answer == text


def test_sessions_are_listed_in_order_of_first_appearance() -> None:
    scenario = load(
        doc(
            run(id="r1", session="s2"),
            run(id="r2", session="s1"),
            run(id="r3", session="s2"),
            run(id="r4", session="s3"),
        )
    )

    assert scenario.sessions == ("s2", "s1", "s3")


def test_gates_are_every_gate_a_step_names_sorted_once_each() -> None:
    scenario = load(
        doc(
            run('{ kind = "model", gate = "zeta" }', '{ kind = "model", gate = "alpha" }', id="r1"),
            run('{ kind = "model", gate = "zeta" }', MODEL, id="r2", session="s2"),
        )
    )

    assert scenario.gates == ("alpha", "zeta")


def test_instance_faults_are_keyed_by_directory_with_defaults() -> None:
    text = doc(
        run(),
        '[instance_faults."/p"]\ndispose_error = "watcher stuck"\n',
        '[instance_faults."/q"]\ndispose_ms = 1500\n',
    )

    assert dict(load(text).instance_faults) == {
        "/p": InstanceFaultSpec(dispose_error="watcher stuck", dispose_ms=0),
        "/q": InstanceFaultSpec(dispose_error=None, dispose_ms=1500),
    }


def test_a_minimal_scenario_has_empty_defaults() -> None:
    scenario = load('name = "nothing happens"\n')

    assert scenario == Scenario(
        file=FILE,
        name="nothing happens",
        description=None,
        directories=(),
        runs=(),
        actions=(),
        expect=(),
        instance_faults={},
        sessions=(),
        gates=(),
    )


def test_a_description_is_kept() -> None:
    assert load('name = "n"\ndescription = "why"\n').description == "why"


# --------------------------------------------------------------------------------------------------------
# `when`


def _when(raw: str, kind: str, case: str, **names: str) -> Any:
    """A case: ``raw`` is read as a When of ``kind`` with ``names``."""
    return pytest.param(raw, When(raw=raw, kind=kind, **names), id=case)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        _when("begin", "begin", "begin"),
        _when("r1.started", "run_started", "run-started", run="r1"),
        _when("r1.finished", "run_finished", "run-finished", run="r1"),
        _when("r1.tool_input.started", "step_started", "step-started", run="r1", step="tool_input"),
        _when("r1.model-2.finished", "step_finished", "default-step-id-finished", run="r1", step="model-2"),
        _when("close.deferred", "action_result", "close-deferred", action="close", result="deferred"),
        _when("close.rejected", "action_result", "close-rejected", action="close", result="rejected"),
        _when(
            "confirm.interrupted",
            "action_result",
            "confirmed-close-interrupted",
            action="confirm",
            result="interrupted",
        ),
        _when("close.completed", "action_completed", "close-completed", action="close"),
        _when("stop.forced", "action_result", "forced", action="stop", result="forced"),
        _when("stop.completed", "action_completed", "stop-done", action="stop"),
        _when("go.ok", "action_result", "go-ok", action="go", result="ok"),
        _when("go.rejected", "action_result", "go-rejected", action="go", result="rejected"),
        _when("open.ok", "action_result", "open-gate-ok", action="open", result="ok"),
        _when("later.ok", "action_result", "an-action-further-down", action="later", result="ok"),
    ],
)
def test_a_when_is_parsed_into_the_event_it_names(when: str, expected: When) -> None:
    text = doc(
        run(MODEL, INPUT, EXEC, MODEL, GATED),
        run(id="m1", session="s2", extra='start = "manual"'),
        action(id="probe", when=when, do="open_gate", gate="g1"),
        action(id="close", when="never.ok", do="dispose", directory="/p", mode="maintenance"),
        action(id="confirm", when="never.ok", do="dispose_all", mode="user_confirmed_interrupt"),
        action(id="stop", when="never.ok", do="shutdown"),
        action(id="go", when="never.ok", do="start_run", run="m1"),
        action(id="open", when="never.ok", do="open_gate", gate="g1"),
        action(id="never", when="r1.finished", do="cancel", run="r1"),
        action(id="later", when="begin", do="cancel", run="r1"),
    )

    assert load(text).actions[0].when == expected


def test_an_action_may_name_a_directory_known_from_a_run_or_from_instance_faults() -> None:
    text = doc(
        run(directory="/from-run"),
        action(when="begin", do="dispose", directory="/from-run", mode="maintenance"),
        action(when="begin", do="reload", directory="/faulty", mode="maintenance"),
        '[instance_faults."/faulty"]\ndispose_ms = 10\n',
    )

    assert [spec.directory for spec in load(text).actions] == ["/from-run", "/faulty"]


def test_step_ids_live_apart_from_run_action_and_session_ids() -> None:
    text = doc(
        run('{ kind = "model", id = "r1" }', '{ kind = "model", id = "s1" }'),
        action(id="a1", when="r1.r1.started", do="cancel", run="r1"),
    )

    assert load(text).runs[0].steps[0].id == "r1"


# --------------------------------------------------------------------------------------------------------
# Expectations


def test_expectations_are_normalized() -> None:
    text = doc(
        run(INPUT, EXEC, INPUT, EXEC, id="r1"),
        run(id="r2", session="s2"),
        action(id="a1", when="begin", do="dispose_all", mode="user_confirmed_interrupt"),
        action(id="a2", when="begin", do="cancel", run="r2"),
        "[expect]\n"
        'r1 = { outcome = "interrupted", reason = "lifecycle_interrupt", origin = "dispose_all",'
        ' action = "a1", phase = "none", generation = 1, error = "none", tool_parts = ["completed",'
        ' { state = "interrupted", tool_started = false }, { state = "pending" }] }\n'
        'r2 = { outcome = "none", generation = "none", action = "none", origin = "none" }\n'
        'a1 = { result = "interrupted", completed = true, completed_after = "r1.finished",'
        ' interrupted_runs = ["r2", "r1", "r2"] }\n'
        'a2 = { result = "not_fired", completed = "none" }\n'
        's2 = { status = "busy" }\n',
    )
    r1, r2, a1, a2, s2 = load(text).expect

    assert r1 == Expectation(
        target="r1",
        target_kind="run",
        fields={
            "outcome": "interrupted",
            "reason": "lifecycle_interrupt",
            "origin": "dispose_all",
            "action": "a1",
            "phase": None,
            "generation": 1,
            "error": None,
            "tool_parts": (
                "completed",
                PartExpectation(state="interrupted", tool_started=False),
                PartExpectation(state="pending", tool_started=None),
            ),
        },
    )
    assert list(r1.fields) == [
        "outcome",
        "reason",
        "origin",
        "action",
        "phase",
        "generation",
        "error",
        "tool_parts",
    ]
    assert dict(r2.fields) == {"outcome": None, "generation": None, "action": None, "origin": None}
    assert dict(a1.fields) == {
        "result": "interrupted",
        "completed": True,
        "completed_after": When(raw="r1.finished", kind="run_finished", run="r1"),
        "interrupted_runs": ("r1", "r2"),
    }
    assert dict(a2.fields) == {"result": "not_fired", "completed": None}
    assert s2 == Expectation(target="s2", target_kind="session", fields={"status": "busy"})


def test_an_empty_expectation_is_allowed() -> None:
    assert load(one_run("[expect]\nr1 = {}\n")).expect == (
        Expectation(target="r1", target_kind="run", fields={}),
    )


def test_an_expectation_may_name_a_default_action_id() -> None:
    text = one_run(
        action(when="begin", do="open_gate", gate="g1"), '[expect]\naction-1 = { result = "ok" }\n'
    )

    assert load(text).expect[0].target_kind == "action"


# --------------------------------------------------------------------------------------------------------
# Invalid files: each names the file and the offending key


@pytest.mark.parametrize(
    ("text", "key"),
    [
        pytest.param('name = "t"\nname = ', None, id="bad TOML syntax"),
        pytest.param(b'name = "\xff"\n', None, id="not UTF-8"),
        pytest.param('name = "t"\ntitle = "x"\n', "title", id="unknown top-level key"),
        pytest.param('description = "no name"\n', "name", id="missing name"),
        pytest.param('name = ""\n', "name", id="empty name"),
        pytest.param('name = "  "\n', "name", id="blank name"),
        pytest.param("name = 1\n", "name", id="name not a string"),
        pytest.param('name = "t"\ndescription = 1\n', "description", id="description not a string"),
        pytest.param('name = "t"\ndirectories = "/p"\n', "directories", id="directories not a list"),
        pytest.param('name = "t"\ndirectories = ["/p", 1]\n', "directories[1]", id="directory not a string"),
        pytest.param(
            'name = "t"\ndirectories = ["/p", "/q", "/p"]\n', "directories[2]", id="directory twice"
        ),
        pytest.param('name = "t"\nruns = 1\n', "runs", id="runs not a list"),
        pytest.param('name = "t"\nactions = [1]\n', "actions[0]", id="action not a table"),
        pytest.param('name = "t"\nexpect = []\n', "expect", id="expect not a table"),
    ],
)
def test_a_broken_top_level_is_invalid(text: str, key: str | None) -> None:
    assert_refused(text, key)


def test_an_unknown_key_is_reported_with_the_keys_that_are_allowed_there() -> None:
    error = assert_refused(doc(run(extra='colour = "red"')), "runs[0].colour")

    assert error.message == (
        "not a key of a run (its keys: id, session, directory, start, steps, parent, queue_policy, "
        "deadline_ms, resume_of, interrupt_grace_ms, retry_budget)"
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        pytest.param(doc(run(extra='colour = "red"')), "runs[0].colour", id="unknown run key"),
        pytest.param(
            doc('[[runs]]\nsession = "s1"\ndirectory = "/p"\nsteps = [{ kind = "model" }]\n'),
            "runs[0].id",
            id="run without id",
        ),
        pytest.param(
            doc('[[runs]]\nid = "r1"\ndirectory = "/p"\nsteps = [{ kind = "model" }]\n'),
            "runs[0].session",
            id="run without session",
        ),
        pytest.param(
            doc('[[runs]]\nid = "r1"\nsession = "s1"\nsteps = [{ kind = "model" }]\n'),
            "runs[0].directory",
            id="run without directory",
        ),
        pytest.param(
            doc('[[runs]]\nid = "r1"\nsession = "s1"\ndirectory = "/p"\n'),
            "runs[0].steps",
            id="run without steps",
        ),
        pytest.param(
            doc('[[runs]]\nid = "r1"\nsession = "s1"\ndirectory = "/p"\nsteps = []\n'),
            "runs[0].steps",
            id="run with no steps",
        ),
        pytest.param(doc(run(id="r.1")), "runs[0].id", id="run id with a dot"),
        pytest.param(doc(run(id="")), "runs[0].id", id="empty run id"),
        pytest.param(doc(run(session="s.1")), "runs[0].session", id="session id with a dot"),
        pytest.param(doc(run(extra='start = "later"')), "runs[0].start", id="unknown start"),
        pytest.param(doc(run('{ kind = "think" }')), "runs[0].steps[0].kind", id="unknown step kind"),
        pytest.param(doc(run("{ ms = 1 }")), "runs[0].steps[0].kind", id="step without kind"),
        pytest.param(doc(run('"model"')), "runs[0].steps[0]", id="step not a table"),
        pytest.param(
            doc(run('{ kind = "model", colour = 1 }')), "runs[0].steps[0].colour", id="unknown step key"
        ),
        pytest.param(
            doc(run('{ kind = "model", id = "a.b" }')), "runs[0].steps[0].id", id="step id with a dot"
        ),
        pytest.param(doc(run('{ kind = "model", id = "" }')), "runs[0].steps[0].id", id="empty step id"),
        pytest.param(
            doc(run('{ kind = "model", gate = "g.1" }')), "runs[0].steps[0].gate", id="gate with a dot"
        ),
        pytest.param(doc(run('{ kind = "model", ms = -1 }')), "runs[0].steps[0].ms", id="negative ms"),
        pytest.param(doc(run('{ kind = "model", ms = true }')), "runs[0].steps[0].ms", id="boolean ms"),
        pytest.param(doc(run('{ kind = "model", ms = 1.5 }')), "runs[0].steps[0].ms", id="fractional ms"),
        pytest.param(doc(run('{ kind = "model", ms = "10" }')), "runs[0].steps[0].ms", id="string ms"),
        pytest.param(
            doc(run('{ kind = "model", ignores_cancel = 1 }')),
            "runs[0].steps[0].ignores_cancel",
            id="integer ignores_cancel",
        ),
        pytest.param(doc(run('{ kind = "model", fail = "" }')), "runs[0].steps[0].fail", id="empty fail"),
        pytest.param(
            doc(run('{ kind = "model", tool = "bash" }')), "runs[0].steps[0].tool", id="tool on model"
        ),
        pytest.param(
            doc(run(INPUT, EXEC, '{ kind = "permission", tool = "bash" }')),
            "runs[0].steps[2].tool",
            id="tool on permission",
        ),
        pytest.param(doc(run('{ kind = "model", at = "running" }')), "runs[0].steps[0].at", id="at on model"),
        pytest.param(
            doc(run('{ kind = "tool_input", tool = "bash", at = "prepared" }', EXEC)),
            "runs[0].steps[0].at",
            id="at on tool_input",
        ),
        pytest.param(
            doc(run(INPUT, '{ kind = "tool_exec", tool = "bash", at = "started" }')),
            "runs[0].steps[1].at",
            id="unknown at",
        ),
        pytest.param(
            doc(run(INPUT, EXEC, '{ kind = "form", error = "x" }')),
            "runs[0].steps[2].error",
            id="error on form",
        ),
        pytest.param(
            doc(run('{ kind = "tool_input", tool = "bash", error = "x" }', EXEC)),
            "runs[0].steps[0].error",
            id="error on tool_input",
        ),
        pytest.param(
            doc(run('{ kind = "tool_input" }', EXEC)), "runs[0].steps[0].tool", id="tool_input no tool"
        ),
        pytest.param(
            doc(run(INPUT, '{ kind = "tool_exec" }')), "runs[0].steps[1].tool", id="tool_exec no tool"
        ),
        pytest.param(
            doc(run('{ kind = "tool_input", tool = "" }', EXEC)),
            "runs[0].steps[0].tool",
            id="empty tool name",
        ),
    ],
)
def test_a_broken_run_or_step_is_invalid(text: str, key: str) -> None:
    assert_refused(text, key)


def test_a_tool_exec_without_its_tool_input_is_invalid() -> None:
    error = assert_refused(doc(run(MODEL, EXEC)), "runs[0].steps[1]")

    assert "tool_input" in error.message


def test_a_lone_tool_input_is_invalid() -> None:
    assert_refused(doc(run(MODEL, INPUT)), "runs[0].steps[1]")


def test_a_permission_outside_a_tool_part_is_invalid() -> None:
    assert_refused(doc(run(PERMISSION)), "runs[0].steps[0]")


@pytest.mark.parametrize(
    ("steps", "key"),
    [
        pytest.param((INPUT, MODEL), "runs[0].steps[0]", id="tool_input followed by a model step"),
        pytest.param((INPUT, INPUT, EXEC), "runs[0].steps[0]", id="tool_input followed by a tool_input"),
        pytest.param((INPUT, PERMISSION, EXEC), "runs[0].steps[0]", id="tool_input followed by a permission"),
        pytest.param((EXEC,), "runs[0].steps[0]", id="tool_exec first"),
        pytest.param((INPUT, EXEC, EXEC), "runs[0].steps[2]", id="a second tool_exec in one part"),
        pytest.param((INPUT, EXEC, PERMISSION, EXEC), "runs[0].steps[3]", id="tool_exec after a permission"),
        pytest.param(
            ('{ kind = "tool_input", tool = "read" }', EXEC),
            "runs[0].steps[1].tool",
            id="tool_exec of another tool",
        ),
        pytest.param((FORM,), "runs[0].steps[0]", id="form first"),
        pytest.param((MODEL, PERMISSION), "runs[0].steps[1]", id="permission after a model step"),
        pytest.param((INPUT, EXEC, MODEL, FORM), "runs[0].steps[3]", id="form after the part ended"),
        pytest.param((INPUT, EXEC, PERMISSION, INPUT), "runs[0].steps[3]", id="lone tool_input at the end"),
    ],
)
def test_a_step_outside_the_tool_part_structure_is_invalid(steps: tuple[str, ...], key: str) -> None:
    assert_refused(doc(run(*steps)), key)


@pytest.mark.parametrize(
    ("steps", "key"),
    [
        pytest.param(
            ('{ kind = "model", id = "x" }', '{ kind = "model", id = "x" }'),
            "runs[0].steps[1].id",
            id="two explicit ids",
        ),
        pytest.param(
            ('{ kind = "model", id = "model-2" }', MODEL, MODEL),
            "runs[0].steps[0].id",
            id="an explicit id taking a later default id",
        ),
        pytest.param(
            (MODEL, MODEL, '{ kind = "model", id = "model-2" }'),
            "runs[0].steps[2].id",
            id="an explicit id taking an earlier default id",
        ),
        pytest.param(
            (MODEL, '{ kind = "tool_input", tool = "bash", id = "model" }', EXEC),
            "runs[0].steps[1].id",
            id="an explicit id taking the default id of another kind",
        ),
    ],
)
def test_step_ids_must_be_unique_within_a_run(steps: tuple[str, ...], key: str) -> None:
    assert_refused(doc(run(*steps)), key)


def test_the_same_step_id_in_two_runs_is_fine() -> None:
    text = doc(run('{ kind = "model", id = "x" }'), run('{ kind = "model", id = "x" }', id="r2"))

    assert [spec.steps[0].id for spec in load(text).runs] == ["x", "x"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        pytest.param(doc(run(id="r1"), run(id="r1", session="s2")), "runs[1].id", id="two runs"),
        pytest.param(
            doc(run(id="r1"), run(id="s1", session="s2")), "runs[1].id", id="a run named like a session"
        ),
        pytest.param(doc(run(id="r1", session="r1")), "runs[0].session", id="a session named like its run"),
        pytest.param(
            doc(run(id="r1"), run(id="r2", session="r1")), "runs[1].session", id="a session like a run"
        ),
        pytest.param(
            one_run(action(id="r1", when="begin", do="shutdown")), "actions[0].id", id="action like a run"
        ),
        pytest.param(
            one_run(action(id="s1", when="begin", do="shutdown")), "actions[0].id", id="action like session"
        ),
        pytest.param(
            one_run(action(id="a", when="begin", do="shutdown"), action(id="a", when="begin", do="shutdown")),
            "actions[1].id",
            id="two actions",
        ),
        pytest.param(
            one_run(action(when="begin", do="shutdown"), action(id="action-1", when="begin", do="shutdown")),
            "actions[1].id",
            id="an explicit action id taking a default action id",
        ),
        pytest.param(
            doc(run(id="action-1"), action(when="begin", do="shutdown")),
            "runs[0].id",
            id="a run id taking a default action id",
        ),
        pytest.param(
            doc(
                run(session="action-2"),
                action(id="a", when="begin", do="shutdown"),
                action(when="a.forced", do="shutdown"),
            ),
            "runs[0].session",
            id="a session taking a default action id",
        ),
        pytest.param(
            one_run(action(id="a.b", when="begin", do="shutdown")), "actions[0].id", id="action id with a dot"
        ),
        pytest.param(
            one_run(action(id="", when="begin", do="shutdown")), "actions[0].id", id="empty action id"
        ),
    ],
)
def test_run_action_and_session_ids_share_one_namespace(text: str, key: str) -> None:
    assert_refused(text, key)


def test_runs_may_share_a_session() -> None:
    assert load(doc(run(id="r1"), run(id="r2"))).sessions == ("s1",)


def _action_case(key: str, case_id: str, **keys: Any) -> Any:
    """A one-run scenario (r1 begins, m1 is manual, gate g1) plus one action, by default ``when = "begin"``
    (``when=None``: none), refused at ``actions[0].<key>``."""
    keys = {name: value for name, value in {"when": "begin", **keys}.items() if value is not None}
    text = one_run(run(id="m1", session="s2", extra='start = "manual"'), action(**keys))
    return pytest.param(text, f"actions[0].{key}", id=case_id)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        _action_case("colour", "unknown action key", do="shutdown", colour=1),
        _action_case("when", "action without when", when=None, do="shutdown"),
        _action_case("do", "action without do", when="begin"),
        _action_case("do", "unknown do", do="explode"),
        _action_case("when", "when not a string", when=1, do="shutdown"),
        _action_case("gate", "gate on dispose", do="dispose", directory="/p", mode="maintenance", gate="g1"),
        _action_case(
            "directory", "directory on dispose_all", do="dispose_all", mode="maintenance", directory="/p"
        ),
        _action_case("mode", "mode on cancel", do="cancel", run="r1", mode="maintenance"),
        _action_case("mode", "mode on shutdown", do="shutdown", mode="maintenance"),
        _action_case("origin", "origin on start_run", do="start_run", run="m1", origin="x"),
        _action_case("grace_ms", "grace_ms on a close", do="dispose_all", mode="maintenance", grace_ms=10),
        _action_case("run", "run on open_gate", do="open_gate", gate="g1", run="r1"),
        _action_case("answer", "answer on cancel_form", do="cancel_form", run="r1", answer="x"),
        _action_case(
            "message", "message on answer_form", do="answer_form", run="r1", answer="x", message="y"
        ),
        _action_case("decision", "decision on cancel", do="cancel", run="r1", decision="approve"),
        _action_case("mode", "dispose without mode", do="dispose", directory="/p"),
        _action_case("mode", "dispose_all without mode", do="dispose_all"),
        _action_case("mode", "reload without mode", do="reload", directory="/p"),
        _action_case("mode", "invalidate_config without mode", do="invalidate_config"),
        _action_case("mode", "unknown mode", do="dispose_all", mode="gentle"),
        _action_case("mode", "shutdown as a close mode", do="dispose_all", mode="shutdown"),
        _action_case("mode", "mode not a string", do="dispose_all", mode=1),
        _action_case("directory", "dispose without directory", do="dispose", mode="maintenance"),
        _action_case("directory", "reload without directory", do="reload", mode="maintenance"),
        _action_case(
            "directory", "unknown directory", do="dispose", directory="/nowhere", mode="maintenance"
        ),
        _action_case("origin", "origin not a string", do="shutdown", origin=1),
        _action_case("run", "cancel without run", do="cancel"),
        _action_case("run", "cancel of an unknown run", do="cancel", run="r9"),
        _action_case("run", "cancel of a session", do="cancel", run="s1"),
        _action_case("run", "start_run without run", do="start_run"),
        _action_case("run", "start_run of a begin run", do="start_run", run="r1"),
        _action_case(
            "run", "reply_permission of an unknown run", do="reply_permission", run="r9", decision="approve"
        ),
        _action_case("decision", "reply_permission without decision", do="reply_permission", run="r1"),
        _action_case("decision", "unknown decision", do="reply_permission", run="r1", decision="yes"),
        _action_case("run", "answer_form without run", do="answer_form", answer="x"),
        _action_case("answer", "answer_form without answer", do="answer_form", run="r1"),
        # a list of one entry per question is an answer; one whose picks hold a list is not
        _action_case(
            "answer", "answer whose picks hold a list", do="answer_form", run="r1", answer=[["a", ["b"]]]
        ),
        _action_case("run", "cancel_form of an unknown run", do="cancel_form", run="r9"),
        _action_case("gate", "open_gate without gate", do="open_gate"),
        _action_case("gate", "open_gate of a gate no step names", do="open_gate", gate="g2"),
        _action_case("grace_ms", "negative grace_ms", do="shutdown", grace_ms=-1),
        _action_case("grace_ms", "boolean grace_ms", do="test_teardown", grace_ms=True),
    ],
)
def test_a_broken_action_is_invalid(text: str, key: str) -> None:
    assert_refused(text, key)


def test_an_answer_that_is_a_table_is_invalid() -> None:
    text = one_run('[[actions]]\nwhen = "begin"\ndo = "answer_form"\nrun = "r1"\nanswer = { text = "x" }\n')

    assert_refused(text, "actions[0].answer")


def test_a_key_an_action_does_not_take_is_reported_with_the_keys_it_does_take() -> None:
    text = one_run(action(when="begin", do="dispose", directory="/p", mode="maintenance", gate="g1"))

    error = assert_refused(text, "actions[0].gate")
    assert error.message == (
        "do = 'dispose' does not take this key (its keys: directory, mode, origin, fingerprint, grace_ms)"
    )


def _when_case(when: str, case_id: str) -> Any:
    """Run r1 (steps model, model-2 gated g1) and the actions close, confirm, stop, go, open, first of all
    an action whose ``when`` is ``when``."""
    text = one_run(
        action(id="probe", when=when, do="shutdown"),
        action(id="close", when="begin", do="dispose_all", mode="maintenance"),
        action(id="confirm", when="begin", do="dispose_all", mode="user_confirmed_interrupt"),
        action(id="stop", when="begin", do="test_teardown"),
        action(id="go", when="begin", do="cancel", run="r1"),
        action(id="open", when="begin", do="open_gate", gate="g1"),
    )
    return pytest.param(text, id=case_id)


@pytest.mark.parametrize(
    "text",
    [
        _when_case("", "empty"),
        _when_case("start", "a bare word other than begin"),
        _when_case("r1", "a bare run id"),
        _when_case("r1..started", "an empty part"),
        _when_case("r1.model.started.now", "four parts"),
        _when_case("begin.ok", "begin with a result"),
        _when_case("r9.started", "an unknown run"),
        _when_case("r1.done", "an unknown run event"),
        _when_case("r1.completed", "a run does not complete"),
        _when_case("r1.think.started", "an unknown step"),
        _when_case("r1.model-3.started", "a default step id beyond the steps"),
        _when_case("r1.model.done", "an unknown step event"),
        _when_case("r9.model.started", "a step of an unknown run"),
        _when_case("close.model.started", "a step of an action"),
        _when_case("s1.started", "a session"),
        _when_case("a9.ok", "an unknown action"),
        _when_case("close.interrupted", "a maintenance close cannot give interrupted"),
        _when_case("close.forced", "a close cannot give forced"),
        _when_case("close.ok", "a close cannot give ok"),
        _when_case("close.not_fired", "not_fired is not an event"),
        _when_case("stop.rejected", "a teardown is never rejected"),
        _when_case("stop.deferred", "a teardown is never deferred"),
        _when_case("go.completed", "a cancel does not complete"),
        _when_case("go.forced", "a cancel cannot give forced"),
        _when_case("open.rejected", "open_gate is never rejected"),
        _when_case("open.completed", "open_gate does not complete"),
        _when_case("confirm.finished", "an action does not finish"),
    ],
)
def test_a_when_that_names_nothing_or_cannot_happen_is_invalid(text: str) -> None:
    assert_refused(text, "actions[0].when")


def test_a_when_that_cannot_happen_says_which_events_the_action_has() -> None:
    text = one_run(
        action(id="close", when="begin", do="dispose_all", mode="maintenance"),
        action(when="close.interrupted", do="open_gate", gate="g1"),
    )

    error = assert_refused(text, "actions[1].when")
    assert "close.deferred" in error.message
    assert "close.completed" in error.message


def _expect_case(entries: str, key: str, case_id: str) -> Any:
    """Run r1 (session s1), action a1 (a close), then ``[expect]`` with ``entries``, refused at
    ``expect.<key>``."""
    text = one_run(
        action(id="a1", when="begin", do="dispose_all", mode="maintenance"), f"[expect]\n{entries}\n"
    )
    return pytest.param(text, f"expect.{key}", id=case_id)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        _expect_case('r9 = { outcome = "completed" }', "r9", "an unknown id"),
        _expect_case('"r 9" = {}', '"r 9"', "an unknown id that needs quoting"),
        _expect_case('r1 = "completed"', "r1", "an entry that is not a table"),
        _expect_case('r1 = { result = "ok" }', "r1.result", "an action key on a run"),
        _expect_case('r1 = { status = "idle" }', "r1.status", "a session key on a run"),
        _expect_case('a1 = { outcome = "completed" }', "a1.outcome", "a run key on an action"),
        _expect_case('s1 = { outcome = "completed" }', "s1.outcome", "a run key on a session"),
        _expect_case('r1 = { outcome = "done" }', "r1.outcome", "an unknown outcome"),
        _expect_case('r1 = { reason = "because" }', "r1.reason", "an unknown reason"),
        _expect_case('r1 = { phase = "thinking" }', "r1.phase", "an unknown phase"),
        _expect_case("r1 = { generation = 0 }", "r1.generation", "generation zero"),
        _expect_case('r1 = { generation = "1" }', "r1.generation", "generation as a string"),
        _expect_case("r1 = { generation = true }", "r1.generation", "generation as a boolean"),
        _expect_case("r1 = { origin = 1 }", "r1.origin", "origin not a string"),
        _expect_case("r1 = { error = false }", "r1.error", "error not a string"),
        _expect_case('r1 = { action = "a9" }', "r1.action", "an action that is not in the file"),
        _expect_case('r1 = { action = "r1" }', "r1.action", "a run as the action"),
        _expect_case('r1 = { tool_parts = "none" }', "r1.tool_parts", "tool_parts not a list"),
        _expect_case('r1 = { tool_parts = ["completed", "done"] }', "r1.tool_parts[1]", "an unknown state"),
        _expect_case("r1 = { tool_parts = [1] }", "r1.tool_parts[0]", "a part that is a number"),
        _expect_case(
            "r1 = { tool_parts = [{ tool_started = true }] }",
            "r1.tool_parts[0].state",
            "a part without state",
        ),
        _expect_case(
            'r1 = { tool_parts = [{ state = "done" }] }', "r1.tool_parts[0].state", "a part's unknown state"
        ),
        _expect_case(
            'r1 = { tool_parts = [{ state = "completed", note = "x" }] }',
            "r1.tool_parts[0].note",
            "an unknown part key",
        ),
        _expect_case(
            'r1 = { tool_parts = [{ state = "completed", tool_started = "yes" }] }',
            "r1.tool_parts[0].tool_started",
            "tool_started not a boolean",
        ),
        _expect_case('a1 = { result = "fine" }', "a1.result", "an unknown result"),
        _expect_case('a1 = { result = "none" }', "a1.result", "a null result"),
        _expect_case('a1 = { completed = "yes" }', "a1.completed", "completed not a boolean"),
        _expect_case('a1 = { completed_after = "r9.finished" }', "a1.completed_after", "an unknown event"),
        _expect_case('a1 = { completed_after = "a1.ok" }', "a1.completed_after", "an event that can't be"),
        _expect_case('a1 = { interrupted_runs = "r1" }', "a1.interrupted_runs", "runs not a list"),
        _expect_case(
            'a1 = { interrupted_runs = ["r1", "r9"] }', "a1.interrupted_runs[1]", "a run that is not there"
        ),
        _expect_case('s1 = { status = "running" }', "s1.status", "an unknown status"),
        _expect_case('s1 = { status = "none" }', "s1.status", "a null status"),
    ],
)
def test_a_broken_expectation_is_invalid(text: str, key: str) -> None:
    assert_refused(text, key)


@pytest.mark.parametrize(
    ("table", "key"),
    [
        pytest.param('[instance_faults."/p"]\nbogus = 1\n', 'instance_faults."/p".bogus', id="unknown key"),
        pytest.param(
            '[instance_faults."/p"]\ndispose_ms = -5\n', 'instance_faults."/p".dispose_ms', id="negative"
        ),
        pytest.param(
            '[instance_faults."/p"]\ndispose_ms = true\n', 'instance_faults."/p".dispose_ms', id="bool"
        ),
        pytest.param(
            '[instance_faults."/p"]\ndispose_error = 1\n', 'instance_faults."/p".dispose_error', id="int"
        ),
        pytest.param('[instance_faults]\n"/p" = 1\n', 'instance_faults."/p"', id="not a table"),
        pytest.param(
            "[instance_faults]\nplain = { bogus = 1 }\n", "instance_faults.plain.bogus", id="bare key"
        ),
    ],
)
def test_a_broken_instance_fault_is_invalid(table: str, key: str) -> None:
    assert_refused(doc(run(), table), key)


# --------------------------------------------------------------------------------------------------------
# JSON


@pytest.mark.parametrize(
    ("text", "key"),
    [
        pytest.param('{"name": "t",', None, id="bad JSON syntax"),
        pytest.param('[{"name": "t"}]', None, id="a list"),
        pytest.param('"t"', None, id="a string"),
        pytest.param('{"name": "t", "name": "u"}', None, id="a key given twice"),
        pytest.param('{"name": "t", "directories": [NaN]}', None, id="NaN"),
        pytest.param('{"name": "t", "description": null}', "description", id="a null value"),
        pytest.param('{"name": "t", "directories": ["/p", null]}', "directories[1]", id="a null in a list"),
        pytest.param(
            '{"name": "t", "runs": [{"id": "r1", "session": "s1", "directory": "/p",'
            ' "steps": [{"kind": "model", "ms": 1.0}]}]}',
            "runs[0].steps[0].ms",
            id="a float ms",
        ),
        pytest.param('{"name": "t", "runs": [{"id": 1}]}', "runs[0].id", id="a numeric id"),
    ],
)
def test_a_broken_json_scenario_is_invalid(text: str, key: str | None) -> None:
    assert_refused(text, key, fmt="json")


def test_a_json_scenario_may_come_as_bytes() -> None:
    scenario = parse_scenario(CONTRACT_EXAMPLE_JSON.encode(), file="x.json", fmt="json")

    assert scenario.runs[0].id == "r1"


# --------------------------------------------------------------------------------------------------------
# Files and folders


def test_a_toml_file_and_a_json_file_load_by_their_suffix(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a.toml").write_text(CONTRACT_EXAMPLE)
    (tmp_path / "b.json").write_text(CONTRACT_EXAMPLE_JSON)

    from_toml = load_scenario(tmp_path / "a.toml")
    from_json = load_scenario(str(tmp_path / "b.json"))

    assert from_toml.file == str(tmp_path / "a.toml")
    assert from_json.file == str(tmp_path / "b.json")
    assert dataclasses.replace(from_json, file=from_toml.file) == from_toml


def test_a_file_with_another_suffix_is_invalid(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(CONTRACT_EXAMPLE)

    with pytest.raises(ScenarioFileError) as caught:
        load_scenario(path)
    assert caught.value.key is None
    assert str(caught.value).startswith(f"{path}: ")


def test_a_missing_file_is_reported_as_a_scenario_file_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "missing.toml"

    with pytest.raises(ScenarioFileError) as caught:
        load_scenario(path)
    assert caught.value.file == str(path)
    assert caught.value.key is None


def test_an_error_from_a_file_names_the_path_as_given(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(doc(run(MODEL, EXEC)))

    with pytest.raises(ScenarioFileError) as caught:
        load_scenario(path)
    assert str(caught.value) == f"{path}: runs[0].steps[1]: {caught.value.message}"


def test_a_folder_yields_its_toml_and_json_files_sorted_by_name_not_recursively(
    tmp_path: pathlib.Path,
) -> None:
    for name in ("b.toml", "a.json", "c.toml", "notes.md", "d.toml.bak"):
        (tmp_path / name).write_text("")
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "0.toml").write_text("")
    (tmp_path / "folder.toml").mkdir()

    assert scenario_files(tmp_path) == [tmp_path / "a.json", tmp_path / "b.toml", tmp_path / "c.toml"]
    assert scenario_files(str(tmp_path)) == [tmp_path / "a.json", tmp_path / "b.toml", tmp_path / "c.toml"]


# --------------------------------------------------------------------------------------------------------
# The error itself


def test_the_error_reads_file_key_message_and_survives_pickling() -> None:
    error = ScenarioFileError("s.toml", "runs[0].id", "an id must be a non-empty string without '.'")
    whole = ScenarioFileError("s.toml", None, "invalid TOML: Invalid value (at end of document)")

    assert str(error) == "s.toml: runs[0].id: an id must be a non-empty string without '.'"
    assert str(whole) == "s.toml: invalid TOML: Invalid value (at end of document)"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.file, copy.key, copy.message) == (error.file, error.key, error.message)


def test_the_spec_types_are_the_public_ones() -> None:
    scenario = load(CONTRACT_EXAMPLE)

    assert isinstance(scenario.runs[0], RunSpec)
    assert isinstance(scenario.runs[0].steps[0], StepSpec)
    assert isinstance(scenario.actions[0], ActionSpec)
    assert isinstance(scenario.actions[0].when, When)
    assert isinstance(scenario.expect[0], Expectation)
