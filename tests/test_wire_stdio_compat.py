"""Seed 002's operations and events over stdio too, in upstream's shapes (as HTTP's compatible routes):
``global.dispose``, ``instance.dispose`` and ``instance.reload`` answer ``{status, lifecycleActionID,
affectedDirectoryKeys}``, and an event those clients consume carries its ``{type, properties}`` shape as
the line's ``compat`` (``global.disposed`` once a dispose_all completes, ``server.instance.disposed``)."""

from __future__ import annotations

from typing import Any

import jsonschema
from test_stdio import Sidecar, session

from run_supervisor.actors.hosts._schema import with_hosts
from run_supervisor.protocol import wire_schema

SCHEMA = with_hosts(wire_schema())
_OUTPUT = {**SCHEMA, "$ref": "#/$defs/StdioOutput"}
jsonschema.Draft202012Validator.check_schema(_OUTPUT)
_VALIDATOR = jsonschema.Draft202012Validator(_OUTPUT)
"""Checked once: ``jsonschema.validate`` checks the whole schema again on every call (seconds on a
loaded machine, inside the session's bound)."""


def _valid(line: dict[str, Any]) -> None:
    _VALIDATOR.validate(line)


def test_seed_002_operations_and_events_over_stdio_in_upstreams_shapes() -> None:
    async def scenario(car: Sidecar) -> None:
        await car.event("instance.started", directory="/p/a")
        await car.send({"id": 1, "type": "start_run", "run_id": "r1", "session": "s1", "directory": "/p/a"})
        assert (await car.answer(1))["answer"]["result"] == "ok"
        await car.send({"id": 2, "type": "global.dispose", "clientActionID": "client-1"})
        deferred = await car.answer(2)
        assert deferred["status"] == 200
        assert deferred["answer"]["status"] == "deferred" and deferred["answer"]["affectedDirectoryKeys"] == [
            "/p/a"
        ]
        action = deferred["answer"]["lifecycleActionID"]
        await car.send({"id": 3, "type": "report", "run_id": "r1", "report": {"type": "end"}})
        assert (await car.answer(3))["status"] == 200

        def disposed(line: dict[str, Any]) -> bool:
            return line["type"] == "event" and (line.get("compat") or {}).get("type") == "global.disposed"

        done = await car.until(disposed)
        assert done["compat"]["properties"] == {"lifecycleActionID": action, "clientActionID": "client-1"}
        assert done["event"]["type"] == "lifecycle.completed" and done["event"]["action_id"] == action

        await car.send({"id": 4, "type": "instance.reload", "directory": "/p/b"})  # never loaded: at once
        reloaded = (await car.answer(4))["answer"]
        assert reloaded["status"] == "completed" and reloaded["affectedDirectoryKeys"] == ["/p/b"]
        await car.send({"id": 5, "type": "instance.dispose"})
        missing = await car.answer(5)
        assert (missing["type"], missing["status"], missing["code"]) == ("error", 422, "invalid_request")
        await car.send({"id": 6, "type": "global.dispose", "directory": "/p/a"})  # it covers every one
        assert "unknown field `directory`" in (await car.answer(6))["error"]
        await car.send({"id": 7, "type": "instance.dispose", "directory": "/p/a", "mode": "at_once"})
        assert (await car.answer(7))["status"] == 422
        await car.send({"id": 8, "type": "shutdown", "grace_ms": 100})
        await car.answer(8)
        while await car.read() is not None:
            pass
        closed = [
            line for line in car.lines if (line.get("compat") or {}).get("type") == "server.instance.disposed"
        ]
        assert {line["compat"]["properties"]["directory"] for line in closed} >= {"/p/a"}
        plain = [line for line in car.lines if line["type"] == "event" and "compat" not in line]
        assert plain, "an event no seed 002 client knows has no compat field"
        for line in car.lines:
            _valid(line)

    assert session(scenario, "--directory", "/p/a") == 0


def test_a_query_of_an_unknown_run_or_session_over_stdio_is_a_404_as_over_http() -> None:
    async def scenario(car: Sidecar) -> None:
        await car.send({"id": 1, "type": "query", "what": "run", "run_id": "nope"})
        run = await car.answer(1)
        assert (run["type"], run["status"], run["code"]) == ("error", 404, "unknown_run"), run
        await car.send({"id": 2, "type": "query", "what": "session", "session": "nobody"})
        session = await car.answer(2)
        assert (session["type"], session["status"], session["code"]) == ("error", 404, "not_found"), session
        await car.send({"id": 3, "type": "start_run", "run_id": "r1", "session": "s1", "directory": "/p/a"})
        await car.answer(3)
        await car.send({"id": 4, "type": "query", "what": "run", "run_id": "r1"})
        assert (await car.answer(4))["answer"]["run_id"] == "r1"
        await car.send({"id": 5, "type": "shutdown", "grace_ms": 100})
        while await car.read() is not None:
            pass
        for line in car.lines:
            _valid(line)

    assert session(scenario) == 0
