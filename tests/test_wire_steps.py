"""An external run's step names the call it serves, as an in-process step does: ``run.step.started`` and
``run.step.finished`` carry the report's ``tool`` and ``call_id``."""

from __future__ import annotations

import asyncio

from wire_support import Served, of_type, served, sse


def test_a_step_report_names_its_call_and_its_events_carry_it() -> None:
    async def scenario(srv: Served) -> None:
        async with srv.client() as client, sse(client, "/events?after=0") as events:
            assert (
                await client.post("/runs", json={"run_id": "r1", "session": "s1", "directory": "/w/a"})
            ).status_code == 201
            await events.until(of_type("run.started", run_id="r1"))
            part = {"type": "part", "tool": "bash", "state": "pending", "call_id": "c1"}
            assert (await client.post("/runs/r1/reports", json=part)).status_code == 200
            step = {"type": "step", "kind": "tool_exec", "step": "exec-1", "tool": "bash", "call_id": "c1"}
            assert (await client.post("/runs/r1/reports", json=step)).status_code == 200
            started = await events.until(of_type("run.step.started", run_id="r1"))
            assert (started.data["tool"], started.data["call_id"], started.data["step"]) == (
                "bash",
                "c1",
                "exec-1",
            )
            done = await client.post("/runs/r1/reports", json={**step, "finished": True})
            assert done.status_code == 200
            finished = await events.until(of_type("run.step.finished", run_id="r1"))
            assert (finished.data["tool"], finished.data["call_id"]) == ("bash", "c1")
            plain = await client.post("/runs/r1/reports", json={"type": "step", "kind": "model"})
            assert plain.status_code == 200
            model = await events.until(of_type("run.step.started", run_id="r1", kind="model"))
            assert (model.data["tool"], model.data["call_id"]) == (None, None)

    with served() as srv:
        asyncio.run(asyncio.wait_for(scenario(srv), 30))
