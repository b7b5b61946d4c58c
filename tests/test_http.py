"""The HTTP + SSE host against a real server on a loopback port, driven by httpx."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import msgspec
import pytest
from wire_support import (
    CLI,
    Served,
    end_run,
    of_type,
    reaped,
    reaped_async,
    report,
    run_node,
    served,
    sse,
    submit,
)
from wire_support import run_served as run

from run_supervisor.actors import SupervisorConfig
from run_supervisor.actors._cli import main
from run_supervisor.actors.hosts import STATUS_BY_CODE
from run_supervisor.actors.hosts._schema import with_hosts
from run_supervisor.protocol import RejectCode, StartRun, wire_schema


async def start(client: httpx.AsyncClient, run_id: str, directory: str = "/w/a", **extra: Any) -> None:
    answer = await client.post(
        "/runs", json={"run_id": run_id, "session": f"s-{run_id}", "directory": directory, **extra}
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["result"] == "ok"


# --- security ------------------------------------------------------------------------------------


def test_the_health_check_needs_no_token_and_every_other_route_answers_401_without_one() -> None:
    async def scenario(srv: Served) -> None:
        async with httpx.AsyncClient(base_url=srv.url, timeout=10) as bare:
            assert (await bare.get("/health")).json() == {"status": "ok"}
            for method, path in (("GET", "/statistics"), ("GET", "/events"), ("POST", "/global/dispose")):
                answer = await bare.request(method, path)
                assert answer.status_code == 401, (path, answer.text)
                assert answer.headers["www-authenticate"] == "Bearer"
                assert answer.json()["code"] == "unauthorized"
            wrong = await bare.get("/statistics", headers={"Authorization": "Bearer not-the-token"})
            assert wrong.status_code == 401
        async with srv.client() as client:
            assert (await client.get("/statistics")).status_code == 200

    run(scenario)


def test_a_rebinding_host_header_or_a_foreign_origin_is_refused_with_403() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            rebound = await client.get("/statistics", headers={"Host": f"attacker.example:{srv.server.port}"})
            assert rebound.status_code == 403
            assert "DNS-rebinding" in rebound.json()["error"]
            health = await client.get("/health", headers={"Host": "attacker.example"})
            assert health.status_code == 403
            foreign = await client.post("/global/dispose", headers={"Origin": "http://attacker.example"})
            assert foreign.status_code == 403
            assert foreign.json()["code"] == "forbidden"
            same = await client.get("/statistics", headers={"Origin": srv.url})
            assert same.status_code == 200
            local = await client.get("/statistics", headers={"Host": f"localhost:{srv.server.port}"})
            assert local.status_code == 200

    run(scenario)


def test_a_body_over_the_limit_is_refused_with_413_and_nothing_is_submitted() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            big = {"type": "cancel", "run_id": "r", "origin": "x" * (srv.server.settings.max_body + 1)}
            answer = await client.post("/requests", json=big)
            assert answer.status_code == 413
            assert answer.json()["code"] == "too_large"

            async def chunks() -> Any:  # no Content-Length: counted as it arrives
                for _ in range(20):
                    yield b" " * 65536

            streamed = await client.post("/requests", content=chunks())
            assert streamed.status_code == 413
            stats = (await client.get("/statistics")).json()
            assert stats["runs_finished"] == 0

    run(scenario)


def test_serve_refuses_a_non_loopback_address_without_an_explicit_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RUN_SUPERVISOR_TOKEN"}
    done = subprocess.run(
        [*CLI, "serve", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        check=False,
        text=True,
        timeout=30,
        env=env,
    )
    assert done.returncode == 2
    assert "--token-file" in done.stderr and "0.0.0.0" in done.stderr
    assert done.stdout == ""


def test_serve_prints_one_ready_line_with_its_url_and_exits_after_a_shutdown_request() -> None:
    with reaped(
        subprocess.Popen(
            [*CLI, "serve", "--port", "0", "--directory", "/p/a"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    ) as proc:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["ready"] is True
        assert ready["url"].startswith("http://127.0.0.1:")
        headers = {"Authorization": f"Bearer {ready['token']}"}
        with httpx.Client(base_url=ready["url"], headers=headers, timeout=10) as client:
            assert client.get("/health").json() == {"status": "ok"}
            done = client.post("/shutdown", json={"grace_ms": 200})
            assert done.status_code == 200
            assert done.json()["result"] == "forced"
        assert proc.wait(timeout=20) == 0
        assert proc.stdout.read() == ""  # exactly one line on stdout


# --- statuses ------------------------------------------------------------------------------------


def test_rejections_carry_the_in_process_code_and_sentence_under_the_status_of_one_table() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            unknown = await client.post("/runs/nope/cancel")
            assert unknown.status_code == 404
            assert unknown.json() == {
                "result": "rejected",
                "code": "unknown_run",
                "error": "no run 'nope' has started (or it finished long ago and was forgotten); "
                "nothing to cancel",
                "action_id": None,
                "interrupted_runs": [],
            }
            await start(client, "r1")
            again = await client.post("/runs", json={"run_id": "r1", "session": "s", "directory": "/w/a"})
            assert again.status_code == 409 and again.json()["code"] == "run_already_exists"
            nothing = await client.post("/runs/r1/permission", json={"approve": True})
            assert nothing.status_code == 409 and nothing.json()["code"] == "nothing_pending"
            bad_mode = await client.post(
                "/close", json={"do": "dispose_all", "mode": "gently", "origin": "t"}
            )
            assert bad_mode.status_code == 422 and bad_mode.json()["code"] == "invalid_request"
            assert "gently" in bad_mode.json()["error"]
            not_json = await client.post("/requests", content=b"{nope")
            assert not_json.status_code == 422 and "not valid JSON" in not_json.json()["error"]
            no_route = await client.get("/nowhere")
            assert no_route.status_code == 404 and no_route.json()["code"] == "not_found"
            assert (await client.post("/shutdown", json={"grace_ms": 200})).status_code == 200
            closed = await client.post("/runs", json={"run_id": "r2", "session": "s", "directory": "/w/a"})
            assert closed.status_code == 503 and closed.json()["code"] == "supervisor_closed"

    run(scenario)


def test_every_reject_code_has_a_status_in_the_one_table() -> None:
    assert {code.value for code in RejectCode} <= set(STATUS_BY_CODE)
    assert STATUS_BY_CODE[RejectCode.UNKNOWN_RUN] == 404
    assert STATUS_BY_CODE[RejectCode.RUN_FINISHED] == 409
    assert STATUS_BY_CODE[RejectCode.INVALID_REQUEST] == 422
    assert STATUS_BY_CODE[RejectCode.SUPERVISOR_CLOSED] == 503


# --- native routes -------------------------------------------------------------------------------


def test_native_routes_start_cancel_close_and_query_a_run() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await start(client, "r1")
            await events.until(of_type("run.started", run_id="r1"))
            assert (await report(client, "r1", type="step", kind="model")).status_code == 200
            await events.until(of_type("run.step.started", run_id="r1", kind="model"))
            close = await client.post(
                "/close", json={"do": "reload", "mode": "maintenance", "origin": "t", "directory": "/w/a"}
            )
            assert close.status_code == 200
            assert close.json()["result"] == "deferred" and close.json()["blocking_runs"] == ["r1"]
            actions = (await client.get("/actions")).json()
            assert [a["action_id"] for a in actions] == [close.json()["action_id"]]
            session = (await client.get("/sessions/s-r1")).json()
            assert session["status"] == "busy" and session["active"] == "r1"
            assert (await client.post("/runs/r1/cancel", json={"origin": "stop-button"})).status_code == 200
            notice = await events.until(of_type("external.interrupt", run_id="r1"))
            assert notice.data["reason"] == "user_cancel" and notice.data["origin"] == "stop-button"
            finished = await end_run(client, events)
            assert finished.data["outcome"] == "interrupted" and finished.data["reason"] == "user_cancel"
            await events.until(of_type("lifecycle.completed", action_id=close.json()["action_id"]))
            snapshot = (await client.get("/runs/r1")).json()
            assert snapshot["outcome"] == "interrupted"
            assert (await client.get("/runs/nope")).status_code == 404
            stats = (await client.get("/statistics")).json()
            assert stats["runs_finished"] == 1 and stats["external_runs"] == 0
            assert stats["sse_listeners"] == 1 and stats["events_buffered"] >= len(events.seen)

    run(scenario)


def test_the_generic_route_takes_any_protocol_request() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            started = await submit(
                client, "start_run", run_id="g1", session="s", directory="/w/b", lease_ms=5000
            )
            assert started.json() == {
                "result": "ok",
                "error": None,
                "code": None,
                "action_id": None,
                "interrupted_runs": [],
            }
            close = await submit(
                client, "close", do="dispose_all", mode="user_confirmed_interrupt", origin="t"
            )
            assert close.json()["result"] == "interrupted"
            assert close.json()["interrupted_runs"] == ["g1"]

    run(scenario)


# --- seed 002's backend routes ------------------------------------------------------------------


def test_seed_002_global_dispose_with_an_active_run_is_deferred_and_global_disposed_comes_once_after_it() -> (
    None
):
    """Seed 002's route-level plan: POST /global/dispose with an active run returns deferred; no
    global.disposed until the run ends, then exactly one."""

    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/event") as compat:
            assert (await compat.next()).type == "server.connected"  # type: ignore[union-attr]
            await start(client, "r1", "/w/a")
            assert (await report(client, "r1", type="part", tool="bash", state="pending")).status_code == 200
            answer = await client.post(
                "/global/dispose",
                headers={
                    "x-opencode-client-action-kind": "settings.provider.connect",
                    "x-opencode-client-action-id": "click-7",
                },
            )
            assert answer.status_code == 200
            body = answer.json()
            assert body["status"] == "deferred"
            assert sorted(body["affectedDirectoryKeys"]) == ["/w/a", "/w/b"]
            action = body["lifecycleActionID"]
            # The idle directory closes now; the busy one waits. A barrier: an unrelated directory
            # loaded and disposed afterwards, whose event must come before any global.disposed.
            await compat.until(of_type("server.instance.disposed", directory="/w/b"))
            await client.post("/directories", json={"directories": ["/w/c"]})
            await client.post("/instance/dispose", params={"directory": "/w/c"})
            await compat.until(of_type("server.instance.disposed", directory="/w/c"))
            assert not [e for e in compat.seen if e.type == "global.disposed"]
            pending = (await client.get("/actions")).json()
            assert pending[0]["action_id"] == action and pending[0]["origin"] == "settings.provider.connect"

            assert (await report(client, "r1", type="part", tool="bash", state="prepared")).status_code == 200
            assert (await report(client, "r1", type="part", tool="bash", state="running")).status_code == 200
            assert (
                await report(client, "r1", type="part", tool="bash", state="completed")
            ).status_code == 200
            assert (await report(client, "r1", type="end")).status_code == 200
            disposed = await compat.until(of_type("global.disposed"))
            assert disposed.data["properties"]["lifecycleActionID"] == action
            assert disposed.data["properties"]["clientActionID"] == "click-7"
            await client.post("/directories", json={"directories": ["/w/d"]})
            await client.post("/instance/dispose", headers={"x-opencode-directory": "/w/d"})
            await compat.until(of_type("server.instance.disposed", directory="/w/d"))
            assert len([e for e in compat.seen if e.type == "global.disposed"]) == 1
            run_state = (await client.get("/runs/r1")).json()
            assert run_state["outcome"] == "completed"  # the dispose never touched the run
            assert run_state["parts"][0]["state"] == "completed"

    run(scenario)


def test_instance_reload_takes_its_directory_by_query_or_header_and_completes_at_once_when_idle() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            by_query = await client.post("/instance/reload", params={"directory": "/w/a"})
            assert by_query.json() == {
                "status": "completed",
                "lifecycleActionID": by_query.json()["lifecycleActionID"],
                "affectedDirectoryKeys": ["/w/a"],
            }
            by_header = await client.post("/instance/reload", headers={"x-opencode-directory": "/w/b"})
            assert by_header.json()["status"] == "completed"
            missing = await client.post("/instance/reload")
            assert missing.status_code == 422 and "x-opencode-directory" in missing.json()["error"]

    run(scenario)


# --- SSE -----------------------------------------------------------------------------------------


def test_an_sse_client_that_drops_and_resumes_with_last_event_id_loses_no_event() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            async with sse(client, "/events?after=0") as first:
                await start(client, "r1")
                await first.until(of_type("run.started", run_id="r1"))
                last = first.seen[-1].id
            # Disconnected: events happen while nobody listens.
            for n in range(5):
                await report(client, "r1", type="step", kind="model", step=f"m{n}")
            await report(client, "r1", type="end")
            async with sse(client, "/events", headers={"Last-Event-ID": str(last)}) as resumed:
                await resumed.until(of_type("run.finished", run_id="r1"))
            seqs = [e.id.split(":")[1] for e in first.seen + resumed.seen if e.id]
            ids = [int(seq) for seq in seqs if "." not in seq]
            assert ids == list(range(1, ids[-1] + 1)), ids  # every seq once, in order, no gap
            steps = [e.data["step"] for e in resumed.seen if e.type == "run.step.started"]
            assert steps == ["m0", "m1", "m2", "m3", "m4"]

    run(scenario)


def test_a_resume_past_the_buffer_gets_a_reset_event_then_the_whole_buffer() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            await start(client, "r1")
            for n in range(10):
                await report(client, "r1", type="step", kind="model", step=f"m{n}")
            await report(client, "r1", type="end")
            first_id = f"{srv.host.hub.epoch}:1"
            async with sse(client, "/events", headers={"Last-Event-ID": first_id}) as resumed:
                reset = await resumed.next()
                assert reset is not None and reset.type == "stream.reset" and reset.id is None
                assert reset.data["why"] == "evicted" and reset.data["after"] == first_id
                first = await resumed.next()
                assert first is not None and first.id == reset.data["oldest"]
            not_yet = f"{srv.host.hub.epoch}:99999"
            async with sse(client, "/events", headers={"Last-Event-ID": not_yet}) as future:
                reset = await future.next()
                assert reset is not None and reset.data["why"] == "unknown_id"

    run(scenario, buffer=8)


def test_sse_streams_end_when_the_supervisor_shuts_down() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client) as events:
            await client.post("/shutdown", json={"grace_ms": 100})
            await events.until(of_type("action.result"))
            while (await events.next()) is not None:
                pass  # ends (bounded by next()'s timeout)
            assert (await client.get("/health")).json() == {"status": "closed"}

    run(scenario, config=SupervisorConfig(shutdown_at_exit=False))


# --- the Node client of docs/examples -------------------------------------------------------------


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_node_example_drives_an_external_run_through_a_deferred_close() -> None:
    script = Path(__file__).resolve().parent.parent / "docs/examples/node-client.mjs"
    with served(("/proj/a",)) as srv:
        summary = run_node(str(script), srv.url, srv.server.token)
    assert summary == {
        "close": "deferred",
        "affected": ["/proj/a"],
        "outcome": "completed",
        "card": ["bash: completed"],
        "interrupts": 0,
        "global_disposed_after_run": True,
    }


def test_serve_on_sigterm_shuts_the_supervisor_down_interrupting_its_runs_and_exits_0() -> None:
    async def scenario() -> None:
        serve = await asyncio.create_subprocess_exec(
            *CLI, "serve", "--directory", "/p/a", "--grace-ms", "300", stdout=asyncio.subprocess.PIPE
        )
        async with reaped_async(serve) as proc:
            assert proc.stdout is not None
            ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 20))
            headers = {"Authorization": f"Bearer {ready['token']}"}
            async with (
                httpx.AsyncClient(base_url=ready["url"], headers=headers, timeout=10) as client,
                sse(client, "/events?after=0") as events,
            ):
                await start(client, "r1", "/p/a")
                await events.until(of_type("run.started", run_id="r1"))
                proc.send_signal(signal.SIGTERM)
                notice = await events.until(of_type("external.interrupt", run_id="r1"))
                assert notice.data["reason"] == "shutdown"
                finished = await events.until(of_type("run.finished", run_id="r1"))
                assert (finished.data["outcome"], finished.data["reason"]) == ("interrupted", "shutdown")
            assert await asyncio.wait_for(proc.wait(), 20) == 0

    asyncio.run(asyncio.wait_for(scenario(), 50))


# --- the schema -----------------------------------------------------------------------------------


def hosts_validator(entry: str) -> jsonschema.Draft202012Validator:
    schema = with_hosts(wire_schema())
    return jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": f"#/$defs/{entry}"})


def test_every_event_and_host_notice_on_the_stream_matches_run_supervisor_schema_hosts() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            async with sse(client, "/events?after=0") as events:
                await start(client, "r1")
                await report(client, "r1", type="part", tool="bash", state="pending")
                await report(client, "r1", type="ask")
                await client.post("/runs/r1/permission", json={"approve": True})
                await events.until(of_type("external.answer", run_id="r1"))
                await client.post("/runs/r1/cancel")
                await events.until(of_type("external.interrupt", run_id="r1"))
                await report(client, "r1", type="end")
                await events.until(of_type("run.finished", run_id="r1"))
            async with sse(client, "/events", headers={"Last-Event-ID": "nonsense"}) as resumed:
                await resumed.until(of_type("run.finished", run_id="r1"))
        event_or_notice = hosts_validator("Event"), hosts_validator("HostEvent")
        for event in events.seen + resumed.seen:
            if event.type in ("external.interrupt", "external.answer", "stream.reset"):
                event_or_notice[1].validate(event.data)
            else:
                event_or_notice[0].validate(event.data)
        kinds = {e.type for e in events.seen + resumed.seen}
        assert {"external.interrupt", "external.answer", "stream.reset", "run.finished"} <= kinds

    run(scenario)


def test_run_supervisor_schema_hosts_adds_the_hosts_messages_to_the_protocols_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema", "--hosts"]) == 0
    printed = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(printed)
    roots = [entry["$ref"].rsplit("/", 1)[-1] for entry in printed["anyOf"]]
    assert roots[:3] == ["Request", "Answer", "Event"]
    assert roots[-4:] == ["ExternalReport", "ReportOutcome", "HostEvent", "StdioOutput"]
    report = hosts_validator("ExternalReport")
    report.validate({"type": "part", "tool": "bash", "state": "prepared"})
    assert not report.is_valid({"type": "part", "tool": "bash", "state": "exploded"})


# --- the docs agree with the hosts ---------------------------------------------------------------------

WIRE_MD = Path(__file__).resolve().parent.parent / "docs" / "wire.md"


def test_the_wire_docs_status_table_lists_every_code_with_its_status() -> None:
    text = WIRE_MD.read_text(encoding="utf-8")
    table = text.split("### Statuses: one table", 1)[1].split("###", 1)[0]
    documented: dict[str, int] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].isdigit() and cells[0] != "200":
            for code in re.findall(r"`([a-z_]+)`", cells[1]):
                documented[code] = int(cells[0])
    expected = {str(code): status for code, status in STATUS_BY_CODE.items() if code is not None}
    assert documented == expected
    assert {code.value for code in RejectCode} <= set(documented)


def test_the_wire_docs_list_every_field_post_runs_takes() -> None:
    row = next(line for line in WIRE_MD.read_text(encoding="utf-8").splitlines() if "| `/runs` |" in line)
    body = row.split("|")[3].split(":", 1)[0]
    listed = set(re.findall(r'"([a-z_]+)"', body))
    assert listed == {f.name for f in msgspec.structs.fields(StartRun)} | {"lease_ms"}


def test_a_rejected_start_answers_no_run_id_or_lease_of_a_run_that_never_was() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            await start(client, "a", session="s")
            fields = {"run_id": "d", "session": "s", "directory": "/w/a", "queue_policy": "reject_if_busy"}
            busy = await client.post("/runs", json=fields)
            assert busy.status_code == 409 and busy.json()["code"] == "session_busy"
            assert (busy.json()["run_id"], busy.json()["lease_ms"]) == (None, None)
            assert (await client.get("/runs/d")).status_code == 404
            bad = await client.post("/runs", json={"session": "s2", "directory": "/w/a", "deadline_ms": -1})
            assert bad.status_code == 422 and bad.json()["code"] == "invalid_request"
            assert (bad.json()["run_id"], bad.json()["lease_ms"]) == (None, None)
            fine = await client.post("/runs", json={"session": "s3", "directory": "/w/a", "lease_ms": 4000})
            assert fine.status_code == 201 and fine.json()["run_id"].startswith("run-")
            assert fine.json()["lease_ms"] == 4000

    run(scenario)


def test_the_statistics_say_which_reload_queue_and_stall_settings_are_in_force() -> None:
    config = SupervisorConfig(shutdown_at_exit=False, reload_policy="eager", queue_policy="coalesce")  # type: ignore[arg-type]

    async def scenario(srv: Served) -> None:
        async with srv.client() as client:
            stats = (await client.get("/statistics")).json()
            assert (stats["reload_policy"], stats["queue_policy"], stats["stall_after_ms"]) == (
                "eager",
                "coalesce",
                None,
            )

    run(scenario, config=config)
