"""The OpenAPI document of the HTTP host is what the server does: its routes, its bodies, its answers.

Every route of the app is in the document and every operation of the document is a route; the
committed docs/openapi.json is the generated document; and a session that calls every route (and reads
both event streams) sends only bodies the document accepts and gets only answers -- status, reject code
and body -- the document describes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import jsonschema
from wire_support import Served, of_type, served, sse
from wire_support import run_served as run

from run_supervisor.actors.hosts._openapi import OPERATIONS, document, document_json
from run_supervisor.protocol import RejectCode

ROOT = Path(__file__).resolve().parents[1]
DOC = document()


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    root = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": DOC["components"],
        **schema,
    }
    return jsonschema.Draft202012Validator(root)


def _errors(schema: dict[str, Any], value: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"[:300]
        for e in _validator(schema).iter_errors(value)
    ]


def _component(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


class Checked:
    """An httpx client whose every exchange is checked against the document."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.seen: set[tuple[str, str]] = set()
        self.codes: set[str] = set()

    async def call(
        self,
        method: str,
        template: str,
        body: Any = None,
        *,
        path: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
        valid: bool = True,
    ) -> httpx.Response:
        """``valid=False``: a body the document refuses too (the server must refuse it: 422)."""
        operation = DOC["paths"][template][method.lower()]
        url = template.format(**(path or {}))
        if body is not None:
            schema = operation["requestBody"]["content"]["application/json"]["schema"]
            assert (_errors(schema, body) == []) is valid, (method, template, body)
        kwargs: dict[str, Any] = {"params": params, "headers": headers}
        if raw is not None:
            kwargs["content"] = raw
        elif body is not None:
            kwargs["json"] = body
        answer = await self.client.request(method, url, **kwargs)
        check_answer(operation, method, template, answer)
        if not valid:
            assert answer.status_code == 422, (method, template, body, answer.text)
        self.seen.add((method, template))
        if (
            answer.headers.get("content-type", "").startswith("application/json")
            and answer.status_code >= 400
        ):
            self.codes.add(answer.json()["code"])
        return answer


def check_answer(operation: dict[str, Any], method: str, template: str, answer: httpx.Response) -> None:
    where = f"{method} {template} -> {answer.status_code} {answer.text[:300]}"
    documented = operation["responses"].get(str(answer.status_code))
    assert documented is not None, f"undocumented status: {where}"
    (media, content), *_ = documented["content"].items()
    assert answer.headers["content-type"].split(";")[0] == media, where
    if media == "application/json":
        body = answer.json()
        assert _errors(content["schema"], body) == [], where
        if answer.status_code >= 400:
            assert body["code"] in documented["x-codes"], where


def _app_routes() -> set[tuple[str, str]]:
    with served(()) as srv:
        guard = srv.server._server.config.app  # the app ServerThread serves (its Guard)
        return {
            (method, route.path)
            for route in guard.app.routes
            for method in route.methods
            if method != "HEAD"  # Starlette answers HEAD for every GET
        }


def test_every_route_of_the_app_is_an_operation_of_the_document_and_every_operation_a_route() -> None:
    documented = {(method.upper(), path) for path, item in DOC["paths"].items() for method in item}
    assert _app_routes() == documented
    assert len({op.operation_id for op in OPERATIONS}) == len(OPERATIONS)


def test_the_committed_document_is_the_generated_one() -> None:
    committed = (ROOT / "docs" / "openapi.json").read_bytes()
    assert committed == document_json(), (
        "docs/openapi.json is stale: run run-supervisor openapi > docs/openapi.json"
    )


def test_run_supervisor_openapi_prints_the_document() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "run_supervisor.actors._cli", "openapi"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == document_json()


