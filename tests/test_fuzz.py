"""Bad input: whatever bytes or broken documents come in, the answer is a clear error.

The scenario loader answers a document with a ``Scenario`` or a ``ScenarioFileError`` naming the file
and saying what is wrong in one line; the protocol decoders answer bytes with a request or an event, or
a ``ProtocolDecodeError``. Never another exception, never a hang. The inputs are any byte string, token
soup that looks like TOML, and mutations of valid documents: the scenario library in ``docs/scenarios``
(parsed to a dict, mutated, written back as TOML or JSON) and requests and events Hypothesis builds.

Hypothesis is deterministic here (``derandomize=True``, no example database), so CI sees the same
examples on every run. The README's command tries a quarter to a half of the examples the deep layer
tries (tests/layers.py).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import pathlib
import re
import string
import time
import tomllib
from collections.abc import Callable, Iterator
from typing import Any, get_args

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from layers import pick

from run_supervisor.actors._cli import main
from run_supervisor.actors.scenarios import Scenario, ScenarioFileError, parse_scenario
from run_supervisor.actors.scenarios._format import _ActionModel, _RunModel, _StepModel
from run_supervisor.protocol import (
    AskPayload,
    Event,
    ProtocolDecodeError,
    Question,
    Request,
    decode_event,
    decode_request,
)

pytestmark = pytest.mark.deep  # generative: fewer examples by default (tests/layers.py)

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIBRARY = sorted((ROOT / "docs" / "scenarios").glob("*.toml"))
SEEDS: dict[str, dict[str, Any]] = {path.name: tomllib.loads(path.read_text("utf-8")) for path in LIBRARY}

settings.register_profile(
    "fuzz-ci",
    derandomize=True,
    max_examples=pick(smoke=100, deep=200),
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
CI = settings.get_profile("fuzz-ci")
"""Applied per test (never loaded globally, so other modules keep their own settings)."""

REQUEST_TYPES = get_args(Request)
EVENT_TYPES = get_args(Event)
ANY_CODE_POINT = st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr))
"""Lone surrogates too (text decoded with ``errors="surrogateescape"`` holds them)."""
PARSE_LIMIT_S = 5.0
"""A parse or a decode is milliseconds; taking this long would be a hang."""


# ----------------------------------------------------------------------------------------------------
# Writing a document back as TOML or JSON


def _toml_string(text: str) -> str:
    out = ['"']
    for char in text:
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value if item is not None) + "]"
    if isinstance(value, dict):
        items = (f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None)
        return "{ " + ", ".join(items) + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")


def to_toml(document: dict[str, Any]) -> str:
    """The document as TOML, a ``key = value`` line per top-level key; None is left out (TOML has no null)."""
    return "".join(f"{_toml_string(k)} = {_toml_value(v)}\n" for k, v in document.items() if v is not None)


def to_json(document: dict[str, Any]) -> str:
    """The document as JSON (dates and times, which JSON lacks, become ISO strings)."""
    return json.dumps(document, ensure_ascii=False, default=lambda value: value.isoformat())


def render(document: dict[str, Any], fmt: str) -> str:
    return to_toml(document) if fmt == "toml" else to_json(document)


# ----------------------------------------------------------------------------------------------------
# The properties


def scenario_or_clear_error(
    data: str | bytes, fmt: str, file: str = "fuzz.toml"
) -> Scenario | ScenarioFileError:
    """Parse; any exception but ``ScenarioFileError`` propagates and fails the test."""
    started = time.monotonic()
    try:
        scenario = parse_scenario(data, file=file, fmt=fmt)  # type: ignore[arg-type]
    except ScenarioFileError as error:
        assert error.file == file
        assert isinstance(error.message, str) and error.message.strip(), repr(error.message)
        assert "\n" not in error.message, repr(error.message)
        assert error.key is None or (isinstance(error.key, str) and error.key), repr(error.key)
        expected = (
            f"{file}: {error.message}" if error.key is None else f"{file}: {error.key}: {error.message}"
        )
        assert str(error) == expected
        outcome: Scenario | ScenarioFileError = error
    else:
        assert isinstance(scenario, Scenario)
        assert scenario.file == file
        outcome = scenario
    assert time.monotonic() - started < PARSE_LIMIT_S
    return outcome


def refused(data: str | bytes, fmt: str, file: str = "fuzz.toml") -> ScenarioFileError:
    outcome = scenario_or_clear_error(data, fmt, file)
    assert isinstance(outcome, ScenarioFileError), f"accepted: {data!r}"
    return outcome


def message_or_decode_error(
    decode: Callable[..., Any], data: bytes | str, fmt: str
) -> Any | ProtocolDecodeError:
    """Decode; any exception but ``ProtocolDecodeError`` propagates and fails the test."""
    expected_types = REQUEST_TYPES if decode is decode_request else EVENT_TYPES
    started = time.monotonic()
    try:
        message = decode(data, fmt)
    except ProtocolDecodeError as error:
        assert str(error).strip()
        outcome: Any = error
    else:
        assert isinstance(message, expected_types)
        outcome = message
    assert time.monotonic() - started < PARSE_LIMIT_S
    return outcome


# ----------------------------------------------------------------------------------------------------
# Mutating a document

Path = tuple[str | int, ...]

VALUES_BY_TYPE: dict[type, st.SearchStrategy[Any]] = {
    bool: st.booleans(),
    int: st.integers(min_value=-(2**63), max_value=2**63 - 1),
    float: st.floats(),
    str: st.one_of(
        st.text(max_size=10),
        st.sampled_from(
            ["", ".", "a.b", "none", "begin", "model", "maintenance", "r1", "s1", "a1", "/proj/a"]
        ),
    ),
    list: st.lists(st.one_of(st.integers(), st.text(max_size=4)), max_size=3),
    dict: st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    dt.datetime: st.datetimes(),
    dt.date: st.dates(),
    dt.time: st.times(),
    type(None): st.none(),
}
"""Values of every type a document can hold (None only in JSON: TOML has no null, the key is left out)."""
ODD_VALUES = st.one_of(*VALUES_BY_TYPE.values())


def of_another_type(old: Any) -> st.SearchStrategy[Any]:
    return st.one_of(*(strategy for kind, strategy in VALUES_BY_TYPE.items() if type(old) is not kind))


UNKNOWN_KEYS = st.one_of(
    st.sampled_from(["colour", "Id", "kind ", "steps_", "expects", "runs2", "", "timeout", "seed"]),
    st.text(min_size=1, max_size=8),
)
STEP_KINDS = ["model", "tool_input", "tool_exec", "permission", "form"]


def walk(value: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every value below ``value`` with its path (the root excluded)."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, item in items:
        yield (*path, key), item
        yield from walk(item, (*path, key))


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dotted(*path: str | int) -> str:
    """A key path as the loader names it: ``runs[0].steps[1].tool``, odd keys quoted (``expect."a b"``)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            segment = part if _BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
            out += f".{segment}" if out else segment
    return out


