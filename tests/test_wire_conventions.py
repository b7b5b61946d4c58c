"""One convention on the HTTP host, stated in its document: native routes and fields are snake_case and
answer ``result``; the seed-compatible routes keep upstream's camelCase and ``status``; a request names
a thing as its event does (``approved``); a created run is ``201``."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from wire_support import Served, of_type, sse
from wire_support import run_served as run

from run_supervisor.actors._cli import synopsis
from run_supervisor.actors.hosts._openapi import OPERATIONS, document

WIRE_MD = Path(__file__).resolve().parents[1] / "docs" / "wire.md"
SNAKE = re.compile(r"[a-z][a-z0-9_]*")
DOC = document()


def _properties(schema: Any) -> set[str]:
    """Property names of a schema and of every schema it refers to (through components)."""
    seen: set[str] = set()
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            target = node.get("$ref")
            if isinstance(target, str):
                name = target.rsplit("/", 1)[-1]
                if name not in seen:
                    seen.add(name)
                    walk(DOC["components"]["schemas"][name])
            names.update(node.get("properties", {}))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)
    return names


def test_native_routes_are_snake_case_and_answer_result_and_compatible_ones_keep_upstreams_shapes() -> None:
    for op in OPERATIONS:
        operation = DOC["paths"][op.path][op.method.lower()]
        answered = {
            name
            for status, response in operation["responses"].items()
            for name in _properties(response.get("content", {}).get("application/json", {}).get("schema", {}))
            if status.startswith("2")
        }
        segments = [part for part in op.path.split("/") if part and not part.startswith("{")]
        if "compatible" in operation["tags"]:
            assert op.path in ("/global/dispose", "/instance/dispose", "/instance/reload", "/event"), op.path
            if answered:
                assert "status" in answered and "lifecycleActionID" in answered, (op.path, answered)
            continue
        assert all(SNAKE.fullmatch(part.removesuffix(".json")) for part in segments), op.path
        if "requestBody" in operation:
            sent = _properties(operation["requestBody"]["content"]["application/json"]["schema"])
            assert all(SNAKE.fullmatch(name) for name in sent), (op.path, sent)
        assert all(SNAKE.fullmatch(name) for name in answered), (op.path, answered)
        if op.method != "GET" and answered and op.media == "application/json":
            assert "result" in answered, (op.method, op.path, answered)


def test_a_permission_reply_says_approved_as_its_event_does_and_the_old_approve_still_works() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            started = await client.post("/runs", json={"run_id": "r1", "session": "s1", "directory": "/w/a"})
            assert started.status_code == 201, started.text  # created
            await events.until(of_type("run.started", run_id="r1"))
            asked = (await client.post("/runs/r1/reports", json={"type": "ask", "title": "rm?"})).json()
            reply = await client.post(f"/asks/{asked['ask_id']}/permission", json={"approved": True})
            assert reply.status_code == 200, reply.text
            answer = await events.until(of_type("external.answer", run_id="r1"))
            assert answer.data["approved"] is True  # the request's word is the event's
            again = (await client.post("/runs/r1/reports", json={"type": "ask", "title": "again?"})).json()
            both = await client.post(
                f"/asks/{again['ask_id']}/permission", json={"approved": True, "approve": True}
            )
            assert both.status_code == 422 and "not both" in both.json()["error"]
            old = await client.post("/runs/r1/permission", json={"approve": False, "message": "no"})
            assert old.status_code == 200, old.text  # the deprecated spelling
            answer = await events.until(of_type("external.answer", ask_id=again["ask_id"]))
            assert (answer.data["approved"], answer.data["message"]) == (False, "no")

    run(scenario)


def test_the_document_names_approved_on_the_reply_routes_and_marks_approve_deprecated() -> None:
    body = DOC["components"]["schemas"]["ReplyPermissionBody"]
    assert body["properties"]["approve"]["deprecated"] is True
    assert body["oneOf"] == [{"required": ["approved"]}, {"required": ["approve"]}]
    assert DOC["paths"]["/runs"]["post"]["responses"].keys() >= {"201"}
    assert "200" not in DOC["paths"]["/runs"]["post"]["responses"]


@pytest.mark.parametrize("command", ["serve", "stdio"])
def test_the_synopses_in_wire_md_are_the_ones_the_cli_parser_gives(command: str) -> None:
    text = WIRE_MD.read_text(encoding="utf-8")
    start = text.index(f"```bash\nrun-supervisor {command} ") + len("```bash\n")
    shown = text[start : text.index("\n```", start)]
    assert shown == synopsis(command), f"docs/wire.md's {command} synopsis: paste synopsis({command!r})"
    for option in ("--journal", "--journal-sync", "--stall-after-ms", "--lease-ms"):
        assert option in shown


def test_a_head_of_an_event_stream_answers_its_head_at_once_instead_of_streaming() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            for path in ("/events", "/event", "/events?after=0"):
                head = await asyncio.wait_for(client.head(path), 5)
                assert head.status_code == 200 and head.headers["content-type"].startswith(
                    "text/event-stream"
                )
            assert srv.host.hub.listeners == 0  # nothing listens for a HEAD

    run(scenario)