def test_the_document_is_openapi_3_1_with_closed_objects_and_one_component_per_enum() -> None:
    import schemathesis

    schemathesis.openapi.from_dict(json.loads(document_json()))  # it loads (and is a valid 3.1 document)
    assert DOC["openapi"] == "3.1.0"
    schemas = DOC["components"]["schemas"]

    def walk(schema: Any, where: str) -> None:
        if isinstance(schema, dict):
            if schema.get("type") == "object" and "properties" in schema:
                assert schema.get("additionalProperties") is False, where
            elif schema.get("type") == "object":  # a map of free JSON says so (not an empty object)
                assert schema.get("additionalProperties") not in (None, False), where
            if "enum" in schema and len(schema["enum"]) > 1:  # a vocabulary is written once
                vocabularies.append(tuple(sorted(schema["enum"])))
            for key, value in schema.items():
                walk(value, f"{where}/{key}")
        elif isinstance(schema, list):
            for item in schema:
                walk(item, where)

    vocabularies: list[tuple[str, ...]] = []
    for name, schema in schemas.items():
        walk(schema, name)
    duplicated = {v for v in vocabularies if vocabularies.count(v) > 1}
    assert duplicated == set()
    assert set(schemas["RejectCode"]["enum"]) == {code.value for code in RejectCode}
    assert {"not_found", "unauthorized", "forbidden", "too_large", "timeout"} <= set(
        schemas["RejectCode"]["enum"]
    )
    questions = schemas["AskReport"]["properties"]["questions"]
    assert questions["type"] == "array" and questions["items"] != {}, "AskReport.questions is typed"
    events = schemas["StreamEvent"]
    assert events["discriminator"]["propertyName"] == "type"
    assert {"run.started", "external.interrupt", "stream.reset", "run.recovered"} <= set(
        events["discriminator"]["mapping"]
    )


def test_the_status_of_every_reject_code_is_the_one_table_of_the_hosts() -> None:
    from run_supervisor.actors.hosts import STATUS_BY_CODE

    assert DOC["x-status-by-code"] == {str(code): status for code, status in STATUS_BY_CODE.items() if code}
    assert set(DOC["x-status-by-code"]) == {code.value for code in RejectCode}


# --- a session over every route, checked against the document -------------------------------------