def at(document: Any, path: Path) -> Any:
    for part in path:
        document = document[part]
    return document


def containers(document: dict[str, Any], kind: type) -> list[Path]:
    found = [(path, value) for path, value in walk(document) if isinstance(value, kind)]
    return [path for path, _ in found] + ([()] if isinstance(document, kind) else [])


def tables(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The tables of ``doc[key]`` (runs, actions), whatever earlier mutations left there."""
    items = doc.get(key)
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def delete_a_key(draw: Any, doc: dict[str, Any]) -> None:
    paths = [path for path, _ in walk(doc) if isinstance(path[-1], str)]
    if paths:
        path = draw(st.sampled_from(paths))
        del at(doc, path[:-1])[path[-1]]


def add_an_unknown_key(draw: Any, doc: dict[str, Any]) -> None:
    where = at(doc, draw(st.sampled_from(containers(doc, dict))))
    where[draw(UNKNOWN_KEYS)] = draw(ODD_VALUES)


def replace_a_value_with_another_type(draw: Any, doc: dict[str, Any]) -> None:
    paths = [path for path, _ in walk(doc)]
    if paths:
        path = draw(st.sampled_from(paths))
        old = at(doc, path)
        new = draw(of_another_type(old))
        at(doc, path[:-1])[path[-1]] = new


def replace_a_string(draw: Any, doc: dict[str, Any]) -> None:
    """Any string (an id, a directory, a when, a kind...) becomes another: empty, dotted, taken, random."""
    paths = [path for path, value in walk(doc) if isinstance(value, str)]
    if not paths:
        return
    names = sorted({value for _, value in walk(doc) if isinstance(value, str) and len(value) < 40})
    path = draw(st.sampled_from(paths))
    choices = [st.text(max_size=12), st.sampled_from(["", ".", "x.y", " ", "none", "begin", "never"])]
    if names:
        choices.append(st.sampled_from(names))
    at(doc, path[:-1])[path[-1]] = draw(st.one_of(*choices))


def duplicate_an_id(draw: Any, doc: dict[str, Any]) -> None:
    """A run, action or session takes an id another one has (or a run is listed twice)."""
    runs, actions = tables(doc, "runs"), tables(doc, "actions")
    taken = [
        value
        for item in (*runs, *actions)
        for key in ("id", "session")
        if isinstance(value := item.get(key), str)
    ]
    holders = [(item, "id") for item in (*runs, *actions)] + [(run, "session") for run in runs]
    if taken and holders:
        holder, key = draw(st.sampled_from(holders))
        holder[key] = draw(st.sampled_from(taken))
    elif isinstance(doc.get("runs"), list) and doc["runs"]:
        doc["runs"].append(copy.deepcopy(draw(st.sampled_from(doc["runs"]))))


def break_a_when(draw: Any, doc: dict[str, Any]) -> None:
    """An action's ``when`` names nothing, a result that cannot happen, or is not an event name at all."""
    actions = tables(doc, "actions")
    if not actions:
        doc["actions"] = actions = [{"when": "begin", "do": "open_gate", "gate": "nowhere"}]
    runs = tables(doc, "runs")
    run_ids = [str(run.get("id")) for run in runs] or ["r1"]
    action_ids = [str(action.get("id", "action-1")) for action in actions]
    sessions = [str(run.get("session")) for run in runs] or ["s1"]
    run = draw(st.sampled_from(run_ids))
    action = draw(st.sampled_from(action_ids))
    broken = [
        "",
        ".",
        "..",
        "begin.started",
        "nobody.started",
        f"{run}.exploded",
        f"{run}.nosuchstep.started",
        f"{run}.model.done",
        f"{run}.model.started.now",
        f"{run}..started",
        f"{action}.exploded",
        f"{action}.completed",  # cannot happen for cancel, start_run, replies, forms, open_gate
        f"{action}.interrupted",  # cannot happen in maintenance mode
        f"{action}.forced",
        f"{draw(st.sampled_from(sessions))}.started",
        "Begin",
    ]
    draw(st.sampled_from(actions))["when"] = draw(st.one_of(st.sampled_from(broken), st.text(max_size=12)))


def empty_a_list(draw: Any, doc: dict[str, Any]) -> None:
    paths = [path for path in containers(doc, list) if path]
    if paths:
        path = draw(st.sampled_from(paths))
        at(doc, path[:-1])[path[-1]] = []


def drop_or_duplicate_a_list_item(draw: Any, doc: dict[str, Any]) -> None:
    paths = [path for path in containers(doc, list) if path and at(doc, path)]
    if paths:
        items = at(doc, draw(st.sampled_from(paths)))
        index = draw(st.integers(0, len(items) - 1))
        if draw(st.booleans()):
            del items[index]
        else:
            items.insert(index, copy.deepcopy(items[index]))


def swap_step_kinds(draw: Any, doc: dict[str, Any]) -> None:
    """Two steps of a run trade kinds, or one step takes another kind (known or not)."""
    step_lists = [
        run["steps"] for run in tables(doc, "runs") if isinstance(run.get("steps"), list) and run["steps"]
    ]
    if not step_lists:
        return
    steps = [step for step in draw(st.sampled_from(step_lists)) if isinstance(step, dict)]
    if not steps:
        return
    first = draw(st.sampled_from(steps))
    if len(steps) > 1 and draw(st.booleans()):
        second = draw(st.sampled_from(steps))
        first["kind"], second["kind"] = second.get("kind"), first.get("kind")
    else:
        first["kind"] = draw(st.sampled_from([*STEP_KINDS, "Model", "tool", "shell", ""]))


MUTATIONS = (
    delete_a_key,
    add_an_unknown_key,
    replace_a_value_with_another_type,
    replace_a_string,
    duplicate_an_id,
    break_a_when,
    empty_a_list,
    drop_or_duplicate_a_list_item,
    swap_step_kinds,
)


@st.composite
def mutated_scenarios(draw: Any, max_mutations: int = 3) -> tuple[str, dict[str, Any]]:
    seed = draw(st.sampled_from(sorted(SEEDS)))
    document = copy.deepcopy(SEEDS[seed])
    for _ in range(draw(st.integers(1, max_mutations))):
        draw(st.sampled_from(MUTATIONS))(draw, document)
    return seed, document


seeds = st.sampled_from(sorted(SEEDS))
formats = st.sampled_from(["toml", "json"])


# ----------------------------------------------------------------------------------------------------
# The scenario library is the seed corpus


def test_the_library_has_scenarios_to_seed_the_fuzzing() -> None:
    assert len(SEEDS) >= 20


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_every_library_scenario_written_back_as_toml_or_json_loads_to_the_same_scenario(seed: str) -> None:
    original = parse_scenario((ROOT / "docs" / "scenarios" / seed).read_bytes(), file=seed, fmt="toml")
    for fmt in ("toml", "json"):
        again = parse_scenario(render(SEEDS[seed], fmt), file=seed, fmt=fmt)  # type: ignore[arg-type]
        assert again == original


# ----------------------------------------------------------------------------------------------------
# The scenario loader: any input


@CI
@given(data=st.binary(max_size=400), fmt=formats)
def test_any_byte_string_gives_a_scenario_or_a_scenario_file_error(data: bytes, fmt: str) -> None:
    scenario_or_clear_error(data, fmt)


@CI
@given(text=st.text(alphabet=ANY_CODE_POINT, max_size=300), fmt=formats)
def test_any_text_gives_a_scenario_or_a_scenario_file_error(text: str, fmt: str) -> None:
    scenario_or_clear_error(text, fmt)


TOML_TOKENS = [
    'name = "n"\n',
    "directories = [",
    '"/p"',
    "]\n",
    "[[runs]]\n",
    "[[actions]]\n",
    "[expect]\n",
    '[instance_faults."/p"]\n',
    'id = "r1"\n',
    'session = "s1"\n',
    'directory = "/p"\n',
    "steps = [",
    '{ kind = "model" }',
    '{ kind = "tool_input", tool = "bash" }',
    '{ kind = "tool_exec", tool = "bash", at = "prepared" }',
    '{ kind = "permission", gate = "g" }',
    '{ kind = "form", ms = 5 }',
    ", ",
    'when = "begin"\n',
    'when = "r1.finished"\n',
    'do = "dispose_all"\n',
    'do = "open_gate"\n',
    'gate = "g"\n',
    'mode = "maintenance"\n',
    "r1 = { outcome = ",
    '"completed" }\n',
    "s1 = { status = ",
    "grace_ms = -1\n",
    "1979-05-27T07:32:00Z",
    "nan",
    "true",
    "{",
    "}",
    "=",
    "\n",
    '"',
    ".",
]


@CI
@given(tokens=st.lists(st.sampled_from(TOML_TOKENS), max_size=40))
def test_any_soup_of_scenario_toml_tokens_gives_a_scenario_or_a_scenario_file_error(
    tokens: list[str],
) -> None:
    scenario_or_clear_error("".join(tokens), "toml")


# ----------------------------------------------------------------------------------------------------
# The scenario loader: mutations of valid documents


@settings(CI, max_examples=pick(smoke=200, deep=1000))
@given(mutated=mutated_scenarios(), fmt=formats)
def test_any_mutation_of_a_library_scenario_gives_a_scenario_or_a_scenario_file_error(
    mutated: tuple[str, dict[str, Any]], fmt: str
) -> None:
    _, document = mutated
    scenario_or_clear_error(render(document, fmt), fmt, file=f"mutated.{fmt}")


@settings(CI, max_examples=200)
@given(mutated=mutated_scenarios(max_mutations=1))
def test_the_same_mutation_gives_the_same_answer_as_toml_and_as_json(
    mutated: tuple[str, dict[str, Any]],
) -> None:
    _, document = mutated
    assume(all(value is not None for _, value in walk(document)))  # TOML cannot say null
    # JSON has no dates, and says no inf or nan
    assume(not any(isinstance(value, dt.date | dt.time | float) for _, value in walk(document)))
    as_toml = scenario_or_clear_error(to_toml(document), "toml", file="same")
    as_json = scenario_or_clear_error(to_json(document), "json", file="same")
    if isinstance(as_toml, ScenarioFileError):
        assert isinstance(as_json, ScenarioFileError)
        assert (as_json.key, as_json.message) == (as_toml.key, as_toml.message)
    else:
        assert as_json == as_toml


@CI
@given(seed=seeds, key=UNKNOWN_KEYS, value=of_another_type(None), fmt=formats)
def test_an_unknown_top_level_key_is_refused_naming_it(seed: str, key: str, value: Any, fmt: str) -> None:
    document = copy.deepcopy(SEEDS[seed])
    assume(key not in {"name", "description", "directories", "runs", "actions", "expect", "instance_faults"})
    assume(fmt == "toml" or not (isinstance(value, float) and not math.isfinite(value)))  # JSON has no inf
    document[key] = value
    error = refused(render(document, fmt), fmt)
    assert error.key == dotted(key), str(error)
    assert error.message.startswith("not a key of the top level")


@CI
@given(seed=seeds, data=st.data(), key=UNKNOWN_KEYS, fmt=formats)
def test_an_unknown_key_in_a_run_a_step_or_an_action_is_refused_naming_it(
    seed: str, data: st.DataObject, key: str, fmt: str
) -> None:
    document = copy.deepcopy(SEEDS[seed])
    tables: list[tuple[str, dict[str, Any]]] = []
    for i, run in enumerate(document.get("runs", [])):
        tables.append((f"runs[{i}]", run))
        tables += [(f"runs[{i}].steps[{j}]", step) for j, step in enumerate(run["steps"])]
    tables += [(f"actions[{i}]", action) for i, action in enumerate(document.get("actions", []))]
    where, table = data.draw(st.sampled_from(tables))
    # Every key the format knows there, extensions included (a random "title" or "retry" is not unknown).
    known = {*_RunModel.model_fields, *_StepModel.model_fields, *_ActionModel.model_fields}
    assume(key not in known)
    table[key] = 1
    error = refused(render(document, fmt), fmt)
    assert error.key == f"{where}.{dotted(key)}", str(error)
    assert error.message.startswith("not a key of ")


REQUIRED_KEYS = {
    "name": (),
    "id": ("runs", "[]"),
    "session": ("runs", "[]"),
    "directory": ("runs", "[]"),
    "steps": ("runs", "[]"),
    "kind": ("runs", "[]", "steps", "[]"),
    "when": ("actions", "[]"),
    "do": ("actions", "[]"),
}


@CI
@given(seed=seeds, data=st.data(), fmt=formats)
def test_a_missing_required_key_is_refused_naming_it(seed: str, data: st.DataObject, fmt: str) -> None:
    document = copy.deepcopy(SEEDS[seed])
    candidates = [
        path
        for path, _ in walk(document)
        if isinstance(path[-1], str)
        and path[-1] in REQUIRED_KEYS
        and tuple("[]" if isinstance(p, int) else p for p in path[:-1]) == REQUIRED_KEYS[path[-1]]
    ]
    candidates.append(("name",))
    path = data.draw(st.sampled_from(candidates))
    del at(document, path[:-1])[path[-1]]
    error = refused(render(document, fmt), fmt)
    assert error.key == dotted(*path), str(error)
    assert error.message == "this key is required"


STRING_ONLY = ("name", "id", "session", "directory", "when", "do", "kind", "gate", "tool")


@CI
@given(
    seed=seeds,
    data=st.data(),
    value=st.one_of(st.booleans(), st.integers(), st.lists(st.text(max_size=3), max_size=2), st.dates()),
)
def test_a_value_of_the_wrong_type_is_refused_naming_its_key(
    seed: str, data: st.DataObject, value: Any
) -> None:
    document = copy.deepcopy(SEEDS[seed])
    paths = [
        path
        for path, old in walk(document)
        if isinstance(old, str) and path[-1] in STRING_ONLY and str(path[0]) != "expect"
    ]
    path = data.draw(st.sampled_from(paths))
    at(document, path[:-1])[path[-1]] = value
    error = refused(to_toml(document), "toml")
    assert error.key == dotted(*path), str(error)


@CI
@given(seed=seeds.filter(lambda s: len(SEEDS[s].get("runs", [])) >= 2), data=st.data(), fmt=formats)
def test_two_runs_with_one_id_are_refused(seed: str, data: st.DataObject, fmt: str) -> None:
    document = copy.deepcopy(SEEDS[seed])
    first, second = data.draw(
        st.lists(st.sampled_from(range(len(document["runs"]))), min_size=2, max_size=2, unique=True)
    )
    document["runs"][second]["id"] = document["runs"][first]["id"]
    error = refused(render(document, fmt), fmt)
    assert error.key == f"runs[{max(first, second)}].id", str(error)
    assert "unique" in error.message


@CI
@given(seed=seeds.filter(lambda s: bool(SEEDS[s].get("actions"))), data=st.data(), fmt=formats)
def test_a_when_that_names_nothing_is_refused_naming_the_when(
    seed: str, data: st.DataObject, fmt: str
) -> None:
    document = copy.deepcopy(SEEDS[seed])
    index = data.draw(st.sampled_from(range(len(document["actions"]))))
    when = data.draw(
        st.sampled_from(["", ".", "nobody.started", "nobody.step.started", "a.b.c.d", "begin.x", "Begin"])
        | st.text(alphabet=string.ascii_letters + ".", min_size=1, max_size=10)
    )
    names = {str(v) for _, v in walk(document) if isinstance(v, str)}
    assume(when != "begin" and when.split(".")[0] not in names and not when.startswith("action-"))
    document["actions"][index]["when"] = when
    error = refused(render(document, fmt), fmt)
    assert error.key == f"actions[{index}].when", str(error)


@CI
@given(seed=seeds, data=st.data(), fmt=formats)
def test_a_run_with_no_steps_is_refused(seed: str, data: st.DataObject, fmt: str) -> None:
    document = copy.deepcopy(SEEDS[seed])
    index = data.draw(st.sampled_from(range(len(document["runs"]))))
    document["runs"][index]["steps"] = []
    error = refused(render(document, fmt), fmt)
    assert (error.key, error.message) == (f"runs[{index}].steps", "must not be empty")


@CI
@given(seed=seeds, fmt=formats)
def test_a_step_kind_out_of_place_gives_a_scenario_or_a_scenario_file_error(seed: str, fmt: str) -> None:
    document = copy.deepcopy(SEEDS[seed])
    for run in document["runs"]:
        run["steps"].reverse()  # a tool_exec before its tool_input, a permission before its tool part...
    outcome = scenario_or_clear_error(render(document, fmt), fmt)
    reversible = all(all(step["kind"] == "model" for step in run["steps"]) for run in document["runs"])
    if not reversible:
        assert isinstance(outcome, ScenarioFileError)
        assert outcome.key is not None and outcome.key.startswith("runs[")


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("toml", 'name = "deep"\nexpect = ' + "{ a = " * 400 + "1" + " }" * 400 + "\n"),
        ("toml", 'name = "deep"\ndirectories = ' + "[" * 600 + "]" * 600 + "\n"),
        ("json", '{"name": "deep", "directories": ' + "[" * 5000 + "]" * 5000 + "}"),
    ],
    ids=["toml-tables", "toml-arrays", "json-arrays"],
)
def test_a_deeply_nested_document_is_refused_with_a_scenario_file_error(fmt: str, text: str) -> None:
    refused(text, fmt)


