"""One wire shape with a schema: ``run-supervisor schema`` describes every request, answer and
event; everything the scenario library makes the supervisor send validates against it; and every
field of what the supervisor sends is always present, ``null`` or ``[]`` when empty."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest

from run_supervisor.actors import Supervisor
from run_supervisor.actors._cli import main
from run_supervisor.actors._subscription import Publisher
from run_supervisor.actors.scenarios import load_scenario, play, scenario_files
from run_supervisor.protocol import Event, Request, decode_request, encode, wire_schema
from run_supervisor.protocol._schema import OUTPUT_TYPES

LIBRARY = Path(__file__).resolve().parents[1] / "docs" / "scenarios"
SCHEMA = wire_schema()


def validator(entry: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{entry}"})


def struct_name(message: msgspec.Struct) -> str:
    return type(message).__name__


def test_run_supervisor_schema_prints_a_json_schema_naming_every_request_answer_and_event(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(printed)
    assert printed == json.loads(json.dumps(SCHEMA))
    defs = printed["$defs"]
    for union in (Request, Event):
        assert {t.__name__ for t in union.__args__} <= set(defs)
    assert {t.__name__ for t in OUTPUT_TYPES} <= set(defs)
    assert [entry["$ref"].rsplit("/", 1)[-1] for entry in printed["anyOf"]][:3] == [
        "Request",
        "Answer",
        "Event",
    ]


@pytest.fixture
def sent() -> Iterator[list[msgspec.Struct]]:
    """Every event published and every answer given, by every supervisor, while the test runs."""
    seen: list[msgspec.Struct] = []
    lock = threading.Lock()
    publish, deliver, submit = Publisher.publish, Publisher.deliver, Supervisor.submit

    def recording_publish(self: Publisher, event: Event) -> None:
        with lock:
            seen.append(event)
        publish(self, event)

    def recording_deliver(self: Publisher, events: list[Event], calls: list[Any]) -> None:
        # The supervisor hands a publisher a batch at a time; a plain one offers it whole, not per event.
        with lock:
            seen.extend(events)
        deliver(self, events, calls)

    def recording_submit(self: Supervisor, request: Request, **kwargs: Any) -> Future[Any]:
        future = submit(self, request, **kwargs)

        def record(done: Future[Any]) -> None:
            with lock:
                seen.append(done.result())

        future.add_done_callback(record)
        return future

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Publisher, "publish", recording_publish)
        patch.setattr(Publisher, "deliver", recording_deliver)
        patch.setattr(Supervisor, "submit", recording_submit)
        yield seen


def test_every_event_and_answer_the_scenario_library_emits_validates_against_the_schema(
    sent: list[msgspec.Struct],
) -> None:
    for path in scenario_files(LIBRARY):
        assert play(load_scenario(path), timeout=10).passed, path.name
    kinds = {struct_name(message) for message in sent}
    assert {
        "RunFinished",
        "LifecycleDeferred",
        "LifecycleCompleted",
        "CloseOutcome",
        "RequestOutcome",
    } <= kinds
    events, answers = validator("Event"), validator("Answer")
    for message in sent:
        wire = json.loads(encode(message))
        check = events if isinstance(message, Event.__args__) else answers
        errors = [error.message for error in check.iter_errors(wire)]
        assert errors == [], f"{struct_name(message)} {wire}"
        properties = SCHEMA["$defs"][struct_name(message)]["properties"]
        assert set(wire) == set(properties), f"{struct_name(message)}: every field, nothing else"


def _empty_value(info: msgspec.inspect.Type) -> Any:
    """The value of a field when it says nothing: null, [] or a placeholder of its type."""
    if isinstance(info, msgspec.inspect.UnionType):
        if any(isinstance(t, msgspec.inspect.NoneType) for t in info.types):
            return None
        return _empty_value(info.types[0])
    if isinstance(info, msgspec.inspect.VarTupleType | msgspec.inspect.ListType):
        return []
    if isinstance(info, msgspec.inspect.StructType):
        return {f.encode_name: _empty_value(f.type) for f in info.fields if f.required}
    if isinstance(info, msgspec.inspect.DictType):
        return {}
    if isinstance(info, msgspec.inspect.EnumType):
        return next(iter(info.cls)).value
    if isinstance(info, msgspec.inspect.StructType):  # a nested struct (an ask's payload): all defaults
        return msgspec.to_builtins(info.cls())
    placeholders: dict[type[msgspec.inspect.Type], Any] = {
        msgspec.inspect.StrType: "x",
        msgspec.inspect.IntType: 0,
        msgspec.inspect.BoolType: False,
    }
    return placeholders[type(info)]


@pytest.mark.parametrize("kind", OUTPUT_TYPES, ids=lambda t: t.__name__)
def test_every_field_of_every_event_and_answer_type_is_on_the_wire_null_or_empty_when_empty(
    kind: type[msgspec.Struct],
) -> None:
    info = msgspec.inspect.type_info(kind)
    assert isinstance(info, msgspec.inspect.StructType)
    assert not kind.__struct_config__.omit_defaults  # a default value is still sent
    required = {f.encode_name: _empty_value(f.type) for f in info.fields if f.required}
    if info.tag is not None:
        required[info.tag_field or "type"] = info.tag
    message = msgspec.convert(required, kind)  # only what has no default: the rest stays empty
    wire = json.loads(encode(message))
    assert set(wire) == {f.encode_name for f in info.fields} | ({info.tag_field} if info.tag_field else set())
    for field in info.fields:
        if field.required:
            continue
        default = field.default if field.default is not msgspec.NODEFAULT else field.default_factory()
        assert default is not msgspec.UNSET, f"{kind.__name__}.{field.name} may vanish from the wire"
        if default is None or default == ():
            assert wire[field.encode_name] in (None, []), f"{kind.__name__}.{field.name}"


def test_a_request_may_leave_out_every_field_that_has_a_default() -> None:
    requests = validator("Request")
    for wire in (
        {"type": "start_run", "run_id": "r1", "session": "s", "directory": "/w/a"},
        {"type": "cancel", "run_id": "r1"},
        {"type": "close", "do": "dispose_all", "mode": "maintenance", "origin": "settings"},
        {"type": "shutdown"},
        {"type": "dismiss_form", "run_id": "r1"},
    ):
        assert list(requests.iter_errors(wire)) == []
        decode_request(json.dumps(wire))  # and the library accepts what the schema accepts
    assert list(requests.iter_errors({"type": "close", "do": "dispose_all"})) != []
