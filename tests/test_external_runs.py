"""Runs owned by the client: reports, interrupts as events, the lease rule, shutdown."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from wire_support import Served, SseReader, end_run, of_type, report, run_external, sse, start_queued
from wire_support import run_served as run
from wire_support import start_external as start

from run_supervisor.actors import InvalidRequest, Supervisor
from run_supervisor.actors._errors import raise_for_rejection
from run_supervisor.actors.hosts import EventHub
from run_supervisor.protocol import CancelRun, InterruptReason

RELOAD_NOW = {"do": "reload", "mode": "user_confirmed_interrupt", "origin": "ui.reload", "directory": "/w/a"}
"""A reload of /w/a the user confirmed: it interrupts the runs there."""


def test_a_client_that_vanishes_mid_run_is_interrupted_with_reason_timeout_after_its_lease() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        await report(client, "r1", type="part", tool="bash", state="pending")
        await report(client, "r1", type="part", tool="bash", state="prepared")
        # ...and the client is gone: nothing more is reported.
        notice = await events.until(of_type("external.interrupt", run_id="r1"))
        assert (notice.data["reason"], notice.data["origin"]) == ("timeout", "lease")
        finished = await events.until(of_type("run.finished", run_id="r1"))
        assert (finished.data["outcome"], finished.data["reason"]) == ("interrupted", "timeout")
        assert finished.data["phase"] == "prepared"
        assert finished.data["parts"][0]["state"] == "interrupted"
        await events.until(of_type("session.status", session="s1", status="idle"))
        late = await report(client, "r1", type="end")
        assert late.status_code == 409 and late.json()["code"] == "run_finished"

    run_external(scenario, lease_ms=300)


def test_heartbeats_keep_a_quiet_run_alive_past_its_lease() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + 2.5  # two and a half leases
        while loop.time() < until:
            assert (await report(client, "r1", type="heartbeat")).status_code == 200
            await asyncio.sleep(0.05)  # the client's own pace, not a synchronisation
        finished = await end_run(client, events)
        assert finished.data["outcome"] == "completed"

    # The lease is twenty of the client's beats: only a stall of most of a second between two beats
    # (not a loaded machine's scheduling) could let it lapse.
    run_external(scenario, lease_ms=1000)


def test_an_interrupted_client_is_told_why_and_its_end_finishes_the_run_with_that_reason() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        await report(client, "r1", type="step", kind="model")
        close = await client.post("/close", json=RELOAD_NOW)
        notice = await events.until(of_type("external.interrupt", run_id="r1"))
        assert notice.data["reason"] == "lifecycle_interrupt"
        assert notice.data["origin"] == "ui.reload"
        assert notice.data["action_id"] == close.json()["action_id"]
        refused = await report(client, "r1", type="step", kind="model", step="model-2")
        assert refused.status_code == 409 and refused.json()["code"] == "already_interrupting"
        finished = await end_run(client, events)
        assert finished.data["reason"] == "lifecycle_interrupt"

    run_external(scenario)


def test_a_permission_ask_is_answered_through_an_event_and_a_client_error_fails_the_run() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        await report(client, "r1", type="part", tool="bash", state="pending", call_id="c1")
        asked = await report(client, "r1", type="ask", tool="bash", call_id="c1", command="rm -rf build")
        assert asked.status_code == 200, asked.text
        ask_id = asked.json()["ask_id"]
        requested = await events.until(of_type("ask.requested", ask_id=ask_id))
        assert requested.data["call_id"] == "c1" and requested.data["payload"]["command"] == "rm -rf build"
        assert [a["ask_id"] for a in (await client.get("/asks", params={"run_id": "r1"})).json()] == [ask_id]
        answer = await client.post(
            f"/asks/{ask_id}/permission", json={"approve": False, "message": "not there"}
        )
        assert answer.status_code == 200, answer.text
        relayed = await events.until(of_type("external.answer", run_id="r1"))
        assert (relayed.data["ask_id"], relayed.data["approved"], relayed.data["message"]) == (
            ask_id,
            False,
            "not there",
        )
        assert (await client.get("/asks")).json() == []
        late = await client.post(f"/asks/{ask_id}/permission", json={"approve": True})
        assert late.status_code in (404, 409), late.text
        assert (await report(client, "r1", type="end", error="model quota")).status_code == 200
        finished = await events.until(of_type("run.finished", run_id="r1"))
        assert (finished.data["outcome"], finished.data["error"]) == ("failed", "model quota")
        bad = await report(client, "r1", type="nonsense")
        assert bad.status_code == 422 and "nonsense" in bad.json()["error"]

    run_external(scenario)


def test_a_form_with_questions_is_answered_by_its_ask_id() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        asked = await report(client, "r1", type="ask", form=True, title="Which branch?", questions=["name?"])
        ask_id = asked.json()["ask_id"]
        assert ask_id, asked.text  # a rejected report names its code here, not as a silent wait below
        await events.until(of_type("ask.requested", ask_id=ask_id))
        assert (await client.post(f"/asks/{ask_id}/form", json={"answer": "main"})).status_code == 200
        relayed = await events.until(of_type("external.answer", run_id="r1"))
        assert (relayed.data["form"], relayed.data["answer"]) == (True, "main")
        await report(client, "r1", type="end")
        assert (await events.until(of_type("run.finished", run_id="r1"))).data["outcome"] == "completed"

    run_external(scenario)


def test_a_shutdown_with_external_runs_that_ignore_interrupts_completes_within_its_grace() -> None:
    async def scenario(client: httpx.AsyncClient, events: SseReader) -> None:
        await start(client, "r2", "s2", lease_ms=60_000)
        await report(client, "r2", type="part", tool="bash", state="pending")
        began = time.monotonic()
        answer = await client.post("/shutdown", json={"grace_ms": 300})
        assert answer.json()["result"] == "forced"
        await events.until(of_type("external.interrupt", run_id="r1"))
        done = await events.until(of_type("lifecycle.completed", action_id=answer.json()["action_id"]))
        assert sorted(done.data["abandoned_runs"]) == ["r1", "r2"]
        assert time.monotonic() - began < 10.0  # 300 ms of grace; generous for a loaded machine

    run_external(scenario, lease_ms=60_000)


def test_reports_to_a_queued_run_are_kept_and_applied_when_it_starts() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            await start_queued(client, events)
            assert (await report(client, "r2", type="step", kind="model", step="early")).status_code == 200
            await report(client, "r1", type="end")
            step = await events.until(of_type("run.step.started", run_id="r2"))
            assert step.data["step"] == "early"

    run(scenario)


def test_a_cancel_says_timeout_only_for_a_watchdog_and_no_other_reason(supervisor: Supervisor) -> None:
    outcome = supervisor.submit(CancelRun(run_id="x", reason=InterruptReason.SHUTDOWN)).result(timeout=5)
    assert outcome.code is not None and outcome.code.value == "invalid_request"
    assert "user_cancel or timeout" in (outcome.error or "")
    with pytest.raises(InvalidRequest):
        raise_for_rejection(outcome)


def test_a_listener_that_falls_behind_its_bound_is_cut_off_after_what_it_holds(
    supervisor: Supervisor,
) -> None:
    hub = EventHub(supervisor, capacity=100)

    async def scenario() -> None:
        _, _, listener = hub.listen(None, loop=asyncio.get_running_loop(), bound=2)
        await asyncio.to_thread(supervisor.load, "/x/1", "/x/2", "/x/3")
        while not listener.overflowed:  # wake on each delivery, bounded
            await asyncio.wait_for(listener.ready.wait(), 5)
            listener.ready.clear()
        held = await listener.next_batch()
        assert [item.type for item in held] == ["instance.started", "instance.started"]
        assert await listener.next_batch() == []  # the stream ends; the client resumes by its last id
        # The buffer has them all, and each load's ready: load() returns after it.
        assert [item.type for item in hub.items()] == ["instance.started"] * 3 + ["instance.ready"] * 3

    asyncio.run(asyncio.wait_for(scenario(), 20))
    supervisor.shutdown(grace_ms=100)
    hub.join(5)