def test_the_cli_exits_2_on_a_deeply_nested_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "deep.toml"
    path.write_text('name = "deep"\nexpect = ' + "{ a = " * 400 + "1" + " }" * 400 + "\n")
    assert main(["scenario", str(path), "--json"]) == 2


RUN_WITH_STEP_ID = """\
name = "n"
[[runs]]
id = "r1"
session = "s1"
directory = "/p"
steps = [{ kind = "model", id = "a\\nb" }]
"""


@pytest.mark.parametrize(
    "text",
    [
        RUN_WITH_STEP_ID + '[[actions]]\nwhen = "r1.nosuch.started"\ndo = "cancel"\nrun = "r1"\n',
        RUN_WITH_STEP_ID
        + '[[actions]]\nid = "x\\ny"\nwhen = "begin"\ndo = "cancel"\nrun = "r1"\n'
        + '[[actions]]\nwhen = "x\\ny.exploded"\ndo = "cancel"\nrun = "r1"\n',
    ],
    ids=["steps-of-a-run", "events-of-an-action"],
)
def test_an_error_message_stays_on_one_line_when_an_id_holds_a_newline(text: str) -> None:
    refused(text, "toml")


# ----------------------------------------------------------------------------------------------------
# The protocol decoders

decoders = st.sampled_from([decode_request, decode_event])
wire_formats = st.sampled_from(["json", "msgpack"])
# An ask's ``data`` is any JSON object (typed ``dict[str, Any]``): hypothesis needs to be told so.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
st.register_type_strategy(
    AskPayload,
    st.builds(
        AskPayload,
        questions=st.lists(st.from_type(Question), max_size=2).map(tuple),
        data=st.dictionaries(st.text(max_size=8), json_values, max_size=3),
    ),
)
messages = st.one_of(st.from_type(Request), st.from_type(Event))  # type: ignore[arg-type]