def test_a_session_over_every_route_sends_and_gets_only_what_the_document_says() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            c = Checked(client)
            assert (await c.call("GET", "/health")).json() == {"status": "ok"}
            assert (await c.call("GET", "/")).status_code == 200
            assert (await c.call("GET", "/openapi.json")).json() == json.loads(document_json())
            await c.call("POST", "/directories", {"directories": ["/w/c"], "load": False})
            await c.call("POST", "/directories", {"directories": "/w/c"}, valid=False)  # 422
            started = await c.call("POST", "/runs", {"run_id": "r1", "session": "s1", "directory": "/w/a"})
            assert started.status_code == 201 and started.json()["lease_ms"] == 30_000
            again = await c.call("POST", "/runs", {"run_id": "r1", "session": "s1", "directory": "/w/a"})
            assert again.status_code == 409
            assert (
                await c.call(
                    "POST", "/runs", {"session": "s9", "directory": "/w/a", "lease_ms": 0}, valid=False
                )
            ).status_code == 422
            await c.call("GET", "/runs/{run_id}", path={"run_id": "r1"})
            assert (await c.call("GET", "/runs/{run_id}", path={"run_id": "nope"})).status_code == 404
            await events.until(of_type("run.started", run_id="r1"))
            reports = "/runs/{run_id}/reports"
            r1 = {"run_id": "r1"}
            await c.call("POST", reports, {"type": "step", "kind": "model", "step": "think"}, path=r1)
            await c.call(
                "POST",
                reports,
                {"type": "part", "tool": "bash", "state": "pending", "call_id": "c1"},
                path=r1,
            )
            await c.call("POST", reports, {"type": "retry", "attempt": 2, "message": "busy"}, path=r1)
            await c.call("POST", reports, {"type": "heartbeat", "progress": True}, path=r1)
            await c.call("POST", reports, {"type": "bogus"}, path=r1, valid=False)  # 422
            ask = await c.call(
                "POST", reports, {"type": "ask", "tool": "bash", "call_id": "c1", "title": "rm?"}, path=r1
            )
            ask_id = ask.json()["ask_id"]
            asks = await c.call("GET", "/asks", params={"run_id": "r1"})
            assert [a["ask_id"] for a in asks.json()] == [ask_id]
            await c.call("GET", "/asks", params={"runId": "r1"})  # 422: a misspelt filter
            ok = await c.call(
                "POST", "/asks/{ask_id}/permission", {"approved": True}, path={"ask_id": ask_id}
            )
            assert ok.status_code == 200
            late = await c.call(
                "POST", "/asks/{ask_id}/permission", {"approve": True}, path={"ask_id": ask_id}
            )
            assert late.status_code == 409
            await c.call("POST", reports, {"type": "ask", "title": "p2"}, path=r1)
            await c.call(
                "POST", "/runs/{run_id}/permission", {"approve": False, "message": "no"}, path=r1
            )  # the old spelling
            questions = [{"question": "Which?", "options": ["a", "b"]}, "Why?"]
            form = await c.call(
                "POST", reports, {"type": "ask", "form": True, "title": "f", "questions": questions}, path=r1
            )
            await c.call(
                "POST", "/asks/{ask_id}/form", {"answer": "a"}, path={"ask_id": form.json()["ask_id"]}
            )
            await c.call("POST", reports, {"type": "ask", "form": True, "title": "f2"}, path=r1)
            await c.call("POST", "/runs/{run_id}/form", {"answer": "b"}, path=r1)
            await c.call("POST", reports, {"type": "ask", "form": True, "title": "f3"}, path=r1)
            await c.call("POST", "/runs/{run_id}/form/dismiss", {"message": "later"}, path=r1)
            form4 = await c.call("POST", reports, {"type": "ask", "form": True, "title": "f4"}, path=r1)
            await c.call(
                "POST", "/asks/{ask_id}/dismiss", {"message": "no"}, path={"ask_id": form4.json()["ask_id"]}
            )
            await c.call("POST", "/asks/{ask_id}/dismiss", {}, path={"ask_id": "ask-unknown"})  # 404
            await c.call("GET", "/sessions/{session}", path={"session": "s1"})
            assert (await c.call("GET", "/sessions/{session}", path={"session": "s-none"})).status_code == 404
            await c.call(
                "PUT", "/sessions/{session}/queue_policy", {"queue_policy": "queue"}, path={"session": "s1"}
            )
            await c.call(
                "POST",
                "/sessions/{session}/queue_policy",
                {"queue_policy": "fifo"},
                path={"session": "s1"},
                valid=False,
            )
            sessions = "/sessions/{session}"
            busy = await c.call("DELETE", sessions, path={"session": "s1"})  # r1 is active: 409
            assert busy.status_code == 409 and busy.json()["code"] == "session_busy"
            params = {"confirm": "true", "grace_ms": "100"}
            assert (
                await c.call("DELETE", sessions, path={"session": "s-none"}, params=params)
            ).status_code == 200
            assert (
                await c.call("DELETE", sessions, path={"session": "s1"}, params={"confirm": "yes"})
            ).status_code == 422
            stop = "/sessions/{session}/cancel"
            idle = await c.call("POST", stop, {"origin": "ui"}, path={"session": "s-idle"})
            assert idle.json()["interrupted_runs"] == []
            await c.call("POST", stop, {"grace": 1}, path={"session": "s-idle"}, valid=False)
            await c.call("GET", "/statistics")
            any_start = {
                "type": "start_run",
                "run_id": "r2",
                "session": "s2",
                "directory": "/w/a",
                "lease_ms": 5000,
            }
            assert (await c.call("POST", "/requests", any_start)).status_code == 200
            await c.call(
                "POST", "/requests", {"type": "cancel", "run_id": "r2", "lease_ms": 5}, valid=False
            )  # 422
            assert (
                await c.call("POST", "/runs/{run_id}/cancel", {}, path={"run_id": "r2"})
            ).status_code == 200
            await c.call("POST", "/runs/{run_id}/cancel", {"reasn": "x"}, path={"run_id": "r2"}, valid=False)
            await c.call("POST", reports, {"type": "end"}, path={"run_id": "r2"})
            # A maintenance reload of /w/a waits for r1: pending, confirmed.
            reload = {"do": "reload", "mode": "maintenance", "origin": "ui", "directory": "/w/a"}
            deferred = (await c.call("POST", "/close", reload)).json()
            assert deferred["result"] == "deferred", deferred
            actions = (await c.call("GET", "/actions")).json()
            assert [a["action_id"] for a in actions] == [deferred["action_id"]]
            confirm = "/actions/{action_id}/confirm"
            await c.call("POST", confirm, {"origin": "user"}, path={"action_id": deferred["action_id"]})
            await c.call("POST", confirm, {}, path={"action_id": "lc-999"})  # 404
            await events.until(of_type("external.interrupt", run_id="r1"))
            await c.call("POST", reports, {"type": "end", "error": "interrupted"}, path=r1)
            await events.until(of_type("run.finished", run_id="r1"))
            await c.call("POST", reports, {"type": "step", "kind": "model"}, path=r1)  # 409: it ended
            no_directory = await c.call(
                "POST", "/close", {"do": "dispose", "mode": "maintenance", "origin": "x"}
            )
            assert no_directory.status_code == 422
            compat = {"x-opencode-client-action-id": "client-1"}
            await c.call("POST", "/instance/reload", params={"directory": "/w/b"}, headers=compat)
            await c.call("POST", "/instance/dispose", headers={"x-opencode-directory": "/w/b"})
            await c.call("POST", "/instance/dispose")  # 422: no directory
            assert (await c.call("POST", "/global/dispose", headers=compat)).json()["status"] == "completed"
            # This host keeps no remote caches: the hooks routes answer 404 (test_remote_caches has the rest).
            assert (await c.call("GET", "/instances/hooks")).status_code == 404
            assert (await c.call("POST", "/instances/hooks", {"name": "ts"})).status_code == 404
            assert (
                await c.call("DELETE", "/instances/hooks/{registration}", path={"registration": "x"})
            ).status_code == 404
            renew = await c.call("POST", "/instances/hooks/{registration}/renew", path={"registration": "x"})
            assert renew.status_code == 404
            ack = await c.call("POST", "/instances/hooks/acks/{request_id}", {}, path={"request_id": "x"})
            assert ack.status_code == 404
            ticket = await c.call("POST", "/events/ticket")
            assert ticket.status_code == 201
            # The guard's refusals are in the document too.
            bare = Checked(httpx.AsyncClient(base_url=srv.url, timeout=10))
            async with bare.client:
                assert (await bare.call("GET", "/statistics")).status_code == 401
                wrong_host = await bare.call("GET", "/health", headers={"Host": "evil.example:80"})
                assert wrong_host.status_code == 403
            huge = await c.call("POST", "/directories", raw=b"[" + b" " * (2 << 20) + b"]")
            assert huge.status_code == 413
            # Every event either stream sent is a documented event.
            seen_events = list(events.seen)
            while (item := await _next_or_none(events)) is not None:
                seen_events.append(item)
            for event in seen_events:
                assert _errors(_component("StreamEvent"), event.data) == [], event.data
            kinds = {event.type for event in seen_events}
            assert {"run.started", "ask.requested", "lifecycle.completed", "instance.closed"} <= kinds
            async with sse(client, "/event?after=0") as compat_events:
                await compat_events.until(of_type("global.disposed"))
                for event in compat_events.seen:
                    assert _errors(_component("CompatStreamEvent"), event.data) == [], event.data
            shut = await c.call("POST", "/shutdown", {"grace_ms": 100, "origin": "test"})
            assert shut.status_code == 200
            untested = {(op.method, op.path) for op in OPERATIONS} - c.seen - bare.seen
            assert untested == {("GET", "/events"), ("GET", "/event")}  # read above, by the SSE reader
            assert {"invalid_request", "run_already_exists", "unknown_run", "unauthorized", "forbidden"} <= (
                c.codes | bare.codes
            )

    run(scenario, within=50)


async def _next_or_none(events: Any) -> Any:
    try:
        return await events.next(0.3)
    except TimeoutError:
        return None


def test_the_ready_line_of_serve_is_the_documented_ready_line(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "run_supervisor.actors._cli", "serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        ready = json.loads(line)
        assert _errors(_component("ReadyLine"), ready) == [], line
        assert ready["ready"] is True and "token" in ready
    finally:
        proc.terminate()
        proc.wait(30)
