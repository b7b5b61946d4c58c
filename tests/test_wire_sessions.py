"""Sessions are things a client acts on over both wires: stop one (its active run and its queue, one
action id), delete one (refused while busy unless confirmed), and grant a permission "always" for the
rest of a session. Each over HTTP (a real server on 127.0.0.1) and over stdio (a real subprocess);
and a permission reply says ``approved`` on every entry."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from test_stdio import Sidecar, session
from wire_support import Served, SseEvent, SseReader, of_type, served, sse, start_external
from wire_support import run_served as run

START = {"session": "s1", "directory": "/w/a"}


async def seen_or_next(events: SseReader, match: Callable[[SseEvent], bool]) -> SseEvent:
    """An event already read that matches, else the next one that does (bounded)."""
    for event in events.seen:
        if match(event):
            return event
    return await events.until(match)


async def start_active(
    client: httpx.AsyncClient, events: SseReader, run_id: str, session: str = "s1"
) -> None:
    """Start external run ``run_id`` in ``session`` over /w/a (201) and wait until it is active."""
    await start_external(client, run_id, session)
    await seen_or_next(events, of_type("run.started", run_id=run_id))


def test_a_session_cancel_over_http_stops_its_queued_and_active_runs_with_one_action_id() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await start_active(client, events, "r1")
            await start_external(client, "r2", "s1")
            cancel = await client.post("/sessions/s1/cancel", json={"origin": "ui.stop", "grace_ms": 5000})
            assert cancel.status_code == 200, cancel.text
            body = cancel.json()
            assert body["result"] == "ok" and body["interrupted_runs"] == ["r2", "r1"], body
            action = body["action_id"]
            assert action is not None
            interrupt = await seen_or_next(events, of_type("external.interrupt", run_id="r1"))
            assert (interrupt.data["reason"], interrupt.data["origin"]) == ("user_cancel", "ui.stop")
            assert interrupt.data["action_id"] == action
            queued = await seen_or_next(events, of_type("run.finished", run_id="r2"))
            assert (queued.data["reason"], queued.data["action_id"]) == ("user_cancel", action)
            await client.post("/runs/r1/reports", json={"type": "end"})
            ended = await seen_or_next(events, of_type("run.finished", run_id="r1"))
            assert (ended.data["outcome"], ended.data["action_id"]) == ("interrupted", action)
            idle = (await client.get("/sessions/s1")).json()
            assert (idle["status"], idle["active"], idle["queued"]) == ("idle", None, [])
            nothing = (await client.post("/sessions/s1/cancel", json={})).json()
            assert (nothing["result"], nothing["action_id"], nothing["interrupted_runs"]) == ("ok", None, [])
            typo = await client.post("/sessions/s1/cancel", json={"grace": 5})
            assert typo.status_code == 422 and "grace" in typo.json()["error"]
            named = await client.post("/sessions/s1/cancel", json={"session": "s2"})
            assert named.status_code == 422 and "session" in named.json()["error"]

    run(scenario)


def test_a_session_cancel_past_its_grace_frees_the_session_of_a_client_that_ignores_it() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await start_active(client, events, "r1")
            await start_external(client, "r2", "s1")
            cancel = (await client.post("/sessions/s1/cancel", json={"grace_ms": 0})).json()
            ended = await seen_or_next(events, of_type("run.finished", run_id="r1"))
            assert (ended.data["outcome"], ended.data["abandoned"]) == ("interrupted", True)
            assert ended.data["action_id"] == cancel["action_id"]
            late = await client.post("/runs/r1/reports", json={"type": "step", "kind": "model"})
            assert late.status_code == 409, late.text  # the abandoned client's later reports are refused
            assert (await client.get("/sessions/s1")).json()["status"] == "idle"

    run(scenario)


def test_deleting_a_busy_session_over_http_is_a_409_until_confirmed_and_then_it_is_forgotten() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await start_active(client, events, "r1")
            busy = await client.delete("/sessions/s1")
            assert busy.status_code == 409, busy.text
            assert (busy.json()["result"], busy.json()["code"]) == ("rejected", "session_busy")
            for query, word in (
                ("confirm=yes", "confirm"),
                ("confrm=true", "confrm"),
                ("grace_ms=-1", "grace"),
            ):
                bad = await client.delete(f"/sessions/s1?{query}")
                assert bad.status_code == 422 and word in bad.json()["error"], (query, bad.text)
            with_body = await client.request("DELETE", "/sessions/s1", json={"confirm": True})
            assert with_body.status_code == 422 and "query" in with_body.json()["error"]
            assert (await client.get("/sessions/s1")).status_code == 200  # nothing was deleted
            deleted = await client.delete("/sessions/s1?confirm=true&origin=ui.delete&grace_ms=5000")
            assert deleted.status_code == 200, deleted.text
            assert deleted.json()["interrupted_runs"] == ["r1"]
            interrupt = await seen_or_next(events, of_type("external.interrupt", run_id="r1"))
            assert interrupt.data["origin"] == "ui.delete"
            await client.post("/runs/r1/reports", json={"type": "end"})
            await seen_or_next(events, of_type("run.finished", run_id="r1"))
            gone = await client.get("/sessions/s1")
            assert gone.status_code == 404, gone.text  # forgotten once its active run ended
            unknown = await client.delete("/sessions/never")
            assert unknown.status_code == 200 and unknown.json()["result"] == "ok"

    run(scenario)


def test_an_always_grant_over_http_approves_the_sessions_matching_open_ask_and_a_later_one() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            for run_id, session_id in (("r1", "s1"), ("r2", "s1b"), ("r3", "s2")):
                await start_active(client, events, run_id, session_id)

            asked = 0

            async def ask(run_id: str, key: str | None) -> str:
                nonlocal asked
                asked += 1  # a repeat of the same report would be the same ask (a retry)
                report = {"type": "ask", "title": f"git? ({asked})", "key": key}
                reported = await client.post(f"/runs/{run_id}/reports", json=report)
                assert reported.status_code == 200, reported.text
                return str(reported.json()["ask_id"])

            first = await ask("r1", "bash:git status")
            second = await ask("r1", "bash:git status")
            other_key = await ask("r1", "bash:rm")
            other_session = await ask("r3", "bash:git status")
            grant = await client.post(f"/asks/{first}/permission", json={"approved": True, "always": True})
            assert grant.status_code == 200, grant.text
            replied = await seen_or_next(events, of_type("ask.replied", ask_id=first))
            assert replied.data["always"] is True
            granted = await seen_or_next(events, of_type("ask.replied", ask_id=second))
            assert granted.data["granted"] == "bash:git status"
            await seen_or_next(events, of_type("external.answer", ask_id=second, approved=True))
            later = await ask("r1", "bash:git status")
            await seen_or_next(events, of_type("external.answer", ask_id=later, approved=True))
            still_open = {a["ask_id"] for a in (await client.get("/asks")).json()}
            assert still_open == {other_key, other_session}
            keyless = await ask("r1", None)
            refused = await client.post(
                f"/asks/{keyless}/permission", json={"approved": True, "always": True}
            )
            assert refused.status_code == 422 and "key" in refused.json()["error"], refused.text
            form = await client.post("/runs/r2/reports", json={"type": "ask", "form": True, "key": "k"})
            assert form.status_code == 422, form.text

    run(scenario)


@pytest.mark.parametrize("entry", ["ask route", "run route", "POST /requests"])
def test_a_permission_reply_with_approved_false_works_on_every_http_entry(entry: str) -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await start_active(client, events, "r1")
            asked = (await client.post("/runs/r1/reports", json={"type": "ask", "title": "rm?"})).json()
            reply: dict[str, Any] = {"approved": False, "message": "not that"}
            if entry == "ask route":
                answer = await client.post(f"/asks/{asked['ask_id']}/permission", json=reply)
            elif entry == "run route":
                answer = await client.post("/runs/r1/permission", json=reply)
            else:
                request = {"type": "reply_permission", "ask_id": asked["ask_id"], **reply}
                answer = await client.post("/requests", json=request)
            assert answer.status_code == 200, answer.text
            notice = await seen_or_next(events, of_type("external.answer", ask_id=asked["ask_id"]))
            assert (notice.data["approved"], notice.data["message"]) == (False, "not that")
            again = (await client.post("/runs/r1/reports", json={"type": "ask", "title": "again?"})).json()
            old = {"type": "reply_permission", "ask_id": again["ask_id"], "approve": False, "message": "no"}
            assert (await client.post("/requests", json=old)).status_code == 200  # the old spelling
            both = {**old, "approved": False}
            refused = await client.post("/requests", json=both)
            assert refused.status_code == 422 and "not both" in refused.json()["error"]

    run(scenario)


def test_session_actions_always_grants_and_approved_over_stdio() -> None:
    async def scenario(car: Sidecar) -> None:
        await car.event("instance.started", directory="/p/a")
        for n, run_id in enumerate(("r1", "r2"), 1):
            await car.send(
                {"id": n, "type": "start_run", "run_id": run_id, "session": "s1", "directory": "/p/a"}
            )
            assert (await car.answer(n))["answer"]["result"] == "ok"
        await car.event("run.started", run_id="r1")
        for corr in ("a1", "a2"):  # two asks (a report repeated as it was would be the same ask)
            ask = {"type": "ask", "title": f"git? {corr}", "key": "bash:git status"}
            await car.send({"id": corr, "type": "report", "run_id": "r1", "report": ask})
        first = (await car.answer("a1"))["answer"]["ask_id"]
        second = (await car.answer("a2"))["answer"]["ask_id"]
        await car.send(
            {"id": "g", "type": "reply_permission", "ask_id": first, "approved": True, "always": True}
        )
        assert (await car.answer("g"))["status"] == 200
        assert (await car.event("ask.replied", ask_id=second))["granted"] == "bash:git status"
        await car.send({"id": "d", "type": "delete_session", "session": "s1"})
        busy = await car.answer("d")
        assert (busy["status"], busy["answer"]["code"]) == (409, "session_busy")
        await car.send({"id": "c", "type": "cancel_session", "session": "s1", "origin": "ui.stop"})
        stopped = (await car.answer("c"))["answer"]
        assert stopped["interrupted_runs"] == ["r2", "r1"] and stopped["action_id"]
        interrupt = await car.event("external.interrupt", run_id="r1")
        assert interrupt["action_id"] == stopped["action_id"]
        await car.send({"id": "e", "type": "report", "run_id": "r1", "report": {"type": "end"}})
        await car.event("run.finished", run_id="r1")
        await car.send({"id": "d2", "type": "delete_session", "session": "s1", "confirm": True})
        assert (await car.answer("d2"))["answer"]["result"] == "ok"
        await car.send({"id": "q", "type": "query", "what": "session", "session": "s1"})
        assert (await car.answer("q"))["status"] == 404
        # A reply that says approved: false (and the old approve) on stdio too.
        await car.send({"id": 3, "type": "start_run", "run_id": "r3", "session": "s3", "directory": "/p/a"})
        await car.event("run.started", run_id="r3")
        for corr, spelling in (("p1", "approved"), ("p2", "approve")):
            await car.send(
                {"id": corr, "type": "report", "run_id": "r3", "report": {"type": "ask", "title": corr}}
            )
            asked = (await car.answer(corr))["answer"]["ask_id"]
            reply = {
                "id": f"{corr}r",
                "type": "reply_permission",
                "ask_id": asked,
                spelling: False,
                "message": "no",
            }
            await car.send(reply)
            assert (await car.answer(f"{corr}r"))["status"] == 200
            notice = await car.event("external.answer", ask_id=asked)
            assert (notice["approved"], notice["message"]) == (False, "no")
        assert car.proc.stdin is not None
        car.proc.stdin.close()
        while await car.read() is not None:
            pass

    assert session(scenario, "--directory", "/p/a") == 0


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_a_foreign_client_stops_and_deletes_a_session_with_curl() -> None:
    with served() as srv:

        def curl(method: str, path: str, body: str | None = None) -> tuple[int, dict[str, Any]]:
            args = ["curl", "-s", "-m", "10", "-o", "-", "-w", "\n%{http_code}", "-X", method]
            args += ["-H", f"Authorization: Bearer {srv.server.token}"]
            if body is not None:
                args += ["-H", "Content-Type: application/json", "--data", body]
            done = subprocess.run(
                [*args, srv.url + path], capture_output=True, text=True, timeout=20, check=True
            )
            text, _, status = done.stdout.rpartition("\n")
            return int(status), json.loads(text)

        assert curl("POST", "/runs", json.dumps({"run_id": "r1", **START}))[0] == 201
        status, busy = curl("DELETE", "/sessions/s1")
        assert (status, busy["code"]) == (409, "session_busy")
        status, stopped = curl("POST", "/sessions/s1/cancel", '{"grace_ms": 0}')
        assert (status, stopped["interrupted_runs"]) == (200, ["r1"])
        status, deleted = curl("DELETE", "/sessions/s1?confirm=true")
        assert (status, deleted["result"]) == (200, "ok")