JSON_TYPES = (bool, int, float, str, list, dict, type(None))


def wire(message: Any, fmt: str) -> bytes:
    """The message as the wire carries it; unencodable examples (ints over 64 bits in msgpack) are skipped."""
    try:
        return msgspec.json.encode(message) if fmt == "json" else msgspec.msgpack.encode(message)
    except OverflowError:
        assume(False)
        raise


@CI
@given(decode=decoders, data=st.binary(max_size=300), fmt=wire_formats)
def test_any_byte_string_gives_a_message_or_a_protocol_decode_error(
    decode: Callable[..., Any], data: bytes, fmt: str
) -> None:
    message_or_decode_error(decode, data, fmt)


@CI
@given(decode=decoders, text=st.text(max_size=200))
def test_any_json_text_gives_a_message_or_a_protocol_decode_error(
    decode: Callable[..., Any], text: str
) -> None:
    message_or_decode_error(decode, text, "json")


@CI
@given(message=messages, fmt=wire_formats)
def test_every_request_and_event_decodes_back_to_itself(message: Any, fmt: str) -> None:
    data = wire(message, fmt)
    decode = decode_request if isinstance(message, REQUEST_TYPES) else decode_event
    assert decode(data, fmt) == message
    other = decode_event if decode is decode_request else decode_request
    assert isinstance(message_or_decode_error(other, data, fmt), ProtocolDecodeError)


@st.composite
def mutated_messages(draw: Any) -> tuple[type, dict[str, Any], str]:
    """A valid message as a dict, then one mutation; returns its class, the dict and what was done."""
    message = draw(messages)
    document: dict[str, Any] = msgspec.to_builtins(message)
    document["type"] = type(message).__struct_config__.tag
    keys = sorted(document)
    what = draw(
        st.sampled_from(["delete", "unknown key", "other type", "other tag", "bad tag", "truncate", "nest"])
    )
    if what == "delete":
        key = draw(st.sampled_from(keys))
        del document[key]
        what = f"delete {key}"
    elif what == "unknown key":
        document[draw(UNKNOWN_KEYS)] = draw(st.one_of(*(VALUES_BY_TYPE[kind] for kind in JSON_TYPES)))
    elif what == "other type":
        key = draw(st.sampled_from(keys))
        old = document[key]
        document[key] = draw(
            st.one_of(*(VALUES_BY_TYPE[kind] for kind in JSON_TYPES if type(old) is not kind))
        )
    elif what == "other tag":
        tags = [cls.__struct_config__.tag for cls in (*REQUEST_TYPES, *EVENT_TYPES)]
        document["type"] = draw(st.sampled_from(tags))
    elif what == "bad tag":
        document["type"] = draw(st.sampled_from(["", "Start_Run", "run.Started", "close ", 7, None]))
    elif what == "nest":
        document = {"type": "batch", "messages": [document]} if draw(st.booleans()) else [document]  # type: ignore[assignment]
    return type(message), document, what


@settings(CI, max_examples=pick(smoke=150, deep=600))
@given(mutated=mutated_messages(), fmt=wire_formats, truncate=st.integers(0, 3))
def test_any_mutation_of_a_valid_message_gives_a_message_or_a_protocol_decode_error(
    mutated: tuple[type, Any, str], fmt: str, truncate: int
) -> None:
    cls, document, what = mutated
    data = json.dumps(document).encode() if fmt == "json" else wire(document, fmt)
    if truncate:
        data = data[: max(0, len(data) - truncate)]
    decode = decode_request if cls in REQUEST_TYPES else decode_event
    outcome = message_or_decode_error(decode, data, fmt)
    if truncate:
        assert isinstance(outcome, ProtocolDecodeError)
    if what.startswith("delete "):
        field = what.removeprefix("delete ")
        required = field == "type" or any(f.required for f in msgspec.structs.fields(cls) if f.name == field)
        if required:
            assert isinstance(outcome, ProtocolDecodeError)
            assert truncate or f"`{field}`" in str(outcome)
    if what in ("bad tag", "nest"):
        assert isinstance(outcome, ProtocolDecodeError)


@pytest.mark.parametrize("decode", [decode_request, decode_event])
def test_json_text_with_a_lone_surrogate_is_refused_with_a_protocol_decode_error(
    decode: Callable[..., Any],
) -> None:
    text = '{"type": "start_run", "run": "\ud800", "session": "s", "directory": "d"}'  # e.g. surrogateescape
    assert isinstance(message_or_decode_error(decode, text, "json"), ProtocolDecodeError)


@pytest.mark.parametrize("decode", [decode_request, decode_event])
def test_text_given_to_the_msgpack_decoder_is_refused_with_a_protocol_decode_error(
    decode: Callable[..., Any],
) -> None:
    assert isinstance(
        message_or_decode_error(decode, '{"type": "cancel", "run": "r1"}', "msgpack"), ProtocolDecodeError
    )


@CI
@given(decode=decoders, text=st.text(alphabet=ANY_CODE_POINT, max_size=100), fmt=wire_formats)
def test_any_text_with_surrogates_gives_a_message_or_a_protocol_decode_error(
    decode: Callable[..., Any], text: str, fmt: str
) -> None:
    message_or_decode_error(decode, text, fmt)


# ----------------------------------------------------------------------------------------------------
# The CLI

TINY = """\
name = "tiny"
directories = ["/p"]

[[runs]]
id = "r1"
session = "s1"
directory = "/p"
steps = [{ kind = "model" }]
"""
INVALID = TINY + 'colour = "red"\n'
"""An unknown key in the run: ``runs[0].colour``."""


def test_the_cli_exits_2_on_an_invalid_file_naming_the_file_and_the_offending_key(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(INVALID)

    assert main(["scenario", str(path)]) == 2

    out, err = capsys.readouterr()
    assert str(path) in err and "runs[0].colour" in err
    assert "INVALID" in out and str(path) in out
    assert "Traceback" not in err


def test_the_cli_with_json_prints_the_error_of_an_invalid_file_as_json(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(INVALID)

    assert main(["scenario", str(path), "--json"]) == 2

    out, err = capsys.readouterr()
    report = json.loads(out)
    assert str(path) in report["error"] and "runs[0].colour" in report["error"]
    assert str(path) in err and "runs[0].colour" in err


@pytest.mark.parametrize(
    ("name", "content", "key"),
    [
        ("syntax.toml", 'name = "x"\n[[runs]\n', None),
        ("binary.toml", b"\xff\xfe\x00name", None),
        ("syntax.json", '{"name": "x",}', None),
        ("array.json", "[1, 2]", None),
        ("null.json", '{"name": "x", "description": null}', "description"),
        ("wrong-type.toml", 'name = "x"\ndirectories = "/p"\n', "directories"),
        ("kind.toml", TINY.replace('"model"', '"shell"'), "runs[0].steps[0].kind"),
        ("dup.toml", TINY + TINY.split("\n\n", 1)[1], "runs[1].id"),
        (
            "when.toml",
            TINY + '[[actions]]\nwhen = "r9.started"\ndo = "cancel"\nrun = "r1"\n',
            "actions[0].when",
        ),
        ("suffix.yaml", "name: x\n", None),
    ],
)
def test_the_cli_exits_2_with_a_json_error_on_every_kind_of_invalid_file(
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: str | bytes,
    key: str | None,
) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())

    assert main(["scenario", str(path), "--json"]) == 2

    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert error.startswith(f"{path}: ")
    if key is not None:
        assert error.startswith(f"{path}: {key}: ")
    assert error in err
    assert "Traceback" not in err


def test_a_folder_with_one_invalid_file_exits_2_and_lists_the_invalid_entry(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "1-good.toml").write_text(TINY)
    (tmp_path / "2-bad.toml").write_text(INVALID)
    (tmp_path / "notes.txt").write_text("not a scenario")

    assert main(["scenario", str(tmp_path), "--json", "--timeout", "5"]) == 2

    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["passed"] is False
    good, bad = report["scenarios"]
    assert good["passed"] is True and good["scenario"] == "tiny"
    assert bad == {"file": str(tmp_path / "2-bad.toml"), "error": bad["error"]}
    assert "runs[0].colour" in bad["error"]
    assert str(tmp_path / "2-bad.toml") in err and "runs[0].colour" in err


def test_a_folder_with_one_invalid_file_exits_2_in_the_readable_output_too(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.json").write_text('{"name": "x", "runs": 3}')
    (tmp_path / "b.toml").write_text(TINY)

    assert main(["scenario", str(tmp_path), "--timeout", "5"]) == 2

    out, err = capsys.readouterr()
    assert f"INVALID  {tmp_path / 'a.json'}" in out
    assert "1 passed, 1 failed" in out
    assert f"{tmp_path / 'a.json'}: runs: " in err


@settings(CI, max_examples=40)
@given(mutated=mutated_scenarios(), fmt=formats)
def test_the_cli_exits_2_with_a_json_error_on_any_mutated_scenario_it_refuses(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    mutated: tuple[str, dict[str, Any]],
    fmt: str,
) -> None:
    """Only refused documents go to the CLI here: valid ones would be played (and may wait on gates)."""
    _, document = mutated
    text = render(document, fmt)
    assume(isinstance(scenario_or_clear_error(text, fmt), ScenarioFileError))
    path = tmp_path_factory.mktemp("cli") / f"mutated.{fmt}"
    path.write_text(text, encoding="utf-8")
    capsys.readouterr()

    assert main(["scenario", str(path), "--json"]) == 2

    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert error.startswith(f"{path}: ")
    assert error in err
